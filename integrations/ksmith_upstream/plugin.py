"""ksmith plugin of the upstream integration: ``ksmith import`` and ``ksmith patch`` for SGLang and LMDeploy."""

from __future__ import annotations

from pathlib import Path

import click

from ksmith_core import hookimpl
from ksmith_core.clitools import output_dir

PROJECT = click.Choice(["sglang", "lmdeploy"])
SOURCE_HELP = (
    "Upstream sources: a checkout, a wheel file or a directory of unpacked wheel "
    "(default: $KSMITH_UPSTREAM_WHEELS, else the pinned wheel from PyPI)."
)


@hookimpl
def ksmith_register_commands(cli):
    cli.add_command(import_cmd)
    cli.add_command(patch)


@click.command("import")
@click.argument("project", type=PROJECT)
@click.argument("symbol")
@click.option("--source", type=click.Path(path_type=Path), default=None, help=SOURCE_HELP)
@click.option(
    "--shapes",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help='JSON sizes replacing the representative defaults: {"batch_size": 64} or {"sizes": ..., "small": ...}.',
)
@click.option("--name", default=None, help="Problem name (default: the launcher's name).")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory to write.",
)
def import_cmd(project, symbol, source, shapes, name, output):
    """Turn upstream launcher SYMBOL (name or dotted module.name) into a problem NAME.py and seed NAME.seed.py."""
    from ksmith_upstream.importer import import_kernel, read_shapes
    from ksmith_upstream.source import project_named, resolve_source

    shape_values = read_shapes(shapes)
    upstream = resolve_source(project_named(project), source)
    out = output_dir(output)
    done = import_kernel(upstream, symbol, out, shape_values, name)
    ex = done.extraction
    click.echo(
        f"imported {ex.symbol} ({', '.join(ex.kernels)}) from {project} {upstream.version} {ex.repo_path}",
        err=True,
    )
    click.echo(str(done.problem))
    click.echo(str(done.seed))


@click.command()
@click.argument("project", type=PROJECT)
@click.argument("run")
@click.option("--source", type=click.Path(path_type=Path), default=None, help=SOURCE_HELP)
@click.option(
    "--rebase", is_flag=True, help="Re-apply the change to upstream sources that changed since the import."
)
@click.option(
    "--gate-from",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="check.json of this run's earlier patch, benchmarked on a GPU (python -m ksmith_upstream.standalone "
    "OUT): the fast path is limited to the measured size range where it was not slower than upstream.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory to write.",
)
def patch(project, run, source, rebase, gate_from, output):
    """Write an upstream patch, test, micro-benchmark and PR.md from RUN's best kernel."""
    from ksmith_upstream.patching import write_patch
    from ksmith_upstream.source import project_named, resolve_source

    proj = project_named(project)
    upstream = resolve_source(proj, source)
    written = write_patch(proj, run, upstream, output_dir(output), rebase, gate_from)
    for path in written:
        click.echo(str(path))
