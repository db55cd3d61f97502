"""The ``ksmith`` command line: a thin layer over the engine, the store and the registry.

Every failure a user can cause -- a missing file, a file that is not a problem, an unknown plugin, a bad
option -- ends as one line on stderr and exit code 2. Listings and reports take ``--json``; with it stdout
carries exactly one JSON document and nothing else (progress goes to stderr). Plugins add commands
(``ksmith_register_commands``: ``bench``, ``report``) and capabilities add options (the LLM proposer's
``--llm-*``) when the command line starts (:func:`build`).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from ksmith_core import __version__
from ksmith_core.clitools import (
    backend_option,
    capability_options,
    console,
    device_options,
    emit_json,
    eval_options,
    fmt_speedup,
    output_file,
)
from ksmith_core.errors import ConfigError, KsmithError

EXIT_USAGE = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="ksmith")
@click.option("-v", "--verbose", count=True, help="More log output on stderr.")
def cli(verbose: int) -> None:
    """ksmith evolves fast, verified Triton kernels for PyTorch operators.

    \b
    Quick start:
      ksmith problems                         list installed problems
      ksmith eval PROBLEM CANDIDATE --json    judge one kernel
      ksmith evolve PROBLEM --budget 20       evolve from the problem's seed kernel
      ksmith show RUN / ksmith best RUN -o best.py
    """
    logging.getLogger().setLevel(logging.WARNING - 10 * min(verbose, 2))


# ---------------------------------------------------------------------------------------------------------------
# eval
# ---------------------------------------------------------------------------------------------------------------


@cli.command("eval")
@click.argument("problem")
@click.argument("candidate", type=click.Path(dir_okay=False, path_type=Path))
@device_options
@backend_option
@click.option(
    "--trials", type=int, default=None, help="Correctness trials, each with fresh seeds (default 5)."
)
@click.option("--timing-trials", type=int, default=None, help="Timed runs on the GPU (default 100).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
def eval_cmd(problem, candidate, device, timeout, small, backend, trials, timing_trials, as_json):
    """Judge CANDIDATE (a module defining ModelNew) against PROBLEM (a KernelBench file or a problem name).

    Exit code 0 whenever a verdict was reached, failing ones included; 2 for unusable input.
    """
    from ksmith_core.engine import evaluate
    from ksmith_core.loading import load_candidate, resolve_problem, with_backend

    prob = with_backend(resolve_problem(problem), backend)
    cand = load_candidate(candidate)
    options = eval_options(device, timeout, trials, timing_trials, small)
    verdict = evaluate(prob, cand, options)
    if as_json:
        emit_json(
            {"problem": prob.name, "candidate": str(candidate), "candidate_id": cand.id, **verdict.to_dict()}
        )
        return
    out = console()
    colour = "green" if verdict.accepted else "red"
    out.print(f"[bold {colour}]{verdict.status.value}[/] {prob.name} <- {candidate} on {verdict.device}")
    if verdict.runtime_ms is not None:
        label = " (interpreted)" if verdict.interpreted else ""
        out.print(
            f"runtime {verdict.runtime_ms:.4g} ms{label}, eager {verdict.reference_ms or float('nan'):.4g} ms, "
            f"speedup {fmt_speedup(verdict.speedup)}, vs torch.compile {fmt_speedup(verdict.speedup_vs_compile)}"
        )
    for reason in verdict.reasons:
        out.print(f"  - {reason}", markup=False, highlight=False)


# ---------------------------------------------------------------------------------------------------------------
# evolve
# ---------------------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("problem", required=False)
@click.option(
    "--seed", "seed_file", type=click.Path(dir_okay=False, path_type=Path), help="Seed kernel (ModelNew)."
)
@click.option("--proposer", default=None, help="Proposer (default mutate, offline; see `ksmith plugins`).")
@click.option("--select", default=None, help="Selector (default mapelites; greedy is the other built-in).")
@click.option(
    "--budget", type=int, default=None, help="Total evaluations in the run, the seed included (default 40)."
)
@click.option("--gpu-minutes", type=float, default=None, help="Stop after this much evaluation time.")
@click.option("--patience", type=int, default=None, help="Stop after N evaluations without a new best.")
@click.option(
    "--stop-at-roofline",
    type=float,
    default=None,
    metavar="FRACTION",
    help="Stop once the best runs at this fraction of its roofline on a GPU (default 0.95; 0: never).",
)
@click.option("--islands", type=int, default=None, help="Independent sub-populations (default 4).")
@click.option("--parallel", type=int, default=None, help="Candidates evaluated at once (default 1).")
@click.option("--executor", default=None, help="How evaluations are dispatched (default local).")
@click.option("--search-seed", type=int, default=None, help="Random seed of the search itself.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), help="Where to write the run.")
@click.option(
    "--resume", "resume_run", default=None, help="Continue RUN (a run directory or id) to its budget."
)
@click.option(
    "--seed-from",
    "seed_from",
    default=None,
    metavar="METHOD",
    help="No seed kernel? Write one first: llm, vllm or inductor (see `ksmith seed`).",
)
@device_options
@backend_option
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON at the end.")
def evolve(
    problem,
    seed_file,
    proposer,
    select,
    budget,
    gpu_minutes,
    patience,
    stop_at_roofline,
    islands,
    parallel,
    executor,
    search_seed,
    run_dir,
    resume_run,
    seed_from,
    device,
    timeout,
    small,
    backend,
    as_json,
    **capability_values,
):
    """Evolve a faster kernel for PROBLEM, starting from --seed or the seed shipped with the problem."""
    from ksmith_core.capabilities import SeedMethod
    from ksmith_core.engine import Engine, executor_for, proposer_for
    from ksmith_core.loading import resolve_problem, with_backend
    from ksmith_core.planning import choose_seed, resume_overrides
    from ksmith_core.progress import EvolveProgress
    from ksmith_core.registry import lookup
    from ksmith_core.run import RunConfig

    overrides = {
        k: v
        for k, v in {
            "proposer": proposer,
            "select": select,
            "budget": budget,
            "gpu_minutes": gpu_minutes,
            "patience": patience,
            "islands": islands,
            "parallel": parallel,
            "executor": executor,
            "seed": search_seed,
            "backend": backend,
        }.items()
        if v is not None
    }
    if stop_at_roofline is not None:
        overrides["stop_at_roofline"] = stop_at_roofline or None  # 0 turns the rule off
    if resume_run:
        if problem or seed_file or seed_from:
            raise ConfigError(
                "--resume continues a stored run: give no PROBLEM, --seed or --seed-from with it"
            )
        changes: dict = {}
        if device:
            changes["device"] = eval_options(device, None).device
        if timeout is not None:
            changes["timeout_s"] = eval_options(None, timeout).timeout_s
        if small is not None:
            changes["small"] = small
        proposer_options = capability_options(proposer_for(proposer), capability_values) if proposer else {}
        if executor:
            overrides["executor_options"] = capability_options(executor_for(executor), capability_values)
        run_path, overrides = resume_overrides(resume_run, overrides, changes, proposer_options)
        seed = None
    else:
        if not problem:
            raise ConfigError("give a PROBLEM (a file or an installed problem name), or --resume RUN")
        prob = with_backend(resolve_problem(problem), backend)
        options = eval_options(device, timeout, None, None, small)
        proposer_options = capability_options(proposer_for(proposer), capability_values)
        executor_options = capability_options(executor_for(executor), capability_values)
        config = RunConfig(
            eval=options, proposer_options=proposer_options, executor_options=executor_options, **overrides
        )
        method_options = (
            capability_options(lookup(SeedMethod, seed_from), capability_values) if seed_from else {}
        )
        seed = choose_seed(prob, seed_file, seed_from, options, method_options)

    with EvolveProgress(enabled=True) as progress:
        if resume_run:
            engine = Engine.resume(run_path, overrides, on_event=progress.on_event)
        else:
            engine = Engine.start(prob, seed, config, run_dir, on_event=progress.on_event)
        try:
            progress.attach(engine.run)
            result = engine.evolve(seed)
            summary = engine.run.store.summary()
        finally:
            engine.close()
    if as_json:
        emit_json(summary)
        return
    _print_evolve_result(result, summary)


def _print_evolve_result(result, summary) -> None:
    out = console()
    out.print(f"run {summary['run']}: {summary['evaluations']} evaluations")
    out.print(f"  {summary['stop_explanation']}", markup=False, highlight=False)
    out.print(f"  directory: {result.run_dir}")
    best, seed = result.best, result.seed
    for scored in result.set_aside:
        out.print(
            f"  [yellow]set aside {scored.candidate.id} ({fmt_speedup(scored.verdict.speedup)} vs eager): "
            "it passed its evaluation and failed re-validation[/]"
        )
    if best is None:
        out.print(
            "[red]no candidate held up on re-validation[/]"
            if result.set_aside
            else "[red]no candidate passed evaluation[/]"
        )
        for line in summary["where_to_look"]:
            out.print(f"  {line}", markup=False, highlight=False)
        return
    v = best.verdict
    note = " [yellow](interpreted CPU timings: not GPU performance)[/]" if v.interpreted else ""
    out.print(
        f"  best {best.candidate.id}: {fmt_speedup(v.speedup)} vs eager, {fmt_speedup(v.speedup_vs_compile)} vs torch.compile{note}"
    )
    if seed is not None and seed.verdict.accepted:
        out.print(f"  seed {seed.candidate.id}: {fmt_speedup(seed.verdict.speedup)} vs eager")
    if (v.speedup or 0) <= 1.0:
        out.print("  [yellow]nothing beat the eager PyTorch reference in this run[/]")
    if result.set_aside and result.revalidated is None:
        out.print("  [red]the best shown was not re-validated: those above it failed theirs[/]")
    for line in summary["where_to_look"]:
        out.print(f"  {line}", markup=False, highlight=False)


# ---------------------------------------------------------------------------------------------------------------
# runs, show, best
# ---------------------------------------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--root", type=click.Path(file_okay=False, path_type=Path), default=None, help="Runs directory."
)
@click.option("--json", "as_json", is_flag=True)
def runs(root, as_json):
    """List runs under the runs directory ($KSMITH_RUNS_DIR or ./ksmith-runs)."""
    from ksmith_core.store import list_runs

    if root is not None and root.exists() and not root.is_dir():
        raise ConfigError(f"--root {root} is a file; give the runs directory")
    found = list_runs(root)
    if as_json:
        emit_json(found)
        return
    if not found:
        click.echo("no runs")
        return
    from rich.table import Table

    table = Table("run", "problem", "evaluations", "best vs eager", "vs compile", "finished")
    table.columns[0].no_wrap = True  # run ids are what users copy: never cut
    for r in found:
        best = r.get("best") or {}
        table.add_row(
            r["run"],
            str(r.get("problem")),
            str(r.get("evaluations", "?")),
            fmt_speedup(best.get("speedup")),
            fmt_speedup(best.get("speedup_vs_compile")),
            "yes" if r.get("finished") else "no",
        )
    console().print(table)


@cli.command()
@click.argument("runs_named", metavar="[RUN]...", nargs=-1)
@click.option(
    "--older-than",
    "older_than",
    default=None,
    metavar="YYYY-MM-DD",
    help="Also remove every run that started before this date (UTC).",
)
@click.option(
    "--root", type=click.Path(file_okay=False, path_type=Path), default=None, help="Runs directory."
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def rm(runs_named, older_than, root, dry_run):
    """Remove runs: those named (ids or directories) and, with --older-than, every run started before a date.

    A run being written (its lock held by a running `ksmith evolve`) is never removed: it is skipped with a
    line saying so.
    """
    from datetime import datetime, timezone

    from ksmith_core.errors import RunStoreError
    from ksmith_core.store import DB_NAME, default_runs_root, remove_run, resolve_run, run_started

    if not runs_named and older_than is None:
        raise ConfigError("name the runs to remove, or give --older-than YYYY-MM-DD")
    root = root or default_runs_root()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"--root {root} is a file; give the runs directory")
    chosen = [resolve_run(spec, root) for spec in runs_named]  # an unknown run is bad input: nothing removed
    if older_than is not None:
        try:
            cutoff = datetime.strptime(older_than, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            raise ConfigError(f"--older-than takes a date as YYYY-MM-DD (got {older_than!r})") from None
        if root.is_dir():
            chosen += [
                p for p in sorted(root.iterdir()) if (p / DB_NAME).is_file() and run_started(p) < cutoff
            ]
    seen: set[Path] = set()
    for path in chosen:
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        if dry_run:
            click.echo(f"would remove {path}")
            continue
        try:
            remove_run(path)
        except RunStoreError as exc:
            click.echo(f"skipped: {exc}", err=True)
            continue
        click.echo(f"removed {path}")
    if not seen:
        click.echo("no run matched")


@cli.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True)
def show(run, as_json):
    """Summarise RUN: evaluations, failures by status, the best candidate, why it stopped and what it
    dropped before evaluation."""
    from ksmith_core.store import RunStore, drop_words, resolve_run

    with RunStore.open(resolve_run(run)) as store:
        summary = store.summary()
    if as_json:
        emit_json(summary)
        return
    click.echo(f"run        {summary['run']}  ({summary['path']})")
    click.echo(
        f"problem    {summary['problem']}   proposer {summary['proposer']}   budget {summary['budget']}"
    )
    click.echo(f"evaluations {summary['evaluations']}   statuses {summary['statuses']}")
    best = summary["best"]
    if best:
        click.echo(
            f"best       {best['id']}  {fmt_speedup(best['speedup'])} vs eager, "
            f"{fmt_speedup(best['speedup_vs_compile'])} vs torch.compile on {best['device']}"
            + (" (interpreted)" if best["interpreted"] else "")
        )
    else:
        click.echo("best       none accepted")
    click.echo(f"finished   {summary['finished']} ({summary['stop_reason']})")
    click.echo(f"stopped    {summary['stop_explanation'].removeprefix('stopped: ')}")
    dropped = summary["dropped"]
    for reason, count in dropped["by_reason"].items():
        latest = dropped["latest"].get(reason)
        click.echo(
            f"dropped    {count:>4} {drop_words(reason)}" + (f"  (latest: {latest})" if latest else "")
        )
    for line in summary["where_to_look"]:
        click.echo(f"look       {line}")


@cli.command()
@click.argument("run")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="File to write."
)
def best(run, output):
    """Write the best accepted candidate of RUN to a file."""
    from ksmith_core.store import RunStore, resolve_run

    output = output_file(output)
    with RunStore.open(resolve_run(run)) as store:
        found = store.best()
    if found is None:
        raise KsmithError(f"run {run} has no accepted candidate")
    candidate, verdict = found
    output.write_text(candidate.source, encoding="utf-8")
    click.echo(f"wrote {output} ({candidate.id}, {fmt_speedup(verdict.speedup)} vs eager)", err=True)


@cli.command()
@click.argument("problem")
@click.option("--from", "method", required=True, metavar="METHOD", help="inductor, llm or vllm.")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="File to write."
)
@device_options
@click.option(
    "--check/--no-check", default=True, show_default=True, help="Evaluate the seed once it is written."
)
def seed(problem, method, output, device, timeout, small, check, **capability_values):
    """Write a first ModelNew for PROBLEM: from the Triton code torch.compile generates, or from an LLM."""
    from ksmith_core.capabilities import SeedMethod
    from ksmith_core.engine import evaluate
    from ksmith_core.loading import resolve_problem
    from ksmith_core.planning import seed_candidate
    from ksmith_core.registry import lookup

    prob = resolve_problem(problem)
    output = output_file(output)  # checked before the work, which can take minutes
    options = eval_options(device, timeout, None, None, small)
    method_options = capability_options(lookup(SeedMethod, method), capability_values)
    candidate = seed_candidate(prob, method, options, method_options)
    output.write_text(candidate.source, encoding="utf-8")
    click.echo(f"wrote {output} ({candidate.id}, seeded by {method})", err=True)
    if check:
        verdict = evaluate(prob, candidate, options)
        click.echo(
            f"check: {verdict.status.value}" + "".join(f"\n  - {r}" for r in verdict.reasons), err=True
        )


@cli.command()
@click.argument("run")
@click.option(
    "--target", default="library", show_default=True, help="Exporter target (see `ksmith plugins`)."
)
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), required=True, help="Output directory or file."
)
@click.option("--candidate", "candidate_id", default=None, help="Candidate id (default: the run's best).")
@click.option("--json", "as_json", is_flag=True)
def export(run, target, output, candidate_id, as_json):
    """Export RUN's best (or a chosen) candidate through an exporter plugin."""
    from ksmith_core.exporting import export_from_run

    artifact = export_from_run(run, target, output, candidate_id)  # the exporter checks its own output
    if as_json:
        emit_json(
            {
                "target": artifact.target,
                "paths": [str(p) for p in artifact.paths],
                "summary": artifact.summary,
            }
        )
        return
    click.echo(f"{artifact.target}: {artifact.summary}")
    for path in artifact.paths:
        click.echo(f"  {path}")


# ---------------------------------------------------------------------------------------------------------------
# plugins, problems
# ---------------------------------------------------------------------------------------------------------------


@cli.command("plugins")
@click.option("--json", "as_json", is_flag=True)
def plugins_cmd(as_json):
    """List installed plugins: name, version, what each registered by kind, hooks, load errors."""
    from ksmith_core.plugins import plugin_infos
    from ksmith_core.registry import registry

    infos = [info.to_dict() for info in plugin_infos()]
    for info in infos:
        if PLUGIN_COMMANDS.get(info["name"]):
            info["registered"]["commands"] = PLUGIN_COMMANDS[info["name"]]
    if as_json:
        emit_json(infos)
        return
    for info in infos:
        state = "ok" if info["status"] == "ok" else f"ERROR {info['error']}"
        click.echo(f"{info['name']} {info['version'] or ''} [{state}]")
        for kind, names in sorted(info["registered"].items()):
            click.echo(f"  {kind.replace('_', ' ')}: " + ", ".join(names))
        if info["hooks"]:
            click.echo("  hooks: " + ", ".join(info["hooks"]))
    for conflict in registry().conflicts():
        click.echo(f"conflict: {conflict} (disable one with KSMITH_DISABLE_PLUGINS)")


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def problems(as_json):
    """List the problems of installed suites (each usable by name)."""
    from ksmith_core.loading import load_problem, seed_path_for, suite_problem_files

    rows = []
    for suite, path in suite_problem_files():
        try:
            prob = load_problem(path)
        except KsmithError:
            continue
        seed_path = seed_path_for(prob)
        rows.append(
            {
                "suite": suite,
                "name": prob.name,
                "path": str(path),
                "description": prob.description,
                "seed": str(seed_path) if seed_path else None,
            }
        )
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no problem suites installed")
    for row in rows:
        click.echo(f"{row['suite']}:{row['name']:<28} {row['description']}")


# ---------------------------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------------------------


_built = False
PLUGIN_COMMANDS: dict[str, list[str]] = {}  # plugin -> the commands it added (``ksmith plugins`` lists them)


def build() -> click.Group:
    """The full command line: the core's commands, the plugins' commands and the options capabilities add.

    Loading plugins here costs a fraction of a second (no plugin imports torch at load time); a plugin whose
    commands fail to register is reported by ``ksmith plugins`` and the rest of the command line works.
    """
    global _built
    if _built:
        return cli
    _built = True

    from ksmith_core.capabilities import Executor, Proposer, SeedMethod
    from ksmith_core.clitools import add_capability_options
    from ksmith_core.plugins import get_plugin_manager
    from ksmith_core.registry import registry

    pm = get_plugin_manager()
    for impl in pm.hook.ksmith_register_commands.get_hookimpls():
        before = set(cli.commands)
        try:
            impl.function(cli=cli)
            PLUGIN_COMMANDS[impl.plugin_name] = sorted(set(cli.commands) - before)
        except Exception as exc:  # noqa: BLE001 - one plugin's broken command must not take the CLI down
            logging.getLogger(__name__).warning(
                "plugin %s could not add its commands: %s: %s", impl.plugin_name, type(exc).__name__, exc
            )
    reg = registry()
    proposers, seed_methods, executors = reg.all(Proposer), reg.all(SeedMethod), reg.all(Executor)
    add_capability_options(cli.commands["evolve"], [*proposers, *seed_methods, *executors])
    add_capability_options(cli.commands["seed"], seed_methods)
    if "bench" in cli.commands:
        add_capability_options(cli.commands["bench"], [*proposers, *seed_methods, *executors])
    return cli


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, format="ksmith: %(levelname)s: %(message)s", stream=sys.stderr)
    try:
        code = build().main(args=argv, prog_name="ksmith", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.Abort:
        click.echo("ksmith: aborted", err=True)
        code = 130
    except click.ClickException as exc:  # usage errors: unknown option, missing argument, bad value
        click.echo(f"ksmith: error: {exc.format_message()}", err=True)
        code = EXIT_USAGE
    except KsmithError as exc:
        # One line, always: the first line says what is wrong; anything longer (a traceback from a problem's
        # own code, a child's stderr) goes to the log, shown with -v.
        first, *rest = str(exc).strip().splitlines() or [type(exc).__name__]
        if rest:
            logging.getLogger("ksmith").info("%s", "\n".join(rest))
        click.echo(f"ksmith: error: {first}", err=True)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        click.echo("ksmith: interrupted", err=True)
        code = 130
    sys.exit(code if isinstance(code, int) else 0)
