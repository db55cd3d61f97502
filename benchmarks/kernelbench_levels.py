"""KernelBench as it is: every problem of some levels seeded offline and evaluated once, resumable.

``run`` calls ``ksmith bench LEVEL_DIRS --seed-from inductor --device cuda --parallel N -o OUT --json`` on the
level directories of a KernelBench checkout (not shipped with ksmith: point ``--kernelbench`` at one), in a
process group of its own, and stops it at ``--deadline-s`` (a device call has a time limit). ``ksmith bench``
appends each finished row to ``OUT/results.jsonl`` and keeps each seed in ``OUT/seeds/``, so running ``run``
again with the same ``OUT`` resumes: finished problems are not evaluated again, problems in flight at the
deadline are. ``table`` reads ``OUT/results.jsonl`` and prints, per level and for all levels together:

* ``verdict``     -- share of problems with a verdict that is not an infrastructure failure (any verdict of
  the candidate: ok, incorrect, compile error, ...; not load_failed / setup_failed / no_seed / RESOURCE /
  evaluator errors);
* ``seeded``      -- share of non-convolution problems (no ``conv`` in the name) with an offline seed;
* ``ok``, fast_0 / fast_1 against eager and torch.compile (over all problems of the level, KernelBench's
  convention), the geomean speedups over correct rows;
* every problem that did not end ``ok``, with its status and first reason;
* the problems where torch.compile itself runs below 0.6 of the roofline (the room issue 16 asks about).

``evolve`` takes a subset of what ``run`` evaluated (:func:`choose_subset`: per level, the correct
non-convolution seeds furthest behind torch.compile, where an evolution has the most to find) and runs
``ksmith bench --evolve --budget B`` over it (in that order), each problem starting from the seed ``run``
stored, with the same deadline and resume; it prints seed and best against torch.compile, problem by problem.

    python benchmarks/kernelbench_levels.py run --kernelbench ~/KernelBench --levels 1 2 --out kb --deadline-s 540
    python benchmarks/kernelbench_levels.py table --out kb [--json kb/table.json] [--rows kb/rows.jsonl]
    python benchmarks/kernelbench_levels.py evolve --kernelbench ~/KernelBench --from kb --out kb-evolve \
        --count 20 --budget 16 --deadline-s 540
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ksmith_bench.bench import NOT_EVALUATED, summarise

# Reasons that are the evaluator's or the machine's failure, not the candidate's (rows with no verdict at all,
# load_failed / setup_failed / no_seed / no_candidate, are ksmith bench's NOT_EVALUATED).
INFRA_REASONS = ("RESOURCE:", "EVALUATOR_ERROR:", "GPU_LOCK:", "GPU_BUSY:")
LOW_COMPILE_ROOFLINE = 0.6


def level_dir(root: Path, level: int) -> Path:
    """``ROOT/KernelBench/levelN`` (a repository checkout) or ``ROOT/levelN``."""
    for candidate in (root / "KernelBench" / f"level{level}", root / f"level{level}"):
        if candidate.is_dir():
            return candidate
    raise SystemExit(f"kernelbench_levels: no level{level} under {root}")


def run(args: argparse.Namespace) -> int:
    dirs = [str(level_dir(args.kernelbench, level)) for level in args.levels]
    cmd = [
        sys.executable,
        "-c",
        "from ksmith_core.cli import main; main()",
        "bench",
        *dirs,
        "--seed-from",
        "inductor",
        "--device",
        args.device,
        "--parallel",
        str(args.parallel),
        "-o",
        str(args.out),
        "--json",
    ]
    bench_until(cmd, args.out, args.deadline_s)
    table(args)
    return 0


def bench_until(cmd: list[str], out: Path, deadline_s: float) -> None:
    """Run a ``ksmith bench`` command, its output appended to ``OUT/bench.log``, and stop it at the deadline."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(out / "bench.log", "a", encoding="utf-8") as log:
        log.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            # Finished rows are already on disk (one fsync'd line each); what is in flight is redone next time.
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = None
    wall = time.monotonic() - started
    print(f"bench {'stopped at the deadline' if rc is None else f'exited with {rc}'} after {wall:.0f} s")


SUBSET_RULE = (
    "per level in turn, the ok rows that are not convolutions, lowest speedup vs torch.compile first (ties by "
    "name), as evenly over the levels as they go"
)


def choose_subset(rows: dict[str, dict[str, Any]], count: int) -> list[str]:
    """``count`` problems (``levelN/NAME`` keys) to evolve: in each level in turn, the ``ok`` rows that are
    not convolutions, furthest behind torch.compile first (ties by name), as evenly over the levels as they
    go. Convolutions are left out because their seeds' evaluations take minutes each."""
    by_level: dict[str, list[str]] = {}
    for key, row in sorted(rows.items()):
        if row["status"] == "ok" and not is_conv(row) and row.get("speedup_vs_compile") is not None:
            by_level.setdefault(level_of(row), []).append(key)
    for keys in by_level.values():
        keys.sort(key=lambda k: (rows[k]["speedup_vs_compile"], k))
    chosen: list[str] = []
    while len(chosen) < count and any(by_level.values()):
        for keys in by_level.values():
            if keys and len(chosen) < count:
                chosen.append(keys.pop(0))
    return chosen


def evolve(args: argparse.Namespace) -> int:
    """Evolve a subset of what ``run`` evaluated (chosen once, kept in ``OUT/subset.json``), from its seeds."""
    subset_file = args.out / "subset.json"
    args.out.mkdir(parents=True, exist_ok=True)
    if subset_file.exists():
        chosen = json.loads(subset_file.read_text())["problems"]
    elif args.problems:
        chosen = list(args.problems)
        subset_file.write_text(json.dumps({"rule": "named with --problems", "problems": chosen}, indent=1))
    elif args.source is None:
        print("evolve needs --from (a run's --out) or --problems", file=sys.stderr)
        return 2
    else:
        chosen = choose_subset(latest_rows(args.source), args.count)
        subset_file.write_text(json.dumps({"rule": SUBSET_RULE, "problems": chosen}, indent=1))
    seeds = args.out / "seeds"
    seeds.mkdir(exist_ok=True)
    # The files in the subset's order (levels alternating), so a run cut short by its deadline has covered
    # both levels alike.
    files: list[str] = []
    for key in chosen:
        level, name = key.split("/", 1)
        linked = args.out / "problems" / level / f"{name}.py"
        linked.parent.mkdir(parents=True, exist_ok=True)
        if not linked.exists():
            shutil.copyfile(
                level_dir(args.kernelbench, int(level.removeprefix("level"))) / f"{name}.py", linked
            )
        stored_seeds = (args.source / "seeds").glob(f"{name}.seed.*") if args.source else ()
        for stored in stored_seeds:  # the seed run stored, reused as it is
            if not (seeds / stored.name).exists():
                shutil.copyfile(stored, seeds / stored.name)
        files.append(str(linked))
    cmd = [
        sys.executable, "-c", "from ksmith_core.cli import main; main()", "bench", *files, "--evolve",
        "--seed-from", "inductor", "--budget", str(args.budget), "--device", args.device,
        "--parallel", str(args.parallel), "-o", str(args.out), "--json",
    ]  # fmt: skip
    bench_until(cmd, args.out, args.deadline_s)
    print_evolved(latest_rows(args.out), chosen)
    return 0


def print_evolved(rows: dict[str, dict[str, Any]], chosen: list[str]) -> None:
    print(f"\n{'problem':<58}{'status':<12}{'seed vs c':>10}{'best vs c':>10}{'best vs e':>10}")
    gains = []
    for key in chosen:
        row = rows.get(key)
        if row is None:
            print(f"{key:<58}{'-':<12}")
            continue
        seed, best = row.get("seed_speedup_vs_compile"), row.get("speedup_vs_compile")
        if seed and best and row["status"] == "ok":
            gains.append(best / seed)
        print(f"{key[:57]:<58}{row['status']:<12}{_x(seed):>10}{_x(best):>10}{_x(row.get('speedup')):>10}")
    if gains:
        geo = statistics.geometric_mean(gains)
        print(f"{len(gains)} of {len(chosen)} evolved and correct; geomean best/seed {geo:.2f}x")


def latest_rows(out: Path) -> dict[str, dict[str, Any]]:
    """The last row written for each problem, by level and name (a resumed bench may append a problem twice,
    and the same file may be named by a relative and an absolute path)."""
    rows: dict[str, dict[str, Any]] = {}
    path = out / "results.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[f"{level_of(row)}/{row['problem']}"] = row
    return rows


def level_of(row: dict[str, Any]) -> str:
    parent = Path(row["path"]).parent.name
    return parent if parent.startswith("level") else "other"


def is_conv(row: dict[str, Any]) -> bool:
    return "conv" in row["problem"].lower()


def is_infra(row: dict[str, Any]) -> bool:
    return any(str(r).startswith(INFRA_REASONS) for r in row.get("reasons") or [])


def has_verdict(row: dict[str, Any]) -> bool:
    return row["status"] not in NOT_EVALUATED and not is_infra(row)


def summary(rows: list[dict[str, Any]], expected: int | None) -> dict[str, Any]:
    """``ksmith bench``'s own summary of the rows (fast_0 / fast_1 over all rows, geomeans over ok ones), with
    the shares issue 12 asks for."""
    n = len(rows)
    non_conv = [r for r in rows if not is_conv(r)]
    bench = summarise(rows)

    def share(items: list[Any], of: int) -> float | None:
        return len(items) / of if of else None

    def fast(key: str) -> float | None:  # the bench says None when no row has that speedup: none beat it
        return bench[key] if bench[key] is not None or not n else 0.0

    return {
        "problems": n,
        "expected": expected,
        "verdict": share([r for r in rows if has_verdict(r)], n),
        "seeded_non_conv": share([r for r in non_conv if r["status"] != "no_seed"], len(non_conv)),
        "non_conv": len(non_conv),
        "ok": bench["correct"],
        **{key: fast(key) for key in ("fast_0_eager", "fast_1_eager", "fast_0_compile", "fast_1_compile")},
        "geomean_eager": bench["geomean_speedup_eager"],
        "geomean_compile": bench["geomean_speedup_compile"],
        "statuses": {
            s: sum(1 for r in rows if r["status"] == s) for s in sorted({r["status"] for r in rows})
        },
    }


def table(args: argparse.Namespace) -> dict[str, Any]:
    rows = latest_rows(args.out)
    by_level: dict[str, list[dict[str, Any]]] = {}
    for row in rows.values():
        by_level.setdefault(level_of(row), []).append(row)
    expected = {}
    if getattr(args, "kernelbench", None) and getattr(args, "levels", None):
        for level in args.levels:
            expected[f"level{level}"] = len(list(level_dir(args.kernelbench, level).glob("*.py")))
    report = {
        "levels": {name: summary(items, expected.get(name)) for name, items in sorted(by_level.items())},
        "all": summary(list(rows.values()), sum(expected.values()) or None),
        "not_ok": sorted(
            (
                {
                    "problem": r["problem"],
                    "level": level_of(r),
                    "status": r["status"],
                    "reason": (r.get("reasons") or [""])[0][:160],
                    "error": (r.get("error") or "")[-300:],
                }
                for r in rows.values()
                if r["status"] != "ok"
            ),
            key=lambda r: (r["level"], r["status"], r["problem"]),
        ),
        "compile_below_roofline": sorted(
            (
                {
                    "problem": r["problem"],
                    "level": level_of(r),
                    "compile_roofline_fraction": r["compile_roofline_fraction"],
                    "speedup_vs_compile": r.get("speedup_vs_compile"),
                    "bound": r.get("roofline_bound"),
                }
                for r in rows.values()
                if r.get("compile_roofline_fraction") is not None
                and r["compile_roofline_fraction"] < LOW_COMPILE_ROOFLINE
            ),
            key=lambda r: r["compile_roofline_fraction"],
        ),
        "devices": sorted({r["device"] for r in rows.values() if r.get("device")}),
    }
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps(report, indent=2))
    if getattr(args, "rows", None):  # the last row of each problem, its path as levelN/NAME.py
        with open(args.rows, "w", encoding="utf-8") as fh:
            for key, row in sorted(rows.items()):
                fh.write(json.dumps({**row, "path": f"{key}.py"}, default=str) + "\n")
    print_report(report)
    return report


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def print_report(report: dict[str, Any]) -> None:
    print("\nproblems not ok:")
    for r in report["not_ok"]:
        print(f"  {r['level']:<7} {r['problem']:<55} {r['status']:<14} {r['reason']}")
    print(f"\ntorch.compile below {LOW_COMPILE_ROOFLINE} of the roofline:")
    for r in report["compile_below_roofline"]:
        print(
            f"  {r['level']:<7} {r['problem']:<55} {r['bound'] or '-':<8} compile at "
            f"{r['compile_roofline_fraction']:.2f}, candidate {_x(r['speedup_vs_compile'])} vs compile"
        )
    print(f"\ndevices: {', '.join(report['devices']) or '-'}")
    header = (
        f"{'level':<8}{'done':>9}{'verdict':>9}{'seeded*':>9}{'ok':>5}{'fast0 e':>9}{'fast1 e':>9}"
        f"{'fast0 c':>9}{'fast1 c':>9}{'geo e':>8}{'geo c':>8}"
    )
    print(header)
    for name, s in [*report["levels"].items(), ("all", report["all"])]:
        done = f"{s['problems']}/{s['expected']}" if s["expected"] else str(s["problems"])
        print(
            f"{name:<8}{done:>9}{_pct(s['verdict']):>9}{_pct(s['seeded_non_conv']):>9}{s['ok']:>5}"
            f"{_pct(s['fast_0_eager']):>9}{_pct(s['fast_1_eager']):>9}{_pct(s['fast_0_compile']):>9}"
            f"{_pct(s['fast_1_compile']):>9}{_x(s['geomean_eager']):>8}{_x(s['geomean_compile']):>8}"
        )
    print("* seeded: share of non-convolution problems with an offline seed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="bench (or resume) the levels, then print the table")
    p_table = sub.add_parser("table", help="print the table of what OUT holds")
    for p in (p_run, p_table):
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--kernelbench", type=Path, default=None, help="a KernelBench checkout")
        p.add_argument("--levels", type=int, nargs="+", default=[1, 2])
        p.add_argument("--json", default=None, help="also write the table as JSON here")
        p.add_argument("--rows", default=None, help="also write each problem's last row here (JSON lines)")
    p_run.add_argument("--parallel", type=int, default=8)
    p_run.add_argument("--device", default="cuda")
    p_run.add_argument("--deadline-s", type=float, default=540.0)
    p_evolve = sub.add_parser("evolve", help="evolve a subset of what run evaluated, from its seeds")
    p_evolve.add_argument("--kernelbench", type=Path, required=True, help="a KernelBench checkout")
    p_evolve.add_argument("--from", dest="source", type=Path, default=None, help="run's --out")
    p_evolve.add_argument(
        "--problems",
        nargs="+",
        default=None,
        metavar="LEVEL/NAME",
        help="evolve these (level1/38_L1Norm_ ...) instead of a subset of --from; seeds made afresh",
    )
    p_evolve.add_argument("--out", type=Path, required=True)
    p_evolve.add_argument("--count", type=int, default=20)
    p_evolve.add_argument("--budget", type=int, default=16)
    p_evolve.add_argument("--parallel", type=int, default=8)
    p_evolve.add_argument("--device", default="cuda")
    p_evolve.add_argument("--deadline-s", type=float, default=540.0)
    args = parser.parse_args(argv)
    if args.command == "evolve":
        return evolve(args)
    if args.command == "run":
        if args.kernelbench is None:
            parser.error("run needs --kernelbench")
        return run(args)
    table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
