"""Adds ``ksmith report`` to the command line (the page itself is drawn in :mod:`ksmith_report.report`)."""

from __future__ import annotations

from pathlib import Path

import click

from ksmith_core import hookimpl
from ksmith_core.clitools import output_file


@hookimpl
def ksmith_register_commands(cli):
    cli.add_command(report)


@click.command()
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
    from ksmith_core.store import resolve_run
    from ksmith_report.report import write_report

    run_dir = resolve_run(run)
    path = write_report(run_dir, output_file(output) if output is not None else None)
    click.echo(str(path))
