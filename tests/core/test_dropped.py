"""Generations that never reach evaluation: counted by reason, stored as ``dropped`` events, explained.

A throwaway proposer (``tests/core/dropper.py``) notes its own drops and proposes duplicates; the toy
backend judges what gets through. Everything else is real: the engine, the SQLite run store, resume after a
stopped run and after a SIGKILL, and the command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from ksmith_core.engine import MAX_BARREN_STEPS, Engine
from ksmith_core.loading import load_candidate, load_problem
from ksmith_core.plugins import get_plugin_manager
from ksmith_core.run import Run, RunConfig
from ksmith_core.store import RunStore

from .dropper import DropperPlugin

REPO = Path(__file__).resolve().parents[2]
PLUGINS = "tests.core.toy:PLUGIN,tests.core.dropper:PLUGIN"


@pytest.fixture
def dropper(toy_plugin):
    pm = get_plugin_manager()
    pm.register(DropperPlugin(), name="dropper")
    try:
        yield
    finally:
        pm.unregister(name="dropper")


def start(toy_problem, run_dir, **config):
    problem_path, seed_path = toy_problem
    seed = load_candidate(seed_path)
    cfg = RunConfig(**{"proposer": "dropper", "select": "greedy", "revalidate_best": False, **config})
    return Engine.start(load_problem(problem_path), seed, cfg, run_dir), seed


def stored(run_dir):
    with RunStore.open(run_dir) as store:
        return store.events("dropped"), store.summary()


def test_every_drop_is_stored_by_reason_with_who_dropped_it(dropper, toy_problem, tmp_path):
    engine, seed = start(toy_problem, tmp_path / "run", budget=4)
    result = engine.evolve(seed)
    in_memory = engine.run.dropped_counts()
    engine.close()

    # Two steps: each notes one unusable generation and proposes a duplicate, a near duplicate and two new
    # kernels; the second step has room for one of them only.
    assert result.evaluations == 4 and result.stop_reason == "budget"
    expected = {"duplicate": 2, "near_duplicate": 2, "no_edit_block": 2, "over_budget": 1}
    assert in_memory == expected
    events, summary = stored(tmp_path / "run")
    assert {reason: sum(e["reason"] == reason for e in events) for reason in expected} == expected
    by = {e["reason"]: e["by"] for e in events}
    assert by == {
        "no_edit_block": "proposer",
        "duplicate": "engine",
        "near_duplicate": "engine",
        "over_budget": "engine",
    }
    assert all(e["proposer"] == "dropper" and e["detail"] for e in events)
    assert [e["evaluations"] for e in events if e["reason"] == "no_edit_block"] == [1, 3]
    assert events[0]["detail"] == f"from {seed.id}: the answer held no edit"

    assert summary["dropped"]["total"] == 7
    assert summary["dropped"]["by_reason"] == expected  # most frequent first, then by name
    assert list(summary["dropped"]["by_reason"]) == [
        "duplicate",
        "near_duplicate",
        "no_edit_block",
        "over_budget",
    ]
    assert summary["dropped"]["latest"]["duplicate"].endswith("was proposed earlier in the run")
    assert summary["stop_explanation"] == (
        "stopped: budget (4 of 4 evaluations) -- "
        "7 dropped: 2 duplicate, 2 near duplicate, 2 no edit block, 1 past the budget"
    )
    assert summary["where_to_look"] == []  # it found a faster kernel: nothing to explain
    # Existing fields are all still there.
    for key in (
        "run",
        "path",
        "problem",
        "proposer",
        "budget",
        "evaluations",
        "statuses",
        "best",
        "finished",
    ):
        assert key in summary


def test_counts_are_rebuilt_on_resume_and_keep_adding_up(dropper, toy_problem, tmp_path):
    engine, seed = start(toy_problem, tmp_path / "run", budget=4)
    engine.evolve(seed)
    engine.close()

    resumed = Engine.resume(tmp_path / "run", overrides={"budget": 6})
    try:
        assert resumed.run.dropped_counts() == {
            "duplicate": 2,
            "near_duplicate": 2,
            "no_edit_block": 2,
            "over_budget": 1,
        }
        result = resumed.evolve(None)
        in_memory = resumed.run.dropped_counts()
    finally:
        resumed.close()
    assert result.evaluations == 6
    _, summary = stored(tmp_path / "run")
    assert (
        in_memory
        == summary["dropped"]["by_reason"]
        == {
            "duplicate": 3,
            "near_duplicate": 3,
            "no_edit_block": 3,
            "over_budget": 1,
        }
    )


def test_a_proposer_that_says_nothing_is_explained_by_the_engine(dropper, toy_problem, tmp_path):
    engine, seed = start(toy_problem, tmp_path / "run", budget=20, proposer="silent")
    result = engine.evolve(seed)
    engine.close()
    assert result.stop_reason == "exhausted" and result.evaluations == 1
    _, summary = stored(tmp_path / "run")
    assert summary["dropped"]["by_reason"] == {"no_proposal": MAX_BARREN_STEPS}
    assert (
        summary["dropped"]["latest"]["no_proposal"] == f"the silent proposer returned nothing for {seed.id}"
    )
    assert summary["stop_explanation"] == (
        f"stopped: exhausted (no new candidate in {MAX_BARREN_STEPS} steps in a row) -- "
        f"{MAX_BARREN_STEPS} dropped: {MAX_BARREN_STEPS} no proposal"
    )
    run = summary["path"]
    assert summary["where_to_look"] == [
        "no candidate beat the seed: none was evaluated after it",
        f"{MAX_BARREN_STEPS} generations never reached evaluation: `ksmith show {run}` gives the latest detail "
        "of each reason; each is a `dropped` event in run.sqlite (`ksmith -v evolve` logs them)",
    ]


def test_a_selector_with_no_parent_is_explained(dropper, toy_problem, tmp_path):
    engine, seed = start(toy_problem, tmp_path / "run", budget=20, select="nobody")
    result = engine.evolve(seed)
    engine.close()
    assert result.stop_reason == "exhausted"
    events, summary = stored(tmp_path / "run")
    assert [(e["reason"], e["by"], e["detail"]) for e in events] == [
        ("no_selection", "engine", "the nobody selector offered no parent")
    ]
    assert summary["stop_explanation"] == (
        "stopped: exhausted (the selector offered no parent) -- 1 dropped: 1 no parent to select"
    )


def test_nothing_accepted_says_where_to_look(dropper, toy_problem, tmp_path):
    problem_path, seed_path = toy_problem
    broken = tmp_path / "broken.py"
    broken.write_text(seed_path.read_text() + '\nFAIL = "incorrect"\n')
    cfg = RunConfig(proposer="silent", select="greedy", budget=5)
    engine = Engine.start(load_problem(problem_path), load_candidate(broken), cfg, tmp_path / "run")
    engine.evolve(load_candidate(broken))
    engine.close()
    _, summary = stored(tmp_path / "run")
    assert summary["best"] is None
    assert summary["where_to_look"][0] == (
        f"no candidate was accepted (1 of 1 evaluations failed): `ksmith report {summary['path']}` shows the "
        "latest error of each status"
    )


def test_note_dropped_is_thread_safe_and_queues_until_taken(tmp_path):
    store = RunStore.create(tmp_path / "run", "class Model: pass\n", {"problem": "p"}, {})
    from ksmith_core.model import Problem

    run = Run(Problem(name="p", path=tmp_path / "run" / "problem.py", source=""), RunConfig(), store)
    threads = [
        threading.Thread(
            target=lambda: [run.note_dropped("edit_not_applied", "x" * 2000) for _ in range(200)]
        )
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert run.dropped_counts() == {"edit_not_applied": 1600}
    taken = run.take_dropped()
    assert len(taken) == 1600 and run.take_dropped() == []
    assert len(taken[0]["detail"]) == 500  # details are cut, the counts stay
    assert run.dropped_counts() == {"edit_not_applied": 1600}
    store.close()


# -- the command line, and a driver killed with SIGKILL ----------------------------------------------------------


def ksmith(ksmith_cmd, *args, env_extra=None):
    env = {**os.environ, "KSMITH_PLUGIN_MODULES": PLUGINS, **(env_extra or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [*ksmith_cmd, *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )


def test_drops_survive_sigkill_and_show_explains_them(ksmith_cmd, toy_problem, tmp_path):
    problem, _ = toy_problem
    run_dir = tmp_path / "run"
    evolve = ["evolve", problem, "--proposer", "dropper", "--select", "greedy", "--device", "cpu"]
    killed = ksmith(
        ksmith_cmd, *evolve, "--budget", "10", "--run-dir", run_dir, env_extra={"DROPPER_KILL_AT": "3"}
    )
    assert killed.returncode == -9, killed.stderr  # killed at its second step, after the first was committed

    shown = json.loads(ksmith(ksmith_cmd, "show", run_dir, "--json").stdout)
    assert shown["evaluations"] == 3 and not shown["finished"]
    assert shown["dropped"]["by_reason"] == {"duplicate": 1, "near_duplicate": 1, "no_edit_block": 1}
    assert shown["stop_explanation"] == (
        "not finished (still running, or killed) -- 3 dropped: 1 duplicate, 1 near duplicate, 1 no edit block"
    )

    resumed = ksmith(ksmith_cmd, "evolve", "--resume", run_dir, "--budget", "5", "--json")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["evaluations"] == 5
    assert summary["dropped"]["by_reason"] == {"duplicate": 2, "near_duplicate": 2, "no_edit_block": 2}
    assert summary["stop_explanation"] == (
        "stopped: budget (5 of 5 evaluations) -- 6 dropped: 2 duplicate, 2 near duplicate, 2 no edit block"
    )

    text = ksmith(ksmith_cmd, "show", run_dir)
    assert text.returncode == 0, text.stderr
    assert "stopped    budget (5 of 5 evaluations) -- 6 dropped: 2 duplicate" in text.stdout
    assert "dropped       2 no edit block  (latest: from " in text.stdout


def test_evolve_prints_why_a_barren_run_stopped_and_where_to_look(ksmith_cmd, toy_problem):
    problem, _ = toy_problem
    proc = ksmith(ksmith_cmd, "evolve", problem, "--proposer", "silent", "--budget", "5", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].strip() == (
        f"stopped: exhausted (no new candidate in {MAX_BARREN_STEPS} steps in a row) -- "
        f"{MAX_BARREN_STEPS} dropped: {MAX_BARREN_STEPS} no proposal"
    )
    assert "no candidate beat the seed: none was evaluated after it" in proc.stdout
    assert "generations never reached evaluation: `ksmith show " in proc.stdout
    # Off a terminal, each step that brought nothing is a line on stderr, with what it dropped.
    assert proc.stderr.count("nothing new this step, dropped: 1 no proposal") == MAX_BARREN_STEPS


def test_the_live_view_counts_drops_by_reason_as_they_happen(dropper, toy_problem, tmp_path):
    from rich.console import Console

    from ksmith_core.progress import EvolveProgress

    progress = EvolveProgress(enabled=False)
    problem_path, seed_path = toy_problem
    seed = load_candidate(seed_path)
    cfg = RunConfig(proposer="dropper", select="greedy", budget=4, revalidate_best=False)
    engine = Engine.start(load_problem(problem_path), seed, cfg, tmp_path / "run", on_event=progress.on_event)
    progress.attach(engine.run)
    steps = []
    engine.on_event = lambda kind, data: (steps.append(kind), progress.on_event(kind, data))
    engine.evolve(seed)
    engine.close()
    assert steps.count("step") == 2
    console = Console(record=True, width=200)
    console.print(progress._render())
    assert "dropped        7: 2 duplicate, 2 near duplicate, 2 no edit block, 1 past the budget" in (
        console.export_text()
    )
