"""Data model round trips and reading problems/candidates without running them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ksmith_core.errors import CandidateError, ProblemError
from ksmith_core.loading import load_candidate, load_problem, seed_path_for
from ksmith_core.model import Candidate, FrozenDict, Mismatch, Status, TimingStats, Verdict, source_id

KERNELBENCH_STYLE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """Simple model that performs a Softmax activation."""
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)

batch_size = 4096
dim = 393216

def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]

def get_init_inputs():
    return []  # No special initialization inputs needed
'''


def test_a_kernelbench_file_loads_exactly_as_it_is(tmp_path):
    path = tmp_path / "23_Softmax.py"
    path.write_text(KERNELBENCH_STYLE)
    problem = load_problem(path)
    assert problem.name == "23_Softmax"
    assert problem.source == KERNELBENCH_STYLE
    assert problem.backend == "triton"
    assert problem.tolerance_for("float32").atol == 1e-4
    assert problem.tolerance_for("torch.bfloat16").rtol == 1e-2
    assert problem.allowed_ops == frozenset()


def test_problem_options_are_read_as_literals(tmp_path):
    path = tmp_path / "p.py"
    path.write_text(
        KERNELBENCH_STYLE
        + 'KSMITH_TOLERANCES = {"float32": [1e-3, 2e-3]}\nKSMITH_ALLOWED_OPS = ["aten.convolution"]\n'
        + 'KSMITH_SMALL = {"batch_size": 4, "dim": 64}\n'
    )
    problem = load_problem(path)
    assert problem.tolerance_for("float32") == type(problem.tolerance_for("float32"))(1e-3, 2e-3)
    assert problem.allowed_ops == {"aten.convolution"}
    assert problem.small_sizes == {"batch_size": 4, "dim": 64}


def test_problem_options_must_be_literals(tmp_path):
    path = tmp_path / "p.py"
    path.write_text(KERNELBENCH_STYLE + "KSMITH_SMALL = dict(batch_size=4)\n")
    with pytest.raises(ProblemError, match="KSMITH_SMALL must be a literal"):
        load_problem(path)


def test_candidates_need_modelnew(tmp_path):
    path = tmp_path / "c.py"
    path.write_text("class Model:\n    pass\n")
    with pytest.raises(CandidateError, match="defines no class ModelNew"):
        load_candidate(path)


def test_seed_beside_problem(data_dir):
    problem = load_problem(data_dir / "vector_add.py")
    assert seed_path_for(problem) == data_dir / "vector_add.seed.py"


def test_candidate_identity_ignores_trailing_whitespace_only():
    a = Candidate.from_source("class ModelNew:\n    x = 1\n")
    b = Candidate.from_source("class ModelNew:   \n    x = 1\n\n\n")
    c = Candidate.from_source("class ModelNew:\n    x = 2\n")
    assert a.id == b.id != c.id
    assert a.id == source_id(a.source)


def test_verdict_round_trips_through_json():
    verdict = Verdict(
        status=Status.OK,
        correct=True,
        runtime=TimingStats.from_samples([1.0, 2.0, 3.0]),
        reference_eager=TimingStats.from_samples([4.0, 4.0]),
        speedup=2.0,
        roofline_fraction=0.5,
        roofline_bound="memory",
        mismatch=Mismatch(output=0, where="trial 1 of 5", expected=1.5, got=2.0, worst_index=(3, 1), numel=4),
        error="Traceback ...",
        launches=(1, 1),
        phases={"candidate_trials": 0.25},
        reasons=("SUSPICIOUS_SPEEDUP: re-validated",),
        details={"protocol": 1},
    )
    data = json.loads(json.dumps(verdict.to_dict()))
    assert data["runtime_ms"] == 2.0 and data["reference_ms"] == 4.0
    assert data["mismatch"]["expected"] == 1.5 and data["launches"] == [1, 1]
    assert Verdict.from_dict(data) == verdict


def test_verdicts_stored_by_earlier_versions_load_into_the_typed_fields():
    stored = {
        "status": "incorrect",
        "details": {
            "protocol": 1,
            "mismatch": {"output": 0, "max_abs_error": 0.5, "expected_value": 1.0, "got_value": 1.5},
            "error": "boom",
            "launches": [2, 2],
            "phases": {"candidate_trials": 1.0},
            "roofline_bound": "compute",
        },
    }
    verdict = Verdict.from_dict(stored)
    assert (verdict.mismatch.expected, verdict.mismatch.got) == (1.0, 1.5)
    assert verdict.error == "boom" and verdict.launches == (2, 2) and verdict.roofline_bound == "compute"
    assert verdict.phases == {"candidate_trials": 1.0} and dict(verdict.details) == {"protocol": 1}


def test_model_objects_are_immutable():
    verdict = Verdict(status="incorrect", details={"a": [1, 2]})
    assert verdict.status is Status.INCORRECT
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.status = Status.OK  # type: ignore[misc]
    with pytest.raises(TypeError):
        verdict.details["a"] = 3
    assert isinstance(verdict.details, FrozenDict) and verdict.details["a"] == (1, 2)
    assert not verdict.accepted and verdict.score == 0.0


def test_timing_stats():
    stats = TimingStats.from_samples([5.0, 1.0, 3.0, 2.0])
    assert (stats.median_ms, stats.min_ms, stats.max_ms, stats.trials) == (2.5, 1.0, 5.0, 4)
