"""Attention as one harvested region: recognised in Llama's Dynamo graph, written as a problem, seeded with one
Triton kernel that the evaluator accepts, and swapped back into the model."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from ksmith_compile.attention import is_attention, recognise  # noqa: E402
from ksmith_compile.harvest import find_regions, harvest  # noqa: E402
from ksmith_compile.library import load_library  # noqa: E402

from .conftest import DATA, ksmith  # noqa: E402
from .helpers import dynamo_graph, triton_launches  # noqa: E402
from .test_harvest import _decoder_with, _evaluate, _evolved_library  # noqa: E402

# Head size 128 (the DOT path of the seed, tl.dot on [16, 64] halves) in float16: the Triton interpreter's
# tl.dot on bfloat16 is wrong on CPU, float16 is exact enough to compare.
HALF_LLAMA = """
import torch
import torch.nn as nn
from transformers import LlamaConfig, LlamaModel


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        config = LlamaConfig(vocab_size=64, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
        self.model = LlamaModel(config).half()

    def forward(self, ids):
        return self.model(ids, use_cache=False).last_hidden_state


def get_inputs():
    return [torch.randint(0, 64, ({batch}, {seq}))]


def get_init_inputs():
    return []
"""


def _attention_problem(summary):
    (problem,) = [p for p in summary["problems"] if p["kind"] == "attention"]
    return problem


@pytest.mark.slow
def test_llamas_attention_block_is_one_region_from_the_projections_to_o_proj(tmp_path):
    """The heads' split, rotary, the grouped-query repeat, SDPA and the heads' merge are one problem, the tiny
    decoder's one layer's block, whose inputs are the three projections' outputs, the rotary tables and the
    mask; its seed passes the evaluator, and one that skips the rotary on k does not."""
    out = tmp_path / "out"
    problem = _attention_problem(harvest(DATA / "tiny_llama.py", out))
    assert problem["problem"].endswith("_attention") and problem["occurrences"] == ["0:attn_output_3"]
    assert problem["ops"].count("scaled_dot_product_attention") == 1 and problem["ops"][-1] == "contiguous"
    assert [(i["shape"], i["dtype"]) for i in problem["inputs"]] == [
        ([2, 8, 64], "float32"), ([2, 8, 32], "float32"), ([2, 8, 32], "float32"),  # q, k, v projections
        ([1, 8, 16], "float32"), ([1, 8, 16], "float32"),  # cos, sin
        ([2, 1, 8, 8], "bool"),  # the causal mask
    ]  # fmt: skip
    assert "torch.ones([2, 1, 8, 8], dtype=torch.bool).tril()" in (out / problem["file"]).read_text()
    seed = (out / problem["seed"]).read_text()
    assert "DOT=False" in seed and "ROTARY_K=True" in seed  # head size 16: halves too narrow for tl.dot
    assert _evaluate(out / problem["file"], out / problem["seed"]) == "ok"
    (out / "bad.seed.py").write_text(seed.replace("ROTARY_K=True", "ROTARY_K=False"))
    assert _evaluate(out / problem["file"], out / "bad.seed.py") == "incorrect"


@pytest.mark.slow
@pytest.mark.parametrize("batch, seq", [(8, 1), (1, 130)])  # a decode step; three key blocks, causal
def test_the_seed_at_head_size_128_on_tensor_cores(tmp_path, batch, seq):
    model = tmp_path / "llama.py"
    model.write_text(HALF_LLAMA.format(batch=batch, seq=seq))
    out = tmp_path / "out"
    problem = _attention_problem(harvest(model, out))
    assert len(problem["occurrences"]) == 2  # one per layer, written once
    seed = (out / problem["seed"]).read_text()
    assert (
        "DOT=True" in seed
        and "GROUP=HQ // HKV" in seed
        and f"B, S, SK, HQ, HKV, D = {batch}, {seq}, {seq}, 2, 1, 128" in seed
    )
    assert _evaluate(out / problem["file"], out / problem["seed"]) == "ok"


@pytest.mark.slow
def test_the_attention_block_evolved_and_exported_swaps_back_as_one_kernel(tmp_path):
    summary = harvest(DATA / "tiny_llama.py", tmp_path / "problems")
    problem = _attention_problem(summary)
    library = _evolved_library(tmp_path / "problems" / problem["file"], tmp_path)
    (entry,) = load_library(library).entries
    with triton_launches(entry) as launched:
        got, want, recorder = _decoder_with(library)
    swapped = [(r.entry, r.region.split("@")[1]) for r in recorder.regions if r.swapped]
    assert swapped == [(problem["problem"], "attn_output_3")]
    assert launched == ["_attention_kernel"]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_block_with_an_intermediate_read_elsewhere_or_dropout_is_not_one_region():
    """Only what the rest of the model does not read goes into the region, and dropout is no kernel's."""

    def attention(q, k, v, p=0.0, leak=False):
        qh = q.view(2, 4, 2, 8).transpose(1, 2)
        kh = k.view(2, 4, 2, 8).transpose(1, 2)
        vh = v.view(2, 4, 2, 8).transpose(1, 2)
        o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, dropout_p=p, is_causal=True)
        o = o.transpose(1, 2).reshape(2, 4, 16).contiguous()
        return (o, qh.sum()) if leak else o

    q, k, v = (torch.randn(2, 4, 16) for _ in range(3))
    gm, _ = dynamo_graph(attention, q, k, v)
    (block,) = [recognise(n) for n in gm.graph.nodes if is_attention(n)]
    assert block is not None and block.causal and block.merged and block.q.split and block.q.cos is None
    assert [kind for kind, _ in find_regions(gm)].count("attention") == 1
    gm, _ = dynamo_graph(lambda q, k, v: attention(q, k, v, leak=True), q, k, v)
    assert [recognise(n) for n in gm.graph.nodes if is_attention(n)] == [None]
    gm, _ = dynamo_graph(lambda q, k, v: attention(q, k, v, p=0.5), q, k, v)
    assert [recognise(n) for n in gm.graph.nodes if is_attention(n)] == [None]


def test_harvest_of_a_plain_attention_writes_a_seed_the_evaluator_accepts(tmp_path):
    """No rotary, no repeat, a causal flag instead of a mask: the seed's other branches."""
    model = tmp_path / "plain.py"
    model.write_text(PLAIN_ATTENTION)
    out = tmp_path / "out"
    problem = _attention_problem(harvest(model, out))
    seed = (out / problem["seed"]).read_text()
    assert "ROTARY_Q=False" in seed and "CAUSAL=True" in seed and "MASK=0" in seed
    proc = ksmith("eval", out / problem["file"], out / problem["seed"], "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "ok"


PLAIN_ATTENTION = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, q, k, v):
        qh = q.view(3, 20, 4, 32).transpose(1, 2)
        kh = k.view(3, 20, 4, 32).transpose(1, 2)
        vh = v.view(3, 20, 4, 32).transpose(1, 2)
        o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
        return o.transpose(1, 2).reshape(3, 20, 128).contiguous()


def get_inputs():
    return [torch.randn(3, 20, 128), torch.randn(3, 20, 128), torch.randn(3, 20, 128)]


def get_init_inputs():
    return []
"""


CACHED_ATTENTION = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, q, keys, values, cos, sin, mask):  # a decode step: the keys and values from a cache
        qh = q.view(2, 3, 4, 32).transpose(1, 2)
        x1, x2 = qh[..., :16], qh[..., 16:]
        qh = qh * cos.unsqueeze(1) + torch.cat((-x2, x1), dim=-1) * sin.unsqueeze(1)
        k = keys[:, :, None, :, :].expand(2, 2, 2, 40, 32).reshape(2, 4, 40, 32)
        v = values[:, :, None, :, :].expand(2, 2, 2, 40, 32).reshape(2, 4, 40, 32)
        o = torch.nn.functional.scaled_dot_product_attention(qh, k, v, attn_mask=mask)
        return o.transpose(1, 2).reshape(2, 3, 128).contiguous()


def get_inputs():
    return [
        torch.randn(2, 3, 128), torch.randn(2, 2, 40, 32), torch.randn(2, 2, 40, 32),
        torch.randn(1, 3, 32), torch.randn(1, 3, 32), torch.ones(2, 1, 3, 40, dtype=torch.bool).tril(37),
    ]


def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_keys_from_a_cache_longer_than_the_queries(tmp_path):
    """A decode step over cached keys and values (already rotated, 40 of them for 3 queries): the block is one
    region whose seed loops over every key, the mask written causal with the cached keys all visible."""
    model = tmp_path / "cached.py"
    model.write_text(CACHED_ATTENTION)
    out = tmp_path / "out"
    problem = _attention_problem(harvest(model, out))
    assert "torch.ones([2, 1, 3, 40], dtype=torch.bool).tril(37)" in (out / problem["file"]).read_text()
    seed = (out / problem["seed"]).read_text()
    assert "B, S, SK, HQ, HKV, D = 2, 3, 40, 4, 2, 32" in seed and "ROTARY_K=False" in seed
    assert _evaluate(out / problem["file"], out / problem["seed"]) == "ok"
    (out / "short.seed.py").write_text(seed.replace("S, SK, 0.", "S, S, 0."))  # only as many keys as queries
    assert _evaluate(out / problem["file"], out / "short.seed.py") == "incorrect"


UNMERGED_ATTENTION = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, q, k, v, mask):
        qh = q.view(2, 8, 4, 32).transpose(1, 2)
        kh = k.view(2, 4, 4, 32).transpose(1, 2)
        vh = v.view(2, 4, 4, 32).transpose(1, 2)
        o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
        return o.{tail}


def get_inputs():
    return [
        torch.randn(2, 8, 128), torch.randn(2, 4, 128), torch.randn(2, 4, 128),
        torch.ones(2, 1, 8, 4, dtype=torch.bool),
    ]


def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_only_a_transpose_back_merges_the_heads_and_a_row_with_no_key_is_zero(tmp_path):
    """``o.reshape(B, S, H*D)`` without the transpose is no merge of the heads: the block ends at the attention.
    With the merge, a query row whose mask keeps no key comes out 0, as SDPA gives, not 0/0."""
    from .test_harvest import _import

    for tail, last in (("reshape(2, 8, 128)", "scaled_dot_product_attention"),
                       ("transpose(1, 2).reshape(2, 8, 128).contiguous()", "contiguous")):  # fmt: skip
        model = tmp_path / f"{last}.py"
        model.write_text(UNMERGED_ATTENTION.format(tail=tail))
        out = tmp_path / last
        problem = _attention_problem(harvest(model, out))
        assert problem["ops"][-1] == last
        assert _evaluate(out / problem["file"], out / problem["seed"]) == "ok"
    reference, seed = _import(out / problem["file"]).Model(), _import(out / problem["seed"]).ModelNew()
    q, k, v, _ = _import(out / problem["file"]).get_inputs()
    mask = torch.ones(2, 1, 8, 4, dtype=torch.bool).tril(-4)  # the first four queries keep no key
    want = reference(q, k, v, mask)
    got = seed(q, k, v, mask)
    assert not got.isnan().any() and float(got[:, :4].abs().max()) == 0.0
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
