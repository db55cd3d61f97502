"""Evaluations under Ray run at normal priority: Ray starts its workers at niceness 15, and every candidate and
reference process an actor starts would inherit it (docs/benchmarks.md §8c).

The first test needs no cluster (a stand-in ``ray`` module records what a new local cluster would be started
with); the second asks an actor of a real local cluster.
"""

from __future__ import annotations

import logging
import os
import threading

import pytest

from ksmith_ray import executor

NICENESS = executor.RAY_NICENESS_ENV


class RecordingRay:
    """Enough of ``ray`` for ``pool_for`` to call ``init``, which records the niceness setting and stops."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str | None]] = []

    def is_initialized(self) -> bool:
        return False

    def init(self, address=None, **_) -> None:
        self.seen.append((address, os.environ.get(NICENESS)))
        raise RuntimeError("not connecting in this test")


def test_a_local_cluster_started_by_the_executor_runs_its_workers_at_normal_priority(monkeypatch):
    ray = RecordingRay()
    monkeypatch.setattr(executor, "import_ray", lambda: ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv(NICENESS, "placeholder")  # so that the test ends with the variable as it found it
    monkeypatch.delenv(NICENESS)

    with pytest.raises(executor.RayClusterError, match="not connecting in this test"):
        executor.pool_for({})
    monkeypatch.delenv(NICENESS)
    monkeypatch.setenv(NICENESS, "5")  # the user's own choice
    with pytest.raises(executor.RayClusterError):
        executor.pool_for({})

    assert ray.seen == [(None, "0"), (None, "5")]  # a new local cluster: niceness 0, unless the user chose


def test_a_cluster_elsewhere_is_not_told_anything(monkeypatch):
    """Its raylets were started with their own settings; the actors lower their niceness where they may."""
    ray = RecordingRay()
    monkeypatch.setattr(executor, "import_ray", lambda: ray)
    monkeypatch.setenv(NICENESS, "placeholder")
    monkeypatch.delenv(NICENESS)
    with pytest.raises(executor.RayClusterError):
        executor.pool_for({"address": "10.0.0.1:6379"})
    assert ray.seen == [("10.0.0.1:6379", None)]


def can_lower_niceness() -> bool:
    """Whether this user may lower a niceness (root, or CAP_SYS_NICE), tried on a thread of its own."""
    answer: list[bool] = []

    def probe() -> None:
        before = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, before + 1)  # raising one's niceness is always allowed
        try:
            os.setpriority(os.PRIO_PROCESS, 0, before)
            answer.append(True)
        except PermissionError:
            answer.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return answer[0]


@pytest.mark.slow
def test_an_actor_runs_at_normal_priority_or_the_driver_says_how_to_get_it(ray_cluster, caplog):
    """The test cluster is started by ``ray.init`` itself, so its workers start at the cluster's niceness."""
    executor.close_pool()
    pool = executor.ActorPool(ray_cluster, ("test",))
    with caplog.at_level(logging.WARNING, logger=executor.log.name):
        actor = pool.acquire()
    where = ray_cluster.get(actor.ready.remote())
    pool.close()
    if can_lower_niceness():
        assert where["niceness"] == 0, where
    if where["niceness"] > 0:
        assert "RAY_worker_niceness=0" in caplog.text, caplog.text
    else:
        assert "niceness" not in caplog.text
