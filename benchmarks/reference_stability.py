"""Why does a torch.compile reference move between runs? Measure it (GPU only; numbers go to docs/evaluation.md).

For each problem: the eager reference, the torch.compile reference and the shipped seed kernel are built once
in this process (full size, the problem's own inputs) and timed with ksmith's own timing loop
(``ksmith_triton.timing.time_calls``: CUDA events, L2 flush, warm-up, median of ``--trials``), in blocks that
interleave the three, in two GPU states. The loop is whatever this checkout's ``timing.py`` is: run at the
commit before the GPU spin was added, it measured host launch overhead with the GPU time
(``results/h100-2026-11-22/reference_stability_before.json``); since, it measures the GPU's time and records
the host's beside it (``host_median_ms``).

* ``idle``  -- after a few seconds of an idle GPU;
* ``hot``   -- right after ``--heat-s`` seconds of a second process running large bf16 matmuls back to back
  (what a GPU looks like after other evaluations' correctness trials in an eight-way bench).

While each block runs, ``nvidia-smi`` samples the SM clock, power draw, temperature and clock-event reasons,
so a change in a median can be put beside a change in the clock. The kernels each reference launches are
listed once (torch.profiler), with the matmul precision settings in force.

    python benchmarks/reference_stability.py --out ref_stability.json

Prints a table last: per problem, state and variant, the median of the block medians, their spread
(max/min - 1) and the mean SM clock; then the ratio candidate/compile per state.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE.parent / "plugins" / "ksmith_problems" / "problems"
DEFAULT = [
    "matmul",
    "matmul_bias_relu",
    "matmul_gelu",
    "bmm",
    "conv2d_bias_relu",
    "attention",
    "causal_attention",
    "softmax",
    "layernorm",
]
QUERY = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"

HEATER = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


class ClockSampler:
    """``nvidia-smi`` sampling in the background; ``window()`` returns the samples taken since ``mark()``."""

    def __init__(self, interval_ms: int = 50) -> None:
        self.samples: list[tuple[float, list[str]]] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"-lms={interval_ms}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self._mark = time.monotonic()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.samples.append((time.monotonic(), [x.strip() for x in line.split(",")]))

    def mark(self) -> None:
        self._mark = time.monotonic()

    def window(self) -> dict[str, Any]:
        rows = [values for at, values in self.samples if at >= self._mark]

        def mean(index: int) -> float | None:
            numbers = []
            for row in rows:
                try:
                    numbers.append(float(row[index]))
                except (IndexError, ValueError):
                    pass
            return round(statistics.fmean(numbers), 1) if numbers else None

        reasons = sorted({row[4] for row in rows if len(row) > 4})
        return {
            "samples": len(rows),
            "sm_mhz": mean(0),
            "mem_mhz": mean(1),
            "power_w": mean(2),
            "temp_c": mean(3),
            "event_reasons": reasons,
        }

    def close(self) -> None:
        self.proc.kill()


def load_module(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernels_of(fn, inputs) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*inputs)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})[:8]


def heat(seconds: float) -> None:
    subprocess.run([sys.executable, "-c", HEATER, str(seconds)], check=True)


def measure_problem(name: str, args: argparse.Namespace, sampler: ClockSampler) -> dict[str, Any]:
    import torch

    from ksmith_triton.child_common import make_inputs, make_model
    from ksmith_triton.timing import reference_timers, time_calls

    path = next(PROBLEMS.rglob(f"{name}.py"))
    problem = load_module(path, f"problem_{name}")
    seed_module = load_module(path.with_name(f"{name}.seed.py"), f"seed_{name}")
    model = make_model(problem.Model, problem, 1234, "cuda")
    candidate = make_model(seed_module.ModelNew, problem, 1234, "cuda")
    input_sets = [make_inputs(problem, seed, "cuda") for seed in (11, 12, 13)]
    clock = time.monotonic()
    with torch.no_grad():
        compiled = torch.compile(model)
        compiled(*input_sets[0])
        candidate(*input_sets[0])
    torch.cuda.synchronize()
    compile_seconds = time.monotonic() - clock
    variants = {"eager": model, "compile": compiled, "candidate": candidate}
    row: dict[str, Any] = {
        "problem": name,
        "compile_seconds": round(compile_seconds, 1),
        "kernels": {k: kernels_of(v, input_sets[0]) for k, v in variants.items()},
        "states": {},
    }
    timers = reference_timers("cuda")
    for state in ("idle", "hot"):
        if state == "idle":
            time.sleep(args.idle_s)
        else:
            heat(args.heat_s)
        blocks: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
        for _ in range(args.blocks):
            for variant, fn in variants.items():
                sampler.mark()
                with torch.no_grad():
                    timed = time_calls("cuda", fn, input_sets, timers, args.trials, 10)
                blocks[variant].append(
                    {
                        "median_ms": statistics.median(timed.samples_ms),
                        "host_median_ms": statistics.median(timed.host_ms),
                        "prequeue_ms": timed.prequeue_ms,
                        **sampler.window(),
                    }
                )
        row["states"][state] = blocks
    del variants, compiled, model, candidate, input_sets
    torch.cuda.empty_cache()
    return row


def summarise(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'problem':<18}{'state':<6}{'variant':<10}{'median ms':>11}{'spread':>8}{'SM MHz':>8}{'W':>6}"]
    for row in rows:
        for state, blocks in row["states"].items():
            for variant, found in blocks.items():
                medians = [b["median_ms"] for b in found]
                clocks = [b["sm_mhz"] for b in found if b["sm_mhz"]]
                power = [b["power_w"] for b in found if b["power_w"]]
                lines.append(
                    f"{row['problem']:<18}{state:<6}{variant:<10}{statistics.median(medians):>11.4f}"
                    f"{max(medians) / min(medians) - 1:>8.2%}"
                    f"{statistics.fmean(clocks) if clocks else float('nan'):>8.0f}"
                    f"{statistics.fmean(power) if power else float('nan'):>6.0f}"
                )
        ratios = []
        for state, blocks in row["states"].items():
            c = statistics.median(b["median_ms"] for b in blocks["compile"])
            k = statistics.median(b["median_ms"] for b in blocks["candidate"])
            e = statistics.median(b["median_ms"] for b in blocks["eager"])
            ratios.append(f"{state}: vs compile {c / k:.3f}x, vs eager {e / k:.3f}x")
        lines.append(f"{'':<18}speedups  " + "; ".join(ratios))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--problems", nargs="+", default=DEFAULT)
    parser.add_argument("--blocks", type=int, default=3, help="Interleaved blocks per variant and state.")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--heat-s", type=float, default=10.0)
    parser.add_argument("--idle-s", type=float, default=4.0)
    args = parser.parse_args(argv)

    import torch

    from ksmith_core.environment import device_facts, versions

    results: dict[str, Any] = {
        "versions": versions(),
        "device": device_facts("cuda"),
        "settings": {
            "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "allow_fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        },
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "rows": [],
    }
    sampler = ClockSampler()
    try:
        for name in args.problems:
            print(f"measuring {name} ...", file=sys.stderr, flush=True)
            results["rows"].append(measure_problem(name, args, sampler))
            args.out.write_text(json.dumps(results, indent=2, default=str))
    finally:
        sampler.close()
    print("\n".join(summarise(results["rows"])))
    print(f"settings: {results['settings']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
