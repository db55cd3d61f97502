"""The ``loop_reverse`` edit: a later pass over a row runs from its last block, so it starts with what L2 still
holds. It keeps kernels correct (rows the block does not divide, Inductor's looped reductions and the suite's
multi-pass seeds) and leaves alone every loop whose order matters."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksmith_mutate.edits import possible_edits

from .conftest import KernelChecker, seed_source

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"
SUITE = [
    ("normalization", "layernorm"),
    ("normalization", "rmsnorm"),
    ("normalization", "groupnorm"),
    ("reduction", "l2_norm"),
    ("softmax", "online_softmax"),
]


def _reversals(source: str):
    return [e for e in possible_edits(source, ("loop_reverse",)) if e.kind == "loop_reverse"]


@pytest.mark.parametrize("group, name", SUITE)
def test_the_suites_multi_pass_seeds_stay_correct_reversed(group, name, tmp_path):
    checker = KernelChecker(name, tmp_path, PROBLEMS / group)
    seed = (PROBLEMS / group / f"{name}.seed.py").read_text(encoding="utf-8")
    (edit,) = _reversals(seed)
    assert checker.max_error(edit.source) < 1e-4
    assert not _reversals(edit.source), "a reversed loop is not offered again"


def test_inductors_looped_reduction_is_reversed_and_the_order_is_what_changed(tmp_path):
    checker = KernelChecker("l1norm_looped", tmp_path)
    seed = seed_source("l1norm_looped")
    (edit,) = _reversals(seed)  # the second loop only: the first carries the row's sum
    assert "loop 2" in edit.description
    assert "for r0_offset_rev in tl.range(0, r0_numel, R0_BLOCK):" in edit.source
    assert "r0_offset = ((r0_numel - 1) // R0_BLOCK) * R0_BLOCK - r0_offset_rev" in edit.source
    assert checker.max_error(edit.source) < 1e-5
    # The start of the last block is what keeps the tail (203 = 6 * 32 + 11) covered: from the stop itself
    # the loop would skip the first block and write past the row.
    broken = edit.source.replace("((r0_numel - 1) // R0_BLOCK) * R0_BLOCK", "r0_numel")
    # The block it skips is never written (the output is torch.empty_like): garbage, NaN at times.
    assert not checker.max_error(broken) < 1e-3


KERNEL = """import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, s_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + cols, mask=cols < n, other=0.0)
    total = tl.sum(acc, axis=0)
    for start in range(0, n, BLOCK):
{body}
"""
INDEPENDENT = """        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n, other=0.0)
        tl.store(y_ptr + cols, x / total, mask=cols < n)
"""


def test_an_independent_second_pass_is_offered():
    assert len(_reversals(KERNEL.format(body=INDEPENDENT))) == 1


@pytest.mark.parametrize(
    "why, body",
    [
        ("a carried sum", INDEPENDENT + "        total += tl.sum(x, axis=0)\n"),
        (
            "one address every iteration",
            INDEPENDENT + "        tl.store(s_ptr, tl.sum(x, axis=0))\n",
        ),
        ("an atomic", INDEPENDENT + "        tl.atomic_add(s_ptr + cols, x, mask=cols < n)\n"),
        ("a branch", INDEPENDENT + "        if start > 0:\n            x = x * 2\n"),
        (
            "nothing read before",
            INDEPENDENT.replace("x_ptr", "s_ptr"),
        ),
        ("the loop variable reassigned", INDEPENDENT + "        start = BLOCK\n"),
        (
            "a scatter: the last of two writes to one place wins",
            INDEPENDENT.replace("tl.store(y_ptr + cols,", "tl.store(y_ptr + tl.load(s_ptr + cols),"),
        ),
        (
            "one place every other iteration",
            INDEPENDENT + "        tl.store(y_ptr + (start // BLOCK) % 2, x)\n",
        ),
        (
            "blocks wider than the step overlap",
            INDEPENDENT.replace(
                "cols = start + tl.arange(0, BLOCK)", "cols = start + tl.arange(0, 2 * BLOCK)"
            ),
        ),
        (
            "a dependence carried through memory",
            INDEPENDENT.replace(
                "x / total", "x / total + tl.load(y_ptr + cols - 1, mask=cols > 0, other=0.0)"
            ),
        ),
        ("a helper with side effects", INDEPENDENT + "        k(x_ptr, y_ptr, s_ptr, n, BLOCK)\n"),
        ("a descriptor store", INDEPENDENT + "        desc.store([start], x)\n"),
        (
            "the block's name bound again to one place",
            INDEPENDENT + "        cols = 0\n        tl.store(s_ptr + cols, x)\n",
        ),
        ("an atomic method", INDEPENDENT + "        desc.atomic_add([start], x)\n"),
        (
            "the address as a keyword",
            INDEPENDENT + "        tl.store(value=tl.sum(x, axis=0), pointer=s_ptr)\n",
        ),
    ],
)
def test_loops_whose_order_matters_are_left_alone(why, body):
    assert not _reversals(KERNEL.format(body=body)), why


def test_a_value_read_after_the_loop_keeps_it_in_order():
    source = KERNEL.format(body=INDEPENDENT) + "    tl.store(s_ptr, tl.sum(x, axis=0))\n"
    assert not _reversals(source)
    reassigned = KERNEL.format(body=INDEPENDENT) + "    x = total\n    tl.store(s_ptr, x)\n"
    assert len(_reversals(reassigned)) == 1


def test_a_compound_step_is_grouped_and_the_reversed_loop_stays_exact(tmp_path):
    checker = KernelChecker("l1norm_looped", tmp_path)
    seed = (
        seed_source("l1norm_looped")
        .replace("R0_BLOCK)", "2 * R0_BLOCK)")
        .replace("R0_BLOCK=32", "R0_BLOCK=16")
    )
    assert "tl.range(0, r0_numel, 2 * R0_BLOCK)" in seed
    seed = seed.replace(
        "r0_base = tl.arange(0, R0_BLOCK)[None, :]", "r0_base = tl.arange(0, 2 * R0_BLOCK)[None, :]"
    )
    seed = seed.replace(
        "tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)", "tl.full([XBLOCK, 2 * R0_BLOCK], 0, tl.float32)"
    )
    assert checker.max_error(seed) < 1e-5
    (edit,) = _reversals(seed)
    assert "r0_offset = ((r0_numel - 1) // (2 * R0_BLOCK)) * (2 * R0_BLOCK) - r0_offset_rev" in edit.source
    assert checker.max_error(edit.source) < 1e-5


def test_a_loop_that_reads_only_other_pointers_is_not_a_re_read():
    # The second loop reads y at the same row offset the first read x at: nothing of y is in cache.
    source = KERNEL.format(body=INDEPENDENT.replace("tl.load(x_ptr + cols", "tl.load(s_ptr + cols"))
    assert not _reversals(source)
