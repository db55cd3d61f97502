"""Grid placement, island seeding, migration, and rebuilding the archive by replay."""

from __future__ import annotations

import random

from run_builders import broken_verdict, kernel_source, ok_verdict

from ksmith_core.model import Candidate, Status
from ksmith_core.run import Run
from ksmith_core.store import RunStore
from ksmith_mapelites import plugin as mapelites
from ksmith_mapelites.descriptors import describe


def test_seed_goes_to_every_island(make_run, source):
    sr = make_run(islands=3)
    seed = sr.seed(source(), ok_verdict(1.0))
    archive = sr.archive
    assert [[e.candidate_id for e in archive.elites(i)] for i in range(3)] == [[seed.id]] * 3
    records = sr.run.store.events("archive")
    assert [(r["island"], r["reason"], r["candidate"]) for r in records] == [
        (i, "seed", seed.id) for i in range(3)
    ]
    assert records[0]["cell"] == list(describe(seed.source).cell())
    assert sr.run.state("mapelites")["progress_text"] == "archive 3 cells (1/1/1), 3 islands"


def test_better_replaces_worse_in_the_same_cell_and_worse_does_not(make_run, source):
    sr = make_run(islands=1)
    seed = sr.seed(source(note="seed"), ok_verdict(1.0))
    better = sr.child(seed, source(note="faster, same cell"), ok_verdict(1.5))
    worse = sr.child(seed, source(note="slower, same cell"), ok_verdict(1.2))
    (elite,) = sr.archive.elites(0)
    assert elite.candidate_id == better.id and elite.score == 1.5
    placements = [(r["candidate"], r["replaced"]) for r in sr.run.store.events("archive")]
    assert placements == [(seed.id, None), (better.id, seed.id)]
    assert worse.id not in {r["candidate"] for r in sr.run.store.events("archive")}


def test_different_descriptors_land_in_different_cells(make_run, source):
    sr = make_run(islands=1)
    seed = sr.seed(source(block=1024, warps=4), ok_verdict(1.0))
    wider = sr.child(seed, source(block=2048, warps=4), ok_verdict(0.9))
    more_warps = sr.child(seed, source(block=1024, warps=8), ok_verdict(0.8))
    cells = {e.candidate_id: e.cell for e in sr.archive.elites(0)}
    assert set(cells) == {seed.id, wider.id, more_warps.id}
    assert len(set(cells.values())) == 3


def test_broken_candidates_never_enter_the_archive(make_run, source):
    sr = make_run(islands=2)
    seed = sr.seed(source(), ok_verdict(1.0))
    sr.child(seed, source(block=64), broken_verdict())
    sr.child(seed, source(block=128), broken_verdict(Status.INCORRECT, "max abs error 3.2"))
    assert sr.archive.filled() == 2  # the seed in each island
    assert sr.archive.fix_attempts == {}  # a broken child of a working parent is not a fix attempt


def test_children_land_in_their_own_island(make_run, source):
    sr = make_run(islands=2)
    seed = sr.seed(source(), ok_verdict(1.0))
    child = sr.child(seed, source(block=4096), ok_verdict(1.3), island=1)
    assert {e.candidate_id for e in sr.archive.elites(1)} == {seed.id, child.id}
    assert {e.candidate_id for e in sr.archive.elites(0)} == {seed.id}


def test_migration_copies_each_island_best_along_the_ring(make_run, source):
    sr = make_run(islands=3)
    sr.archive.migration_interval = 4
    seed = sr.seed(source(), ok_verdict(1.0))
    star0 = sr.child(seed, source(block=2048), ok_verdict(2.0), island=0)
    star1 = sr.child(seed, source(block=4096), ok_verdict(1.5), island=1)
    assert sr.archive.migrations == 0
    sr.child(seed, source(block=512), broken_verdict(), island=2)  # the 4th evaluation migrates
    migrated = [r for r in sr.run.store.events("archive") if r["reason"] == "migrated"]
    moves = {(r["migrated_from"], r["island"], r["candidate"]) for r in migrated}
    # Island 2 holds only the seed, native to island 0: it has no native elite to send.
    assert moves == {(0, 1, star0.id), (1, 2, star1.id)}
    assert sr.archive.migrations == 1
    assert star0.id in {e.candidate_id for e in sr.archive.elites(1)}
    assert star1.id in {e.candidate_id for e in sr.archive.elites(2)}

    # Migrants never migrate again: star0 now lives in island 1 too, but only island 1's natives move on.
    for k in range(4):
        sr.child(seed, source(block=32, note=str(k)), broken_verdict(), island=0)
    assert sr.archive.migrations == 2
    assert star0.id not in {e.candidate_id for e in sr.archive.elites(2)}


def _deterministic_search(sr, steps: int, seed: int) -> list[dict]:
    """Select, make a child with a pseudo-random configuration, judge it by its configuration, record it."""
    choose = random.Random(seed)
    live_records = list(
        sr.record(Candidate.from_source(sr_source(1024, 4, 2), proposer="seed"), ok_verdict(1.0))
    )
    for step in range(steps):
        selection = mapelites.select_from_islands(sr.run)
        parent = selection.parents[0].candidate
        block, warps, stages = (
            choose.choice([256, 512, 1024, 2048]),
            choose.choice([2, 4, 8]),
            choose.choice([1, 2, 3]),
        )
        text = sr_source(block, warps, stages, note=f"step {step}")
        if choose.random() < 0.25:
            verdict = broken_verdict()
        else:
            verdict = ok_verdict(0.5 + block / 2048 + warps / 16 + stages / 10)
        child = Candidate.from_source(
            text, parent_ids=(parent.id,), island=selection.island, proposer="mutate"
        )
        live_records.extend(sr.record(child, verdict))
    return live_records


def sr_source(block: int, warps: int, stages: int, note: str = "") -> str:
    return kernel_source(block=block, warps=warps, stages=stages, note=note)


def test_replay_rebuilds_the_identical_archive(make_run, tmp_path):
    sr = make_run("live", islands=3, budget=40)
    live_records = _deterministic_search(sr, steps=30, seed=7)
    live = sr.archive.snapshot()
    live_text = sr.run.state("mapelites")["progress_text"]
    assert sr.archive.migrations == 3 and sr.archive.filled() > 6
    assert live_records == [
        {k: v for k, v in r.items() if k not in ("seq", "ts", "candidate_id")}
        for r in sr.run.store.events("archive")
    ]
    store, problem, config = sr.run.store, sr.run.problem, sr.run.config
    store.close()

    with RunStore.open(tmp_path / "live", writable=True) as reopened:
        resumed = Run(problem, config, reopened, resumed=True)
        resumed.replaying = True
        for _, candidate, verdict in reopened.evaluations():
            resumed.add(candidate, verdict)
            mapelites.ksmith_archive(run=resumed, candidate=candidate, verdict=verdict)
        resumed.replaying = False
        assert mapelites.archive_of(resumed).snapshot() == live
        assert resumed.state("mapelites")["progress_text"] == live_text
