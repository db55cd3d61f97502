"""Does where a kernel's buffers land in GPU memory move its time? (GPU only; docs/benchmarks.md §1b5.)

The seeds of layernorm, rmsnorm and l2_norm differ by 0.6-6 % between an evaluation under load and one alone
in the throughput workload's isolation check, while elementwise seeds agree within 0.3 %. Load is one
difference between those evaluations; another is the process: each evaluation runs in a fresh worker, whose
allocator puts the staging buffers at other addresses. This times each seed in one process with ksmith's own
timing loop (``ksmith_triton.timing.time_calls``: L2 flush, GPU spin, three staging copies, median), once per
placement: before each loop a pad of a chosen size is allocated, so the staging copies land elsewhere. Every
placement is timed twice, in two passes over the pads, so a placement's own repeatability is seen beside the
spread between placements. Nothing else runs on the GPU.

    python benchmarks/placement_probe.py --out placement.json [--problems layernorm rmsnorm l2_norm relu]
        [--copies 3 8 16]

``--copies`` sets how many staging copies the loop rotates over (the protocol's is ``STAGING_COPIES``).
Prints a table last: per problem and number of copies, the median over placements, the spread between
placements (max/min - 1) of the loop's median and of the mean of each copy's median, the spread between single
copies, and the largest difference between a placement's two passes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE.parent / "plugins" / "ksmith_problems" / "problems"
PADS_MB = [0, 2, 6, 10, 18, 34, 66, 130, 258, 3, 7, 514]


def _load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def probe(name: str, trials: int, copies: int) -> dict:
    import torch

    from ksmith_triton import timing
    from ksmith_triton.child_common import make_inputs, make_model
    from ksmith_triton.timing import reference_timers, time_calls

    timing.STAGING_COPIES = copies  # the loop's rotation over staging copies, for this exploration

    path = next(PROBLEMS.rglob(f"{name}.py"))
    problem = _load(path, f"problem_{name}")
    seed = _load(path.with_name(f"{name}.seed.py"), f"seed_{name}")
    model = make_model(seed.ModelNew, problem, 1234, "cuda")
    input_sets = [make_inputs(problem, s, "cuda") for s in (11, 12, 13)]
    timers = reference_timers("cuda")
    with torch.no_grad():
        model(*input_sets[0])
    torch.cuda.synchronize()
    passes: list[dict[int, dict]] = []
    for _ in range(2):
        by_pad: dict[int, dict] = {}
        for pad_mb in PADS_MB:
            pad = torch.empty(pad_mb * 2**20 + 1, dtype=torch.int8, device="cuda")
            with torch.no_grad():
                timed = time_calls("cuda", model, input_sets, timers, trials, 10)
            # Timed call i ran on staging copy (warm-up + i) % copies: the loop loads one copy per call in turn.
            per_copy: dict[int, list[float]] = {}
            for i, ms in enumerate(timed.samples_ms):
                per_copy.setdefault((timed.warmup + i) % copies, []).append(ms)
            by_pad[pad_mb] = {
                "median_ms": statistics.median(timed.samples_ms),
                "mean_of_copy_medians_ms": statistics.mean(statistics.median(v) for v in per_copy.values()),
                "copies_ms": {k: round(statistics.median(v), 5) for k, v in sorted(per_copy.items())},
                "prequeue_ms": timed.prequeue_ms,
                "calls": len(timed.samples_ms),
            }
            del pad
            torch.cuda.empty_cache()
        passes.append(by_pad)
    medians = [p[pad]["median_ms"] for p in passes for pad in PADS_MB]
    means = [p[pad]["mean_of_copy_medians_ms"] for p in passes for pad in PADS_MB]
    copy_ms = [ms for p in passes for pad in PADS_MB for ms in p[pad]["copies_ms"].values()]
    repeat = max(abs(passes[0][pad]["median_ms"] / passes[1][pad]["median_ms"] - 1) for pad in PADS_MB)
    return {
        "problem": name,
        "copies": copies,
        "passes": [{str(k): v for k, v in p.items()} for p in passes],
        "median_ms": statistics.median(medians),
        "spread_between_placements": max(medians) / min(medians) - 1,
        "spread_between_placements_mean_of_copies": max(means) / min(means) - 1,
        "spread_between_copies": max(copy_ms) / min(copy_ms) - 1,
        "largest_repeat_difference": repeat,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--problems", nargs="+", default=["layernorm", "rmsnorm", "l2_norm", "relu"])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument(
        "--copies", type=int, nargs="+", default=[3], help="staging copies the loop rotates over"
    )
    args = parser.parse_args()

    import torch
    import triton

    rows = []
    for name in args.problems:
        for copies in args.copies:
            rows.append(probe(name, args.trials, copies))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "passes"}), flush=True)
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__}
    Path(args.out).write_text(json.dumps({"env": env, "pads_mb": PADS_MB, "rows": rows}, indent=1))
    print(
        f"\n{env}\n| problem | staging copies | median ms | between placements: median "
        "| the same: mean of the copies' medians | between single copies | a placement's two passes |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['problem']} | {r['copies']} | {r['median_ms']:.4f} | {r['spread_between_placements']:.2%} | "
            f"{r['spread_between_placements_mean_of_copies']:.2%} | {r['spread_between_copies']:.2%} | "
            f"{r['largest_repeat_difference']:.2%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
