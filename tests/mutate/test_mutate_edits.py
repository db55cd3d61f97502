"""Each edit kind on real seed-style kernels: it applies, re-parses, and changes exactly what it says."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import libcst as cst
import pytest

from ksmith_mutate.edits import EDIT_KINDS, possible_edits
from ksmith_mutate.source_model import MutateSourceError, launch_config

from .conftest import KERNEL_NAMES, seed_source


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
        if line.startswith("---") or line.startswith("+++") or line.startswith("@@"):
            continue
        (removed if line.startswith("-") else added).append(line[1:].strip())
    return removed, added


def find(edits, description_start: str):
    matches = [e for e in edits if e.description.startswith(description_start)]
    assert len(matches) == 1, [e.description for e in edits]
    return matches[0]


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_every_edit_reparses_and_touches_one_statement(name):
    source = seed_source(name)
    edits = possible_edits(source)
    assert edits
    assert len({e.source for e in edits}) == len(edits)
    for edit in edits:
        cst.parse_module(edit.source)
        removed, added = changed_lines(source, edit.source)
        if edit.kind in ("tma_loads", "split_k", "persistent"):
            continue  # rewrites of the kernel's loops, checked by their own tests (test_split_k.py, ...)
        if edit.kind == "gemm_config":
            # One launch statement, several of its keywords: only `NAME=<int>,` lines change.
            assert all(re.fullmatch(r"\w+=\d+,", line) for line in removed + added), edit.description
            assert 1 <= len(added) <= 6, edit.description
            continue
        coupled_grid = "(and the grid)" in edit.description
        # A keyword appended to a one-per-line call adds a line and removes none.
        assert max(len(removed), len(added)) == (2 if coupled_grid else 1), edit.description


def test_every_kind_applies_to_the_test_kernels():
    """Every Triton kind applies somewhere (the attention kinds to the suite's causal attention seed,
    ``split_row`` to its online softmax seed, ``conv_layout`` to its convolution seed, the memory-structure kinds to the Inductor-shaped L1 norm, reverse cumsum, per-row scale and shift and a serial prefix sum): on
    NVIDIA all but launch_option, which only a platform with extra
    Triton options (MetaX) offers (tests/platforms/test_mutate_on_platforms.py). The native kinds apply to CUDA
    C++ candidates (tests/mutate/test_mutate_native.py)."""
    from ksmith_core.platform import PlatformSignals, platform_facts
    from ksmith_mutate.edits import Limits
    from ksmith_mutate.native import NATIVE_KINDS

    nvidia = Limits.from_platform(platform_facts(signals=PlatformSignals(triton_backend="cuda")))
    metax = Limits.from_platform(platform_facts(signals=PlatformSignals(triton_backend="maca")))
    causal = (
        Path(__file__).resolve().parents[2]
        / "plugins/ksmith_problems/problems/attention/causal_attention.seed.py"
    )
    sources = [
        seed_source(name)
        for name in (*KERNEL_NAMES, "l1norm_looped", "cumsum_reverse", "rows_affine", "lengths_prefix")
    ]
    sources.append(causal.read_text(encoding="utf-8"))
    sources.append((causal.parents[1] / "softmax/online_softmax.seed.py").read_text(encoding="utf-8"))
    sources.append((causal.parents[1] / "pooling/conv2d_bias_relu.seed.py").read_text(encoding="utf-8"))
    kinds = {e.kind for source in sources for e in possible_edits(source, None, nvidia)}
    assert kinds == set(EDIT_KINDS) - {"launch_option"} - set(NATIVE_KINDS)
    assert {e.kind for e in possible_edits(seed_source(KERNEL_NAMES[0]), None, metax)} >= {"launch_option"}


def test_block_size_doubles_with_its_grid_literal():
    source = seed_source("softplus")
    edit = find(possible_edits(source), "BLOCK_SIZE 1024 -> 2048 in")
    assert edit.kind == "block_size" and not edit.safer
    assert changed_lines(source, edit.source) == (
        [
            "grid = (triton.cdiv(n_elements, 1024),)",
            "_softplus_kernel[grid](x, y, n_elements, BLOCK_SIZE=1024, num_warps=4)",
        ],
        [
            "grid = (triton.cdiv(n_elements, 2048),)",
            "_softplus_kernel[grid](x, y, n_elements, BLOCK_SIZE=2048, num_warps=4)",
        ],
    )
    halved = find(possible_edits(source), "BLOCK_SIZE 1024 -> 512 in")
    assert halved.safer
    # With the warps: each thread keeps its elements.
    paired = find(possible_edits(source), "BLOCK_SIZE 1024 -> 2048 with num_warps 4 -> 8")
    assert paired.kind == "block_size" and paired.detail["num_warps"] == [4, 8]
    assert changed_lines(source, paired.source)[1] == [
        "grid = (triton.cdiv(n_elements, 2048),)",
        "_softplus_kernel[grid](x, y, n_elements, BLOCK_SIZE=2048, num_warps=8)",
    ]


def test_computed_block_sizes_are_left_alone():
    for name in ("softmax", "rmsnorm"):
        edits = possible_edits(seed_source(name))
        assert not [e for e in edits if e.kind == "block_size" or "BLOCK_SIZE" in e.description]


def test_ambiguous_grid_coupling_is_not_edited():
    source = seed_source("matmul_bias_relu").replace(
        'grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731',
        "grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)",
    )
    assert "triton.cdiv(M, 32)" in source
    edits = possible_edits(source)
    assert not [e for e in edits if e.description.startswith(("BLOCK_M", "BLOCK_N"))]
    assert [e for e in edits if e.description.startswith("BLOCK_K 16 -> 32")]


def test_launch_values_stay_within_bounds():
    source = (
        seed_source("matmul_bias_relu")
        .replace("BLOCK_M=32", "BLOCK_M=256")
        .replace("BLOCK_N=32", "BLOCK_N=128")
        .replace("BLOCK_K=16", "BLOCK_K=256")
        .replace("num_warps=4", "num_warps=32")
        .replace("num_stages=3", "num_stages=5")
        .replace("GROUP_M=8", "GROUP_M=32")
    )
    descriptions = {e.description.split(" in ")[0] for e in possible_edits(source)}
    assert "BLOCK_M 256 -> 128" in descriptions and "BLOCK_M 256 -> 512" not in descriptions
    assert "BLOCK_N 128 -> 256" not in descriptions  # the accumulator would exceed 256 x 128
    assert "BLOCK_K 256 -> 128" in descriptions and "BLOCK_K 256 -> 512" not in descriptions
    assert {"num_warps 32 -> 16", "num_stages 5 -> 4", "GROUP_M 32 -> 16"} <= descriptions
    assert not [
        d
        for d in descriptions
        if d.startswith(("num_warps 32 -> 64", "num_stages 5 -> 6", "GROUP_M 32 -> 64"))
    ]
    tiny = seed_source("softplus").replace("1024", "16")
    descriptions = {e.description.split(" in ")[0] for e in possible_edits(tiny)}
    assert "BLOCK_SIZE 16 -> 32" in descriptions and "BLOCK_SIZE 16 -> 8" not in descriptions


def test_num_stages_is_added_when_absent_keeping_a_multiline_call_tidy():
    source = seed_source("rmsnorm")
    edit = find(possible_edits(source), "num_stages (default 3) -> 2")
    assert changed_lines(source, edit.source) == ([], ["num_stages=2,"])
    assert "            num_warps=4,\n            num_stages=2,\n        )\n" in edit.source
    single_line = source.replace(
        "            ROWS_PER_PROGRAM=2,\n            num_warps=4,\n        )",
        " ROWS_PER_PROGRAM=2, num_warps=4)",
    )
    edit = find(possible_edits(single_line), "num_stages (default 3) -> 2")
    assert "ROWS_PER_PROGRAM=2, num_warps=4, num_stages=2)" in edit.source


def test_grid_rows_changes_rows_per_program_only_where_the_grid_reads_it():
    source = seed_source("rmsnorm")
    edit = find(possible_edits(source), "ROWS_PER_PROGRAM 2 -> 4")
    assert edit.kind == "grid_rows"
    assert changed_lines(source, edit.source) == (["ROWS_PER_PROGRAM=2,"], ["ROWS_PER_PROGRAM=4,"])
    fixed_grid = source.replace('triton.cdiv(n_rows, meta["ROWS_PER_PROGRAM"])', "n_rows")
    assert not [e for e in possible_edits(fixed_grid) if e.kind == "grid_rows"]


def test_math_rewrites():
    softmax = seed_source("softmax")
    edit = find(possible_edits(softmax), "tl.exp(x) -> tl.exp2")
    assert changed_lines(softmax, edit.source) == (
        ["numerator = tl.exp(x)"],
        ["numerator = tl.exp2(x * 1.4426950408889634)"],
    )
    softplus = seed_source("softplus")
    edit = find(possible_edits(softplus), "tl.log(1.0 + tl.exp(x))")
    assert changed_lines(softplus, edit.source)[1] == ["y = (tl.log2(1.0 + tl.exp(x)) * 0.6931471805599453)"]
    rmsnorm = seed_source("rmsnorm")
    edits = possible_edits(rmsnorm)
    assert changed_lines(rmsnorm, find(edits, "1 / tl.sqrt").source)[1] == [
        "inv_rms = tl.rsqrt(mean_square + eps)"
    ]
    assert changed_lines(rmsnorm, find(edits, "tl.sum(x * x, axis=0) / n_cols").source)[1] == [
        "mean_square = tl.sum(x * x, axis=0) * (1.0 / n_cols)"
    ]


def test_exp_of_a_compound_argument_is_parenthesised():
    source = seed_source("softmax").replace("numerator = tl.exp(x)", "numerator = tl.exp(x - 0.0)")
    edit = [e for e in possible_edits(source) if e.description.startswith("tl.exp(")][0]
    assert "numerator = tl.exp2((x - 0.0) * 1.4426950408889634)" in edit.source


def test_division_by_sqrt_becomes_a_multiply_by_rsqrt():
    source = seed_source("rmsnorm").replace(
        "inv_rms = 1.0 / tl.sqrt(mean_square + eps)", "inv_rms = 2.0 / tl.sqrt(mean_square + eps)"
    )
    edit = [e for e in possible_edits(source) if "tl.sqrt" in e.description][0]
    assert "inv_rms = 2.0 * tl.rsqrt(mean_square + eps)" in edit.source


def test_hints_are_added_changed_and_removed():
    source = seed_source("softplus")
    added = find(possible_edits(source), "eviction_policy none -> evict_first on tl.load")
    assert changed_lines(source, added.source)[1] == [
        'x = tl.load(x_ptr + offsets, mask=mask, other=0.0, eviction_policy="evict_first")'
    ]
    edits = possible_edits(added.source)
    changed = find(edits, "eviction_policy evict_first -> evict_last on tl.load")
    assert 'eviction_policy="evict_last"' in changed.source
    removed = find(edits, "eviction_policy evict_first -> none on tl.load")
    assert removed.safer and removed.source == source
    cached = find(possible_edits(source), "cache_modifier none -> .cg on tl.load")
    assert 'other=0.0, cache_modifier=".cg")' in cached.source
    assert not [
        e for e in possible_edits(source) if e.kind == "cache_modifier" and "tl.store" in e.description
    ]


def test_dot_tiles_group_m_and_precision():
    source = seed_source("matmul_bias_relu")
    edits = possible_edits(source)
    assert find(edits, "BLOCK_K 16 -> 32").kind == "dot_tile"
    assert not [e for e in edits if e.description.startswith("BLOCK_K 16 -> 8")]
    assert find(edits, "GROUP_M 8 -> 4").kind == "group_m"
    tf32 = find(edits, "input_precision ieee -> tf32 ")
    assert changed_lines(source, tf32.source)[1] == ['acc = tl.dot(a, b, acc, input_precision="tf32")']
    default = source.replace(', input_precision="ieee"', "")
    described = [e.description for e in possible_edits(default) if e.kind == "dot_precision"]
    assert described == [
        "input_precision default -> ieee on tl.dot in _matmul_bias_relu_kernel",
        "input_precision default -> tf32x3 on tl.dot in _matmul_bias_relu_kernel",
    ]
    # Faster products are "up"; more precise ones are the safer edits that fix what a faster one broke.
    by_new = {e.detail["new"]: e for e in edits if e.kind == "dot_precision"}
    assert by_new["tf32"].detail["direction"] == "up" and not by_new["tf32"].safer
    assert by_new["tf32x3"].detail["direction"] == "up" and not by_new["tf32x3"].safer
    from_tf32 = {e.detail["new"]: e for e in possible_edits(tf32.source) if e.kind == "dot_precision"}
    assert from_tf32["tf32x3"].safer and from_tf32["ieee"].safer
    assert from_tf32["tf32x3"].detail["direction"] == "down"
    # Triton reads the precision in any case, and an unranked one (bf16x3) still lists its edits.
    upper = {
        e.detail["new"]
        for e in possible_edits(source.replace('"ieee"', '"IEEE"'))
        if e.kind == "dot_precision"
    }
    assert upper == {"tf32", "tf32x3"}
    other = {
        e.detail["new"]: e
        for e in possible_edits(source.replace('"ieee"', '"bf16x3"'))
        if e.kind == "dot_precision"
    }
    assert set(other) == {"tf32", "ieee", "tf32x3"} and other["ieee"].safer and not other["tf32"].safer


def test_gemm_config_moves_a_tiled_matmul_to_an_inductor_config_at_once():
    source = seed_source("matmul_bias_relu")
    configs = {tuple(e.detail["config"]): e for e in possible_edits(source, ("gemm_config",))}
    assert (128, 128, 64, 3, 4) in configs  # one of Inductor's mm template configs (M, N, K, stages, warps)
    edit = configs[(128, 128, 64, 3, 4)]
    assert edit.detail["direction"] == "up" and not edit.safer
    launch = launch_config(edit.source)["launches"][0]["literals"]
    assert launch == {
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
        "GROUP_M": 8,
        "num_warps": 4,
        "num_stages": 3,
    }
    # Never an accumulator tile above 256 x 128, never the config the kernel already has (32x32x16, 4 warps,
    # 3 stages is not one of Inductor's, so every config is offered once).
    assert all(m * n <= 256 * 128 for (m, n, *_rest) in configs)
    seeded = launch_config(source)["launches"][0]["literals"]
    assert (
        seeded["BLOCK_M"],
        seeded["BLOCK_N"],
        seeded["BLOCK_K"],
        seeded["num_stages"],
        seeded["num_warps"],
    ) not in configs
    again = {tuple(e.detail["config"]) for e in possible_edits(edit.source, ("gemm_config",))}
    assert (128, 128, 64, 3, 4) not in again and len(again) == len(configs) - 1


def test_gemm_config_needs_all_three_tile_sizes_and_skips_autotuned_kernels():
    source = seed_source("matmul_bias_relu")
    assert possible_edits(source, ("gemm_config",))
    # Without a literal BLOCK_K at the launch (computed in forward), the config cannot be set as a whole.
    fixed_k = re.sub(r"BLOCK_K=\d+", "BLOCK_K=min(64, K)", source)
    assert not possible_edits(fixed_k, ("gemm_config",))


def test_tma_loads_reads_operands_through_descriptors_in_their_real_layout():
    source = seed_source("matmul_bias_relu")  # Triton's tutorial idiom: the loop counts K tiles
    edit, *at_large_tiles = possible_edits(source, ("tma_loads",))
    new = edit.source
    # One descriptor per operand over its whole extent (read from the load's mask, through `k_remaining`),
    # built over the operand's real layout: the launch says which stride is 1 (a Linear weight: the K one).
    assert "tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, stride_ak]" in new
    assert "tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, stride_bk]" in new
    assert "a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])" in new
    assert "b = tl.trans(b_desc.load([pid_n * BLOCK_N, k * BLOCK_K]))" in new
    launch = changed_lines(source, new)[1]
    assert "A_ROW_MAJOR=x.stride(1) == 1," in launch and "B_ROW_MAJOR=w.stride(0) == 1," in launch
    # Device-side descriptors get their scratch allocator once. Where the operands' layout cannot be read by
    # a descriptor, the original pointer loop runs: the launch checks and says which (USE_TMA).
    assert new.count("triton.set_allocator(") == 1 and new.count("def _tma_aligned(") == 1
    assert "USE_TMA=_tma_aligned(x, w)," in launch
    tma_branch, pointer_branch = new.split("    if USE_TMA:\n", 1)[1].split("\n    else:\n", 1)
    assert "a_desc.load(" in tma_branch and "a_ptrs += BLOCK_K" not in tma_branch
    assert "a_ptrs += BLOCK_K" in pointer_branch and "tl.load(a_ptrs" in pointer_branch
    # Applied once: the rewritten kernel offers no second rewrite.
    assert not possible_edits(new, ("tma_loads",))
    # The same rewrite is offered at Inductor's large eight-warp tiles, where loading by descriptor pays.
    configs = [tuple(e.detail["config"]) for e in at_large_tiles]
    assert (128, 256, 64, 4, 8) in configs
    assert all(m * n >= 128 * 128 and warps == 8 for m, n, _k, _stages, warps in configs)
    sized = launch_config(at_large_tiles[configs.index((128, 256, 64, 4, 8))].source)["launches"][0][
        "literals"
    ]
    assert (sized["BLOCK_M"], sized["BLOCK_N"], sized["BLOCK_K"], sized["num_warps"]) == (128, 256, 64, 8)
    assert all("b_desc = tl.make_tensor_descriptor" in e.source for e in at_large_tiles)


def test_tma_loads_on_the_suite_idiom_where_the_loop_counts_elements():
    from pathlib import Path

    suite = Path(__file__).parents[2] / "plugins" / "ksmith_problems" / "problems" / "matmul"
    edit = possible_edits((suite / "bmm.seed.py").read_text(), ("tma_loads",))[0]
    # The batch offset stays in the descriptor's base pointer; the loop variable is the K position itself.
    assert "tl.make_tensor_descriptor(a_ptr + batch * stride_ab, shape=[M, K]" in edit.source
    assert "a = a_desc.load([pid_m * BLOCK_M, k])" in edit.source


def test_tma_loads_needs_the_mask_that_says_how_large_an_operand_is():
    source = seed_source("matmul_bias_relu")
    unmasked = re.sub(r"tl\.load\((\w+_ptrs), mask=[^\n]*\)", r"tl.load(\1)", source)
    assert unmasked != source
    assert not possible_edits(unmasked, ("tma_loads",))


def test_kinds_filter_and_deterministic_order():
    source = seed_source("matmul_bias_relu")
    only = possible_edits(source, kinds=("num_warps",))
    assert {e.kind for e in only} == {"num_warps"}
    assert [e.source for e in possible_edits(source)] == [e.source for e in possible_edits(source)]


def test_unparseable_source_raises_a_ksmith_error():
    with pytest.raises(MutateSourceError):
        possible_edits("def broken(:\n")


def test_launch_config_reads_launches_and_kernel_facts():
    config = launch_config(seed_source("matmul_bias_relu"))
    assert config["kernels"] == ["_matmul_bias_relu_kernel"]
    assert config["launch_sites"] == 1
    assert config["block_sizes"] == {"BLOCK_M": [32], "BLOCK_N": [32], "BLOCK_K": [16]}
    assert config["num_warps"] == [4] and config["num_stages"] == [3] and config["group_m"] == [8]
    assert config["uses_dot"] and config["dot_input_precision"] == ["ieee"]
    softmax = launch_config(seed_source("softmax"))
    assert softmax["block_sizes"] == {} and not softmax["uses_dot"] and softmax["math"] == []
    hinted = [e for e in possible_edits(seed_source("softmax")) if e.kind in ("eviction_policy", "math")]
    facts = [launch_config(e.source) for e in hinted]
    assert any(f["eviction_policies"] == ["evict_first"] for f in facts)
    assert any(f["math"] == ["exp2"] for f in facts)


def test_launch_options_are_not_added_to_an_autotuned_kernel():
    source = seed_source("softplus").replace(
        "@triton.jit",
        '@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=["n_elements"])\n@triton.jit',
    )
    descriptions = [e.description for e in possible_edits(source)]
    assert not [d for d in descriptions if d.startswith("num_stages")]
    assert [d for d in descriptions if d.startswith("num_warps 4 -> 8")]  # present at the launch: still tuned


def test_block_rows_is_a_grid_shape_tunable_not_a_tile():
    source = seed_source("rmsnorm").replace("ROWS_PER_PROGRAM", "BLOCK_ROWS")
    kinds = {e.kind for e in possible_edits(source) if "BLOCK_ROWS" in e.description}
    assert kinds == {"grid_rows"}
    assert launch_config(source)["block_sizes"] == {}


def test_no_tile_edit_grows_past_shared_memory():
    from ksmith_mutate.gemm_configs import fits_shared_memory

    # 4 stages of a 128x128x128 tile need 256 KiB even at two bytes per element: a compile error on an H100.
    assert not fits_shared_memory(128, 128, 128, 4) and fits_shared_memory(128, 256, 64, 4)
    source = seed_source("matmul_bias_relu")
    for edit in possible_edits(source, ("gemm_config", "tma_loads")):
        if "config" in edit.detail:
            m, n, k, stages, _warps = edit.detail["config"]
            assert fits_shared_memory(m, n, k, stages), edit.description
    # A tile grown step by step stops where its stages no longer fit: BLOCK_N 128 -> 256 at 5 stages is not offered.
    big = re.sub(r"BLOCK_M=\d+", "BLOCK_M=128", source)
    big = re.sub(r"BLOCK_N=\d+", "BLOCK_N=128", big)
    big = re.sub(r"BLOCK_K=\d+", "BLOCK_K=64", big)
    big = re.sub(r"num_stages=\d+", "num_stages=5", big)
    described = [e.description for e in possible_edits(big, ("dot_tile",))]
    assert "BLOCK_N 128 -> 256 in _matmul_bias_relu_kernel launch" not in described
    assert any(d.startswith("BLOCK_N 128 -> 64") for d in described)


def test_fp32_operands_take_twice_the_shared_memory():
    from ksmith_mutate.edits import Limits
    from ksmith_mutate.gemm_configs import fits_shared_memory

    # 128x128x64 at 5 stages: 160 KiB of half tiles fit; 320 KiB of fp32 tiles do not (a compile error).
    assert fits_shared_memory(128, 128, 64, 5) and not fits_shared_memory(128, 128, 64, 5, element_bytes=4)
    source = seed_source("matmul_bias_relu")
    half = possible_edits(source, ("gemm_config", "tma_loads"), Limits(element_bytes=2))
    full = possible_edits(source, ("gemm_config", "tma_loads"), Limits(element_bytes=4))
    configs = [tuple(e.detail["config"]) for e in full if "config" in e.detail]
    assert configs and all(fits_shared_memory(m, n, k, s, element_bytes=4) for m, n, k, s, _ in configs)
    assert {e.description for e in full} < {e.description for e in half}  # the half tiles that no longer fit


def test_tma_loads_keep_pointer_loads_for_operands_a_descriptor_cannot_read():
    """A descriptor needs a 16-byte aligned base and 16-byte multiple strides: an fp32 matrix 2949 wide read
    through one gave wrong results on the H100 (KernelBench's 8_Matmul_with_irregular_shapes_)."""
    import torch

    from ksmith_mutate.tma import ALIGNED_SOURCE

    space: dict = {}
    exec(ALIGNED_SOURCE, space)
    aligned = space["_tma_aligned"]
    assert aligned(torch.zeros(64, 64), torch.zeros(64, 128).t())  # a Linear weight read transposed
    assert not aligned(torch.zeros(8, 2949), torch.zeros(2949, 64))  # a row of 11796 bytes
    assert aligned(torch.zeros(8, 2952, dtype=torch.float16))  # 5904 bytes: a multiple of 16
    assert not aligned(torch.zeros(65)[1:].view(8, 8))  # a base 4 bytes past an aligned one
    assert not aligned(torch.zeros(64, 1))  # strides (1, 1): a second unit stride is a 4-byte row
    assert not aligned(torch.zeros(1, 64).expand(8, 64))  # a stride of 0 (an expanded operand)


def test_tma_loads_on_an_operand_no_descriptor_can_read_runs_the_pointer_loop_and_is_right():
    """The edited kernel, run by Triton's interpreter on a Linear whose K (37 fp32) makes rows of 148 bytes."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = """
import sys, types
import torch
from ksmith_mutate.edits import possible_edits
source = open(sys.argv[1]).read()
edit = possible_edits(source, ("tma_loads",))[0]
module = types.ModuleType("candidate")
exec(compile(edit.source, "candidate.py", "exec"), module.__dict__)
torch.manual_seed(0)
model, x = module.ModelNew(37, 24), torch.randn(20, 37)
want = torch.relu(torch.nn.functional.linear(x, model.linear.weight, model.linear.bias))
assert not module._tma_aligned(x, model.linear.weight)
torch.testing.assert_close(model(x), want, atol=1e-4, rtol=1e-4)
"""
    seed = Path(__file__).parent / "kernels" / "matmul_bias_relu.seed.py"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script, str(seed)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
