"""Why does an honest candidate of a few microseconds get refused ``TIMING_BIMODAL``? (GPU only;
docs/benchmarks.md §8g.)

The protocol's GPU test of ``two_kernels`` (scale, then shift: two launches on 1024 floats, about 7 us a call)
was refused in some runs on H200s: on one input set, 3-4 of 17-33 calls ran 15-17 % faster than the median.
This evaluates a few tiny honest candidates many times with the real evaluator and keeps, per timed call, its
GPU time, input set, staging copy, and (written by the candidate itself) the addresses of its input, its
intermediate and its output, so the fast calls can be told apart by what they share:

- ``two_kernels``: the test's candidate (two launches, two allocations per call);
- ``two_kernels_inplace``: the same two launches, one allocation (the shift runs in place on the output);
- ``one_kernel``: one launch, one allocation (the problem's plain Triton solution).

    python benchmarks/bimodal_probe.py --out bimodal.json [--runs 10] [--small] [--only NAME ...]

The problem runs at its full size (64 x 4096 floats, as in the GPU test); ``--small`` uses its small one. Prints a table
last: per candidate, runs refused, and the fast cluster of each run (input set, calls, gap in us).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = HERE.parent / "tests" / "triton" / "cases"

PROBE = """
import json as _json


def _note(x, mid, y):
    with open({path!r}, "a") as f:
        f.write(_json.dumps([x.data_ptr(), mid.data_ptr(), y.data_ptr()]) + "\\n")
"""

TWO_KERNELS_INPLACE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


@triton.jit
def _add_kernel(y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(y_ptr + offsets, tl.load(y_ptr + offsets, mask=mask) + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _scale_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024, num_warps=4)
        _add_kernel[(triton.cdiv(n, 512),)](y, n, BLOCK_SIZE=512, num_warps=4)
        _note(x, y, y)
        return y
"""


def sources(log: Path) -> dict[str, str]:
    two = (CASES / "two_kernels.py").read_text()
    two = two.replace("        return y\n", "        _note(x, scaled, y)\n        return y\n")
    one = (CASES / "scale_add_ok.py").read_text()
    probe = PROBE.format(path=str(log))
    return {"two_kernels": two + probe, "two_kernels_inplace": TWO_KERNELS_INPLACE + probe, "one_kernel": one}


def fast_clusters(gpu_ms: list[float], sets: list[int], copies: list[int] | None, gap: float) -> list[dict]:
    """Per prepared input set, the calls the evaluator's rule counts as fast: times placement-normalised as
    ``timing_contradictions`` does, more than ``gap`` times faster than the set's median (the 2 us floor left
    out, to see what the relative rule alone finds); fresh inputs (set -1) skipped, as the rule skips them."""
    from ksmith_triton.evaluator import placement_normalised

    by_set: dict[int, list[float]] = {}
    for t, s in zip(placement_normalised(gpu_ms, copies), sets):
        if s >= 0:
            by_set.setdefault(s, []).append(t)
    found = []
    for s, times in sorted(by_set.items()):
        ordered = sorted(times)
        median = ordered[len(ordered) // 2]
        fast = [t for t in ordered if t * gap < median]
        if fast:
            found.append(
                {
                    "set": s,
                    "n": len(ordered),
                    "fast": len(fast),
                    "median_us": median * 1e3,
                    "gap_us": (median - fast[-1]) * 1e3,
                }
            )
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()

    import ksmith_triton.evaluator as ev
    from ksmith_core.loading import load_problem
    from ksmith_core.model import Candidate
    from ksmith_triton.evaluator import EvalOptions, evaluate

    captured: list[tuple] = []
    original = ev.timing_contradictions

    def recording(gpu_ms, sets, copies=None):
        captured.append((list(gpu_ms), list(sets), None if copies is None else list(copies)))
        return original(gpu_ms, sets, copies)

    ev.timing_contradictions = recording
    problem = load_problem(CASES / "scale_add.py")
    cache = tempfile.mkdtemp(prefix="bimodal-cache-")
    options = EvalOptions(
        device=args.device,
        correctness_trials=5,
        timing_trials=100,
        timeout_s=90.0,
        cache_dir=cache,
        small=True if args.small else None,
    )
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else []
    logdir = Path(tempfile.mkdtemp(prefix="bimodal-ptrs-"))
    for run in range(args.runs):
        for name in args.only or ["two_kernels", "two_kernels_inplace", "one_kernel"]:
            log = logdir / f"{name}-{run}.jsonl"
            captured.clear()
            verdict = evaluate(problem, Candidate.from_source(sources(log)[name]), options)
            gpu_ms, sets, copies = captured[-1] if captured else ([], [], None)
            ptrs = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
            row = {
                "candidate": name,
                "run": run,
                "status": verdict.status.value,
                "reasons": verdict.reasons,
                "gpu_ms": gpu_ms,
                "sets": sets,
                "copies": copies,
                "full": verdict.details.get("timing", {}).get("fully_checked_calls"),
                "ptrs": ptrs[-len(gpu_ms) :] if gpu_ms else [],
                "clusters": fast_clusters(gpu_ms, sets, copies, ev.BIMODAL_GAP),
            }
            results.append(row)
            out.write_text(json.dumps(results))
            print(
                name,
                run,
                row["status"],
                [(c["set"], c["fast"], c["n"], round(c["gap_us"], 2)) for c in row["clusters"]],
                flush=True,
            )
    print("\ncandidate            runs refused  fast clusters (set: fast/n, gap us)")
    for name in args.only or ["two_kernels", "two_kernels_inplace", "one_kernel"]:
        rows = [r for r in results if r["candidate"] == name]
        refused = sum(r["status"] != "ok" for r in rows)
        shown = "; ".join(
            f"{c['set']}:{c['fast']}/{c['n']},{c['gap_us']:.2f}"
            for r in rows
            for c in r["clusters"]
            if c["fast"] >= 2
        )
        print(f"{name:20s} {len(rows):4d} {refused:7d}  {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
