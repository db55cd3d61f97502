"""Descriptors read what kind of kernel a candidate is, from its source and launch configuration."""

from __future__ import annotations

from ksmith_mapelites.descriptors import AXES, describe

SOFTMAX = """
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        BLOCK_SIZE = triton.next_power_of_2(x.shape[1])
        _softmax_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps=8, num_stages=2)
        return y
"""

MATMUL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    a_block = tl.make_block_ptr(a_ptr, (M, K), (K, 1), (0, 0), (BLOCK_M, BLOCK_K), (1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_block)
        b = tl.load(b_ptr, cache_modifier=".cg")
        acc += tl.dot(a, b)
        a_block = tl.advance(a_block, (0, BLOCK_K))
    tl.store(c_ptr, acc)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device)
        grid = lambda meta: (triton.cdiv(a.shape[0], meta["BLOCK_M"]) * triton.cdiv(b.shape[1], meta["BLOCK_N"]),)
        _matmul_kernel[grid](a, b, c, a.shape[0], b.shape[1], a.shape[1],
                             BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4)
        return c
"""

AUTOTUNED = """
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 2048}, num_warps=16, num_stages=1)], key=["n"])
@triton.jit
def _kernel(x_ptr, n, BLOCK_SIZE: tl.constexpr):
    pass


def launch(x, n):
    _kernel[(1,)](x, n)
"""


def test_block_computed_at_run_time_is_its_own_bucket():
    d = describe(SOFTMAX)
    assert d.block is None
    assert (d.num_warps, d.num_stages, d.uses_dot, d.launches) == (8, 2, False, 1)
    assert d.cell()[AXES.index("block")] == 0
    assert d.cell()[AXES.index("warps")] == 3  # log2(8)


def test_matmul_tile_is_block_m_times_block_n_and_dot_and_memory_pattern_are_seen():
    d = describe(MATMUL)
    assert d.block == 128 * 64
    assert d.uses_dot and d.cache_hints and d.structured_access
    assert (d.num_warps, d.num_stages) == (4, 4)
    cell = dict(zip(AXES, d.cell()))
    assert cell == {"block": 13 - 4 + 1, "warps": 2, "stages": 3, "dot": 1, "launches": 1, "memory": 3}


def test_launch_keyword_bound_to_a_literal_local_is_resolved(source):
    literal = source(block=512)
    through_name = literal.replace("BLOCK_SIZE=512", "BLOCK_SIZE=BLOCK").replace(
        "        n = x.numel()", "        n = x.numel()\n        BLOCK = 512"
    )
    assert "BLOCK_SIZE=BLOCK," in through_name
    assert describe(through_name).block == 512 == describe(literal).block


def test_missing_launch_options_take_triton_defaults(source):
    d = describe(source(warps=None, stages=None))
    assert (d.num_warps, d.num_stages) == (4, 3)


def test_autotune_config_supplies_block_and_launch_options():
    d = describe(AUTOTUNED)
    assert (d.block, d.num_warps, d.num_stages) == (2048, 16, 1)


def test_launch_count_comes_from_sites_unless_the_evaluator_counted_them(source):
    assert describe(source(launches=3)).launches == 3
    assert describe(source(launches=1), 2).launches == 2
    assert describe(source(launches=1), (2, 2, 2, 2, 2)).launches == 2  # one count per trial
    assert describe(source(launches=1), "many").launches == 1
    assert describe(source(launches=1), ()).launches == 1


def test_tuning_changes_the_cell_but_renaming_and_comments_do_not(source):
    base = describe(source(block=1024, warps=4)).cell()
    assert describe(source(block=1024, warps=4, note="a different comment")).cell() == base
    renamed = source(block=1024, warps=4).replace("offsets", "idx").replace("mask", "in_bounds")
    assert describe(renamed).cell() == base
    assert describe(source(block=2048, warps=4)).cell() != base
    assert describe(source(block=1024, warps=8)).cell() != base
    assert describe(source(block=1024, warps=4, stages=4)).cell() != base
    assert describe(source(block=1024, warps=4, hints=True)).cell() != base
    assert describe(source(block=1024, warps=4, dot=True)).cell() != base


def test_indexing_a_module_list_is_not_a_launch(source):
    with_layers = source(launches=1).replace(
        "        return out\n", "        out = self.layers[0](out)\n        return self.heads[-1](out)\n"
    )
    assert "self.layers[0](out)" in with_layers
    assert describe(with_layers).launches == 1


def test_block_buckets_are_clamped():
    tiny = describe("k[(1,)](x, BLOCK_SIZE=2)").cell()[0]
    huge = describe("k[(1,)](x, BLOCK_SIZE=1073741824)").cell()[0]
    assert tiny == 1
    assert describe("k[(1,)](x, BLOCK_SIZE=1048576)").cell()[0] == huge == 13


def test_source_that_does_not_parse_is_described_without_raising():
    d = describe("def broken(:\n")
    assert d.launches == 0 and d.block is None
