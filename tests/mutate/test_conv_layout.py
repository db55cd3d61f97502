"""The ``conv_layout`` edit: a convolution in NCHW order with its bias becomes a bias-free channels-last one,
the layout copies in Triton; an epilogue kernel it recognises is folded into the write back to NCHW, any other
reader gets the NCHW tensor it had. Run under the Triton interpreter against the suite's conv2d_bias_relu and
against problems written here (no convolution bias, a scalar in the epilogue, readers the edit must not fold)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ksmith_mutate.conv_layout import TO_CHANNELS_LAST, TO_NCHW
from ksmith_mutate.edits import possible_edits

from .conftest import KernelChecker, import_file

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"
SEED = (PROBLEMS / "pooling" / "conv2d_bias_relu.seed.py").read_text(encoding="utf-8")
FP16 = 1e-2  # the checker's relative error for a half-precision output


def _conv_layout(source: str):
    return [e for e in possible_edits(source, ("conv_layout",)) if e.kind == "conv_layout"]


def test_the_shipped_seed_gets_a_channels_last_convolution_and_its_epilogue_folded(tmp_path):
    checker = KernelChecker("conv2d_bias_relu", tmp_path, PROBLEMS / "pooling")
    (edit,) = _conv_layout(SEED)
    assert edit.detail == {"direction": "up", "fused": "_bias_relu_kernel"}
    source = edit.source
    assert (
        f"F.conv2d({TO_CHANNELS_LAST}(x), {TO_CHANNELS_LAST}(self.conv.weight), None, padding=self.conv.padding)"
        in source
    )
    assert "torch.empty_like(y, memory_format=torch.contiguous_format)" in source
    assert "def _bias_relu_kernel(" not in source, "the old epilogue kernel, launched once, is replaced"
    assert "_bias_relu_kernel_channels_last[" in source and TO_NCHW not in source
    assert "HAS_CONV_BIAS=self.conv.bias is not None" in source
    assert checker.max_error(source) < FP16
    # Also at sizes that fill no tile: channels and positions that do not divide 64.
    for key, value in {
        "batch_size": 3,
        "in_channels": 5,
        "out_channels": 70,
        "height": 9,
        "width": 13,
    }.items():
        setattr(checker.problem, key, value)
    assert checker.max_error(source) < FP16
    assert not _conv_layout(source), "an edited convolution is not offered again"


def test_the_convolution_really_runs_channels_last_and_without_its_bias(tmp_path, monkeypatch):
    """What the edit is for: cuDNN gets channels-last tensors and no bias (the bias is the epilogue's)."""
    (edit,) = _conv_layout(SEED)
    path = tmp_path / "edited.py"
    path.write_text(edit.source, encoding="utf-8")
    module = import_file(path, "_conv_layout_edited")
    seen = []
    real = F.conv2d

    def spy(x, weight, bias=None, *args, **kwargs):
        seen.append(
            (
                x.is_contiguous(memory_format=torch.channels_last),
                weight.is_contiguous(memory_format=torch.channels_last),
                bias,
            )
        )
        return real(x, weight, bias, *args, **kwargs)

    monkeypatch.setattr(module.F, "conv2d", spy)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter runs Triton on the CPU
    model = module.ModelNew(4, 6, 3).to(device)
    with torch.no_grad():
        out = model(torch.randn(2, 4, 10, 12, dtype=torch.float16, device=device))
    assert seen == [(True, True, None)]
    assert out.is_contiguous(), "the output is NCHW, as the reference's is"


def test_a_convolution_module_called_in_forward_is_rewritten_alike(tmp_path):
    """``y = self.conv(x)``, as most hand-written candidates call it: the same program as for ``F.conv2d``."""
    checker = KernelChecker("conv2d_bias_relu", tmp_path, PROBLEMS / "pooling")
    called = SEED.replace(
        "F.conv2d(x, self.conv.weight, self.conv.bias, padding=self.conv.padding)", "self.conv(x)"
    )
    assert called != SEED and checker.max_error(called) < FP16
    (edit,) = _conv_layout(called)
    assert edit.detail["fused"] == "_bias_relu_kernel"
    assert (
        f"torch.nn.functional.conv2d({TO_CHANNELS_LAST}(x), {TO_CHANNELS_LAST}(self.conv.weight), None, "
        "self.conv.stride, self.conv.padding, self.conv.dilation, self.conv.groups)" in edit.source
    )
    assert checker.max_error(edit.source) < FP16
    # A padding other than zeros is not what a plain conv2d call computes: left alone.
    reflect = called.replace("padding=kernel_size // 2,", 'padding=kernel_size // 2, padding_mode="reflect",')
    assert reflect != called and not _conv_layout(reflect)


def test_a_wrong_write_order_is_caught(tmp_path):
    """The check can fail: the folded epilogue writing in channels-last order instead of NCHW is wrong."""
    checker = KernelChecker("conv2d_bias_relu", tmp_path, PROBLEMS / "pooling")
    (edit,) = _conv_layout(SEED)
    nchw = "out_ptr + sample * n_channels * hw_size + chan[:, None] * hw_size + pos[None, :]"
    broken = edit.source.replace(
        nchw, "out_ptr + sample * n_channels * hw_size + pos[None, :] * n_channels + chan[:, None]"
    )
    assert broken != edit.source
    assert not checker.max_error(broken) < FP16


PROBLEM = """
import torch
import torch.nn as nn

batch_size, in_channels, out_channels, height, width = 2, 3, 5, 7, 6
KSMITH_SMALL = {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 7, "width": 6}
KSMITH_ALLOWED_OPS = ["aten.convolution"]


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False)
        self.scale = nn.Parameter(torch.randn(out_channels, 1, 1))

    def forward(self, x):
        return torch.sigmoid(self.conv(x) * self.scale * 0.5)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
"""

CANDIDATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _scale_sigmoid(y_ptr, scale_ptr, out_ptr, channels, hw, alpha, BLOCK: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < hw
    y = tl.load(y_ptr + plane * hw + offs, mask=mask)
    scale = tl.load(scale_ptr + plane % channels)
    tl.store(out_ptr + plane * hw + offs, tl.sigmoid(y * scale * alpha), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False)
        self.scale = nn.Parameter(torch.randn(out_channels, 1, 1))

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias, stride=self.conv.stride, padding=1)
        out = torch.empty_like(y)
        n, c, h, w = y.shape
        READER
        return out
"""
LAUNCH = "_scale_sigmoid[(n * c, triton.cdiv(h * w, 64))](y, self.scale, out, c, h * w, 0.5, BLOCK=64)"


def _problem(tmp_path: Path, launch: str) -> tuple[KernelChecker, str]:
    (tmp_path / "scaled_conv.py").write_text(PROBLEM, encoding="utf-8")
    return KernelChecker("scaled_conv", tmp_path, tmp_path), CANDIDATE.replace("READER", launch)


def test_no_convolution_bias_a_stride_and_a_scalar_in_the_epilogue(tmp_path):
    checker, source = _problem(tmp_path, LAUNCH)
    assert checker.max_error(source) < 1e-5
    (edit,) = _conv_layout(source)
    assert edit.detail["fused"] == "_scale_sigmoid"
    assert (
        "_scale_sigmoid_channels_last(y_ptr, out_ptr, conv_bias_ptr, scale_ptr, alpha, n_channels"
        in edit.source
    )
    assert "stride=self.conv.stride" in edit.source
    assert checker.max_error(edit.source) < 1e-5


FLAT = """
@triton.jit
def _flat_epilogue(y_ptr, scale_ptr, out_ptr, n_elements, hw, channels, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    c = (offs // hw) % channels
    y = tl.load(y_ptr + offs, mask=mask)
    s = tl.load(scale_ptr + c, mask=mask)
    tl.store(out_ptr + offs, tl.sigmoid(y * s * alpha), mask=mask)


class ModelNew"""


def test_an_epilogue_over_all_elements_at_once_is_folded_too(tmp_path):
    """The way most hand-written epilogues find their channel: ``(offs // hw) % channels`` of a flat index."""
    launch = "_flat_epilogue[(triton.cdiv(y.numel(), 64),)](y, self.scale, out, y.numel(), h * w, c, 0.5, BLOCK=64)"
    checker, source = _problem(tmp_path, launch)
    source = source.replace("\n\nclass ModelNew", FLAT, 1)
    assert checker.max_error(source) < 1e-5
    (edit,) = _conv_layout(source)
    assert edit.detail["fused"] == "_flat_epilogue"
    assert "tl.load(scale_ptr + chan, mask=chan_mask)[:, None]" in edit.source
    assert checker.max_error(edit.source) < 1e-5


@pytest.mark.parametrize(
    "kernel_read, after",
    [
        # The epilogue reads each row of the output backwards: not the index it writes, so not foldable.
        ("y_ptr + plane * hw + (hw - 1 - offs)", ""),
        # The output's values read again after the epilogue (a multiply by one, so still the reference).
        ("y_ptr + plane * hw + offs", "\n        out = out * (y.sum() * 0 + 1)"),
    ],
)
def test_readers_it_cannot_fold_get_the_nchw_tensor_back(tmp_path, kernel_read, after):
    checker, source = _problem(tmp_path, LAUNCH + after)
    source = source.replace("y_ptr + plane * hw + offs, mask", f"{kernel_read}, mask")
    (edit,) = _conv_layout(source)
    assert edit.detail["fused"] is None
    assert (
        f"y = {TO_NCHW}(F.conv2d({TO_CHANNELS_LAST}(x), {TO_CHANNELS_LAST}(self.conv.weight), None"
        in edit.source
    )
    _, before = checker._run(source)
    _, edited = checker._run(edit.source)
    assert torch.allclose(before, edited, atol=1e-5), "the edited program computes what the parent did"


def test_a_module_without_triton_language_or_a_conv_call_is_left_alone():
    assert not _conv_layout(SEED.replace("import triton.language as tl\n", ""))
    assert not _conv_layout(SEED.replace("F.conv2d(", "F.conv1d("))


KERNEL_VALUE = "tl.sigmoid(y * scale * alpha)"
Y_LOAD = "y = tl.load(y_ptr + plane * hw + offs, mask=mask)"


@pytest.mark.parametrize(
    "old, new",
    [
        # A reduction in the epilogue would run over the new tile's channel axis.
        (KERNEL_VALUE, "tl.sigmoid(y * scale * alpha) - tl.sum(y, axis=0) * 0.0"),
        # The output read under a narrower mask, with `other`, than the store's: other values on those lanes.
        (Y_LOAD, "y = tl.load(y_ptr + plane * hw + offs, mask=mask & (offs > 0), other=0.0)"),
        # The modulus is the output's height, not its channels: a per-row vector, not a per-channel one.
        ("out, c, h * w, 0.5", "out, h, h * w, 0.5"),
        # The output's values read inside the launch (an argument computed from them).
        ("h * w, 0.5, BLOCK", "h * w, float(y.abs().max()) * 0.0 + 0.5, BLOCK"),
        # An effect besides the one store.
        ("    mask = offs < hw\n", "    mask = offs < hw\n    seen = tl.atomic_add(y_ptr, 0.0)\n"),
    ],
)
def test_epilogues_it_must_not_fold(tmp_path, old, new):
    _, source = _problem(tmp_path, LAUNCH)
    changed = source.replace(old, new, 1)
    assert changed != source
    (edit,) = _conv_layout(changed)
    assert edit.detail["fused"] is None


def test_a_bias_rebound_before_the_launch_is_not_folded(tmp_path):
    """The folded epilogue reads the bias at the launch: a bias bound anew in between is not the conv's."""
    _, source = _problem(tmp_path, LAUNCH)
    source = source.replace(
        "y = F.conv2d(x, self.conv.weight, self.conv.bias,",
        "bias = self.conv.bias\n        y = F.conv2d(x, self.conv.weight, bias,",
    )
    assert [e.detail["fused"] for e in _conv_layout(source)] == ["_scale_sigmoid"]
    rebound = source.replace("n, c, h, w = y.shape", "n, c, h, w = y.shape\n        bias = None")
    assert [e.detail["fused"] for e in _conv_layout(rebound)] == [None]


def test_a_kernel_named_elsewhere_is_kept_and_odd_layouts_do_not_break_the_edit(tmp_path):
    checker, source = _problem(tmp_path, LAUNCH)
    aliased = source.replace(
        "self.scale = nn.Parameter", "self.epilogue = _scale_sigmoid\n        self.scale = nn.Parameter"
    )
    (edit,) = _conv_layout(aliased)
    assert edit.detail["fused"] == "_scale_sigmoid" and "def _scale_sigmoid(" in edit.source
    assert checker.max_error(edit.source) < 1e-5
    # A term over two lines, and the output pointer's own dtype used in the value: still one valid edit.
    odd = source.replace(Y_LOAD, "y = tl.load(y_ptr + (plane\n        * hw) + offs, mask=mask)").replace(
        KERNEL_VALUE, "tl.sigmoid(y * scale * alpha).to(y_ptr.dtype.element_ty)"
    )
    (edit,) = _conv_layout(odd)
    assert edit.detail["fused"] == "_scale_sigmoid"
    assert checker.max_error(edit.source) < 1e-5


def test_a_padding_mode_given_by_position_or_set_later_is_left_alone(tmp_path):
    _, source = _problem(tmp_path, LAUNCH)
    called = source.replace(
        "F.conv2d(x, self.conv.weight, self.conv.bias, stride=self.conv.stride, padding=1)", "self.conv(x)"
    )
    assert [e.detail["fused"] for e in _conv_layout(called)] == ["_scale_sigmoid"]
    positional = called.replace(
        "nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False)",
        'nn.Conv2d(in_channels, out_channels, 3, 2, 1, 1, 1, False, "reflect")',
    )
    later = called.replace(
        "self.scale = nn.Parameter",
        'self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, padding_mode="circular")\n'
        "        self.scale = nn.Parameter",
    )
    for source in (positional, later):
        assert source != called and not _conv_layout(source)


def test_the_nchw_copy_back_adds_the_convolutions_bias(tmp_path):
    """The path for readers it cannot fold, with a convolution bias: the values the seed computed."""
    checker = KernelChecker("conv2d_bias_relu", tmp_path, PROBLEMS / "pooling")
    unfoldable = SEED.replace(
        "        return out", "        out = out * (y.sum() * 0 + 1)\n        return out"
    )
    assert unfoldable != SEED
    (edit,) = _conv_layout(unfoldable)
    assert edit.detail["fused"] is None and f"{TO_NCHW}(F.conv2d(" in edit.source
    assert "self.conv.bias)" in edit.source
    assert checker.max_error(edit.source) < FP16
