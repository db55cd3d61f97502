"""``ksmith seed --from inductor`` through the CLI: the seeder runs in a child process."""

from __future__ import annotations

import subprocess


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


MASKED_ATTENTION = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def get_inputs():
    return [torch.randn(1, 2, 16, 32), torch.randn(1, 2, 16, 32), torch.randn(1, 2, 16, 32), torch.randn(16, 16)]


def get_init_inputs():
    return []
"""


def test_a_model_with_no_seed_is_refused_in_one_line(ksmith_cmd, tmp_path):
    problem = tmp_path / "masked_attention.py"
    problem.write_text(MASKED_ATTENTION, encoding="utf-8")
    proc = subprocess.run(
        [
            *ksmith_cmd,
            "seed",
            str(problem),
            "--from",
            "inductor",
            "-o",
            str(tmp_path / "x.py"),
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ksmith: error: ")
    assert (
        "with an attention mask or bias" in lines[0] and "no seed from inductor for this problem" in lines[0]
    )
    assert not (tmp_path / "x.py").exists()


def test_a_library_convolution_is_seeded_with_ksmiths_conv(ksmith_cmd, tmp_path):
    out = tmp_path / "conv.py"
    proc = subprocess.run(
        [*ksmith_cmd, "seed", "conv2d_bias_relu", "--from", "inductor", "-o", str(out), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    assert "_conv_0_kernel[grid](" in out.read_text() and "check: ok" in proc.stderr
