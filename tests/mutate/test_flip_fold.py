"""The ``flip_fold`` edit: a kernel that only reverses each row of another kernel's output is folded into that
kernel's store. Exact where it applies (Inductor's reverse cumsum), refused where the copy is not a flip of the
last dimension, the buffer is read again, or the producer's row index is not guarded."""

from __future__ import annotations

import pytest

from ksmith_mutate.edits import possible_edits

from .conftest import KernelChecker, seed_source


def _folds(source: str):
    return [e for e in possible_edits(source, ("flip_fold",)) if e.kind == "flip_fold"]


def test_the_reverse_cumsum_loses_its_copy_kernel_and_stays_exact(tmp_path):
    checker = KernelChecker("cumsum_reverse", tmp_path)
    seed = seed_source("cumsum_reverse")
    assert checker.max_error(seed) < 1e-6
    (edit,) = _folds(seed)
    assert "triton_poi_fused_flip_1" not in edit.source  # neither launched nor left behind to be tuned
    assert edit.source.count("grid = lambda") == 1  # the copy's grid went with it
    assert "buf1 = buf0" in edit.source and "buf1 = torch.empty_strided" not in edit.source
    assert "tl.store(out_ptr0 + (36 - r0_1 + 37 * x0), tmp1, r0_mask)" in edit.source
    assert checker.max_error(edit.source) < 1e-6
    assert not _folds(edit.source)
    # Dropping the copy without flipping the store is wrong: the check sees the difference.
    unflipped = edit.source.replace("(36 - r0_1 + 37 * x0)", "(r0_1 + 37 * x0)")
    assert not checker.max_error(unflipped) < 1e-2


@pytest.mark.parametrize(
    "why, old, new",
    [
        ("a copy, not a flip", "(36 + ((-1) * x0) + 37 * x1), xmask)", "(x0 + 37 * x1), xmask)"),
        (
            "a flip of another width",
            "(36 + ((-1) * x0) + 37 * x1), xmask)",
            "(35 + ((-1) * x0) + 37 * x1), xmask)",
        ),
        ("the buffer read after the copy", "        return buf1", "        return buf1 + buf0"),
        ("the producer's row index unguarded", "tmp1, r0_mask)", "tmp1, x0 < 5)"),
        (
            "the producer reads what it stores",
            "tmp1 = tl.cumsum(tmp0, 1)",
            "tmp1 = tl.cumsum(tmp0, 1) + tl.load(out_ptr0)",
        ),
        (
            "a store at a row offset",
            "tl.store(out_ptr0 + (r0_1 + 37 * x0)",
            "tl.store(out_ptr0 + (1 + r0_1 + 37 * x0)",
        ),
        (
            "the producer launched again for another buffer",
            "        return buf1",
            "        buf9 = torch.empty_strided((5, 37), (37, 1), dtype=torch.float32, device=x.device)\n"
            "        triton_red_fused_cumsum_flip_0[grid](x, buf9, 5, 37, XBLOCK=1, R0_BLOCK=64, num_warps=4)\n"
            "        return buf1 + buf9",
        ),
        (
            "the buffer read between the producer and the copy",
            "        buf1 = torch.empty_strided",
            "        total = buf0.sum(dim=1, keepdim=True)\n        buf1 = torch.empty_strided",
        ),
        (
            "an output of another dtype",
            "buf1 = torch.empty_strided((5, 37), (37, 1), dtype=torch.float32",
            "buf1 = torch.empty_strided((5, 37), (37, 1), dtype=torch.float16",
        ),
        ("the row guard or-ed away", "tmp1, r0_mask)", "tmp1, r0_mask | (x0 >= 0))"),
    ],
)
def test_what_the_fold_would_change_is_left_alone(why, old, new):
    seed = seed_source("cumsum_reverse")
    changed = seed.replace(old, new)
    assert changed != seed, why
    assert not _folds(changed), why


def test_the_block_and_the_warps_move_together_and_the_scan_stays_exact(tmp_path):
    checker = KernelChecker("cumsum_reverse", tmp_path)
    (folded,) = _folds(seed_source("cumsum_reverse"))
    paired = [e for e in possible_edits(folded.source, ("block_size",)) if "with num_warps" in e.description]
    described = {e.description for e in paired}
    assert "R0_BLOCK 64 -> 128 with num_warps 4 -> 8 in triton_red_fused_cumsum_flip_0 launch" in described
    assert "R0_BLOCK 64 -> 32 with num_warps 4 -> 2 in triton_red_fused_cumsum_flip_0 launch" in described
    down = next(e for e in paired if "64 -> 128" in e.description)
    assert "R0_BLOCK=128, num_warps=8" in down.source
    assert checker.max_error(down.source) < 1e-6
