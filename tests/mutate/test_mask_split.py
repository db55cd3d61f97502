"""The ``mask_split`` edit: a blocked loop's full blocks without their bound mask, the tail with it, keeps
kernels correct where the axis does not divide the block (the small sizes: a sequence of 100, rows of
odd length), composes with the attention edits, and leaves loops it cannot prove safe alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksmith_mutate.edits import possible_edits

from .conftest import KernelChecker

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"
CASES = [
    ("attention", "attention", 1e-2),
    ("attention", "causal_attention", 1e-2),
    ("normalization", "layernorm", 1e-4),
    ("softmax", "online_softmax", 1e-4),
]


def _splits(source: str):
    return [e for e in possible_edits(source, ("mask_split",)) if e.kind == "mask_split"]


@pytest.mark.parametrize("group, name, tolerance", CASES)
def test_every_loop_split_alone_and_all_of_them_keep_the_kernel_correct(group, name, tolerance, tmp_path):
    checker = KernelChecker(name, tmp_path, PROBLEMS / group)
    seed = (PROBLEMS / group / f"{name}.seed.py").read_text(encoding="utf-8")
    splits = _splits(seed)
    assert splits, "the seed's blocked loops are guarded by a bound mask"
    candidates = list(splits)
    source = seed
    while more := _splits(source):  # split every loop, one edit at a time: each loop once
        source = more[0].source
    assert len(_splits(seed)) == source.count("for ") - seed.count("for ")
    candidates.append(source)
    for candidate in candidates:
        text = candidate if isinstance(candidate, str) else candidate.source
        error = checker.max_error(text)
        assert error < tolerance, f"relative error {error:.3g}"


def test_the_tail_loop_is_what_keeps_an_odd_length_right(tmp_path):
    checker = KernelChecker("layernorm", tmp_path, PROBLEMS / "normalization")
    seed = (PROBLEMS / "normalization" / "layernorm.seed.py").read_text(encoding="utf-8")
    split = _splits(seed)[0].source
    without_tail = split.replace(
        "for start in range(full_blocks_end, n_cols, BLOCK_SIZE):", "for start in range(0, 0, BLOCK_SIZE):", 1
    )
    assert without_tail != split
    # The tail is never written (the output comes from torch.empty): garbage, NaN at times.
    assert not checker.max_error(without_tail) < 1e-4


def test_split_after_the_diagonal_split_and_base_2_softmax(tmp_path):
    group = PROBLEMS / "attention"
    checker = KernelChecker("causal_attention", tmp_path, group)
    source = (group / "causal_attention.seed.py").read_text(encoding="utf-8")
    for kind in ("diagonal_split", "exp2_softmax", "mask_split", "mask_split"):
        (edit, *_) = [e for e in possible_edits(source, (kind,)) if e.kind == kind]
        source = edit.source
    assert "full_blocks_end_2" in source  # the second split took a name of its own
    assert checker.max_error(source) < 1e-2


def test_loops_it_cannot_prove_safe_are_left_alone():
    body = """import triton
import triton.language as tl


@triton.jit
def k(x_ptr, n, start0, BLOCK: tl.constexpr):
    acc = 0.0
    for start in range({lo}, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.sum(tl.load(x_ptr + cols, mask=cols {op} n, other=0.0))
"""
    assert _splits(body.format(lo="0", op="<"))
    assert not _splits(body.format(lo="start0", op="<"))  # not from 0: the full blocks are not a prefix
    assert not _splits(body.format(lo="0", op="<="))  # not a bound the blocks stay below


def test_masks_that_true_cannot_stand_in_for_and_windows_longer_than_the_step_are_left_alone():
    body = """import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, {step}):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        {use}
    tl.store(y_ptr + tl.arange(0, BLOCK), acc)
"""
    plain = "acc += tl.load(x_ptr + cols, mask=mask, other=0.0)"
    assert _splits(body.format(step="BLOCK", use=plain))
    assert not _splits(body.format(step="1", use=plain))  # a sliding window reads past n before the end
    for use in (
        "acc += tl.load(x_ptr + cols, mask=mask[None, :], other=0.0)",  # indexed
        "acc += mask.to(tl.float32)",  # converted
        "acc += tl.sum(tl.where(mask, 1.0, 0.0), axis=0)",  # the mask is the only tensor: its shape
    ):
        assert not _splits(body.format(step="BLOCK", use=use)), use
    tensor_where = "acc += tl.where(mask, tl.load(x_ptr + cols, mask=mask, other=0.0), 0.0)"
    assert _splits(body.format(step="BLOCK", use=tensor_where))


def test_a_compound_step_is_grouped_in_the_split_bound():
    source = """import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    for start in tl.range(0, n, 2 * BLOCK):
        cols = start + tl.arange(0, 2 * BLOCK)
        tl.store(y_ptr + cols, tl.load(x_ptr + cols, mask=cols < n, other=0.0), mask=cols < n)
"""
    (split,) = _splits(source)
    assert "full_blocks_end = (n // (2 * BLOCK)) * (2 * BLOCK)" in split.source
