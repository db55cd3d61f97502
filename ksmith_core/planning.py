"""Planning a run from what the user asked: which problem, which seed, which configuration, or which run to
resume with what changed. The command line gathers the options; the decisions live here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ksmith_core.capabilities import SeedMethod
from ksmith_core.errors import ConfigError
from ksmith_core.loading import load_candidate, seed_path_for
from ksmith_core.model import Candidate, EvalOptions, Problem
from ksmith_core.registry import lookup
from ksmith_core.store import RunStore, resolve_run


def seed_candidate(
    problem: Problem, method: str, eval_options: EvalOptions, method_options: Mapping[str, Any]
) -> Candidate:
    """A first kernel for ``problem`` written by the seed method ``method``."""
    seeder = lookup(SeedMethod, method)
    proposal = seeder.seed(
        problem,
        {
            "device": eval_options.device,
            "small": eval_options.use_small,
            "method_options": dict(method_options),
        },
    )
    return Candidate.from_proposal(proposal)


def choose_seed(
    problem: Problem,
    seed_file: Path | None,
    seed_from: str | None,
    eval_options: EvalOptions,
    method_options: Mapping[str, Any],
) -> Candidate:
    """The run's first candidate: ``--seed FILE``, else the seed shipped beside the problem, else one written
    by ``--seed-from METHOD``."""
    if seed_file and seed_from:
        raise ConfigError("give --seed FILE or --seed-from METHOD, not both")
    seed_path = seed_file or (None if seed_from else seed_path_for(problem))
    if seed_path is not None:
        return load_candidate(seed_path)
    if seed_from:
        return seed_candidate(problem, seed_from, eval_options, method_options)
    raise ConfigError(f"problem {problem.name} ships no seed kernel: pass --seed FILE or --seed-from METHOD")


def resume_overrides(
    run_spec: str,
    overrides: dict[str, Any],
    eval_changes: Mapping[str, Any],
    proposer_options: Mapping[str, Any],
) -> tuple[Path, dict[str, Any]]:
    """The run directory to resume and the configuration changes to apply to it.

    ``eval_changes`` are evaluation options the user gave again (``device``, ``timeout_s``, ``small``); the
    rest of the stored evaluation options stay as they were.
    """
    run_path = resolve_run(run_spec)
    overrides = dict(overrides)
    if eval_changes:
        with RunStore.open(run_path) as peek:
            stored = peek.meta().get("config", {}).get("eval", {})
        overrides["eval"] = replace(EvalOptions(**stored), **dict(eval_changes))
    if proposer_options:
        overrides["proposer_options"] = dict(proposer_options)
    return run_path, overrides
