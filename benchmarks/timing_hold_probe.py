"""What one evaluation's exclusive timing hold and trials take, evaluated alone, one after another (GPU only;
docs/benchmarks.md §8g).

Each evaluation runs in a fresh candidate worker, so every kernel the harness launches is loaded on its first
launch there. This evaluates the protocol's ``scale_add_ok`` candidate ``--runs`` times and prints the medians of
the timing phase (the exclusive hold), the trials phase, the timed loop's parts (``details.timing.loop_ms``) and
the trials' steps (``details.trial_steps_ms``).
Run it on two versions of the worker to compare them.

    python benchmarks/timing_hold_probe.py --out hold.json [--runs 8] [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

CASES = Path(__file__).resolve().parent.parent / "tests" / "triton" / "cases"


def _median(values) -> float:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--label", default="run")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    from ksmith_core.loading import load_problem
    from ksmith_core.model import Candidate, EvalOptions
    from ksmith_triton.evaluator import evaluate

    problem = load_problem(CASES / "scale_add.py")
    candidate = Candidate.from_source((CASES / "scale_add_ok.py").read_text())
    options = EvalOptions(
        device=args.device, timeout_s=90.0, cache_dir=tempfile.mkdtemp(prefix="hold-cache-")
    )
    evaluate(problem, candidate, options)  # the reference timed and cached, outside the measured runs
    rows = []
    for _ in range(args.runs):
        v = evaluate(problem, candidate, options)
        rows.append(
            {
                "status": v.status.value,
                "phases": dict(v.phases or {}),
                "loop_ms": v.details.get("timing", {}).get("loop_ms") or {},
                "trial_steps_ms": v.details.get("trial_steps_ms") or {},
                "runtime_ms": v.runtime_ms,
            }
        )
    out = Path(args.out)
    report = json.loads(out.read_text()) if out.exists() else {}
    report[args.label] = rows
    out.write_text(json.dumps(report, indent=1))
    print(
        f"{'label':12s} {'ok':>3s} {'timing s':>9s} {'trials s':>9s}  loop ms (median): check / inputs / warmup / wait"
    )
    for label, rs in report.items():
        timing = _median(r["phases"].get("candidate_timing") for r in rs)
        trials = _median(r["phases"].get("candidate_trials") for r in rs)
        loop = " / ".join(
            f"{_median(r['loop_ms'].get(k) for r in rs):.2f}" for k in ("check", "inputs", "warmup", "wait")
        )
        print(f"{label:12s} {sum(r['status'] == 'ok' for r in rs):3d} {timing:9.3f} {trials:9.3f}  {loop}")
    print("trials' steps, ms (median):")
    for label, rs in report.items():
        names = sorted({k for r in rs for k in r.get("trial_steps_ms", {})})
        steps = {k: _median(r.get("trial_steps_ms", {}).get(k) for r in rs) for k in names}
        print(
            f"  {label:12s} "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1]))
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
