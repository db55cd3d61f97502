"""Each GPU's lock over a window of a lock trace: the busy fractions and how long each kind of hold lasted.

    python benchmarks/lock_holds.py TRACE[.gz] [--from S] [--to S]

``TRACE`` is what ``KSMITH_GPU_LOCK_TRACE`` wrote (every hold of every process, ``ksmith_triton/locks.py``);
``--from`` / ``--to`` are seconds after the trace's first request (the whole trace by default). Per GPU it
prints the fraction of the window the lock spent timing, draining, shared and idle (``locktrace.py``), then per
kind of hold their number and median seconds held and waited. Without a window it also prints the trace's
pauses longer than 5 s, which separate a benchmark's passes (warm-up, measured pass, next configuration).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ksmith_triton.locktrace import read_trace, summarise


def per_gpu_use(holds: list[dict], start: float, end: float) -> dict[str, dict]:
    """Per GPU of the trace, over ``[start, end]`` (wall clock): the fraction of it in each lock state, and per
    kind of hold its number, median seconds held and median seconds waited."""
    span = max(end - start, 1e-9)
    use = {}
    for gpu in sorted({str(h.get("gpu")) for h in holds}):
        summary = summarise([h for h in holds if str(h.get("gpu")) == gpu], start, end)
        if summary["holders"]:
            use[gpu] = {
                "states": {state: round(seconds / span, 3) for state, seconds in summary["states"].items()},
                "holders": {
                    name: {k: entry[k] for k in ("holds", "median_held_s", "median_waited_s")}
                    for name, entry in summary["holders"].items()
                },
            }
    return use


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trace", type=Path)
    parser.add_argument("--from", dest="start", type=float, default=None)
    parser.add_argument("--to", dest="end", type=float, default=None)
    args = parser.parse_args(argv)
    holds = read_trace(args.trace)
    if not holds:
        print("no holds in the trace")
        return 1
    origin = min(h["asked"] for h in holds)
    if args.start is None and args.end is None:
        last = None
        for hold in holds:
            if last is not None and hold["asked"] - last > 5:
                print(f"pause from {last - origin:.1f} s to {hold['asked'] - origin:.1f} s")
            last = max(last or 0.0, hold["released"])
        print(f"trace ends at {last - origin:.1f} s")
    start = origin + (args.start or 0.0)
    end = origin + args.end if args.end is not None else max(h["released"] for h in holds)
    for gpu, use in per_gpu_use(holds, start, end).items():
        print(f"GPU {gpu}: " + ", ".join(f"{k} {v:.1%}" for k, v in use["states"].items()))
        for name, entry in use["holders"].items():
            print(
                f"  {name:44} {entry['holds']:4d} holds, median held {entry['median_held_s']:.4f} s, "
                f"waited {entry['median_waited_s']:.4f} s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
