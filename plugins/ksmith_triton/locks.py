"""Which GPU a candidate runs on, and the per-GPU lock that keeps timing alone on its device.

Timing takes the lock exclusively; every other piece of GPU work of an evaluation takes it shared, so those
overlap each other but never a timed loop. The driver holds it for the work it asks of a worker (correctness
trials, reference outputs, comparisons, torch.compile of a reference); a candidate worker holds it itself for
what it does on its own (creating its CUDA context when it starts as a spare, generating inputs, the first
call of the candidate), so a spare starting up or a candidate compiling never lands inside another's timing.

Across processes the lock is an flock on one file per GPU, with a second file as a turnstile: a timer holds
the turnstile while it waits, and every shared holder passes through it first, so waiting timers go before
new shared work in any process (flock alone has no such preference). Inside one process a gate does the same
for its threads.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

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


def lock_dir() -> Path:
    configured = os.environ.get(LOCK_DIR_ENV)
    path = Path(configured) if configured else Path(tempfile.gettempdir()) / f"ksmith-locks-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


_cpu_timing_lock = threading.Lock()


class _Gate:
    """A readers-writer gate with writer preference: once a timer waits, new shared holders queue behind it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    def acquire_shared(self) -> None:
        with self._cond:
            while self._writing or self._writers_waiting:
                self._cond.wait()
            self._readers += 1

    def release_shared(self) -> None:
        with self._cond:
            self._readers -= 1
            self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        with self._cond:
            self._writers_waiting += 1
            while self._writing or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writing = True

    def release_exclusive(self) -> None:
        with self._cond:
            self._writing = False
            self._cond.notify_all()


_gates: dict[str, _Gate] = {}
_gates_lock = threading.Lock()


def _gate(gpu: str | None) -> _Gate:
    with _gates_lock:
        return _gates.setdefault(str(gpu), _Gate())


@contextlib.contextmanager
def _gpu_lock(gpu: str | None, exclusive: bool) -> Iterator[None]:
    """This process's gate first (so waiting timers go first here), then the flock shared across processes."""
    gate = _gate(gpu)
    if exclusive:
        acquire, release, mode = gate.acquire_exclusive, gate.release_exclusive, fcntl.LOCK_EX
    else:
        acquire, release, mode = gate.acquire_shared, gate.release_shared, fcntl.LOCK_SH
    acquire()
    try:
        directory = lock_dir()
        with (
            open(directory / f"cuda-{gpu}.turnstile", "a+") as turnstile,
            open(directory / f"cuda-{gpu}.lock", "a+") as handle,
        ):
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_EX)  # shared holders arriving from now on wait here
                try:
                    fcntl.flock(handle, mode)
                finally:
                    fcntl.flock(turnstile, fcntl.LOCK_UN)
            else:
                fcntl.flock(turnstile, fcntl.LOCK_SH)  # passes at once unless a timer waits
                fcntl.flock(turnstile, fcntl.LOCK_UN)
                fcntl.flock(handle, mode)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        release()


@contextlib.contextmanager
def device_lock(device: str, gpu: str | None) -> Iterator[None]:
    """Hold the timing lock of one device exclusively (nothing else of ksmith's runs on that GPU meanwhile).

    Interpreted CPU timings are never compared with anything outside this process, so the CPU lock is this
    process's own (other programs' evaluations on the same machine do not queue behind each other).
    """
    if device != "cuda":
        with _cpu_timing_lock:
            yield
        return
    with _gpu_lock(gpu, exclusive=True):
        yield


@contextlib.contextmanager
def gpu_work(device: str, gpu: str | None) -> Iterator[None]:
    """Hold the device's lock shared: GPU work that may overlap other such work but not a timed loop."""
    if device != "cuda":
        yield
        return
    with _gpu_lock(gpu, exclusive=False):
        yield


class WorkerHold:
    """A worker's own shared hold of its GPU's lock, for setup work it does without being asked.

    The GPU is the one the worker was started on (its CUDA_VISIBLE_DEVICES). Released explicitly, and at the
    latest when the process ends (flocks die with their process).
    """

    def __init__(self, device: str | None) -> None:
        self._held: contextlib.AbstractContextManager | None = None
        if device == "cuda":
            self._held = gpu_work(device, os.environ.get("CUDA_VISIBLE_DEVICES") or "0")
            self._held.__enter__()

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(None, None, None)

    def __enter__(self) -> WorkerHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
