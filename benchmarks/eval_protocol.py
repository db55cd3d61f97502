"""Benchmark of the evaluation protocol itself (run on a GPU machine; numbers go to docs/benchmarks.md).

Three measurements:

(a) stability -- one candidate evaluated N times (default 5), each a fresh evaluator call with fresh seeds;
    spread = max/min - 1 of the reported median runtimes (target <= 1 %).
(b) throughput -- evaluations per minute per GPU on L1-size problems: an evolution's workload (each problem's
    seed and single edits of it, every kernel compiled afresh) evaluated concurrently, after one warm pass
    that fills the reference cache (target >= 100 per minute per GPU, issue 16), with the GPU lock's timeline over it
    (``ksmith_triton/locktrace.py``; every hold is traced to ``OUT.locks.jsonl``).
(c) references -- ksmith's eager and torch.compile medians for every problem beside plain
    ``triton.testing.do_bench`` of the same eager reference.

    python benchmarks/eval_protocol.py --out bench.json
    python benchmarks/eval_protocol.py --problems DIR --stability-problem P.py --stability-candidate C.py

It prints a short table and writes everything as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from ksmith_triton.locks import LOCK_TRACE_ENV
from ksmith_triton.locktrace import read_trace, render, summarise

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_PROBLEMS = REPO / "plugins" / "ksmith_problems" / "problems"
CASES = REPO / "tests" / "triton" / "cases"


def problem_files(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.rglob("*.py") if not p.name.endswith(".seed.py") and not p.name.startswith("_")
    )


def pairs_in(directory: Path) -> list[tuple[Any, Any]]:
    from ksmith_core.errors import KsmithError
    from ksmith_core.loading import load_candidate, load_problem, seed_path_for

    found = []
    for path in problem_files(directory):
        try:
            problem = load_problem(path)
        except KsmithError:
            continue
        seed = seed_path_for(problem)
        if seed is not None:
            found.append((problem, load_candidate(seed)))
    return found


def stability(problem_path: Path, candidate_path: Path, options: Any, repeats: int) -> dict[str, Any]:
    from ksmith_core.loading import load_candidate, load_problem
    from ksmith_triton.evaluator import evaluate

    problem, candidate = load_problem(problem_path), load_candidate(candidate_path)
    evaluate(problem, candidate, options)  # warm: compiles, fills the reference cache
    runs = []
    for _ in range(repeats):
        verdict = evaluate(problem, candidate, options)
        runs.append(
            {
                "status": verdict.status.value,
                "runtime_ms": verdict.runtime_ms,
                "speedup": verdict.speedup,
                "eval_seconds": verdict.eval_seconds,
                "reasons": list(verdict.reasons),
            }
        )
    times = [r["runtime_ms"] for r in runs if r["runtime_ms"]]
    spread = max(times) / min(times) - 1 if len(times) == repeats else None
    return {"problem": str(problem_path), "candidate": str(candidate_path), "runs": runs, "spread": spread}


def median_details(verdicts: list[Any], field: str) -> dict[str, float]:
    """Median of each number in the verdicts' ``field`` mapping (``phases``, or ``details[field]``)."""
    return medians(
        getattr(verdict, field, None) if field == "phases" else verdict.details.get(field, {})
        for verdict in verdicts
    )


def median_reference_steps(verdicts: list[Any]) -> dict[str, dict[str, float]]:
    """Per request kind, the median of the reference process's host seconds per step over the verdicts
    (``details["reference_steps"]``: loading the candidate's outputs, the reference's outputs, the comparison)."""
    kinds = sorted({kind for v in verdicts for kind in v.details.get("reference_steps", {})})
    return {kind: medians(v.details.get("reference_steps", {}).get(kind) for v in verdicts) for kind in kinds}


def host_cpu_seconds() -> tuple[float, float] | None:
    """(busy, all) CPU seconds of the whole host since boot, from ``/proc/stat`` (every process, ksmith's and
    anything else); ``None`` where there is none. Two readings bracket a pass: busy over all is how full the
    host's CPUs were, busy over evaluations what one evaluation cost the host."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    total = sum(fields[:8])  # guest time is already inside user and nice
    return (total - idle) / ticks, total / ticks


def host_cpu_use(before: tuple[float, float] | None, after: tuple[float, float] | None, evaluations: int):
    """What the host's CPUs did between two :func:`host_cpu_seconds` readings: busy seconds per evaluation and
    the busy fraction of all CPUs."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    busy, total = after[0] - before[0], after[1] - before[1]
    return {
        "busy_s_per_evaluation": round(busy / max(1, evaluations), 2),
        "busy_fraction": round(busy / total, 3),
    }


def loop_per_call(verdict: Any) -> dict[str, float]:
    """A verdict's timed-loop parts (wall, and ``cpu_`` for its thread's CPU time) divided by its timed calls."""
    timing = verdict.details.get("timing") or {}
    calls = max(1, int(timing.get("calls") or 0))
    parts = {
        k: v for k, v in (timing.get("loop_ms") or {}).items() if k in ("inputs", "launch", "wait", "check")
    }
    cpu = {f"cpu_{k}": v for k, v in (timing.get("loop_cpu_ms") or {}).items() if k in parts}
    return {k: round(v / calls, 4) for k, v in {**parts, **cpu}.items()}


def medians(mappings: Any) -> dict[str, float]:
    """Median of each name's numbers over ``mappings`` (dicts of name to number; ``None`` counts as empty)."""
    found: dict[str, list[float]] = {}
    for values in mappings:
        for name, value in (values or {}).items():
            found.setdefault(name, []).append(value)
    return {name: statistics.median(values) for name, values in sorted(found.items())}


THROUGHPUT_PROBLEMS = (
    "relu",
    "gelu_tanh",
    "add_mul",
    "softmax",
    "log_softmax",
    "layernorm",
    "rmsnorm",
    "sum_reduction",
    "cross_entropy",
    "l2_norm",
)


def variants_of(seed: Any, count: int) -> list[Any]:
    """The seed and up to ``count - 1`` single edits of it by the mutate proposer: an evolution's workload,
    every one a different kernel that Triton must compile."""
    from ksmith_core.model import Candidate
    from ksmith_mutate.edits import possible_edits

    found, seen = [seed], {seed.source}
    for edit in possible_edits(seed.source):
        if len(found) >= count:
            break
        try:
            source = edit.source
        except Exception:  # noqa: BLE001 - an edit that does not render is skipped, as the proposer does
            continue
        if source not in seen:
            seen.add(source)
            found.append(Candidate.from_source(source, edit=repr(edit), edit_kind=edit.kind))
    return found


class GateSampler:
    """The memory gates' state (admission.py) sampled every ``every_s`` while the block runs: how many
    evaluations ran at once, how many waited for memory, and what they reserved."""

    def __init__(self, device: str, every_s: float = 0.25) -> None:
        import threading

        self.device, self.every_s = device, every_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from ksmith_triton import admission

        while not self._stop.wait(self.every_s):
            with admission._gates_lock:
                gates = list(admission._gates.values())
            snaps = [g.snapshot() for g in gates]
            self.samples.append(
                {
                    "running": sum(s["running"] for s in snaps),
                    "waiting": sum(s["waiting"] for s in snaps),
                    "reserved": sum(s["reserved"] for s in snaps),
                }
            )

    def __enter__(self) -> GateSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {}
        running = [s["running"] for s in self.samples]
        return {
            "samples": len(self.samples),
            "every_s": self.every_s,
            "running_mean": round(statistics.mean(running), 2),
            "running_max": max(running),
            "waiting_mean": round(statistics.mean(s["waiting"] for s in self.samples), 2),
            "reserved_gib_max": round(max(s["reserved"] for s in self.samples) / 2**30, 2),
        }


def throughput(
    pairs: list[tuple[Any, Any]], options: Any, workers: int, gpus: int, variants: int
) -> dict[str, Any]:
    """Evaluations per minute once reference timings are cached, with every candidate kernel compiled afresh.

    The workload is what an evolution run sends: for each problem, its seed and ``variants - 1`` single edits
    of it, interleaved across problems. A warm pass evaluates each seed once (it fills ksmith's reference cache:
    eager and torch.compile timings, once per problem and GPU, and starts the reference processes). The
    measured pass then points Triton at an empty kernel cache, so every kernel compiles as a new one would.
    """
    from concurrent.futures import ThreadPoolExecutor

    from ksmith_core.loading import load_candidate, load_problem
    from ksmith_triton.evaluator import evaluate
    from ksmith_triton.pool import POOL

    clock = time.monotonic()

    def judge(pair):
        verdict = evaluate(pair[0], pair[1], options)
        print(
            f"  [{time.monotonic() - clock:6.1f} s] {pair[0].name}: {verdict.status.value} in "
            f"{verdict.eval_seconds:.1f} s {dict(verdict.phases)} "
            f"{dict(verdict.details.get('worker_steps', {}))}",
            file=sys.stderr,
            flush=True,
        )
        return verdict

    work = []
    per_problem = [[(problem, c) for c in variants_of(seed, variants)] for problem, seed in pairs]
    for index in range(max((len(v) for v in per_problem), default=0)):
        work.extend(v[index] for v in per_problem if index < len(v))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        started = time.monotonic()
        warm = list(pool.map(judge, pairs))
        warm_seconds = time.monotonic() - started
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="ksmith-bench-triton-")
        judge((load_problem(CASES / "scale_add.py"), load_candidate(CASES / "scale_add_ok.py")))
        started, wall_started = time.monotonic(), time.time()
        spawned, forked = POOL.spawned, POOL.forked
        cpu_before = host_cpu_seconds()
        with GateSampler(options.device) as gate_samples:
            verdicts = list(pool.map(judge, work))
        seconds, wall_ended = time.monotonic() - started, time.time()
        host_cpu = host_cpu_use(cpu_before, host_cpu_seconds(), len(verdicts))
        spawned, forked = POOL.spawned - spawned, POOL.forked - forked
    # Isolation: the seeds were timed above while seven other evaluations ran; time them again one at a time.
    # If other evaluations' GPU work leaked into timed loops, the loaded runtimes would be the slower ones.
    alone = [evaluate(problem, seed, options) for problem, seed in pairs]
    seed_ids = {problem.name: seed.id for problem, seed in pairs}
    loaded = {p.name: v for (p, c), v in zip(work, verdicts) if c.id == seed_ids[p.name]}
    isolation = []
    for (problem, _), single in zip(pairs, alone):
        under_load = loaded.get(problem.name)
        if under_load is None or not under_load.runtime_ms or not single.runtime_ms:
            continue
        isolation.append(
            {
                "problem": problem.name,
                "under_load_ms": under_load.runtime_ms,
                "alone_ms": single.runtime_ms,
                "difference": under_load.runtime_ms / single.runtime_ms - 1,
                # The timed loop's host parts per call, wall and thread CPU time, loaded and alone: whether
                # the same loop's host work is slower beside other evaluations, and in which part.
                "loop_per_call_ms": {
                    "under_load": loop_per_call(under_load),
                    "alone": loop_per_call(single),
                },
            }
        )
    statuses: dict[str, int] = {}
    for verdict in verdicts:
        statuses[verdict.status.value] = statuses.get(verdict.status.value, 0) + 1
    phases = median_details(verdicts, "phases")
    steps = median_details(verdicts, "worker_steps")
    cpu_s = median_details(verdicts, "cpu_s")
    loop_ms = medians(v.details.get("timing", {}).get("loop_ms") for v in verdicts)
    loop_cpu_ms = medians(v.details.get("timing", {}).get("loop_cpu_ms") for v in verdicts)
    loop_switches = medians(v.details.get("timing", {}).get("loop_switches") for v in verdicts)
    check_ms = medians(v.details.get("timing", {}).get("check_ms") for v in verdicts)
    reference_steps = median_reference_steps(verdicts)
    per_minute = len(verdicts) / seconds * 60.0
    trace = os.environ.get(LOCK_TRACE_ENV)
    gpu_lock = (
        summarise(read_trace(Path(trace)), wall_started, wall_ended)
        if trace and Path(trace).exists()
        else None
    )
    return {
        "evaluations": len(verdicts),
        "problems": [p.name for p, _ in pairs],
        "variants_per_problem": variants,
        "seconds": seconds,
        "warm_pass_seconds": warm_seconds,
        "warm_pass_statuses": [v.status.value for v in warm],
        "workers": workers,
        "gpus": gpus,
        "per_minute": per_minute,
        "per_minute_per_gpu": per_minute / max(1, gpus),
        "statuses": statuses,
        "median_phase_seconds": phases,
        "median_worker_step_seconds": steps,
        # Host CPU seconds per evaluation: its candidate worker, its reference requests, its evaluator thread
        # (median over evaluations; details["cpu_s"]); and the whole host's CPUs over the measured pass.
        "median_cpu_seconds": cpu_s,
        "host_cpu": host_cpu,
        # Inside the candidate's timed loop (the exclusive lock): ms per part, median over evaluations.
        "median_timing_loop_ms": loop_ms,
        # The same parts in the loop thread's CPU time, and its context switches over the loop.
        "median_timing_loop_cpu_ms": loop_cpu_ms,
        "median_timing_loop_switches": loop_switches,
        "median_timed_check_ms": check_ms,
        # The reference process's host seconds per step of each request kind, median over evaluations.
        "median_reference_steps_s": reference_steps,
        "median_eval_seconds": statistics.median(v.eval_seconds or 0.0 for v in verdicts),
        # candidate workers started during the measured pass, and how many of them were forked (forkserver.py)
        "workers_started": spawned,
        "workers_forked": forked,
        # The GPU lock's timeline over the measured pass (ksmith_triton/locktrace.py): what runs one at a time.
        "gpu_lock": gpu_lock,
        # The memory gate over the measured pass (admission.py): evaluations admitted, waiting, bytes reserved.
        "memory_gate": gate_samples.summary(),
        "isolation": isolation,
        "max_isolation_difference": max((abs(r["difference"]) for r in isolation), default=None),
        "per_evaluation": [
            {
                "problem": p.name,
                "edit": c.edit,
                "status": v.status.value,
                "speedup": v.speedup,
                "runtime_ms": v.runtime_ms,
                "eval_seconds": v.eval_seconds,
                "phases": dict(v.phases),
                "timing": {
                    k: x for k, x in v.details.get("timing", {}).items() if k != "fully_checked_calls"
                },
                "memory": v.details.get("memory"),
                "reference_steps": v.details.get("reference_steps"),
                "reasons": list(v.reasons)[:2],
            }
            for (p, c), v in zip(work, verdicts)
        ],
    }


def references(paths: list[Path], options: Any) -> list[dict[str, Any]]:
    """ksmith's cached eager / torch.compile medians, and do_bench of the same eager model in this process."""
    import torch
    import triton.testing

    from ksmith_core.loading import load_problem
    from ksmith_triton.child_common import load_problem_module, make_inputs, make_model
    from ksmith_triton.evaluator import Evaluation, reference_worker

    rows = []
    for path in paths:
        problem = load_problem(path)
        row: dict[str, Any] = {"problem": problem.name}
        try:
            evaluation = Evaluation(problem, None, options)  # type: ignore[arg-type]
            worker = reference_worker(problem, options.device, evaluation.gpu, options.use_small)
            reference = evaluation.reference_timing(worker, *evaluation.timing_plan())
            row["eager_ms"] = statistics.median(reference["eager_ms"])
            row["compile_ms"] = (
                statistics.median(reference["compile_ms"]) if reference.get("compile_ms") else None
            )
        except Exception as exc:  # noqa: BLE001 - one broken problem does not stop the table
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
            continue
        try:
            module = load_problem_module(
                problem.source, dict(problem.small_sizes) if options.use_small else None
            )
            model = make_model(module.Model, module, 0, options.device)
            inputs = make_inputs(module, 1, options.device)

            def call(model=model, inputs=inputs):
                with torch.no_grad():
                    return model(*inputs)

            row["do_bench_ms"] = float(triton.testing.do_bench(call, return_mode="median"))
            row["eager_vs_do_bench"] = row["eager_ms"] / row["do_bench_ms"] - 1
        except Exception as exc:  # noqa: BLE001 - do_bench needs a GPU; the ksmith numbers still stand
            row["do_bench_error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="Where to write the JSON results.")
    parser.add_argument(
        "--problems",
        type=Path,
        default=DEFAULT_PROBLEMS if DEFAULT_PROBLEMS.is_dir() else CASES,
        help="Directory of problems (NAME.py with NAME.seed.py beside it).",
    )
    parser.add_argument("--stability-problem", type=Path, default=None)
    parser.add_argument("--stability-candidate", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[4],
        help="Concurrent evaluations (threads) for throughput; several values measure each in turn.",
    )
    parser.add_argument(
        "--variants", type=int, default=8, help="Candidates per problem in the throughput workload."
    )
    parser.add_argument(
        "--throughput-problems",
        nargs="+",
        default=list(THROUGHPUT_PROBLEMS),
        help="Problem names (in --problems) for the throughput workload.",
    )
    parser.add_argument(
        "--forkserver",
        choices=["on", "off", "both"],
        default="on",
        help="Candidate workers forked from a pre-imported server (on), started as new interpreters (off), or "
        "each workload measured both ways in turn, off first, on the same machine and reference cache (both).",
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--timing-trials", type=int, default=100)
    parser.add_argument(
        "--skip", choices=["stability", "throughput", "references"], action="append", default=[]
    )
    args = parser.parse_args(argv)

    from ksmith_core.environment import default_device, device_facts, versions
    from ksmith_core.model import EvalOptions
    from ksmith_triton import PROTOCOL_VERSION
    from ksmith_triton.locks import visible_gpu_count

    # Every process of the run appends its holds of the GPU's lock here (workers inherit the variable).
    os.environ.setdefault(LOCK_TRACE_ENV, str(args.out.with_suffix(".locks.jsonl").resolve()))
    device = args.device or default_device()
    cache_dir = tempfile.mkdtemp(
        prefix="ksmith-bench-cache-"
    )  # measured afresh: no reference from earlier runs
    options = EvalOptions(device=device, timing_trials=args.timing_trials, cache_dir=cache_dir)
    pairs = pairs_in(args.problems)
    results: dict[str, Any] = {
        "protocol": PROTOCOL_VERSION,
        "versions": versions(),
        "device": device_facts(device),
        "options": {"timing_trials": args.timing_trials, "workers": args.workers},
    }

    if "stability" not in args.skip:
        if args.stability_problem and args.stability_candidate:
            prob_path, cand_path = args.stability_problem, args.stability_candidate
        elif pairs:
            prob_path, cand_path = (
                pairs[0][0].path,
                pairs[0][0].path.with_name(pairs[0][0].path.stem + ".seed.py"),
            )
        else:
            prob_path, cand_path = CASES / "scale_add.py", CASES / "scale_add_ok.py"
        results["stability"] = stability(prob_path, cand_path, options, args.repeats)
        s = results["stability"]
        runtimes = ", ".join(f"{r['runtime_ms']:.4f}" for r in s["runs"] if r["runtime_ms"])
        spread = (
            f"{s['spread']:.2%}" if s["spread"] is not None else f"n/a ({[r['status'] for r in s['runs']]})"
        )
        print(
            f"(a) stability: {Path(s['problem']).name} x{args.repeats}: runtimes {runtimes} ms; max/min - 1 = {spread}"
        )

    if "throughput" not in args.skip and pairs:
        gpus = max(1, visible_gpu_count()) if device == "cuda" else 1
        chosen = [pair for pair in pairs if pair[0].name in set(args.throughput_problems)] or pairs
        results["throughput"] = []
        modes = ["off", "on"] if args.forkserver == "both" else [args.forkserver]
        for workers, forkserver in [(w, m) for w in args.workers for m in modes]:
            os.environ["KSMITH_FORKSERVER"] = "1" if forkserver == "on" else "0"
            t = throughput(chosen, options, workers, gpus, args.variants)
            t["forkserver"] = forkserver
            results["throughput"].append(t)
            print(
                f"(b) throughput, fork server {forkserver}: {t['evaluations']} evaluations of {len(chosen)} problems in {t['seconds']:.1f} s "
                f"= {t['per_minute']:.1f}/min ({t['per_minute_per_gpu']:.1f}/min/GPU, {workers} workers); "
                f"statuses {t['statuses']}; workers started {t['workers_started']}, "
                f"forked {t['workers_forked']}; median phases {t['median_phase_seconds']}; "
                f"median worker steps {t['median_worker_step_seconds']}"
            )
            exposed = sum(e["timing"].get("exposed_calls", 0) for e in t["per_evaluation"] if e["timing"])
            print(f"    timed calls launched slower than their spin (all evaluations): {exposed}")
            print(
                f"    host CPU: median seconds per evaluation {t.get('median_cpu_seconds')}; the whole host over the "
                f"pass {t.get('host_cpu')}"
            )
            print(f"    timed loop, median ms per part: {t['median_timing_loop_ms']}")
            print(f"    timed loop, the thread's CPU ms per part: {t.get('median_timing_loop_cpu_ms')}")
            print(f"    timed loop, context switches: {t.get('median_timing_loop_switches')}")
            print(f"    after-call checks, median ms per part: {t['median_timed_check_ms']}")
            print(f"    memory gate: {t['memory_gate']}")
            for kind, steps in t["median_reference_steps_s"].items():
                print(f"    reference process, {kind}, median s per step: {steps}")
            if t["gpu_lock"]:
                print(textwrap.indent(render(t["gpu_lock"]), "    "))
            for row in t["isolation"]:
                print(
                    f"    isolation {row['problem']:<16} under load {row['under_load_ms']:.4f} ms, "
                    f"alone {row['alone_ms']:.4f} ms ({row['difference']:+.2%})"
                )
                loops = row.get("loop_per_call_ms") or {}
                if loops.get("alone"):
                    print(f"      loop per call, loaded {loops.get('under_load')}; alone {loops['alone']}")

    if "references" not in args.skip:
        rows = results["references"] = references(problem_files(args.problems), options)
        print("(c) references (ms)")
        print(f"    {'problem':<28}{'eager':>12}{'compile':>12}{'do_bench':>12}{'diff':>9}")
        for row in rows:
            if "error" in row:
                print(f"    {row['problem']:<28}  error: {row['error'][:70]}")
                continue
            compiled = f"{row['compile_ms']:.4f}" if row.get("compile_ms") else "-"
            bench = f"{row['do_bench_ms']:.4f}" if "do_bench_ms" in row else "-"
            diff = f"{row['eager_vs_do_bench']:.1%}" if "do_bench_ms" in row else "-"
            print(f"    {row['problem']:<28}{row['eager_ms']:>12.4f}{compiled:>12}{bench:>12}{diff:>9}")

    args.out.write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
