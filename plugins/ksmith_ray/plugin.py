"""Registers the ``ray`` executor and its ``--ray-address`` option.

Nothing here imports ray: the executor imports it (``ksmith_ray.executor``) when it is first used, so this
plugin loads, and ``ksmith plugins`` lists it, where ray is not installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from ksmith_core import hookimpl
from ksmith_core.capabilities import EvalJob, Executor
from ksmith_core.model import Verdict

CLI_OPTIONS = (
    click.Option(
        ["--ray-address"],
        default=None,
        metavar="ADDRESS",
        help="Ray cluster for --executor ray (as ray.init takes it; default $RAY_ADDRESS, else a local one).",
    ),
    click.Option(
        ["--ray-slots"],
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help="Evaluations at once on each Ray actor (default 8 on a GPU, 1 on a CPU).",
    ),
)


def options_from_cli(values: Mapping[str, Any]) -> dict[str, Any]:
    """``--ray-address`` as the run's executor options; checks now that ray can be imported, so a missing
    extra is one line before any work starts.

    Only an address the user gave is stored: without one, ``$RAY_ADDRESS`` (or a fresh local cluster) is
    looked up each time the run starts or resumes, so a resumed run never points at a cluster that ended
    with its previous driver.
    """
    from ksmith_ray.executor import import_ray

    import_ray()
    options: dict[str, Any] = {}
    if values.get("ray_address"):
        options["address"] = values["ray_address"]
    if values.get("ray_slots"):
        options["slots"] = values["ray_slots"]
    return options


def run_on_ray(jobs: Sequence[EvalJob], parallel: int, options: Mapping[str, Any]) -> list[Verdict]:
    from ksmith_ray.executor import run_on_ray as run

    return run(jobs, parallel, options)


RAY = Executor(
    "ray",
    run_on_ray,
    "Actors of a Ray cluster (one per GPU, --ray-slots evaluations each; one per CPU where it has none)",
    cli_options=CLI_OPTIONS,
    options_from_cli=options_from_cli,
)


@hookimpl
def ksmith_register_executors(register):
    register(RAY)
