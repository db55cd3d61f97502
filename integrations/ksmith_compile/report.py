"""``ksmith compile-report``: which library entries the backend swaps into a model, and why the others not."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from ksmith_core.errors import ConfigError, ProblemError


def load_model_file(path: Path) -> Any:
    """A KernelBench-style model file (``Model``, ``get_inputs``, ``get_init_inputs``) as a module."""
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"{path}: no such model file")
    spec = importlib.util.spec_from_file_location(f"ksmith_model_{abs(hash(str(path.resolve())))}", path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ProblemError(f"{path}: fails to import: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemError(f"{path}: defines no {', '.join(missing)} (KernelBench format)")
    return module


def _median_ms(fn: Any, inputs: list[Any], device: str) -> float:
    import statistics
    import time

    import torch

    reps, warmup = (20, 3) if device == "cuda" else (3, 1)  # interpreted CPU times only show the path works

    for _ in range(warmup):
        fn(*inputs)
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn(*inputs)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def compile_report(
    model_file: Path, library: Path, device: str = "cpu", timed: bool = False
) -> dict[str, Any]:
    """Compile the model with the backend and the given library; one record per region, and the output check.

    Regions are matches of library entries in the model's Dynamo graphs (swapped or not, why), entries that
    match nowhere, and entries the library could not load.
    """
    import torch

    from .backend import Recorder
    from .library import library_dirs

    for directory in library_dirs(library):
        if not directory.is_dir():
            raise ConfigError(f"--library {directory} is not a directory")
    module = load_model_file(model_file)
    try:
        torch.manual_seed(0)
        with torch.device(device):
            model = module.Model(*module.get_init_inputs()).eval()
            inputs = list(module.get_inputs())
        model = model.to(device)
        inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs]
    except Exception as exc:
        raise ProblemError(
            f"{model_file}: building the model or its inputs failed: {exc}".splitlines()[0]
        ) from exc
    with torch.no_grad():
        want = model(*inputs)
        torch._dynamo.reset()
        with Recorder() as recorder:
            compiled = torch.compile(model, backend="kernelsmith", options={"library": str(library)})
            got = compiled(*inputs)
    regions = [r.to_dict() for r in recorder.regions]
    lib = recorder.library
    for name, reason in lib.skipped.items() if lib is not None else ():
        regions.append(
            {
                "region": name,
                "entry": name,
                "swapped": False,
                "reason": f"not loaded: {reason}",
                "graph": None,
            }
        )
    timings = None
    if timed:  # same default mode for both compiled models; on CPU the interpreter's times, so marked
        with torch.no_grad():
            timings = {
                "eager": _median_ms(model, inputs, device),
                "kernelsmith": _median_ms(compiled, inputs, device),
            }
            torch._dynamo.reset()
            timings["inductor"] = _median_ms(torch.compile(model, backend="inductor"), inputs, device)
        timings["interpreted"] = device == "cpu"
    diff = None
    if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor) and got.shape == want.shape:
        diff = (got.float() - want.float()).abs().max().item()
    return {
        "model": str(model_file),
        "library": str(library),
        "graphs": recorder.graphs,
        "swapped": sum(1 for r in regions if r["swapped"]),
        "max_abs_diff_vs_eager": diff,
        "timings_ms": timings,
        "regions": regions,
    }
