"""Which GPU a candidate runs on, and the per-GPU lock that keeps timing alone on its device.

Timing takes the lock exclusively; every other piece of GPU work of an evaluation (correctness trials,
reference outputs, comparisons) takes it shared, so those overlap each other but never a timed loop. Across
processes the lock is an flock on one file per GPU; inside this process a gate gives waiting timers priority,
so a steady stream of correctness work cannot starve them (flock alone has no such preference).
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


def lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"ksmith-locks-{os.getuid()}"
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
        with open(lock_dir() / f"cuda-{gpu}.lock", "a+") as handle:
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
