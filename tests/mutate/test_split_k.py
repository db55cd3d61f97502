"""The ``split_k`` edit: a matmul's K loop sliced over a new grid axis keeps every result right (Triton
interpreter on CPU, or a GPU), adds a bias once, follows its own tuning steps, and leaves alone the kernels it
cannot split (an epilogue that is not affine in the accumulator)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ksmith_inductor.gemm_template import gemm_text
from ksmith_mutate.edits import possible_edits

from .conftest import KernelChecker, import_file, seed_source

# The evaluator's default tolerances: a half-precision output takes its partial tiles rounded to its dtype.
TOLERANCE = {"float32": 1e-4, "float16": 1e-2}
SUITE_MATMUL = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems" / "matmul"


def _split_edits(source: str):
    return [e for e in possible_edits(source) if e.kind == "split_k"]


@pytest.mark.parametrize(
    "directory, name",
    [
        (None, "linear_scaled"),  # k counts tiles; a bias added and a scale applied after the loop
        (SUITE_MATMUL, "matmul"),  # k counts elements; the plain store
        (SUITE_MATMUL, "bmm"),  # program_id(1) is the batch: K goes to axis 2
    ],
)
def test_split_k_and_its_steps_keep_the_matmul_correct(directory, name, tmp_path):
    if directory is None:
        checker, seed = KernelChecker(name, tmp_path), seed_source(name)
    else:
        checker = KernelChecker(name, tmp_path, directory)
        seed = (directory / f"{name}.seed.py").read_text(encoding="utf-8")
    splits = _split_edits(seed)
    assert [e.detail["split_k"] for e in splits] == [4, 16]
    axis = 2 if name == "bmm" else 1
    assert all(f"tl.program_id({axis})" in e.source and "tl.atomic_add(" in e.source for e in splits)
    # One slice per program along the new axis, at the default K-step and at the step edits' values.
    steps = _split_edits(splits[0].source)
    assert sorted(e.detail["split_k"] for e in steps) == [2, 8]
    assert all(e.source.count("_split_k_grid(") == 2 for e in steps)  # not split twice: the value moves
    tolerance = TOLERANCE[checker.output_dtype(seed)]
    for edit in [*splits, *steps]:
        error = checker.max_error(edit.source)
        assert error < tolerance, f"{edit.description}: relative error {error:.3g}"


@pytest.mark.parametrize("op", ["addmm", "baddbmm"])
def test_split_k_of_inductors_gemm_adds_the_bias_once(op, tmp_path):
    helper, text = gemm_text(0, op)
    source = f"import torch\nimport triton\nimport triton.language as tl\n\n\n{text}\n"
    (split,) = [e for e in _split_edits(source) if e.detail["split_k"] == 16]
    assert "if split_pid == 0:" in split.source
    path = tmp_path / f"split_{op}.py"
    path.write_text(split.source, encoding="utf-8")
    module = import_file(path, f"_split_k_{op}")
    torch.manual_seed(0)
    shape = (2,) if op == "baddbmm" else ()
    a, b = torch.randn(*shape, 20, 333), torch.randn(*shape, 333, 24)
    bias = torch.randn(24)
    out = torch.full((*shape, 20, 24), float("nan"))  # the edit zeroes the output before the partial sums
    getattr(module, helper)(a, b, out, bias, alpha=0.7, beta=1.3)
    expected = torch.baddbmm(bias.expand(*shape, 20, 24), a, b, beta=1.3, alpha=0.7) if shape else None
    if not shape:
        expected = torch.addmm(bias, a, b, beta=1.3, alpha=0.7)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


def test_split_k_leaves_a_non_affine_epilogue_alone():
    relu = seed_source(
        "matmul_bias_relu"
    )  # acc = tl.maximum(acc + bias, 0): partial sums cannot be added after
    assert "tl.maximum(acc" in relu
    assert _split_edits(relu) == []
    seed = seed_source("linear_scaled")
    assert _split_edits(seed)
    residual = "    c_ptrs0 = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn\n"
    for changed in (
        seed.replace("    acc *= 0.5\n", "    acc *= 0.5\n    acc = acc * acc\n"),  # not linear
        seed.replace("    acc *= 0.5\n", "    if acc.shape[0] > 1:\n        acc *= 0.5\n"),  # branch on acc
        seed.replace("tl.store(c_ptrs, acc,", "tl.store(c_ptrs, acc + 0,"),  # a store of something else
        # A pointer moved in a form the prologue does not recognise: A would be read from k = 0 in every slice.
        seed.replace(
            "        a_ptrs += BLOCK_K * stride_ak\n", "        a_ptrs = a_ptrs + BLOCK_K * stride_ak\n"
        ),
        # A value carried out of the loop differs per slice.
        seed.replace("    for k in range(", "    n_iter = 0\n    for k in range(")
        .replace(
            "        b_ptrs += BLOCK_K * stride_bk\n",
            "        b_ptrs += BLOCK_K * stride_bk\n        n_iter += 1\n",
        )
        .replace("    acc *= 0.5\n", "    acc *= 0.5 * n_iter\n"),
        # The epilogue reads the output (a residual): zeroing the output first would lose it.
        seed.replace("    acc *= 0.5\n", residual + "    acc += tl.load(c_ptrs0)\n    acc *= 0.5\n"),
    ):
        assert changed != seed
        assert _split_edits(changed) == []


def test_split_k_steps_only_where_the_grid_reads_meta():
    split = _split_edits(seed_source("linear_scaled"))[0].source
    assert _split_edits(split)
    literal_grid = split.replace("_split_k_grid(grid, 1)", "(triton.cdiv(M, 32) * triton.cdiv(N, 32), 4)")
    assert literal_grid != split
    assert _split_edits(literal_grid) == []  # a hand-written split whose grid would not follow SPLIT_K
