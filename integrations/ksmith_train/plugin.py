"""ksmith plugin of the training integration: ``ksmith dataset``, ``ksmith train sft|grpo`` and the
``dataset`` exporter.

Everything heavy (datasets, transformers, trl, peft) is imported inside the commands, so ``ksmith`` works
without the ``train`` extra; a command that needs it says ``pip install 'kernel-smith[train]'``.
"""

from __future__ import annotations

import contextlib
import sys
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


@train.command("sft")
@click.option(
    "--model", "model", required=True, help="Base model: a local transformers directory or .gguf file."
)
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="A directory written by `ksmith dataset`.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Adapter directory.",
)
@click.option("--max-steps", type=int, default=100, show_default=True, help="Optimizer steps.")
@click.option(
    "--steps",
    "steps",
    type=click.Choice(["kept", "correct"]),
    default="kept",
    show_default=True,
    help="Train on the kept (high-gain) steps, or on every correct step.",
)
@click.option("--learning-rate", type=float, default=1e-4, show_default=True)
@click.option("--batch-size", type=int, default=2, show_default=True)
@click.option("--max-length", type=int, default=4096, show_default=True, help="Tokens per example.")
@click.option("--rank", type=int, default=16, show_default=True, help="LoRA rank.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print what was recorded as JSON.")
def sft(model, data, output, max_steps, steps, learning_rate, batch_size, max_length, rank, seed, as_json):
    """LoRA SFT (trl SFTTrainer, loss on the answer only) on the steps of a dataset."""
    from ksmith_train.sft import train_sft

    with contextlib.redirect_stdout(sys.stderr):  # the trainer's logs; stdout is for the result
        info = train_sft(
            model,
            data,
            output,
            max_steps=max_steps,
            steps=steps,
            learning_rate=learning_rate,
            batch_size=batch_size,
            max_length=max_length,
            rank=rank,
            seed=seed,
        )
    if as_json:
        emit_json(info)
        return
    losses = info["losses"]
    trend = f"loss {losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "no loss logged"
    if info["held_out_loss_before"] is not None:
        trend += f"; held-out loss {info['held_out_loss_before']:.3f} -> {info['held_out_loss_after']:.3f}"
    click.echo(f"{info['max_steps']} steps on {info['examples']} examples, {trend} -> {output}")


@train.command("grpo")
@click.option(
    "--model", "model", required=True, help="Base model: a local transformers directory or .gguf file."
)
@click.option(
    "--problems", "problems", multiple=True, help="Problem (name or file) whose seed to improve; repeat."
)
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Or: the parents of a `ksmith dataset` directory's train split.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Adapter directory.",
)
@click.option("--max-steps", type=int, default=50, show_default=True, help="Optimizer steps.")
@click.option("--num-generations", type=int, default=4, show_default=True, help="Completions per prompt.")
@click.option("--max-completion-length", type=int, default=1024, show_default=True, help="Tokens per answer.")
@click.option("--learning-rate", type=float, default=1e-5, show_default=True)
@click.option("--rank", type=int, default=16, show_default=True, help="LoRA rank.")
@click.option(
    "--device", type=click.Choice(["cuda", "cpu"]), default=None, help="Where candidates are judged."
)
@click.option("--timeout", type=float, default=None, help="Seconds one candidate may take (default 180).")
@click.option("--parallel", type=int, default=1, show_default=True, help="Candidates judged at once.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print what was recorded as JSON.")
def grpo(
    model,
    problems,
    data,
    output,
    max_steps,
    num_generations,
    max_completion_length,
    learning_rate,
    rank,
    device,
    timeout,
    parallel,
    seed,
    as_json,
):
    """LoRA GRPO (trl GRPOTrainer) rewarded by the evaluator's verdict on each proposed edit."""
    from ksmith_core.clitools import eval_options
    from ksmith_train.grpo import train_grpo

    with contextlib.redirect_stdout(sys.stderr):  # the trainer's logs; stdout is for the result
        info = train_grpo(
            model,
            output,
            problems=problems,
            data=data,
            max_steps=max_steps,
            num_generations=num_generations,
            max_completion_length=max_completion_length,
            learning_rate=learning_rate,
            rank=rank,
            options=eval_options(device, timeout),
            parallel=parallel,
            seed=seed,
        )
    if as_json:
        emit_json(info)
        return
    outcomes = ", ".join(f"{n} {name}" for name, n in sorted(info["outcomes"].items())) or "none"
    click.echo(
        f"{info['max_steps']} steps on {info['prompts']} prompts; answers judged: {outcomes} -> {output}"
    )
