"""``ksmith seed --from inductor`` through the CLI: the seeder runs in a child process."""

from __future__ import annotations

import subprocess

import pytest


def test_seed_from_inductor_writes_a_checked_seed(ksmith_cmd, tmp_path):
    out = tmp_path / "gelu.py"
    proc = subprocess.run(
        [*ksmith_cmd, "seed", "gelu_tanh", "--from", "inductor", "-o", str(out), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    assert "class ModelNew" in out.read_text() and "XBLOCK=" in out.read_text()
    assert "check: ok" in proc.stderr


def test_a_library_matmul_is_seeded_with_ksmiths_gemm(ksmith_cmd, tmp_path):
    out = tmp_path / "matmul.py"
    proc = subprocess.run(
        [*ksmith_cmd, "seed", "matmul", "--from", "inductor", "-o", str(out), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    assert "_gemm_0_kernel[grid](" in out.read_text() and "check: ok" in proc.stderr


@pytest.mark.parametrize("problem", ["conv2d_bias_relu", "attention"])
def test_problems_inductor_hands_to_a_library_are_refused_in_one_line(ksmith_cmd, tmp_path, problem):
    proc = subprocess.run(
        [*ksmith_cmd, "seed", problem, "--from", "inductor", "-o", str(tmp_path / "x.py"), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ksmith: error: ")
    assert "no seed from inductor for this problem" in lines[0]
    assert not (tmp_path / "x.py").exists()
