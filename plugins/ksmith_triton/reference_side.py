"""The reference's side of the trust boundary: the long-lived reference process of one problem.

``python -m ksmith_triton.worker reference RESULT_FD`` runs ``main`` here: a server that computes reference
outputs for seeds it is sent and compares a candidate's outputs with them on the device
(``compare_with_reference``), times the eager and torch.compile references (``prepare_reference_timing``,
``reference_timing``), measures the GPU's ceilings (``measure_ceilings``) and reports its device and versions
(``reference_info``). It never runs candidate code, and nothing here imports ``candidate_side``: the
candidate's outputs arrive as raw bytes or CUDA IPC handles, read by ``compare.py``.
"""

from __future__ import annotations

import resource
import types
from pathlib import Path
from typing import Any

from ksmith_triton.child_common import (
    Channel,
    flatten_outputs,
    format_error,
    load_problem_module,
    make_inputs,
    make_model,
    read_command,
    serve_job,
    tensor_bytes,
)


def main(argv: list[str]) -> int:
    """``RESULT_FD``: wait for the job (the problem), then answer commands until told to exit."""
    return serve_job(int(argv[0]), run_reference)


def run_reference(channel: Channel, job: dict[str, Any]) -> int:
    """Build the problem once, then one handler per command; each reports back under the command's name."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    import torch

    device = job["device"]
    problem = load_problem_module(job["problem_source"], job.get("small_sizes"))
    if device == "cuda":
        torch.cuda.init()
    handlers = {
        "compare": compare_with_reference,
        "prepare_time": prepare_reference_timing,
        "time": reference_timing,
        "ceilings": measure_ceilings,
        "info": reference_info,
    }
    while True:
        command = read_command()
        op = command.get("op")
        if op == "exit" or op not in handlers:
            return 0
        try:
            channel.send(op, **handlers[op](problem, device, command))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
            channel.send("error", reason=f"{type(exc).__name__}: {exc}", error=format_error(exc))
        if device == "cuda":
            # Many of these processes live side by side (one per problem): none keeps its peak's cache.
            torch.cuda.empty_cache()


def reference_info(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    import platform

    import torch
    import triton

    name = torch.cuda.get_device_name() if device == "cuda" else f"cpu {platform.machine()}"
    return {"device_name": name, "torch": torch.__version__, "triton": triton.__version__}


def compare_with_reference(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    """Reference outputs for the seeds, kept here on the device, and the candidate's outputs compared with
    them: the candidate's process has reported and is idle or gone, and never sees these."""
    import torch

    from ksmith_triton.compare import Outputs, compare_outputs, degenerate_reasons, load_outputs, tolerances

    tolerance_for = tolerances(command["tolerances"])
    model = make_model(problem.Model, problem, command["init_seed"], device)
    expected: list[Outputs] = []
    meta: dict[str, Any] = {}
    for index, seed in enumerate(command["seeds"]):
        inputs = make_inputs(problem, seed, device)
        with torch.no_grad():
            out = model(*inputs)
        structure, tensors = flatten_outputs(out)
        expected.append(Outputs(structure, [t.detach() for t in tensors]))
        if index == 0:
            flops_fn = getattr(problem, "ksmith_flops", None)
            meta = {
                "input_bytes": tensor_bytes(inputs),
                "output_bytes": tensor_bytes(tensors),
                "flops": float(flops_fn(*inputs)) if callable(flops_fn) else 0.0,
            }
        del inputs, out
    degenerate = degenerate_reasons(expected, tolerance_for) if command.get("degenerate_check") else []
    comparisons: list[dict[str, Any]] = []
    if not degenerate:
        directory = Path(command["directory"])
        label, count = command["label"], len(expected)
        for index, (report, reference) in enumerate(zip(command["got"], expected)):
            try:
                got = load_outputs(report, directory, device)
            except Exception as exc:  # noqa: BLE001 - unreadable or inconsistent files are the candidate's doing
                comparisons.append(
                    {
                        "correct": False,
                        "reasons": [f"FORGED_OUTPUT: {label} {index}: {exc}"],
                        "mismatch": None,
                    }
                )
                break
            result = compare_outputs(got, reference, device, tolerance_for, f"{label} {index} of {count}")
            comparisons.append(
                {"correct": result.correct, "reasons": result.reasons, "mismatch": result.mismatch}
            )
            del got
            if not result.correct:
                break
    return {"degenerate": degenerate, "comparisons": comparisons, "meta": meta}


_prepared_timing: dict[str, Any] = {}


def prepare_reference_timing(
    problem: types.ModuleType, device: str, command: dict[str, Any]
) -> dict[str, Any]:
    """Model, inputs and the torch.compile'd model, called once each: compilation (seconds of CPU) happens
    here, under the shared lock rather than the exclusive timing lock; ``time`` then measures what was
    prepared."""
    import torch

    while len(_prepared_timing) >= 4:  # prepared by requests that never came back to time it
        _prepared_timing.pop(next(iter(_prepared_timing)))
    model = make_model(problem.Model, problem, command["init_seed"], device)
    input_sets = [make_inputs(problem, seed, device) for seed in command["seeds"]]
    compiled, compile_error = None, None
    with torch.no_grad():
        model(*input_sets[0])
        if command.get("compile"):
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
        "inputs": input_sets,
    }
    return {"compile_error": compile_error}


def reference_timing(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    import torch

    from ksmith_triton.timing import reference_timers, time_calls

    token = str(command["token"])
    if token not in _prepared_timing:
        prepare_reference_timing(problem, device, command)
    prepared = _prepared_timing.pop(token)
    timers = reference_timers(device)
    trials, warmup = int(command["trials"]), int(command["warmup"])
    with torch.no_grad():
        eager, _ = time_calls(device, prepared["model"], prepared["inputs"], timers, trials, warmup)
    result: dict[str, Any] = {
        "eager_ms": eager,
        "compile_ms": None,
        "compile_error": prepared["compile_error"],
    }
    if prepared["compiled"] is not None:
        try:
            with torch.no_grad():
                result["compile_ms"], _ = time_calls(
                    device, prepared["compiled"], prepared["inputs"], timers, trials, max(warmup, 3)
                )
        except Exception as exc:  # noqa: BLE001
            result["compile_error"] = format_error(exc)[-1500:]
    return result


def measure_ceilings(problem: types.ModuleType, device: str, command: dict[str, Any]) -> dict[str, Any]:
    """Achievable DRAM bandwidth (a large device-to-device copy) and half-precision matmul FLOP/s."""
    import torch

    from ksmith_triton.timing import reference_timers, time_calls

    timers = reference_timers(device)
    n_bytes = 1 << 30
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    copy_ms, _ = time_calls(device, copy, [[]], timers, 20, 3)
    src = dst = None  # 2 GiB back before the matmul
    size = 8192
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)

    def matmul() -> None:
        torch.matmul(a, b, out=out)

    mm_ms, _ = time_calls(device, matmul, [[]], timers, 20, 3)
    copy_med = sorted(copy_ms)[len(copy_ms) // 2]
    mm_med = sorted(mm_ms)[len(mm_ms) // 2]
    return {"bandwidth_bytes_s": 2 * n_bytes / (copy_med * 1e-3), "flops_s": 2 * size**3 / (mm_med * 1e-3)}
