"""Does torch.compile pick the same kernel configuration every time, and what does the pick cost? (GPU only.)

For each problem, a child process per mode compiles the problem's reference ``--repeats`` times (``torch._dynamo``
reset in between, Inductor's FX-graph and autotune caches off, so every compile autotunes again), records what
Inductor's runtime autotuner measured and kept for every kernel with several configurations, and times the
compiled model with ksmith's own loop (``timing.time_calls``, ``--blocks`` blocks of ``--trials`` calls, the
median of block medians):

* ``inductor``  -- torch.compile as it comes: each configuration's time is Inductor's benchmarker's minimum;
* ``steady``    -- inside ``ksmith_triton.inductor_tuning.steady_autotuning`` (what the evaluator's reference
  process uses since protocol 4): each configuration timed by ksmith's loop in interleaved rounds;
* ``force``     -- every configuration forced in turn (the autotuner is told all others failed), so each
  configuration's true cost in the compiled model is measured by the same loop.

    python benchmarks/reference_autotune.py --out reference_autotune.json

Prints a table last: per problem and mode, the configuration kept in each repeat and the compiled model's time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE.parent / "plugins" / "ksmith_problems" / "problems"
DEFAULT = ["mean_reduction", "matmul_bias_relu", "sum_reduction", "l2_norm", "softmax"]


def recording_autotuner(seen: list[dict[str, Any]], force: int | None):
    """Wrap Inductor's benchmark_all_configs: record its timings per configuration; with ``force``, report every
    configuration but that one as failed (inf), so the autotuner keeps it."""
    from torch._inductor.runtime import triton_heuristics as heuristics

    from ksmith_triton.inductor_tuning import config_label as label

    original = heuristics.CachingAutotuner.benchmark_all_configs

    def benchmark_all_configs(self, *args, **kwargs):
        timings = original(self, *args, **kwargs)
        configs = [label(launcher.config) for launcher in timings]
        entry = {
            "kernel": (self.inductor_meta or {}).get("kernel_name", self.fn.__name__),
            "inductor_ms": {label(k.config): round(float(v), 5) for k, v in timings.items()},
        }
        if force is not None:
            keep = sorted(configs)[force % len(configs)]
            timings = {k: (0.0 if label(k.config) == keep else float("inf")) for k in timings}
            entry["forced"] = keep
        entry["chosen"] = label(min(timings, key=timings.get).config)
        seen.append(entry)
        return timings

    heuristics.CachingAutotuner.benchmark_all_configs = benchmark_all_configs
    return original


def child(name: str, mode: str, force: int | None, repeats: int, blocks: int, trials: int) -> dict[str, Any]:
    import contextlib

    import torch
    import torch._inductor.config as inductor_config

    from ksmith_triton.child_common import load_problem_module, make_inputs, make_model
    from ksmith_triton.inductor_tuning import steady_autotuning
    from ksmith_triton.timing import reference_timers, time_calls

    inductor_config.fx_graph_cache = False
    inductor_config.autotune_local_cache = False
    problem = load_problem_module(next(PROBLEMS.rglob(f"{name}.py")).read_text(), None)
    model = make_model(problem.Model, problem, 1234, "cuda")
    input_sets = [make_inputs(problem, seed, "cuda") for seed in (11, 12, 13)]
    timers = reference_timers("cuda")
    runs = []
    for _ in range(repeats):
        torch._dynamo.reset()
        seen: list[dict[str, Any]] = []
        context = steady_autotuning() if mode == "steady" else contextlib.nullcontext({"picks": []})
        original = None if mode == "steady" else recording_autotuner(seen, force)
        try:
            with torch.no_grad(), context as record:
                compiled = torch.compile(model)
                compiled(*input_sets[0])
        finally:
            if original is not None:
                from torch._inductor.runtime import triton_heuristics as heuristics

                heuristics.CachingAutotuner.benchmark_all_configs = original
        torch.cuda.synchronize()
        block_medians = []
        for _ in range(blocks):
            with torch.no_grad():
                timed = time_calls("cuda", compiled, input_sets, timers, trials, 10)
            block_medians.append(statistics.median(timed.samples_ms))
        picks = seen or [
            {
                "kernel": p["kernel"],
                "ksmith_ms": {c["config"]: round(statistics.median(c["rounds_ms"]), 5) for c in p["configs"]},
                "chosen": p["chosen"],
            }
            for p in record["picks"]
        ]
        runs.append(
            {"picks": picks, "compiled_ms": statistics.median(block_medians), "blocks_ms": block_medians}
        )
    return {"problem": name, "mode": mode, "force": force, "runs": runs}


def run_child(name: str, mode: str, force: int | None, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        command = [sys.executable, __file__, "--child", name, mode, str(-1 if force is None else force)]
        command += [
            "--repeats",
            str(args.repeats),
            "--blocks",
            str(args.blocks),
            "--trials",
            str(args.trials),
        ]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.child_timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"problem": name, "mode": mode, "force": force, "error": done.stderr[-2000:]}
    return json.loads(lines[-1])


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["problem           mode      kernel configurations kept (per repeat) -> compiled ms (per repeat)"]
    for row in rows:
        tag = row["mode"] + ("" if row.get("force") is None else f"[{row['force']}]")
        if "error" in row:
            out.append(f"{row['problem']:<17} {tag:<9} ERROR {row['error'].splitlines()[-1:]}")
            continue
        kept = [" | ".join(p["chosen"] for p in run["picks"]) or "(no choice)" for run in row["runs"]]
        times = [f"{run['compiled_ms']:.4f}" for run in row["runs"]]
        distinct = sorted(set(kept))
        out.append(f"{row['problem']:<17} {tag:<9} {len(distinct)} distinct pick(s); ms {', '.join(times)}")
        for pick in distinct:
            out.append(f"{'':<28}{kept.count(pick)}x {pick}")
    return out


def most_configs(rows: list[dict[str, Any]], name: str) -> int:
    """The most configurations any tuned kernel of ``name`` had, in the runs measured so far."""
    counts = [
        len(pick.get("inductor_ms") or pick.get("ksmith_ms") or {})
        for row in rows
        if row["problem"] == name and "runs" in row
        for run in row["runs"]
        for pick in run["picks"]
    ]
    return max(counts, default=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--problems", nargs="+", default=DEFAULT)
    parser.add_argument("--modes", nargs="+", default=["inductor", "steady", "force"])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--max-forced", type=int, default=8, help="Configurations forced in turn, at most.")
    parser.add_argument("--child-timeout", type=float, default=240.0)
    parser.add_argument("--child", nargs=3, metavar=("PROBLEM", "MODE", "FORCE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, mode, force = args.child[0], args.child[1], int(args.child[2])
        result = child(name, mode, None if force < 0 else force, args.repeats, args.blocks, args.trials)
        print(json.dumps(result))
        return 0
    rows: list[dict[str, Any]] = []
    if args.out and args.out.exists():  # resume: problems and modes already measured are kept
        rows = json.loads(args.out.read_text())["rows"]
    done = {(r["problem"], r["mode"], r.get("force")) for r in rows if "error" not in r}
    for name in args.problems:
        for mode in [m for m in args.modes if m != "force"]:
            if (name, mode, None) not in done:
                rows.append(run_child(name, mode, None, args))
                print(table([rows[-1]])[-1], flush=True)
        if "force" in args.modes:
            for index in range(min(most_configs(rows, name), args.max_forced)):
                if (name, "force", index) not in done:
                    saved, args.repeats = args.repeats, 1
                    rows.append(run_child(name, "force", index, args))
                    args.repeats = saved
        if args.out:
            args.out.write_text(json.dumps({"rows": rows}, indent=1))
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
