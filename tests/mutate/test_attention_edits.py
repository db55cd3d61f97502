"""Structural edits of flash-attention kernels (``ksmith_mutate.attention``): the base-2 online softmax, the
causal diagonal split and Inductor's flex-attention configurations keep the suite's attention seeds correct
(Triton interpreter on CPU, or a GPU), compose, and are offered only where they mean something."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksmith_mutate.attention import flex_attention_configs
from ksmith_mutate.edits import possible_edits

from .conftest import KernelChecker

ATTENTION = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems" / "attention"
KINDS = ("exp2_softmax", "diagonal_split", "attention_config")


def _seed(name: str) -> str:
    return (ATTENTION / f"{name}.seed.py").read_text(encoding="utf-8")


def _of(source: str, kind: str):
    return [e for e in possible_edits(source, KINDS) if e.kind == kind]


@pytest.mark.parametrize("name", ["attention", "causal_attention"])
def test_attention_edits_keep_the_seed_correct_alone_and_together(name, tmp_path):
    checker = KernelChecker(name, tmp_path, ATTENTION)
    seed = _seed(name)
    fma, exp2 = _of(seed, "exp2_softmax")
    for edit in (fma, exp2):
        assert "tl.exp(" not in edit.source and edit.source.count("tl.exp2(") == 2
    assert "scores = tl.dot(q, tl.trans(k)) * (sm_scale * 1.4426950408889634)" in exp2.source
    assert fma.detail["form"] == "fma" and "scores = tl.dot(q, tl.trans(k))\n" in fma.source
    assert "tl.max(scores, axis=1) * (sm_scale * 1.4426950408889634)" in fma.source
    assert "tl.exp2(scores * (sm_scale * 1.4426950408889634) - m_new[:, None])" in fma.source
    splits = _of(seed, "diagonal_split")
    # The causal seed is split at its diagonal; the non-causal one launches with CAUSAL=False: no split.
    assert len(splits) == (1 if name == "causal_attention" else 0)
    candidates = [fma, exp2, *splits]
    if splits:
        both_fma, both = _of(splits[0].source, "exp2_softmax")
        assert both_fma.source.count("tl.max(scores, axis=1) * (sm_scale") == 3  # each copy of the loop
        candidates.append(both_fma)
        assert (
            "diagonal_start = tl.minimum((start_m // BLOCK_N) * BLOCK_N, (end_n // BLOCK_N) * BLOCK_N)"
            in both.source
        )
        assert not _of(both.source, "diagonal_split")  # split once
        candidates.append(both)
        # At a tile where a query block holds several key blocks, the split still lands on a block edge.
        wide = [e for e in _of(both.source, "attention_config") if e.detail["config"][:2] == [128, 64]]
        assert sorted(e.detail["config"][3] for e in wide) == [4, 8]
        candidates.append(wide[0])
    for candidate in candidates:
        error = checker.max_error(candidate.source)
        assert error < 1e-2, f"{candidate.kind}: relative error {error:.3g}"


@pytest.mark.parametrize("name", ["attention", "causal_attention"])
def test_the_attention_structure_in_one_step_is_the_edits_stacked_and_correct(name, tmp_path):
    """``attention_structure``: the base-2 softmax in the exponent, then the diagonal split (causal), then
    each key loop's full blocks without their bound masks, as the single edits would make them in turn."""
    checker = KernelChecker(name, tmp_path, ATTENTION)
    seed = _seed(name)
    (compound,) = [e for e in possible_edits(seed) if e.kind == "attention_structure"]
    (stacked,) = [e for e in possible_edits(seed, ("exp2_softmax",)) if e.detail.get("form") == "fma"]
    stacked = stacked.source
    for kind in ("diagonal_split", "mask_split"):
        while options := possible_edits(stacked, (kind,)):
            stacked = options[0].source
    assert compound.source == stacked
    assert "tl.exp(" not in compound.source and "kv_mask = True" in compound.source
    assert ("diagonal_start" in compound.source) == (name == "causal_attention")
    # Nothing of the three is left to do on the result.
    assert not possible_edits(compound.source, ("diagonal_split", "mask_split", "attention_structure"))
    wide = [
        e
        for e in possible_edits(compound.source, ("attention_config",))
        if e.detail["config"][:2] == [128, 64]
    ]
    for candidate in (compound, wide[0]):
        error = checker.max_error(candidate.source)
        assert error < 1e-2, f"{candidate.description}: relative error {error:.3g}"


def test_a_broken_split_is_caught_by_the_check(tmp_path):
    """The checker the test relies on fails a split that drops the mask on the diagonal blocks too."""
    checker = KernelChecker("causal_attention", tmp_path, ATTENTION)
    (split,) = _of(_seed("causal_attention"), "diagonal_split")
    broken = split.source.replace("range(0, diagonal_start, BLOCK_N)", "range(0, end_n, BLOCK_N)", 1).replace(
        "range(diagonal_start, end_n, BLOCK_N)", "range(end_n, end_n, BLOCK_N)", 1
    )
    assert broken != split.source
    assert checker.max_error(broken) > 1e-2


def test_attention_configs_are_inductors_and_move_all_four_values():
    configs = flex_attention_configs()
    assert (128, 64, 3, 4) in configs and (128, 64, 3, 8) in configs and all(len(c) == 4 for c in configs)
    edits = _of(_seed("attention"), "attention_config")
    assert len(edits) == len(configs)  # the seed's 64x32 is none of them
    for edit in edits:
        block_m, block_n, stages, warps = edit.detail["config"]
        for text in (
            f"BLOCK_M={block_m}",
            f"BLOCK_N={block_n}",
            f"num_warps={warps}",
            f"num_stages={stages}",
        ):
            assert text in edit.source
        assert edit.detail["direction"] == "up"  # every flex tile is larger than 64x32


def test_kernels_that_are_not_attention_get_none_of_them():
    matmul = (ATTENTION.parent / "matmul" / "matmul.seed.py").read_text(encoding="utf-8")
    softmax = (ATTENTION.parent / "softmax" / "online_softmax.seed.py").read_text(encoding="utf-8")
    assert not possible_edits(matmul, KINDS) and not possible_edits(softmax, KINDS)
    assert not possible_edits(matmul, ("attention_structure",))
    assert not possible_edits(softmax, ("attention_structure",))


@pytest.mark.parametrize(
    "old, new",
    [
        # a bias added to the scaled scores: base 2 would scale it too
        (
            "valid = offs_n[None, :] < seq_len",
            "scores = scores + 0.5\n        valid = offs_n[None, :] < seq_len",
        ),
        # the scores feed a sum
        (
            "l_i = l_i * alpha + tl.sum(p, axis=1)",
            "l_i = l_i * alpha + tl.sum(p, axis=1) + 0.0 * tl.sum(scores, axis=1)",
        ),
        # the masked scores under a new name: the max and the exponent would read them unscaled
        (
            'scores = tl.where(valid, scores, float("-inf"))\n        m_new = tl.maximum(m_i, tl.max(scores, axis=1))',
            'masked = tl.where(valid, scores, float("-inf"))\n        m_new = tl.maximum(m_i, tl.max(masked, axis=1))',
        ),
        # the running max is an output of its own
        ("out = acc / l_i[:, None]", "tl.store(out_ptr, tl.max(m_i, axis=0))\n    out = acc / l_i[:, None]"),
    ],
)
def test_scores_or_maxima_that_feed_more_than_the_softmax_stay_in_base_e(old, new):
    seed = _seed("attention")
    changed = seed.replace(old, new, 1)
    assert changed != seed
    assert not _of(changed, "exp2_softmax")


def test_an_exponent_that_is_not_a_difference_is_left_in_base_e():
    seed = _seed("attention")
    changed = seed.replace(
        "p = tl.exp(scores - m_new[:, None])", "p = tl.exp(scores) / tl.exp(m_new[:, None])"
    )
    assert changed != seed
    assert not _of(changed, "exp2_softmax")
