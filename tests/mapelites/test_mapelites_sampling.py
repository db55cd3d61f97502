"""Parent sampling, inspirations, island turns and fix mode, with a seeded random generator."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from run_builders import broken_verdict, ok_verdict

from ksmith_core.capabilities import Selector
from ksmith_core.engine import selector_for
from ksmith_core.model import Candidate, Status
from ksmith_core.registry import lookup
from ksmith_mapelites import plugin as mapelites
from ksmith_mapelites.sampling import MAX_FIX_ATTEMPTS, parent_weights, sample_parent


def test_weights_are_a_sigmoid_of_the_normalised_score_over_one_plus_children():
    assert parent_weights([], []) == []
    assert parent_weights([1.0, 1.0, 1.0], [0, 0, 0]) == [0.5, 0.5, 0.5]
    scores = [1.0, 2.0, 3.0]  # median 2, median absolute deviation 1
    weights = parent_weights(scores, [0, 0, 0], sharpness=2.0)
    expected = [1 / (1 + math.exp(2.0)), 0.5, 1 / (1 + math.exp(-2.0))]
    assert weights == pytest.approx(expected)
    assert parent_weights(scores, [0, 3, 0], sharpness=2.0)[1] == pytest.approx(0.5 / 4)


def test_weights_do_not_depend_on_the_scale_of_scores():
    assert parent_weights([1.0, 2.0, 4.0], [0, 0, 0]) == pytest.approx(
        parent_weights([10.0, 20.0, 40.0], [0, 0, 0])
    )


def test_zero_spread_falls_back_to_the_range():
    weights = parent_weights([1.0, 1.0, 1.0, 3.0], [0, 0, 0, 0])
    assert weights[3] > weights[0] == weights[1] == weights[2]


def _island_with_three_elites(make_run, source):
    sr = make_run(islands=1)
    seed = sr.seed(source(block=1024), ok_verdict(1.0))
    mid = sr.child(seed, source(block=2048), ok_verdict(1.5))
    top = sr.child(seed, source(block=4096), ok_verdict(2.0))
    return sr, seed, mid, top


def test_sampling_follows_the_weights_and_is_reproducible(make_run, source):
    sr, seed, mid, top = _island_with_three_elites(make_run, source)
    elites = sr.archive.elites(0)
    draws = [sample_parent(sr.run, elites, random.Random(3)).candidate_id for _ in range(5)]
    assert len(set(draws)) == 1  # same seed, same parent
    rng = random.Random(11)
    counts = Counter(sample_parent(sr.run, elites, rng).candidate_id for _ in range(4000))
    # The seed has two children; weights 0.1192/3, 0.5, 0.8808 -> shares 0.028, 0.352, 0.620.
    assert counts[seed.id] < counts[mid.id] < counts[top.id]
    assert 0.57 < counts[top.id] / 4000 < 0.67
    assert 0.015 < counts[seed.id] / 4000 < 0.045


def test_many_children_make_a_parent_yield(make_run, source):
    sr, seed, mid, top = _island_with_three_elites(make_run, source)
    for k in range(12):
        sr.child(top, source(block=4096, note=f"no gain {k}"), ok_verdict(1.9))
    rng = random.Random(5)
    counts = Counter(sample_parent(sr.run, sr.archive.elites(0), rng).candidate_id for _ in range(3000))
    assert counts[mid.id] > counts[top.id]


def test_registered_as_the_default_selector(make_run, source):
    assert lookup(Selector, "mapelites") is mapelites.MAPELITES
    assert selector_for(None) is mapelites.MAPELITES and selector_for("greedy").name == "greedy"
    sr = make_run(islands=2, select="mapelites")
    sr.seed(source(), ok_verdict(1.0))
    assert mapelites.select_from_islands(sr.run).mode == "improve"


def test_islands_take_turns_and_parents_come_from_the_island(make_run, source):
    sr = make_run(islands=3)
    seed = sr.seed(source(), ok_verdict(1.0))
    only_in_2 = sr.child(seed, source(block=64), ok_verdict(3.0), island=2)
    islands, parents = [], Counter()
    for _ in range(30):
        selection = mapelites.select_from_islands(sr.run)
        islands.append(selection.island)
        parents[(selection.island, selection.parents[0].candidate.id)] += 1
    assert islands[:6] == [2, 0, 1, 2, 0, 1]  # the turn starts at evaluations % islands = 2
    assert {p for (island, p) in parents if island != 2} == {seed.id}
    assert (2, only_in_2.id) in parents


def test_inspirations_are_the_island_best_and_unlike_elites(make_run, source):
    sr = make_run(islands=1)
    seed = sr.seed(source(block=1024, warps=4), ok_verdict(1.0))
    best = sr.child(seed, source(block=1024, warps=8), ok_verdict(2.0))
    near = sr.child(seed, source(block=2048, warps=4), ok_verdict(1.1))
    far = sr.child(seed, source(block=256, warps=2, stages=4, hints=True), ok_verdict(0.7))
    for _ in range(20):
        selection = mapelites.select_from_islands(sr.run)
        parent = selection.parents[0].candidate.id
        shown = [s.candidate.id for s in selection.inspirations]
        assert parent not in shown and len(shown) == len(set(shown))
        if parent != best.id:
            assert shown[0] == best.id
        if parent == seed.id:
            assert shown == [best.id, far.id, near.id]  # far differs in 4 descriptors, near in 1


def test_fix_mode_when_nothing_works_and_attempts_are_capped(make_run, source):
    sr = make_run(islands=2)
    seed = sr.seed(source(), broken_verdict(error="NameError: name 'tl' is not defined"))
    selection = mapelites.select_from_islands(sr.run)
    assert selection.mode == "fix" and selection.parents[0].candidate.id == seed.id
    assert "NameError" in selection.parents[0].feedback

    # A proposer that never manages a fix: the run must run out of lines to fix, not loop forever.
    steps = 0
    while selection.parents:
        parent = selection.parents[0].candidate
        assert selection.mode == "fix"
        child = Candidate.from_source(
            source(block=32, note=f"attempt {steps}"), parent_ids=(parent.id,), island=selection.island
        )
        sr.record(child, broken_verdict())
        steps += 1
        assert steps < 100
        selection = mapelites.select_from_islands(sr.run)
    assert max(sr.archive.fix_attempts.values()) <= MAX_FIX_ATTEMPTS
    assert sr.archive.fix_attempts[seed.id] == MAX_FIX_ATTEMPTS


def test_a_successful_fix_seeds_every_island(make_run, source):
    sr = make_run(islands=3)
    seed = sr.seed(source(), broken_verdict())
    selection = mapelites.select_from_islands(sr.run)
    fixed = Candidate.from_source(source(note="fixed"), parent_ids=(seed.id,), island=selection.island)
    sr.record(fixed, ok_verdict(1.2))
    assert [[e.candidate_id for e in sr.archive.elites(i)] for i in range(3)] == [[fixed.id]] * 3
    assert mapelites.select_from_islands(sr.run).mode == "improve"


def test_broken_latest_child_is_sometimes_handed_back_while_budget_lasts(make_run, source):
    sr = make_run(islands=2, budget=100, seed=1)
    seed = sr.seed(source(), ok_verdict(1.0))
    broken = sr.child(
        seed, source(block=128), broken_verdict(Status.INCORRECT, "max abs error 0.5"), island=1
    )
    selections = [mapelites.select_from_islands(sr.run) for _ in range(400)]
    fixes = [s for s in selections if s.mode == "fix"]
    assert 0.08 < len(fixes) / 400 < 0.25
    assert all(s.parents[0].candidate.id == broken.id and s.island == 1 for s in fixes)
    assert all(s.inspirations[0].candidate.id == seed.id for s in fixes)

    spent = make_run("spent", islands=2, budget=12, seed=1)
    seed = spent.seed(source(), ok_verdict(1.0))
    for k in range(9):
        spent.child(seed, source(note=str(k)), ok_verdict(0.9))
    spent.child(seed, source(block=128), broken_verdict())  # 11 of 12 evaluations spent
    assert all(mapelites.select_from_islands(spent.run).mode == "improve" for _ in range(200))


def test_a_fresh_branch_instead_of_a_broken_kernel_counts_as_a_fix_attempt(make_run, source):
    sr = make_run(islands=1)
    seed = sr.seed(source(), ok_verdict(1.0))
    broken = sr.child(seed, source(block=64), broken_verdict())
    assert sr.archive.fix_attempts[broken.id] == 0
    branch = Candidate.from_source(
        source(block=128),
        parent_ids=(seed.id,),
        proposer="mutate",
        meta={"mode": "fix", "instead_of": broken.id},
    )
    sr.record(branch, broken_verdict())
    repair = Candidate.from_source(source(block=32), parent_ids=(broken.id,), proposer="mutate")
    sr.record(repair, broken_verdict())
    assert sr.archive.fix_attempts[broken.id] == 2
    assert sr.archive.fix_attempts[seed.id] == 0


def test_the_engine_uses_the_selector_the_run_names(make_run, source):
    sr = make_run(islands=2)
    sr.seed(source(), ok_verdict(1.0))
    selection = selector_for(sr.run.config.select).select(sr.run)
    assert selection.mode == "improve"
    assert "next_island" in sr.run.state("mapelites")  # the default selector answered

    greedy = make_run("greedy", islands=2, select="greedy")
    greedy.seed(source(), ok_verdict(1.0))
    assert selector_for(greedy.run.config.select).select(greedy.run) is not None
    assert "next_island" not in greedy.run.state("mapelites")
