"""Every edit of the shipped seeds the benchmarks evolve keeps the kernel correct at the small size."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksmith_core.loading import load_problem
from ksmith_mutate.edits import possible_edits
from ksmith_mutate.plugin import WAITING_KINDS

from .conftest import KernelChecker

BENCHMARK_PROBLEMS = ("softmax", "layernorm", "rmsnorm", "sum_reduction", "matmul_bias_relu")


def shipped_seed(name: str) -> Path | None:
    try:
        import ksmith_problems
    except ImportError:
        return None
    found = sorted(Path(ksmith_problems.__file__).parent.rglob(f"{name}.seed.py"))
    return found[0] if found else None


@pytest.mark.slow
@pytest.mark.parametrize("name", BENCHMARK_PROBLEMS)
def test_every_edit_of_a_shipped_seed_stays_correct(name, tmp_path):
    seed = shipped_seed(name)
    if seed is None:
        pytest.skip(f"the problem suite ships no {name} seed")
    problem = load_problem(seed.with_name(f"{name}.py"))
    checker = KernelChecker(name, tmp_path, directory=seed.parent)
    # The checker's error is relative to the output's magnitude; half-precision problems get their 1e-2.
    tolerance = 2 * max(problem.tolerance_for(checker.output_dtype(seed.read_text())).atol, 1e-4)
    assert checker.max_error(seed.read_text()) < tolerance
    failures = []
    for edit in possible_edits(seed.read_text()):
        if checker.device == "cpu" and edit.kind in WAITING_KINDS:
            continue  # a row's programs wait for each other: the interpreter runs one at a time (test_split_row)
        error = checker.max_error(edit.source)
        if not error < tolerance and not (checker.device == "cuda" and edit.kind == "dot_precision"):
            failures.append(f"{edit.description}: {error:.3g}")
    assert not failures
