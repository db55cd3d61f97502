"""Evaluations per minute with the ``ray`` executor on 1 and on 2 GPUs, and a fault run (issue 17).

Run on a machine with two GPUs (numbers go to docs/benchmarks.md):

    python benchmarks/ray_scaling.py --out ray_scaling.json

The workload is the one ``benchmarks/eval_protocol.py`` measures throughput with: each problem's seed and
single edits of it by the mutate proposer (every one a kernel Triton compiles afresh), interleaved across
problems. Each configuration gets a fresh local Ray cluster with ``num_gpus`` GPUs and a fresh Triton kernel
cache; every actor first evaluates each problem's seed (warm: reference processes started, reference timings
cached on that GPU, outside the measured time); then the workload runs through ``evaluate_all(..., "ray")``
with ``--ray-slots`` evaluations per actor and ``slots x GPUs`` in flight.

Configurations, in order (``--configs`` picks some):

- ``local1``: the local executor on GPU 0 alone (every job pinned there), ``slots`` in flight (what a run
  without Ray does);
- ``ray1``: Ray, one GPU;
- ``ray2``: Ray, two GPUs -- the target is ``ray2 / ray1 >= 1.8``;
- ``fault2``: Ray, two GPUs, one busy actor killed (``ray.kill``) ``--kill-after`` seconds into the measured
  pass. Lost = evaluations whose verdict is ``WORKER_LOST`` or whose status differs from ``ray2``'s for the
  same candidate beyond timing noise (target 0); repeated = evaluations that ran again after their actor died.

Each configuration also reports the host's busy CPU fraction and, from the lock trace (``KSMITH_GPU_LOCK_TRACE``,
written beside ``--out``), the fraction of the measured pass each GPU's lock spent timing, draining, shared or
idle. ``--worker-niceness N`` starts the local clusters with ``RAY_worker_niceness=N`` (Ray's default is 15).

The results file is rewritten after every configuration, so a run cut short keeps what it finished; a
second call with ``--resume`` skips the configurations already in it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from eval_protocol import (  # noqa: E402
    DEFAULT_PROBLEMS,
    THROUGHPUT_PROBLEMS,
    host_cpu_seconds,
    host_cpu_use,
    median_details,
    median_reference_steps,
    medians,
    pairs_in,
    variants_of,
)
from lock_holds import per_gpu_use  # noqa: E402

from ksmith_ray.executor import RAY_NICENESS_ENV  # noqa: E402
from ksmith_triton.locks import LOCK_TRACE_ENV  # noqa: E402
from ksmith_triton.locktrace import read_trace  # noqa: E402

CONFIGS = ("local1", "ray1", "ray2", "fault2")


def workload(pairs: list[tuple[Any, Any]], variants: int, options: Any) -> tuple[list[Any], list[Any]]:
    """(warm jobs: one per problem, measured jobs: seed + edits, interleaved across problems)."""
    from ksmith_core.capabilities import EvalJob

    warm = [EvalJob(problem, seed, options) for problem, seed in pairs]
    per_problem = [
        [EvalJob(problem, c, options) for c in variants_of(seed, variants)] for problem, seed in pairs
    ]
    measured = []
    for index in range(max((len(v) for v in per_problem), default=0)):
        measured.extend(v[index] for v in per_problem if index < len(v))
    return warm, measured


def on_gpu_zero(jobs: list[Any]) -> list[Any]:
    """The jobs pinned to GPU 0 (``gpu_index``): without it the local pool spreads them over every GPU."""
    from dataclasses import replace

    return [replace(job, options=replace(job.options, gpu_index=0)) for job in jobs]


def summary(name: str, jobs: list[Any], verdicts: list[Any], seconds: float, gpus: int, **extra) -> dict:
    statuses: dict[str, int] = {}
    for verdict in verdicts:
        statuses[verdict.status.value] = statuses.get(verdict.status.value, 0) + 1
    return {
        "config": name,
        "gpus": gpus,
        "evaluations": len(verdicts),
        "seconds": seconds,
        "per_minute": len(verdicts) / seconds * 60.0,
        "statuses": statuses,
        "median_eval_seconds": statistics.median(v.eval_seconds or 0.0 for v in verdicts),
        "median_phase_seconds": median_details(verdicts, "phases"),
        "median_worker_step_seconds": median_details(verdicts, "worker_steps"),
        "median_cpu_seconds": median_details(verdicts, "cpu_s"),
        # Which of the reference process's steps stretch when both GPUs work (loading the outputs, or the rest).
        "median_reference_steps_s": median_reference_steps(verdicts),
        # Where the exclusive timing hold's time goes (making the timing inputs is "before"), and the checks'.
        "median_timing_loop_ms": medians(v.details.get("timing", {}).get("loop_ms") for v in verdicts),
        "median_timing_check_ms": medians(v.details.get("timing", {}).get("check_ms") for v in verdicts),
        # The loop's own CPU time beside its wall time: a slower CPU shows in both, waiting in the wall alone.
        "median_timing_loop_cpu_ms": medians(
            v.details.get("timing", {}).get("loop_cpu_ms") for v in verdicts
        ),
        "median_timing_loop_switches": medians(
            v.details.get("timing", {}).get("loop_switches") for v in verdicts
        ),
        # Memory the loop asked the driver for (segments, pinned blocks): each such call can wait on the host.
        "median_timing_loop_allocations": medians(
            v.details.get("timing", {}).get("loop_allocations") for v in verdicts
        ),
        # And what the trials asked for inside their shared hold.
        "median_trial_allocations": medians(v.details.get("trial_allocations") for v in verdicts),
        "median_trial_steps_ms": medians(v.details.get("trial_steps_ms") for v in verdicts),
        "median_timing_loop_ms_by_gpu": {
            gpu: medians(
                v.details.get("timing", {}).get("loop_ms")
                for v in verdicts
                if str(v.details.get("gpu_uuid") or v.details.get("gpu")) == gpu
            )
            for gpu in sorted({str(v.details.get("gpu_uuid") or v.details.get("gpu")) for v in verdicts})
        },
        "per_evaluation": [
            {
                "problem": job.problem.name,
                "candidate": job.candidate.id,
                "status": v.status.value,
                "runtime_ms": v.runtime_ms,
                "speedup": v.speedup,
                "gpu": v.details.get("gpu_uuid") or v.details.get("gpu"),
                "worker_losses": v.details.get("worker_losses"),
                "reasons": list(v.reasons)[:2],
            }
            for job, v in zip(jobs, verdicts)
        ],
        **extra,
    }


def gpu_lock_use(wall_from: float, wall_to: float) -> dict[str, dict] | None:
    """Per GPU, how its lock was used over ``[wall_from, wall_to]`` (``lock_holds.per_gpu_use``): the states'
    fractions, and how long each kind of hold lasted (with both GPUs busy, the holds that grow are the shared
    cost)."""
    trace = os.environ.get(LOCK_TRACE_ENV)
    if not trace or not Path(trace).exists():
        return None
    return per_gpu_use(read_trace(Path(trace)), wall_from, wall_to)


def run_local(warm, measured, slots: int) -> dict:
    from ksmith_core.engine import evaluate_all

    evaluate_all(warm, slots, "local")
    started, cpu, wall = time.monotonic(), host_cpu_seconds(), time.time()
    verdicts = evaluate_all(measured, slots, "local")
    seconds = time.monotonic() - started
    host_cpu = host_cpu_use(cpu, host_cpu_seconds(), len(verdicts))
    ended = time.time()
    lock = gpu_lock_use(wall, ended)
    return summary(
        "local1", measured, verdicts, seconds, 1, host_cpu=host_cpu, gpu_lock=lock, wall_window=[wall, ended]
    )


def run_ray(name: str, warm, measured, gpus: int, slots: int, kill_after: float | None) -> dict:
    import ray

    from ksmith_core.engine import evaluate_all
    from ksmith_ray.executor import close_pool, pool_for

    ray.init(num_gpus=gpus, include_dashboard=False, logging_level="WARNING")
    try:
        pool = pool_for({"slots": slots})
        actors = pool.start_all()
        where = ray.get([actor.ready.remote() for actor in actors])
        # Warm every actor on every problem (its own reference processes and its GPU's reference timings).
        ray.get([actor.evaluate.remote(job) for actor in actors for job in warm])
        killed: list[dict] = []

        def killer() -> None:
            time.sleep(kill_after or 0.0)
            busy = pool.busy_actors()
            if busy:
                victim = busy[0]
                killed.append({"at_s": kill_after, "actor": ray.get(victim.ready.remote(), timeout=30)})
                ray.kill(victim, no_restart=True)

        thread = threading.Thread(target=killer, daemon=True) if kill_after is not None else None
        started, cpu, wall = time.monotonic(), host_cpu_seconds(), time.time()
        if thread:
            thread.start()
        verdicts = evaluate_all(measured, slots * gpus, "ray", {"slots": slots})
        seconds = time.monotonic() - started
        host_cpu = host_cpu_use(cpu, host_cpu_seconds(), len(verdicts))
        ended = time.time()
        lock = gpu_lock_use(wall, ended)
        if thread:
            thread.join(timeout=5)
        lost_workers = [v for v in verdicts if any(r.startswith("WORKER_LOST") for r in v.reasons)]
        repeated = [v for v in verdicts if v.details.get("worker_losses")]
        return summary(
            name,
            measured,
            verdicts,
            seconds,
            gpus,
            actors=where,
            host_cpu=host_cpu,
            gpu_lock=lock,
            wall_window=[wall, ended],  # the measured pass on the wall clock, as the lock trace records holds
            slots=slots,
            killed=killed,
            actors_lost=pool.lost,
            actors_started=pool.started,
            worker_lost_verdicts=len(lost_workers),
            repeated_evaluations=len(repeated),
        )
    finally:
        close_pool()
        ray.shutdown()


def lost_against(fault: dict, clean: dict) -> list[dict]:
    """Evaluations of the fault run that ended otherwise than in the clean run: a lost evaluation."""
    clean_status = {(r["problem"], r["candidate"]): r["status"] for r in clean["per_evaluation"]}
    return [
        r
        for r in fault["per_evaluation"]
        if r["status"] != clean_status.get((r["problem"], r["candidate"]))
        or any(reason.startswith("WORKER_LOST") for reason in r["reasons"])
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--problems", type=Path, default=DEFAULT_PROBLEMS)
    parser.add_argument("--throughput-problems", nargs="+", default=list(THROUGHPUT_PROBLEMS))
    parser.add_argument("--variants", type=int, default=8, help="Candidates per problem (seed + edits).")
    parser.add_argument("--slots", type=int, default=8, help="Evaluations at once per GPU (--ray-slots).")
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument("--kill-after", type=float, default=15.0, help="Seconds into fault2's measured pass.")
    parser.add_argument(
        "--worker-niceness",
        type=int,
        default=None,
        help="Niceness of the local cluster's workers (RAY_worker_niceness; Ray's default is 15).",
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--resume", action="store_true", help="Keep the configurations already in --out.")
    args = parser.parse_args(argv)

    from ksmith_core.environment import device_facts, versions
    from ksmith_core.model import EvalOptions

    # Every hold of every GPU's lock, by the driver, the actors and their workers (they inherit the variable).
    os.environ.setdefault(LOCK_TRACE_ENV, str(args.out.with_suffix(".locks.jsonl").resolve()))
    if args.worker_niceness is not None:
        os.environ[RAY_NICENESS_ENV] = str(args.worker_niceness)  # read by the raylet ray.init starts
    results: dict[str, Any] = {}
    if args.resume and args.out.exists():
        results = json.loads(args.out.read_text())
    results.setdefault("versions", versions())
    results.setdefault("device", device_facts(args.device))
    results.setdefault("ray_worker_niceness", os.environ.get(RAY_NICENESS_ENV, "Ray's default"))
    results.setdefault("configs", {})
    cache_dir = tempfile.mkdtemp(prefix="ksmith-ray-scaling-cache-")
    options = EvalOptions(device=args.device, cache_dir=cache_dir)
    chosen = set(args.throughput_problems)
    pairs = [pair for pair in pairs_in(args.problems) if pair[0].name in chosen]
    warm, measured = workload(pairs, args.variants, options)
    print(f"{len(pairs)} problems, {len(measured)} evaluations per configuration", file=sys.stderr)

    for name in args.configs:
        if name in results["configs"]:
            continue
        # A fresh Triton kernel cache for each configuration: each compiles the workload's kernels anew.
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"ksmith-ray-scaling-triton-{name}-")
        if name == "local1":
            # GPU 0 alone: the driver's CUDA is initialised already (device facts), so hiding GPU 1 from it takes
            # pinning every job; CUDA_VISIBLE_DEVICES still reaches its workers.
            os.environ["CUDA_VISIBLE_DEVICES"] = "0"
            try:
                row = run_local(on_gpu_zero(warm), on_gpu_zero(measured), args.slots)
            finally:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            gpus = 1 if name == "ray1" else 2
            kill = args.kill_after if name == "fault2" else None
            row = run_ray(name, warm, measured, gpus, args.slots, kill)
        results["configs"][name] = row
        args.out.write_text(json.dumps(results, indent=2, default=str))
        print(
            f"{name}: {row['per_minute']:.1f}/min {row['statuses']}; median phases {row['median_phase_seconds']}; "
            f"median CPU seconds {row['median_cpu_seconds']}; host CPU {row.get('host_cpu')}; "
            f"timed loop ms {row['median_timing_loop_ms']}; CPU ms {row['median_timing_loop_cpu_ms']}; "
            f"switches {row['median_timing_loop_switches']}; allocations {row['median_timing_loop_allocations']}; trial allocations {row.get('median_trial_allocations')}; trial steps ms {row.get('median_trial_steps_ms')}; by GPU {row['median_timing_loop_ms_by_gpu']}; "
            f"GPU lock {row.get('gpu_lock')}",
            file=sys.stderr,
            flush=True,
        )

    configs = results["configs"]
    if "fault2" in configs and "ray2" in configs:
        lost = lost_against(configs["fault2"], configs["ray2"])
        configs["fault2"]["lost_evaluations"] = len(lost)
        configs["fault2"]["lost_detail"] = lost
    if "ray1" in configs and "ray2" in configs:
        results["scaling_2_over_1"] = configs["ray2"]["per_minute"] / configs["ray1"]["per_minute"]
    args.out.write_text(json.dumps(results, indent=2, default=str))

    print(f"\n{'config':<8}{'GPUs':>5}{'evals':>7}{'seconds':>9}{'per min':>9}  statuses")
    for name, row in configs.items():
        print(
            f"{name:<8}{row['gpus']:>5}{row['evaluations']:>7}{row['seconds']:>9.1f}{row['per_minute']:>9.1f}  "
            f"{row['statuses']}"
        )
    if "scaling_2_over_1" in results:
        print(f"ray2 / ray1 = {results['scaling_2_over_1']:.2f}x (target >= 1.8x)")
    if "lost_evaluations" in configs.get("fault2", {}):
        f = configs["fault2"]
        print(
            f"fault2: actors killed {len(f['killed'])}, actors lost {f['actors_lost']}, evaluations lost "
            f"{f['lost_evaluations']} (target 0), repeated {f['repeated_evaluations']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
