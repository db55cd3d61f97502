"""ksmith plugin of the torch.compile integration: ``ksmith compile-report`` and ``ksmith harvest``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ksmith_core import hookimpl


@hookimpl
def ksmith_register_commands(cli):
    cli.add_command(compile_report_command)
    cli.add_command(harvest_command)


@click.command("compile-report")
@click.argument("model_file", type=click.Path(path_type=Path))
@click.option(
    "--library",
    type=click.Path(path_type=Path),
    required=True,
    help="Kernel library directory (what `ksmith export RUN --target library -o DIR` writes).",
)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None, help="Default: cuda if present.")
@click.option(
    "--time/--no-time",
    "timed",
    default=None,
    help="Median forward time of eager, inductor and kernelsmith (default: on a GPU only).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with a list `regions`.")
def compile_report_command(model_file, library, device, timed, as_json):
    """Compile MODEL_FILE (KernelBench format) with backend="kernelsmith": per region, swapped or not and why."""
    import torch

    from ksmith_compile.report import compile_report

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    report = compile_report(model_file, library, device, timed=device == "cuda" if timed is None else timed)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    for region in report["regions"]:
        mark = "swapped" if region["swapped"] else "kept   "
        click.echo(f"{mark}  {region['region']}: {region['reason']}")
    timings = report["timings_ms"]
    if timings:
        note = " (Triton interpreter on CPU: not a speed measurement)" if timings["interpreted"] else ""
        click.echo(
            f"forward ms: eager {timings['eager']:.3f}, inductor {timings['inductor']:.3f}, "
            f"kernelsmith {timings['kernelsmith']:.3f}{note}"
        )
    diff = report["max_abs_diff_vs_eager"]
    click.echo(
        f"{report['swapped']} region(s) swapped in {report['graphs']} graph(s)"
        + (f"; max abs diff vs eager {diff:.3g}" if diff is not None else "")
    )


@click.command("harvest")
@click.argument("model_file", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="Directory to write the problems to.",
)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None, help="Default: cuda if present.")
@click.option(
    "--time-share/--no-time-share",
    default=None,
    help="Measure each region's share of the Inductor-compiled model's kernel time (default: on a GPU).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as one JSON object.")
def harvest_command(model_file, output, device, time_share, as_json):
    """Write one KernelBench problem per fusible region and per matmul (with its epilogue) of MODEL_FILE."""
    import torch

    from ksmith_compile.harvest import harvest

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    summary = harvest(model_file, output, device, time_share)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    for problem in summary["problems"]:
        where = ", ".join(problem["occurrences"])
        share = (
            f", {100 * problem['time_share']:.1f} % of the time" if problem["time_share"] is not None else ""
        )
        click.echo(
            f"{problem['file']}: {problem['kind']} ({' '.join(problem['ops'])}) x{len(problem['occurrences'])}"
            f" at {where}{share}"
        )
    measured = summary.get("time_share")
    if measured and "error" in measured:
        click.echo(f"time shares not measured: {measured['error']}")
    elif measured:
        click.echo(
            f"time shares: of {measured['launches_ms']:.4g} ms a forward ({measured['what']}, Inductor-compiled),"
            f" {measured['unattributed_ms']:.4g} ms in launches no region computes"
        )
    for item in summary["skipped"]:
        click.echo(f"skipped {item['region']}: {item['reason']}")
    click.echo(f"{len(summary['problems'])} problem(s) written to {output} (harvest.json lists them)")
