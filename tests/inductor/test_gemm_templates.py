"""Seeds whose matmuls are Inductor's own max-autotune Triton templates (epilogues fused into them).

Inductor has Triton GEMM templates on GPUs only, so the CPU tests start from wrappers Inductor wrote on an H100
(``tests/data/inductor_templates/``, made by ``benchmarks/capture_inductor_wrappers.py`` at the suite's small
sizes): the seed written from them runs its template under the Triton interpreter and is judged by the real
evaluator. The GPU tests compile on CUDA.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ksmith_core.engine import evaluate
from ksmith_core.loading import check_candidate_source, load_problem
from ksmith_core.model import Candidate, EvalOptions, Problem, Status
from ksmith_inductor import seeding
from ksmith_inductor.seeding import InductorSeedError, seed_from_inductor
from ksmith_mutate.edits import possible_edits

SUITE = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"
WRAPPERS = Path(__file__).resolve().parents[1] / "data" / "inductor_templates"
interpreted = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="runs Triton kernels on CPU tensors (TRITON_INTERPRET=1)",
)
TEMPLATE_LAUNCH = re.compile(
    r"grid = \(\d+, \d+, \d+\)\n\s+triton_tem_\w+\[grid\]\(.*num_warps=\d+, num_stages=\d+\)"
)


def seed_from_wrapper(relative: str) -> tuple[Problem, str]:
    """The seed ``seed_from_inductor`` writes on CUDA, from a wrapper Inductor wrote there (small sizes)."""
    problem = load_problem(SUITE / relative)
    module = seeding._load_problem_module(problem, small=True)
    traced = seeding._trace(module, problem, "cpu")  # the same graph, inputs in the same order, as on CUDA
    wrapper = (WRAPPERS / f"{Path(relative).stem}.wrapper.txt").read_text()
    generated = seeding._described(wrapper, "cpu", [])
    return problem, seeding._write_seed(problem, traced, generated, "cuda")


@pytest.mark.parametrize("relative", ["matmul/matmul.py", "matmul/matmul_bias_relu.py"])
def test_template_seed_launches_inductors_kernel_on_its_fixed_grid(relative: str) -> None:
    _, source = seed_from_wrapper(relative)
    check_candidate_source(source)
    assert "triton_heuristics" not in source and "def _gemm_0_kernel" not in source  # not ksmith's GEMM
    assert "@triton.jit\ndef triton_tem_" in source and "BLOCK_M : tl.constexpr" in source
    assert TEMPLATE_LAUNCH.search(source), source
    assert "max-autotune Triton templates" in source


@interpreted
@pytest.mark.parametrize("relative", ["matmul/matmul.py", "matmul/matmul_bias_relu.py"])
def test_template_seed_passes_the_evaluator(relative: str) -> None:
    problem, source = seed_from_wrapper(relative)
    verdict = evaluate(problem, Candidate.from_source(source), EvalOptions(device="cpu"))
    assert verdict.status is Status.OK, (verdict.reasons, source)


@interpreted
def test_template_seed_on_a_smaller_grid_is_judged_incorrect() -> None:
    """The fixed grid is what covers the output: a seed launching half of it must fail the checks."""
    problem, source = seed_from_wrapper("matmul/matmul.py")
    grid = re.search(r"grid = \((\d+), 1, 1\)", source)
    halved = source.replace(grid.group(0), f"grid = ({int(grid.group(1)) // 2}, 1, 1)")
    verdict = evaluate(problem, Candidate.from_source(halved), EvalOptions(device="cpu"))
    assert verdict.status is Status.INCORRECT, verdict.reasons


def test_dot_precision_edit_rewrites_the_templates_allow_tf32() -> None:
    """Inductor's template multiplies with ``allow_tf32=ALLOW_TF32`` (a constexpr bound False in its body):
    the precision edit reads that as ieee and replaces the keyword with ``input_precision``."""
    _, source = seed_from_wrapper("matmul/matmul.py")
    assert "allow_tf32=ALLOW_TF32" in source and "ALLOW_TF32 : tl.constexpr = False" in source
    edits = {e.detail["new"]: e for e in possible_edits(source, kinds=("dot_precision",))}
    assert set(edits) == {"tf32", "tf32x3"}
    for new, edit in edits.items():
        assert edit.description.startswith(f"input_precision ieee -> {new} ") and not edit.safer
        assert "allow_tf32=" not in edit.source and f'input_precision="{new}"' in edit.source
        check_candidate_source(edit.source)
    # A constexpr bound True reads as tf32, and the more precise products are then the safer edits.
    tf32 = source.replace("ALLOW_TF32 : tl.constexpr = False", "ALLOW_TF32 : tl.constexpr = True")
    safer = {e.detail["new"]: e.safer for e in possible_edits(tf32, kinds=("dot_precision",))}
    assert safer == {"ieee": True, "tf32x3": True}


def test_template_ops_are_read_from_the_traced_graph() -> None:
    for relative, ops in [
        ("matmul/matmul.py", ["mm"]),
        ("matmul/bmm.py", ["bmm"]),
        ("pooling/conv2d_bias_relu.py", ["convolution"]),
        ("softmax/softmax.py", []),
    ]:
        problem = load_problem(SUITE / relative)
        traced = seeding._trace(seeding._load_problem_module(problem, small=True), problem, "cpu")
        assert seeding._template_ops(traced.graph) == ops, relative


def test_a_template_path_that_fails_falls_back_to_ksmiths_gemm_and_says_why(monkeypatch) -> None:
    """What ``seed_from_inductor`` does on CUDA when Inductor's templates cannot seed: ksmith's GEMM, and the
    reason in the seed's docstring (made safe for it); an out-of-memory is raised instead, for a retry alone."""
    problem = load_problem(SUITE / "matmul/matmul.py")
    traced = seeding._trace(seeding._load_problem_module(problem, small=True), problem, "cpu")
    real_generate = seeding._generate
    asked = []

    def generate(traced, device, inductor_templates=False):
        asked.append(inductor_templates)
        if inductor_templates:
            raise InductorSeedError('template X uses Inductor grid C:\\grid """: ' + seeding.NO_SEED)
        return real_generate(traced, "cpu")

    monkeypatch.setattr(seeding, "_generate", generate)
    source = seeding._seed_source(problem, traced, "cuda", "inductor")
    check_candidate_source(source)
    assert asked == [True, False]
    assert "def _gemm_0_kernel" in source and "def triton_tem_" not in source
    assert "the reason: template X uses Inductor grid C:/grid /." in source

    asked.clear()  # asked for ksmith's templates: no template attempt at all
    seeding._seed_source(problem, traced, "cuda", "ksmith")
    assert asked == [False]

    def out_of_memory(traced, device, inductor_templates=False):
        raise InductorSeedError("Inductor could not compile the model: OutOfMemoryError: CUDA out of memory.")

    monkeypatch.setattr(seeding, "_generate", out_of_memory)
    with pytest.raises(InductorSeedError, match="out of memory"):
        seeding._seed_source(problem, traced, "cuda", "inductor")


def test_the_seeding_process_refuses_an_unknown_template_choice(capsys) -> None:
    path = str(SUITE / "matmul/matmul.py")
    assert seeding.main([path, "cpu", "small", "cublas"]) == 2
    assert "usage:" in capsys.readouterr().err


def test_a_template_on_another_grid_is_refused_in_one_line() -> None:
    wrapper = (
        (WRAPPERS / "matmul.wrapper.txt").read_text().replace("'grid_type': 'FixedGrid'", "'grid_type': 'X'")
    )
    with pytest.raises(InductorSeedError) as caught:
        seeding._described(wrapper, "cpu", [])
    assert "uses Inductor grid X" in str(caught.value) and "\n" not in str(caught.value)


# -- on a GPU machine: compiled with max-autotune on CUDA, judged by the real evaluator ---------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "relative", ["matmul/matmul_bias_relu.py", "matmul/bmm.py", "pooling/conv2d_bias_relu.py"]
)
def test_cuda_template_seeds_pass_the_evaluator(relative: str) -> None:
    problem = load_problem(SUITE / relative)
    source = seed_from_inductor(problem, "cuda", small=False)
    check_candidate_source(source)
    assert "def triton_tem_" in source and "def _gemm_0_kernel" not in source, source
    assert "max-autotune Triton templates" in source
    verdict = evaluate(problem, Candidate.from_source(source), EvalOptions(device="cuda"))
    assert verdict.status is Status.OK, (verdict.reasons, source)
