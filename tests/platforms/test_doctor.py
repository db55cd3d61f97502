"""``ksmith doctor`` on this (GPU-less) machine: the toolchain checks, a MetaX check that fails here as it
must, and the Triton conformance cases on the interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def doctor(*args: str) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if k != "KSMITH_PLATFORM"}
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", "from ksmith_core.cli import main; main()", "doctor", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_the_toolchain_checks_run_without_a_gpu():
    code, report = doctor("--backend", "cuda", "--no-conformance")
    found = checks(report)
    assert found["gpu"]["status"] in ("ok", "skip")
    assert report["platform"]["platform"] == "nvidia" or found["gpu"]["status"] == "ok"
    assert {"native compiler", "c++", "ninja"} <= set(found)
    if found["native compiler"]["status"] == "ok":  # nvcc here: its command was run on a tiny kernel
        assert found["native compile"]["status"] == "ok", found["native compile"]
        assert " -x cu " in found["native compile"]["detail"]
    assert code == (0 if report["ok"] else 1)


def test_metax_is_checked_and_fails_where_it_is_absent():
    code, report = doctor("--backend", "maca", "--no-conformance")
    found = checks(report)
    assert report["platform"]["platform"] == "metax" and report["platform"]["verified"] is False
    assert found["vendor builds"]["status"] == "fail" and "+metax" in found["vendor builds"]["detail"]
    assert found["native compiler"]["status"] == "fail" and "mxcc" in found["native compiler"]["detail"]
    assert code == 1 and not report["ok"]


@pytest.mark.slow
def test_the_triton_conformance_set_runs_on_the_interpreter():
    code, report = doctor("--backend", "triton", "--device", "cpu")
    found = checks(report)
    assert found["conformance: triton: ReLU seed"]["status"] == "ok", found
    assert found["conformance: triton: torch in forward"]["status"] == "ok", found
    assert code == 0
