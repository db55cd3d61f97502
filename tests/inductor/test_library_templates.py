"""ksmith's Triton convolution and attention, for the calls Inductor leaves to a library: the kernels against
ATen (real Triton, interpreter on CPU), and seeds that use them judged by the real evaluator."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from ksmith_core.engine import evaluate
from ksmith_core.loading import check_candidate_source, load_problem
from ksmith_core.model import Candidate, EvalOptions, Status
from ksmith_inductor.attention_template import attention_text
from ksmith_inductor.conv_template import conv_text
from ksmith_inductor.seeding import InductorSeedError, seed_from_inductor

SUITE = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"
interpreted = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="runs Triton kernels on CPU tensors (TRITON_INTERPRET=1)",
)


def template_module(text: str, directory: Path, name: str) -> ModuleType:
    """Import a template's kernel and helper from a file (the Triton interpreter reads source from disk)."""
    path = directory / f"{name}.py"
    path.write_text("import math\nimport torch\nimport triton\nimport triton.language as tl\n\n\n" + text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def conv(tmp_path_factory) -> object:
    helper, text = conv_text(0)
    return getattr(template_module(text, tmp_path_factory.mktemp("conv"), "ksmith_conv_template"), helper)


@pytest.fixture(scope="module")
def attention(tmp_path_factory) -> object:
    helper, text = attention_text(0, "_scaled_dot_product_flash_attention")
    return getattr(template_module(text, tmp_path_factory.mktemp("attn"), "ksmith_attn_template"), helper)


# (rank, transposed, in channels, out channels, kernel, stride, padding, dilation, groups, output padding, bias)
CONV_CASES = {
    "1d": (1, False, 4, 6, 3, 1, 0, 1, 1, 0, True),
    "1d-depthwise-dilated-strided": (1, False, 4, 4, 3, 2, 1, 2, 4, 0, False),
    "2d-asymmetric": (2, False, 3, 5, (3, 2), (2, 1), (1, 0), (1, 2), 1, 0, True),
    "3d-grouped": (3, False, 4, 6, (3, 2, 1), (1, 2, 1), (1, 0, 0), (2, 1, 1), 2, 0, False),
    "1d-transposed-grouped": (1, True, 4, 6, 3, 2, 1, 1, 2, 1, True),
    "2d-transposed-asymmetric": (2, True, 3, 5, (3, 2), (2, 3), (1, 0), (2, 1), 1, (1, 2), False),
    "3d-transposed-depthwise": (3, True, 4, 4, (2, 3, 3), (2, 1, 2), (0, 1, 1), 1, 4, (1, 0, 1), True),
}


@interpreted
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_template_matches_aten_convolution(case: str, conv) -> None:
    nd, transposed, c_in, c_out, kernel, stride, padding, dilation, groups, output_padding, bias = CONV_CASES[
        case
    ]

    def per_dim(value):
        return tuple(value) if isinstance(value, tuple) else (value,) * nd

    torch.manual_seed(0)
    x = torch.randn(2, c_in, *{1: (11,), 2: (9, 10), 3: (5, 6, 7)}[nd])
    w_shape = (c_in, c_out // groups) if transposed else (c_out, c_in // groups)
    w = torch.randn(*w_shape, *per_dim(kernel))
    b = torch.randn(c_out) if bias else None
    args = (per_dim(stride), per_dim(padding), per_dim(dilation), transposed, per_dim(output_padding), groups)
    expected = torch.ops.aten.convolution(x, w, b, *args)
    torch.testing.assert_close(conv(x, w, b, *args), expected, atol=1e-4, rtol=1e-4)
    # Any strides in and out: a channels-last input written into a channels-last output buffer.
    if nd == 2:
        out = torch.empty_like(expected, memory_format=torch.channels_last)
        conv(x.contiguous(memory_format=torch.channels_last), w, b, *args, out=out)
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


# (query shape, key shape, value features, causal, scale, dtype)
ATTENTION_CASES = {
    "fp32-cross-lengths": ((2, 3, 37, 64), (2, 3, 50, 64), 64, False, None, torch.float32),
    "fp32-causal-scaled": ((1, 2, 40, 64), (1, 2, 40, 64), 64, True, 0.3, torch.float32),
    "3d-value-features-differ": ((2, 33, 48), (2, 45, 48), 80, False, None, torch.float32),
    "head-larger-than-a-tile": ((1, 2, 20, 300), (1, 2, 20, 300), 300, True, None, torch.float32),
    "fp16-causal": ((1, 2, 48, 32), (1, 2, 48, 32), 32, True, None, torch.float16),
}


@interpreted
@pytest.mark.parametrize("case", sorted(ATTENTION_CASES))
def test_attention_template_matches_sdpa(case: str, attention) -> None:
    q_shape, k_shape, value_features, causal, scale, dtype = ATTENTION_CASES[case]
    torch.manual_seed(0)
    q, k = torch.randn(q_shape, dtype=dtype), torch.randn(k_shape, dtype=dtype)
    v = torch.randn(*k_shape[:-1], value_features, dtype=dtype)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=scale)
    tolerance = 2e-3 if dtype == torch.float16 else 1e-5
    (out,) = attention(q, k, v, causal, scale)
    torch.testing.assert_close(out.float(), expected, atol=tolerance, rtol=tolerance)
    if q.dim() == 4:  # written into the (batch, seq, heads, features) layout ATen's flash kernel returns
        out = torch.empty(expected.transpose(1, 2).shape, dtype=dtype).transpose(1, 2)
        attention(q, k, v, causal, scale, out=out)
        torch.testing.assert_close(out.float(), expected, atol=tolerance, rtol=tolerance)


@interpreted
def test_attention_template_refuses_grouped_query_attention(attention) -> None:
    q, k = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match="heads differ"):
        attention(q, k, k)


CONV_PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c_in, c_out, groups):
        super().__init__()
        self.up = nn.ConvTranspose3d(c_in, c_out, 3, stride=2, padding=1, output_padding=1, groups=groups)
        self.conv = nn.Conv1d(c_out, c_out, 3, padding=2, dilation=2, bias=False)

    def forward(self, x):
        y = torch.clamp(self.up(x), min=-0.5) / 2.0
        return y, self.conv(y.flatten(2)[..., :40])


def get_inputs():
    return [torch.randn(2, 4, 3, 4, 5)]


def get_init_inputs():
    return [4, 6, 2]
"""


def test_convolution_problems_seed_with_ksmith_conv_and_pass_the_evaluator(tmp_path: Path) -> None:
    path = tmp_path / "conv_transpose3d_clamp.py"
    path.write_text(CONV_PROBLEM, encoding="utf-8")
    problem = load_problem(path)
    source = seed_from_inductor(problem, "cpu", small=True)
    check_candidate_source(source)
    assert "extern_kernels" not in source
    assert "_conv_0_kernel[grid](" in source and "_conv_1_kernel[grid](" in source  # one kernel per call site
    assert 'input_precision="ieee"' in source  # fp32 stays fp32
    verdict = evaluate(
        problem, Candidate.from_source(source), EvalOptions(device="cpu", correctness_trials=2)
    )
    assert verdict.status is Status.OK, (verdict.reasons, verdict.error)


@pytest.mark.parametrize("relative", ["pooling/conv2d_bias_relu.py", "attention/attention.py"])
def test_suite_convolution_and_attention_seed_and_pass_the_evaluator(relative: str) -> None:
    problem = load_problem(SUITE / relative)
    source = seed_from_inductor(problem, "cpu", small=True)
    check_candidate_source(source)
    assert "extern_kernels" not in source and "torch.ops.aten" not in source
    verdict = evaluate(
        problem, Candidate.from_source(source), EvalOptions(device="cpu", correctness_trials=2)
    )
    assert verdict.status is Status.OK, (verdict.reasons, verdict.error)


def test_attention_with_a_mask_is_refused_in_one_line(data_dir: Path) -> None:
    with pytest.raises(InductorSeedError) as caught:
        seed_from_inductor(load_problem(data_dir / "masked_attention.py"), "cpu", small=True)
    message = str(caught.value)
    assert "with an attention mask or bias" in message and "\n" not in message


@pytest.mark.gpu
@pytest.mark.parametrize("relative", ["pooling/conv2d_bias_relu.py", "attention/attention.py"])
def test_cuda_convolution_and_attention_seeds_pass_the_evaluator(relative: str) -> None:
    problem = load_problem(SUITE / relative)
    source = seed_from_inductor(problem, "cuda", small=False)
    assert "extern_kernels" not in source and "torch.ops.aten" not in source
    verdict = evaluate(problem, Candidate.from_source(source), EvalOptions(device="cuda"))
    assert verdict.status is Status.OK, (verdict.reasons, source)
