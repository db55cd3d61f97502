"""Every edit of every test kernel still computes the right answer (Triton interpreter on CPU, or a GPU)."""

from __future__ import annotations

import pytest

from ksmith_mutate.edits import possible_edits
from ksmith_mutate.plugin import problem_limits

from .conftest import KERNEL_NAMES, KERNELS, seed_source

TOLERANCE = 1e-4
# On a GPU, TF32 dot products of fp32 inputs are legitimately less exact.
TF32_TOLERANCE = 1e-2


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_every_edit_keeps_the_kernel_correct(name, kernel_checker):
    checker = kernel_checker(name)
    assert checker.max_error(seed_source(name)) < TOLERANCE
    failures = []
    # Within the limits the proposer applies for this problem: an fp32 GEMM's tiles take twice the shared
    # memory of fp16 ones, and on a GPU a tile that does not fit fails to compile.
    limits = problem_limits((KERNELS / f"{name}.py").read_text(encoding="utf-8"))
    for edit in possible_edits(seed_source(name), None, limits):
        loose = (
            checker.device == "cuda"
            and edit.kind == "dot_precision"
            and "tf32" in str(edit.detail.get("new"))
        )
        error = checker.max_error(edit.source)
        if not error < (TF32_TOLERANCE if loose else TOLERANCE):
            failures.append(f"{edit.description}: relative error {error:.3g}")
    assert not failures


def test_the_checker_catches_a_wrong_kernel(kernel_checker):
    checker = kernel_checker("softplus")
    wrong = seed_source("softplus").replace("tl.log(1.0 + tl.exp(x))", "tl.log(2.0 + tl.exp(x))")
    assert checker.max_error(wrong) > TOLERANCE
