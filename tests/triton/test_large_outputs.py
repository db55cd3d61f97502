"""Outputs of gigabytes are judged a slice at a time: the comparison, the degenerate-reference check and the
reference outputs themselves (kept when they fit, computed again from the seed when they do not) give the same
answers as the whole-tensor computation they replace."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ksmith_core.model import Tolerance
from ksmith_triton import compare, reference_side
from ksmith_triton.child_common import load_problem_module, make_model
from ksmith_triton.compare import Outputs, compare_values, degenerate_reasons

REPO = Path(__file__).resolve().parents[2]
TOL = Tolerance(1e-4, 1e-4)


def _tol(_dtype: str) -> Tolerance:
    return TOL


def _outs(*tensors):
    return Outputs("tensor", list(tensors), ["cpu"] * len(tensors))


def _cases():
    torch.manual_seed(1)
    ref = torch.randn(6, 7, 11)
    close = ref + 1e-6
    wrong = ref.clone()
    wrong[2, 3, 4] += 0.5
    wrong[5, 6, 10] -= 0.75  # the largest error, in the last slice
    wrong[0, 0, 1] += 0.75  # as large, earlier: the first largest is the one reported
    nan = ref.clone()
    nan[4, 1, 9] = float("nan")
    nan[1, 2, 3] = float("nan")
    inf = ref.clone()
    inf[3, 3, 3] = float("inf")
    return ref, {"close": close, "wrong": wrong, "nan": nan, "inf": inf, "transposed": ref.transpose(0, 1)}


@pytest.mark.parametrize("name", ["close", "wrong", "nan", "inf"])
def test_comparison_in_slices_matches_the_whole_tensor(name, monkeypatch):
    ref, cases = _cases()
    got = cases[name]
    whole = compare_values(0, got, ref, TOL, "")
    monkeypatch.setattr(compare, "SLICE_ELEMENTS", 10)  # 46 slices, the last one short
    sliced = compare_values(0, got, ref, TOL, "")
    assert (whole is None) == (sliced is None) == (name == "close")
    if whole is not None:
        assert sliced.reasons == whole.reasons
        assert sliced.mismatch == whole.mismatch
    if name == "wrong":
        assert sliced.mismatch["worst_index"] == [0, 0, 1]
        assert sliced.mismatch["mismatched"] == 3
    if name == "nan":
        assert sliced.mismatch["worst_index"] == [1, 2, 3]  # the first NaN in row-major order


def test_comparison_in_slices_reads_non_contiguous_outputs_in_order(monkeypatch):
    ref = torch.randn(5, 9).t()  # not contiguous
    got = ref.contiguous()
    got[7, 2] += 1.0
    monkeypatch.setattr(compare, "SLICE_ELEMENTS", 4)
    result = compare_values(0, got, ref, TOL, "")
    assert result is not None and result.mismatch["worst_index"] == [7, 2]


def test_degenerate_check_in_slices_matches_the_whole_tensor(monkeypatch):
    torch.manual_seed(2)
    fixed = torch.randn(64)
    sets = {
        "relu": [_outs(torch.relu(torch.randn(64, 33))) for _ in range(4)],
        "zeros": [_outs(torch.zeros(64)) for _ in range(3)],
        "constant": [_outs(torch.full((70,), 3.0)) for _ in range(3)],
        "tiny": [_outs(torch.randn(64) * 1e-6) for _ in range(3)],
        "unchanged": [_outs(fixed.clone()) for _ in range(3)],
        "mostly_unchanged": [_outs(torch.cat([fixed, torch.randn(2)])) for _ in range(3)],
    }
    whole = {name: degenerate_reasons(trials, _tol) for name, trials in sets.items()}
    monkeypatch.setattr(compare, "SLICE_ELEMENTS", 5)
    sliced = {name: degenerate_reasons(trials, _tol) for name, trials in sets.items()}
    assert sliced == whole
    assert whole["relu"] == []
    assert all(whole[name] for name in ("zeros", "constant", "tiny", "unchanged", "mostly_unchanged"))


def _softmax_problem():
    source = (REPO / "plugins/ksmith_problems/problems/softmax/softmax.py").read_text()
    return load_problem_module(source, {"batch_size": 8, "dim": 100})


def test_reference_outputs_recomputed_when_they_do_not_fit(monkeypatch):
    problem = _softmax_problem()
    model = make_model(problem.Model, problem, 11, "cpu")
    seeds = [3, 5, 7]
    kept = reference_side.ReferenceOutputs(problem, model, seeds, "cpu")
    assert kept.keep
    monkeypatch.setattr(reference_side, "free_bytes", lambda device: 0)
    recomputed = reference_side.ReferenceOutputs(problem, model, seeds, "cpu")
    assert not recomputed.keep
    assert recomputed.meta == kept.meta and kept.meta["output_bytes"] > 0
    for index in (0, 1, 2, 0, 2):
        assert torch.equal(recomputed[index].tensors[0], kept[index].tensors[0])
        assert len(recomputed.kept) == 0  # nothing held between asks
    assert degenerate_reasons(recomputed, _tol) == degenerate_reasons(kept, _tol) == []
    with pytest.raises(IndexError):
        recomputed[3]
