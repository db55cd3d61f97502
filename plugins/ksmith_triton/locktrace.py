"""Where a GPU's time went, read from the lock trace (``KSMITH_GPU_LOCK_TRACE``, see ``locks.py``).

Every piece of ksmith's GPU work holds the GPU's lock, shared or exclusive, so the trace of holds is a
timeline of the device as the evaluator used it. ``summarise`` splits a window of it into four states:

``timing``
    an exclusive holder (a timed loop, a reference's timing or autotuning) has the GPU;
``draining``
    a timer waits for shared holders to finish, and no new shared work may start: the GPU does only what
    those holders still do, and every other evaluation waits;
``shared``
    shared work only, no timer waiting;
``idle``
    nobody holds the lock.

Throughput is bound by what runs one at a time: ``timing`` plus ``draining``. The summary also says, per
kind of holder, how often and how long it held and waited, and which holders the timers waited for (the last
shared hold each timer saw released before it got the GPU).
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The trace's holds, oldest first (lines that do not parse are skipped: a process killed mid-write).
    A ``.gz`` file is read as the gzipped trace (how benchmark results keep it)."""
    path = Path(path)
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    holds = []
    for line in data.decode("utf-8").splitlines():
        try:
            hold = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(hold, dict) and {"mode", "asked", "got", "released"} <= hold.keys():
            holds.append(hold)
    return sorted(holds, key=lambda h: h["got"])


def _clip(start: float, end: float, lo: float, hi: float) -> tuple[float, float] | None:
    start, end = max(start, lo), min(end, hi)
    return (start, end) if end > start else None


def _states(holds: list[dict[str, Any]], lo: float, hi: float) -> dict[str, float]:
    """Seconds of ``[lo, hi]`` in each state (see the module's doc)."""
    events: list[tuple[float, str, int]] = []
    for hold in holds:
        if hold["mode"] == "exclusive":
            waiting = _clip(hold["asked"], hold["got"], lo, hi)
            if waiting:
                events += [(waiting[0], "waiting", 1), (waiting[1], "waiting", -1)]
        held = _clip(hold["got"], hold["released"], lo, hi)
        if held:
            events += [(held[0], hold["mode"], 1), (held[1], hold["mode"], -1)]
    events.sort()
    counts = {"exclusive": 0, "shared": 0, "waiting": 0}
    seconds = {"timing": 0.0, "draining": 0.0, "shared": 0.0, "idle": 0.0}
    clock = lo
    for at, kind, change in [*events, (hi, "end", 0)]:
        if at > clock:
            if counts["exclusive"]:
                state = "timing"
            elif counts["waiting"]:
                state = "draining"
            elif counts["shared"]:
                state = "shared"
            else:
                state = "idle"
            seconds[state] += at - clock
            clock = at
        if kind in counts:
            counts[kind] += change
    return seconds


def summarise(
    holds: list[dict[str, Any]], start: float | None = None, end: float | None = None
) -> dict[str, Any]:
    """The window ``[start, end]`` (wall clock; the whole trace by default) of a trace: seconds per state, per
    holder kind its holds and waits, and what the timers waited for."""
    if not holds:
        return {"seconds": 0.0, "states": {}, "holders": {}, "timers_waited_for": {}}
    lo = min(h["asked"] for h in holds) if start is None else start
    hi = max(h["released"] for h in holds) if end is None else end
    inside = [h for h in holds if h["released"] > lo and h["asked"] < hi]
    holders: dict[str, dict[str, list[float]]] = {}
    for hold in inside:
        name = f"{hold['mode']}: {hold.get('what') or '?'}"
        entry = holders.setdefault(name, {"held": [], "waited": []})
        entry["held"].append(hold["released"] - hold["got"])
        entry["waited"].append(hold["got"] - hold["asked"])
    shared = [h for h in inside if h["mode"] == "shared"]
    waited_for: dict[str, float] = {}
    for timer in (h for h in inside if h["mode"] == "exclusive"):
        # The shared hold released last before the timer got the GPU: what it waited for at the end.
        blockers = [s for s in shared if timer["asked"] < s["released"] <= timer["got"] + 1e-3]
        if blockers:
            last = max(blockers, key=lambda s: s["released"])
            name = last.get("what") or "?"
            waited_for[name] = waited_for.get(name, 0.0) + (last["released"] - timer["asked"])
    return {
        "seconds": hi - lo,
        "states": {k: round(v, 3) for k, v in _states(inside, lo, hi).items()},
        "holders": {
            name: {
                "holds": len(entry["held"]),
                "held_s": round(sum(entry["held"]), 3),
                "median_held_s": round(statistics.median(entry["held"]), 4),
                "waited_s": round(sum(entry["waited"]), 3),
                "median_waited_s": round(statistics.median(entry["waited"]), 4),
            }
            for name, entry in sorted(holders.items())
        },
        "timers_waited_for": {k: round(v, 3) for k, v in sorted(waited_for.items(), key=lambda kv: -kv[1])},
    }


def render(summary: dict[str, Any]) -> str:
    """The summary as a few lines of text."""
    total = summary["seconds"] or 1.0
    lines = [
        "GPU lock, "
        + ", ".join(f"{k} {v:.1f} s ({v / total:.0%})" for k, v in summary["states"].items())
        + f" of {summary['seconds']:.1f} s"
    ]
    for name, row in summary["holders"].items():
        lines.append(
            f"  {name:<40} {row['holds']:>4} holds, held {row['held_s']:7.1f} s (median {row['median_held_s']:.3f}), "
            f"waited {row['waited_s']:7.1f} s (median {row['median_waited_s']:.3f})"
        )
    if summary["timers_waited_for"]:
        lines.append(
            "  timers waited for: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in summary["timers_waited_for"].items())
        )
    return "\n".join(lines)
