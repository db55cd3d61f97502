"""The ``constexpr_size`` edit: a size the kernel loops to or masks against becomes ``tl.constexpr`` (Triton
compiles once per value, as Inductor compiles per shape). The edited kernel computes the same at sizes that
need masks; parameters a constant cannot stand for are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksmith_mutate.edits import possible_edits

from .conftest import KernelChecker

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"


def _edits(source: str):
    return possible_edits(source, ("constexpr_size",))


@pytest.mark.parametrize(
    "group, name, param, sizes",
    [
        ("reduction", "sum_reduction", "n_cols", {"batch_size": 3, "dim": 1000}),
        ("softmax", "online_softmax", "n_cols", {"batch_size": 3, "vocab_size": 3000}),
        ("elementwise", "geglu", "n_cols", {}),
    ],
)
def test_a_size_becomes_constant_and_the_kernel_computes_the_same(tmp_path, group, name, param, sizes):
    seed = (PROBLEMS / group / f"{name}.seed.py").read_text(encoding="utf-8")
    (edit,) = [e for e in _edits(seed) if e.detail["param"] == param]
    assert f"{param}: tl.constexpr" in edit.source and f"{param}: tl.constexpr" not in seed
    checker = KernelChecker(name, tmp_path, PROBLEMS / group)
    for key, value in sizes.items():
        setattr(checker.problem, key, value)
    assert checker.max_error(edit.source) < 1e-5
    assert not [e for e in _edits(edit.source) if e.detail["param"] == param], (
        "a constant is not offered again"
    )


KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


{DECORATOR}
@triton.jit
def _k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    {BODY}
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _k[(triton.cdiv(x.numel(), 1024),)](x, out, {N})
        return out
"""


def _kernel(body="pass", decorator="", n="x.numel(), BLOCK=1024"):
    return KERNEL.format(BODY=body, DECORATOR=decorator, N=n)


def test_the_minimal_kernel_is_offered():
    assert [e.detail["param"] for e in _edits(_kernel())] == ["n"]


@pytest.mark.parametrize(
    "why, source",
    [
        ("the kernel assigns it", _kernel(body="n = n - 1")),
        ("the kernel uses it as a tensor", _kernel(body="m = n.to(tl.int64)")),
        ("an autotuned kernel", _kernel(decorator="@triton.autotune(configs=[], key=['n'])")),
        ("the launch does not pass it", _kernel(n="BLOCK=1024")),
    ],
)
def test_sizes_a_constant_cannot_stand_for_are_left_alone(why, source):
    assert not _edits(source), why
