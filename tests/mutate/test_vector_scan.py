"""The ``vector_scan`` edit: a scalar loop carrying a running sum (a batch's prefix sum, one request per
iteration) runs a block of iterations at a time with ``tl.cumsum``. It keeps the result exact (three blocks and
a tail, the sum read before and after its update) and leaves alone every loop it could not vectorise."""

from __future__ import annotations

import pytest

from ksmith_mutate.edits import possible_edits
from ksmith_mutate.scan import SCAN_BLOCK

from .conftest import KernelChecker, seed_source


def _scans(source: str):
    return [e for e in possible_edits(source, ("vector_scan",)) if e.kind == "vector_scan"]


def test_the_serial_prefix_sum_runs_a_block_at_a_time_and_stays_exact(tmp_path):
    checker = KernelChecker("lengths_prefix", tmp_path)
    seed = seed_source("lengths_prefix")
    assert checker.max_error(seed) == 0
    (edit,) = _scans(seed)
    assert edit.detail == {"direction": "up", "loop": 1, "carried": "acc"}
    assert f"for idx_start in range(0, B, {SCAN_BLOCK}):" in edit.source
    assert "tl.store(cu_seqlens + idx, (acc + acc_scan - acc_step), mask=idx_mask)" in edit.source
    assert "seq = tl.load(seq_lens + idx, mask=idx_mask, other=0)" in edit.source
    assert checker.max_error(edit.source) == 0  # 3000 requests: blocks of 1024 and a tail of 952
    assert not _scans(edit.source), "a blocked loop is not offered again"
    # The check can fail: the inclusive prefix where the exclusive one is read shifts every sum by one length.
    broken = edit.source.replace("(acc + acc_scan - acc_step)", "(acc + acc_scan)")
    assert not checker.max_error(broken) == 0


INCLUSIVE = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def lengths_prefix_kernel(seq_lens, lengths, cu_seqlens, B, DELTA: tl.constexpr):
    tl.store(cu_seqlens, 0)
    acc = 0
    for idx in range(0, B):
{body}


class ModelNew(nn.Module):
    def forward(self, seq_lens):
        batch = seq_lens.shape[0]
        out = torch.empty(2 * batch + 1, dtype=torch.int32, device=seq_lens.device)
        lengths_prefix_kernel[(1,)](seq_lens, out, out[batch:], batch, DELTA=1)
        return out
"""
BODY = """        val = (tl.load(seq_lens + idx, None) + DELTA).to(tl.int32)
        acc += val
        tl.store(lengths + idx, val)
        tl.store(cu_seqlens + idx + 1, acc)"""


def test_a_sum_read_after_its_update_is_the_inclusive_prefix(tmp_path):
    checker = KernelChecker("lengths_prefix", tmp_path)
    source = INCLUSIVE.format(body=BODY)
    (edit,) = _scans(source)
    assert "tl.store(cu_seqlens + idx + 1, (acc + acc_scan), mask=idx_mask)" in edit.source
    assert "tl.load(seq_lens + idx, (None) & idx_mask, other=0)" not in edit.source
    assert "tl.load(seq_lens + idx, idx_mask, other=0)" in edit.source  # a positional None mask replaced
    assert checker.max_error(edit.source) == 0


@pytest.mark.parametrize(
    "why, body",
    [
        ("a second carried value", BODY + "\n        last = val + last"),
        ("a store to one place every iteration", BODY + "\n        tl.store(cu_seqlens, acc)"),
        ("a reduction sees a block", BODY.replace("acc += val", "acc += tl.sum(val, 0)")),
        ("a product, not a sum", BODY.replace("acc += val", "acc *= val")),
        ("the step reads the sum", BODY.replace("acc += val", "acc += val + acc")),
        ("updated twice", BODY + "\n        acc += 1"),
        (
            "stored where it loads",
            BODY.replace("tl.store(lengths + idx, val)", "tl.store(seq_lens + idx, val)"),
        ),
        ("a branch", BODY + "\n        if idx > 0:\n            acc += 1"),
        ("a helper", BODY + "\n        lengths_prefix_kernel(seq_lens, lengths, cu_seqlens, B, DELTA)"),
        (
            "two iterations write one place",
            BODY.replace("tl.store(lengths + idx, val)", "tl.store(lengths + idx // 2, val)"),
        ),
        ("the variable twice in the address", BODY.replace("lengths + idx, val", "lengths + idx + idx, val")),
    ],
)
def test_loops_it_cannot_vectorise_are_left_alone(why, body):
    assert not _scans(INCLUSIVE.format(body=body)), why


def test_a_value_the_loop_leaves_behind_or_a_stepped_loop_is_left_alone():
    # ``val`` after the loop is the last request's length: a block of lengths once vectorised.
    after = INCLUSIVE.format(body=BODY).replace(
        "\n\n\nclass ModelNew", "\n    tl.store(lengths, val)\n\n\nclass ModelNew"
    )
    assert not _scans(after)
    assert not _scans(INCLUSIVE.format(body=BODY).replace("range(0, B)", "range(0, B, 2)"))
    # The step's names changed between the first read of the sum and its update.
    moved = """        val = (tl.load(seq_lens + idx) + DELTA).to(tl.int32)
        tl.store(cu_seqlens + idx, acc)
        val = val * 2
        acc += val"""
    assert not _scans(INCLUSIVE.format(body=moved))
    # Inside another loop, what runs before it in the next round could read what it left behind.
    nested = INCLUSIVE.format(body=BODY.replace("\n", "\n    ")).replace(
        "    acc = 0\n    for idx in range(0, B):\n",
        "    for rnd in range(2):\n        acc = 0\n        for idx in range(0, B):\n    ",
    )
    assert "        for idx in range(0, B):\n            val = (" in nested
    assert not _scans(nested)
    assert _scans(INCLUSIVE.format(body=BODY))  # the same loop at the top level is offered
