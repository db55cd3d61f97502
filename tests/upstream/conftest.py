"""Fixtures of the upstream tests: the real SGLang and LMDeploy wheels, and the ksmith command line.

The wheels come from ``$KSMITH_UPSTREAM_WHEELS`` (what CI sets) or, when it is unset, from PyPI through
``pip download`` into the user cache. Only when neither works are the tests skipped, with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ksmith_upstream.source import PROJECTS, UpstreamError, UpstreamSource, resolve_source


@pytest.fixture(scope="session")
def upstream() -> dict[str, UpstreamSource]:
    sources = {}
    for name, project in PROJECTS.items():
        try:
            sources[name] = resolve_source(project, None)
        except UpstreamError as exc:
            pytest.skip(f"no {name} wheel: {exc}")
    return sources


@pytest.fixture(scope="session")
def ksmith_exe() -> list[str]:
    """The ksmith command line (as tests/conftest.py's ``ksmith_cmd``, for module-scoped fixtures)."""
    exe = shutil.which("ksmith", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-c", "from ksmith_core.cli import main; main()"]


@pytest.fixture(scope="session")
def ksmith_env() -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1"
    return env


def run_ksmith(ksmith_cmd, *args, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ksmith_cmd, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout
    )


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The single line a refused command prints (the test fails if there is more than one)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ksmith: error: "), lines[0]
    return lines[0]


def git_tree(source: UpstreamSource, dest: Path) -> Path:
    """A git repository with the package laid out as in the upstream repository (``python/sglang/...``)."""
    target = dest / source.project.repo_prefix / source.project.name
    shutil.copytree(source.package_dir, target)
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    return dest


def git_apply(repo: Path, patch: Path, check: bool) -> subprocess.CompletedProcess:
    args = ["git", "-C", str(repo), "apply", *(["--check"] if check else []), str(patch.resolve())]
    return subprocess.run(args, capture_output=True, text=True)


PYTHON = sys.executable


def run_generated_test(test_file: Path, patched: Path, module: str, workdir: Path, cases: int = 3):
    """A generated upstream test on CPU under the interpreter, against the patched module alone, first cases only."""
    from ksmith_upstream.standalone import run_test

    return run_test(test_file, patched, module, workdir, device="cpu", cases=cases)


def recorded_run(run_dir: Path, problem: Path, candidate: Path, correct: bool) -> Path:
    """A run store holding one candidate and the verdict given here, for the refusal paths of ``patch``.

    The happy paths use real ``ksmith evolve`` runs; these only need a run whose best is (or is not) correct.
    """
    from ksmith_core.model import Candidate, Status, TimingStats, Verdict
    from ksmith_core.store import RunStore

    cand = Candidate.from_source(candidate.read_text(encoding="utf-8"))
    timing = TimingStats(median_ms=2.0, mean_ms=2.0, min_ms=2.0, max_ms=2.0, std_ms=0.0, trials=3)
    verdict = Verdict(
        status=Status.OK if correct else Status.INCORRECT,
        correct=correct,
        runtime=timing,
        reference_eager=TimingStats(median_ms=3.0, mean_ms=3.0, min_ms=3.0, max_ms=3.0, std_ms=0.0, trials=3),
        speedup=1.5 if correct else None,
        device="cpu",
        interpreted=True,
    )
    meta = {"problem": problem.stem, "config": {"proposer": "mutate"}, "seed_id": cand.id}
    store = RunStore.create(run_dir, problem.read_text(encoding="utf-8"), meta, {"versions": {}})
    with store:
        store.record_evaluation(cand, verdict)
    return run_dir
