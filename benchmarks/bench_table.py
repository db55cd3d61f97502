"""Summarise ``ksmith bench`` results (``results.jsonl`` files) as the tables in docs/benchmarks.md.

    python benchmarks/bench_table.py RESULTS.jsonl [MORE.jsonl ...] [--json]

Later files replace earlier rows of the same problem (e.g. a longer run of a few problems over a suite-wide
run). Prints one Markdown row per problem, then the summary of ``ksmith_bench.bench.summarise``: correct rate,
fast_1, geometric means, and per bound (memory / compute) the geometric mean over torch.compile beside the
headroom, the geometric mean that kernels running at the measured roofline would reach.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ksmith_bench.bench import summarise


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true", help="Print the summary as JSON instead of tables.")
    args = parser.parse_args(argv)

    rows: dict[str, dict] = {}
    for path in args.results:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[row["problem"]] = row
    ordered = sorted(rows.values(), key=lambda r: (r.get("path") or "", r["problem"]))
    summary = summarise(ordered)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
        return 0

    print(
        "| problem | bound | evaluations | seed vs eager | best vs eager | seed vs torch.compile "
        "| best vs torch.compile | roofline | torch.compile's roofline |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in ordered:
        print(
            f"| {r['problem']} | {r.get('roofline_bound') or '-'} | {r.get('evaluations', '-')} "
            f"| {_x(r.get('seed_speedup'))} | {_x(r.get('speedup'))} | {_x(r.get('seed_speedup_vs_compile'))} "
            f"| {_x(r.get('speedup_vs_compile'))} | {_f(r.get('roofline_fraction'))} "
            f"| {_f(r.get('compile_roofline_fraction'))} |"
        )
    s = summary
    print()
    print(
        f"correct {s['correct']}/{s['problems']}; fast_1 vs eager {_f(s['fast_1_eager'])}, vs torch.compile "
        f"{_f(s['fast_1_compile'])}; geomean {_x(s['geomean_speedup_eager'])} vs eager, "
        f"{_x(s['geomean_speedup_compile'])} vs torch.compile"
    )
    for bound, group in s["by_bound"].items():
        print(
            f"{bound}-bound ({len(group['problems'])} problems): geomean {_x(group['geomean_speedup_eager'])} vs "
            f"eager, {_x(group['geomean_speedup_compile'])} vs torch.compile; at the roofline: "
            f"{_x(group['headroom_geomean_vs_compile'])} vs torch.compile"
        )
    print("slower than torch.compile: " + (", ".join(s["slower_than_compile"]) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
