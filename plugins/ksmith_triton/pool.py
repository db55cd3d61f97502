"""Candidate worker processes started before they are needed.

Starting Python, importing torch and Triton and creating a CUDA context costs seconds, far more than judging
a typical kernel. So once a process evaluates a second candidate (a sign it will evaluate more), spare
workers are started in the background: each has done those imports (and, on a GPU, initialised CUDA) and
waits for its one job. A spare still serves exactly one candidate and is killed afterwards, so isolation is
the same as a fresh process: no candidate code has ever run in it before its job arrives.

A spare is only handed out for the device, GPU and environment it was started with (the environment is part
of the key, so a changed ``TRITON_CACHE_DIR`` or any other variable never reaches a candidate stale).
Workers (spares or not) are forked from a server that has done the imports once per key (``forkserver.py``),
so a spare costs its CUDA context and warm-up kernel, not a new interpreter; if the server cannot be started
or dies, workers start as new interpreters, as they do with ``KSMITH_FORKSERVER=0``.

``KSMITH_WARM_WORKERS`` sets the number of spares per key (``0`` turns them off); by default it is twice the
most evaluations seen in flight at once, up to ``MAX_SPARES`` on a GPU and half the cores on the CPU.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Any

from ksmith_triton import forkserver
from ksmith_triton.sandbox import Child, private_dir, remove_tree, scrubbed_environment

MAX_SPARES = 16
MAX_SERVER_FAILURES = 3  # fork servers of one key that died or stopped answering before it is given up
log = logging.getLogger("ksmith.pool")


def _key(device: str, env_extra: dict[str, str]) -> tuple[Any, ...]:
    """(device, GPU, the rest of the environment): spares of another GPU stay; another environment retires."""
    env = scrubbed_environment(env_extra)
    gpu = env.pop("CUDA_VISIBLE_DEVICES", None)
    return (device, gpu, tuple(sorted(env.items())))


class WarmPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[tuple[Any, ...], list[Child]] = {}
        self._starting: dict[tuple[Any, ...], int] = {}  # spawns decided but not yet in _spares
        self._in_flight = 0
        self._peak = 0
        self._taken = 0
        self._servers: dict[tuple[Any, ...], forkserver.ForkServer] = {}
        self._server_lock = threading.Lock()
        self._retired: list[forkserver.ForkServer] = []  # no new workers from these; closed when idle
        self._server_failures: dict[tuple[Any, ...], int] = {}
        self.spawned = 0  # counters, for tests and for whoever tunes throughput
        self.reused = 0
        self.forked = 0

    def _target(self, device: str) -> int:
        configured = os.environ.get("KSMITH_WARM_WORKERS", "").strip()
        if configured.isdigit():
            return min(int(configured), MAX_SPARES)
        if self._taken < 2:  # a single `ksmith eval` gains nothing from spares
            return 0
        # A spare takes about as long to get ready as an evaluation takes: two per evaluation in flight keep
        # one ready for each worker while the other warms up. On the CPU they would compete for the cores
        # the interpreted candidates run on, so fewer there.
        cap = MAX_SPARES if device == "cuda" else max(1, (os.cpu_count() or 2) // 2)
        return min(2 * max(1, self._peak), cap)

    def _spawn(self, device: str, env_extra: dict[str, str]) -> Child:
        self.spawned += 1
        scratch = private_dir("ksmith-cand-")
        server = self._server(_key(device, env_extra), env_extra) if self._taken >= 2 else None
        if server is not None:
            try:
                child = Child("candidate", None, scratch, env_extra, warm_device=device, forkserver=server)
                self.forked += 1
                return child
            except forkserver.ForkServerGone:
                self._retire_server(server)
                # A worker forked before the server failed may still start in ``scratch`` and remove it when
                # it finds its stdin closed: the worker started instead gets a directory of its own.
                remove_tree(scratch)
                scratch = private_dir("ksmith-cand-")
        return Child("candidate", None, scratch, env_extra, warm_device=device)

    def _server(self, key: tuple[Any, ...], env_extra: dict[str, str]) -> forkserver.ForkServer | None:
        """The fork server for ``key`` if it is ready. One is started when there is none (from the second
        evaluation on, as spares are: a single evaluation would not repay its imports); workers wanted while
        it imports start as new interpreters, so nothing waits for it."""
        if not forkserver.enabled():
            return None
        with self._server_lock:
            self._close_idle_retired()
            server = self._servers.get(key)
            if server is not None and server.alive():
                return server if server.ready.is_set() else None
            if server is not None:  # died: counted, so a server that cannot work is not restarted forever
                self._servers.pop(key)
                self._server_failed(key, server)
            if self._server_failures.get(key, 0) >= MAX_SERVER_FAILURES:
                return None
            for other in [k for k in self._servers if k[2] != key[2]]:  # the environment moved on
                self._retire(self._servers.pop(other))
            scratch = private_dir("ksmith-fork-")
            try:
                self._servers[key] = forkserver.ForkServer(scrubbed_environment(env_extra), scratch)
            except OSError:
                remove_tree(scratch)
            return None

    def _server_failed(self, key: tuple[Any, ...], server: forkserver.ForkServer) -> None:
        """A server that died or stopped answering (the caller holds ``_server_lock``)."""
        failures = self._server_failures[key] = self._server_failures.get(key, 0) + 1
        if failures == MAX_SERVER_FAILURES:
            log.warning(
                "the fork server failed %d times; candidate workers start as new interpreters. Its log ends: %s",
                failures,
                server.log_tail(),
            )
        self._retire(server)

    def _retire_server(self, server: forkserver.ForkServer) -> None:
        with self._server_lock:
            for key in [k for k, s in self._servers.items() if s is server]:
                self._servers.pop(key)
                self._server_failed(key, server)

    def _retire(self, server: forkserver.ForkServer) -> None:
        """No new workers from ``server``; it is closed once none it forked still runs (closing it earlier
        would lose their exit statuses). The caller holds ``_server_lock``."""
        self._retired.append(server)
        self._close_idle_retired()

    def _close_idle_retired(self) -> None:
        still = []
        for server in self._retired:
            if server.alive() and server.busy():
                still.append(server)
            else:
                _close_server(server)
        self._retired = still

    def take(self, device: str, env_extra: dict[str, str]) -> Child:
        """A started, idle candidate worker for ``device`` with ``env_extra``; give it back with ``done``."""
        key = _key(device, env_extra)
        child = None
        stale: list[Child] = []
        with self._lock:
            self._taken += 1
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
            spares = self._spares.get(key, [])
            while spares and child is None:
                candidate = spares.pop(0)
                if candidate.alive():
                    child = candidate
                else:
                    stale.append(candidate)
            for other in [k for k in self._spares if k[2] != key[2]]:  # the environment moved on
                stale.extend(self._spares.pop(other))
            target = self._target(device)
            missing = max(0, target - len(self._spares.get(key, [])) - self._starting.get(key, 0))
            self._starting[key] = self._starting.get(key, 0) + missing  # concurrent takes see these
        for old in stale:
            discard(old)
        fresh: list[Child] = []
        try:
            for _ in range(missing):
                fresh.append(self._spawn(device, env_extra))
        except OSError:
            pass  # no spares this time (file descriptors, /dev/shm): evaluation goes on without them
        finally:
            with self._lock:
                self._starting[key] -= missing
                if fresh:
                    self._spares.setdefault(key, []).extend(fresh)
        if child is not None:
            self.reused += 1
            return child
        try:
            return self._spawn(device, env_extra)
        except BaseException:
            self.done()
            raise

    def done(self) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)

    def drop_spares(self) -> None:
        """Let every spare worker go (the fork servers stay; new spares start as they are needed)."""
        with self._lock:
            spares = [c for group in self._spares.values() for c in group]
            self._spares.clear()
        for child in spares:
            discard(child)

    def close(self) -> None:
        self.drop_spares()
        with self._server_lock:
            servers = [*self._servers.values(), *self._retired]
            self._servers.clear()
            self._retired = []
        for server in servers:
            _close_server(server)


def _close_server(server: forkserver.ForkServer) -> None:
    server.close()
    remove_tree(server.scratch)


def discard(child: Child) -> None:
    child.kill()
    remove_tree(child.scratch)
    remove_shared_memory(child.proc.pid)


def remove_shared_memory(pid: int) -> None:
    """The reference-counter files torch creates in /dev/shm for a process that shares CUDA memory; killed
    processes never unlink their own."""
    import glob

    for path in glob.glob(f"/dev/shm/torch_{pid}_*"):
        try:
            os.unlink(path)
        except OSError:
            pass


POOL = WarmPool()
atexit.register(POOL.close)
