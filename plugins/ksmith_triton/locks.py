"""Which GPU a candidate runs on, and the per-GPU lock that keeps timing alone on its device.

One lock per GPU, taken two ways:

``exclusive_gpu_lock``
    EXCLUSIVE: held while timing (the candidate's timed loop, the eager / torch.compile references, the GPU's
    ceilings). Nothing else of ksmith's runs on that GPU meanwhile.

``shared_gpu_lock``
    SHARED: held for every other piece of GPU work of an evaluation, so those overlap each other but never a
    timed loop. The driver holds it for the work it asks of a worker (correctness trials, reference outputs,
    comparisons, torch.compile of a reference); a candidate worker holds it itself, through
    ``WorkerSharedHold``, for what it does on its own (the warm-up kernel of a spare, generating inputs, the
    first call of the candidate), so a spare starting up or a candidate compiling never lands inside another's
    timing. A spare creates its CUDA context before it asks for the lock: seconds of host work and no kernel.

Across processes the lock is an flock on one file per GPU, with a second file as a turnstile: a timer holds
the turnstile while it waits, and a shared holder takes the lock only while passing through it, so waiting
timers go before new shared work in any process (flock alone has no such preference), and timers queued
behind a timer run one after another. Inside one process a gate does the same for its threads.

``KSMITH_GPU_LOCK_TRACE=FILE`` appends one JSON line per hold to FILE (every process of the run, workers
included): who held it (``what``), how, when it was asked for, got and given back, on the wall clock so holds
of different processes line up. ``benchmarks/eval_protocol.py`` reads it to show where a GPU's time goes.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_round_robin = itertools.count()
_round_robin_lock = threading.Lock()


def visible_gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no usable torch CUDA means no GPU to choose
        return 0


def choose_gpu(requested: int | None) -> int:
    """``requested`` if given, else the next GPU in round-robin order (an index among the visible ones)."""
    if requested is not None:
        return requested
    count = max(1, visible_gpu_count())
    with _round_robin_lock:
        return next(_round_robin) % count


def physical_gpu(index: int) -> str:
    """The name of visible GPU ``index`` as this process's CUDA_VISIBLE_DEVICES spells it (for the child)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if index < len(entries):
            return entries[index]
    return str(index)


LOCK_DIR_ENV = "KSMITH_GPU_LOCK_DIR"  # set for workers, so driver and workers lock the same files
LOCK_WAIT_ENV = "KSMITH_GPU_LOCK_WAIT_S"
LOCK_TRACE_ENV = "KSMITH_GPU_LOCK_TRACE"
# Far beyond any legitimate holder (a timed loop, a first call within its timeout).
DEFAULT_LOCK_WAIT_S = 900.0


class GpuLockTimeout(RuntimeError):
    """The GPU's lock was not free within the wait limit: something holds it far longer than ksmith would."""


def lock_wait_s() -> float:
    try:
        return max(1.0, float(os.environ.get(LOCK_WAIT_ENV, DEFAULT_LOCK_WAIT_S)))
    except ValueError:
        return DEFAULT_LOCK_WAIT_S


def lock_dir() -> Path:
    configured = os.environ.get(LOCK_DIR_ENV)
    # Absolute: workers run in their own scratch directory and must reach the same files.
    path = (
        Path(configured).resolve()
        if configured
        else Path(tempfile.gettempdir()) / f"ksmith-locks-{os.getuid()}"
    )
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _busy(gpu: str | None, waited: float) -> GpuLockTimeout:
    return GpuLockTimeout(
        f"GPU_BUSY: waited {waited:.0f} s for the lock of GPU {gpu} (limit {LOCK_WAIT_ENV}); something holds it "
        "far longer than any evaluation step"
    )


def _poll(attempt: Callable[[], bool], deadline: float, gpu: str | None, started: float) -> None:
    """``attempt()`` until it succeeds, a few ms apart, so no waiter can hang forever: past the deadline,
    GpuLockTimeout."""
    delay = 0.0005
    while not attempt():
        if time.monotonic() >= deadline:
            raise _busy(gpu, time.monotonic() - started)
        time.sleep(delay)
        delay = min(0.005, delay * 2)


def _try_flock(handle: Any, mode: int) -> bool:
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _flock(handle: Any, mode: int, deadline: float, gpu: str | None, started: float) -> None:
    """flock with a deadline: polled without blocking."""
    _poll(lambda: _try_flock(handle, mode), deadline, gpu, started)


def _flock_behind_timers(
    turnstile: Any, handle: Any, deadline: float, gpu: str | None, started: float
) -> None:
    """A shared flock that no waiting timer can be overtaken by: the lock is only ever taken while passing
    through the turnstile (which a waiting timer holds), and while a timer has the lock, a shared holder goes
    back through the turnstile before each new try. So timers queued behind a timer run one after another,
    instead of each waiting for the shared work that slipped in between them to finish."""

    def through_turnstile() -> bool:
        _flock(turnstile, fcntl.LOCK_SH, deadline, gpu, started)  # passes at once unless a timer waits
        try:
            return _try_flock(handle, fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)

    _poll(through_turnstile, deadline, gpu, started)


_cpu_timing_lock = threading.Lock()


class _Gate:
    """Writer preference inside one process: once a timer waits, new shared holders queue behind it.

    Timers do not exclude each other here (the flocks order them): a second timer goes on to wait at the
    turnstile while the first times, so no shared work of another process slips in between the two."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writers = 0  # timers waiting or timing

    def acquire_shared(self, deadline: float = float("inf")) -> bool:
        with self._cond:
            while self._writers:
                if not self._cond.wait(_remaining(deadline)):
                    return False
            self._readers += 1
            return True

    def release_shared(self) -> None:
        with self._cond:
            self._readers -= 1
            self._cond.notify_all()

    def acquire_exclusive(self, deadline: float = float("inf")) -> bool:
        with self._cond:
            self._writers += 1
            while self._readers:
                if not self._cond.wait(_remaining(deadline)):
                    self._writers -= 1
                    self._cond.notify_all()
                    return False
            return True

    def release_exclusive(self) -> None:
        with self._cond:
            self._writers -= 1
            self._cond.notify_all()


def _remaining(deadline: float) -> float | None:
    return None if deadline == float("inf") else max(0.0, deadline - time.monotonic())


_gates: dict[str, _Gate] = {}
_gates_lock = threading.Lock()


def _gate(gpu: str | None) -> _Gate:
    with _gates_lock:
        return _gates.setdefault(str(gpu), _Gate())


def _trace(gpu: str | None, what: str, exclusive: bool, asked: float, got: float, released: float) -> None:
    """One line of ``KSMITH_GPU_LOCK_TRACE`` (see the module's doc); never fails the holder."""
    path = os.environ.get(LOCK_TRACE_ENV)
    if not path:
        return
    line = json.dumps(
        {
            "pid": os.getpid(),
            "gpu": str(gpu),
            "what": what,
            "mode": "exclusive" if exclusive else "shared",
            "asked": round(asked, 6),
            "got": round(got, 6),
            "released": round(released, 6),
        }
    )
    try:
        # One write of a short line to a file opened for appending: lines of several processes never interleave.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


@contextlib.contextmanager
def _gpu_lock(gpu: str | None, exclusive: bool, what: str = "") -> Iterator[None]:
    """This process's gate first (so waiting timers go first here), then the flocks shared across processes.

    Raises GpuLockTimeout if the lock is not free within ``lock_wait_s()``. ``what``: the holder's name in
    the trace.
    """
    gate = _gate(gpu)
    if exclusive:
        acquire, release, mode = gate.acquire_exclusive, gate.release_exclusive, fcntl.LOCK_EX
    else:
        acquire, release, mode = gate.acquire_shared, gate.release_shared, fcntl.LOCK_SH
    started, asked = time.monotonic(), time.time()
    deadline = started + lock_wait_s()
    if not acquire(deadline):
        raise _busy(gpu, time.monotonic() - started)
    try:
        directory = lock_dir()
        with (
            open(directory / f"cuda-{gpu}.turnstile", "a+") as turnstile,
            open(directory / f"cuda-{gpu}.lock", "a+") as handle,
        ):
            if exclusive:
                _flock(turnstile, fcntl.LOCK_EX, deadline, gpu, started)  # shared holders arriving now wait
                try:
                    _flock(handle, mode, deadline, gpu, started)
                finally:
                    fcntl.flock(turnstile, fcntl.LOCK_UN)
            else:
                _flock_behind_timers(turnstile, handle, deadline, gpu, started)
            got = time.time()
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                _trace(gpu, what, exclusive, asked, got, time.time())
    finally:
        release()


@contextlib.contextmanager
def exclusive_gpu_lock(device: str, gpu: str | None, what: str = "timing") -> Iterator[None]:
    """Hold the lock of one device exclusively, for timing (nothing else of ksmith's runs on that GPU
    meanwhile).

    Interpreted CPU timings are never compared with anything outside this process, so the CPU lock is this
    process's own (other programs' evaluations on the same machine do not queue behind each other).
    """
    if device != "cuda":
        with _cpu_timing_lock:
            yield
        return
    with _gpu_lock(gpu, exclusive=True, what=what):
        yield


@contextlib.contextmanager
def shared_gpu_lock(device: str, gpu: str | None, what: str = "shared") -> Iterator[None]:
    """Hold the device's lock shared, for any GPU work but timing: it may overlap other such work but not a
    timed loop."""
    if device != "cuda":
        yield
        return
    with _gpu_lock(gpu, exclusive=False, what=what):
        yield


class WorkerSharedHold:
    """A worker's own shared hold of its GPU's lock (``shared_gpu_lock``), for setup work it does without
    being asked.

    The GPU is the one the worker was started on (its CUDA_VISIBLE_DEVICES). Released explicitly, and at the
    latest when the process ends (flocks die with their process).
    """

    def __init__(self, device: str | None, what: str = "worker") -> None:
        self._held: contextlib.AbstractContextManager | None = None
        self._what = what
        if device == "cuda":
            self._held = self._take()

    def _take(self) -> contextlib.AbstractContextManager:
        held = shared_gpu_lock("cuda", os.environ.get("CUDA_VISIBLE_DEVICES") or "0", self._what)
        held.__enter__()
        return held

    @contextlib.contextmanager
    def paused(self, drain: Callable[[], None]) -> Iterator[None]:
        """Let the lock go for host-only work in the middle of the hold (a Triton compilation), and take it
        again after. ``drain`` waits for this process's GPU work so far, so none of it runs unheld. Nothing
        while the hold was already released."""
        if self._held is None:
            yield
            return
        drain()
        self.release()
        try:
            yield
        finally:
            self._held = self._take()

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(None, None, None)

    def __enter__(self) -> WorkerSharedHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
