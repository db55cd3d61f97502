"""Timing loops run inside a worker, identical for the candidate and the eager / torch.compile references.

The schedule is drawn as it goes, from ``os.urandom`` (captured before any candidate code loads): how many
warm-up calls (half to one and a half times the asked number), how many timed calls (0.8 to 1.2 times), and
which input set each call gets. Nothing of it exists before the moment it is used, so a candidate that keeps
state across calls cannot read ahead which call is the last, or which outputs will be looked at: after every
timed call an ``after_call`` hook (the candidate's worker uses it to check samples of the outputs) runs
before the next call starts. On the GPU a ``before_wait`` hook runs right after the launch, before the loop
waits (the check's rules; work it queues runs behind the call's kernels, after the end event, and the one
wait covers both), and an ``after_wait`` hook once the loop has waited (the check's sample positions are
drawn there: a kernel still running could read what the host writes before the wait).

GPU: the L2 cache is flushed (a buffer twice its size zeroed) before every call, then the GPU is kept busy
with a calibrated spin (``torch.cuda._sleep``) while the host launches the call, so the CUDA events around
the call measure the GPU's own time: host launch overhead -- a compiled model's guards, a Python wrapper, a
CPU busy with other evaluations -- does not leak into the measurement. (Without it, a torch.compile reference
calling the very same cuBLAS or cuDNN kernel as eager measured 10-60 % slower, and by a different amount in
every process: docs/evaluation.md, "Steady references".) Host time per call is recorded beside it. Work that
depends on the call's inputs cannot hide in the spin: it is ordered after the start event on the stream.
The next call's inputs and flush are queued as soon as the loop has waited for a call (and the
``after_wait`` hook has queued its copies), before ``after_call`` checks it on the host, so the GPU copies
and flushes while the host checks; the spin is queued right before the call, as it covers the launch only.
The GPU's state at the start event is the same either way.

Inputs are copied into the same staging tensors before every call: the data changes under a fixed address,
so a result cache keyed on pointers or shapes replays a stale answer, which the output checks then catch. A
third of the candidate's timed calls get inputs no call had before (``fresh_inputs``): a cache keyed on the
data itself returns correct outputs fast only for the repeated inputs, and the driver compares the times of
the two kinds of call. The staging copies are three placements of the same inputs in memory; each call
records which one it ran on, since some kernels' times depend on it (:func:`placement_spread`).
Side-stream launches are refused by the guards, so events on the default stream see all the work. CPU:
``perf_counter`` around a call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

L2_FLUSH_MIN_BYTES = 256 * 2**20
PREQUEUE_MIN_MS = 0.05  # GPU spin before each timed call, at least (covers a fast launch)
PREQUEUE_MAX_MS = 10.0  # and at most: a call whose launch takes longer than this is host-bound anyway
# The spin follows the host's launch times over this many recent calls (the warm-up's seed it): a launch the
# spin did not cover lengthens the next call's spin at once, and the window lets one slow launch go again.
SPIN_WINDOW = 16
# A slow function gets fewer timed calls: about this much GPU time of them, never fewer than MIN_TIMED_CALLS
# (calls of over 30 ms; up to that the asked number is kept). A call that long varies by well under 1 %
# (KernelBench's convolutions at 50-700 ms: spreads of 1e-6 to 1e-3), so a hundred of them buy nothing but
# minutes of a locked GPU. Warm-up may stop early (a coin per call, from its third on) once the calls after
# its first have taken WARMUP_BUDGET_MS.
TIMED_BUDGET_MS = 3000.0
MIN_TIMED_CALLS = 20
WARMUP_BUDGET_MS = 1000.0

# (timed call index, input set, outputs, is it the last?, GPU ms, host ms); the input set is -1 for fresh
# inputs, whose seed is then the last entry of ``TimedCalls.input_seeds``.
AfterCall = Callable[[int, int, Any, bool, float, float], None]
# (timed call index, outputs): on the GPU, called as soon as the call is launched, before the loop waits for
# the GPU (the after-call check's rules); work it queues runs behind the call's kernels.
BeforeWait = Callable[[int, Any], None]
# (timed call index, outputs, is it the last?): on the GPU, called once the loop waited for the call and
# before the next call's inputs and flush are queued, to queue first what the next call must not change
# (the after-call check's sample gather and full copies of the outputs, which may be views of the inputs;
# nothing derived from the sample positions may exist before this wait). ``after_call`` runs
# after them, while the GPU prepares the next call.
AfterWait = Callable[[int, Any, bool], None]
FreshInputs = Callable[[int], list[Any]]  # a seed -> inputs no call has had before
FRESH_SHARE = 1 / 3  # timed calls on fresh inputs, when the caller can make them


class Schedule:
    """Warm-up length, number of timed calls and each call's input set, drawn from ``urandom`` as needed.

    The number of calls ends between ``low`` and ``high`` (both included), uniformly, though no part of the
    decision exists before the call it concerns: after ``done`` calls the loop stops with probability
    ``1 / (high - done + 1)``.
    """

    def __init__(self, urandom: Callable[[int], bytes], trials: int, warmup: int) -> None:
        self.urandom = urandom
        self.asked = trials
        self.trials = self.bounds(trials)
        self.warmup = (max(1, warmup // 2), max(1, warmup + warmup // 2))

    @staticmethod
    def bounds(trials: int) -> tuple[int, int]:
        """The fewest and most timed calls for ``trials`` asked: 0.8 and 1.2 times."""
        return max(1, round(0.8 * trials)), max(1, round(1.2 * trials))

    @staticmethod
    def fitted(trials: int, per_call_ms: float, budget_ms: float, least: int = MIN_TIMED_CALLS) -> int:
        """``trials``, or fewer (never under ``least``) when that many calls of ``per_call_ms`` would take
        longer than ``budget_ms``."""
        if per_call_ms <= 0 or trials * per_call_ms <= budget_ms:
            return trials
        return min(trials, max(least, int(budget_ms / per_call_ms)))

    def fit(self, per_call_ms: float, budget_ms: float, least: int = MIN_TIMED_CALLS) -> None:
        """Before the first timed call: the timed calls' range for calls of about ``per_call_ms``."""
        self.trials = self.bounds(self.fitted(self.asked, per_call_ms, budget_ms, least))

    def below(self, n: int) -> int:
        """A uniform integer in ``[0, n)`` (the 64-bit draw makes the modulo bias negligible)."""
        return int.from_bytes(self.urandom(8), "little") % max(1, n)

    def pick(self, sets: int, fresh: bool) -> tuple[int, int | None]:
        """The next call's inputs: one of the ``sets`` prepared input sets, or (``fresh``, a third of the time)
        new inputs from a new seed: ``(-1, seed)``."""
        if fresh and self.below(3) == 0:
            return -1, self.below(2**62)
        return self.below(sets), None

    def stop(self, done: int, bounds: tuple[int, int]) -> bool:
        low, high = bounds
        if done < low:
            return False
        return done >= high or self.below(high - done + 1) == 0


@dataclass
class TimedCalls:
    """What a timing loop measured, one entry per timed call, in call order."""

    samples_ms: list[float]  # GPU time per call (CPU: wall time)
    host_ms: list[float] = field(default_factory=list)  # time the host spent in the call (launching)
    sets: list[int] = field(default_factory=list)  # the input set of each call (-1: fresh inputs)
    input_seeds: list[int | None] = field(default_factory=list)  # the seed of each call's fresh inputs
    copies: list[int] = field(default_factory=list)  # the staging copy (placement) of each call's inputs
    warmup: int = 0
    prequeue_ms: float = 0.0  # the GPU spin before the timed calls, the median over them (see time_gpu)
    # Calls whose launch took longer than the spin before them: the GPU may have idled inside the timed span
    # waiting for the host (a busy CPU). Each one lengthens the spin for the call after it.
    exposed: int = 0
    # Where the loop's own wall time went (ms): ``setup`` (the spin's rate, buffers), ``warmup``, and per timed
    # call ``inputs`` (made and staged), ``launch`` (flush, spin, the call), ``wait`` (for the GPU) and
    # ``check`` (the caller's after-call check). What holds the GPU's exclusive lock, and for how long.
    loop_ms: dict[str, float] = field(default_factory=dict)
    # The same parts in the loop thread's own CPU time (``time.thread_time``), and the thread's context switches
    # over the loop (``voluntary``: it blocked, on the GPU or a lock; ``involuntary``: the kernel took its CPU
    # away). Wall time well above CPU time with many involuntary switches: the loop waited for a CPU; the two
    # close: its host work itself was slow. Empty where the clock is not given (or on the CPU's loop).
    loop_cpu_ms: dict[str, float] = field(default_factory=dict)
    switches: dict[str, int] = field(default_factory=dict)
    # Memory the loop asked the driver for (CUDA): ``device`` segments (cudaMalloc) and ``host`` pinned blocks
    # (cudaHostAlloc) in the set-up and warm-up, and in the timed calls. Each is a driver call that can wait
    # behind another process's new CUDA context inside the exclusive hold (docs/benchmarks.md §8f).
    allocations: dict[str, int] = field(default_factory=dict)


STAGING_COPIES = 3  # input buffers a timing loop rotates over (one when the inputs are large)
STAGING_ROTATION_MAX_BYTES = 2 * 2**30


class Staging:
    """Tensors at fixed addresses that each call's inputs are copied into (outside any timed region).

    ``copies`` sets of them, used in turn: where a buffer lands in device memory can make a memory-bound
    kernel a percent or two faster or slower, so a timing loop spreads its calls over a few placements rather
    than betting the median on one.
    """

    def __init__(self, first: list[Any], copies: int = 1) -> None:
        import torch

        self._torch = torch
        size = sum(x.numel() * x.element_size() for x in first if isinstance(x, torch.Tensor))
        copies = copies if size * copies <= STAGING_ROTATION_MAX_BYTES else 1
        self.sets = [[x.clone() if isinstance(x, torch.Tensor) else x for x in first] for _ in range(copies)]
        self.tensors = self.sets[0]
        self.copy = 0
        self._next = 0

    def load(self, inputs: list[Any]) -> list[Any]:
        self.copy = self._next % len(self.sets)  # which placement these inputs are staged at
        self.tensors = self.sets[self.copy]
        self._next += 1
        staged = []
        for slot, value in zip(self.tensors, inputs):
            if isinstance(value, self._torch.Tensor):
                if (
                    isinstance(slot, self._torch.Tensor)
                    and slot.shape == value.shape
                    and slot.dtype == value.dtype
                ):
                    slot.copy_(value)
                    staged.append(slot)
                else:
                    staged.append(value.clone())
            else:
                staged.append(value)
        return staged


def l2_flush_bytes() -> int:
    """The L2 flush buffer's size: twice the L2, at least ``L2_FLUSH_MIN_BYTES``."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return max(L2_FLUSH_MIN_BYTES, 2 * int(getattr(props, "L2_cache_size", 0) or 0))


def l2_flush_buffer() -> Any:
    import torch

    return torch.empty(l2_flush_bytes(), dtype=torch.int8, device="cuda")


def _after_first(values: list[float]) -> list[float]:
    """A warm-up's readings without its first call (which may re-run an autotuner's benchmarks or compile),
    when there are others."""
    return values[1:] if len(values) > 1 else values


def spin_for(launches: list[float]) -> float:
    """Twice the 75th percentile of ``launches`` (host ms) plus ``PREQUEUE_MIN_MS``, within the bounds."""
    if not launches:
        return PREQUEUE_MIN_MS
    ordered = sorted(launches)
    slow = ordered[min(len(ordered) - 1, int(0.75 * len(ordered)))]
    return min(PREQUEUE_MAX_MS, max(PREQUEUE_MIN_MS, 2.0 * slow + PREQUEUE_MIN_MS))


def _inputs_for(
    schedule: Schedule, input_sets: list[list[Any]], fresh_inputs: FreshInputs | None
) -> tuple[int, int | None, list[Any]]:
    chosen, seed = schedule.pick(len(input_sets), fresh_inputs is not None)
    inputs = fresh_inputs(seed) if seed is not None and fresh_inputs is not None else input_sets[chosen]
    return chosen, seed, inputs


def steady_ms(wall_ms: list[float]) -> float:
    """A warm-up's time per call: the median wall time, the first call (an autotuner's benchmarks, a
    compilation) left out when there are others."""
    steady = sorted(_after_first(wall_ms))
    return steady[len(steady) // 2] if steady else 0.0


PLACEMENT_MIN_CALLS = 8  # calls a staging copy needs for its median to count in placement_spread


def copy_medians(samples_ms: list[float], copies: list[int]) -> dict[int, float]:
    """The median time of the calls on each staging copy, over the copies with at least
    ``PLACEMENT_MIN_CALLS`` calls."""
    by_copy: dict[int, list[float]] = {}
    for ms, copy in zip(samples_ms, copies):
        by_copy.setdefault(copy, []).append(ms)
    return {c: sorted(v)[len(v) // 2] for c, v in by_copy.items() if len(v) >= PLACEMENT_MIN_CALLS}


def placement_spread(samples_ms: list[float], copies: list[int]) -> float | None:
    """How much the time depends on where the inputs lie in memory: the largest relative difference between
    the medians of the calls on each staging copy (the same inputs at another address; ``max / min - 1``),
    over the copies with at least ``PLACEMENT_MIN_CALLS`` calls. ``None`` with fewer than two such copies.

    Measured on an H100 (docs/benchmarks.md §1b5): the suite's layernorm seed runs 0.149 ms on one copy and
    0.167 ms on the others, rmsnorm and l2_norm differ by 2-4 %, an elementwise kernel by under 0.7 %."""
    medians = list(copy_medians(samples_ms, copies).values())
    if len(medians) < 2 or min(medians) <= 0:
        return None
    return max(medians) / min(medians) - 1.0


def time_gpu(
    fn: Callable[..., Any],
    input_sets: list[list[Any]],
    timers: dict[str, Any],
    schedule: Schedule,
    after_call: AfterCall | None = None,
    fresh_inputs: FreshInputs | None = None,
    budget_ms: float = TIMED_BUDGET_MS,
    least: int = MIN_TIMED_CALLS,
    before_wait: BeforeWait | None = None,
    after_wait: AfterWait | None = None,
) -> TimedCalls:
    record, elapsed, sync = timers["record"], timers["elapsed"], timers["synchronize"]
    stream, perf, event = timers["stream"], timers["perf_counter"], timers["event_class"]
    spin = timers["sleep"]
    parts = dict.fromkeys(("setup", "warmup", "inputs", "launch", "wait", "check"), 0.0)
    thread_clock = timers.get("thread_time")  # the loop thread's CPU time: where its wall time went
    cpu_parts = dict.fromkeys(parts, 0.0)
    switches_before = thread_switches()
    allocs_start = driver_allocations()
    mark = perf()
    cpu_mark = thread_clock() if thread_clock is not None else 0.0

    def lap(part: str) -> None:
        nonlocal mark, cpu_mark
        now = perf()
        parts[part] += now - mark
        mark = now
        if thread_clock is not None:
            cpu_now = thread_clock()
            cpu_parts[part] += cpu_now - cpu_mark
            cpu_mark = cpu_now

    # Measured again here, where the caller holds the GPU alone: other work stretches the spin.
    cycles_per_ms = spin_rate(timers)
    flush = l2_flush_buffer()
    staging = Staging(input_sets[0], STAGING_COPIES)
    sets = len(input_sets)
    host_warm: list[float] = []
    wall_warm: list[float] = []
    done = 0
    lap("setup")
    while True:
        inputs = staging.load(input_sets[schedule.below(sets)])
        sync()
        begin = perf()
        fn(*inputs)
        host_warm.append((perf() - begin) * 1e3)
        sync()
        wall_warm.append((perf() - begin) * 1e3)
        done += 1
        # Slow calls: once the warm-up after its first call (an autotuner's benchmarks) has taken the budget,
        # each further call may be the last, drawn as the rest of the schedule is (no call count to aim at).
        over = done >= 3 and sum(wall_warm[1:]) >= WARMUP_BUDGET_MS
        if over and schedule.below(2) == 0:
            break
        if schedule.stop(done, schedule.warmup):
            break
    if len(wall_warm) >= 2:  # a time per call that is not the first call's
        schedule.fit(steady_ms(wall_warm), budget_ms, least)
    recent = deque(_after_first(host_warm)[-SPIN_WINDOW:], maxlen=SPIN_WINDOW)
    spin_ms = spin_for(list(recent))
    spins: list[float] = []
    lap("warmup")
    result = TimedCalls(samples_ms=[], warmup=done)
    start, end = event(enable_timing=True), event(enable_timing=True)
    calls = 0
    allocs_warm = driver_allocations()

    def queue_next() -> tuple[int, int | None, list[Any], int]:
        """The next call's inputs staged and the L2 flushed, queued on the stream."""
        chosen, seed, fresh = _inputs_for(schedule, input_sets, fresh_inputs)
        inputs = staging.load(fresh)
        del fresh
        flush.zero_()
        lap("inputs")
        return chosen, seed, inputs, staging.copy

    upcoming = queue_next()
    while True:
        chosen, seed, inputs, copy = upcoming
        spins.append(spin_ms)
        # The GPU stays busy while the host launches: the events see only the GPU's time.
        spin(int(spin_ms * cycles_per_ms))
        record(start, stream)
        begin = perf()
        out = fn(*inputs)
        host = (perf() - begin) * 1e3
        record(end, stream)
        del inputs
        lap("launch")
        if before_wait is not None:
            try:
                before_wait(calls, out)  # anything queued runs behind the call: outside the events
            except BaseException:
                sync()  # a refused call's kernels end inside the loop: the driver lets the lock go on the error
                raise
            lap("check")
        sync()
        lap("wait")
        # The spin may have run out before the launch did (the GPU then idled inside the events): counted, and
        # the next call's spin covers twice such a launch. Otherwise the spin follows the recent launches: one
        # slow launch (a descheduled host) does not keep every later call's spin long, and the hold with it.
        recent.append(host)
        exposed = host >= spin_ms
        result.exposed += int(exposed)
        spin_ms = spin_for(list(recent))
        if exposed:
            spin_ms = min(PREQUEUE_MAX_MS, max(spin_ms, 2.0 * host + PREQUEUE_MIN_MS))
        result.samples_ms.append(float(elapsed(start, end)))
        result.host_ms.append(host)
        result.sets.append(chosen)
        result.input_seeds.append(seed)
        result.copies.append(copy)
        calls += 1
        last = schedule.stop(calls, schedule.trials)
        try:
            if after_wait is not None:
                after_wait(calls - 1, out, last)  # before anything of the next call is queued
                lap("check")
            if not last:
                # The next call's inputs are copied and the L2 flushed on the GPU while the host checks
                # this one: the loop's wall time is not the sum of the two.
                upcoming = queue_next()
            if after_call is not None:
                after_call(calls - 1, chosen, out, last, result.samples_ms[-1], host)
        except BaseException:
            sync()  # nothing queued for a call that will not come outlives the loop
            raise
        del out
        lap("check")
        if last:
            break
    sync()
    result.prequeue_ms = round(sorted(spins)[len(spins) // 2], 4)
    result.loop_ms = {k: round(v * 1e3, 2) for k, v in parts.items()}
    if thread_clock is not None:
        result.loop_cpu_ms = {k: round(v * 1e3, 2) for k, v in cpu_parts.items()}
    switches_after = thread_switches()
    if switches_before and switches_after:
        result.switches = {k: switches_after[k] - switches_before[k] for k in switches_after}
    allocs_end = driver_allocations()
    if allocs_start and allocs_warm and allocs_end:
        for kind in allocs_start:
            result.allocations[f"{kind}_warmup"] = allocs_warm[kind] - allocs_start[kind]
            result.allocations[f"{kind}_calls"] = allocs_end[kind] - allocs_warm[kind]
    return result


def driver_allocations() -> dict[str, int]:
    """How many times this process's caching allocators have asked the CUDA driver for memory so far:
    ``device`` segments and ``host`` (pinned) blocks. Empty where CUDA is not running or torch does not say."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    try:
        device = int(torch.cuda.memory_stats().get("num_device_alloc", -1))
        host = int(torch.cuda.host_memory_stats().get("num_host_alloc", -1))
    except (AttributeError, RuntimeError):
        return {}
    return {"device": device, "host": host} if device >= 0 and host >= 0 else {}


def thread_switches() -> dict[str, int]:
    """The calling thread's context switches so far (Linux: ``RUSAGE_THREAD``; empty elsewhere)."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", None)
    if who is None:
        return {}
    usage = resource.getrusage(who)
    return {"voluntary": int(usage.ru_nvcsw), "involuntary": int(usage.ru_nivcsw)}


def time_cpu(
    fn: Callable[..., Any],
    input_sets: list[list[Any]],
    timers: dict[str, Any],
    schedule: Schedule,
    after_call: AfterCall | None = None,
    fresh_inputs: FreshInputs | None = None,
) -> TimedCalls:
    perf = timers["perf_counter"]
    staging = Staging(input_sets[0])
    sets = len(input_sets)
    done = 0
    while True:
        fn(*staging.load(input_sets[schedule.below(sets)]))
        done += 1
        if schedule.stop(done, schedule.warmup):
            break
    result = TimedCalls(samples_ms=[], warmup=done)
    calls = 0
    while True:
        chosen, seed, fresh = _inputs_for(schedule, input_sets, fresh_inputs)
        inputs = staging.load(fresh)
        del fresh
        begin = perf()
        out = fn(*inputs)
        wall = (perf() - begin) * 1e3
        result.samples_ms.append(wall)
        result.host_ms.append(wall)
        result.sets.append(chosen)
        result.input_seeds.append(seed)
        result.copies.append(staging.copy)
        calls += 1
        last = schedule.stop(calls, schedule.trials)
        if after_call is not None:
            after_call(calls - 1, chosen, out, last, wall, wall)
        del out
        if last:
            break
    return result


def time_calls(
    device: str,
    fn: Callable[..., Any],
    input_sets: list[list[Any]],
    timers: dict[str, Any],
    trials: int,
    warmup: int,
    after_call: AfterCall | None = None,
    fresh_inputs: FreshInputs | None = None,
    budget_ms: float = TIMED_BUDGET_MS,
    least: int = MIN_TIMED_CALLS,
    before_wait: BeforeWait | None = None,
    after_wait: AfterWait | None = None,
) -> TimedCalls:
    """Time ``fn`` over ``input_sets`` with a schedule drawn as it goes (about ``trials`` timed calls, fewer
    on the GPU for calls so slow that they would take more than ``budget_ms``: see :meth:`Schedule.fitted`);
    with ``fresh_inputs``, a third of the timed calls get inputs made for them alone. ``before_wait`` and
    ``after_wait`` (GPU only): see :data:`BeforeWait` and :data:`AfterWait`."""
    schedule = Schedule(timers["urandom"], trials, warmup)
    if device == "cuda":
        return time_gpu(
            fn,
            input_sets,
            timers,
            schedule,
            after_call,
            fresh_inputs,
            budget_ms,
            least,
            before_wait,
            after_wait,
        )
    return time_cpu(fn, input_sets, timers, schedule, after_call, fresh_inputs)


def reference_timers(device: str) -> dict[str, Any]:
    """Timers for the reference worker (no candidate there, so nothing to guard)."""
    import os
    import time

    timers: dict[str, Any] = {
        "perf_counter": time.perf_counter,
        "thread_time": time.thread_time,
        "urandom": os.urandom,
    }
    if device == "cuda":
        timers.update(cuda_timers())
    return timers


def cuda_timers() -> dict[str, Any]:
    """Events, synchronisation and the GPU spin, with the spin's cycles per millisecond measured once."""
    import torch

    base = torch._C._CudaEventBase
    timers = {
        "event_class": base,
        "record": base.record,
        "elapsed": base.elapsed_time,
        "synchronize": torch._C._cuda_synchronize,
        "stream": torch.cuda.default_stream(),
        "sleep": torch._C._cuda_sleep,
    }
    timers["sleep_cycles_per_ms"] = spin_rate(timers)
    return timers


def spin_rate(timers: dict[str, Any], cycles: int = 2_000_000) -> float:
    """Cycles of ``torch.cuda._sleep`` per millisecond on this GPU, measured with events."""
    event, record, stream = timers["event_class"], timers["record"], timers["stream"]
    start, end = event(enable_timing=True), event(enable_timing=True)
    timers["synchronize"]()
    record(start, stream)
    timers["sleep"](cycles)
    record(end, stream)
    timers["synchronize"]()
    return cycles / max(1e-3, float(timers["elapsed"](start, end)))
