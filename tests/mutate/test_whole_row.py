"""The ``whole_row`` edit: the passes of a row reduction read the row once when it fits in one block, and keep
their loops when it does not. Run under the Triton interpreter against the suite's own problems, at rows that
fit one block and rows longer than the largest block; a broken fast path is caught; kernels where the straight
line would not compute what the loops do are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksmith_mutate.edits import possible_edits
from ksmith_mutate.whole_row import MAX_BLOCK

from .conftest import KernelChecker, seed_source

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"


def _whole_row(source: str):
    return [e for e in possible_edits(source, ("whole_row",)) if e.kind == "whole_row"]


def _seed(group: str, name: str) -> str:
    return (PROBLEMS / group / f"{name}.seed.py").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "group, name, passes, sizes",
    [
        ("normalization", "rmsnorm", 2, {"batch_size": 3, "hidden": 1000}),
        ("normalization", "rmsnorm", 2, {"batch_size": 2, "hidden": MAX_BLOCK + 808}),  # longer than a block
        ("normalization", "layernorm", 3, {"batch_size": 3, "hidden": 1500}),
        ("reduction", "l2_norm", 2, {"batch_size": 3, "dim": 700}),
        ("softmax", "online_softmax", 2, {"batch_size": 3, "vocab_size": 3000}),
    ],
)
def test_passes_read_the_row_once_and_compute_the_same(tmp_path, group, name, passes, sizes):
    checker = KernelChecker(name, tmp_path, PROBLEMS / group)
    for key, value in sizes.items():
        assert hasattr(checker.problem, key)
        setattr(checker.problem, key, value)
    seed = _seed(group, name)
    (edit,) = _whole_row(seed)
    assert edit.detail == {"direction": "up", "loops": passes}
    assert "if (n_cols > 0) & (n_cols <= BLOCK_SIZE):" in edit.source
    assert "triton.next_power_of_2(n_cols)), 8192)" in edit.source
    assert checker.max_error(edit.source) < 1e-5
    assert not _whole_row(edit.source), "an edited kernel is not offered again"


def test_inductors_looped_reduction_reads_its_row_once(tmp_path):
    """Inductor's own looped reduction (an L1 norm: the sum of |x|, then x divided by it) gets the edit too."""
    checker = KernelChecker("l1norm_looped", tmp_path)
    (edit,) = _whole_row(seed_source("l1norm_looped"))
    assert "R0_BLOCK=min(max(32, triton.next_power_of_2(cols)), 8192)" in edit.source
    assert checker.max_error(edit.source) < 1e-5
    checker.problem.dim = MAX_BLOCK + 5  # longer than the largest block: the loops, with larger blocks
    assert checker.max_error(edit.source) < 1e-5


def test_a_broken_fast_path_is_caught(tmp_path):
    """The check can fail: a straight-line branch whose output pass starts one element late is wrong."""
    checker = KernelChecker("rmsnorm", tmp_path, PROBLEMS / "normalization")
    (edit,) = _whole_row(_seed("normalization", "rmsnorm"))
    second_pass = (
        "        start = 0\n        cols = start + tl.arange(0, BLOCK_SIZE)\n        mask = cols < n_cols"
    )
    broken = edit.source.replace(second_pass, second_pass.replace("start = 0", "start = 1"), 1)
    assert broken != edit.source
    assert not checker.max_error(broken) < 1e-3


KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, OTHER: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    total = tl.sum(acc, axis=0)
    for start in range(0, n_cols, {STEP}):
        cols = start + tl.arange(0, BLOCK)
        {BODY}
    {AFTER}


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _k[(x.shape[0],)](x, out, x.shape[1], BLOCK={BLOCK}, OTHER=64)
        return out
"""

STORE = "tl.store(out_ptr + row * n_cols + cols, total + 0 * cols, mask=cols < n_cols)"


def _kernel(
    step: str = "BLOCK", body: str = STORE, after: str = "pass", block: str = "1024", imports: bool = True
):
    source = KERNEL.format(STEP=step, BODY=body, AFTER=after, BLOCK=block)
    return source if imports else source.replace("import triton\n", "", 1)


def test_the_minimal_kernel_is_offered():
    (edit,) = _whole_row(_kernel())
    assert edit.detail["loops"] == 2


@pytest.mark.parametrize(
    "why, source",
    [
        ("passes step differently", _kernel(step="OTHER")),
        (
            "a loop-local name is read after the loops",
            _kernel(body="y = total + 0 * cols\n        " + STORE, after="z = y"),
        ),
        ("the loop variable is assigned in the body", _kernel(body="start = start + 1\n        " + STORE)),
        ("a nested control statement", _kernel(body="if total > 0:\n            " + STORE)),
        ("a break", _kernel(body="break")),
        ("the block is not a literal at the launch", _kernel(block="max(1024, x.shape[1])")),
        ("the module does not import triton", _kernel(imports=False)),
        (
            "a literal row longer than the largest block",
            _kernel().replace("x, out, x.shape[1],", "x, out, 65535,"),
        ),
        (
            "the grid reads the block",
            _kernel().replace("_k[(x.shape[0],)]", "_k[lambda meta: (x.shape[0] * meta['BLOCK'] // 1024,)]"),
        ),
    ],
)
def test_kernels_the_straight_line_would_change_are_left_alone(why, source):
    assert not _whole_row(source), why
