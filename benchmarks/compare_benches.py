"""Two ``ksmith bench`` runs of the same candidates, side by side: per problem both speedups in each run and
their difference, the candidate's time in each, and whether torch.compile kept the same configurations
(``reference_compile_picks``). Problems whose speedups differ by more than ``--tolerance`` are marked.

    python benchmarks/compare_benches.py A/results.jsonl B/results.jsonl --tolerance 0.02
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def rows(path: Path) -> dict[str, dict]:
    found = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            found[row["problem"]] = row  # a resumed bench's later row for a problem wins
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--tolerance", type=float, default=0.02)
    args = parser.parse_args(argv)
    a, b = rows(args.a), rows(args.b)
    print(
        "| problem | vs eager, A / B | difference | vs torch.compile, A / B | difference | candidate ms, A / B | same picks |"
    )
    print("|---|---|---|---|---|---|---|")
    outside = []
    for name in sorted(set(a) & set(b)):
        ra, rb = a[name], b[name]
        cells, off = [], False
        for key in ("speedup", "speedup_vs_compile"):
            va, vb = ra.get(key), rb.get(key)
            if va and vb:
                diff = vb / va - 1
                off |= abs(diff) > args.tolerance
                cells += [f"{va:.3f} / {vb:.3f}", f"{diff:+.2%}"]
            else:
                cells += ["-", "-"]
        times = f"{ra.get('runtime_ms') or 0:.4f} / {rb.get('runtime_ms') or 0:.4f}"
        same = ra.get("reference_compile_picks") == rb.get("reference_compile_picks")
        print(
            f"| {name}{' **outside**' if off else ''} | {' | '.join(cells)} | {times} | {'yes' if same else 'no'} |"
        )
        if off:
            outside.append(name)
    both = len(set(a) & set(b))
    print(
        f"\n{both - len(outside)} of {both} within {args.tolerance:.0%} on both speedups; outside: {', '.join(outside) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
