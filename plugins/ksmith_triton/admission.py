"""Memory admission: an evaluation starts on a GPU only while its expected peak memory fits beside the others.

``--parallel N`` runs N evaluations at once, and each holds a candidate process and a reference process on its
GPU. Problems of a few GB each fit one at a time but not N at once: without a gate they ran out of memory
together and the verdicts said ``OUT_OF_MEMORY`` for kernels that were fine. So, per GPU:

* **Reservations.** Before its candidate (and reference) work starts, an evaluation reserves its expected peak
  device bytes (``MemoryGate.admitted``). It is admitted while the reservations of the evaluations running on
  that GPU plus its own fit what is free for ksmith there, less a margin; otherwise it waits. Waiting is FIFO
  (an evaluation that does not fit holds back those behind it, so a large one is never starved), and an
  evaluation alone on its GPU is always admitted: a problem too large for the device gets its ``RESOURCE``
  verdict instead of waiting for ever.
* **What is free** (``MemoryGate._capacity``): the GPU's free memory read (``nvidia-smi``, so the driver never
  creates a CUDA context of its own) the last time none of this process's evaluations ran on it, and no more
  than what is free now plus what the running evaluations reserved, so memory taken since by other programs
  (or by warm spare workers) counts too.
* **Footprints** (``Footprints``): after a problem's first evaluation, its measured peak -- the candidate
  process's and the reference process's peak of torch's caching allocator, as they report it -- the largest
  of the last few; before that, an estimate from the problem's input and output bytes (made on the meta
  device by its reference process: ``estimate_bytes``). Measured footprints are also kept in the reference
  cache, so the next bench starts from them.
* **Retry alone** (``evaluator.admitted_run``, GPUs only: ``shares_memory``): an out-of-memory verdict (``OUT_OF_MEMORY`` from the candidate,
  ``RESOURCE_EXHAUSTED`` from the reference, or a ``RESOURCE`` problem error) reached while another
  evaluation ran on the same GPU, or after it was admitted alone to a GPU of which others held more than the
  margin (``Ticket.crowded_at_start``: other programs, the workers ksmith keeps warm, a process of the last
  evaluation still exiting), is not trusted: ksmith lets its idle warm processes go, waits for the GPU's free
  memory to settle, and the evaluation runs again with the GPU to itself (exclusive admission, ahead of the
  queue); only that verdict counts. An out-of-memory when it ran alone on an uncrowded GPU is final.

Scope: the gate is per process -- the threads of one driver, which is how ``--parallel`` evaluates (the
``local`` executor's threads, ``ksmith bench``'s threads, the threads of one Ray actor, which owns its GPU).
Two ksmith processes sharing a GPU do not see each other's reservations, only each other's memory in use
(the "free now" reading); an out-of-memory that another process's evaluation caused is not retried.
``KSMITH_MEMORY_ADMISSION=0`` turns the gate and the retry off.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

ADMISSION_ENV = "KSMITH_MEMORY_ADMISSION"
MARGIN_MIN_BYTES = 2 * 2**30  # kept free beside the reservations: CUDA contexts, fragmentation, estimates
MARGIN_FRACTION = 0.05  # ... or this share of the GPU's memory, whichever is larger
READING_MAX_AGE_S = 0.5  # nvidia-smi takes tens of ms: readings this recent are reused
POLL_S = 1.0  # a waiting evaluation looks at free memory again this often (other programs free memory too)
WINDOW = 8  # a problem's expected footprint is the largest of its last this many measurements

MemoryReading = tuple[int, int]  # (free bytes, total bytes)


def enabled() -> bool:
    return os.environ.get(ADMISSION_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def shares_memory(device: str) -> bool:
    """Whether evaluations running together on ``device`` can run each other out of memory, so that an
    out-of-memory among others is worth a retry alone. A GPU: yes. The CPU: no -- a candidate's process there
    has its own address-space limit, and that limit is what it runs into (tests change this to reach the
    retry without a GPU)."""
    return device == "cuda"


# ---------------------------------------------------------------------------------------------------------------
# The gate of one device
# ---------------------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Ticket:
    """One admitted (or waiting) evaluation's reservation."""

    need: int
    exclusive: bool = False
    # Another evaluation ran on this device at some moment while this one held its ticket: an out-of-memory
    # then may be the others' doing.
    overlapped: bool = False
    waited_s: float = 0.0
    # Admitted alone onto a device whose memory others (other programs, processes ksmith keeps warm, a
    # process still exiting) held more of than the margin: an out-of-memory may be theirs too.
    crowded_at_start: bool = False


class MemoryGate:
    """Admission to one device, FIFO, by expected peak bytes against what is free (see the module's doc).

    ``read_memory(max_age_s)`` gives ``(free, total)`` bytes, or ``None`` when the device cannot say (then
    every evaluation is admitted, as without a gate; the retry still applies)."""

    def __init__(self, read_memory: Callable[[float], MemoryReading | None]) -> None:
        self._read = read_memory
        self._cond = threading.Condition()
        self._running: list[Ticket] = []
        self._queue: deque[Ticket] = deque()
        self._idle_reading: MemoryReading | None = None  # (free, total) when none of ours ran

    @contextlib.contextmanager
    def admitted(self, need: int, exclusive: bool = False) -> Iterator[Ticket]:
        """Hold a reservation of ``need`` bytes while the block runs; released however it ends.
        ``exclusive``: nothing else runs on the device meanwhile, and the ticket goes ahead of those waiting
        (it is a retry: it has waited its turn once)."""
        ticket = self.acquire(need, exclusive)
        try:
            yield ticket
        finally:
            self.release(ticket)

    def acquire(self, need: int, exclusive: bool = False) -> Ticket:
        ticket = Ticket(max(0, int(need)), exclusive)
        started = time.monotonic()
        with self._cond:
            if exclusive:  # behind earlier retries, ahead of first attempts
                ahead = sum(1 for _ in _leading(self._queue, lambda t: t.exclusive))
                self._queue.insert(ahead, ticket)
            else:
                self._queue.append(ticket)
            try:
                while not (self._queue[0] is ticket and self._fits(ticket)):
                    self._cond.wait(POLL_S)
            except BaseException:
                self._queue.remove(ticket)
                self._cond.notify_all()
                raise
            self._queue.popleft()
            if self._running:
                ticket.overlapped = True
                for other in self._running:
                    other.overlapped = True
            elif self._idle_reading is not None:
                free, total = self._idle_reading
                ticket.crowded_at_start = total - free > margin_bytes(total)
            self._running.append(ticket)
            self._cond.notify_all()  # the next in line may fit too
        ticket.waited_s = round(time.monotonic() - started, 3)
        return ticket

    def release(self, ticket: Ticket) -> None:
        with self._cond:
            if ticket in self._running:
                self._running.remove(ticket)
            self._cond.notify_all()

    def _fits(self, ticket: Ticket) -> bool:
        if not self._running:
            self._idle_reading = self._read(0.0)  # fresh: this is the free memory the reservations share
            return True  # alone: always admitted (too large a problem gets its RESOURCE verdict)
        if ticket.exclusive or any(t.exclusive for t in self._running):
            return False
        capacity = self._capacity()
        return capacity is None or self.reserved() + ticket.need <= capacity

    def _capacity(self) -> int | None:
        """Bytes the running evaluations' reservations and a new one may add up to, or ``None`` (unknown)."""
        reading = self._read(READING_MAX_AGE_S)
        if reading is None:
            return None
        free, total = reading
        # Free now plus what the running evaluations reserved (some of it not yet allocated) catches memory
        # other programs took since the device was idle; the idle reading caps it while reservations are
        # still unused.
        available = free + self.reserved()
        if self._idle_reading is not None:
            available = min(available, self._idle_reading[0])
        return available - margin_bytes(total)

    def reads_memory(self) -> bool:
        """Whether this device says how much memory is free (else reservations change nothing)."""
        return self._read(READING_MAX_AGE_S) is not None

    def reserved(self) -> int:
        return sum(t.need for t in self._running)

    def snapshot(self) -> dict[str, Any]:
        """What the gate holds now (for tests and for whoever tunes throughput)."""
        with self._cond:
            return {
                "running": len(self._running),
                "reserved": self.reserved(),
                "waiting": len(self._queue),
                "exclusive_waiting": any(t.exclusive for t in self._queue),
            }


def _leading(items: deque[Ticket], keep: Callable[[Ticket], bool]) -> Iterator[Ticket]:
    for item in items:
        if not keep(item):
            return
        yield item


def margin_bytes(total: int) -> int:
    return max(MARGIN_MIN_BYTES, int(MARGIN_FRACTION * total))


# ---------------------------------------------------------------------------------------------------------------
# One gate per device, reading the GPU's memory through nvidia-smi
# ---------------------------------------------------------------------------------------------------------------

_gates: dict[tuple[str, str | None], MemoryGate] = {}
_gates_lock = threading.Lock()


def gate_for(device: str, gpu: str | None) -> MemoryGate:
    """The gate of ``gpu`` (as CUDA_VISIBLE_DEVICES names it) or of the CPU, shared by this process's threads.
    On the CPU nothing is read (every evaluation is admitted; the retry still applies)."""
    key = (device, gpu if device == "cuda" else None)
    with _gates_lock:
        gate = _gates.get(key)
        if gate is None:
            if device == "cuda":
                gate = MemoryGate(lambda max_age_s, name=str(gpu): gpu_memory(name, max_age_s))
            else:
                gate = MemoryGate(lambda max_age_s: None)
            _gates[key] = gate
        return gate


_readings: dict[str, tuple[float, MemoryReading]] = {}  # by GPU index and by UUID: (when, reading)
_readings_lock = threading.Lock()


def gpu_memory(gpu: str, max_age_s: float = READING_MAX_AGE_S) -> MemoryReading | None:
    """(free, total) bytes of the GPU that CUDA_VISIBLE_DEVICES calls ``gpu`` (an index or a UUID), or
    ``None`` where nvidia-smi cannot say (not installed, MIG instances). Read with nvidia-smi, not torch: the
    driver process never creates a CUDA context of its own (half a GB on every GPU, and a parent that forks
    workers must not hold one). Its indices follow the PCI bus order, as CUDA's do on a machine of one kind
    of GPU; on a mixed machine set CUDA_DEVICE_ORDER=PCI_BUS_ID (or name GPUs by UUID)."""
    with _readings_lock:
        found = _readings.get(gpu)
        if found is not None and time.monotonic() - found[0] <= max_age_s:
            return found[1]
    readings = read_nvidia_smi()
    now = time.monotonic()
    with _readings_lock:
        for name, reading in readings.items():
            _readings[name] = (now, reading)
    return readings.get(gpu)


NVIDIA_SMI_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,uuid,memory.free,memory.total",
    "--format=csv,noheader,nounits",
]


def read_nvidia_smi() -> dict[str, MemoryReading]:
    try:
        done = subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_nvidia_smi(done.stdout) if done.returncode == 0 else {}


def parse_nvidia_smi(text: str) -> dict[str, MemoryReading]:
    """``{index: (free, total), uuid: (free, total)}`` from nvidia-smi's CSV (MiB); rows it cannot read
    (``[N/A]`` on MIG) are left out."""
    found: dict[str, MemoryReading] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        index, uuid, free, total = parts
        try:
            reading = (int(float(free) * 2**20), int(float(total) * 2**20))
        except ValueError:
            continue
        found[index] = found[uuid] = reading
    return found


# ---------------------------------------------------------------------------------------------------------------
# Footprints: what one evaluation of a problem holds at its peak
# ---------------------------------------------------------------------------------------------------------------


def estimate_bytes(input_bytes: int, output_bytes: int, trials: int) -> int:
    """An evaluation's peak before any was measured, from what the protocol allocates for a problem whose
    inputs take ``input_bytes`` and outputs ``output_bytes``, with ``trials`` correctness trials.

    The candidate's process: the first trial's inputs, up to three timing input sets, the staging copy the
    candidate is called on, a NaN-poisoned block twice the inputs (freed, then reused by outputs), and a copy
    of every trial's outputs for the reference process to read (CUDA IPC). The reference process: the
    reference outputs of every trial, or, while its timing is prepared, three input sets and their outputs.
    Deliberately on the large side (the candidate keeps fewer sets when memory is short): an overestimate
    costs parallelism until the first measurement, an underestimate an out-of-memory and a retry."""
    input_bytes, output_bytes, trials = max(0, input_bytes), max(0, output_bytes), max(1, trials)
    candidate = 7 * input_bytes + (trials + 1) * output_bytes
    reference = 3 * input_bytes + (trials + 1) * output_bytes
    return candidate + reference


class Footprints:
    """Expected peak bytes per problem key: the largest of its last ``WINDOW`` measured peaks once there is
    one (a heavy candidate ages out), else its estimate."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._measured: dict[Any, deque[int]] = {}
        self._estimates: dict[Any, tuple[int, str]] = {}

    def expected(self, key: Any) -> tuple[int, str] | None:
        """``(bytes, "measured" | "estimate" | "unknown")``, or ``None`` when nothing was said yet."""
        with self._lock:
            if self._measured.get(key):
                return max(self._measured[key]), "measured"
            return self._estimates.get(key)

    def estimate(self, key: Any, nbytes: int, source: str = "estimate") -> None:
        """What to expect until a measurement comes (``source="unknown"``: no estimate could be made)."""
        with self._lock:
            self._estimates[key] = (max(0, int(nbytes)), source)

    def record(self, key: Any, nbytes: int) -> bool:
        """Add a measurement; True when the expected footprint changed."""
        with self._lock:
            window = self._measured.setdefault(key, deque(maxlen=WINDOW))
            before = max(window) if window else None
            window.append(max(0, int(nbytes)))
            return max(window) != before

    def forget(self) -> None:
        with self._lock:
            self._measured.clear()
            self._estimates.clear()


FOOTPRINTS = Footprints()
