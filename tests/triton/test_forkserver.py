"""Candidate workers forked from a pre-imported server (``forkserver.py``) behave as workers started with
``subprocess``: same verdicts, their own session and environment, exit statuses reported, and a server that
dies or is turned off only means workers start the slow way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from evaluator_helpers import CASES, candidate, problem, quick_options

from ksmith_core.model import Candidate
from ksmith_triton import evaluator
from ksmith_triton.evaluator import evaluate
from ksmith_triton.pool import WarmPool, _key, discard

ENV = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}


@pytest.fixture(autouse=True)
def no_spares(monkeypatch):
    """Each take starts exactly the worker it returns, so the counts below are the test's own."""
    monkeypatch.setenv("KSMITH_WARM_WORKERS", "0")


def pool_with_ready_server(env: dict[str, str] = ENV) -> WarmPool:
    pool = WarmPool()
    pool._taken = 2  # as after two evaluations: servers are started from then on
    key = _key("cpu", env)
    assert pool._server(key, env) is None  # starting: workers asked for now start the slow way
    assert pool._servers[key].ready.wait(120), (pool._servers[key].scratch / "forkserver.log").read_text()
    return pool


def test_forked_workers_give_the_verdicts_fresh_ones_give(reference_cache, monkeypatch):
    pool = pool_with_ready_server()
    monkeypatch.setattr(evaluator, "POOL", pool)
    expected = {
        "scale_add_ok": ("ok", None),
        "wrong_output": ("incorrect", None),
        "os_exit": ("crashed", "EXITED"),
        "sys_exit": ("crashed", "EXITED"),
        "segfault": ("crashed", "CRASHED"),
    }
    try:
        verdicts = {
            name: evaluate(problem("scale_add"), candidate(name), quick_options(reference_cache))
            for name in expected
        }
    finally:
        pool.close()
    assert pool.forked == len(expected) and pool.spawned == len(expected)
    for name, (status, reason) in expected.items():
        verdict = verdicts[name]
        assert verdict.status.value == status, (name, verdict.reasons, verdict.error)
        if reason:
            assert any(r.startswith(reason) for r in verdict.reasons), (name, verdict.reasons)
    assert any("SIGSEGV" in r for r in verdicts["segfault"].reasons)  # the signal, as the server reaped it
    assert "ok" == verdicts["scale_add_ok"].status.value and verdicts["scale_add_ok"].runtime_ms


def with_module_code(name: str, code: str, forward: str | None = None):
    """A case candidate with ``code`` run at import (and ``forward``'s body replacing its forward)."""
    source = (CASES / f"{name}.py").read_text(encoding="utf-8")
    if forward is not None:
        head, _, _ = source.partition("    def forward(self, x):")
        source = head + "    def forward(self, x):\n" + forward
    return Candidate.from_source(code + "\n" + source)


def test_a_forked_worker_imports_prints_and_exits_as_a_fresh_one(reference_cache, monkeypatch):
    pool = pool_with_ready_server()
    monkeypatch.setattr(evaluator, "POOL", pool)
    # Its own scratch directory first on sys.path (never the server's, shared by every worker it forks).
    own_path = with_module_code(
        "scale_add_ok", "import os, sys\nassert sys.path[0] == os.getcwd(), (sys.path[0], os.getcwd())\n"
    )
    # Unbuffered output: a partial line printed just before os._exit is not lost.
    partial = with_module_code(
        "scale_add_ok",
        "import os, sys",
        "        sys.stdout.write('partial line, no newline')\n        os._exit(3)\n",
    )
    try:
        verdicts = [
            evaluate(problem("scale_add"), c, quick_options(reference_cache)) for c in (own_path, partial)
        ]
    finally:
        pool.close()
    assert pool.forked == 2
    assert verdicts[0].status.value == "ok", (verdicts[0].reasons, verdicts[0].error)
    assert any("exited with code 3" in r for r in verdicts[1].reasons), verdicts[1].reasons
    assert "partial line, no newline" in verdicts[1].details.get("stdout", "")


def test_a_forked_worker_has_its_own_session_environment_and_exit_status(monkeypatch):
    monkeypatch.setenv("KSMITH_SOMETHING_TOKEN", "do-not-leak")
    env = {**ENV, "KSMITH_MARK": "forked"}
    pool = pool_with_ready_server(env)
    try:
        child = pool.take("cpu", env)
        pool.done()
        assert pool.forked == 1
        pid = child.proc.pid
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # killpg reaches it and only it
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"KSMITH_MARK=forked" in environ
        assert not any(item.startswith(b"KSMITH_SOMETHING_TOKEN") for item in environ)
        assert child.proc.poll() is None
        child.proc.stdin.close()  # a parent gone: the idle worker exits on its own, status 0
        assert child.proc.wait(timeout=60) == 0
        assert not child.scratch.exists()
        killed = pool.take("cpu", env)
        pool.done()
        discard(killed)
        assert killed.proc.poll() == -9
    finally:
        pool.close()


def test_without_a_server_workers_still_start(monkeypatch):
    pool = pool_with_ready_server()
    try:
        server = next(iter(pool._servers.values()))
        server.proc.kill()  # the server dies
        server.proc.wait(timeout=30)
        child = pool.take("cpu", ENV)  # started the slow way while a new server imports
        pool.done()
        assert pool.forked == 0 and child.alive()
        discard(child)
        assert child.proc.poll() is not None
    finally:
        pool.close()
    monkeypatch.setenv("KSMITH_FORKSERVER", "0")
    off = WarmPool()
    off._taken = 2
    try:
        assert off._server(_key("cpu", ENV), ENV) is None and not off._servers
        discard(off.take("cpu", ENV))
        assert off.forked == 0 and off.spawned == 1
    finally:
        off.close()


@pytest.mark.parametrize("killed", ["before", "after"])
def test_a_worker_forked_by_a_server_that_died_is_still_seen_to_end(killed):
    pool = pool_with_ready_server()
    try:
        server = next(iter(pool._servers.values()))
        child = pool.take("cpu", ENV)
        pool.done()
        assert pool.forked == 1
        if killed == "before":  # the worker outlives its server: its end is read from /proc
            server.proc.kill()
            server.proc.wait(timeout=30)
        discard(child)
        assert child.proc.wait(timeout=30) is not None
    finally:
        pool.close()


@pytest.mark.gpu
def test_gpu_forked_workers_make_their_own_cuda_context(reference_cache, monkeypatch):
    """The server never touches CUDA; each forked worker creates its context after the fork."""
    pool = WarmPool()
    monkeypatch.setattr(evaluator, "POOL", pool)
    options = quick_options(reference_cache, device="cuda", correctness_trials=3, timing_trials=20)
    try:
        verdicts = [evaluate(problem("scale_add"), candidate("scale_add_ok"), options) for _ in range(2)]
        (server,) = pool._servers.values()  # started at the second evaluation
        assert server.ready.wait(120), (server.scratch / "forkserver.log").read_text()
        verdicts += [
            evaluate(problem("scale_add"), candidate(name), options)
            for name in ("scale_add_ok", "wrong_output", "illegal_address", "scale_add_ok")
        ]
    finally:
        pool.close()
    assert pool.forked == 4
    statuses = [v.status.value for v in verdicts]
    assert statuses[:4] + statuses[5:] == ["ok", "ok", "ok", "incorrect", "ok"], [v.reasons for v in verdicts]
    assert statuses[4] in ("runtime_error", "crashed"), verdicts[
        4
    ].reasons  # its sticky CUDA error is its own


def test_a_server_that_keeps_failing_is_given_up_with_its_log(monkeypatch, caplog):
    from ksmith_triton import forkserver

    started = []

    class DiesAtOnce:
        def __init__(self, env, scratch):
            self.scratch = scratch
            started.append(self)

        def alive(self):
            return False

        def busy(self):
            return False

        def close(self):
            pass

        def log_tail(self):
            return "ImportError: no module named boom"

    monkeypatch.setattr(forkserver, "ForkServer", DiesAtOnce)
    pool = WarmPool()
    pool._taken = 2
    key = _key("cpu", ENV)
    with caplog.at_level("WARNING", logger="ksmith.pool"):
        assert all(pool._server(key, ENV) is None for _ in range(6))
    assert len(started) == 3  # then workers only start the slow way, without a server each time
    assert "failed 3 times" in caplog.text and "no module named boom" in caplog.text
    pool.close()
