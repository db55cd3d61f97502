"""The ksmith problem suite: KernelBench-format problems, each with a plain Triton seed beside it.

Problems live under ``problems/<category>/NAME.py`` with their seeds as ``NAME.seed.py``. File names are unique
across categories so that ``ksmith evolve NAME`` finds a problem by name alone.
"""

from __future__ import annotations

from pathlib import Path

from ksmith_core import hookimpl
from ksmith_core.capabilities import ProblemSuite

NAME = "problems"
SUITE = "ksmith"
PROBLEMS_DIR = Path(__file__).parent / "problems"


@hookimpl
def ksmith_register_problem_suites(register):
    register(
        ProblemSuite(SUITE, PROBLEMS_DIR, "36 KernelBench-format problems, each with a plain Triton seed")
    )
