"""Every shipped seed opens with a module docstring whose first line is one sentence stating its algorithm."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"
SEED_PATHS = sorted(PROBLEMS.rglob("*.seed.py"))
MAX_FIRST_LINE = 160


def test_the_suite_ships_seeds() -> None:
    assert len(SEED_PATHS) >= 30


@pytest.mark.parametrize("path", SEED_PATHS, ids=[p.name.removesuffix(".seed.py") for p in SEED_PATHS])
def test_seed_opens_with_a_one_line_algorithm_summary(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert docstring, f"{path.name} has no module docstring"
    first = docstring.splitlines()[0].strip()
    assert first, "the docstring's first line is empty"
    assert len(first) <= MAX_FIRST_LINE, f"the first line has {len(first)} characters, over {MAX_FIRST_LINE}"
    assert first.endswith("."), "the first line must be a sentence ending with a period"
