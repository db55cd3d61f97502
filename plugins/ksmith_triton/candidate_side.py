"""The candidate's side of the trust boundary: everything that runs in the process of one untrusted candidate.

``python -m ksmith_triton.worker candidate RESULT_FD [WARM_DEVICE]`` runs ``main`` here. One candidate, one
process (started ahead of need by ``pool.py``: torch, Triton and CUDA are initialised before the job arrives,
and no candidate code has run in it). Everything the verdict depends on is prepared before the candidate
module is imported: the problem is built from the source text the parent sent (never from a file the
candidate could edit), inputs for every trial are generated from the parent's seeds, pristine copies are kept,
the clocks are captured and the guards installed. Then the candidate is imported and called once (Triton
compiles here), and on the parent's word it runs once per trial under the guards and hands its outputs to the
reference process, which compares them with the reference outputs. Timing follows only when the outputs were
correct.

Reference outputs never enter this process, and nothing here imports ``reference_side``: this module shares
only ``child_common`` with it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from ksmith_triton import child_common
from ksmith_triton.child_common import (
    MAX_ERROR_CHARS,
    SAMPLES_PER_OUTPUT,
    Channel,
    OutputError,
    ProblemStepError,
    flatten_outputs,
    format_error,
    load_problem_module,
    make_init_inputs,
    make_inputs,
    make_model,
    peak_memory_bytes,
    read_command,
    serve_job,
    tensor_bytes,
)
from ksmith_triton.compare import torch_dtype

POISON_MIN_BYTES = 64 * 2**20

# When each step of a candidate worker ended (time.monotonic), reported with "ready" for throughput tuning.
STEPS: dict[str, float] = {}


class StepClock:
    """Host milliseconds per named step, summed over the trials' loop (``details.trial_steps_ms``): where the
    trials' shared hold goes, a diagnostic like the driver allocations beside it, not an input to any verdict.
    ``perf`` is the clock captured before the candidate loaded."""

    def __init__(self, perf: Any) -> None:
        self.perf, self.ms, self.last = perf, {}, perf()

    def lap(self, name: str) -> None:
        now = self.perf()
        self.ms[name] = self.ms.get(name, 0.0) + (now - self.last) * 1e3
        self.last = now

    def report(self) -> dict[str, float]:
        return {name: round(ms, 3) for name, ms in self.ms.items()}


def step_seconds() -> dict[str, float]:
    """Seconds between consecutive steps: waiting for the job (a spare's idle time), preparing, ..."""
    names = list(STEPS)
    return {f"{b}": round(STEPS[b] - STEPS[a], 3) for a, b in zip(names, names[1:])}


# ---------------------------------------------------------------------------------------------------------------
# Before the job: start-up and warm-up (no candidate code has run)
# ---------------------------------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """``RESULT_FD [WARM_DEVICE]``: warm up for the device, then wait for the one job and run it."""
    import time

    STEPS["process"] = time.monotonic()
    fd = int(argv[0])
    warm_up(argv[1] if len(argv) > 1 else None)

    def job_arrived() -> None:
        STEPS["job"] = time.monotonic()

    return serve_job(fd, run_candidate, job_arrived)


def import_launch_path() -> None:
    """What a kernel launch under the installed guards imports lazily (dynamo, sympy: seconds), imported
    ahead: by every worker before its job, and once by the fork server (``forkserver.preload``)."""
    try:
        import torch._dynamo  # noqa: F401
        import torch._higher_order_ops.triton_kernel_wrap  # noqa: F401
    except ImportError:
        pass


def warm_up(device: str | None) -> None:
    """What every candidate worker needs, done before its job arrives (see ``pool.py``): the imports, and on
    a GPU the CUDA context, and Triton's whole launch path, by running a kernel of the harness's own under
    the guards' dispatch mode (see ``warmkernel.py``)."""
    import time

    import torch  # noqa: F401
    import triton  # noqa: F401

    from ksmith_triton import guards, timing  # noqa: F401
    from ksmith_triton.warmkernel import prepare_warm_kernel, run_warm_kernel

    STEPS["started"] = time.monotonic()
    import_launch_path()
    from ksmith_triton.locks import GpuLockTimeout, WorkerSharedHold

    try:
        if device in ("cuda", "cpu"):
            # The CUDA context and the warm-up kernel's compilation: seconds of host work on a busy machine, and
            # no kernel on the GPU. Under the lock, every timer that came meanwhile waited for them (half of a
            # 16-way evaluation's time, docs/benchmarks.md section 1b); outside it, they overlap timing.
            prepare_warm_kernel(device, lambda name: STEPS.__setitem__(name, time.monotonic()))
            # The kernel itself is GPU work, which must not overlap a timing.
            with WorkerSharedHold(device, "spare warm-up"):
                run_warm_kernel(device)
    except GpuLockTimeout:
        pass  # left cold; the job's own hold waits again and reports a GPU that stays busy
    STEPS["warm"] = time.monotonic()


# ---------------------------------------------------------------------------------------------------------------
# The job: everything prepared, then the candidate imported, its trials run and timed
# ---------------------------------------------------------------------------------------------------------------


def run_candidate(channel: Channel, job: dict[str, Any]) -> int:
    """The job: prepare, import the candidate, then the trials and timing the parent asks for."""
    import time

    from ksmith_triton.locks import GpuLockTimeout, WorkerSharedHold

    if job.get("device") == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        child_common.host_threads_for_gpu_work()
    set_limits(job)
    # Inputs, the model's weights and the first (compiling) call use the GPU before the driver asks for
    # anything: held shared until the first call is done, so none of it overlaps another candidate's timing.
    try:
        hold = WorkerSharedHold(job["device"], "candidate first call")
    except (GpuLockTimeout, OSError) as exc:  # not the candidate's doing: no candidate code has run
        channel.send(
            "error",
            status="crashed",
            reason=str(exc) if isinstance(exc, GpuLockTimeout) else f"GPU_LOCK: {exc}",
        )
        return 0
    # The driver's clock for the import and first call starts here, not while another holder kept us waiting.
    channel.send("holding")
    with hold:
        try:
            prepared = prepare_candidate_run(job)
            STEPS["prepared"] = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the problem (or ksmith) failed before any candidate code ran
            reason = str(exc) if isinstance(exc, ProblemStepError) else f"{type(exc).__name__}: {exc}"
            channel.send("error", status="setup_error", reason=reason, error=format_error(exc))
            return 0
        return run_trials_and_timing(channel, job, *prepared, hold=hold)


def compile_unheld(hold: Any, synchronize: Any) -> None:
    """Triton compilations during the worker's own hold (the first call) run with the GPU's lock let go.

    Compiling is host work of a tenth of a second to seconds (MLIR passes, ptxas), and while a worker held the
    lock shared for it, every timer that arrived waited for it to end. The hold pauses around
    ``triton.compiler.compile`` (every JIT function reads it when it first runs), after this process's GPU work
    so far has finished; loading and launching the kernel happen with the lock taken again. Compilations
    later (trials, timing) run under the driver's holds, where the pause does nothing."""
    import triton.compiler

    original = triton.compiler.compile

    def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - the name Triton looks up
        with hold.paused(synchronize):
            return original(*args, **kwargs)

    triton.compiler.compile = compile


def set_limits(job: dict[str, Any]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limit_mb = job.get("memory_limit_mb")
    if job["device"] == "cpu" and limit_mb:
        limit = int(limit_mb) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def prepare_candidate_run(job: dict[str, Any]) -> tuple[Any, ...]:
    """Everything that must exist before the candidate is imported: problem, inputs, clocks, guards."""
    device = job["device"]
    import triton  # noqa: F401  (imported before the candidate: the guards hook its launch path)

    from ksmith_triton.guards import Guards, capture_timers

    problem = load_problem_module(job["problem_source"], job.get("small_sizes"))
    # Never handed to the candidate: each trial's inputs are copied into the same staging tensors, so these
    # stay pristine for the mutation check, and a result cache keyed on addresses replays a stale answer.
    # The first set is made now, before the candidate loads. The others too on the CPU when they fit in a
    # quarter of the free memory; on a GPU, and otherwise, one trial at a time (same seeds, same checks).
    with resource_limits(device, "generating the inputs"):
        first = make_inputs(problem, job["trial_seeds"][0], device)
        input_bytes = tensor_bytes(first)
        budget = free_device_bytes(device) // 4
        # On a GPU each set is made when it is used: an evaluation's memory reservation is its peak, and sets
        # made ahead (five trial sets, three timing sets beside them) were most of it (docs/benchmarks.md §1b3).
        ahead = device != "cuda"
        trial_inputs = InputSets(
            problem, job["trial_seeds"], device, first, input_bytes, budget if ahead else 0
        )
        timing_inputs = TimingInputs(
            problem, job.get("timing_seeds", []), device, input_bytes, budget, up_front=ahead
        )
        # The problem's own code, run before any of the candidate's: a failure here is the problem's.
        job["init_inputs"] = make_init_inputs(problem, job["init_seed"], device)

    guards = Guards(frozenset(job.get("allowed_ops", [])), device)
    timers = capture_timers(guards, device)
    capture_harness(guards)
    guards.install()
    # A backend built on this protocol (ksmith_native) adds its own in-process setup here, before any
    # candidate code: each named module's install(guards, job).
    for module_name in job.get("candidate_setup", []):
        import importlib

        importlib.import_module(module_name).install(guards, job)
    del job["problem_source"]
    return problem, trial_inputs, timing_inputs, input_bytes, guards, timers


class InputSets:
    """The trials' inputs by index: all made up front when they fit in ``budget`` bytes, else each made when
    it is asked for (from the same seed) and dropped by the caller after its trial."""

    def __init__(
        self, problem: Any, seeds: list[int], device: str, first: list[Any], input_bytes: int, budget: int
    ) -> None:
        self.problem, self.seeds, self.device = problem, list(seeds), device
        self.kept: list[list[Any]] | None = None
        if input_bytes * len(self.seeds) <= budget:
            self.kept = [first] + [make_inputs(problem, seed, device) for seed in self.seeds[1:]]
        self.first = first

    def __len__(self) -> int:
        return len(self.seeds)

    def __getitem__(self, index: int) -> list[Any]:
        if self.kept is not None:
            return self.kept[index]
        if index == 0 and self.first is not None:
            return self.first
        return make_inputs(self.problem, self.seeds[index], self.device)

    def release(self) -> None:
        """Let every set go (the caller still holds this object)."""
        self.kept, self.first = None, None
        self.seeds = []

    def __iter__(self):
        for index in range(len(self.seeds)):
            inputs = self[index]
            if self.kept is None and index == 0:
                self.first = None  # made again only if asked again: one set alive at a time
            yield inputs


class TimingInputs:
    """The timing loop's input sets (as many as fit in ``budget`` bytes beside one more, at least one).

    Small ones are made up front on the CPU, before the candidate loads, like the trials'. On a GPU all of
    them, and large ones anywhere, are made when the timing starts, after the trials' inputs and staging are
    freed: while the reference process computes and compares the trials beside this one, the candidate's process then holds no input set it is not using (on
    an 8.6 GB problem that set was what ran the pair out of an 80 GB GPU). Either way they come from the same
    seeds, drawn by the driver before the candidate existed; sets made after the candidate loaded are trusted
    no more than the fresh inputs the timing loop makes: every timed call's outputs are checked against the
    reference process's for the same seeds."""

    UP_FRONT_SHARE = 4  # made up front while they take at most this share of the budget

    def __init__(
        self,
        problem: Any,
        seeds: list[int],
        device: str,
        input_bytes: int,
        budget: int,
        up_front: bool = True,
    ) -> None:
        self.problem, self.device = problem, device
        keep = max(1, min(len(seeds), budget // max(1, input_bytes) - 1))
        self.seeds = list(seeds[:keep])
        self.sets: list[list[Any]] = []
        self.deferred = not up_front or input_bytes * len(self.seeds) > budget // self.UP_FRONT_SHARE
        if not self.deferred:
            self.sets = [make_inputs(problem, seed, device) for seed in self.seeds]

    def made(self) -> list[list[Any]]:
        """Every set, made now where it was deferred."""
        if len(self.sets) < len(self.seeds):
            self.sets = [make_inputs(self.problem, seed, self.device) for seed in self.seeds]
        return self.sets

    def clear(self) -> None:
        self.sets, self.seeds = [], []


def free_device_bytes(device: str) -> int:
    """Free memory on the worker's GPU (CPU: the available RAM)."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 1 << 40


@contextlib.contextmanager
def resource_limits(device: str, doing: str):
    """An out-of-memory error while the harness prepares is a problem too large for this device, said in one
    line with the sizes (``RESOURCE``); it is neither the candidate's fault nor a crash."""
    try:
        yield
    except Exception as exc:
        cause = exc.__cause__ if isinstance(exc, ProblemStepError) and exc.__cause__ else exc
        if not is_out_of_memory(cause):
            raise
        raise ProblemStepError(
            f"RESOURCE: {doing} needs more memory than the {device} has ({out_of_memory_detail(cause, device)})"
        ) from exc


def out_of_memory_detail(exc: BaseException, device: str) -> str:
    """What was asked for and what is free, from torch's message and the device."""
    import re

    text = str(exc)
    asked = re.search(r"[Tt]ried to allocate ([0-9.]+ [KMGT]i?B)", text)
    parts = [f"asked for {asked.group(1)}"] if asked else []
    if device == "cuda":
        try:
            import torch

            free, total = torch.cuda.mem_get_info()
            parts.append(f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB")
        except Exception:  # noqa: BLE001 - a device too broken to say is still out of memory
            pass
    return ", ".join(parts) or "no size given"


def capture_harness(guards: Any) -> None:
    """The harness's own entry points: a candidate replacing one of them is caught at the next check."""
    from ksmith_triton import timing

    for name in ("time_calls", "time_gpu", "time_cpu", "Schedule", "Staging", "l2_flush_buffer"):
        guards.capture(f"ksmith_triton.timing.{name}", timing, name)
    for name in ("sample_positions", "encode_values", "make_inputs", "seed_generators"):
        guards.capture(f"child_common.{name}", child_common, name)
    import torch

    # What fresh inputs are drawn from, seeded by ``seed_generators`` (not callables, so named here). CUDA's
    # tuple is set when CUDA starts: taken only once it has (the first inputs were made on the GPU).
    guards.capture("torch.default_generator", torch, "default_generator")
    if torch.cuda.is_initialized():
        guards.capture("torch.cuda.default_generators", torch.cuda, "default_generators")

    for label, owner in (
        ("torch", torch),
        ("torch.Tensor", torch.Tensor),
        ("torch.nn.functional", torch.nn.functional),
        ("torch.random", torch.random),
        ("torch.cuda", torch.cuda),
    ):
        guards.capture_namespace(label, owner)
    for label, owner in (
        ("TimedCallCheck", TimedCallCheck),
        ("GatherBuffers", GatherBuffers),
        ("timing.Schedule", timing.Schedule),
        ("timing.Staging", timing.Staging),
        ("Channel", Channel),
    ):
        guards.capture_namespace(label, owner)
    guards.capture("child_common.Channel.send", Channel, "send")
    guards.capture("json.dumps", json, "dumps")
    # flatten_outputs lives in child_common; this module calls its own binding of it, so both are captured.
    guards.capture("child_common.flatten_outputs", child_common, "flatten_outputs")
    module = sys.modules[__name__]
    for name in (
        "flatten_outputs",
        "save_outputs",
        "same_value",
        "trial_violations",
        "refuse",
        "time_candidate",
        "load_timing_kernels",
        "run_trials_and_timing",
        "TimedCallCheck",
    ):
        guards.capture(f"candidate_side.{name}", module, name)


def run_trials_and_timing(
    channel: Channel,
    job: dict[str, Any],
    problem: Any,
    trial_inputs: list[list[Any]],
    timing_inputs: TimingInputs,
    input_bytes: int,
    guards: Any,
    timers: dict[str, Any],
    hold: Any = None,
) -> int:
    """Import the candidate and call it once (Triton compiles), then on the parent's word run the correctness
    trials and report their outputs, then time it. The comparison with the reference happens elsewhere."""
    import importlib.util
    import time

    from ksmith_triton.guards import interpreter_hooks, thread_idents
    from ksmith_triton.timing import Staging, driver_allocations

    device = job["device"]

    # -- import ------------------------------------------------------------------------------------------------
    if hold is not None and device == "cuda":
        compile_unheld(hold, timers["synchronize"])
    threads_before = thread_idents()  # any Python thread beyond these, at any later check, is the candidate's
    hooks_before = interpreter_hooks()
    guards.candidate_phase = True
    try:
        spec = importlib.util.spec_from_file_location("ksmith_candidate", Path("candidate.py").resolve())
        module = importlib.util.module_from_spec(spec)
        sys.modules["ksmith_candidate"] = module
        spec.loader.exec_module(module)
        model_class = getattr(module, "ModelNew", None)
        if not isinstance(model_class, type):
            raise AttributeError("the candidate module defines no class ModelNew")
    except SystemExit as exc:
        channel.send(
            "error", status="crashed", reason=f"EXITED: the candidate called sys.exit({exc.code}) on import"
        )
        return 0
    except BaseException as exc:  # noqa: BLE001 - any failure to import is the candidate's compile error
        code = "SYNTAX_ERROR" if isinstance(exc, SyntaxError) else "IMPORT_ERROR"
        channel.send(
            "error",
            status="compile_error",
            reason=f"{code}: {type(exc).__name__}: {exc}",
            error=format_error(exc),
        )
        return 0

    try:
        model = make_model(model_class, problem, job["init_seed"], device, job.pop("init_inputs"))
    except BaseException as exc:  # noqa: BLE001
        return report_forward_error(channel, guards, exc, "constructing ModelNew")
    STEPS["imported"] = time.monotonic()

    # -- a first call, outside the trials: Triton compiles here, under this worker's own shared hold --------
    out_dir = Path("outputs")
    out_dir.mkdir(exist_ok=True)
    try:
        staging = Staging(trial_inputs[0])
        first_inputs = staging.load(trial_inputs[0])
    except BaseException as exc:  # noqa: BLE001 - memory the candidate's model keeps is the usual cause
        return report_forward_error(channel, guards, exc, "staging the inputs of the first call")
    try:
        guards.run_forward(model, first_inputs)
        if device == "cuda":
            timers["synchronize"]()
    except BaseException as exc:  # noqa: BLE001
        return report_forward_error(channel, guards, exc, "the first call")
    violations = trial_violations(guards, threads_before, hooks_before)
    if violations:
        return refuse(channel, guards, violations)
    STEPS["first_call"] = time.monotonic()
    if hold is not None:
        hold.release()  # from here on the driver holds the lock for what it asks
    # Unheld: the free memory the poison blocks are sized from, asked of the driver now rather than inside
    # the trials' shared hold.
    trials_free = free_memory_unheld(device)
    channel.send("ready", steps=step_seconds())
    command = read_command()
    if command.get("op") != "trials":
        return 0
    # Streamed: each trial's outputs are reported and compared before the next trial runs, so one trial's
    # copy is alive at a time (the driver asks for it when every trial's outputs would not fit).
    stream = bool(command.get("stream"))
    if stream:
        trials_free = None  # the cache is given back after every trial: each poison block asks afresh

    # -- correctness trials (the parent holds the GPU's shared lock meanwhile) ----------------------------
    share_cuda = device == "cuda" and job.get("transport", "ipc") == "ipc"
    allocations_before = driver_allocations()  # what the trials ask of the driver inside that hold
    steps = StepClock(timers["perf_counter"])  # where the trials' hold goes, step by step
    trials: list[dict[str, Any]] = []
    trial_sets = iter(trial_inputs)
    for index in range(len(trial_inputs)):
        try:
            with resource_limits(device, f"making the inputs of trial {index + 1}"):
                pristine = next(trial_sets)
        except ProblemStepError as exc:  # the problem's code or the device's size: not the candidate's
            channel.send("error", status="setup_error", reason=str(exc), error=format_error(exc))
            return 0
        steps.lap("inputs")
        try:
            inputs = staging.load(pristine)
            steps.lap("stage")
            if device == "cuda":
                poison_allocator(input_bytes, trials_free)
                timers["synchronize"]()
                steps.lap("poison")
        except BaseException as exc:  # noqa: BLE001 - memory the candidate's model keeps is the usual cause
            return report_forward_error(channel, guards, exc, f"staging the inputs of trial {index}")
        try:
            out = guards.run_forward(model, inputs)
            if device == "cuda":
                timers["synchronize"]()
        except BaseException as exc:  # noqa: BLE001
            return report_forward_error(channel, guards, exc, f"trial {index}")
        steps.lap("forward")
        violations = trial_violations(guards, threads_before, hooks_before)
        if violations:
            return refuse(channel, guards, violations)
        try:
            structure, tensors = flatten_outputs(out)
        except OutputError as exc:
            channel.send("error", status="rejected", reasons=[str(exc)])
            return 0
        steps.lap("guards_checked")
        try:
            mutated = [
                i for i, (now, before) in enumerate(zip(inputs, pristine)) if not same_value(now, before)
            ]
            steps.lap("inputs_compared")
            saved = save_outputs(out_dir, f"trial_{index}", structure, tensors, share_cuda)
        except BaseException as exc:  # noqa: BLE001 - an out-of-memory here is said as one, not a crash
            return report_forward_error(
                channel, guards, exc, f"ksmith's copy of the outputs of trial {index}"
            )
        steps.lap("outputs_saved")
        entry = {**saved, "launches": guards.launches, "mutated_inputs": mutated}
        trials.append(entry)
        if stream:
            del out, tensors, pristine, inputs
            release_cached_memory(device)  # the reference now computes beside this process
            channel.send("trial", index=index, **entry)
            if read_command().get("op") != "next":
                return 0
            SHARED_OUTPUTS.clear()  # compared: the reference process has let go of them
            steps.lap("streamed_comparison")
            continue
        del out, tensors, pristine  # made per trial when memory is short: one set alive at a time
        steps.lap("freed")
    changed = guards.tampered()
    if changed:
        channel.send(
            "error", status="rejected", reasons=[f"TAMPERED: the candidate replaced {', '.join(changed)}"]
        )
        return 0
    # Peak memory so far (the trials' outputs are all alive now): the driver's admission expects as much
    # of the problem's next evaluations (admission.py). The candidate could lie; the driver floors it.
    peak = peak_memory_bytes(device)
    steps.lap("tamper_check_and_peak")
    load_timing_kernels(device, trials[-1]["outputs"] if trials else [])
    steps.lap("timing_kernels_loaded")
    allocations_after = driver_allocations()
    trial_allocations = {
        k: allocations_after[k] - v for k, v in allocations_before.items() if k in allocations_after
    }
    # The trials' GPU work is done: the driver may give back their shared hold now (the streamed trials' last
    # step keeps it until ``correctness``). What follows are driver calls, not GPU work, which take longer
    # with more GPUs of the host busy: inside the hold they kept other evaluations' timing waiting (§8i).
    channel.send("trials_ran")
    # The trials are over: their inputs and the staging copy go, and the allocator's cached blocks (the
    # poison block, each trial's freed inputs) go back to the GPU before the reference process compares and
    # times beside this one (with 8 GiB inputs, 48 GiB stayed cached here and the reference ran out).
    trial_inputs.release()
    staging = first_inputs = inputs = None
    release_cached_memory(device)
    steps.lap("cache_released")
    channel.send(
        "correctness", trials=trials, peak_bytes=peak, allocations=trial_allocations, steps_ms=steps.report()
    )
    # Unheld while the driver compares: the memory the timing will take, asked of the driver now rather than
    # inside the exclusive hold.
    free_bytes = reserve_for_timing(device, peak, trials[-1]["outputs"] if trials else [])

    # -- timing, when the parent found the outputs correct ---------------------------------------------------
    command = read_command()
    if command.get("op") != "time":
        return 0
    SHARED_OUTPUTS.clear()  # compared: the reference process has let go of them
    perf = timers["perf_counter"]  # captured before the candidate loaded
    clock = perf()  # the driver holds the GPU's exclusive lock from here to the report
    try:
        with resource_limits(device, "making the timing inputs"):
            timing_sets = timing_inputs.made()
    except ProblemStepError as exc:  # the problem's code or the device's size: not the candidate's
        channel.send("error", status="setup_error", reason=str(exc), error=format_error(exc))
        return 0
    check = TimedCallCheck(
        channel,
        timers["urandom"],
        out_dir,
        share_cuda,
        int(command["trials"]),
        guards,
        hooks_before,
        device,
        free_bytes,
    )
    before_ms = (perf() - clock) * 1e3
    try:
        timed = time_candidate(guards, model, problem, timing_sets, timers, command, device, check)
    except (OutputError, CheckRefused) as exc:
        channel.send("error", status="rejected", reasons=[str(exc)])
        return 0
    except BaseException as exc:  # noqa: BLE001
        return report_forward_error(channel, guards, exc, "timing")
    del timing_sets
    timing_inputs.clear()
    changed = guards.tampered()
    if changed:
        channel.send(
            "error", status="rejected", reasons=[f"TAMPERED: the candidate replaced {', '.join(changed)}"]
        )
        return 0
    violations = [
        r
        for r in trial_violations(guards, threads_before, hooks_before)
        if not r.startswith(guards.no_launch_code)
    ]
    if violations:
        channel.send("error", status="rejected", reasons=violations)
        return 0
    after_ms = (perf() - clock) * 1e3 - before_ms - sum(timed.loop_ms.values())
    channel.send(
        "timing",
        calls=len(timed.samples_ms),
        warmup=timed.warmup,
        prequeue_ms=timed.prequeue_ms,
        exposed_calls=timed.exposed,
        copies=timed.copies,
        loop_ms={"before": round(before_ms, 2), **timed.loop_ms, "after": round(after_ms, 2)},
        loop_cpu_ms=timed.loop_cpu_ms,
        loop_switches=timed.switches,
        loop_allocations=timed.allocations,
        full_checks=check.full,
        full_checks_skipped=check.full_skipped,
        check_ms=check.parts_ms(),
        peak_bytes=peak_memory_bytes(device),
    )
    # The driver let go of the exclusive lock on that report. What is left takes the CUDA driver's own locks
    # (sharing the kept outputs, giving memory back), which another process's new CUDA context holds for a
    # tenth of a second at a time: inside the timed window it made timing hold the GPU half again as long.
    outputs = check.export()
    release_cached_memory(device)  # the reference checks the timed calls beside this process next
    channel.send("full_outputs", outputs=outputs)
    read_command()
    return 0


class CheckRefused(Exception):
    """A timed call broke a rule the check after it enforces; the message is the verdict's reason."""


class TimedCallCheck:
    """Runs after every timed call, before the next one starts (no candidate code runs in between): on the GPU
    in three parts, ``queue`` as soon as the call returned (the rules), ``keep`` once the loop waited for the
    GPU (sample positions drawn, their gather queued, the full check decided; before the next call's inputs
    are staged) and ``__call__`` on the host while the GPU prepares the next call.

    Samples of every output at positions drawn only after the call's kernels have ended (``urandom``, captured
    before the candidate loaded) go to the driver at once with the call's times, so they are out of this
    process before the candidate runs again; now and then (and on the last call if never before) the whole
    outputs are copied for a full comparison, decided the same way (the call's report says ``full``). Which
    calls are looked at, and how, cannot be known during a call: a kernel still running can read host memory
    (pinned memory, or any memory where the driver maps it), so nothing derived from a call's positions
    exists in the process before the loop has waited for that call. The copies are handed over after the
    timing (``export``).
    """

    FULL_CHECKS_PER_RUN = 3  # expected full comparisons per timing run

    def __init__(
        self,
        channel: Channel,
        urandom: Any,
        out_dir: Path,
        share_cuda: bool,
        trials: int,
        guards: Any = None,
        hooks_before: dict[str, Any] | None = None,
        device: str = "cpu",
        free_bytes: int | None = None,
    ) -> None:
        self.channel, self.urandom, self.out_dir, self.share_cuda = channel, urandom, out_dir, share_cuda
        self.guards, self.hooks_before = guards, hooks_before
        self.last_call_launches: int | None = None  # set by the timing loop's guarded call
        self.full_rate = min(1.0, self.FULL_CHECKS_PER_RUN / max(1, trials))
        self.full: list[int] = []
        self.full_skipped = 0  # full checks drawn but left out: their copy would not fit (``_copy_fits``)
        self.input_seed: int | None = None  # the seed of the last fresh inputs made
        self.kept: list[tuple[int, str, list[Any]]] = []  # (call, structure, copies) for the full checks
        # Seconds per part of the checks, summed over the calls (the report's ``check_ms``).
        # ``positions`` drawn, their elements ``gather``ed (queued on the GPU), the values ``encode``d.
        self.parts = dict.fromkeys(("rules", "positions", "gather", "full", "encode", "send"), 0.0)
        # Per output slot, buffers the gather reuses from call to call (``_gather``).
        self._buffers: dict[int, GatherBuffers] = {}
        self._mark = 0.0
        # What ``queue`` and ``keep`` prepared for ``__call__``: (call, structure, outputs, sample seed, samples;
        # the last two ``None`` until ``keep`` draws them).
        self._queued: tuple[int, str, list[Any], int | None, list[Any] | None] | None = None
        self._gathered: Any = None  # a CUDA event recorded after each call's gather (``_sample``)
        self._decided: tuple[int, int | None] | None = None  # (call, its inputs' seed) ``keep`` decided on
        # Read once, before the first call (by the caller before the exclusive hold, ``reserve_for_timing``):
        # asking the driver for free memory inside the timed loop can wait behind another process's new CUDA
        # context.
        self.free_bytes: int | None = free_bytes
        if device == "cuda" and free_bytes is None:
            import torch

            self.free_bytes = int(torch.cuda.mem_get_info()[0])

    def _draw(self) -> int:
        return int.from_bytes(self.urandom(8), "little") >> 1

    def _copy_fits(self, tensors: list[Any]) -> bool:
        """A full check keeps a copy of the call's outputs on the GPU until the timing ends: only while all the
        copies take at most half the memory free before the first call (outputs of gigabytes: fewer calls
        fully checked, every call sampled)."""
        if self.free_bytes is None:
            return True
        kept = sum(tensor_bytes(copies) for _, _, copies in self.kept)
        fits = kept + tensor_bytes(tensors) <= self.free_bytes // 2
        self.full_skipped += 0 if fits else 1
        return fits

    def _lap(self, part: str) -> None:
        now = time.perf_counter()
        self.parts[part] += now - self._mark
        self._mark = now

    def queue(self, index: int, out: Any) -> None:
        """The first part of a call's check, run as soon as the call returned (on the GPU, before the loop
        waits for it): the rules. The sample positions are not drawn here: the call's kernels may still be
        running, and a kernel that polls host memory would see positions written there now (the pinned buffer
        they are staged through has a fixed address), in time to write right values at them alone."""
        from ksmith_triton.guards import hooks_added

        self._mark = time.perf_counter()
        # Before the harness touches anything the call returned: nothing of the candidate's may be left to
        # run inside it (a mode on the torch stack, a profile hook), and the call must have run kernels.
        if self.hooks_before is not None:
            added = hooks_added(self.hooks_before)
            if added:
                raise CheckRefused(
                    f"INTERPRETER_HOOK: timed call {index + 1} left {', '.join(added)} installed; candidate "
                    "code may run only inside its own forward"
                )
        if self.last_call_launches is not None and self.last_call_launches < 1:
            code = getattr(self.guards, "no_launch_code", "NO_TRITON_LAUNCH")
            noun = getattr(self.guards, "kernel_noun", "Triton kernel")
            raise CheckRefused(f"{code}: timed call {index + 1} launched no {noun}")
        structure, tensors = flatten_outputs(out)  # OutputError: the caller refuses the candidate
        self._queued = (index, structure, tensors, None, None)
        self._lap("rules")

    def _sample(self, tensors: list[Any]) -> tuple[int, list[Any]]:
        """Positions drawn now and every output's elements at them: on the GPU queued on the stream (after the
        call's kernels, which have ended: the loop waited for them), copied to pinned host memory, with an
        event ``__call__`` waits on before it reads them; on the CPU taken at once."""
        import torch

        seed = self._draw()
        positions = child_common.sample_positions(seed, [t.numel() for t in tensors])
        self._lap("positions")
        values = []
        for slot, (tensor, where) in enumerate(zip(tensors, positions)):
            if tensor.is_cuda:
                values.append(self._gather(slot, tensor.detach(), where))
            else:
                values.append(torch.take(tensor.detach(), where.to(tensor.device)).to("cpu"))
        if any(t.is_cuda for t in tensors):
            if self._gathered is None:
                self._gathered = torch.cuda.Event()
            self._gathered.record()
        self._lap("gather")
        return seed, values

    def _gather(self, slot: int, tensor: Any, where: Any) -> Any:
        """``tensor``'s elements at ``where`` into pinned host memory, queued on the stream: through buffers
        kept per output slot (the positions' pinned and device copies, the values' device and pinned copies), so
        a call's gather allocates nothing. Reusing them is safe: the loop waits for the GPU after every call
        (``keep`` runs after that wait), and ``__call__`` reads the values before the next call runs."""
        buffers = self._buffers.get(slot)
        if buffers is None or not buffers.fits(tensor, where):
            buffers = self._buffers[slot] = GatherBuffers(tensor, where.numel())
        return buffers.gather(tensor, where)

    def keep(self, index: int, out: Any, last: bool) -> None:
        """The call's samples drawn and gathered (``_sample``), and whether it is fully checked, drawn now,
        and if so its outputs' copy queued: on the GPU once the loop waited for the call and before the next
        call's inputs are staged (an output may be a view of them). The last call is always fully checked if
        none was: the report needs one (a copy too large for the GPU then fails as an out-of-memory, not as a
        forged report)."""
        import torch

        if self._queued is None or self._queued[0] != index:  # not queued before the wait (the CPU's loop)
            self.queue(index, out)
        self._mark = time.perf_counter()
        _, structure, tensors, _, _ = self._queued
        seed, values = self._sample(tensors)
        self._queued = (index, structure, tensors, seed, values)
        drawn = self._draw() / 2**63 < self.full_rate
        if (drawn and self._copy_fits(tensors)) or (last and not self.full):
            self.full.append(index)
            # A copy of its own: later calls may reuse the candidate's buffers (or return views of the inputs).
            copies = [t.detach().clone(memory_format=torch.contiguous_format) for t in tensors]
            self.kept.append((index, structure, copies))
        # The next call's fresh inputs (and their seed) are made before ``__call__`` reports this one.
        self._decided = (index, self.input_seed)
        self._lap("full")

    def __call__(
        self, index: int, input_set: int, out: Any, last: bool, gpu_ms: float, host_ms: float
    ) -> None:
        if self._decided is None or self._decided[0] != index:  # ``keep`` not called by the loop (the CPU's)
            self.keep(index, out, last)
        input_seed = self._decided[1]
        queued, self._queued = self._queued, None
        self._mark = time.perf_counter()
        _, structure, tensors, seed, values = queued
        if self._gathered is not None:
            self._gathered.synchronize()  # the gather only: queued before the next call's inputs and flush
        self._lap("gather")
        samples = [child_common.encode_values(v) for v in values]
        self._lap("encode")
        message: dict[str, Any] = {
            "index": index,
            "set": input_set,
            "input_seed": input_seed if input_set < 0 else None,
            "gpu_ms": gpu_ms,
            "host_ms": host_ms,
            "structure": structure,
            "dtypes": [str(t.dtype) for t in tensors],
            "shapes": [list(t.shape) for t in tensors],
            "devices": [str(t.device) for t in tensors],
            "seed": seed,
            "samples": samples,
        }
        if self.full and self.full[-1] == index:
            message["full"] = True
        self.channel.send("call", **message)
        self._lap("send")

    def parts_ms(self) -> dict[str, float]:
        return {k: round(v * 1e3, 2) for k, v in self.parts.items()}

    def export(self) -> dict[str, list[dict[str, Any]]]:
        """The kept copies, described for the reader (``save_outputs``), by call index."""
        described = {
            str(index): save_outputs(
                self.out_dir, f"timed_{index}", structure, copies, self.share_cuda, copied=True
            )["outputs"]
            for index, structure, copies in self.kept
        }
        self.kept = []
        return described


class GatherBuffers:
    """The four buffers one output slot's sample gather goes through, for one dtype, device and count."""

    def __init__(self, tensor: Any, count: int) -> None:
        import torch

        self.dtype, self.device, self.count = tensor.dtype, tensor.device, count
        self.positions_host = torch.empty(count, dtype=torch.int64).pin_memory()
        self.positions = torch.empty(count, dtype=torch.int64, device=tensor.device)
        self.values = torch.empty(count, dtype=tensor.dtype, device=tensor.device)
        self.values_host = torch.empty(count, dtype=tensor.dtype).pin_memory()

    def fits(self, tensor: Any, where: Any) -> bool:
        return tensor.dtype == self.dtype and tensor.device == self.device and where.numel() == self.count

    def gather(self, tensor: Any, where: Any) -> Any:
        import torch

        self.positions_host.copy_(where)
        self.positions.copy_(self.positions_host, non_blocking=True)
        torch.take(tensor, self.positions, out=self.values)
        self.values_host.copy_(self.values, non_blocking=True)
        return self.values_host


def load_timing_kernels(device: str, outputs: list[dict[str, Any]]) -> None:
    """Launch once, on a few elements, the torch kernels the timed loop's own work launches: the L2 flush's
    ``zero_`` and the sample gather's ``take`` for each output's dtype. CUDA loads a kernel on its first launch
    in a process -- 7-25 ms each for these on an H200 in a fresh worker, longer while the host makes a CUDA
    context for any GPU (docs/benchmarks.md §8g) -- so without this the loads land inside the exclusive timing
    hold; here they fall in the trials' shared hold, which the caller is in."""
    if device != "cuda":
        return
    import torch

    positions = torch.zeros(1, dtype=torch.int64, device="cuda")
    torch.empty(2, dtype=torch.int8, device="cuda").zero_()
    for dtype in {torch_dtype(o.get("dtype")) for o in outputs} - {None}:
        try:
            torch.take(torch.zeros(2, dtype=dtype, device="cuda"), positions)
        except (RuntimeError, TypeError):  # no kernel for this dtype: the gather will say so itself
            continue
    torch.cuda.synchronize()


def release_cached_memory(device: str) -> None:
    """Give the caching allocator's free blocks back to the GPU (the poison block, freed inputs and outputs)
    before the reference process computes beside this one. The next trial poisons afresh."""
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


RESERVE_MAX_BYTES = 2 * 2**30  # the most memory cached for the timing while the reference compares beside it
RESERVE_SMALL_BLOCKS = 32  # 1 MB blocks (16 of the allocator's 2 MB small segments): samples, small outputs


def reserve_for_timing(device: str, peak_bytes: int, outputs: list[dict[str, Any]]) -> int | None:
    """Memory for the timing, taken from the driver before the exclusive hold; the free memory it leaves.

    The trials ended with the allocator's cache given back (``release_cached_memory``), so every buffer the
    timing makes -- staging copies, the L2 flush, the outputs, fresh inputs, the full checks' copies, the
    sample gathers' pinned blocks -- would be a driver call inside the exclusive hold, where another process's
    new CUDA context makes it wait (docs/benchmarks.md §8f). Here they become one allocation of the trials' own
    peak and the L2 flush buffer (what the timing took from the device before, ``admission.py`` counts it),
    capped so the reference process computing beside this one keeps its room, a few small-pool segments, and
    the pinned blocks of each output's gather; all freed into the caches at once. Returns the free memory the
    timing may count on (read before the reservation: what is free on the device and what is now cached
    here), or ``None`` off the GPU."""
    if device != "cuda":
        return None
    import torch

    from ksmith_triton.timing import l2_flush_bytes

    free = int(torch.cuda.mem_get_info()[0])
    size = min(int(peak_bytes) + l2_flush_bytes(), RESERVE_MAX_BYTES, free // 4)
    held: list[Any] = []
    try:
        if size > 0:
            held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        held.extend(torch.empty(2**20, dtype=torch.uint8, device="cuda") for _ in range(RESERVE_SMALL_BLOCKS))
        for output in outputs:  # as many pinned blocks, of the sizes each output's ``GatherBuffers`` takes
            dtype = torch_dtype(output.get("dtype"))
            if dtype is None:
                continue
            count = min(SAMPLES_PER_OUTPUT, math.prod(output.get("shape") or [1]))
            held.append(torch.empty(count, dtype=torch.int64).pin_memory())
            held.append(torch.empty(count, dtype=dtype).pin_memory())
    except torch.OutOfMemoryError:  # the room went to others meanwhile: the timing allocates as it goes
        pass
    del held  # into the caches: the free memory read before is what this process may still count on
    return free


def free_memory_unheld(device: str) -> int | None:
    """The GPU's free memory, read while this worker holds no GPU lock, before the trials: their poison
    blocks are sized from it (:func:`poison_allocator`) rather than from a query per trial inside their
    shared hold, where the query can wait behind another process's new CUDA context (docs/benchmarks.md §8f).
    ``None`` off the GPU.

    Only the query moves for the trials: reserving their memory too (as :func:`reserve_for_timing` does the
    timing's) made their hold longer, not shorter, on an H200 pair (§8f)."""
    if device != "cuda":
        return None
    import torch

    return int(torch.cuda.mem_get_info()[0])


def poison_allocator(input_bytes: int, free: int | None = None) -> None:
    """Fill what the caching allocator will hand out next with NaN bytes, so an output the candidate never
    writes reads NaN instead of whatever happened to be there. Sized to the inputs, and to at most half of
    what is free (``free``, read once before the trials by :func:`free_memory_unheld`; else asked now): a
    problem that nearly fills the GPU is still judged."""
    import torch

    if free is None:
        free = int(torch.cuda.mem_get_info()[0])
    size = max(1, min(max(POISON_MIN_BYTES, 2 * input_bytes), free // 2))
    big = torch.empty(size, dtype=torch.uint8, device="cuda").fill_(0xFF)
    small = [torch.empty(512 * 1024, dtype=torch.uint8, device="cuda").fill_(0xFF) for _ in range(16)]
    del big, small


def refuse(channel: Channel, guards: Any, violations: list[str]) -> int:
    """Report a rejected candidate with what the guards counted in the call that broke the rules."""
    channel.send(
        "error",
        status="rejected",
        reasons=violations,
        launches=guards.launches,
        forbidden_ops=dict(guards.forbidden),
    )
    return 0


def trial_violations(guards: Any, threads_before: set[int], hooks_before: dict[str, Any]) -> list[str]:
    from ksmith_triton.guards import hooks_added

    reasons = []
    added = hooks_added(hooks_before)
    if added:
        reasons.append(
            f"INTERPRETER_HOOK: the candidate installed {', '.join(added)}; candidate code may run only "
            "inside its own forward"
        )
    if guards.spawns:
        reasons.append(f"PROCESS_SPAWNED: forward started a process ({guards.spawns[0]})")
    if guards.forbidden:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(guards.forbidden.items()))
        reasons.append(
            f"FORBIDDEN_TORCH_OP: {listed} dispatched inside forward; only {guards.kernel_plural} may compute "
            "(allocation, views and copies are allowed, plus the problem's KSMITH_ALLOWED_OPS)"
        )
    if guards.launches == 0:
        reasons.append(f"{guards.no_launch_code}: forward launched no {guards.kernel_noun}")
    if guards.threads_started:
        reasons.append(f"THREAD_STARTED: forward started thread(s) {', '.join(guards.threads_started[:3])}")
    left = guards.threads_alive(threads_before)
    if left:
        reasons.append(f"THREADS_LEFT_RUNNING: {', '.join(left[:3])} still running after forward")
    if guards.side_stream_launches:
        reasons.append(f"SIDE_STREAM: {guards.side_stream_launches} launch(es) went to a non-default stream")
    if not guards.current_stream_is_default():
        reasons.append("SIDE_STREAM: forward returned with a non-default current stream")
    return reasons


def same_value(now: Any, before: Any) -> bool:
    import torch

    if isinstance(before, torch.Tensor):
        return (
            type(now) is torch.Tensor
            and now.shape == before.shape
            and now.dtype == before.dtype
            and bool(
                torch.equal(now, before)
                or (
                    now.isnan().equal(before.isnan())
                    and torch.equal(now.nan_to_num(0.0), before.nan_to_num(0.0))
                )
            )
        )
    return True


# Outputs handed to the reference process through CUDA IPC must stay alive here until it has compared them.
SHARED_OUTPUTS: list[Any] = []


def save_outputs(
    out_dir: Path,
    stem: str,
    structure: str,
    tensors: list[Any],
    share_cuda: bool = False,
    copied: bool = False,
) -> dict[str, Any]:
    """Describe each output for the reader: GPU tensors as CUDA IPC handles when ``share_cuda`` (the reference
    process maps the memory of a copy made here, or of the tensor itself when it is already a contiguous copy
    of the harness's own, ``copied``), anything else as its raw bytes in a file of its own (a plain copy, no
    pickling)."""
    import base64

    import torch

    described = []
    for index, tensor in enumerate(tensors):
        item = {"device": str(tensor.device), "dtype": str(tensor.dtype), "shape": list(tensor.shape)}
        if share_cuda and tensor.is_cuda and tensor.numel() > 0:
            # A copy of its own: the reference reads it after later trials, which may reuse the candidate's
            # buffers (or return views of the staged inputs).
            data = tensor.detach() if copied else tensor.detach().clone(memory_format=torch.contiguous_format)
            device, handle, size, offset, counter, counter_offset, event, event_sync = (
                data.untyped_storage()._share_cuda_()
            )
            SHARED_OUTPUTS.append(data)
            item["ipc"] = {
                "device": device,
                "handle": base64.b64encode(handle).decode(),
                "storage_bytes": size,
                "storage_offset_bytes": offset,
                "ref_counter": base64.b64encode(counter).decode(),
                "ref_counter_offset": counter_offset,
                "event": base64.b64encode(event).decode() if event else None,
                "event_sync": bool(event_sync),
                "element_offset": data.storage_offset(),
            }
        else:
            path = out_dir / f"{stem}_{index}.bin"
            tensor.detach().contiguous().reshape(-1).view(torch.uint8).to("cpu").numpy().tofile(path)
            item["file"] = path.name
        described.append(item)
    if share_cuda and SHARED_OUTPUTS:
        torch.cuda.synchronize()  # the copies are complete before anyone is told where they are
    return {"structure": structure, "outputs": described}


def time_candidate(
    guards: Any,
    model: Any,
    problem: Any,
    input_sets: list[list[Any]],
    timers: dict[str, Any],
    command: dict[str, Any],
    device: str,
    check: TimedCallCheck,
) -> Any:
    import torch

    from ksmith_triton.timing import time_calls

    guards.forget_autotuning()  # re-benchmarked in the warm-up, on a GPU nobody else uses (exclusive lock)
    guards.launches = 0
    guards.forbidden = {}
    guards.side_stream_launches = 0
    guards.launch_errors = []

    def guarded(*inputs: Any) -> Any:
        # The same accounting as the trials: a candidate that computes with torch (or skips its kernels)
        # only while it is timed is refused. Its host cost stays out of the GPU's time (see timing.py).
        before = guards.launches
        try:
            return guards.run_forward(model, list(inputs), fresh=False)
        finally:
            check.last_call_launches = guards.launches - before

    def fresh_inputs(seed: int) -> list[Any]:
        check.input_seed = seed
        return make_inputs(problem, seed, device)

    with torch.no_grad():
        return time_calls(
            device,
            guarded,
            input_sets,
            timers,
            int(command["trials"]),
            int(command["warmup"]),
            check,
            fresh_inputs,
            before_wait=check.queue,
            after_wait=check.keep,
        )


def report_forward_error(channel: Channel, guards: Any, exc: BaseException, where: str) -> int:
    if isinstance(exc, SystemExit):
        channel.send(
            "error", status="crashed", reason=f"EXITED: the candidate called sys.exit({exc.code}) in {where}"
        )
        return 0
    if guards.spawns:
        channel.send("error", status="rejected", reasons=[f"PROCESS_SPAWNED: {guards.spawns[0]}"])
        return 0
    launch_error = guards.launch_error_for(exc)
    if launch_error is not None:
        channel.send(
            "error",
            status="compile_error",
            reason=f"KERNEL_COMPILE_ERROR: a Triton kernel failed to compile or launch in {where}: "
            f"{type(exc).__name__}: {str(exc)[:300]}",
            error=launch_error[-MAX_ERROR_CHARS:],
        )
        return 0
    if is_out_of_memory(exc):
        device = "cuda" if "cuda" in str(exc).lower() else "cpu"
        reason = f"OUT_OF_MEMORY: in {where} ({out_of_memory_detail(exc, device)}): {str(exc)[:200]}"
    else:
        reason = f"RUNTIME_ERROR: {type(exc).__name__} in {where}: {str(exc)[:300]}"
    channel.send("error", status="runtime_error", reason=reason, error=format_error(exc))
    return 0


def is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text
