"""The engine loop with a throwaway backend: budgets, de-duplication, records, resume."""

from __future__ import annotations

import json
import sqlite3

import pytest

from ksmith_core.engine import MAX_REVALIDATIONS, Engine
from ksmith_core.errors import ConfigError, PluginError
from ksmith_core.loading import load_candidate, load_problem
from ksmith_core.run import RunConfig
from ksmith_core.store import RunStore

from .toy import speed_of


def start(toy_problem, tmp_path, **config):
    problem_path, seed_path = toy_problem
    problem = load_problem(problem_path)
    seed = load_candidate(seed_path)
    cfg = RunConfig(**{"proposer": "toy", "select": "greedy", **config})
    return Engine.start(problem, seed, cfg, tmp_path / "run"), seed


def test_evolve_spends_the_budget_and_climbs(toy_plugin, toy_problem, tmp_path):
    engine, seed = start(toy_problem, tmp_path, budget=7, proposals_per_step=2)
    result = engine.evolve(seed)
    engine.close()
    assert result.evaluations == 7
    assert result.stop_reason == "budget"
    assert result.best.verdict.speedup > 1.0
    assert result.best.candidate.id != seed.id
    assert len(set(toy_plugin.evaluated)) == len(toy_plugin.evaluated) - 1  # only the re-validation repeats
    assert toy_plugin.ended == ["budget"]
    assert toy_plugin.new_bests == sorted(toy_plugin.new_bests)


def test_every_evaluation_is_stored_with_lineage_and_trajectory(toy_plugin, toy_problem, tmp_path):
    engine, seed = start(toy_problem, tmp_path, budget=5)
    engine.evolve(seed)
    engine.close()
    db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT count(*) FROM verdicts").fetchone()[0] == 5
    assert db.execute("SELECT count(*) FROM lineage").fetchone()[0] == 4  # every child has its parent
    rows = [
        json.loads(r[0]) for r in db.execute("SELECT data FROM events WHERE kind='trajectory' ORDER BY seq")
    ]
    assert len(rows) == 5
    assert rows[0]["parent_id"] is None and rows[1]["parent_id"] == seed.id
    assert rows[1]["gain"] == pytest.approx(0.25)
    files = sorted((tmp_path / "run" / "candidates").glob("*.py"))
    assert len(files) == 5


def test_each_candidate_keeps_the_selection_it_was_proposed_from(toy_plugin, toy_problem, tmp_path):
    engine, seed = start(toy_problem, tmp_path, budget=6)
    engine.evolve(seed)
    engine.close()
    db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
    rows = db.execute("SELECT id, seq, meta FROM candidates ORDER BY seq").fetchall()
    seq_of = {cid: seq for cid, seq, _ in rows}
    metas = {cid: json.loads(meta) for cid, _, meta in rows}
    assert "selection_mode" not in metas[seed.id]  # the seed was not proposed
    children = [cid for cid, seq, _ in rows if seq > 1]
    assert all(metas[c]["selection_mode"] == "improve" for c in children)
    # The greedy selector shows the last accepted kernels as inspirations: each was stored before the child.
    shown = [(c, i) for c in children for i in metas[c].get("inspiration_ids", [])]
    assert shown and all(seq_of[i] < seq_of[c] for c, i in shown)


def test_patience_stops_a_run_that_does_not_improve(toy_plugin, toy_problem, tmp_path):
    toy_plugin.step = -0.01  # every child is slower than its parent
    engine, seed = start(toy_problem, tmp_path, budget=50, patience=3, proposals_per_step=1)
    result = engine.evolve(seed)
    engine.close()
    assert result.stop_reason == "patience"
    assert result.evaluations == 4  # the seed, then three without a new best
    assert result.best.candidate.id == seed.id


def test_a_proposer_with_nothing_new_exhausts_the_run(toy_plugin, toy_problem, tmp_path):
    toy_plugin.step = 0.0  # every proposal equals its parent, so nothing new ever arrives
    engine, seed = start(toy_problem, tmp_path, budget=20)
    result = engine.evolve(seed)
    engine.close()
    assert result.stop_reason == "exhausted"
    assert result.evaluations == 1


def test_gpu_minutes_budget(toy_plugin, toy_problem, tmp_path):
    # Each toy evaluation takes 0.5 s of "evaluation time"; 0.05 minutes = 3 s = 6 evaluations.
    engine, seed = start(toy_problem, tmp_path, budget=100, gpu_minutes=0.05)
    result = engine.evolve(seed)
    engine.close()
    assert result.stop_reason == "gpu_minutes"
    assert result.evaluations == 6


def test_failures_are_recorded_and_never_become_best(toy_plugin, toy_problem, tmp_path):
    toy_plugin.fail_every = 2
    engine, seed = start(toy_problem, tmp_path, budget=8)
    result = engine.evolve(seed)
    summary = engine.run.store.summary()
    engine.close()
    assert summary["statuses"].get("incorrect", 0) >= 2
    assert result.best.verdict.accepted


def test_resume_continues_to_the_same_total_without_repeats(toy_plugin, toy_problem, tmp_path):
    engine, seed = start(toy_problem, tmp_path, budget=4)
    engine.evolve(seed)
    first_ids = [s.candidate.id for s in engine.run.population]
    engine.close()

    resumed = Engine.resume(tmp_path / "run", overrides={"budget": 9})
    assert resumed.run.evaluations == 4  # replayed from the store
    result = resumed.evolve(None)
    ids = [s.candidate.id for s in resumed.run.population]
    resumed.close()
    assert result.evaluations == 9
    assert ids[:4] == first_ids
    assert len(set(ids)) == 9


def test_a_second_driver_on_the_same_run_is_refused(toy_plugin, toy_problem, tmp_path):
    engine, _ = start(toy_problem, tmp_path, budget=2)
    try:
        from ksmith_core.errors import RunStoreError

        with pytest.raises(RunStoreError, match="another ksmith process"):
            Engine.resume(tmp_path / "run")
    finally:
        engine.close()


def test_unknown_proposer_is_a_plugin_error(toy_plugin, toy_problem, tmp_path):
    problem_path, seed_path = toy_problem
    with pytest.raises(PluginError, match="unknown proposer 'nope'"):
        Engine.start(
            load_problem(problem_path), load_candidate(seed_path), RunConfig(proposer="nope"), tmp_path / "r"
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"budget": 0},
        {"islands": 0},
        {"gpu_minutes": -1.0},
        {"patience": 0},
        {"parallel": 0},
        {"stop_at_roofline": 0},
    ],
)
def test_bad_config_is_refused(kwargs):
    with pytest.raises(ConfigError):
        RunConfig(**kwargs)


def test_near_duplicates_are_never_evaluated(toy_plugin, register_near_duplicates, toy_problem, tmp_path):
    engine, seed = start(toy_problem, tmp_path, budget=6, proposals_per_step=1, proposer="recomment")
    result = engine.evolve(seed)
    sources = [s.candidate.source for s in engine.run.population]
    engine.close()
    # The proposer only ever re-comments its parent: nothing new reaches the evaluator.
    assert sources == [seed.source]
    assert result.stop_reason == "exhausted"


@pytest.fixture
def register_near_duplicates(toy_plugin):
    from ksmith_core import Proposer, hookimpl
    from ksmith_core.model import Proposal
    from ksmith_core.plugins import get_plugin_manager

    def recomment(run, selection):
        parent = selection.parents[0].candidate
        source = parent.source.replace("SPEED = ", f"# comment {run.rng.random()}\nSPEED = ", 1)
        return [Proposal(source=source, parent_ids=(parent.id,), edit="comment", proposer="toy")]

    class Recommenter:
        @hookimpl
        def ksmith_register_proposers(self, register):
            register(Proposer("recomment", recomment))

    pm = get_plugin_manager()
    pm.register(Recommenter(), name="recommenter")
    yield
    pm.unregister(name="recommenter")


def test_a_run_stops_near_the_roofline_and_says_how_much_was_left(toy_plugin, toy_problem, tmp_path):
    # Toy roofline fraction = speed / 4; the seed runs at speed 1 and each child gains 0.25.
    engine, seed = start(toy_problem, tmp_path, budget=40, stop_at_roofline=0.5, proposals_per_step=1)
    result = engine.evolve(seed)
    engine.close()
    assert result.stop_reason == "near_roofline"
    assert result.best.verdict.roofline_fraction >= 0.5
    assert result.evaluations < 40
    db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
    (end,) = [json.loads(r[0]) for r in db.execute("SELECT data FROM events WHERE kind='run_end'")]
    assert end["reason"] == "near_roofline"
    assert "of its memory roofline (--stop-at-roofline 0.5): at most 100% left to gain" in end["detail"]


def test_without_the_roofline_rule_the_run_spends_its_budget(toy_plugin, toy_problem, tmp_path):
    engine, seed = start(
        toy_problem, (tmp_path / "off"), budget=16, stop_at_roofline=None, proposals_per_step=1
    )
    result = engine.evolve(seed)
    engine.close()
    assert result.stop_reason == "budget" and result.evaluations == 16
    assert result.best.verdict.roofline_fraction >= 0.95  # past the default line, still running


def _speeds(scored_list):
    return [speed_of(s.candidate.source) for s in scored_list]


def test_a_best_that_fails_revalidation_is_set_aside_for_the_next_that_holds(
    toy_plugin, toy_problem, tmp_path
):
    # Speeds 1.0 .. 2.0; those at 1.75 and above pass once and fail the re-validation.
    toy_plugin.flaky_from = 1.75
    engine, seed = start(toy_problem, tmp_path, budget=5, proposals_per_step=1)
    result = engine.evolve(seed)
    engine.close()
    assert _speeds(result.set_aside) == [2.0, 1.75]
    assert speed_of(result.best.candidate.source) == 1.5
    assert result.revalidated.accepted
    assert toy_plugin.evaluated.count(result.best.candidate.id) == 2

    with RunStore.open(tmp_path / "run") as store:
        best, _ = store.best()
        summary = store.summary()
        (end,) = store.events("run_end")
        revalidated = [e["candidate_id"] for e in store.events("revalidation")]
    assert best.id == result.best.candidate.id
    assert summary["best"]["id"] == best.id
    assert sorted(summary["failed_revalidation"]) == sorted(s.candidate.id for s in result.set_aside)
    assert end["failed_revalidation"] == [s.candidate.id for s in result.set_aside]
    assert revalidated == [*end["failed_revalidation"], best.id]

    # Resumed, the set-aside candidates stay out of the running: the replayed best is the one that held.
    resumed = Engine.resume(tmp_path / "run", overrides={"budget": 5})
    assert resumed.run.best.candidate.id == best.id
    resumed.close()


def test_revalidation_stops_after_a_few_failures_and_says_the_best_was_not_revalidated(
    toy_plugin, toy_problem, tmp_path
):
    toy_plugin.flaky_from = 1.0  # nothing holds
    engine, seed = start(toy_problem, tmp_path, budget=5, proposals_per_step=1)
    result = engine.evolve(seed)
    engine.close()
    assert _speeds(result.set_aside) == [2.0, 1.75, 1.5][:MAX_REVALIDATIONS]
    assert result.revalidated is None
    assert speed_of(result.best.candidate.source) == 2.0 - 0.25 * MAX_REVALIDATIONS
    assert toy_plugin.evaluated.count(result.best.candidate.id) == 1  # not re-validated


def test_when_every_accepted_candidate_fails_revalidation_there_is_no_best(toy_plugin, toy_problem, tmp_path):
    toy_plugin.flaky_from = 1.0
    engine, seed = start(toy_problem, tmp_path, budget=1)
    result = engine.evolve(seed)
    engine.close()
    assert result.best is None and result.revalidated is None
    assert [s.candidate.id for s in result.set_aside] == [seed.id]
    with RunStore.open(tmp_path / "run") as store:
        assert store.best() is None
        summary = store.summary()
    assert summary["best"] is None
    assert "failed their re-validation" in summary["where_to_look"][0]
