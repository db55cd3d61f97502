"""The ``ksmith`` command line.

Every failure a user can cause -- a missing file, a file that is not a problem, an unknown plugin, a bad
option -- ends as one line on stderr and exit code 2. Listings and reports take ``--json``; with it stdout
carries exactly one JSON document and nothing else (progress goes to stderr).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from ksmith_core import __version__
from ksmith_core.errors import ConfigError, KsmithError

EXIT_USAGE = 2


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def _fmt_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _eval_options(
    device: str | None,
    timeout: float | None,
    trials: int | None,
    timing_trials: int | None,
    small: bool | None,
):
    from ksmith_core.environment import default_device
    from ksmith_core.model import EvalOptions

    device = device or default_device()
    if device == "cuda" and default_device() != "cuda":
        raise ConfigError("--device cuda was asked for, but torch sees no CUDA GPU here")
    kwargs: dict[str, Any] = {"device": device, "small": small}
    if timeout is not None:
        if timeout <= 0:
            raise ConfigError(f"--timeout must be positive (got {timeout})")
        kwargs["timeout_s"] = timeout
    if trials is not None:
        if trials < 1:
            raise ConfigError(f"--trials must be at least 1 (got {trials})")
        kwargs["correctness_trials"] = trials
    if timing_trials is not None:
        if timing_trials < 1:
            raise ConfigError(f"--timing-trials must be at least 1 (got {timing_trials})")
        kwargs["timing_trials"] = timing_trials
    return EvalOptions(**kwargs)


def _device_options(fn):
    fn = click.option(
        "--small/--full", "small", default=None, help="Problem size (default: small on CPU, full on GPU)."
    )(fn)
    fn = click.option(
        "--timeout", type=float, default=None, help="Seconds one candidate may take (default 180)."
    )(fn)
    fn = click.option(
        "--device",
        type=click.Choice(["cuda", "cpu"]),
        default=None,
        help="cuda, or cpu (Triton interpreter; timings marked interpreted). Default: cuda if present.",
    )(fn)
    return fn


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
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2),
        format="ksmith: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )


# ---------------------------------------------------------------------------------------------------------------
# eval
# ---------------------------------------------------------------------------------------------------------------


@cli.command("eval")
@click.argument("problem")
@click.argument("candidate", type=click.Path(dir_okay=False, path_type=Path))
@_device_options
@click.option(
    "--trials", type=int, default=None, help="Correctness trials, each with fresh seeds (default 5)."
)
@click.option("--timing-trials", type=int, default=None, help="Timed runs on the GPU (default 100).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
def eval_cmd(problem, candidate, device, timeout, small, trials, timing_trials, as_json):
    """Judge CANDIDATE (a module defining ModelNew) against PROBLEM (a KernelBench file or a problem name).

    Exit code 0 whenever a verdict was reached, failing ones included; 2 for unusable input.
    """
    from ksmith_core.engine import evaluate
    from ksmith_core.loading import load_candidate, resolve_problem

    prob = resolve_problem(problem)
    cand = load_candidate(candidate)
    options = _eval_options(device, timeout, trials, timing_trials, small)
    verdict = evaluate(prob, cand, options)
    if as_json:
        _emit_json(
            {"problem": prob.name, "candidate": str(candidate), "candidate_id": cand.id, **verdict.to_dict()}
        )
        return
    from rich.console import Console

    console = Console()
    colour = "green" if verdict.accepted else "red"
    console.print(f"[bold {colour}]{verdict.status.value}[/] {prob.name} <- {candidate} on {verdict.device}")
    if verdict.runtime_ms is not None:
        label = " (interpreted)" if verdict.interpreted else ""
        console.print(
            f"runtime {verdict.runtime_ms:.4g} ms{label}, eager {verdict.reference_ms or float('nan'):.4g} ms, "
            f"speedup {_fmt_x(verdict.speedup)}, vs torch.compile {_fmt_x(verdict.speedup_vs_compile)}"
        )
    for reason in verdict.reasons:
        console.print(f"  - {reason}", markup=False, highlight=False)


# ---------------------------------------------------------------------------------------------------------------
# evolve
# ---------------------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("problem", required=False)
@click.option(
    "--seed", "seed_file", type=click.Path(dir_okay=False, path_type=Path), help="Seed kernel (ModelNew)."
)
@click.option("--proposer", default=None, help="Proposer plugin: mutate (default, offline), llm, ...")
@click.option(
    "--budget", type=int, default=None, help="Total evaluations in the run, the seed included (default 40)."
)
@click.option("--gpu-minutes", type=float, default=None, help="Stop after this much evaluation time.")
@click.option("--patience", type=int, default=None, help="Stop after N evaluations without a new best.")
@click.option("--islands", type=int, default=None, help="Independent sub-populations (default 4).")
@click.option("--parallel", type=int, default=None, help="Candidates evaluated at once (default 1).")
@click.option("--search-seed", type=int, default=None, help="Random seed of the search itself.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), help="Where to write the run.")
@click.option(
    "--resume", "resume_run", default=None, help="Continue RUN (a run directory or id) to its budget."
)
@click.option("--llm-base-url", default=None, help="OpenAI-compatible server for --proposer llm.")
@click.option("--llm-model", default=None, help="Model name for --proposer llm.")
@click.option(
    "--llm-option",
    "llm_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Other proposer settings (max_tokens, temperature, concurrency, timeout, hints, ...).",
)
@click.option(
    "--seed-from",
    "seed_from",
    default=None,
    metavar="METHOD",
    help="No seed kernel? Write one first: llm, vllm or inductor (see `ksmith seed`).",
)
@_device_options
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON at the end.")
def evolve(
    problem,
    seed_file,
    proposer,
    budget,
    gpu_minutes,
    patience,
    islands,
    parallel,
    search_seed,
    run_dir,
    resume_run,
    llm_base_url,
    llm_model,
    llm_options,
    seed_from,
    device,
    timeout,
    small,
    as_json,
):
    """Evolve a faster kernel for PROBLEM, starting from --seed or the seed shipped with the problem."""
    from ksmith_core.engine import Engine
    from ksmith_core.loading import load_candidate, resolve_problem, seed_path_for
    from ksmith_core.progress import EvolveProgress
    from ksmith_core.run import RunConfig
    from ksmith_core.store import RunStore, resolve_run

    proposer_options = _proposer_options(llm_base_url, llm_model, llm_options)
    overrides = {
        k: v
        for k, v in {
            "proposer": proposer,
            "budget": budget,
            "gpu_minutes": gpu_minutes,
            "patience": patience,
            "islands": islands,
            "parallel": parallel,
            "seed": search_seed,
        }.items()
        if v is not None
    }
    if resume_run:
        if problem or seed_file or seed_from:
            raise ConfigError(
                "--resume continues a stored run: give no PROBLEM, --seed or --seed-from with it"
            )
        run_path = resolve_run(resume_run)
        with RunStore.open(run_path) as peek:
            stored_eval = peek.meta().get("config", {}).get("eval", {})
        if device or timeout or small is not None:
            from ksmith_core.model import EvalOptions

            opts = _eval_options(device or stored_eval.get("device"), timeout, None, None, small)
            overrides["eval"] = EvalOptions(
                **{**stored_eval, **{k: getattr(opts, k) for k in ("device", "timeout_s", "small")}}
            )
        if proposer_options:
            overrides["proposer_options"] = proposer_options
        seed = None
    else:
        if not problem:
            raise ConfigError("give a PROBLEM (a file or an installed problem name), or --resume RUN")
        prob = resolve_problem(problem)
        eval_options = _eval_options(device, timeout, None, None, small)
        config = RunConfig(eval=eval_options, proposer_options=proposer_options, **overrides)
        if seed_file and seed_from:
            raise ConfigError("give --seed FILE or --seed-from METHOD, not both")
        seed_path = seed_file or (None if seed_from else seed_path_for(prob))
        if seed_path is not None:
            seed = load_candidate(seed_path)
        elif seed_from:
            seed = _seed_candidate(prob, seed_from, eval_options, proposer_options)
        else:
            raise ConfigError(
                f"problem {prob.name} ships no seed kernel: pass --seed FILE or --seed-from llm"
            )

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
        _emit_json(summary)
        return
    _print_evolve_result(result, summary)


def _proposer_options(base_url: str | None, model: str | None, pairs: tuple[str, ...]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--llm-option takes KEY=VALUE (got {pair!r})")
        try:
            value: Any = json.loads(raw)  # numbers, booleans, lists; anything else stays a string
        except json.JSONDecodeError:
            value = raw
        options[key.strip()] = value
    if any(word in key.lower() for key in options for word in ("api_key", "apikey", "secret", "password")):
        raise ConfigError("API keys are read from the environment (OPENAI_API_KEY), never from options")
    options.update({k: v for k, v in {"base_url": base_url, "model": model}.items() if v})
    return options


def _seed_candidate(problem, method: str, eval_options, proposer_options: dict[str, Any]):
    from ksmith_core.model import Candidate
    from ksmith_core.plugins import get_plugin_manager

    proposal = get_plugin_manager().hook.ksmith_seed(
        problem=problem,
        method=method,
        options={
            "device": eval_options.device,
            "small": eval_options.use_small,
            "proposer_options": proposer_options,
        },
    )
    if proposal is None:
        raise ConfigError(
            f"no plugin writes seeds by {method!r} (try llm, vllm or inductor; see `ksmith plugins`)"
        )
    return Candidate.from_proposal(proposal)


def _print_evolve_result(result, summary) -> None:
    from rich.console import Console

    console = Console()
    console.print(
        f"run {summary['run']}: {summary['evaluations']} evaluations, stopped by {result.stop_reason}"
    )
    console.print(f"  directory: {result.run_dir}")
    best, seed = result.best, result.seed
    if best is None:
        console.print("[red]no candidate passed evaluation[/]; see `ksmith show` for the failures")
        return
    v = best.verdict
    note = " [yellow](interpreted CPU timings: not GPU performance)[/]" if v.interpreted else ""
    console.print(
        f"  best {best.candidate.id}: {_fmt_x(v.speedup)} vs eager, {_fmt_x(v.speedup_vs_compile)} vs torch.compile{note}"
    )
    if seed is not None and seed.verdict.accepted:
        console.print(f"  seed {seed.candidate.id}: {_fmt_x(seed.verdict.speedup)} vs eager")
    if (v.speedup or 0) <= 1.0:
        console.print("  [yellow]nothing beat the eager PyTorch reference in this run[/]")
    if result.revalidated is not None and not result.revalidated.accepted:
        console.print(f"  [red]the best candidate failed re-validation: {result.revalidated.status.value}[/]")


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

    found = list_runs(root)
    if as_json:
        _emit_json(found)
        return
    if not found:
        click.echo("no runs")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("run", "problem", "evaluations", "best vs eager", "vs compile", "finished")
    for r in found:
        best = r.get("best") or {}
        table.add_row(
            r["run"],
            str(r.get("problem")),
            str(r.get("evaluations", "?")),
            _fmt_x(best.get("speedup")),
            _fmt_x(best.get("speedup_vs_compile")),
            "yes" if r.get("finished") else "no",
        )
    Console().print(table)


@cli.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True)
def show(run, as_json):
    """Summarise RUN: evaluations, failures by status, the best candidate."""
    from ksmith_core.store import RunStore, resolve_run

    with RunStore.open(resolve_run(run)) as store:
        summary = store.summary()
    if as_json:
        _emit_json(summary)
        return
    click.echo(f"run        {summary['run']}  ({summary['path']})")
    click.echo(
        f"problem    {summary['problem']}   proposer {summary['proposer']}   budget {summary['budget']}"
    )
    click.echo(f"evaluations {summary['evaluations']}   statuses {summary['statuses']}")
    best = summary["best"]
    if best:
        click.echo(
            f"best       {best['id']}  {_fmt_x(best['speedup'])} vs eager, "
            f"{_fmt_x(best['speedup_vs_compile'])} vs torch.compile on {best['device']}"
            + (" (interpreted)" if best["interpreted"] else "")
        )
    else:
        click.echo("best       none accepted")
    click.echo(f"finished   {summary['finished']} ({summary['stop_reason']})")


@cli.command()
@click.argument("run")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="File to write."
)
def best(run, output):
    """Write the best accepted candidate of RUN to a file."""
    from ksmith_core.store import RunStore, resolve_run

    with RunStore.open(resolve_run(run)) as store:
        found = store.best()
    if found is None:
        raise KsmithError(f"run {run} has no accepted candidate")
    candidate, verdict = found
    output.write_text(candidate.source, encoding="utf-8")
    click.echo(f"wrote {output} ({candidate.id}, {_fmt_x(verdict.speedup)} vs eager)", err=True)


@cli.command()
@click.argument("problem")
@click.option("--from", "method", required=True, metavar="METHOD", help="inductor, llm or vllm.")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="File to write."
)
@click.option("--llm-base-url", default=None, help="OpenAI-compatible server for --from llm.")
@click.option("--llm-model", default=None, help="Model name for --from llm / vllm.")
@click.option(
    "--llm-option", "llm_options", multiple=True, metavar="KEY=VALUE", help="Other proposer settings."
)
@_device_options
@click.option(
    "--check/--no-check", default=True, show_default=True, help="Evaluate the seed once it is written."
)
def seed(problem, method, output, llm_base_url, llm_model, llm_options, device, timeout, small, check):
    """Write a first ModelNew for PROBLEM: from the Triton code torch.compile generates, or from an LLM."""
    from ksmith_core.engine import evaluate
    from ksmith_core.loading import resolve_problem

    prob = resolve_problem(problem)
    options = _eval_options(device, timeout, None, None, small)
    candidate = _seed_candidate(
        prob, method, options, _proposer_options(llm_base_url, llm_model, llm_options)
    )
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

    artifact = export_from_run(run, target, output, candidate_id)
    if as_json:
        _emit_json(
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


@cli.command()
@click.argument("run")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="HTML file to write (default: RUN_DIR/report.html).",
)
def report(run, output):
    """Write a self-contained HTML report of RUN (curves, lineage, archive map, failures, best kernel diff)."""
    from ksmith_core.report import write_report
    from ksmith_core.store import resolve_run

    path = write_report(resolve_run(run), output)
    click.echo(str(path))


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--evolve", "do_evolve", is_flag=True, help="Evolve each problem from its seed instead of one evaluation."
)
@click.option("--budget", type=int, default=None, help="Evaluations per problem with --evolve (default 40).")
@click.option("--proposer", default=None, help="Proposer for --evolve (default mutate).")
@click.option("--parallel", type=int, default=None, help="Evaluations at once (default 1).")
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
@_device_options
@click.option("--json", "as_json", is_flag=True)
def bench(
    paths, do_evolve, budget, proposer, parallel, candidates_dir, out_dir, device, timeout, small, as_json
):
    """Evaluate (or --evolve) every problem in PATHS (files or directories, KernelBench levels included).

    Reports per problem status, speedup vs eager and torch.compile and roofline fraction, then correct rate,
    fast_0 / fast_1 against both references, and mean and geometric-mean speedups.
    """
    from rich.console import Console

    from ksmith_core import plugins
    from ksmith_core.bench import Bench, collect_problems
    from ksmith_core.run import RunConfig

    problem_paths = collect_problems(paths)
    overrides = {
        k: v
        for k, v in {"budget": budget, "proposer": proposer, "parallel": parallel}.items()
        if v is not None
    }
    config = RunConfig(eval=_eval_options(device, timeout, None, None, small), **overrides)
    if do_evolve:
        plugins.require_proposer(config.proposer)
    console = Console(stderr=True)

    def on_row(row):
        console.print(
            f"{row['problem']:<32} {row['status']:<14} {_fmt_x(row['speedup']):>9} vs eager "
            f"{_fmt_x(row['speedup_vs_compile']):>9} vs compile",
            highlight=False,
        )

    result = Bench(out_dir or Path("ksmith-bench"), config, do_evolve, candidates_dir).run(
        problem_paths, on_row
    )
    if as_json:
        _emit_json(result)
        return
    _print_bench(result)


def _print_bench(result) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("problem", "status", "vs eager", "vs compile", "roofline", "note")
    for row in result["rows"]:
        note = ""
        if row["status"] == "ok" and (row.get("speedup_vs_compile") or 2) < 1.0:
            note = "slower than torch.compile"
        roof = row.get("roofline_fraction")
        table.add_row(
            row["problem"],
            row["status"],
            _fmt_x(row["speedup"]),
            _fmt_x(row["speedup_vs_compile"]),
            "-" if roof is None else f"{roof:.2f}",
            note,
        )
    console = Console()
    console.print(table)
    s = result["summary"]

    def pct(v):
        return "-" if v is None else f"{100 * v:.0f}%"

    console.print(
        f"correct {s['correct']}/{s['problems']} ({pct(s['correct_rate'])}); fast_1 vs eager {pct(s['fast_1_eager'])}, "
        f"vs compile {pct(s['fast_1_compile'])}; geomean speedup {_fmt_x(s['geomean_speedup_eager'])} vs eager, "
        f"{_fmt_x(s['geomean_speedup_compile'])} vs compile"
        + (" [interpreted CPU timings]" if s["interpreted"] else "")
    )
    for bound, group in s.get("by_bound", {}).items():
        console.print(
            f"{bound}-bound ({len(group['problems'])}): geomean {_fmt_x(group['geomean_speedup_compile'])} vs "
            f"compile; kernels at the roofline would reach {_fmt_x(group['headroom_geomean_vs_compile'])}"
        )
    if s["slower_than_compile"]:
        console.print("slower than torch.compile: " + ", ".join(s["slower_than_compile"]))


# ---------------------------------------------------------------------------------------------------------------
# plugins, problems
# ---------------------------------------------------------------------------------------------------------------


@cli.command("plugins")
@click.option("--json", "as_json", is_flag=True)
def plugins_cmd(as_json):
    """List installed plugins: name, version, hooks, load errors."""
    from ksmith_core.plugins import plugin_infos

    infos = [info.to_dict() for info in plugin_infos()]
    if as_json:
        _emit_json(infos)
        return
    for info in infos:
        state = "ok" if info["status"] == "ok" else f"ERROR {info['error']}"
        click.echo(f"{info['name']} {info['version'] or ''} [{state}]")
        if info["hooks"]:
            click.echo("  hooks: " + ", ".join(info["hooks"]))


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def problems(as_json):
    """List the problems of installed suites (each usable by name)."""
    from ksmith_core.loading import load_problem, seed_path_for
    from ksmith_core.plugins import problem_suites

    rows = []
    for suite, directory in sorted(problem_suites().items()):
        for path in sorted(directory.rglob("*.py")):
            if path.name.endswith(".seed.py") or path.name.startswith("_"):
                continue
            try:
                prob = load_problem(path)
            except KsmithError:
                continue
            rows.append(
                {
                    "suite": suite,
                    "name": prob.name,
                    "path": str(path),
                    "description": prob.description,
                    "seed": str(seed_path_for(prob)) if seed_path_for(prob) else None,
                }
            )
    if as_json:
        _emit_json(rows)
        return
    if not rows:
        click.echo("no problem suites installed")
    for row in rows:
        click.echo(f"{row['suite']}:{row['name']:<28} {row['description']}")


# ---------------------------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="ksmith", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.Abort:
        click.echo("ksmith: aborted", err=True)
        code = 130
    except click.ClickException as exc:  # usage errors: unknown option, missing argument, bad value
        click.echo(f"ksmith: error: {exc.format_message()}", err=True)
        code = EXIT_USAGE
    except KsmithError as exc:
        click.echo(f"ksmith: error: {exc}", err=True)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        click.echo("ksmith: interrupted", err=True)
        code = 130
    sys.exit(code if isinstance(code, int) else 0)
