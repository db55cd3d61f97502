"""The ``grid_axes`` edit: a kernel on a two-axis grid gets its axes swapped, in the kernel's program ids and
in every launch's grid, so the programs that run side by side change and what each computes does not. Offered
only where every launch's grid can be rewritten and the programs are independent."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksmith_mutate.edits import possible_edits

from .conftest import KernelChecker

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins/ksmith_problems/problems"


def _swaps(source: str):
    return [e for e in possible_edits(source, ("grid_axes",)) if e.kind == "grid_axes"]


def test_the_geglu_seed_runs_its_column_blocks_side_by_side(tmp_path):
    seed = (PROBLEMS / "elementwise/geglu.seed.py").read_text(encoding="utf-8")
    (edit,) = _swaps(seed)
    assert "row = tl.program_id(1).to(tl.int64)" in edit.source
    assert "cols = tl.program_id(0) * BLOCK_SIZE" in edit.source
    assert 'grid = lambda meta: (triton.cdiv(n_cols, meta["BLOCK_SIZE"]), n_rows)' in edit.source
    checker = KernelChecker("geglu", tmp_path, PROBLEMS / "elementwise")
    assert checker.max_error(edit.source) < 1e-6
    (back,) = _swaps(edit.source)
    assert back.source == seed, "swapping again gives the seed back (the run skips it as already evaluated)"
    # The check can fail: ids swapped in the kernel but not in the grid leave most of the output unwritten.
    half = edit.source.replace(
        '(triton.cdiv(n_cols, meta["BLOCK_SIZE"]), n_rows)',
        '(n_rows, triton.cdiv(n_cols, meta["BLOCK_SIZE"]))',
    )
    assert half != edit.source
    assert not checker.max_error(half) < 1e-3


KERNEL = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    last = tl.num_programs(0) - 1
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
{extra}    tl.store(y_ptr + row * n_cols + cols, x * 2.0 + last, mask=mask)


@triton.jit
def other_kernel(x_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + row * n_cols + cols, 0.0, mask=cols < n_cols)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        rows, n = x.shape
{launch}        return y
"""

LITERAL = "        scale_kernel[(rows, triton.cdiv(n, 256))](x, y, n, BLOCK=256)\n"
TWICE = (
    "        grid = (rows, triton.cdiv(n, 256))\n"
    "        scale_kernel[grid](x, y, n, BLOCK=256)\n"
    "        scale_kernel[grid](y, y, n, BLOCK=256)\n"
)


@pytest.mark.parametrize("launch", [LITERAL, TWICE], ids=["literal grid", "one grid, two launches"])
def test_every_id_and_every_launch_moves_together(launch):
    (edit,) = _swaps(KERNEL.format(extra="", launch=launch))
    assert "row = tl.program_id(axis=1)" in edit.source
    assert "cols = tl.program_id(0) * BLOCK" in edit.source
    assert "last = tl.num_programs(1) - 1" in edit.source
    assert "(triton.cdiv(n, 256), rows)" in edit.source
    assert "(rows, triton.cdiv(n, 256))" not in edit.source


@pytest.mark.parametrize(
    "why, extra, launch",
    [
        ("an atomic: programs that see each other", "    tl.atomic_add(y_ptr, 1.0)\n", LITERAL),
        (
            "a third axis",
            "    z = tl.program_id(2)\n",
            "        scale_kernel[(rows, 4, 2)](x, y, n, BLOCK=256)\n",
        ),
        ("an axis that is not a literal", "    z = tl.program_id(n_cols * 0)\n", LITERAL),
        ("a grid of one axis", "", "        scale_kernel[(rows,)](x, y, n, BLOCK=256)\n"),
        (
            "a first axis longer than the second may be",
            "",
            "        scale_kernel[(70000, 4)](x, y, n, BLOCK=256)\n",
        ),
        ("a grid made elsewhere", "", "        scale_kernel[self.grid](x, y, n, BLOCK=256)\n"),
        (
            "a grid another kernel's launch uses too",
            "",
            "        grid = (rows, 4)\n"
            "        scale_kernel[grid](x, y, n, BLOCK=256)\n"
            "        other_kernel[grid](y, n, BLOCK=256)\n",
        ),
        (
            "a grid assigned twice",
            "",
            "        grid = (rows, 4)\n"
            "        if n > 4:\n"
            "            grid = (rows, 8)\n"
            "        scale_kernel[grid](x, y, n, BLOCK=256)\n",
        ),
    ],
)
def test_left_alone(why, extra, launch):
    source = KERNEL.format(extra=extra, launch=launch)
    assert not [e for e in _swaps(source) if "scale_kernel" in e.description], why
