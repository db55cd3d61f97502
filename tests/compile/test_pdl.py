"""The PDL rewrite of an entry's kernel source, and where the backend applies it (CPU: the rewrite itself; the
launches run only on a GPU of compute capability 9.0+, tests/compile/test_inline_gpu.py)."""

from __future__ import annotations

import pytest

from ksmith_compile import backend
from ksmith_compile.pdl import with_pdl

SOURCE = '''"""An entry's kernel file."""

import torch
import triton
import triton.language as tl


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    """Doubles."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(o_ptr + offs, _twice(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128, num_warps=4)
        return out
'''


def test_a_launched_kernel_waits_first_then_lets_the_next_launch_and_is_launched_with_pdl():
    got = with_pdl(SOURCE)
    assert got is not None
    compile(got, "kernel.py", "exec")
    kernel = got.split("def _kernel(", 1)[1].split("class ModelNew", 1)[0]
    lines = [line.strip() for line in kernel.splitlines()[1:] if line.strip()]
    assert lines[:3] == [
        '"""Doubles."""',
        "tl.extra.cuda.gdc_wait()",
        "tl.extra.cuda.gdc_launch_dependents()",
    ]
    helper = got.split("def _twice(", 1)[1].split("@triton.jit", 1)[0]
    assert "gdc" not in helper  # called from a kernel, never launched: nothing to wait for
    assert "BLOCK=128, num_warps=4, launch_pdl=True)" in got
    assert got.count("gdc_wait") == 1


def test_sources_it_leaves_alone():
    assert with_pdl(with_pdl(SOURCE)) is None  # already PDL: its waits are its own
    assert (
        with_pdl(SOURCE.replace("import triton.language as tl", "from triton import language as tl")) is None
    )
    no_launch = SOURCE.split("class ModelNew", 1)[0]
    assert with_pdl(no_launch) is None
    assert with_pdl("def broken(:\n") is None


@pytest.mark.parametrize(
    ("mode", "supported", "option", "wanted"),
    [
        ("reduce-overhead", True, "1", True),
        ("reduce-overhead", False, "1", False),  # a GPU before Hopper, or none
        ("reduce-overhead", True, "", False),  # off unless asked for
        (None, True, "1", False),  # no CUDA graphs: host-bound, and the opaque ops would cost host time
        ("max-autotune-no-cudagraphs", True, "1", False),
        ("max-autotune", True, "1", True),
    ],
)
def test_pdl_applies_only_under_cuda_graphs_on_hopper_and_later(monkeypatch, mode, supported, option, wanted):
    monkeypatch.setattr(backend, "pdl_supported", lambda: supported)
    monkeypatch.delenv("KSMITH_PDL", raising=False)
    assert backend._pdl_wanted({"pdl": option}, mode) is wanted
    monkeypatch.setenv("KSMITH_PDL", option)
    assert backend._pdl_wanted({}, mode) is wanted
