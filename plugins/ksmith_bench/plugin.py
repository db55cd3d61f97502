"""Adds ``ksmith bench`` to the command line (the bench itself lives in :mod:`ksmith_bench.bench`)."""

from __future__ import annotations

from pathlib import Path

import click

from ksmith_core import hookimpl
from ksmith_core.clitools import (
    backend_option,
    capability_options,
    console,
    device_options,
    emit_json,
    eval_options,
    fmt_speedup,
    output_dir,
)


@hookimpl
def ksmith_register_commands(cli):
    cli.add_command(bench)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--evolve", "do_evolve", is_flag=True, help="Evolve each problem from its seed instead of one evaluation."
)
@click.option("--budget", type=int, default=None, help="Evaluations per problem with --evolve (default 40).")
@click.option(
    "--stop-at-roofline",
    type=float,
    default=None,
    metavar="FRACTION",
    help="With --evolve: stop a problem once its best runs at this fraction of its roofline (default 0.95; 0: never).",
)
@click.option(
    "--reserve",
    type=click.IntRange(min=0),
    default=0,
    metavar="N",
    help="With --evolve: N more evaluations, given after every problem's first run, half a budget at a time, "
    "to the problem with the most room (1/roofline fraction on a GPU, else 1/speedup vs torch.compile); "
    "a round that finds nothing better ends that problem's share.",
)
@click.option("--proposer", default=None, help="Proposer for --evolve (default mutate).")
@click.option("--parallel", type=int, default=None, help="Evaluations at once (default 1).")
@click.option("--executor", default=None, help="How evaluations are dispatched (default local).")
@click.option(
    "--seed-from",
    "seed_from",
    default=None,
    metavar="METHOD",
    help="Problems with no ModelNew get one first: inductor, llm or vllm (kept in OUT/seeds/, reused on resume).",
)
@click.option(
    "--candidates",
    "candidates_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory of ModelNew files named like the problems (default: the seed beside each problem).",
)
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Results directory; rerunning with the same one resumes (default ./ksmith-bench).",
)
@device_options
@backend_option
@click.option("--json", "as_json", is_flag=True)
def bench(
    paths,
    do_evolve,
    budget,
    stop_at_roofline,
    reserve,
    proposer,
    parallel,
    executor,
    seed_from,
    candidates_dir,
    out_dir,
    device,
    timeout,
    small,
    backend,
    as_json,
    **capability_values,
):
    """Evaluate (or --evolve) every problem in PATHS (files or directories, KernelBench levels included).

    A directory `ksmith harvest` wrote goes largest share of the model's time first.

    Reports per problem status, speedup vs eager and torch.compile and roofline fraction, then correct rate,
    fast_0 / fast_1 against both references, and mean and geometric-mean speedups. A problem that cannot be
    loaded, set up or seeded gets a row saying why, and the bench goes on.
    """
    from ksmith_bench.bench import Bench, collect_problems
    from ksmith_core.capabilities import SeedMethod
    from ksmith_core.engine import executor_for, proposer_for
    from ksmith_core.errors import ConfigError
    from ksmith_core.registry import lookup
    from ksmith_core.run import RunConfig

    problem_paths = collect_problems(paths)
    if backend:
        from ksmith_core.capabilities import Backend

        lookup(Backend, backend)  # an unknown name fails now, not once per problem
    executor_options = capability_options(executor_for(executor), capability_values)  # unknown: fails now
    out_dir = output_dir(out_dir or Path("ksmith-bench"))
    seed_options = capability_options(lookup(SeedMethod, seed_from), capability_values) if seed_from else {}
    overrides = {
        k: v
        for k, v in {"budget": budget, "parallel": parallel, "executor": executor, "backend": backend}.items()
        if v is not None
    }
    overrides["executor_options"] = executor_options
    if stop_at_roofline is not None:
        overrides["stop_at_roofline"] = stop_at_roofline or None  # 0 turns the rule off
    if do_evolve:
        chosen = proposer_for(proposer)
        overrides["proposer"] = chosen.name
        overrides["proposer_options"] = capability_options(chosen, capability_values)
    config = RunConfig(eval=eval_options(device, timeout, None, None, small), **overrides)
    progress = console(stderr=True)

    def on_row(row):
        progress.print(
            f"{row['problem']:<32} {row['status']:<14} {fmt_speedup(row['speedup']):>9} vs eager "
            f"{fmt_speedup(row['speedup_vs_compile']):>9} vs compile",
            highlight=False,
            markup=False,
        )

    if reserve and not do_evolve:
        raise ConfigError("--reserve gives evaluations to evolutions: use it with --evolve")
    result = Bench(out_dir, config, do_evolve, candidates_dir, seed_from, seed_options, reserve).run(
        problem_paths, on_row
    )
    if as_json:
        emit_json(result)
        return
    print_bench(result)


def print_bench(result) -> None:
    from rich.table import Table

    table = Table("problem", "status", "vs eager", "vs compile", "roofline", "note")
    for row in result["rows"]:
        note = ""
        if row["status"] == "ok" and (row.get("speedup_vs_compile") or 2) < 1.0:
            note = "slower than torch.compile"
        elif row["status"] != "ok" and row.get("reasons"):
            note = row["reasons"][0][:100]
        if row.get("stop_reason"):  # an evolved row says why its run stopped
            note = f"{note}; stopped: {row['stop_reason']}" if note else f"stopped: {row['stop_reason']}"
        roof = row.get("roofline_fraction")
        table.add_row(
            row["problem"],
            row["status"],
            fmt_speedup(row["speedup"]),
            fmt_speedup(row["speedup_vs_compile"]),
            "-" if roof is None else f"{roof:.2f}",
            note,
        )
    out = console()
    out.print(table)
    s = result["summary"]

    def pct(v):
        return "-" if v is None else f"{100 * v:.0f}%"

    out.print(
        f"correct {s['correct']}/{s['problems']} ({pct(s['correct_rate'])}); fast_1 vs eager {pct(s['fast_1_eager'])}, "
        f"vs compile {pct(s['fast_1_compile'])}; geomean speedup {fmt_speedup(s['geomean_speedup_eager'])} vs eager, "
        f"{fmt_speedup(s['geomean_speedup_compile'])} vs compile"
        + (" [interpreted CPU timings]" if s["interpreted"] else "")
    )
    for bound, group in s.get("by_bound", {}).items():
        out.print(
            f"{bound}-bound ({len(group['problems'])}): geomean {fmt_speedup(group['geomean_speedup_compile'])} vs "
            f"compile; kernels at the roofline would reach {fmt_speedup(group['headroom_geomean_vs_compile'])}"
        )
    if s["slower_than_compile"]:
        out.print("slower than torch.compile: " + ", ".join(s["slower_than_compile"]))
    if s.get("not_evaluated"):
        counts = ", ".join(f"{status} {n}" for status, n in s["not_evaluated"].items())
        out.print(f"not evaluated: {counts} (each row's reason says why)")
