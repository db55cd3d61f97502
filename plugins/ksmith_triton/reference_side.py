"""The reference's side of the trust boundary: the long-lived reference process of one problem.

``python -m ksmith_triton.worker reference RESULT_FD`` runs ``main`` here: a server that computes reference
outputs for seeds it is sent and compares a candidate's outputs with them on the device
(``compare_with_reference``), checks the sampled outputs of every timed call (``check_sampled_calls``),
times the eager and torch.compile references (``prepare_reference_timing``,
``reference_timing``), measures the GPU's ceilings (``measure_ceilings``) and reports its device and versions
(``reference_info``). It never runs candidate code, and nothing here imports ``candidate_side``: the
candidate's outputs arrive as raw bytes or CUDA IPC handles, read by ``compare.py``.
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import sys
import time
import types
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ksmith_triton.child_common import (
    Channel,
    ProblemStepError,
    flatten_outputs,
    format_error,
    host_threads_for_gpu_work,
    load_problem_module,
    make_inputs,
    make_model,
    peak_memory_bytes,
    problem_step,
    read_command,
    serve_job,
    tensor_bytes,
)
from ksmith_triton.inductor_tuning import steady_autotuning


def main(argv: list[str]) -> int:
    """``RESULT_FD``: wait for the job (the problem), then answer commands until told to exit."""
    return serve_job(int(argv[0]), run_reference)


def run_reference(channel: Channel, job: dict[str, Any]) -> int:
    """Build the problem once, then one handler per command; each reports back under the command's name."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    import torch

    device = job["device"]
    try:
        problem = load_problem_module(job["problem_source"], job.get("small_sizes"))
    except ProblemStepError as exc:  # answered to every request, so the parent hears it once it asks
        return answer_with(channel, str(exc))
    if device == "cuda":
        torch.cuda.init()
        host_threads_for_gpu_work()
    handlers = {
        "prepare_outputs": prepare_outputs,
        "compare": compare_with_reference,
        "release_outputs": release_outputs,
        "check_samples": check_sampled_calls,
        "prepare_time": prepare_reference_timing,
        "time": reference_timing,
        "ceilings": measure_ceilings,
        "info": reference_info,
    }
    while True:
        if device == "cuda":
            release_cache_when_idle(torch)
        command = read_command()
        op = command.get("op")
        if op == "exit" or op not in handlers:
            return 0
        try:
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()  # each answer reports its own peak (admission.py)
            answer = handlers[op](problem, device, command)
            channel.send(op, **answer, peak_bytes=peak_memory_bytes(device))
        except ProblemStepError as exc:  # the problem's own code failed: the user's to fix
            channel.send("error", reason=str(exc), problem_step=True, error=format_error(exc))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
            channel.send("error", reason=f"{type(exc).__name__}: {exc}", error=format_error(exc))
        if device == "cuda" and torch.cuda.memory_reserved() > KEEP_CACHED_BYTES:
            torch.cuda.empty_cache()  # a large answer's cache goes at once


# Many of these processes live side by side (one per problem), so none keeps its cache while idle. A busy one
# keeps up to this much between the requests of an evaluation: given back and taken again for each request,
# the cache cost driver calls inside the comparisons' holds (docs/benchmarks.md §8i).
KEEP_CACHED_BYTES = 1 << 30
IDLE_RELEASE_S = 1.5  # no request for this long: idle, the cache goes back to the GPU


def release_cache_when_idle(torch: Any) -> None:
    """Wait up to ``IDLE_RELEASE_S`` for the next request; if none comes, give the allocator's cache back."""
    import select

    if not torch.cuda.memory_reserved():
        return
    # The driver sends a request only once the last one is answered, so nothing waits unread in stdin's
    # buffer here: the file descriptor says whether a request came.
    try:
        ready, _, _ = select.select([sys.stdin], [], [], IDLE_RELEASE_S)
    except (OSError, ValueError):  # no selectable stdin: release at once, as before
        ready = []
    if not ready:
        torch.cuda.empty_cache()


class StepClock:
    """Host seconds per step of one answer (``steps`` in it), for whoever tunes throughput: a step's GPU work
    shows in the first step after it that waits for the GPU."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._mark = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.seconds[step] = self.seconds.get(step, 0.0) + now - self._mark
        self._mark = now

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in self.seconds.items()}


def answer_with(channel: Channel, reason: str) -> int:
    """A reference process whose problem cannot even be built: every request gets this one error."""
    while True:
        command = read_command()
        if command.get("op") in (None, "exit"):
            return 0
        channel.send("error", reason=reason, problem_step=True)


def reference_info(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    import platform

    import torch
    import triton

    name = torch.cuda.get_device_name() if device == "cuda" else f"cpu {platform.machine()}"
    # The physical GPU: references are timed per GPU, never carried over from another card of the same kind.
    uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "")) if device == "cuda" else ""
    return {
        "device_name": name,
        "gpu_uuid": uuid,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "sizes": problem_sizes(problem),
    }


def problem_sizes(problem: types.ModuleType) -> dict[str, int]:
    """The bytes of the problem's inputs and outputs, worked out on the meta device (no memory, no
    compute): the driver's memory admission estimates an evaluation's footprint from them before one was
    measured. ``{}`` where the problem's code cannot run on meta tensors (outputs alone missing: inputs only).
    """
    import torch

    sizes: dict[str, int] = {}
    try:
        inputs = make_inputs(problem, 0, "meta")
        sizes["input_bytes"] = tensor_bytes(inputs)
        model = make_model(problem.Model, problem, 0, "meta")
        with torch.no_grad(), no_triton_launches():
            _, outputs = flatten_outputs(model(*inputs))
        sizes["output_bytes"] = tensor_bytes(outputs)
    except Exception:  # noqa: BLE001 - data-dependent code, custom kernels: no estimate, measured later
        pass
    return sizes


class MetaLaunchError(RuntimeError):
    """A Triton kernel was about to run on meta tensors."""


@contextlib.contextmanager
def no_triton_launches() -> Iterator[None]:
    """Triton launches raise instead of running. A reference ``Model`` that launches its own Triton kernel
    (an imported upstream kernel is its own reference) would launch it on meta tensors' null pointers: an
    illegal address that poisons this process's CUDA context, so the problem's next step fails (seen on the
    H100 as ``get_inputs()`` raising an illegal memory access). Triton's launch hook runs before every launch
    of a compiled kernel, and an exception from it stops the launch."""
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        holder: Any = knobs.runtime
    else:  # Triton before 3.4 keeps the hook on the compiled kernel's class
        from triton.compiler.compiler import CompiledKernel

        holder = CompiledKernel

    def refuse(*_: Any, **__: Any) -> None:
        raise MetaLaunchError("a Triton kernel launched while sizing the problem on the meta device")

    previous = holder.launch_enter_hook
    holder.launch_enter_hook = refuse
    try:
        yield
    finally:
        holder.launch_enter_hook = previous


def check_sampled_calls(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    """Every timed call's sampled output elements against the reference's at the same positions.

    ``calls`` are what the candidate's worker sent after each timed call: the input set (or the seed of the
    fresh inputs the call had alone), the seed the sample positions derive from (drawn after the call), and
    the sampled values. The reference outputs of each timing input set are computed once here, those of fresh
    inputs once per call. The reference's elements of every call are gathered first and read in one wait for
    the GPU, then compared all at once (call by call only where that finds a difference). Returns the first
    call that differs, if any.
    """
    import torch

    from ksmith_triton.compare import tolerances

    tolerance_for = tolerances(command["tolerances"])
    clock = StepClock()
    model = make_model(problem.Model, problem, command["init_seed"], device)
    clock.lap("model")
    expected: dict[int, tuple[str, list[Any]]] = {}
    calls = command["calls"]
    gathered: list[SampledCall | dict[str, Any]] = []
    for call in calls:
        try:
            item: SampledCall | dict[str, Any] = _gather_samples(
                problem, device, command, model, expected, call, len(calls)
            )
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
            item = _forged(call, exc)
        gathered.append(item)
        if isinstance(item, dict):  # a difference already: the calls after it are not looked at
            break
    clock.lap("reference outputs")
    for item in gathered:
        if isinstance(item, SampledCall):
            item.wants = [want.to("cpu", non_blocking=True) for want in item.wants]
    if device == "cuda":
        torch.cuda.synchronize()
    clock.lap("gather")
    try:
        found = _first_difference(gathered, tolerance_for)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:  # only on a forged report
        found = _forged({}, exc)
    clock.lap("compare")
    if found is not None:
        return {**found, "steps": clock.rounded()}
    return {"correct": True, "checked": len(calls), "steps": clock.rounded()}


def _forged(call: Any, exc: BaseException) -> dict[str, Any]:
    # The report is the candidate's process's: what does not parse is forged, not a reference failure.
    return {
        "correct": False,
        "index": call.get("index", -1) if isinstance(call, dict) else -1,
        "reasons": [f"FORGED_OUTPUT: a timed call's samples cannot be read ({type(exc).__name__}: {exc})"],
        "mismatch": None,
    }


class SampledCall:
    """One timed call's report beside the reference's elements at its sample positions (``wants``: on the
    device until gathered, then on the CPU)."""

    def __init__(self, call: dict[str, Any], label: str, refs: list[Any], positions: list[Any]) -> None:
        import torch

        self.index, self.label, self.texts = int(call["index"]), label, list(call["samples"])
        self.dtypes = [ref.dtype for ref in refs]
        self.shapes = [tuple(ref.shape) for ref in refs]
        self.positions = positions
        self.wants = [torch.take(ref, where.to(ref.device)) for ref, where in zip(refs, positions)]


def _gather_samples(
    problem: types.ModuleType,
    device: str,
    command: dict[str, Any],
    model: Any,
    expected: dict[int, tuple[str, list[Any]]],
    call: dict[str, Any],
    count: int,
) -> SampledCall | dict[str, Any]:
    """The reference's elements at one timed call's sample positions (queued on the device), or the reason
    its report cannot be the reference's. Reference outputs of the prepared input sets are kept in
    ``expected``; those of a call's fresh inputs are computed for it alone."""
    import torch

    from ksmith_triton.child_common import sample_positions

    index, chosen = int(call["index"]), int(call["set"])
    if chosen < 0 or chosen not in expected:
        seed = int(call["input_seed"]) if chosen < 0 else command["seeds"][chosen]
        inputs = make_inputs(problem, seed, device)
        with torch.no_grad(), problem_step("Model.forward()"):
            structure, tensors = flatten_outputs(model(*inputs))
        outputs = (structure, [t.detach() for t in tensors])
        del inputs
        if chosen >= 0:
            expected[chosen] = outputs
    else:
        outputs = expected[chosen]
    structure, tensors = outputs
    label = f"timed call {index + 1} of {count}"
    problem_found = _sample_shape_problem(call, structure, tensors, device, label)
    if problem_found:
        return {"correct": False, "index": index, "reasons": [problem_found], "mismatch": None}
    positions = sample_positions(int(call["seed"]), [t.numel() for t in tensors])
    return SampledCall(call, label, tensors, positions)


def _first_difference(
    gathered: list[SampledCall | dict[str, Any]], tolerance_for: Any
) -> dict[str, Any] | None:
    """The first call (in order) whose samples differ from the reference's, or ``None``. Every call's samples
    of an output are compared together first; only a difference there is looked for call by call."""
    import torch

    from ksmith_triton.child_common import decode_values
    from ksmith_triton.compare import compare_values

    calls = [item for item in gathered if isinstance(item, SampledCall)]
    if len(calls) == len(gathered) and calls:
        try:
            gots = [
                [
                    decode_values(text, dtype, len(where))
                    for text, dtype, where in zip(c.texts, c.dtypes, c.positions)
                ]
                for c in calls
            ]
        except ValueError:
            gots = None  # a forged sample: found and named below, in its call's turn
        if gots is not None:
            clean = all(
                compare_values(
                    output,
                    torch.cat([got[output] for got in gots]),
                    torch.cat([c.wants[output] for c in calls]),
                    tolerance_for(str(calls[0].dtypes[output])),
                    "",
                )
                is None
                for output in range(len(calls[0].wants))
            )
            if clean:
                return None
    for item in gathered:
        if isinstance(item, dict):
            return item
        found = _call_difference(item, tolerance_for)
        if found is not None:
            return found
    return None


def _call_difference(call: SampledCall, tolerance_for: Any) -> dict[str, Any] | None:
    """How one timed call's samples differ from the reference's, or ``None``."""
    import torch

    from ksmith_triton.child_common import decode_values
    from ksmith_triton.compare import compare_values

    for output, (text, dtype, shape, where, want) in enumerate(
        zip(call.texts, call.dtypes, call.shapes, call.positions, call.wants)
    ):
        try:
            got = decode_values(text, dtype, len(where))
        except ValueError as exc:
            return {
                "correct": False,
                "index": call.index,
                "reasons": [f"FORGED_OUTPUT: {call.label}, output {output}: {exc}"],
                "mismatch": None,
            }
        result = compare_values(output, got, want, tolerance_for(str(dtype)), f" ({call.label})")
        if result is not None:
            mismatch = dict(result.mismatch or {})
            if mismatch.get("worst_index"):
                flat = int(where[int(mismatch["worst_index"][0])])
                mismatch["worst_index"] = (
                    [int(i) for i in torch.unravel_index(torch.tensor(flat), shape)] if shape else []
                )
            mismatch["numel"] = math.prod(shape)
            mismatch["where"] = f"{call.label}, {len(where)} sampled elements"
            return {"correct": False, "index": call.index, "reasons": result.reasons, "mismatch": mismatch}
    return None


def _sample_shape_problem(
    call: dict[str, Any], structure: str, tensors: list[Any], device: str, label: str
) -> str:
    """Why a timed call's outputs cannot be the reference's (structure, dtype, shape, device), or ``""``."""
    if call.get("structure") != structure or len(call.get("samples", [])) != len(tensors):
        return f"OUTPUT_STRUCTURE: {label} returned {call.get('structure')}, the reference {structure}"
    for output, ref in enumerate(tensors):
        if call["dtypes"][output] != str(ref.dtype):
            return (
                f"DTYPE_MISMATCH: {label}, output {output} is {call['dtypes'][output]}, expected {ref.dtype}"
            )
        if list(call["shapes"][output]) != list(ref.shape):
            return (
                f"SHAPE_MISMATCH: {label}, output {output} has shape {tuple(call['shapes'][output])}, "
                f"expected {tuple(ref.shape)}"
            )
        if str(call["devices"][output]).split(":")[0] != device:
            return f"DEVICE_MISMATCH: {label}, output {output} is on {call['devices'][output]}, expected {device}"
    return ""


# The degenerate-reference check's answer in this process (one problem), by tolerances, with the reference's
# sizes: a property of the problem, not of a candidate, so the first evaluation's seeds decide it and the
# later evaluations of the problem skip its passes over every seed's outputs (a quarter of a second each on
# 256 MB outputs).
_degenerate_known: dict[str, tuple[list[str], dict[str, Any]]] = {}


# The candidate's outputs for the next comparison, by their position in its ``got``: mapped (CUDA IPC) by
# ``prepare_outputs`` before the comparison takes the GPU's lock, and let go by ``release_outputs`` after it gave
# the lock back. Opening and closing an IPC mapping are driver calls that wait on other processes' driver work
# (their new contexts above all): made inside the shared hold, they lengthened every hold 2-5x once two GPUs of
# one host were busy (docs/benchmarks.md §8d), and the timers waited for them. A set that cannot be mapped is
# kept in its place as its error. Sets with output files are left to the comparison (read one at a time, as
# before: read ahead they would all sit in host memory at once), and so is every set when the comparison's
# token is not the one prepared here (this process started after the preparation, say): nothing prepared is
# never a forgery.
_prepared: dict[int, Any] = {}
_prepared_token: list[str] = []


def prepare_outputs(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    """Map the candidate's GPU outputs described in ``got`` (no GPU work; see ``_prepared``)."""
    from ksmith_triton.compare import load_outputs

    clock = StepClock()
    _prepared.clear()
    _prepared_token[:] = [str(command["token"])]
    directory = Path(command["directory"])
    for index, report in enumerate(command["got"]):
        outputs = report.get("outputs") if isinstance(report, dict) else None
        if not isinstance(outputs, list) or not all(isinstance(o, dict) and "ipc" in o for o in outputs):
            continue
        try:
            _prepared[index] = load_outputs(report, directory, device)
        except Exception as exc:  # noqa: BLE001 - the comparison reports it as the candidate's forgery
            _prepared[index] = exc
            break  # the comparison stops at the first unreadable set
    clock.lap("map outputs, unheld")
    return {"prepared": len(_prepared), "steps": clock.rounded()}


def release_outputs(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    """Let go of what ``prepare_outputs`` mapped (after the comparison's hold)."""
    clock = StepClock()
    released = len(_prepared)
    _prepared.clear()
    _prepared_token.clear()
    clock.lap("release outputs, unheld")
    return {"released": released, "steps": clock.rounded()}


def compare_with_reference(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    """Reference outputs for the seeds, kept here on the device, and the candidate's outputs compared with
    them: the candidate's process has reported and is idle or gone, and never sees these. With ``prepared``
    (the token ``prepare_outputs`` was given), the sets it mapped are used; the others are mapped or read
    here."""
    from ksmith_triton.compare import compare_outputs, degenerate_reasons, load_outputs, tolerances

    tolerance_for = tolerances(command["tolerances"])
    clock = StepClock()
    degenerate_key = json.dumps(command["tolerances"], sort_keys=True)
    checked = _degenerate_known.get(degenerate_key)
    if command.get("degenerate_check") and checked is not None and not command["got"]:
        return {"degenerate": checked[0], "comparisons": [], "meta": checked[1], "steps": clock.rounded()}
    model = make_model(problem.Model, problem, command["init_seed"], device)
    clock.lap("model")
    # Every output is kept only for a degenerate check still to run (it reads them all, some twice); the
    # comparisons read each once.
    expected = ReferenceOutputs(
        problem,
        model,
        command["seeds"],
        device,
        keep=bool(command.get("degenerate_check")) and checked is None,
    )
    meta = expected.meta
    clock.lap("reference outputs")
    degenerate: list[str] = []
    if command.get("degenerate_check"):
        if checked is None:
            degenerate = degenerate_reasons(expected, tolerance_for)
            _degenerate_known[degenerate_key] = (degenerate, meta)
        else:
            degenerate = checked[0]
    clock.lap("degenerate check")
    comparisons: list[dict[str, Any]] = []
    if not degenerate:
        directory = Path(command["directory"])
        # A streamed trial is compared alone: ``first`` / ``total`` say which of how many it is.
        label, count = command["label"], len(expected)
        prepared = command.get("prepared") is not None and [str(command["prepared"])] == _prepared_token
        first, total = int(command.get("first") or 0), int(command.get("total") or count)
        for index, report in enumerate(command["got"][:count]):
            try:
                clock.lap("compare")
                ready = _prepared.get(index) if prepared else None
                if isinstance(ready, BaseException):
                    raise ready
                got = ready if ready is not None else load_outputs(report, directory, device)
                clock.lap("load outputs")
            except Exception as exc:  # noqa: BLE001 - unreadable or inconsistent files are the candidate's doing
                comparisons.append(
                    {
                        "correct": False,
                        "reasons": [f"FORGED_OUTPUT: {label} {first + index}: {exc}"],
                        "mismatch": None,
                    }
                )
                break
            where = f"{label} {first + index} of {total}"
            reference = expected[index]
            clock.lap("reference outputs")
            result = compare_outputs(got, reference, device, tolerance_for, where)
            comparisons.append(
                {"correct": result.correct, "reasons": result.reasons, "mismatch": result.mismatch}
            )
            del got
            if not result.correct:
                break
    clock.lap("compare")
    return {"degenerate": degenerate, "comparisons": comparisons, "meta": meta, "steps": clock.rounded()}


class ReferenceOutputs:
    """The reference's outputs for each seed, by index: all kept once computed when ``keep`` and they fit in
    half the free memory, else computed again from the seed each time one is asked for (a problem whose outputs take
    gigabytes is judged with one reference output alive at a time, at the cost of recomputing it)."""

    def __init__(
        self, problem: types.ModuleType, model: Any, seeds: list[int], device: str, keep: bool = True
    ) -> None:
        self.problem, self.model, self.seeds, self.device = problem, model, list(seeds), device
        self.kept: dict[int, Any] = {}
        self.meta: dict[str, Any] = {}
        self.keep = keep
        if not self.seeds:
            return
        first = self._compute(0, with_meta=True)
        self.keep = keep and self.meta["output_bytes"] * len(self.seeds) <= free_bytes(device) // 2
        self.kept[0] = first  # the first is asked for next in every use (comparison, degenerate check)

    def __len__(self) -> int:
        return len(self.seeds)

    def __getitem__(self, index: int) -> Any:
        if index in self.kept:
            found = self.kept[index]
            if not self.keep:
                del self.kept[index]  # handed out once: later asks recompute it
            return found
        if not 0 <= index < len(self.seeds):
            raise IndexError(index)
        out = self._compute(index)
        if self.keep:
            self.kept[index] = out
        return out

    def _compute(self, index: int, with_meta: bool = False) -> Any:
        from ksmith_triton.compare import Outputs

        inputs = make_inputs(self.problem, self.seeds[index], self.device)
        if with_meta:
            out, flops, inputs = forward_with_flops(
                self.problem,
                self.model,
                inputs,
                lambda: make_inputs(self.problem, self.seeds[index], self.device),
            )
        else:
            out = plain_forward(self.model, inputs)
        structure, tensors = flatten_outputs(out)
        if with_meta:
            # input_bytes and output_bytes are also the driver's memory estimate (evaluator.py); the roofline
            # adds param_bytes to them (roofline.bytes_moved).
            self.meta = {
                "input_bytes": tensor_bytes(inputs),
                "output_bytes": tensor_bytes(tensors),
                "param_bytes": state_bytes(self.model),
                "compute_dtype": compute_dtype(inputs, self.model),
                **flops,
            }
        return Outputs(structure, [t.detach() for t in tensors])


# FLOPs counted in this process, by problem, then by the inputs' shapes and dtypes: every comparison computes
# its first reference output with meta, and the counter is needed for the first of them only.
_counted_flops: weakref.WeakKeyDictionary[types.ModuleType, dict[tuple[Any, ...], dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)


def forward_with_flops(
    problem: types.ModuleType, model: Any, inputs: list[Any], remake: Callable[[], list[Any]]
) -> tuple[Any, dict[str, Any], list[Any]]:
    """The forward's output, its FLOPs with where they came from (``flops_source``) and the inputs the output
    was computed from: the problem's own ``ksmith_flops(*inputs)`` where it has one (``"problem"``), else
    torch's count of this very forward (``"counted"``; no second forward) -- or none, with the reason, where
    counting failed (``"uncounted"``; the forward then runs plainly on fresh inputs from ``remake``)."""
    flops_fn = getattr(problem, "ksmith_flops", None)
    if callable(flops_fn):
        out = plain_forward(model, inputs)
        return out, {"flops": float(flops_fn(*inputs)), "flops_source": "problem"}, inputs
    known = _counted_flops.setdefault(problem, {})
    signature = input_signature(inputs)
    if signature in known:
        return plain_forward(model, inputs), known[signature], inputs
    out, known[signature], inputs = forward_counting_flops(model, inputs, remake)
    return out, known[signature], inputs


def plain_forward(model: Any, inputs: list[Any]) -> Any:
    import torch

    with torch.no_grad():
        return model(*inputs)


def forward_counting_flops(
    model: Any, inputs: list[Any], remake: Callable[[], list[Any]]
) -> tuple[Any, dict[str, Any], list[Any]]:
    """The forward run under ``FlopCounterMode``, which counts what it can price (matmuls, convolutions,
    attention) and runs every op as it is. Counting must never fail an evaluation: if the counted forward
    raises, the forward runs again plainly on fresh inputs (the failed one may have changed its inputs in
    place), and a model that fails there too fails as it always did."""
    import torch

    try:
        from torch.utils.flop_counter import FlopCounterMode

        with (
            torch.no_grad(),
            FlopCounterMode(display=False, custom_mapping=attention_flop_formulas()) as counter,
        ):
            out = model(*inputs)
        return out, {"flops": float(counter.get_total_flops()), "flops_source": "counted"}, inputs
    except Exception as exc:  # noqa: BLE001 - a model the counter cannot follow (torch.compile inside, ...)
        reason = f"{type(exc).__name__}: {exc}"[:300]
    fresh = remake()
    return (
        plain_forward(model, fresh),
        {"flops": 0.0, "flops_source": "uncounted", "flops_error": reason},
        fresh,
    )


# ATen's fused attention kernels and where each takes ``is_causal``. torch's counter prices the first three as
# full attention whatever the mask, and the CPU kernel not at all.
ATTENTION_OPS = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
)


def attention_flop_formulas() -> dict[Any, Any]:
    """``FlopCounterMode`` formulas for ATen's fused attention that price a causal mask: only the score entries
    on or below the diagonal (top-left aligned, as PyTorch's ``is_causal``) are computed."""
    import torch

    formulas = {}
    for name in ATTENTION_OPS:
        packet = getattr(torch.ops.aten, name, None)
        arguments = [a.name for a in packet.default._schema.arguments] if packet is not None else []
        if "is_causal" in arguments:
            formulas[packet] = _attention_formula(arguments.index("is_causal") - 3)
    return formulas


def _attention_formula(causal_at: int) -> Callable[..., int]:
    def formula(query: Any, key: Any, value: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
        *batch_q, s_q, d = query.shape
        s_k, d_v = key.shape[-2], value.shape[-1]
        rows = math.prod(batch_q)  # batch x heads (grouped key/value heads are broadcast to the query's)
        causal = kwargs.get("is_causal", args[causal_at] if len(args) > causal_at else False)
        # score entries computed per (batch, head): all, or under a causal mask row i's first min(i + 1, s_k)
        if causal:
            below = min(s_q, s_k)
            scores = below * (below + 1) // 2 + max(0, s_q - s_k) * s_k
        else:
            scores = s_q * s_k
        return 2 * rows * scores * (d + d_v)  # q @ k^T, then the weights @ v

    formula._get_raw = True  # called with the tensors and flags themselves, not their shapes
    return formula


def input_signature(inputs: list[Any]) -> tuple[Any, ...]:
    """What the FLOP count of a forward depends on: the inputs' shapes and dtypes, and plain values as they are."""
    import torch

    def signature_of(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return tuple(value.shape), str(value.dtype)
        return value if isinstance(value, (int, float, bool, str, type(None))) else type(value).__name__

    return tuple(signature_of(v) for v in inputs)


def model_state(model: Any) -> list[Any]:
    """The model's parameters and buffers (none for a model that is not an ``nn.Module``)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return []
    return [*model.parameters(), *model.buffers()]


def state_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers, each stretch of memory once: tied weights, or views of one
    storage, are one read for a kernel."""
    import torch

    spans = sorted(
        {
            (str(t.device), t.data_ptr(), t.data_ptr() + t.nbytes)
            for t in model_state(model)
            if t.layout is torch.strided and t.numel()
        }
    )
    total, reached = 0, {}
    for device, start, end in spans:  # the union of the spans, per device
        covered = max(start, reached.get(device, start))
        total += max(0, end - covered)
        reached[device] = max(end, reached.get(device, end))
    return total


def compute_dtype(inputs: list[Any], model: Any) -> str | None:
    """The dtype of the largest floating-point tensor among the inputs, parameters and buffers (``"float32"``,
    ``"bfloat16"``, ...): the precision the heavy work runs in, which picks the roofline's FLOP/s ceiling."""
    import torch

    floats = [
        t for t in [*inputs, *model_state(model)] if isinstance(t, torch.Tensor) and t.is_floating_point()
    ]
    if not floats:
        return None
    return str(max(floats, key=lambda t: t.numel()).dtype).removeprefix("torch.")


def free_bytes(device: str) -> int:
    """Free memory on the reference's device (on the CPU: treated as plenty; the host has its own limits)."""
    if device != "cuda":
        return 1 << 62
    import torch

    return int(torch.cuda.mem_get_info()[0])


_prepared_timing: dict[str, Any] = {}


def prepare_reference_timing(
    problem: types.ModuleType, device: str, command: dict[str, Any]
) -> dict[str, Any]:
    """Model, inputs and the torch.compile'd model, called once each: compilation and Inductor's autotuning
    happen here (the driver holds the GPU exclusively: autotuning benchmarks on it); ``time`` then measures
    what was prepared."""
    import torch

    while len(_prepared_timing) >= 4:  # prepared by requests that never came back to time it
        _prepared_timing.pop(next(iter(_prepared_timing)))
    model = make_model(problem.Model, problem, command["init_seed"], device)
    # As many of the input sets as fit in a quarter of the free memory beside the first (at least one): three
    # sets of a problem's 8 GiB inputs ran the GPU out of memory beside the candidate's process.
    input_sets = [make_inputs(problem, command["seeds"][0], device)]
    per_set = max(1, tensor_bytes(input_sets[0]))
    room = free_bytes(device) // 4
    for seed in command["seeds"][1:]:
        if per_set * (len(input_sets) + 1) > room:
            break
        input_sets.append(make_inputs(problem, seed, device))
    compiled, compile_error, autotune = None, None, None
    with torch.no_grad():
        model(*input_sets[0])
        if command.get("compile"):
            # The first call autotunes; measured by ksmith's loop, the pick does not vary between machines.
            with steady_autotuning() as autotune:
                try:
                    compiled = torch.compile(model)
                    compiled(*input_sets[0])
                except Exception as exc:  # noqa: BLE001 - no compile baseline is a missing number, not a failure
                    compiled, compile_error = None, format_error(exc)[-1500:]
    if device == "cuda":
        torch.cuda.synchronize()
    _prepared_timing[str(command["token"])] = {
        "model": model,
        "compiled": compiled,
        "compile_error": compile_error,
        "autotune": autotune,
        "inputs": input_sets,
    }
    return {"compile_error": compile_error}


REFERENCE_BLOCKS = 3  # eager and torch.compile are timed in this many interleaved blocks each


def reference_timing(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    """Eager and torch.compile, each timed in :data:`REFERENCE_BLOCKS` blocks, interleaved (eager, compile,
    eager, ...): the medians of the blocks show how steady each reference is (their spread)."""
    import torch

    from ksmith_triton.timing import (
        MIN_TIMED_CALLS,
        STAGING_COPIES,
        TIMED_BUDGET_MS,
        reference_timers,
        time_calls,
    )

    token = str(command["token"])
    if token not in _prepared_timing:
        prepare_reference_timing(problem, device, command)
    prepared = _prepared_timing.pop(token)
    timers = reference_timers(device)
    trials, warmup = int(command["trials"]), int(command["warmup"])
    per_block = max(3, -(-trials // 2))
    # Slow references: each block about a third of the candidate's timing budget, so each reference as a whole
    # gets about what the candidate gets, and at least as many calls.
    block_ms, least = TIMED_BUDGET_MS / REFERENCE_BLOCKS, -(-MIN_TIMED_CALLS // REFERENCE_BLOCKS)
    result: dict[str, Any] = {
        "eager_ms": [],
        "eager_blocks": [],
        "eager_copies": [],
        "compile_ms": None,
        "compile_blocks": None,
        "compile_copies": None,
        "compile_error": prepared["compile_error"],
        "compile_autotune": prepared["autotune"],
        "host_ms": {},
    }
    variants = [("eager", prepared["model"])]
    if prepared["compiled"] is not None:
        variants.append(("compile", prepared["compiled"]))
        result["compile_ms"], result["compile_blocks"], result["compile_copies"] = [], [], []
    for _ in range(REFERENCE_BLOCKS):
        for name, fn in list(variants):
            try:
                with torch.no_grad():
                    timed = time_calls(
                        device,
                        fn,
                        prepared["inputs"],
                        timers,
                        per_block,
                        max(warmup, 3),
                        budget_ms=block_ms,
                        least=least,
                    )
            except Exception as exc:  # noqa: BLE001 - a compiled reference that fails is a missing number
                if name != "compile":
                    raise
                result["compile_error"] = format_error(exc)[-1500:]
                result["compile_ms"] = result["compile_blocks"] = result["compile_copies"] = None
                variants = [v for v in variants if v[0] != "compile"]
                continue
            result[f"{name}_ms"].extend(timed.samples_ms)
            result[f"{name}_blocks"].append(timed.samples_ms)
            # Each block stages its inputs anew: a (block, copy) pair is one placement in memory.
            block = len(result[f"{name}_blocks"]) - 1
            result[f"{name}_copies"].extend(block * STAGING_COPIES + c for c in timed.copies)
            result["host_ms"].setdefault(name, []).extend(timed.host_ms)
    for name, values in list(result["host_ms"].items()):
        ordered = sorted(values)
        result["host_ms"][name] = ordered[len(ordered) // 2] if ordered else None
    return result


def measure_ceilings(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    """Achievable DRAM bandwidth (a large device-to-device copy) and matmul FLOP/s: bf16 (``flops_s``, the
    ceiling of half-precision problems) and fp32 (``flops_s_fp32``): the faster of SGEMM and the TF32 tensor
    cores. The evaluator accepts TF32 products wherever the output stays within the problem's tolerance (and
    tf32x3, three of them, keeps fp32 accuracy at a third of that rate), so a lower ceiling would let an
    accepted kernel run past its roofline and stop a run there with most of the speed still to find."""
    import torch

    from ksmith_triton.timing import reference_timers, time_calls

    timers = reference_timers(device)
    n_bytes = 1 << 30
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    copy_ms = median(time_calls(device, copy, [[]], timers, 20, 3).samples_ms)
    src = dst = None  # 2 GiB back before the matmuls
    bf16 = matmul_flops_s(device, timers, torch.bfloat16)
    fp32 = matmul_flops_s(device, timers, torch.float32, allow_tf32=False)
    tf32 = matmul_flops_s(device, timers, torch.float32, allow_tf32=True)
    return {
        "bandwidth_bytes_s": 2 * n_bytes / (copy_ms * 1e-3),
        "flops_s": bf16,
        "flops_s_fp32": max(fp32, tf32),
    }


MATMUL_SIZE = 8192


def matmul_flops_s(device: str, timers: dict[str, Any], dtype: Any, allow_tf32: bool = False) -> float:
    """FLOP/s of a square ``MATMUL_SIZE`` matmul in ``dtype``, fp32 in full precision unless ``allow_tf32``;
    the process's TF32 switch is put back afterwards (its reference outputs are fp32: ``fp32_means_fp32``)."""
    import torch

    from ksmith_triton.timing import time_calls

    size = MATMUL_SIZE
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    out = torch.empty(size, size, device="cuda", dtype=dtype)

    def matmul() -> None:
        torch.matmul(a, b, out=out)

    with matmul_tf32(allow_tf32):
        ms = median(time_calls(device, matmul, [[]], timers, 20, 3).samples_ms)
    return 2 * size**3 / (ms * 1e-3)


@contextlib.contextmanager
def matmul_tf32(enabled: bool) -> Iterator[None]:
    """fp32 matmuls in TF32 (or not) inside the block, the process's setting put back after it. The setting
    is read through ``fp32_precision`` where torch has it: once a problem has set that (or
    ``set_float32_matmul_precision``), reading the legacy ``allow_tf32`` raises ("mix of the legacy and new
    APIs"). It is written through the legacy setter, which sets both switches alike."""
    import torch

    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        before = matmul.fp32_precision == "tf32"
    else:  # torch before 2.9
        before = bool(matmul.allow_tf32)
    matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        matmul.allow_tf32 = before


def median(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]
