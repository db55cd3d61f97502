"""ksmith plugin of the training integration: ``ksmith dataset``, ``ksmith train sft|grpo`` and the
``dataset`` exporter.

Everything heavy (datasets, transformers, trl, peft) is imported inside the commands, so ``ksmith`` works
without the ``train`` extra; a command that needs it says ``pip install 'kernel-smith[train]'``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from ksmith_core import hookimpl
from ksmith_core.capabilities import Exporter
from ksmith_core.clitools import emit_json
from ksmith_core.model import Artifact, Candidate


@hookimpl
def ksmith_register_commands(cli):
    cli.add_command(dataset)
    cli.add_command(train)


def export_dataset(run: Any, candidate: Candidate, options: Mapping[str, Any]) -> Artifact:
    """The whole run (not only ``candidate``) as a step dataset in ``options["output"]``."""
    from ksmith_core.errors import ConfigError
    from ksmith_train.dataset import build_dataset

    if run is None:
        raise ConfigError("the dataset exporter needs a stored run")
    output = Path(options["output"])
    card = build_dataset([str(run.path)], output, test_fraction=0.0)
    summary = f"{card['steps']} steps, {card['kept']} kept"
    return Artifact(target="dataset", paths=(output / "card.json", output / "steps.jsonl"), summary=summary)


DATASET = Exporter("dataset", export_dataset, "OUT/: the run's steps as TRL-ready datasets (ksmith dataset)")


@hookimpl
def ksmith_register_exporters(register):
    register(DATASET)


@click.command()
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory to write the datasets and the card into.",
)
@click.option(
    "--min-gain",
    type=float,
    default=0.0,
    show_default=True,
    help="Least gain over the parent (0.05 = 5 %) for a step to be kept, on top of the timing noise.",
)
@click.option(
    "--test-fraction",
    type=float,
    default=0.2,
    show_default=True,
    help="Fraction of the problems (never of the steps) held out as the test split.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the dataset card as JSON.")
def dataset(runs, output, min_gain, test_fraction, as_json):
    """Step-level training data from RUNS (run directories, run ids, or directories of runs)."""
    from ksmith_train.dataset import build_dataset

    card = build_dataset(list(runs), output, min_gain=min_gain, test_fraction=test_fraction)
    if as_json:
        emit_json(card)
        return
    splits = ", ".join(f"{split} {n}" for split, n in card["saved"]["steps"].items()) or "none"
    click.echo(
        f"{card['steps']} steps from {len(card['runs'])} runs ({splits}); {card['kept']} kept "
        f"(correct and faster than the timing noise); {card['refused']} refused as hacks -> {output}"
    )


@click.group()
def train():
    """Train a local improver on step data: SFT, or GRPO rewarded by the evaluator."""
