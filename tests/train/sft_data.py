"""Short SFT examples, so that a CPU training step takes seconds: the real prompt is about a thousand tokens."""

from __future__ import annotations

from pathlib import Path

import datasets
from stored_runs import SEED

from ksmith_llm import prompts
from ksmith_train.steps import answer_for

SHORT = "\n".join(SEED.splitlines()[6:14]) + "\n"


def short_data(directory: Path, n: int = 2, held_out: bool = False) -> Path:
    """A ksmith dataset directory of ``n`` short examples in the conversational format (a fixed batch); with
    ``held_out``, the other example is its test split."""
    rows = []
    changes = (("num_warps=4", "num_warps=8", "num_warps 4 -> 8"), ("x + y", "y + x", "swap"))
    for old, new, edit in changes:
        source = SEED.replace(old, new)
        answer, _ = answer_for(SEED, source, edit, fixing=False)
        user = "## Current kernel\n```python\n" + SHORT + "```\n\n## Task\nMake ONE targeted change."
        rows.append(
            {
                "prompt": [
                    {"role": "system", "content": prompts.SYSTEM_PROMPT},
                    {"role": "user", "content": user},
                ],
                "completion": [{"role": "assistant", "content": answer}],
                "problem": "vector_add",
            }
        )
    splits = {"train": datasets.Dataset.from_list(rows[:n])}
    if held_out:
        splits["test"] = datasets.Dataset.from_list(rows[n:])
    for name in ("conversational", "steps"):
        datasets.DatasetDict(splits).save_to_disk(str(directory / name))
    return directory
