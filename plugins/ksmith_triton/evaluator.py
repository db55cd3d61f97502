"""The evaluation protocol, run in the driver: spawn, compare with the reference, time, give the verdict.

One evaluation:

1. Fresh seeds from ``secrets`` for the model's weights, every correctness trial and every timing input set.
2. The candidate's worker (a child process, started ahead of need: ``pool.py``) builds the problem from its
   source text, generates all inputs from those seeds, installs the guards, imports the candidate and calls
   it once (Triton compiles here; the worker holds the GPU lock shared until then). On the driver's word it
   runs each trial and writes its outputs (``candidate_side.run_trials_and_timing``).
3. Only then does the problem's reference worker compute reference outputs for the same seeds and compare the
   candidate's outputs with them on the device (``reference_side.compare_with_reference``): the candidate
   runs first and in another process, so it can neither read nor disturb them.
4. If correct, reference timings (eager and torch.compile) come from the cache or are measured, and the
   candidate is timed in its still-running worker, both under the device's ``exclusive_gpu_lock``, with a
   schedule drawn call by call (``timing.py``). Every timed call reports samples of its outputs at once; the
   reference process checks them (``reference_side.check_sampled_calls``), and the calls checked in full
   are compared like the trials. The per-call reports are checked for forgery, the timings for
   contradictions (``forged_call_reports``, ``timing_contradictions``).
5. Speedups (the candidate's median over calls on fresh inputs), the roofline fraction, and flags (a > 10x
   speedup is re-validated in a new worker with fresh inputs and a fresh schedule).

Every other GPU step (trials, reference outputs, comparison) holds the device's ``shared_gpu_lock``, so
concurrent evaluations overlap with each other but never with a timed loop (``locks.py``). Before any of it,
the evaluation is admitted to its GPU by its expected peak memory, and one that runs out of memory beside
others is judged again alone (``admitted_run``, ``admission.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from ksmith_core.errors import KsmithError, ProblemError
from ksmith_core.model import (
    DEFAULT_TOLERANCES,
    Candidate,
    EvalOptions,
    Mismatch,
    Problem,
    Status,
    TimingStats,
    Verdict,
)
from ksmith_triton import PROTOCOL_VERSION, admission
from ksmith_triton.compare import tolerance_table
from ksmith_triton.inductor_tuning import autotune_summary
from ksmith_triton.locks import (
    LOCK_DIR_ENV,
    choose_gpu,
    exclusive_gpu_lock,
    lock_dir,
    lock_wait_s,
    physical_gpu,
    shared_gpu_lock,
)
from ksmith_triton.pool import POOL, discard
from ksmith_triton.refcache import ReferenceCache
from ksmith_triton.roofline import ceilings_within_peaks, place_on_roofline, platform_peaks, roofline_work
from ksmith_triton.sandbox import Child, ChildExit, private_dir, remove_tree
from ksmith_triton.timing import (
    FRESH_SHARE,
    PREQUEUE_MAX_MS,
    TIMED_BUDGET_MS,
    Schedule,
    copy_medians,
    placement_spread,
)

log = logging.getLogger(__name__)

SUSPICIOUS_SPEEDUP = 10.0
TIMING_SETS = {"cuda": 3, "cpu": 2}
CPU_TIMING_TRIALS = 3
CPU_WARMUP = 1
REFERENCE_TIMEOUT_S = 900.0
# Every trial's outputs together above this: each trial is compared as soon as it ran (``_stream_trials``).
STREAM_TRIALS_ABOVE_BYTES = 8 << 30
# After its trials' GPU work, the worker gives back its cached memory unheld: at least this long for it.
RELEASE_AFTER_TRIALS_MIN_S = 30.0
COMPARE_TIMEOUT_MIN_S = 60.0  # comparing a candidate's outputs takes at most this or the candidate's timeout
MAX_REFERENCE_WORKERS = 16  # warm reference processes kept; the least recently used one goes first
OUTPUT_TAIL_IN_DETAILS = 1500


# ---------------------------------------------------------------------------------------------------------------
# Reference workers: one long-lived process per (problem, device, GPU, size)
# ---------------------------------------------------------------------------------------------------------------


class ReferenceWorker:
    """A warm reference process. It never runs candidate code, so reusing it across evaluations is safe."""

    def __init__(self, problem: Problem, device: str, gpu: str | None, small: bool) -> None:
        self.problem, self.device, self.gpu, self.small = problem, device, gpu, small
        self.lock = threading.Lock()
        self.dir = private_dir("ksmith-ref-")
        self.child: Child | None = None
        self.info: dict[str, Any] = {}
        self._info_pending = False
        self.closed = False  # retired from the table of warm workers

    def _spawn(self) -> Child:
        """Start the process and ask for its facts; the answer is read with the first request."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # a retired worker may be revived
        job = {
            "device": self.device,
            "problem_source": self.problem.source,
            "small_sizes": dict(self.problem.small_sizes) if self.small else None,
        }
        self.child = Child("reference", job, self.dir, child_env(self.device, self.gpu))
        self.child.send({"op": "info"})
        self._info_pending = True
        return self.child

    def _running(self) -> Child:
        child = self.child if self.child and self.child.proc.poll() is None else self._spawn()
        if self._info_pending:
            info = child.wait_message("info", REFERENCE_TIMEOUT_S)
            if not isinstance(info, dict) or info.get("kind") != "info":
                self._fail(info, "starting")
            self.info = info  # type: ignore[assignment]
            self._info_pending = False
        return child

    def facts(self) -> dict[str, Any]:
        """What the process answered at start-up (device, versions, the problem's input and output bytes),
        starting it if need be."""
        if self.info and self.child is not None and self.child.proc.poll() is None:
            return self.info
        with self.lock:
            self._running()
            return self.info

    def warm(self) -> None:
        """Start the process now (it imports torch while the candidate runs) without waiting for it."""
        with self.lock:
            if self.child is None or self.child.proc.poll() is not None:
                self._spawn()

    def _fail(self, result: dict[str, Any] | ChildExit, what: str) -> None:
        if isinstance(result, dict) and result.get("problem_step"):
            log.debug("reference process of %s: %s", self.problem.name, result.get("error", ""))
            raise ProblemError(f"problem {self.problem.name}: {result.get('reason')}")
        # The exception's one line (``reason``) leads: a traceback's first line says nothing. The traceback
        # goes to the debug log.
        if isinstance(result, dict) and result.get("error"):
            log.debug("reference process of %s: %s", self.problem.name, result["error"])
        detail = (
            result.describe()
            if isinstance(result, ChildExit)
            else result.get("reason") or result.get("error")
        )
        tail = self.child.output_tail()["stderr"][-1500:] if self.child else ""
        if self.child:
            self.child.kill()
        self.child = None
        raise ProblemError(
            f"the reference Model of problem {self.problem.name} failed while {what}: {detail}\n{tail}".strip()
        )

    def request(
        self,
        op: str,
        timeout_s: float = REFERENCE_TIMEOUT_S,
        hold: contextlib.AbstractContextManager | None = None,
        **payload: Any,
    ) -> dict[str, Any]:
        """One request, answered. ``hold``: the GPU lock the request needs (``shared_gpu_lock`` or
        ``exclusive_gpu_lock``), taken only once it is this request's turn: an evaluation queued behind
        another's request holds no lock meanwhile, so a timer never waits for a queue of comparisons that
        have not started. The order is always this worker first, the GPU's lock second; nothing waits for a
        reference worker while holding the GPU's lock."""
        with self.lock:
            result = self._exchange(op, timeout_s, hold, payload)
            if self.closed:  # retired while an evaluation still used it: the process it revived goes too
                self._close_now()
            return result

    def _exchange(
        self,
        op: str,
        timeout_s: float,
        hold: contextlib.AbstractContextManager | None,
        payload: dict[str, Any],
    ) -> dict[str, Any]:
        """One request answered, with ``self.lock`` held by the caller."""
        with hold if hold is not None else contextlib.nullcontext():
            child = self._running()
            cpu_before = child.cpu_seconds()
            child.send({"op": op, **payload})
            result = child.wait_message(op, timeout_s)
            if not isinstance(result, dict) or result.get("kind") != op:
                self._fail(result, f"answering {op!r}")
            cpu_after = child.cpu_seconds()
            if cpu_before is not None and cpu_after is not None:
                charge_reference_cpu(cpu_after - cpu_before)
        return result  # type: ignore[return-value]

    def compare_with_reference(
        self,
        init_seed: int,
        seeds: list[int],
        got: list[dict[str, Any]],
        directory: Path,
        timeout_s: float = REFERENCE_TIMEOUT_S,
        hold: contextlib.AbstractContextManager | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Reference outputs for ``seeds``, and the candidate's outputs (described by ``got``) compared with
        them in the reference process; see ``reference_side.compare_with_reference``. GPU outputs are mapped
        before ``hold`` is taken and let go after it is given back: those are driver calls, not GPU work, and
        they wait on other processes' (``reference_side._prepared``)."""
        request = {"init_seed": init_seed, "seeds": seeds, "got": got, "directory": str(directory), **options}
        if not got:
            return self.request("compare", timeout_s, hold, **request)
        with self.lock:
            token = secrets.token_hex(8)
            ready = self._exchange(
                "prepare_outputs",
                timeout_s,
                None,
                {"got": got, "directory": str(directory), "token": token},
            )
            prepared_by, released = self.child, {}
            try:
                compared = self._exchange("compare", timeout_s, hold, {**request, "prepared": token})
            finally:
                # Let go whatever happened to the comparison, where the process that mapped them still runs
                # (one that failed was killed, and its mappings went with it). A process lost while letting go
                # does not undo the comparison it answered.
                if prepared_by is not None and self.child is prepared_by:
                    try:
                        released = self._exchange("release_outputs", timeout_s, None, {})
                    except ProblemError as exc:
                        log.debug("reference process of %s, releasing outputs: %s", self.problem.name, exc)
                if self.closed:  # retired while this request ran: the process it revived goes too
                    self._close_now()
        # One account of the request's steps; the unheld ones are named so.
        compared["steps"] = {
            **ready.get("steps", {}),
            **compared.get("steps", {}),
            **released.get("steps", {}),
        }
        return compared

    def close(self) -> None:
        self.closed = True
        self._close_now()

    def _close_now(self) -> None:
        if self.child:
            self.child.kill()  # it holds nothing worth a graceful exit
            self.child = None
        remove_tree(self.dir)


_workers: dict[tuple, ReferenceWorker] = {}
_workers_lock = threading.Lock()

# Per thread: CPU seconds the reference processes spent answering the requests of the evaluation this thread
# runs (``Evaluation.run`` opens the account; a reference process serves every evaluation of its problem, so
# its own total says nothing about one of them).
_reference_cpu = threading.local()


def charge_reference_cpu(seconds: float) -> None:
    if getattr(_reference_cpu, "seconds", None) is not None:
        _reference_cpu.seconds += max(0.0, seconds)


def reference_worker(problem: Problem, device: str, gpu: str | None, small: bool) -> ReferenceWorker:
    key = (problem.sha, problem.name, device, gpu, small)
    retired = None
    with _workers_lock:
        worker = _workers.pop(key, None)
        if worker is None:
            worker = ReferenceWorker(problem, device, gpu, small)
            if len(_workers) >= MAX_REFERENCE_WORKERS:
                retired = _workers.pop(next(iter(_workers)))
        _workers[key] = worker  # most recently used last
    if retired is not None:
        with retired.lock:
            retired.close()
    return worker


@atexit.register
def close_reference_workers() -> None:
    with _workers_lock:
        for worker in _workers.values():
            worker.close()
        _workers.clear()


def child_env(device: str, gpu: str | None) -> dict[str, str]:
    if device == "cuda":
        return {"CUDA_VISIBLE_DEVICES": gpu or "0", LOCK_DIR_ENV: str(lock_dir()), **serial_inductor_env()}
    return {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}


# A candidate worker's CUDA context gets one hardware work queue instead of eight. Each queue is a channel the
# driver sets up under a lock that the whole host shares, and every evaluation creates one context: on a 2x H200
# host, 16 workers starting at once made 3.41 contexts/s with eight queues and 6.42 with one, whichever GPU
# each used (benchmarks/cuda_context_rate.py, docs/benchmarks.md §8c). A candidate's kernels run one after
# another on its stream, which one queue serves as well. A value in the user's environment is kept.
WORKER_CONNECTIONS_ENV = "CUDA_DEVICE_MAX_CONNECTIONS"


def candidate_env(device: str, gpu: str | None) -> dict[str, str]:
    """A candidate worker's environment: a reference process's (``child_env``) and one work queue on a GPU."""
    env = child_env(device, gpu)
    if device == "cuda":
        env[WORKER_CONNECTIONS_ENV] = os.environ.get(WORKER_CONNECTIONS_ENV, "1")
    return env


def serial_inductor_env() -> dict[str, str]:
    """Inductor compiling in its own process, one kernel after another, unless the user chose otherwise.

    Left alone, every process that calls torch.compile (a reference worker, an Inductor seed) starts a pool of
    as many compile workers as the machine has cores, each importing torch. Eight evaluations at once on a
    16-core machine then start over a hundred of them, for graphs of a few kernels each: on the H100 an Inductor
    seed of a cumsum took 40-170 s that way. The generated code and its autotuning are the same either way."""
    if "TORCHINDUCTOR_COMPILE_THREADS" in os.environ:
        return {}
    return {"TORCHINDUCTOR_COMPILE_THREADS": "1"}


# ---------------------------------------------------------------------------------------------------------------
# What the timed calls reported
# ---------------------------------------------------------------------------------------------------------------

REFERENCE_FIELDS = (
    "eager_ms",
    "eager_blocks",
    "eager_copies",
    "compile_ms",
    "compile_blocks",
    "compile_copies",
    "compile_error",
    "compile_autotune",
    "host_ms",
)
SAMPLED_CALL_FIELDS = (
    "index",
    "set",
    "input_seed",
    "seed",
    "structure",
    "dtypes",
    "shapes",
    "devices",
    "samples",
)
# A block of calls this much faster than the rest cannot be noise: the candidate behaves in two ways.
BIMODAL_GAP = 1.15
# ... and faster by at least this much (ms): an honest candidate of two launches and 6-8 us splits into two
# modes about 1 us apart on the same data (on H200s 0.9-1.4 us below the median; one launch does not split:
# docs/benchmarks.md §8g). Skipping work worth less than this on a minority of calls moves no median.
BIMODAL_FLOOR_MS = 0.002
BIMODAL_MIN_SHARE = 0.1
# Fully checked calls this much slower than the others: the candidate knew which calls were looked at.
CHECKED_SLOWER = 1.10
# Calls on inputs seen before this much faster than calls on fresh ones: a cache of results.
CACHE_GAP = 1.5
UNSTEADY_SPREAD = 0.02
HOST_DELAY_SHARE = 0.05  # of timed calls launched slower than their spin covered: flagged above this
MIN_FRESH_FOR_RUNTIME = 8  # fewer calls on fresh inputs (the CPU's short runs): the median of all calls  # a reference whose timing blocks differ more than this makes its speedup uncertain


def forged_call_reports(
    calls: list[dict[str, Any]], report: dict[str, Any], sets: int, trials: int | None = None
) -> str:
    """Why the per-call reports cannot be the harness's (a reason), or ``""``.

    One report per timed call, in order, as many as the schedule allows for ``trials``; each with an input set
    that exists, numbers where numbers belong, samples described consistently, a sample seed no other call
    had; fresh inputs on about a third of the calls (a schedule bent to show fewer is refused); and at least
    one call checked in full. The reports come from the candidate's process, so these checks raise the bar
    for a candidate that reaches into the harness (docs/evaluation.md, "Limits")."""
    count = report.get("calls")
    indices = [c.get("index") if isinstance(c, dict) else None for c in calls]
    if not isinstance(count, int) or count < 1 or indices != list(range(count)):
        return (
            f"FORGED_REPORT: the timed calls' reports do not match the run ({len(calls)} reports, indices "
            f"{indices[:5]}..., {count!r} calls announced)"
        )
    if trials is not None:
        low, high = allowed_calls(calls, trials)
        if not low <= count <= high:
            return f"FORGED_REPORT: {count} timed calls where the schedule allows {low} to {high}"
    for call in calls:
        reason = _malformed(call, sets)
        if reason:
            return f"FORGED_REPORT: timed call {call['index']} {reason}"
    seeds = [c["seed"] for c in calls]
    if len(set(seeds)) != len(seeds):
        return "FORGED_REPORT: two timed calls report the same sample seed"
    fresh = sum(1 for c in calls if c["set"] == -1)
    if count >= 12 and _binomial_tail(count, fresh, FRESH_SHARE) < 1e-6:
        return f"FORGED_REPORT: {fresh} of {count} timed calls had fresh inputs, where about a third must"
    if not any("outputs" in c for c in calls):
        return "FORGED_REPORT: no timed call's whole outputs were kept for the full check"
    return ""


def attach_full_outputs(calls: list[dict[str, Any]], outputs: Any) -> str:
    """Put the whole outputs of the calls kept for a full check (sent after the timing, by call index) into
    those calls' reports; a reason when they are not exactly the calls whose reports said ``full``."""
    flagged = {str(c.get("index")) for c in calls if isinstance(c, dict) and c.get("full") is True}
    if not isinstance(outputs, dict) or set(outputs) != flagged:
        return (
            "FORGED_REPORT: the kept outputs do not match the calls kept for a full check "
            f"({sorted(flagged)[:5]} kept)"
        )
    for call in calls:
        if str(call.get("index")) in flagged:
            call["outputs"] = outputs[str(call["index"])]
    return ""


def allowed_calls(calls: list[dict[str, Any]], trials: int) -> tuple[int, int]:
    """The fewest and most timed calls the schedule allows for ``trials`` asked. Slow calls may be fewer
    (``Schedule.fitted``); the harness fits them to the warm-up's wall time per call, which the reports do
    not carry, so here a call is taken to last twice its reported GPU + launch time (a looser floor)."""
    # A launch longer than the spin shows up in the GPU time already; past PREQUEUE_MAX_MS it adds nothing
    # here, so a report cannot lower the floor by claiming slow launches.
    walls = sorted(
        c["gpu_ms"] + min(c["host_ms"], PREQUEUE_MAX_MS)
        for c in calls
        if isinstance(c, dict)
        and all(isinstance(c.get(k), (int, float)) and math.isfinite(c[k]) for k in ("gpu_ms", "host_ms"))
    )
    per_call = 2.0 * walls[len(walls) // 2] if walls else 0.0
    low = Schedule.bounds(Schedule.fitted(trials, per_call, TIMED_BUDGET_MS))[0]
    return low, Schedule.bounds(trials)[1]


def _malformed(call: dict[str, Any], sets: int) -> str:
    if not isinstance(call.get("set"), int) or not -1 <= call["set"] < sets:
        return f"names input set {call.get('set')!r}"
    if call["set"] == -1 and not isinstance(call.get("input_seed"), int):
        return "had fresh inputs but names no seed"
    if not all(
        isinstance(call.get(k), (int, float)) and math.isfinite(call[k]) and call[k] >= 0
        for k in ("gpu_ms", "host_ms")
    ):
        return "reports no usable time"
    samples = call.get("samples")
    if not isinstance(call.get("seed"), int) or not isinstance(samples, list):
        return "reports no samples"
    if not all(isinstance(text, str) for text in samples) or not isinstance(call.get("structure"), str):
        return "describes its samples wrongly"
    for key in ("dtypes", "shapes", "devices"):
        if not isinstance(call.get(key), list) or len(call[key]) != len(samples):
            return f"describes its outputs' {key} wrongly"
    if "outputs" in call and not isinstance(call["outputs"], list):
        return "describes its outputs wrongly"
    return ""


def _binomial_tail(n: int, k: int, p: float) -> float:
    """Two-sided: the probability of a count at least as far from ``n * p`` as ``k`` is."""
    from math import comb

    expected = n * p
    far = abs(k - expected)
    return sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(n + 1) if abs(i - expected) >= far)


def unsteady_reasons(runtime: TimingStats, eager: TimingStats, compiled: TimingStats | None) -> list[str]:
    """Flags (the verdict stays ``ok``) for timings whose blocks disagree by more than ``UNSTEADY_SPREAD``."""
    reasons = []
    for label, stats in (("the eager", eager), ("the torch.compile", compiled)):
        if stats is not None and stats.spread is not None and stats.spread > UNSTEADY_SPREAD:
            reasons.append(
                f"UNSTEADY_REFERENCE: {label} reference's timing blocks differ by {stats.spread:.1%} "
                f"(> {UNSTEADY_SPREAD:.0%}); the speedup against it is uncertain by as much"
            )
    if runtime.spread is not None and runtime.spread > UNSTEADY_SPREAD:
        reasons.append(
            f"UNSTEADY_TIMING: the candidate's first and second half of timed calls differ by {runtime.spread:.1%}"
        )
    return reasons


def placement_reasons(candidate: float | None, eager: float | None, compiled: float | None) -> list[str]:
    """Flags (the verdict stays ``ok``) for times that depend on where the inputs lie in memory by more than
    ``UNSTEADY_SPREAD``: the medians of the calls on each staging copy (``timing.placement_spread``). Another
    evaluation, its buffers elsewhere, may read that much differently, whatever else runs on the GPU."""
    reasons = []
    if candidate is not None and candidate > UNSTEADY_SPREAD:
        reasons.append(
            f"PLACEMENT_SENSITIVE_TIMING: the candidate's calls on its inputs' placements in memory differ by "
            f"{candidate:.1%} in median; another evaluation, its buffers elsewhere, may read up to that much "
            "differently"
        )
    for label, spread in (("the eager", eager), ("the torch.compile", compiled)):
        if spread is not None and spread > UNSTEADY_SPREAD:
            reasons.append(
                f"PLACEMENT_SENSITIVE_REFERENCE: {label} reference's calls on its inputs' placements in memory "
                f"differ by {spread:.1%} in median; the speedup against it is uncertain by as much"
            )
    return reasons


def call_copies(copies: Any, calls: list[dict[str, Any]]) -> list[int] | None:
    """Each reported call's staging copy, from the worker's list (``None`` where it does not fit the calls)."""
    if not isinstance(copies, list) or len(copies) != len(calls):
        return None
    try:
        return [int(copies[int(c["index"])]) for c in calls]
    except (IndexError, TypeError, ValueError):
        return None


def _mapping_or_none(value: Any) -> dict | None:
    """A diagnostic mapping from the worker's report as it came, or ``None`` when it is not one."""
    return value if isinstance(value, dict) else None


def _call_placement(copies: Any, calls: list[dict[str, Any]], gpu_ms: list[float]) -> float | None:
    """``placement_spread`` of the timed calls (``None`` where the copies do not fit the calls reported)."""
    per_call = call_copies(copies, calls)
    return None if per_call is None else placement_spread(gpu_ms, per_call)


def placement_normalised(gpu_ms: list[float], copies: list[int] | None) -> list[float]:
    """The calls' times with where their inputs lay taken out: each call's time scaled by the median of all
    calls over the median of the calls on its staging copy (``copy_medians``; copies with fewer calls as they
    are). The same data on another copy can run 10 % faster (docs/benchmarks.md §1b5), which is not a kernel
    doing less work on some calls; a kernel that does is as fast on every copy."""
    if copies is None or len(copies) != len(gpu_ms):
        return gpu_ms
    medians = copy_medians(gpu_ms, copies)
    if len(medians) < 2 or min(medians.values()) <= 0:
        return gpu_ms
    overall = sorted(gpu_ms)[len(gpu_ms) // 2]
    return [t * overall / medians[c] if c in medians else t for t, c in zip(gpu_ms, copies)]


def host_delay_flag(exposed: int, calls: int) -> list[str]:
    """A flag when more than ``HOST_DELAY_SHARE`` of the timed calls took longer to launch than the GPU spin
    before them lasted (``timing.time_gpu``): their GPU time may include waiting for a busy host."""
    if calls and exposed > HOST_DELAY_SHARE * calls:
        return [
            f"HOST_DELAYED_TIMING: {exposed} of {calls} timed calls took longer to launch than the GPU spin before "
            "them lasted (a busy CPU?); their times may include the wait"
        ]
    return []


def timing_contradictions(gpu_ms: list[float], sets: list[int], copies: list[int] | None = None) -> list[str]:
    """Reasons to refuse timings that contradict themselves, or ``[]``. ``copies``: each call's staging copy,
    whose own speed is taken out first (:func:`placement_normalised`).

    Calls on the same prepared input set do the same work on the same data, so an honest kernel takes about
    the same time on each (slow outliers aside: a clock dip, another process), even when its time depends on
    the data. Within one set, a block of at least a tenth of its calls more than ``BIMODAL_GAP`` times and
    ``BIMODAL_FLOOR_MS`` faster than the set's median cannot be noise: the kernel does less work on some calls
    (``TIMING_BIMODAL``). And a kernel cannot be faster on every input it has seen before than on fresh inputs
    by ``CACHE_GAP``: the results are remembered (``TIMING_RESULT_CACHE``).
    """
    reasons = []
    by_set: dict[int, list[float]] = {}
    for t, chosen in zip(placement_normalised(gpu_ms, copies), sets):
        by_set.setdefault(chosen, []).append(t)
    for chosen, times in sorted(by_set.items()):
        if chosen < 0:
            continue  # fresh inputs differ from call to call: a data-dependent kernel may vary there
        ordered = sorted(times)
        n = len(ordered)
        median = ordered[n // 2]
        least = max(3, int(BIMODAL_MIN_SHARE * n))
        fast = [t for t in ordered if t * BIMODAL_GAP < median and t + BIMODAL_FLOOR_MS < median]
        if n >= 2 * least and len(fast) >= least:
            reasons.append(
                f"TIMING_BIMODAL: on input set {chosen}, {len(fast)} of {n} timed calls ran in "
                f"{fast[0]:.4g}-{fast[-1]:.4g} ms, more than {BIMODAL_GAP - 1:.0%} (and "
                f"{BIMODAL_FLOOR_MS * 1e3:g} us) faster than the median {median:.4g} ms on the same data; an "
                "honest kernel takes about the same time on every call"
            )
    fresh = sorted(by_set.get(-1, []))
    repeated = {k: sorted(v) for k, v in by_set.items() if k >= 0 and len(v) >= 3}
    if len(fresh) >= 5 and repeated:
        fresh_median = fresh[len(fresh) // 2]
        medians = {k: v[len(v) // 2] for k, v in repeated.items()}
        if all(m * CACHE_GAP < fresh_median for m in medians.values()):
            reasons.append(
                f"TIMING_RESULT_CACHE: calls on inputs seen before took "
                f"{', '.join(f'{m:.4g}' for m in medians.values())} ms (medians per input set), calls on fresh "
                f"inputs {fresh_median:.4g} ms: results are remembered, not computed"
            )
    return reasons


def checked_slower_flag(gpu_ms: list[float], fully_checked: list[int]) -> list[str]:
    """A flag (the verdict stays ``ok``): the calls checked in full -- chosen after they ran -- were all among
    the slowest. The candidate cannot know which calls are checked, so this only says that something it
    should not reach was reached; at least three checked calls above the 95th percentile of the others is
    needed (by chance: 1 in 8000)."""
    checked = [gpu_ms[i] for i in fully_checked if 0 <= i < len(gpu_ms)]
    skipped = set(fully_checked)
    others = sorted(t for i, t in enumerate(gpu_ms) if i not in skipped)
    if len(checked) < 3 or len(others) < 20:
        return []
    high = others[int(0.95 * (len(others) - 1))]
    median = others[len(others) // 2]
    if min(checked) > high and min(checked) > CHECKED_SLOWER * median:
        return [
            f"TIMING_CHECKED_SLOWER: the {len(checked)} calls checked in full took "
            f"{min(checked):.4g}-{max(checked):.4g} ms, slower than 95 % of the others (median {median:.4g} ms)"
        ]
    return []


# ---------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------


def draw_seed() -> int:
    return secrets.randbits(62)


def evaluate(
    problem: Problem, candidate: Candidate, options: EvalOptions, evaluation: type[Evaluation] | None = None
) -> Verdict:
    """Judge one candidate. Never raises for anything the candidate does (a broken *problem* raises).

    The evaluation waits for its GPU's memory (``admission.py``); one that ran out of memory while other
    evaluations shared the GPU runs again alone, and only that verdict counts (``admitted_run``).
    ``evaluation``: a subclass of :class:`Evaluation` (a backend built on this protocol: ksmith_native)."""
    started = time.monotonic()
    try:
        verdict = admitted_run(problem, candidate, options, evaluation)
    except KsmithError:  # a broken problem, a backend that cannot run here: the user's to act on
        raise
    except Exception as exc:  # noqa: BLE001 - a harness bug must not stop a batch; it is reported as such
        import traceback

        verdict = Verdict(
            status=Status.CRASHED,
            device=options.device,
            interpreted=options.device == "cpu",
            reasons=(f"EVALUATOR_ERROR: {type(exc).__name__}: {exc}",),
            error="".join(traceback.format_exception(exc))[-4000:],
        )
    return replace(verdict, eval_seconds=round(time.monotonic() - started, 3))


def admitted_run(
    problem: Problem,
    candidate: Candidate,
    options: EvalOptions,
    evaluation_class: type[Evaluation] | None = None,
) -> Verdict:
    """One evaluation, admitted to its GPU by its expected peak memory; an out-of-memory reached while other
    evaluations ran there is not the candidate's verdict: it runs again with the GPU to itself, and the
    verdict says so (``details["oom_retried_alone"]``, ``details["oom_first_reason"]``). An out-of-memory
    when it ran alone stands. What an evaluation does before it needs the GPU (a native backend's build:
    ``before_admission``) happens before it waits for memory."""
    cls = evaluation_class or Evaluation
    evaluation = cls(problem, candidate, options)
    early = evaluation.before_admission()
    if early is not None:
        return early
    if not admission.enabled():
        return evaluation.run()
    gate = admission.gate_for(evaluation.device, evaluation.gpu)
    need, source = expected_footprint(evaluation, gate)
    first_reason = ""
    with gate.admitted(need) as ticket:
        try:
            verdict = evaluation.run()
        except ProblemError as exc:  # RESOURCE: the inputs or the reference did not fit
            if not (crowded(ticket, evaluation) and memory_failure(str(exc))):
                raise
            first_reason = str(exc)
        else:
            if crowded(ticket, evaluation):
                first_reason = out_of_memory_reason(verdict)
        finally:
            keep_footprint(evaluation, gate)
    memory = {"reserved_bytes": need, "footprint": source, "waited_s": ticket.waited_s}
    if not first_reason:
        return with_details(
            verdict, memory={**memory, "shared_gpu": ticket.overlapped, "peaks": dict(evaluation.peaks)}
        )
    log.info("%s: out of memory beside other evaluations; again alone: %s", problem.name, first_reason[:200])
    again = cls(problem, candidate, options, gpu=evaluation.gpu)
    with gate.admitted(need, exclusive=True) as alone:
        make_room(evaluation)  # nothing else of ours runs now: every idle process can go
        try:
            verdict = again.run()  # a problem error now is the problem's, as without a gate
        finally:
            keep_footprint(again, gate)
    return with_details(
        verdict,
        memory={**memory, "waited_s": round(ticket.waited_s + alone.waited_s, 3), "shared_gpu": False},
        oom_retried_alone=True,
        oom_first_reason=first_reason,
    )


def crowded(ticket: admission.Ticket, evaluation: Evaluation) -> bool:
    """Other evaluations ran on the evaluation's device while it did, or others held more than the margin of
    its memory when it started alone, and their memory is its memory."""
    return (ticket.overlapped or ticket.crowded_at_start) and admission.shares_memory(evaluation.device)


SETTLE_WAIT_S = 20.0  # at most this long for the GPU's free memory to stop growing before a retry alone


def make_room(evaluation: Evaluation) -> None:
    """Before a retry alone: let go of the spare candidate workers and the idle reference processes of other
    problems (each holds a CUDA context, and a reference process may hold its problem's model), then wait
    for the GPU's free memory to settle (processes that exit give their memory back over a moment)."""
    POOL.drop_spares()
    with _workers_lock:
        others = [(key, w) for key, w in _workers.items() if key[0] != evaluation.problem.sha]
    for key, worker in others:
        if not worker.lock.acquire(blocking=False):
            continue  # still answering a thread of ours outside the gate: it stays
        try:
            worker.close()
        finally:
            worker.lock.release()
        with _workers_lock:
            if _workers.get(key) is worker:
                del _workers[key]
    if evaluation.device != "cuda" or evaluation.gpu is None:
        return
    deadline = time.monotonic() + SETTLE_WAIT_S
    last = admission.gpu_memory(evaluation.gpu, 0.0)
    while last is not None and time.monotonic() < deadline:
        time.sleep(0.5)
        now = admission.gpu_memory(evaluation.gpu, 0.0)
        if now is None or now[0] <= last[0] + (64 << 20):  # no longer growing
            return
        last = now


def with_details(verdict: Verdict, **details: Any) -> Verdict:
    return replace(verdict, details={**verdict.details, **details})


def out_of_memory_reason(verdict: Verdict) -> str:
    """The reason of a verdict that ran out of device memory (the candidate's ``OUT_OF_MEMORY``, the
    reference's ``RESOURCE_EXHAUSTED``, a kernel launch that failed for memory), or ``""``. A process killed
    for its resident size on the host is not one: that limit is its own, not shared."""
    if verdict.status is Status.OK:
        return ""
    codes = ("OUT_OF_MEMORY", "RESOURCE_EXHAUSTED") if verdict.status is Status.RUNTIME_ERROR else ()
    for reason in verdict.reasons:
        if reason.startswith(codes) or "out of memory" in reason.lower():
            return reason
    return ""


def memory_failure(message: str) -> bool:
    """A problem error that says the device ran out of memory (``RESOURCE``, or torch's out-of-memory error
    from the reference process)."""
    return "RESOURCE:" in message or "out of memory" in message.lower()


def footprint_key(evaluation: Evaluation) -> tuple[Any, ...]:
    """What an evaluation's footprint depends on: the problem (its text), device, size and number of trials
    (a copy of each trial's outputs is kept)."""
    return (
        evaluation.problem.sha,
        evaluation.device,
        evaluation.small,
        max(1, evaluation.options.correctness_trials),
    )


def expected_footprint(evaluation: Evaluation, gate: admission.MemoryGate) -> tuple[int, str]:
    """(bytes to reserve, where the figure comes from: ``measured``, ``estimate`` or ``unknown``).

    Measured in this process or an earlier one (the reference cache); else estimated from the problem's input
    and output bytes, which its reference process works out on the meta device when it starts. Where the gate
    cannot read the device's memory (the CPU), a reservation changes nothing: nothing is looked up."""
    key = footprint_key(evaluation)
    found = admission.FOOTPRINTS.expected(key)
    if found is None and gate.reads_memory():
        stored = _stored_footprint(evaluation, key)
        if stored is not None:
            admission.FOOTPRINTS.record(key, stored)
        else:
            worker = reference_worker(evaluation.problem, evaluation.device, evaluation.gpu, evaluation.small)
            sizes = worker.facts().get("sizes") or {}
            if isinstance(sizes.get("input_bytes"), int):
                output_bytes = sizes.get("output_bytes")
                # Outputs the meta device could not work out: as large as the inputs.
                output_bytes = output_bytes if isinstance(output_bytes, int) else sizes["input_bytes"]
                admission.FOOTPRINTS.estimate(
                    key, admission.estimate_bytes(sizes["input_bytes"], output_bytes, key[3])
                )
            else:
                admission.FOOTPRINTS.estimate(key, 0, "unknown")
        found = admission.FOOTPRINTS.expected(key)
    return found or (0, "unknown")


def _footprint_cache_key(key: tuple[Any, ...]) -> str:
    sha, device, small, trials = key
    return ReferenceCache.key("footprint", problem=sha, device=device, small=small, trials=trials)


def _stored_footprint(evaluation: Evaluation, key: tuple[Any, ...]) -> int | None:
    try:
        cache = ReferenceCache(evaluation.options.cache_dir)
        try:
            found = cache.get(_footprint_cache_key(key))
        finally:
            cache.close()
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be read only costs an estimate
        log.debug("reading the footprint cache: %s", exc)
        return None
    return int(found) if isinstance(found, int) and found >= 0 else None


def keep_footprint(evaluation: Evaluation, gate: admission.MemoryGate) -> None:
    """Remember what the evaluation measured, for the problem's next ones (and, in the reference cache, the
    next process's where the device's memory is read)."""
    peak = evaluation.measured_peak()
    if peak is None:
        return
    key = footprint_key(evaluation)
    if not admission.FOOTPRINTS.record(key, peak) or not gate.reads_memory():
        return
    expected = admission.FOOTPRINTS.expected(key)
    try:
        cache = ReferenceCache(evaluation.options.cache_dir)
        try:
            cache.set(_footprint_cache_key(key), expected[0] if expected else peak)
        finally:
            cache.close()
    except Exception as exc:  # noqa: BLE001 - kept in memory all the same
        log.debug("writing the footprint cache: %s", exc)


def evaluate_many(
    problem: Problem, candidates: list[Candidate], options: EvalOptions, workers: int = 4
) -> list[Verdict]:
    """Evaluate candidates concurrently (import, compile and correctness overlap; timing is serialised per
    device by its lock). Verdicts come back in the order of ``candidates``."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda c: evaluate(problem, c, options), candidates))


class Evaluation:
    def __init__(
        self,
        problem: Problem,
        candidate: Candidate,
        options: EvalOptions,
        revalidation: bool = False,
        gpu: str | None = None,
    ) -> None:
        """``gpu``: the GPU (as CUDA_VISIBLE_DEVICES names it) to run on; chosen here when not given."""
        self.problem, self.candidate, self.options = problem, candidate, options
        self.device = options.device
        self.interpreted = self.device == "cpu"
        self.small = options.use_small
        self.revalidation = revalidation
        if self.device == "cuda":
            self.gpu = gpu if gpu is not None else physical_gpu(choose_gpu(options.gpu_index))
        else:
            self.gpu = None
        self.details: dict[str, Any] = {
            "protocol": PROTOCOL_VERSION,
            "size": "small" if self.small else "full",
        }
        if self.gpu is not None:
            self.details["gpu"] = self.gpu
        # The verdict's typed fields, filled as the protocol goes (see ksmith_core.model.Verdict).
        self.error = ""
        self.mismatch: Mismatch | None = None
        self.launches: list[int] = []
        self.phases: dict[str, float] = {}  # seconds per phase, for whoever tunes throughput
        self.roofline_bound: str | None = None
        self.flags: list[str] = []  # reasons on an accepted verdict (the status stays ok)
        self.child: Child | None = None
        self._job: dict[str, Any] = {}
        # Peak memory each side reported (admission.py): kept for the problem once the trials reported.
        self.peaks = {"candidate": 0, "reference": 0}
        self.trials_reported = False
        self.sizes: dict[str, Any] = {}  # input and output bytes, from the reference process
        self._thread_cpu_start = time.thread_time()

    # -- memory ------------------------------------------------------------------------------------------------

    def saw_peak(self, side: str, message: Any) -> None:
        if isinstance(message, dict) and isinstance(message.get("peak_bytes"), int):
            self.peaks[side] = max(self.peaks[side], max(0, message["peak_bytes"]))

    def note_reference_steps(self, request: str, answer: Any) -> None:
        """Where the reference process's time went per request kind, summed (``details["reference_steps"]``:
        for whoever tunes throughput)."""
        steps = answer.get("steps") if isinstance(answer, dict) else None
        if not isinstance(steps, dict):
            return
        kept = self.details.setdefault("reference_steps", {}).setdefault(request, {})
        for step, seconds in steps.items():
            if isinstance(seconds, (int, float)):
                kept[step] = round(kept.get(step, 0.0) + seconds, 4)

    def measured_peak(self) -> int | None:
        """This evaluation's peak on its device (candidate + reference process), once the candidate got
        through its trials (the outputs of every trial alive: about its peak); else ``None``. The candidate's
        figure comes from its own process, so it is floored at what the harness itself holds there (its
        inputs, their staging copy and one output set, as the reference process measured them)."""
        if not self.trials_reported:
            return None
        floor = 2 * int(self.sizes.get("input_bytes", 0)) + int(self.sizes.get("output_bytes", 0))
        return max(self.peaks["candidate"], floor) + self.peaks["reference"]

    # -- verdict helpers -------------------------------------------------------------------------------------

    def cpu_seconds(self) -> dict[str, float]:
        """Host CPU seconds this evaluation has cost so far (``details["cpu_s"]``, for whoever tunes
        throughput): its candidate worker's process (start-up and warm-up included), what the reference
        process spent on its requests made from this thread, and this thread's own."""
        spent = {"evaluator": round(time.thread_time() - self._thread_cpu_start, 3)}
        worker = self.child.cpu_seconds() if self.child is not None else None
        if worker is not None:
            spent["worker"] = round(worker, 3)
        reference = getattr(_reference_cpu, "seconds", None)
        if reference is not None:
            spent["reference"] = round(reference, 3)
        return spent

    def verdict(self, status: Status, reasons: list[str] | tuple[str, ...] = (), **fields: Any) -> Verdict:
        self.details["cpu_s"] = self.cpu_seconds()
        if self.child is not None and status is not Status.OK:
            tails = self.child.output_tail()
            for stream in ("stdout", "stderr"):
                if tails[stream].strip():
                    self.details.setdefault(stream, tails[stream][-OUTPUT_TAIL_IN_DETAILS:])
        return Verdict(
            status=status,
            correct=fields.pop("correct", False),
            reasons=tuple(reasons),
            device=self.device,
            interpreted=self.interpreted,
            error=self.error,
            mismatch=self.mismatch,
            launches=tuple(self.launches),
            phases=self.phases,
            roofline_bound=self.roofline_bound,
            details=self.details,
            **fields,
        )

    def from_exit(self, exit_: ChildExit, phase: str) -> Verdict:
        if exit_.kind == "timeout":
            return self.verdict(
                Status.TIMEOUT,
                [
                    f"TIMEOUT: no result within {self.options.timeout_s:g} s ({phase}); "
                    "the process group was killed"
                ],
            )
        if exit_.kind == "memory":
            return self.verdict(
                Status.CRASHED,
                [
                    f"OUT_OF_MEMORY: resident memory passed {self.options.memory_limit_mb} MB "
                    f"({phase}); the process was killed"
                ],
            )
        if exit_.kind == "signal":
            return self.verdict(
                Status.CRASHED,
                [f"CRASHED: the candidate's process was killed by {exit_.signal_name} ({phase})"],
            )
        return self.verdict(
            Status.CRASHED,
            [f"EXITED: the candidate's process exited with code {exit_.code} before reporting ({phase})"],
        )

    def failed_report(self, report: dict[str, Any] | ChildExit, child: Child, phase: str) -> Verdict | None:
        """The verdict when the child did not report normally: it ended, reported an error, or was forged."""
        if isinstance(report, ChildExit):
            return self.from_exit(report, phase)
        if report.get("kind") == "error":
            return self.from_error(report)
        if child.forged:
            return self.verdict(
                Status.REJECTED,
                [
                    f"FORGED_REPORT: {child.forged} line(s) on the result channel did not come from the harness"
                ],
            )
        return None

    def from_error(self, message: dict[str, Any]) -> Verdict:
        if message.get("status") == "setup_error":
            log.debug("setting up %s failed: %s", self.problem.name, message.get("error", ""))
            raise ProblemError(f"problem {self.problem.name}: {message.get('reason')}")
        reasons = list(message.get("reasons") or [message.get("reason") or "RUNTIME_ERROR: unknown failure"])
        if message.get("error"):
            self.error = str(message["error"])
        if message.get("forbidden_ops"):
            self.details["ops"] = message["forbidden_ops"]
        if "launches" in message:
            launches = message["launches"]
            self.launches = [launches] if isinstance(launches, int) else list(launches or [])
        try:
            status = Status(message.get("status", "runtime_error"))
        except ValueError:
            status = Status.RUNTIME_ERROR
        return self.verdict(status, reasons)

    # -- the protocol ---------------------------------------------------------------------------------------------

    def run(self) -> Verdict:
        # This evaluation's account of reference CPU; one it runs inside (a revalidation) gets it back, added.
        outer = getattr(_reference_cpu, "seconds", None)
        self._thread_cpu_start = time.thread_time()
        _reference_cpu.seconds = 0.0
        try:
            return self._run_in_child()
        finally:
            inner = _reference_cpu.seconds
            _reference_cpu.seconds = None if outer is None else outer + inner

    def _run_in_child(self) -> Verdict:
        try:
            compile(self.candidate.source, "candidate.py", "exec")
        except SyntaxError as exc:
            self.error = f"candidate.py, line {exc.lineno}: {exc.msg}\n{(exc.text or '').rstrip()}"
            return self.verdict(Status.COMPILE_ERROR, [f"SYNTAX_ERROR: line {exc.lineno}: {exc.msg}"])
        self.child = child = POOL.take(self.device, candidate_env(self.device, self.gpu))
        try:
            child.rss_limit_mb = self.options.memory_limit_mb
            (child.scratch / "candidate.py").write_text(self.candidate.source, encoding="utf-8")
            (child.scratch / "outputs").mkdir(mode=0o700)
            return self._run(child)
        finally:
            POOL.done()
            discard(child)

    def _run(self, child: Child) -> Verdict:
        opts = self.options
        init_seed = draw_seed()
        trial_seeds = [draw_seed() for _ in range(max(1, opts.correctness_trials))]
        timing_seeds = [draw_seed() for _ in range(TIMING_SETS[self.device])]
        self._job = job = {
            "device": self.device,
            "problem_source": self.problem.source,
            "small_sizes": dict(self.problem.small_sizes) if self.small else None,
            "init_seed": init_seed,
            "trial_seeds": trial_seeds,
            "timing_seeds": timing_seeds,
            "allowed_ops": sorted(self.problem.allowed_ops),
            "memory_limit_mb": opts.memory_limit_mb,
            # GPU outputs reach the reference process through CUDA IPC; "files" copies them through
            # /dev/shm instead (slower; for platforms where IPC is not allowed).
            "transport": os.environ.get("KSMITH_OUTPUT_TRANSPORT", "ipc"),
            **self.job_extra(),
        }
        child.start(job)
        worker = reference_worker(self.problem, self.device, self.gpu, self.small)
        worker.warm()  # its start-up overlaps the candidate's; it computes nothing until asked below
        phases = self.phases

        # Waiting for the GPU (a spare still starting, other holders of the lock) is not the candidate's time.
        clock = time.monotonic()
        report = child.wait_message("holding", opts.timeout_s + lock_wait_s())
        phases["candidate_waiting_for_gpu"] = round(time.monotonic() - clock, 3)
        failed = self.failed_report(report, child, "waiting for the GPU")
        if failed is not None:
            return failed
        clock = time.monotonic()
        report = child.wait_message("ready", opts.timeout_s)
        phases["candidate_import_and_first_call"] = round(time.monotonic() - clock, 3)
        failed = self.failed_report(report, child, "import and first call")
        if failed is not None:
            return failed
        if isinstance(
            report.get("steps"), dict
        ):  # the worker's own clock: start-up, idle, prepare, import...
            self.details["worker_steps"] = report["steps"]

        stream = self._stream_trials(worker, len(trial_seeds))
        clock = time.monotonic()
        if stream:
            streamed = self._compare_each_trial(child, worker, trial_seeds)
        else:
            with shared_gpu_lock(self.device, self.gpu, "candidate trials"):
                child.send({"op": "trials", "stream": False})
                report = child.wait_message("trials_ran", opts.timeout_s)
            if isinstance(report, dict) and report.get("kind") == "trials_ran":
                # The GPU work is done; the worker gives its cached memory back, unheld, then reports.
                left = max(RELEASE_AFTER_TRIALS_MIN_S, opts.timeout_s - (time.monotonic() - clock))
                report = child.wait_message("correctness", left)
        phases["candidate_trials"] = round(time.monotonic() - clock, 3)
        if stream:
            if isinstance(streamed, Verdict):
                return streamed
            compared, trials = streamed
            self.details["trials_streamed"] = True
        else:
            failed = self.failed_report(report, child, "correctness trials")
            if failed is not None:
                return failed
            self.saw_peak("candidate", report)
            self.details["trial_allocations"] = _mapping_or_none(report.get("allocations"))
            self.details["trial_steps_ms"] = _mapping_or_none(report.get("steps_ms"))
            self.trials_reported = True
            trials = report["trials"]
        self.launches = [int(t["launches"]) for t in trials if isinstance(t.get("launches"), int)]

        if not stream:
            # The candidate has reported; only now are the reference outputs computed, in another process.
            clock = time.monotonic()
            compared = self._compare_outputs_in_reference(
                worker, child, trial_seeds, trials, "trial", degenerate_check=True
            )
            phases["reference_compare"] = round(time.monotonic() - clock, 3)
            if isinstance(compared, Verdict):
                return compared
        if compared["degenerate"]:
            return self.verdict(Status.REJECTED, compared["degenerate"])
        for index, trial in enumerate(trials):
            if trial.get("mutated_inputs"):
                return self.verdict(
                    Status.INCORRECT,
                    [
                        f"INPUT_MUTATED: forward changed input(s) {trial['mutated_inputs']} "
                        f"(trial {index}); inputs must be left as they were"
                    ],
                )
        failed = self.failed_comparison(compared, len(trials))
        if failed is not None:
            return failed
        return self._time(child, worker, compared["meta"])

    def _stream_trials(self, worker: ReferenceWorker, trials: int) -> bool:
        """Whether each trial's outputs are compared as soon as the trial ran (the candidate's process then
        keeps one trial's outputs, not every trial's): on a GPU, when every trial's outputs together would
        take more than ``STREAM_TRIALS_ABOVE_BYTES``. ``KSMITH_STREAM_TRIALS=1`` / ``0`` forces it."""
        forced = os.environ.get("KSMITH_STREAM_TRIALS")
        if forced in ("0", "1"):
            return forced == "1"
        if self.device != "cuda":
            return False
        sizes = self.sizes or (worker.facts().get("sizes") or {})
        output_bytes = sizes.get("output_bytes")
        return isinstance(output_bytes, int) and output_bytes * trials > STREAM_TRIALS_ABOVE_BYTES

    def _compare_each_trial(
        self, child: Child, worker: ReferenceWorker, seeds: list[int]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | Verdict:
        """The streamed trials: each trial's report compared in the reference process before the candidate
        runs the next (it waits for ``next``), then the degenerate-reference check over all the seeds. The
        candidate runs each step under a shared hold of the GPU's lock, the comparisons take their own. The
        same checks as at once, with one time budget for all the trials (comparisons and lock waits not
        counted); the candidate only learns that a trial passed by being asked for the next one. One
        difference: a wrong trial ends the trials, so what a later trial would have done (a crash, a broken
        rule) is not seen -- the verdict is the mismatch."""
        comparisons: list[dict[str, Any]] = []
        trials: list[dict[str, Any]] = []
        meta: dict[str, Any] = {}
        clock = time.monotonic()
        compare_s = waited_s = 0.0

        def candidate_time_left() -> float:
            # One budget for all trials, as at once: the candidate's time only, not the comparisons' or waits'.
            return max(0.1, self.options.timeout_s - (time.monotonic() - clock - compare_s - waited_s))

        @contextlib.contextmanager
        def candidate_step(message: dict[str, Any]) -> Iterator[None]:
            nonlocal waited_s
            asked = time.monotonic()
            with shared_gpu_lock(self.device, self.gpu, "candidate trials"):
                waited_s += time.monotonic() - asked
                child.send(message)
                yield

        for index, seed in enumerate(seeds):
            with candidate_step({"op": "trials", "stream": True} if index == 0 else {"op": "next"}):
                report = child.wait_message("trial", candidate_time_left())
            failed = self.failed_report(report, child, "correctness trials")
            if failed is not None:
                return failed
            trials.append(report)
            self.trials_reported = True
            started = time.monotonic()
            compared = self._compare_outputs_in_reference(
                worker, child, [seed], [report], "trial", first=index, total=len(seeds)
            )
            compare_s += time.monotonic() - started
            if isinstance(compared, Verdict):
                return compared
            comparisons.extend(compared["comparisons"])
            meta = meta or compared.get("meta") or {}
            if not all(c.get("correct") for c in compared["comparisons"]):
                break
        if len(comparisons) == len(seeds) and all(c.get("correct") for c in comparisons):
            with candidate_step({"op": "next"}):
                final = child.wait_message("correctness", candidate_time_left())
            failed = self.failed_report(final, child, "correctness trials")
            if failed is not None:
                return failed
            self.saw_peak("candidate", final)
            self.details["trial_allocations"] = _mapping_or_none(final.get("allocations"))
            self.details["trial_steps_ms"] = _mapping_or_none(final.get("steps_ms"))
            trials = final["trials"]
        started = time.monotonic()
        checked = self._compare_outputs_in_reference(worker, child, seeds, [], "trial", degenerate_check=True)
        compare_s += time.monotonic() - started
        self.phases["reference_compare"] = round(compare_s, 3)
        self.phases["candidate_trials_alone"] = round(time.monotonic() - clock - compare_s - waited_s, 3)
        if isinstance(checked, Verdict):
            return checked
        return {"degenerate": checked["degenerate"], "comparisons": comparisons, "meta": meta}, trials

    def before_admission(self) -> Verdict | None:
        """Work done before the evaluation waits for its GPU's memory and runs (a native backend builds its
        extensions here); a verdict ends the evaluation there. Nothing for Triton: it compiles in the
        candidate's process."""
        return None

    def job_extra(self) -> dict[str, Any]:
        """More of the job for the candidate's process (a subclass's ``candidate_setup`` and its data)."""
        return {}

    def _compare_outputs_in_reference(
        self,
        worker: ReferenceWorker,
        child: Child,
        seeds: list[int],
        got: list[dict[str, Any]],
        label: str,
        degenerate_check: bool = False,
        first: int = 0,
        total: int | None = None,
    ) -> dict[str, Any] | Verdict:
        """The reference process's comparison of the candidate's outputs (``got``) with the reference outputs
        for ``seeds``, under a shared hold of the GPU's lock taken in the reference worker's turn; a verdict
        instead when the reference could not run beside the candidate's process. ``first`` / ``total``: which
        of how many trials ``seeds`` are, for the reasons' labels (a streamed trial is compared alone)."""
        tolerances = self._tolerances()
        reports = [{"structure": g.get("structure"), "outputs": g.get("outputs", [])} for g in got]
        directory = child.scratch / "outputs"
        try:
            compared = worker.compare_with_reference(
                self._job["init_seed"],
                seeds,
                reports,
                directory,
                hold=shared_gpu_lock(self.device, self.gpu, f"compare {label}"),
                label=label,
                tolerances=tolerances,
                degenerate_check=degenerate_check,
                first=first,
                total=total,
                timeout_s=max(COMPARE_TIMEOUT_MIN_S, self.options.timeout_s),
            )
            self.saw_peak("reference", compared)
            self.note_reference_steps(f"compare {label}", compared)
            if compared.get("meta"):
                self.sizes = compared["meta"]
            return compared
        except ProblemError:
            if self.device != "cuda":
                raise
            # The candidate's process is still alive and may hold the GPU's memory: retry without it. If the
            # reference fails again the problem itself is broken, and that error goes to the user.
            child.kill()
            worker.compare_with_reference(
                self._job["init_seed"],
                seeds,
                [],
                directory,
                hold=shared_gpu_lock(self.device, self.gpu, f"compare {label}"),
                label=label,
                tolerances=tolerances,
            )
            return self.verdict(
                Status.RUNTIME_ERROR,
                [
                    "RESOURCE_EXHAUSTED: the reference could not run beside this candidate's process "
                    "(does it keep too much GPU memory?)"
                ],
            )

    def failed_comparison(self, compared: dict[str, Any], count: int, timed: bool = False) -> Verdict | None:
        comparisons = compared["comparisons"]
        for result in comparisons:
            if not result["correct"]:
                if result.get("mismatch"):
                    self.mismatch = Mismatch.from_dict(result["mismatch"])
                reasons = list(result["reasons"])
                if timed:
                    reasons = [
                        *(r.replace(r.split(":", 1)[0], "TIMED_OUTPUT_MISMATCH", 1) for r in reasons),
                        "TIMED_OUTPUT_MISMATCH: outputs of timed calls differ "
                        "from the reference (a result cache or state kept across calls?)",
                    ]
                forged = any(r.startswith("FORGED_OUTPUT") for r in result["reasons"])
                return self.verdict(Status.REJECTED if forged else Status.INCORRECT, reasons)
        if len(comparisons) != count:
            return self.verdict(
                Status.REJECTED,
                [f"FORGED_OUTPUT: {count} output sets expected, {len(comparisons)} were compared"],
            )
        return None

    def _time(self, child: Child, worker: ReferenceWorker, meta: dict[str, Any]) -> Verdict:
        """Time the candidate with a schedule it cannot read ahead (``timing.py``), then check what every timed
        call returned: sampled elements of each call's outputs, and the whole outputs of a few calls picked
        after the fact, against the reference; and the timings against each other."""
        opts = self.options
        trials, warmup = self.timing_plan()
        clock = time.monotonic()
        reference = self.reference_timing(worker, trials, warmup)
        phases = self.phases
        phases["reference_timing"] = round(time.monotonic() - clock, 3)
        clock = time.monotonic()
        calls: list[dict[str, Any]] = []
        with exclusive_gpu_lock(self.device, self.gpu, "candidate timing"):
            child.send({"op": "time", "trials": trials, "warmup": warmup})
            report = child.wait_message("timing", opts.timeout_s, collect=("call", calls))
        phases["candidate_timing"] = round(time.monotonic() - clock, 3)
        failed = self.failed_report(report, child, "timing")
        if failed is not None:
            return failed
        # The copies kept for the full checks come after the report, outside the exclusive lock.
        kept = child.wait_message("full_outputs", opts.timeout_s)
        failed = self.failed_report(kept, child, "timing")
        if failed is not None:
            return failed
        forged = attach_full_outputs(calls, kept.get("outputs"))
        if forged:
            return self.verdict(Status.REJECTED, [forged])
        self.saw_peak("candidate", report)
        forged = forged_call_reports(calls, report, len(self._job["timing_seeds"]), trials)
        if forged:
            return self.verdict(Status.REJECTED, [forged])

        clock = time.monotonic()
        seeds = self._job["timing_seeds"]
        request = {
            "init_seed": self._job["init_seed"],
            "seeds": seeds,
            "calls": [{k: c.get(k) for k in SAMPLED_CALL_FIELDS} for c in calls],
            "tolerances": self._tolerances(),
        }
        try:
            sampled = worker.request(
                "check_samples",
                max(COMPARE_TIMEOUT_MIN_S, opts.timeout_s),
                shared_gpu_lock(self.device, self.gpu, "check timed samples"),
                **request,
            )
            self.saw_peak("reference", sampled)
            self.note_reference_steps("check timed samples", sampled)
        except ProblemError:
            if self.device != "cuda":
                raise
            # As for the trials' comparison: the candidate's process may hold the memory the reference needs.
            # Without it, a reference that fails again is the problem's error; one that passes was crowded out.
            child.kill()
            worker.request(
                "check_samples",
                max(COMPARE_TIMEOUT_MIN_S, opts.timeout_s),
                shared_gpu_lock(self.device, self.gpu, "check timed samples"),
                **request,
            )
            return self.verdict(
                Status.RUNTIME_ERROR,
                [
                    "RESOURCE_EXHAUSTED: the reference could not check the timed calls beside this candidate's "
                    "process (does it keep too much GPU memory?)"
                ],
            )
        phases["timed_samples_check"] = round(time.monotonic() - clock, 3)
        if not sampled.get("correct"):
            child.kill()
            if sampled.get("mismatch"):
                self.mismatch = Mismatch.from_dict(sampled["mismatch"])
            forged_output = any(r.startswith("FORGED_OUTPUT") for r in sampled.get("reasons", []))
            return self.verdict(
                Status.REJECTED if forged_output else Status.INCORRECT,
                [
                    *sampled.get("reasons", []),
                    f"TIMED_OUTPUT_MISMATCH: timed call {int(sampled['index']) + 1} of {len(calls)} returned "
                    "wrong outputs (checked on elements drawn after the call); correct outputs only on some "
                    "calls mean state kept across calls",
                ],
            )
        clock = time.monotonic()
        full = [c for c in calls if "outputs" in c]
        compared = self._compare_outputs_in_reference(
            worker,
            child,
            [int(c["input_seed"]) if int(c["set"]) < 0 else seeds[int(c["set"])] for c in full],
            [{"structure": c["structure"], "outputs": c["outputs"]} for c in full],
            "fully checked timed call",
        )
        phases["timed_outputs_compare"] = round(time.monotonic() - clock, 3)
        child.kill()  # only now: its GPU outputs were read in place
        if isinstance(compared, Verdict):
            return compared
        failed = self.failed_comparison(compared, len(full), timed=True)
        if failed is not None:
            return failed
        gpu_ms = [float(c["gpu_ms"]) for c in calls]
        host_ms = sorted(float(c["host_ms"]) for c in calls)
        placement = _call_placement(report.get("copies"), calls, gpu_ms)
        self.details["timing"] = {
            "calls": len(calls),
            "warmup": report.get("warmup"),
            "prequeue_ms": report.get("prequeue_ms"),
            "exposed_calls": int(report.get("exposed_calls") or 0),
            **{
                key: _mapping_or_none(report.get(key))
                for key in ("loop_ms", "loop_cpu_ms", "loop_switches", "loop_allocations")
            },
            "check_ms": _mapping_or_none(report.get("check_ms")),
            "host_median_ms": host_ms[len(host_ms) // 2],
            "fully_checked_calls": [int(c["index"]) for c in full],
            "full_checks_skipped_for_memory": int(report.get("full_checks_skipped") or 0),
            "placement_spread": None if placement is None else round(placement, 5),
        }
        if self.device == "cuda":
            contradictions = timing_contradictions(
                gpu_ms, [int(c["set"]) for c in calls], call_copies(report.get("copies"), calls)
            )
            if contradictions:
                return self.verdict(Status.REJECTED, contradictions)
            self.flags.extend(checked_slower_flag(gpu_ms, [int(c["index"]) for c in full]))
            self.flags.extend(host_delay_flag(self.details["timing"]["exposed_calls"], len(calls)))
        # The candidate's time is its median over calls on fresh inputs (when there are enough): no cache of
        # any kind can make those faster. Calls on the prepared sets are checked all the same.
        fresh_ms = [t for t, c in zip(gpu_ms, calls) if int(c["set"]) < 0]
        runtime = TimingStats.from_halves(fresh_ms if len(fresh_ms) >= MIN_FRESH_FOR_RUNTIME else gpu_ms)
        return self._verdict_from_timings(runtime, reference, meta)

    def _tolerances(self) -> Any:
        return tolerance_table(
            self.problem.tolerance_for, tuple({*DEFAULT_TOLERANCES, *self.problem.tolerances})
        )

    def timing_plan(self) -> tuple[int, int]:
        """(timed calls, warm-up calls): the protocol's on a GPU, a few on the CPU interpreter."""
        if self.device == "cuda":
            return self.options.timing_trials, self.options.warmup
        return min(self.options.timing_trials, CPU_TIMING_TRIALS), CPU_WARMUP

    def reference_timing(self, worker: ReferenceWorker, trials: int, warmup: int) -> dict[str, Any]:
        """Eager and torch.compile samples (and GPU ceilings) from the cache, measured under the lock if absent."""
        cache = ReferenceCache(self.options.cache_dir)
        try:
            info = worker.info or worker.request("info")  # "info" is answered at start-up
            key = cache.key(
                "reference",
                problem=self.problem.sha,
                device=self.device,
                device_name=info.get("device_name"),
                gpu_uuid=info.get("gpu_uuid"),
                torch=info.get("torch"),
                triton=info.get("triton"),
                small=self.small,
                trials=trials,
                warmup=warmup,
            )
            found = cache.get(key)
            if found is None:
                seeds = [draw_seed() for _ in range(TIMING_SETS[self.device])]
                request = {
                    "init_seed": draw_seed(),
                    "seeds": seeds,
                    "trials": trials,
                    "warmup": warmup,
                    "compile": self.device == "cuda",
                    "token": secrets.token_hex(8),
                }
                # torch.compile runs here (seconds, once per problem and GPU). Its first call autotunes:
                # Inductor benchmarks its kernels' configurations on the GPU and keeps the fastest, so it holds
                # the lock exclusively -- benchmarked beside other evaluations' work, the pick varied from one
                # run to the next (a reduction's torch.compile time moved by 39 %, docs/evaluation.md).
                prepare = exclusive_gpu_lock(self.device, self.gpu, "reference compile autotuning")
                self.saw_peak(
                    "reference",
                    worker.request("prepare_time", REFERENCE_TIMEOUT_S, prepare, **request),
                )
                timed = exclusive_gpu_lock(self.device, self.gpu, "reference timing")
                found = worker.request("time", REFERENCE_TIMEOUT_S, timed, **request)
                self.saw_peak("reference", found)
                found = {k: found.get(k) for k in REFERENCE_FIELDS}
                cache.set(key, found)
            if self.device == "cuda":
                # v3: ceilings gained the fp32 matmul's (flops_s_fp32: the TF32 rate since v3); those cached
                # before are measured again.
                ceilings_key = cache.key(
                    "ceilings-v3", device_name=info.get("device_name"), torch=info.get("torch")
                )
                ceilings = cache.get(ceilings_key)
                if ceilings is None:
                    measured = exclusive_gpu_lock(self.device, self.gpu, "ceilings")
                    ceilings = worker.request("ceilings", REFERENCE_TIMEOUT_S, measured)
                    self.saw_peak("reference", ceilings)
                    ceilings = {k: ceilings[k] for k in ("bandwidth_bytes_s", "flops_s", "flops_s_fp32")}
                    cache.set(ceilings_key, ceilings)
                found = {**found, "ceilings": ceilings}
            self.details["device_name"] = info.get("device_name")
            return found
        finally:
            cache.close()

    def _verdict_from_timings(
        self, runtime: TimingStats, reference: dict[str, Any], meta: dict[str, Any]
    ) -> Verdict:
        """The candidate's outputs were correct: speedups, the roofline fraction, and a re-validation of a
        suspiciously large speedup."""
        eager = TimingStats.from_samples(reference["eager_ms"], reference.get("eager_blocks"))
        compiled = (
            TimingStats.from_samples(reference["compile_ms"], reference.get("compile_blocks"))
            if reference.get("compile_ms")
            else None
        )
        if reference.get("host_ms"):
            self.details["reference_host_median_ms"] = reference["host_ms"]
        if reference.get("compile_error"):
            self.details["compile_reference_error"] = reference["compile_error"]
        if autotuned := autotune_summary(reference.get("compile_autotune")):
            self.details["compile_reference_autotune"] = autotuned
        speedup = eager.median_ms / runtime.median_ms if runtime.median_ms > 0 else None
        speedup_compile = (
            compiled.median_ms / runtime.median_ms if compiled and runtime.median_ms > 0 else None
        )
        fraction = None
        if "ceilings" in reference and meta:
            peaks = platform_peaks(self.details.get("device_name"))
            ceilings = ceilings_within_peaks(reference["ceilings"], peaks)
            # Which floor binds tells a bench whether a problem counts as memory- or compute-bound.
            fraction, self.roofline_bound = place_on_roofline(runtime.median_ms, meta, ceilings)
            self.details["roofline"] = {
                "platform": peaks.get("platform"),
                "ceilings": ceilings,
                **roofline_work(meta, ceilings),
            }
        reasons: list[str] = list(self.flags)
        if self.device == "cuda":
            reasons += unsteady_reasons(runtime, eager, compiled)
            placements = {
                name: placement_spread(reference[f"{name}_ms"], reference[f"{name}_copies"])
                if reference.get(f"{name}_ms") and reference.get(f"{name}_copies")
                else None
                for name in ("eager", "compile")
            }
            self.details["reference_placement_spread"] = {
                k: None if v is None else round(v, 5) for k, v in placements.items()
            }
            timing = self.details.get("timing") or {}
            reasons += placement_reasons(
                timing.get("placement_spread"), placements["eager"], placements["compile"]
            )
        if speedup is not None and speedup > SUSPICIOUS_SPEEDUP and not self.revalidation:
            # On the same GPU: this evaluation's memory reservation covers it (admission.py).
            again = type(self)(
                self.problem, self.candidate, self.options, revalidation=True, gpu=self.gpu
            ).run()
            if not again.accepted:
                return Verdict(
                    status=again.status,
                    reasons=(
                        *again.reasons,
                        f"SUSPICIOUS_SPEEDUP: {speedup:.1f}x vs eager "
                        "did not survive re-validation on fresh inputs",
                    ),
                    device=self.device,
                    error=again.error,
                    mismatch=again.mismatch,
                    launches=again.launches,
                    phases=self.phases,
                    details={**self.details, **dict(again.details)},
                )
            again_speedup = f"{again.speedup:.1f}x" if again.speedup else "n/a"
            reasons.append(
                f"SUSPICIOUS_SPEEDUP: {speedup:.1f}x vs eager (> {SUSPICIOUS_SPEEDUP:g}x); re-validated in a new "
                f"process with fresh inputs and a fresh timing schedule, which gave {again_speedup}; check the "
                "kernel by hand before trusting it"
            )
        return self.verdict(
            Status.OK,
            reasons,
            correct=True,
            runtime=runtime,
            reference_eager=eager,
            reference_compile=compiled,
            speedup=speedup,
            speedup_vs_compile=speedup_compile,
            roofline_fraction=fraction,
        )
