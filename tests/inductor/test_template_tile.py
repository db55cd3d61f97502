"""``gemm_config`` on Inductor's rendered GEMM templates (``ksmith_mutate/template_tile.py``): the tile constants,
the launch's warps and stages and the literal grid move together, the edited kernels compute the same under
the interpreter, and a template whose contract cannot be read or does not hold is left alone."""

from __future__ import annotations

import re

import pytest
from mutate.conftest import KernelChecker

from ksmith_core.engine import evaluate
from ksmith_core.loading import check_candidate_source
from ksmith_core.model import Candidate, EvalOptions, Status
from ksmith_mutate.edits import possible_edits
from ksmith_mutate.gemm_configs import gemm_configs

from .test_gemm_templates import SUITE, interpreted, seed_from_wrapper

SMALL = {"M": 100, "N": 72, "K": 80}  # the suite's small matmul sizes, which the wrappers were written at


def _configs(source: str):
    return [
        e
        for e in possible_edits(source, ("gemm_config",))
        if "Inductor's mm template) in triton_tem" in e.description
    ]


def _constants(source: str) -> dict[str, int]:
    found = {name: int(v) for name, v in re.findall(r"(BLOCK_[MNK]) : tl.constexpr = (\d+)", source)}
    found["grid"] = int(re.search(r"grid = \((\d+), 1, 1\)\n\s+triton_tem", source).group(1))
    launch = re.search(r"triton_tem_\w+\[grid\]\(.*num_warps=(\d+), num_stages=(\d+)\)", source)
    found["num_warps"], found["num_stages"] = int(launch.group(1)), int(launch.group(2))
    return found


@pytest.mark.parametrize("relative", ["matmul/matmul.py", "matmul/matmul_bias_relu.py"])
def test_each_config_moves_the_tile_the_grid_and_the_launch_together(relative: str) -> None:
    _, seed = seed_from_wrapper(relative)
    edits = _configs(seed)
    before = _constants(seed)
    current = (
        before["BLOCK_M"],
        before["BLOCK_N"],
        before["BLOCK_K"],
        before["num_stages"],
        before["num_warps"],
    )
    offered = [tuple(e.detail["config"]) for e in edits]
    assert offered and current not in offered and len(set(offered)) == len(offered)
    # The configurations (Inductor's and ksmith's) as the template scales them to the sizes: a side at most
    # the size's next power of two (128 for 100, 72 and 80), at least 16.
    scaled = {(min(m, 128), min(n, 128), min(k, 128), st, w) for m, n, k, st, w in gemm_configs()}
    assert set(offered) <= scaled
    for edit in edits:
        check_candidate_source(edit.source)
        block_m, block_n, block_k, stages, warps = edit.detail["config"]
        after = _constants(edit.source)
        assert (after["BLOCK_M"], after["BLOCK_N"], after["BLOCK_K"]) == (block_m, block_n, block_k)
        assert (after["num_warps"], after["num_stages"]) == (warps, stages)
        assert after["grid"] == -(-SMALL["M"] // block_m) * -(-SMALL["N"] // block_n), edit.description
        # Everything else stays: the pointwise epilogue kernel's launch, the sizes, the template's body.
        assert edit.source.count("\n") == seed.count("\n")
        assert re.sub(r"\d+", "#", edit.source) == re.sub(r"\d+", "#", seed)


@interpreted
def test_the_edited_templates_compute_the_same(tmp_path) -> None:
    _, seed = seed_from_wrapper("matmul/matmul_bias_relu.py")
    checker = KernelChecker("matmul_bias_relu", tmp_path, SUITE / "matmul")
    edits = _configs(seed)
    assert len(edits) >= 10
    for edit in edits:
        assert checker.max_error(edit.source) < 1e-3, edit.description


@interpreted
def test_an_edited_template_passes_the_evaluator() -> None:
    problem, seed = seed_from_wrapper("matmul/matmul.py")
    (edit,) = [e for e in _configs(seed) if tuple(e.detail["config"]) == (32, 32, 16, 1, 2)]
    verdict = evaluate(problem, Candidate.from_source(edit.source), EvalOptions(device="cpu"))
    assert verdict.status is Status.OK, verdict.reasons


def test_an_unmasked_k_loop_is_offered_only_block_k_dividing_k() -> None:
    _, seed = seed_from_wrapper("matmul/matmul.py")
    assert "EVEN_K : tl.constexpr = False" in seed  # K = 80: the template masks its loads
    assert {e.detail["config"][2] for e in _configs(seed)} > {16}
    even = seed.replace("EVEN_K : tl.constexpr = False", "EVEN_K : tl.constexpr = True")
    assert {e.detail["config"][2] for e in _configs(even)} == {16}


@pytest.mark.parametrize(
    "change",
    [
        ("grid = (6, 1, 1)", "grid = (3, 1, 1)"),  # the grid is not the tile's: the contract does not hold
        ("BLOCK_M : tl.constexpr = 64", "BLOCK_M : tl.constexpr = 32 * 2"),  # not a literal
        ("    M = 100\n", "    M = 100 + 0\n"),  # a size not a literal
        ("grid_m = (M + BLOCK_M - 1) // BLOCK_M", "grid_m = (M + BLOCK_M) // BLOCK_M"),  # another tiling
        ("num_warps=8, num_stages=5", "num_stages=5"),  # warps not at the launch
        ("grid = (6, 1, 1)", "grid = lambda meta: (6, 1, 1)"),  # not a literal grid
    ],
)
def test_a_template_whose_contract_cannot_be_read_is_left_alone(change) -> None:
    _, seed = seed_from_wrapper("matmul/matmul.py")
    old, new = change
    assert seed.count(old) == 1
    assert _configs(seed) and not _configs(seed.replace(old, new))


def test_a_decode_sized_side_gets_inductors_smallest_tile() -> None:
    """With 8 rows every configuration's BLOCK_M is clamped to 16, as Inductor's template scales it; N, K, warps
    and stages still move."""
    _, seed = seed_from_wrapper("matmul/matmul.py")
    decode = seed.replace("    M = 100\n", "    M = 8\n").replace("grid = (6, 1, 1)", "grid = (3, 1, 1)")
    configs = [tuple(e.detail["config"]) for e in _configs(decode)]
    assert len(configs) >= 10 and {c[0] for c in configs} == {16}
    for edit in _configs(decode):
        assert f"grid = ({-(-72 // edit.detail['config'][1])}, 1, 1)" in edit.source


def test_every_launch_of_a_shared_template_moves_with_its_tile() -> None:
    _, seed = seed_from_wrapper("matmul/matmul.py")
    launch = "        grid = (6, 1, 1)\n        triton_tem_fused_mm_0[grid](A, B, buf0, num_warps=8, num_stages=5)\n"
    twice = seed.replace(launch, launch + launch.replace("buf0,", "buf1,"))
    twice = twice.replace("        return buf0", "        buf1 = torch.empty_like(buf0)\n        return buf0")
    for edit in _configs(twice):
        block_m, block_n, _, stages, warps = edit.detail["config"]
        tiles = -(-SMALL["M"] // block_m) * -(-SMALL["N"] // block_n)
        assert edit.source.count(f"grid = ({tiles}, 1, 1)") == 2
        assert edit.source.count(f"num_warps={warps}, num_stages={stages}") == 2


@pytest.mark.parametrize(
    "launch",
    [
        # One grid read by a second launch: moving it with this kernel's tile would move the other's too.
        "grid = (6, 1, 1)\n        triton_tem_fused_mm_0[grid](A, B, buf0, num_warps=8, num_stages=5)\n"
        "        triton_tem_fused_mm_0[grid](A, B, buf0, num_warps=8, num_stages=5)",
        # The grid from a branch: only one of its values would move.
        "if A.is_cuda:\n            grid = (6, 1, 1)\n        else:\n            grid = (6, 1, 1)\n"
        "        triton_tem_fused_mm_0[grid](A, B, buf0, num_warps=8, num_stages=5)",
    ],
)
def test_a_grid_the_edit_cannot_own_is_left_alone(launch) -> None:
    _, seed = seed_from_wrapper("matmul/matmul.py")
    old = "grid = (6, 1, 1)\n        triton_tem_fused_mm_0[grid](A, B, buf0, num_warps=8, num_stages=5)"
    assert seed.count(old) == 1
    assert not _configs(seed.replace(old, launch))


def test_a_batch_axis_of_the_grid_is_kept() -> None:
    _, seed = seed_from_wrapper("matmul/matmul.py")
    batched = seed.replace("grid = (6, 1, 1)", "grid = (6, 4, 1)")
    for edit in _configs(batched):
        block_m, block_n = edit.detail["config"][:2]
        tiles = -(-SMALL["M"] // block_m) * -(-SMALL["N"] // block_n)
        assert f"grid = ({tiles}, 4, 1)" in edit.source


@interpreted
def test_inductors_templates_run_persistent(tmp_path) -> None:
    """The ``persistent`` edit reads Inductor's own mm template too (``grid_m = (M + BLOCK_M - 1) // BLOCK_M``,
    the program id cast to ``INDEX_DTYPE``, an early return before it): the template keeps computing the same
    when each program loops over several tiles (one per SM: two programs for six tiles on the CPU)."""
    _, seed = seed_from_wrapper("matmul/matmul_bias_relu.py")
    checker = KernelChecker("matmul_bias_relu", tmp_path, SUITE / "matmul")
    (edit,) = [e for e in possible_edits(seed, ("persistent",))]
    source = edit.source
    assert "for tile_id in tl.range(tl.program_id(0), grid_m * grid_n, tl.num_programs(0)):" in source
    assert "pid = tl.cast(tile_id, INDEX_DTYPE)" in source
    assert edit.detail["per_sm"] == 3  # 64 x 32 tiles, eight warps, five stages: registers allow three
    one = source.replace("_persistent_grid(grid, 3)", "_persistent_grid(grid, 1)")
    for candidate in (source, one):
        assert checker.max_error(candidate) < 1e-3
