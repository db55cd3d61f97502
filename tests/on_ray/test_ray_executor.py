"""The ``ray`` executor on a real local Ray cluster (2 CPUs, started once for this module).

What the cluster runs here: CPU actors (the cluster has no GPU), the toy and crashy test backends, and the real
Triton backend under the interpreter. GPU actors, several GPUs and several nodes are not exercised.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from ksmith_core.capabilities import EvalJob
from ksmith_core.engine import Engine, evaluate_all
from ksmith_core.errors import PluginError
from ksmith_core.loading import load_candidate, load_problem
from ksmith_core.model import Candidate, EvalOptions, Status
from ksmith_core.run import RunConfig
from tests.core.toy import write_toy_problem
from tests.on_ray import crashy
from tests.on_ray.cluster import ACTOR_PLUGINS, REPO, start_cluster

pytestmark = pytest.mark.slow


def evolve(problem_path: Path, seed_path: Path, run_dir: Path, **config) -> list[tuple[str, str]]:
    """Run the engine to its budget; the stored evaluations as (candidate id, status), in order."""
    cfg = RunConfig(select="greedy", seed=7, **config)
    seed = load_candidate(seed_path)
    engine = Engine.start(load_problem(problem_path), seed, cfg, run_dir)
    try:
        engine.evolve(seed)
        return [(c.id, v.status.value) for _, c, v in engine.run.store.evaluations()]
    finally:
        engine.close()


def job(source: str, problem_dir: Path, **options) -> EvalJob:
    problem = load_problem(crashy.write_problem(problem_dir)[0])
    return EvalJob(problem, Candidate.from_source(source), EvalOptions(**options))


def pool():
    from ksmith_ray.executor import current_pool

    found = current_pool()
    assert found is not None
    return found


# -- the same verdicts as the local executor --------------------------------------------------------------


def test_a_ray_run_gives_the_verdicts_of_a_local_run(ray_cluster, test_plugins, tmp_path):
    toy, _ = test_plugins
    problem, seed = write_toy_problem(tmp_path / "problems")
    local = evolve(problem, seed, tmp_path / "local", proposer="toy", budget=8, parallel=2)
    toy.evaluated.clear()
    on_ray = evolve(problem, seed, tmp_path / "ray", proposer="toy", budget=8, parallel=2, executor="ray")

    assert on_ray == local
    assert {status for _, status in local} == {"ok", "incorrect"}
    # Every evaluation of the steps ran in an actor; the driver only re-validated the best at the end.
    assert len(toy.evaluated) <= 1
    assert 1 <= pool().size() <= 2  # --parallel 2, on a cluster of 2 CPUs
    stored = json.loads((tmp_path / "ray" / "manifest.json").read_text())["config"]
    assert stored["executor"] == "ray" and stored["executor_options"] == {}


def test_a_real_triton_evaluation_runs_inside_an_actor(ray_cluster, tmp_path, data_dir):
    # The problem's file is not on the actor's disk (nor anywhere): it is judged from the source it carries.
    problem = replace(load_problem(data_dir / "vector_add.py"), path=tmp_path / "nowhere" / "vector_add.py")
    seed = load_candidate(data_dir / "vector_add.seed.py")
    wrong = Candidate.from_source(seed.source.replace("x + y, mask=mask", "x - y, mask=mask"))
    assert wrong.source != seed.source
    options = EvalOptions(
        device="cpu", correctness_trials=2, timing_trials=2, timeout_s=120.0, cache_dir=str(tmp_path / "ref")
    )
    jobs = [EvalJob(problem, seed, options), EvalJob(problem, wrong, options)]

    on_ray = evaluate_all(jobs, 2, "ray")
    local = evaluate_all(jobs, 2, "local")

    assert [v.status for v in on_ray] == [v.status for v in local] == [Status.OK, Status.INCORRECT]
    assert on_ray[0].interpreted and on_ray[0].speedup is not None
    assert on_ray[1].mismatch is not None and on_ray[1].reasons[0].startswith("MISMATCH")


# -- faults -----------------------------------------------------------------------------------------------


def test_an_actor_dying_mid_run_loses_nothing(ray_cluster, test_plugins, tmp_path):
    _, plugin = test_plugins
    problem, seed = crashy.write_problem(tmp_path / "problems")
    # The 2nd candidate kills the actor evaluating it once; the 5th kills every actor it is given.
    plugin.extras = {2: f'KILL = "once:{tmp_path / "died-once"}"', 5: 'KILL = "always"'}
    lost_before = pool().lost if _has_pool() else 0

    rows = evolve(problem, seed, tmp_path / "run", proposer="crashy", budget=8, parallel=2, executor="ray")

    assert len(rows) == 8 and len({cid for cid, _ in rows}) == 8  # every evaluation, each once
    statuses = [status for _, status in rows]
    assert statuses[2] == "ok"  # its first actor died; another one judged it
    assert statuses[5] == "crashed" and statuses.count("crashed") == 1
    assert statuses.count("ok") == 7  # the run went on after both
    assert (tmp_path / "died-once").exists()
    assert pool().lost - lost_before == 1 + 3  # once, then the three attempts of the killer


def test_a_job_that_kills_every_worker_is_answered_worker_lost(ray_cluster, test_plugins, tmp_path):
    from ksmith_ray.executor import MAX_ATTEMPTS

    killer = crashy.seed_source() + '\nKILL = "always"\n'
    fine = crashy.with_speed(crashy.seed_source(), 2.0)
    jobs = [job(killer, tmp_path / "p"), job(fine, tmp_path / "p")]
    lost_before = pool().lost if _has_pool() else 0

    crashed, ok = evaluate_all(jobs, 2, "ray")

    assert crashed.status is Status.CRASHED
    assert crashed.reasons[0].startswith(
        f"WORKER_LOST: the Ray worker evaluating this candidate died {MAX_ATTEMPTS} times"
    )
    assert crashed.details["attempts"] == MAX_ATTEMPTS
    assert crashed.feedback.startswith("status: crashed")
    assert ok.status is Status.OK and ok.speedup == 2.0
    assert pool().lost - lost_before == MAX_ATTEMPTS


def test_an_actor_killed_from_outside_mid_evaluation_is_replaced(ray_cluster, test_plugins, tmp_path):
    slow = crashy.seed_source(sleep=3.0)
    results = []
    worker = threading.Thread(
        target=lambda: results.extend(evaluate_all([job(slow, tmp_path / "p")], 1, "ray"))
    )
    worker.start()
    deadline = time.monotonic() + 60
    while not pool().busy_actors() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # inside evaluate now
    lost_before = pool().lost
    (victim,) = pool().busy_actors()
    ray_cluster.kill(victim)
    worker.join(timeout=120)

    assert [v.status for v in results] == [Status.OK]
    assert pool().lost == lost_before + 1


def test_an_error_of_the_problem_is_raised_as_with_the_local_executor(ray_cluster, test_plugins, tmp_path):
    from ksmith_ray.executor import run_on_ray

    problem = replace(load_problem(crashy.write_problem(tmp_path / "p")[0]), backend="nope")
    jobs = [EvalJob(problem, Candidate.from_source(crashy.seed_source()), EvalOptions())]
    with pytest.raises(PluginError, match=r"^unknown backend 'nope' \(registered: .*crashy") as on_ray:
        run_on_ray(jobs, 1, {})
    with pytest.raises(PluginError) as local:
        evaluate_all(jobs, 1, "local")
    assert type(on_ray.value) is type(local.value) and str(on_ray.value) == str(local.value)
    assert pool().busy_actors() == []  # the actor is back in the pool, not lost


def test_no_room_for_an_actor(ray_cluster, monkeypatch):
    from ksmith_ray import executor

    executor.close_pool()  # free the cluster's two CPUs
    pool = executor.ActorPool(ray_cluster, ("test",))
    first = pool.acquire()  # there is room for this one (started within the normal timeout: a busy machine)
    monkeypatch.setattr(executor, "ACTOR_START_TIMEOUT_S", 2.0)  # the next start gives up quickly
    pool._options = {**pool._options, "resources": {"no-such-thing": 1}}  # and for no other
    second: list = []
    waiter = threading.Thread(target=lambda: second.append(pool.acquire()))
    waiter.start()
    time.sleep(4)  # its start timed out; it waits for the actor there is
    assert pool.capacity == 1 and not second
    pool.release(first)
    waiter.join(timeout=30)
    assert second == [first]

    empty = executor.ActorPool(ray_cluster, ("test",))
    empty._options = pool._options
    with pytest.raises(
        executor.RayClusterError, match=r"^no Ray evaluation actor could start: .*no free CPU"
    ):
        empty.acquire()
    pool.close()


def test_an_actor_takes_as_many_jobs_as_it_has_slots(ray_cluster, test_plugins, tmp_path):
    from ksmith_ray import executor

    executor.close_pool()
    narrow = executor.ActorPool(ray_cluster, ("test",), slots=2)
    narrow.capacity = 1  # one actor, two slots
    first, second = narrow.acquire(), narrow.acquire()
    assert first is second and narrow.busy_actors() == [first]
    third: list = []
    waiter = threading.Thread(target=lambda: third.append(narrow.acquire()))
    waiter.start()
    time.sleep(1)
    assert not third  # both slots taken: the third job waits
    narrow.release(first)
    waiter.join(timeout=30)
    assert third == [first]
    narrow.close()

    # Through the executor, with --ray-slots: the verdicts are each job's own, in order.
    speeds = [1.0, 1.5, 2.0, 2.5]
    jobs = [job(crashy.with_speed(crashy.seed_source(sleep=0.2), s), tmp_path / "p") for s in speeds]
    verdicts = evaluate_all(jobs, 4, "ray", {"slots": 2})
    assert [v.speedup for v in verdicts] == speeds
    assert pool().slots == 2 and pool().size() <= 2
    executor.close_pool()


# -- threads ----------------------------------------------------------------------------------------------


def test_threads_calling_run_at_once_share_one_pool(ray_cluster, test_plugins, tmp_path):
    speeds = {name: [1.0 + name + i / 10 for i in range(3)] for name in range(4)}
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def caller(name: int) -> None:
        try:
            jobs = [
                job(crashy.with_speed(crashy.seed_source(sleep=0.2), s), tmp_path / f"p{name}")
                for s in speeds[name]
            ]
            results[name] = evaluate_all(jobs, 2, "ray")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(n,)) for n in speeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)

    assert not errors
    assert {n: [v.speedup for v in results[n]] for n in speeds} == speeds  # each its own, in order
    assert pool().size() <= 2  # one pool, as many actors as the cluster has CPUs


# -- the command line: --ray-address, kill -9 of the driver, --resume ---------------------------------------


def stored(run_dir: Path) -> list[str]:
    db = run_dir / "run.sqlite"
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        query = "SELECT c.id FROM candidates c JOIN verdicts v ON v.candidate_id = c.id ORDER BY c.seq"
        return [r[0] for r in conn.execute(query)]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def test_kill_9_of_the_driver_then_resume(ray_cluster, tmp_path):
    from ksmith_ray.executor import close_pool

    close_pool()  # this process's actors hold the cluster's two CPUs; the CLI's driver needs them
    address = ray_cluster.get_runtime_context().gcs_address
    problem, _ = crashy.write_problem(tmp_path / "problems", sleep=1.0)
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "KSMITH_PLUGIN_MODULES": ACTOR_PLUGINS,
        "KSMITH_RUNS_DIR": str(tmp_path / "runs"),
    }
    env.pop("RAY_ADDRESS", None)
    cli = [sys.executable, "-c", "from ksmith_core.cli import main; main()"]
    common = ["--executor", "ray", "--ray-address", address]
    first = subprocess.Popen(
        [
            *cli,
            "evolve",
            str(problem),
            "--proposer",
            "toy",
            "--budget",
            "8",
            "--run-dir",
            str(run_dir),
            *common,
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while len(stored(run_dir)) < 3 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert first.poll() is None, first.stderr.read()
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    before = stored(run_dir)
    assert 3 <= len(before) < 8

    resumed = subprocess.run(
        [*cli, "evolve", "--resume", str(run_dir), "--json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["evaluations"] == 8
    after = stored(run_dir)
    assert len(after) == len(set(after)) == 8 and after[: len(before)] == before
    config = json.loads((run_dir / "manifest.json").read_text())["config"]
    assert config["executor"] == "ray" and config["executor_options"] == {"address": address}


def test_a_new_connection_gets_a_new_pool(ray_cluster, test_plugins, tmp_path):
    one = [job(crashy.seed_source(), tmp_path / "p")]
    assert evaluate_all(one, 1, "ray")[0].status is Status.OK
    old = pool()
    ray_cluster.shutdown()  # the old pool's actors end with their cluster
    start_cluster(ray_cluster)

    assert evaluate_all(one, 1, "ray")[0].status is Status.OK
    assert pool() is not old and pool().lost == 0


def _has_pool() -> bool:
    from ksmith_ray.executor import current_pool

    return current_pool() is not None
