"""The mutate proposer says why a generation came to nothing: ``run.note_dropped`` with a stable reason."""

from __future__ import annotations

import pytest

from ksmith_core.loading import load_problem
from ksmith_core.model import Candidate, Selection, Status, Verdict
from ksmith_core.run import Run, RunConfig
from ksmith_core.store import RunStore
from ksmith_mutate import plugin
from ksmith_mutate.edits import possible_edits

from .conftest import KERNELS, seed_source

OK = Verdict(status=Status.OK, correct=True, speedup=1.0)
BROKEN = Verdict(status=Status.COMPILE_ERROR, feedback="SyntaxError")


@pytest.fixture
def run(tmp_path):
    problem = load_problem(KERNELS / "softmax.py")
    store = RunStore.create(tmp_path / "run", problem.source, {}, {})
    yield Run(problem, RunConfig(proposer="mutate", proposals_per_step=3), store)
    store.close()


def test_a_parent_with_nothing_to_tune_is_a_no_edit_drop(run):
    junk = run.add(Candidate.from_source("def broken(:\n"), BROKEN)[0]
    assert plugin.propose(run, Selection(parents=(junk,), mode="fix")) == []
    assert run.dropped_counts() == {"no_edit": 1}
    [dropped] = run.take_dropped()
    assert (
        dropped["detail"] == f"{junk.candidate.id} offers nothing to tune (no tunable literal, or not Python)"
    )


def test_a_parent_whose_edits_were_all_evaluated_is_an_all_edits_tried_drop(run):
    seed = run.add(Candidate.from_source(seed_source("softmax")), OK)[0]
    edits = possible_edits(seed.candidate.source)
    for edit in edits[:-1]:
        run.add(Candidate.from_source(edit.source), OK)
    # One edit is left for three generations: one proposal, and the rest of the step is a drop.
    proposals = plugin.propose(run, Selection(parents=(seed,)))
    assert [p.source for p in proposals] == [edits[-1].source]
    assert run.dropped_counts() == {"all_edits_tried": 1}
    run.add(Candidate.from_source(edits[-1].source), OK)
    assert plugin.propose(run, Selection(parents=(seed,))) == []
    assert run.dropped_counts() == {"all_edits_tried": 2}
    assert all(
        d["detail"] == f"every edit of {seed.candidate.id} was already evaluated or proposed"
        for d in run.take_dropped()
    )


def test_a_full_step_drops_nothing(run):
    seed = run.add(Candidate.from_source(seed_source("softmax")), OK)[0]
    assert len(plugin.propose(run, Selection(parents=(seed,)))) == 3
    assert run.dropped_counts() == {} and run.take_dropped() == []
