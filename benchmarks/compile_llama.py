"""Eager vs inductor vs kernelsmith on a Llama-style model, with a library evolved for its harvested regions.

For each shape (prefill B x S, decode B x 1; no KV cache), the loop of docs/compile.md:

1. write the model as a KernelBench file (transformers ``LlamaModel`` from a config, random weights, bf16);
2. ``ksmith harvest`` it at that shape;
3. ``ksmith bench --evolve --seed-from inductor`` every harvested problem;
4. ``ksmith export`` every run with an accepted kernel into one library;
5. time the model's forward: eager, ``backend="inductor"`` and ``backend="kernelsmith"``, each in the default
   mode and in ``reduce-overhead`` mode (same mode compared with same mode), and record which regions were
   swapped.

Results: OUT/results.json (on a GPU with each reduce-overhead variant's kernels: their GPU time per forward, by
kernel) and a markdown table on stdout. Steps 2-4 are skipped for a shape whose library
exists already (``--reuse``), so the timing can be repeated alone.

GPU (the numbers for docs/benchmarks.md):
    python benchmarks/compile_llama.py --out benchmarks/results/<gpu-date>/compile_llama --budget 40
Smoke test of the script on CPU (Triton interpreter; its timings mean nothing):
    TRITON_INTERPRET=1 python benchmarks/compile_llama.py --device cpu --tiny --budget 2 --shapes 2x8 --dtype float32 \
        --out /tmp/cl
(float32: the CPU interpreter of Triton 3.9 multiplies bf16 tiles in ``tl.dot`` wrongly, so on CPU every bf16 GEMM
candidate is judged incorrect; fp16 and fp32 are right.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODEL_FILE = '''"""Llama-style model from a config (random weights, no download), KernelBench format; written by
benchmarks/compile_llama.py."""

import torch
import torch.nn as nn
from transformers import LlamaConfig, LlamaModel

CONFIG = {config!r}
DTYPE = torch.{dtype}
batch_size = {batch}
seq_len = {seq}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = LlamaModel(LlamaConfig(**CONFIG)).to(DTYPE)

    def forward(self, input_ids):
        return self.model(input_ids, use_cache=False).last_hidden_state


def get_inputs():
    return [torch.randint(0, CONFIG["vocab_size"], (batch_size, seq_len))]


def get_init_inputs():
    return []
'''

FULL = dict(
    vocab_size=32000,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=4,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
)
TINY = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def ksmith(*args: object, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run a ksmith command; past ``timeout`` seconds its whole process group is stopped (a bench resumes)."""
    cmd = [sys.executable, "-c", "from ksmith_core.cli import main; main()", *map(str, args)]
    print("+ ksmith", " ".join(map(str, args)), flush=True)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        err += f"\nstopped after {timeout:.0f} s (rerun with the same --out to resume)"
        print(f"  stopped after {timeout:.0f} s; evolved so far goes into the library", flush=True)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def print_time_shares(summary: dict, top: int = 12) -> None:
    """Where the Inductor-compiled model's kernel time goes, by harvested problem (harvest's ``time_share``)."""
    measured = summary.get("time_share")
    if not measured:
        return
    if "error" in measured:
        print(f"  time shares not measured: {measured['error']}", flush=True)
        return
    print(
        f"  Inductor-compiled forward: {measured['launches_ms']:.4f} ms of launches ({measured['what']}),"
        f" {measured['unattributed_ms']:.4f} ms in none of the problems; the problems' shares (they overlap):",
        flush=True,
    )
    ranked = sorted(summary["problems"], key=lambda p: -(p["time_share"] or 0))
    for problem in ranked[:top]:
        print(f"    {100 * (problem['time_share'] or 0):5.1f} %  {problem['problem']}", flush=True)


def build_library(
    model_file: Path,
    work: Path,
    device: str,
    budget: int,
    parallel: int,
    bench_seconds: float | None = None,
    only: list[str] | None = None,
) -> Path:
    problems, bench_out, library = work / "problems", work / "bench", work / "library"
    if not (problems.is_dir() and any(problems.glob("*.py"))):  # harvested already: a resumed bench
        proc = ksmith("harvest", model_file, "-o", problems, "--device", device, "--json")
        if proc.returncode != 0:
            raise SystemExit(f"harvest failed: {proc.stderr.strip()}")
        print_time_shares(json.loads(proc.stdout))
    benched = problems
    if only:  # a folder of its own holding the chosen problems and their seeds
        benched = work / "problems_only"
        benched.mkdir(exist_ok=True)
        for entry in json.loads((problems / "harvest.json").read_text())["problems"]:
            if any(re.search(pattern, entry["problem"]) for pattern in only):
                for name in (entry["file"], entry["seed"]):
                    if name:
                        (benched / name).write_text((problems / name).read_text())
        if not any(benched.glob("*.py")):
            raise SystemExit(f"no harvested problem's name holds any of {only}")
        # The bench evolves the problems largest share of the model's time first (harvest's time shares).
        (benched / "harvest.json").write_text((problems / "harvest.json").read_text())
    proc = ksmith(
        "bench", benched, "--evolve", "--seed-from", "inductor", "--budget", budget,
        "--parallel", parallel, "--device", device, "-o", bench_out, "--json", timeout=bench_seconds,
    )  # fmt: skip
    (work / "bench.log").write_text(proc.stdout + proc.stderr)
    library.mkdir(parents=True, exist_ok=True)
    for run in sorted((bench_out / "runs").glob("*")):
        proc = ksmith("export", run, "--target", "library", "-o", library)
        if proc.returncode != 0:  # no accepted kernel for that region
            print(f"  not exported: {run.name}: {proc.stderr.strip()}", flush=True)
    return library


def time_forward(fn, inputs, device: str, warmup: int, reps: int, calls: int = 20) -> float:
    """Milliseconds per forward: the median over ``reps`` of ``calls`` back-to-back forwards between two CUDA
    events, as a serving loop runs them (host time shows only where the host, not the GPU, is the bottleneck;
    one synchronised call per sample would add the launch latency and its jitter to every sample)."""
    import torch

    for _ in range(warmup):
        fn(*inputs)
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / calls)
        else:
            t0 = time.perf_counter()
            fn(*inputs)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def kernel_profile(fn, inputs, forwards: int = 20) -> dict:
    """Each GPU kernel's time per forward (torch.profiler, CUDA activity; under CUDA graphs too): by kernel name,
    how many launches a forward and their milliseconds, and their sum."""
    from collections import defaultdict

    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(forwards):
            fn(*inputs)
        torch.cuda.synchronize()
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            by_name[event.name][0] += 1 / forwards
            by_name[event.name][1] += event.time_range.elapsed_us() / 1000 / forwards
    kernels = sorted(([name, n, ms] for name, (n, ms) in by_name.items()), key=lambda k: -k[2])
    return {"kernel_ms": sum(k[2] for k in kernels), "kernels": kernels}


def print_kernel_profile(key: str, found: dict, forward_ms: float, top: int = 12) -> None:
    print(
        f"  {key}: kernels {found['kernel_ms']:.4f} ms of a {forward_ms:.4f} ms forward"
        f" ({100 * found['kernel_ms'] / forward_ms:.0f} %); the largest (launches a forward, ms):",
        flush=True,
    )
    for name, launches, ms in found["kernels"][:top]:
        print(f"    {ms:.4f}  x{launches:g}  {name[:100]}", flush=True)


def versions(device: str) -> dict:
    """torch's version and, on a GPU, its name: what every results file records."""
    try:
        import torch

        found: dict = {"versions": {"torch": torch.__version__}}
        if device == "cuda":
            found["gpu"] = torch.cuda.get_device_name()
        return found
    except Exception:  # noqa: BLE001 - versions are a courtesy
        return {}


VARIANTS = [
    (backend, mode) for mode in ("default", "reduce-overhead") for backend in ("inductor", "kernelsmith")
]


def measure(
    model_file: Path,
    library: Path,
    device: str,
    warmup: int,
    reps: int,
    rounds: int = 3,
    calls: int = 20,
    pdl: bool = False,
) -> dict:
    """Eager and the four compiled variants, timed in ``rounds`` interleaved rounds (each variant on its own
    copy of the model, so all stay compiled): per variant the median over rounds and the rounds' spread."""
    import copy

    import torch

    import ksmith_compile
    from ksmith_compile.report import load_model_file

    module = load_model_file(model_file)
    torch.manual_seed(0)
    with torch.device(device):
        model = module.Model().eval()
        inputs = list(module.get_inputs())
    os.environ["KSMITH_LIBRARY"] = str(library)  # torch.compile takes no options= together with mode=
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    results: dict = {"regions": None, "rounds": rounds}
    fns = {"eager": model}
    with torch.no_grad():
        want = model(*inputs)
        torch._dynamo.reset()
        for backend, mode in VARIANTS + (PDL_VARIANTS if pdl else []):
            key = f"{backend}_{mode}"
            with ksmith_compile.Recorder() as recorder, _pdl(backend, mode):
                fns[key] = torch.compile(
                    copy.deepcopy(model), backend=backend, mode=mode.removesuffix("+pdl")
                )
                got = fns[key](*inputs)  # compiles (the backend reads KSMITH_PDL, Inductor its config, now)
            results[f"{key}_max_abs_diff"] = (got.float() - want.float()).abs().max().item()
            if backend == "kernelsmith" and mode == "default":
                results["regions"] = [r.to_dict() for r in recorder.regions]
        per_round: dict[str, list[float]] = {key: [] for key in fns}
        for _ in range(rounds):
            for key, fn in fns.items():
                per_round[key].append(time_forward(fn, inputs, device, warmup, reps, calls))
    for key, times in per_round.items():
        results[f"{key}_ms"] = statistics.median(times)
        results[f"{key}_rounds_ms"] = times
        results[f"{key}_spread"] = (max(times) - min(times)) / statistics.median(times)
    if device == "cuda":  # where each forward's GPU time goes, kernel by kernel
        with torch.no_grad():
            for key in [k for k in fns if "reduce-overhead" in k]:
                found = kernel_profile(fns[key], inputs)
                if found["kernel_ms"] < 0.2 * results[f"{key}_ms"]:  # the graph's kernels not seen one by one
                    found = kernel_profile(fns[key.split("_")[0] + "_default"], inputs)
                    found["profiled"] = "default mode (the same kernels, launched without CUDA graphs)"
                results[f"{key}_kernels"] = found
                print_kernel_profile(key, found, results[f"{key}_ms"])
    results["swapped"] = sum(1 for r in results["regions"] or () if r["swapped"])
    results["inlined"] = sum(
        1 for r in results["regions"] or () if r["swapped"] and "_inline" in r["reason"].split(" (")[0]
    )
    return results


# With --pdl: both compilers again under CUDA graphs with programmatic dependent launch (the backend's ``pdl``
# option, which also turns on Inductor's; Inductor's own ``triton.enable_pdl`` for inductor).
PDL_VARIANTS = [("inductor", "reduce-overhead+pdl"), ("kernelsmith", "reduce-overhead+pdl")]


@contextlib.contextmanager
def _pdl(backend: str, mode: str):
    if not mode.endswith("+pdl"):
        yield
    elif backend == "kernelsmith":
        os.environ["KSMITH_PDL"] = "1"
        try:
            yield
        finally:
            del os.environ["KSMITH_PDL"]
    else:
        import torch

        with torch._inductor.config.patch({"triton.enable_pdl": True}):
            yield


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--shapes", nargs="+", default=["1x2048", "8x1", "64x1"], help="BATCHxSEQ")
    parser.add_argument("--budget", type=int, default=40, help="evaluations per harvested problem")
    parser.add_argument("--parallel", type=int, default=8, help="evaluations at once in the bench")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--tiny", action="store_true", help="a one-layer hidden-64 model (smoke test)")
    parser.add_argument("--layers", type=int, default=None, help="override num_hidden_layers (1: one layer)")
    parser.add_argument("--reuse", action="store_true", help="keep a shape's library if it exists")
    parser.add_argument(
        "--bench-seconds", type=float, default=None,
        help="stop the bench after this long and time the model with the regions evolved so far (resumes)",
    )  # fmt: skip
    parser.add_argument(
        "--only", nargs="+", default=None,
        help="evolve only the harvested problems whose name matches one of these regular expressions "
        "(e.g. _matmuls_ for the groups of projections)",
    )  # fmt: skip
    parser.add_argument(
        "--pdl", action="store_true",
        help="also time both compilers under CUDA graphs with programmatic dependent launch (Hopper+)",
    )  # fmt: skip
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--reps", type=int, default=20, help="samples of --calls back-to-back forwards")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (spread reported)")
    parser.add_argument(
        "--split-fusions", action="store_true",
        help="also swap norms Inductor would fuse with a neighbour (the backend's split_fusions option)",
    )  # fmt: skip
    args = parser.parse_args()

    if args.split_fusions:
        os.environ["KSMITH_SPLIT_FUSIONS"] = "1"  # torch.compile takes no options= together with mode=
    config = dict(TINY if args.tiny else FULL)
    if args.layers:
        config["num_hidden_layers"] = args.layers
    args.out.mkdir(parents=True, exist_ok=True)
    all_results = {
        "config": config, "dtype": args.dtype, "budget": args.budget, "split_fusions": args.split_fusions,
        "only": args.only,
        "shapes": {},
    }  # fmt: skip
    for shape in args.shapes:
        batch, seq = (int(v) for v in shape.split("x"))
        work = args.out / f"b{batch}_s{seq}"
        work.mkdir(parents=True, exist_ok=True)
        model_file = work / "model.py"
        model_file.write_text(MODEL_FILE.format(config=config, dtype=args.dtype, batch=batch, seq=seq))
        library = work / "library"
        if not (args.reuse and library.is_dir()):
            library = build_library(
                model_file, work, args.device, args.budget, args.parallel, args.bench_seconds, args.only
            )
        result = measure(
            model_file, library, args.device, args.warmup, args.reps, args.rounds, args.calls, args.pdl
        )
        all_results["shapes"][shape] = result
        (args.out / "results.json").write_text(json.dumps(all_results, indent=2))

    all_results.update(versions(args.device))
    (args.out / "results.json").write_text(json.dumps(all_results, indent=2))
    print("ms: median of the rounds' medians (spread: max-min over median)")
    print(
        "| shape | eager | inductor | kernelsmith | speedup | inductor RO | kernelsmith RO | speedup RO "
        "| swapped (inlined) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")

    def cell(r: dict, key: str) -> str:
        return f"{r[key + '_ms']:.3f} (±{100 * r.get(key + '_spread', 0) / 2:.1f}%)"

    for shape, r in all_results["shapes"].items():
        d = r["inductor_default_ms"] / r["kernelsmith_default_ms"]
        ro = r["inductor_reduce-overhead_ms"] / r["kernelsmith_reduce-overhead_ms"]
        print(
            f"| {shape} | {cell(r, 'eager')} | {cell(r, 'inductor_default')} | {cell(r, 'kernelsmith_default')} "
            f"| {d:.3f}x | {cell(r, 'inductor_reduce-overhead')} | {cell(r, 'kernelsmith_reduce-overhead')} "
            f"| {ro:.3f}x | {r['swapped']} ({r.get('inlined', 0)}) |"
        )
        if "kernelsmith_reduce-overhead+pdl_ms" in r:
            print(
                f"  with PDL: inductor RO {cell(r, 'inductor_reduce-overhead+pdl')}, kernelsmith RO "
                f"{cell(r, 'kernelsmith_reduce-overhead+pdl')}; kernelsmith RO + PDL over inductor RO "
                f"{r['inductor_reduce-overhead_ms'] / r['kernelsmith_reduce-overhead+pdl_ms']:.3f}x, over "
                f"inductor RO + PDL {r['inductor_reduce-overhead+pdl_ms'] / r['kernelsmith_reduce-overhead+pdl_ms']:.3f}x"
            )


if __name__ == "__main__":
    main()
