"""The ``broadcast_reuse`` edit: the programs of the rows of one column block run side by side, so an operand
every row shares is read once per block. It renumbers programs without changing what any program computes,
keeps kernels correct (Inductor's literal element count, a hand-written launcher whose blocks straddle rows,
a grid larger than the work) and leaves alone kernels whose programs could see each other."""

from __future__ import annotations

import pytest

from ksmith_mutate.edits import possible_edits

from .conftest import KernelChecker, seed_source


def _reorders(source: str):
    return [e for e in possible_edits(source, ("broadcast_reuse",)) if e.kind == "broadcast_reuse"]


def _order(statement: str, programs: int, block: int) -> list[int]:
    """Evaluates the edit's renumbering line for every program id of a grid, with Python ints."""

    class TL:
        @staticmethod
        def where(condition, a, b):
            return a if condition else b

        @staticmethod
        def num_programs(axis):
            return programs

    name, expression = statement.strip().split(" = ", 1)
    return [
        eval(expression, {"tl": TL, name: pid, "XBLOCK": block, "BLOCK_SIZE": block})
        for pid in range(programs)
    ]


def test_inductors_pointwise_kernel_runs_the_rows_of_a_block_together(tmp_path):
    checker = KernelChecker("rows_affine", tmp_path)
    seed = seed_source("rows_affine")
    (edit,) = _reorders(seed)
    assert edit.detail == {"direction": "up", "rows": 3, "shared_elements": 1050624}
    assert "in_ptr1, in_ptr2" in edit.description
    assert "xoffset = xpid * XBLOCK" in edit.source
    assert checker.max_error(edit.source) < 1e-6
    assert not _reorders(edit.source), "a renumbered kernel is not offered again"

    (line,) = [x for x in edit.source.splitlines() if "tl.where" in x]
    blocks = 1050624 // 4096  # whole blocks per row: the last 2048 of each row is in a block beyond them
    order = _order(line, 3 * blocks, 4096)
    assert sorted(order) == list(range(3 * blocks)), "every program exactly once"
    # Programs 0, 1, 2 take block 0 of rows 0, 1, 2; programs 3, 4, 5 block 1.
    assert order[:6] == [0, blocks, 2 * blocks, 1, blocks + 1, 2 * blocks + 1]
    # A grid larger than the rows' blocks keeps the extra programs as they were; a smaller one keeps the order.
    assert _order(line, 3 * blocks + 5, 4096)[3 * blocks :] == list(range(3 * blocks, 3 * blocks + 5))
    assert _order(line, blocks, 4096) == list(range(blocks))

    # The check can fail: a renumbering that maps two programs to one block leaves another unwritten.
    broken = edit.source.replace("+ xpid // 3, xpid)", ", xpid)")
    assert broken != edit.source
    assert not checker.max_error(broken) < 1e-3


HAND = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    cols = offsets % 1050624
{body}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn((1 << 20) + 2048))
        self.bias = nn.Parameter(torch.randn((1 << 20) + 2048))

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, {block}) + {extra},)
        affine_kernel[grid](x, self.weight, self.bias, out, n, BLOCK_SIZE={block})
        return out
"""
BODY = """    x = tl.load(x_ptr + offsets, mask=mask)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + offsets, x * w + b, mask=mask)"""


@pytest.mark.parametrize("block, extra", [(2048, 0), (4096, 0), (4096, 7)])
def test_a_hand_written_kernel_with_a_runtime_count_stays_correct(tmp_path, block, extra):
    # 4096 does not divide a row: blocks straddle two rows and the renumbering is still one-to-one.
    checker = KernelChecker("rows_affine", tmp_path)
    source = HAND.format(body=BODY, block=block, extra=extra)
    (edit,) = _reorders(source)
    assert edit.detail["rows"] == "(n_elements // 1050624)"
    assert "pid = tl.program_id(axis=0)\n    pid = tl.where(" in edit.source
    assert checker.max_error(edit.source) < 1e-6
    assert not _reorders(edit.source)


@pytest.mark.parametrize(
    "why, source",
    [
        (
            "an atomic",
            HAND.format(body=BODY + "\n    tl.atomic_add(b_ptr + cols, x, mask=mask)", block=1, extra=0),
        ),
        (
            "stored where it loads",
            HAND.format(body=BODY.replace("y_ptr + offsets", "x_ptr + offsets"), block=1, extra=0),
        ),
        (
            "a second program axis",
            HAND.format(body=BODY + "\n    tl.store(y_ptr + tl.program_id(1), x)", block=1, extra=0),
        ),
        ("a small shared operand", HAND.format(body=BODY, block=1, extra=0).replace("1050624", "65536")),
        ("no shared load", HAND.format(body=BODY.replace("+ cols", "+ offsets"), block=1, extra=0)),
        (
            "no count",
            HAND.format(body=BODY, block=1, extra=0).replace("mask = offsets < n_elements", "mask = None"),
        ),
        (
            "a block that is not the arange's width",
            HAND.format(body=BODY, block=1, extra=0).replace(
                "tl.arange(0, BLOCK_SIZE)", "tl.arange(0, 2 * BLOCK_SIZE)"
            ),
        ),
    ],
)
def test_kernels_whose_programs_could_see_each_other_or_share_nothing_are_left_alone(why, source):
    assert not _reorders(source), why


def test_one_row_is_not_renumbered():
    seed = seed_source("rows_affine").replace("xnumel = 3151872", "xnumel = 1050624")
    assert not _reorders(seed)
