"""Step rows from runs, saved with ``datasets`` in the formats TRL reads as they are, split by problem.

Layout of ``OUT``::

    OUT/
      conversational/      DatasetDict of the kept steps: prompt = [system, user], completion = [assistant]
      prompt_completion/   the same steps as plain text: prompt = system + user text, completion = answer
      steps/               DatasetDict of every step, negatives included, with all labels (for RL and analysis)
      steps.jsonl          the same rows as JSON lines
      card.json            counts per filter, problems per split, runs, versions, the threshold rule
      README.md            the card as text

Every split holds whole problems: a problem's steps are all in ``train`` or all in ``test``.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ksmith_core.errors import ConfigError
from ksmith_core.store import DB_NAME, resolve_run
from ksmith_train.extra import need
from ksmith_train.steps import FILTERS, RunSteps, read_run

FORMATS = ("conversational", "prompt_completion", "steps")
# Columns kept next to prompt and completion: what a reward function or an analysis needs to know.
EXTRA_COLUMNS = (
    "run",
    "problem",
    "problem_sha",
    "problem_source",
    "parent_id",
    "child_id",
    "parent_source",
    "parent_speedup",
    "mode",
    "proposer",
    "edit_kind",
    "gain",
    "noise",
    "speedup",
)


def run_paths(specs: Sequence[str]) -> list[Path]:
    """Run directories from run paths, run ids, or directories holding runs (one level down)."""
    found: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir() and not (path / DB_NAME).is_file():
            inside = sorted(p for p in path.iterdir() if (p / DB_NAME).is_file())
            if not inside:
                raise ConfigError(f"{spec} holds no run (no {DB_NAME} in it or in its subdirectories)")
            found += inside
        else:
            found.append(resolve_run(spec))
    unique: list[Path] = []
    for path in found:
        if path.resolve() not in {p.resolve() for p in unique}:
            unique.append(path)
    return unique


def split_problems(problems: Iterable[str], test_fraction: float) -> dict[str, str]:
    """``{problem: "train" | "test"}``: a stable order by hash, the first ``test_fraction`` of it to test.

    One problem alone always goes to train; with more, at least one goes to test when the fraction is > 0.
    """
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"--test-fraction must be in [0, 1) (got {test_fraction})")
    names = sorted(set(problems), key=lambda name: hashlib.sha256(name.encode()).hexdigest())
    n_test = 0
    if len(names) > 1 and test_fraction > 0:
        n_test = min(len(names) - 1, max(1, math.floor(len(names) * test_fraction + 0.5)))
    return {name: ("test" if i < n_test else "train") for i, name in enumerate(names)}


def mark_duplicates(rows: list[dict[str, Any]]) -> None:
    """A step several runs made (same problem, parent and child) counts once: later copies are not kept."""
    seen: set[tuple[str, str, str]] = set()
    for row in rows:
        key = (row["problem"], row["parent_id"], row["child_id"])
        if key in seen:
            row["filter"], row["kept"] = "duplicate", False
        seen.add(key)


def conversational(row: dict[str, Any]) -> dict[str, Any]:
    """A TRL conversational prompt-completion example."""
    extra = {key: row[key] for key in EXTRA_COLUMNS}
    return {
        "prompt": row["messages"],
        "completion": [{"role": "assistant", "content": row["answer"]}],
        **extra,
    }


def prompt_text(messages: list[dict[str, str]]) -> str:
    """The conversation as one text, for models without a chat template."""
    return "\n\n".join(message["content"] for message in messages) + "\n\n"


def prompt_completion(row: dict[str, Any]) -> dict[str, Any]:
    """A TRL standard (plain text) prompt-completion example."""
    extra = {key: row[key] for key in EXTRA_COLUMNS}
    return {"prompt": prompt_text(row["messages"]), "completion": row["answer"], **extra}


def build_dataset(
    specs: Sequence[str], output: Path, min_gain: float = 0.0, test_fraction: float = 0.2
) -> dict[str, Any]:
    """Read the runs, write ``output`` (see the module docstring) and return the card."""
    from ksmith_core.clitools import output_dir

    if min_gain < 0:
        raise ConfigError(f"--min-gain must be at least 0 (got {min_gain})")
    split_problems([], test_fraction)  # a bad fraction fails before any run is read
    datasets = need("datasets", "ksmith dataset")
    datasets.disable_progress_bars()
    paths = run_paths(specs)
    runs = [read_run(path, min_gain) for path in paths]
    split_of = split_problems([run.problem for run in runs], test_fraction)
    output = output_dir(Path(output))
    rows = [dict(row, split=split_of[row["problem"]]) for run in runs for row in run.rows]
    mark_duplicates(rows)

    kept = [row for row in rows if row["kept"]]
    saved: dict[str, dict[str, int]] = {}
    for name, make, chosen in (
        ("conversational", conversational, kept),
        ("prompt_completion", prompt_completion, kept),
        ("steps", dict, rows),
    ):
        splits = {
            split: datasets.Dataset.from_list([make(row) for row in chosen if row["split"] == split])
            for split in ("train", "test")
            if any(row["split"] == split for row in chosen)
        }
        saved[name] = {split: len(data) for split, data in splits.items()}
        target = output / name
        if (target / "dataset_dict.json").is_file():
            shutil.rmtree(target)  # a dataset this command wrote before; its splits may differ now
        if splits:
            datasets.DatasetDict(splits).save_to_disk(str(target))
    with (output / "steps.jsonl").open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, default=str) + "\n")
    card = make_card(runs, rows, split_of, saved, min_gain, test_fraction)
    (output / "card.json").write_text(json.dumps(card, indent=2, default=str), encoding="utf-8")
    (output / "README.md").write_text(card_text(card), encoding="utf-8")
    return card


def make_card(
    runs: list[RunSteps],
    rows: list[dict[str, Any]],
    split_of: dict[str, str],
    saved: dict[str, dict[str, int]],
    min_gain: float,
    test_fraction: float,
) -> dict[str, Any]:
    from ksmith_core.environment import versions

    filters = Counter(row["filter"] for row in rows)
    problems: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = problems.setdefault(
            row["problem"], {"split": split_of[row["problem"]], "steps": 0, "kept": 0, "shas": set()}
        )
        entry["steps"] += 1
        entry["kept"] += int(row["kept"])
        entry["shas"].add(row["problem_sha"])
    for name, split in split_of.items():
        problems.setdefault(name, {"split": split, "steps": 0, "kept": 0, "shas": set()})
    for entry in problems.values():
        entry["shas"] = sorted(entry["shas"])
    package_versions = dict(versions())
    for module in ("datasets", "transformers", "trl", "peft"):
        try:
            package_versions[module] = __import__(module).__version__
        except ImportError:
            package_versions[module] = None
    return {
        "steps": len(rows),
        "kept": sum(int(row["kept"]) for row in rows),
        "filters": {name: filters.get(name, 0) for name in FILTERS},
        "filter_meaning": FILTERS,
        "refused": sum(int(row["refused"]) for row in rows),
        "answer_forms": dict(Counter(row["answer_form"] or "none" for row in rows)),
        "interpreted_steps": sum(int(row["interpreted"]) for row in rows),
        "threshold": {
            "rule": "kept when gain > max(noise, min_gain); noise = the largest timing spread recorded by "
            "the parent's and the child's verdicts (kernel and eager reference)",
            "min_gain": min_gain,
        },
        "split": {"by": "problem", "test_fraction": test_fraction},
        "saved": saved,
        "problems": dict(sorted(problems.items())),
        "runs": [
            {
                "run": run.run,
                "problem": run.problem,
                "evaluations": run.evaluations,
                "steps": len(run.rows),
                "device": run.device,
                "interpreted": run.interpreted,
            }
            for run in runs
        ],
        "versions": package_versions,
    }


def card_text(card: dict[str, Any]) -> str:
    lines = [
        "# ksmith step dataset",
        "",
        "One row per evaluated step of ksmith runs: the `llm` proposer's prompt for the parent kernel, the "
        "change that made the child as the SEARCH/REPLACE answer that prompt asks for, and its verdict.",
        "",
        f"- steps: {card['steps']}, kept for SFT: {card['kept']}, refused as hacks: {card['refused']}",
        f"- steps timed by the CPU interpreter (not GPU timings): {card['interpreted_steps']}",
        f"- rule: {card['threshold']['rule']}; min_gain {card['threshold']['min_gain']}",
        f"- split by problem, test fraction {card['split']['test_fraction']}",
        "",
        "## Steps per filter",
        "",
        "| filter | steps | meaning |",
        "|---|---|---|",
    ]
    lines += [
        f"| {name} | {count} | {card['filter_meaning'][name]} |" for name, count in card["filters"].items()
    ]
    lines += ["", "## Problems", "", "| problem | split | steps | kept |", "|---|---|---|---|"]
    lines += [
        f"| {name} | {entry['split']} | {entry['steps']} | {entry['kept']} |"
        for name, entry in card["problems"].items()
    ]
    lines += ["", "## Saved", ""]
    lines += [f"- `{name}/`: {splits or 'nothing (no rows)'}" for name, splits in card["saved"].items()]
    lines += ["", "## Runs", ""]
    lines += [
        f"- {run['run']}: {run['problem']}, {run['evaluations']} evaluations, {run['steps']} steps, "
        f"device {run['device']}" + (" (interpreted)" if run["interpreted"] else "")
        for run in card["runs"]
    ]
    lines += ["", "## Versions", ""]
    lines += [f"- {name}: {version}" for name, version in sorted(card["versions"].items())]
    return "\n".join(lines) + "\n"
