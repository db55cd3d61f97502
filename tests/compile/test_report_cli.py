"""``ksmith compile-report MODEL_FILE --library DIR [--json]``."""

from __future__ import annotations

import json
import os

import pytest

from .conftest import DATA, ksmith

pytest.importorskip("transformers")


def env_with_interpreter() -> dict[str, str]:
    return {**os.environ, "TRITON_INTERPRET": "1"}


@pytest.mark.slow
def test_report_lists_each_region_swapped_or_not_with_why(library_dir, tmp_path):
    proc = ksmith(
        "compile-report", DATA / "tiny_llama.py", "--library", library_dir, "--device", "cpu", "--json", "--time",
        env=env_with_interpreter(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    matched = [r for r in report["regions"] if r["entry"]]
    assert [(r["region"].split("@")[0], r["swapped"]) for r in matched] == [
        ("llama_rmsnorm", True), ("llama_rmsnorm", False), ("llama_rmsnorm", False)
    ]  # fmt: skip
    assert matched[0]["reason"].startswith("swapped for kernelsmith::")
    assert all(r["reason"].startswith("would split Inductor's fusion with") for r in matched[1:])
    unmatched = {r["region"]: r for r in report["regions"] if not r["entry"]}
    assert unmatched["fusible:silu+mul@mul_11"] == {
        "region": "fusible:silu+mul@mul_11", "entry": "", "swapped": False, "reason": "no library entry", "graph": 0
    }  # fmt: skip
    assert report["max_abs_diff_vs_eager"] < 1e-5
    timings = report["timings_ms"]
    assert timings["interpreted"] is True and all(
        timings[k] > 0 for k in ("eager", "inductor", "kernelsmith")
    )

    proc = ksmith(
        "compile-report", DATA / "tiny_llama.py", "--library", library_dir, "--device", "cpu",
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert any(line.startswith("kept") and "llama_rmsnorm: not loaded" in line for line in lines)
    assert any("TRITON_INTERPRET" in line for line in lines)
    assert lines[-1].startswith("0 region(s) swapped")
    assert not any(line.startswith("forward ms") for line in lines)  # timings only on a GPU unless asked


@pytest.mark.slow  # a ksmith process each (torch import): seconds
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["nowhere.py", "--library", "."], "nowhere.py: no such model file"),
        ([str(DATA / "llama_rmsnorm.seed.py"), "--library", "."], "defines no Model, get_inputs"),
        (
            [str(DATA / "tiny_llama.py"), "--library", "missing-dir"],
            "--library missing-dir is not a directory",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragment, tmp_path):
    proc = ksmith("compile-report", *args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], proc.stderr
