"""Attention as one harvested region: ``scaled_dot_product_attention`` with the code that feeds and follows it.

In a Llama-style layer Inductor runs attention as an extern kernel (cutlass's memory-efficient attention on a
GPU) behind one or two kernels of its own that apply the rotary embedding to q and k, repeat k and v for
grouped-query attention and lay the mask out; a small attention at decode costs several launches. Harvest
writes the whole block as one problem, from the projections' outputs to the tensor the output projection reads:

- the heads split off the projections' outputs: ``x.view(B, S, H, D).transpose(1, 2)``;
- the rotary embedding of q and k, transformers' ``q * cos + rotate_half(q) * sin``;
- k and v repeated for grouped-query attention: ``x[:, :, None].expand(B, Hkv, G, S, D).reshape(B, Hq, S, D)``;
- ``scaled_dot_product_attention`` itself (no dropout; a mask, ``is_causal`` or neither);
- the heads merged back: ``o.transpose(1, 2).reshape(B, S, Hq * D)`` with the ``contiguous`` calls between.

Only what is recognised goes in (the heads' split, the rotary and the repeat are each optional), so the
written problem is exactly the model's code; its seed is one Triton kernel (:data:`ATTENTION_SEED`) that
applies the rotary to each tile it loads and runs an online softmax over the keys, each program one query
head's block of rows, reading its key/value head in place of the repeated copies.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from .nodes import value_of

_SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def is_attention(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in _SDPA


@dataclass
class Operand:
    """One of q, k, v as the region reads it: the input node, whether its heads are split off a [B, S, H*D]
    projection output here (else the input is [B, H, S, D] already), and the rotary's cos/sin inputs."""

    source: torch.fx.Node
    split: bool = False
    cos: torch.fx.Node | None = None
    sin: torch.fx.Node | None = None


@dataclass
class Attention:
    """A recognised attention block: its nodes, operands and the call's settings."""

    nodes: set[torch.fx.Node]
    q: Operand
    k: Operand
    v: Operand
    mask: torch.fx.Node | None
    causal: bool
    scale: float
    merged: bool  # the output is [B, S, Hq*D] (the heads merged back), else [B, Hq, S, D]
    output: torch.fx.Node
    shape: dict[str, int] = field(default_factory=dict)  # B, S, SK (keys), HQ, HKV, D


def _arg(node: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _method(node: Any, *names: str) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_method" and node.target in names


def _function(node: Any, *targets: Any) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets


def _shape(node: Any) -> tuple[int, ...] | None:
    """A node's static shape; None for a non-tensor or symbolic sizes (the seed is written for exact ones)."""
    value = value_of(node)
    if not isinstance(value, torch.Tensor) or not all(isinstance(d, int) for d in value.shape):
        return None
    return tuple(value.shape)


def _heads(node: torch.fx.Node, found: set[torch.fx.Node]) -> Operand:
    """``x.view(B, S, H, D).transpose(1, 2)`` of a [B, S, H*D] input, or the node itself as the input."""
    if _method(node, "transpose") and tuple(node.args[1:]) in ((1, 2), (2, 1)) and not node.kwargs:
        view = node.args[0]
        if _method(view, "view", "reshape") and len(view.users) == 1:
            source, shape = view.args[0], _shape(view)
            if isinstance(source, torch.fx.Node) and shape and len(shape) == 4:
                b, s, h, d = shape
                if _shape(source) == (b, s, h * d):
                    found |= {node, view}
                    return Operand(source, split=True)
    return Operand(node)


def _half(node: Any, x: torch.fx.Node, upper: bool, half: int) -> bool:
    """``x[..., half:]`` (upper) or ``x[..., :half]``."""
    if not _function(node, operator.getitem) or node.args[0] is not x:
        return False
    index = node.args[1]
    want = slice(half, None, None) if upper else slice(None, half, None)
    return isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis and index[1] == want


def _rotary(node: torch.fx.Node, found: set[torch.fx.Node]) -> tuple[torch.fx.Node, Any, Any] | None:
    """(x, cos, sin) of ``x * cos + cat((-x[..., d/2:], x[..., :d/2]), -1) * sin`` (transformers'
    ``apply_rotary_pos_emb``), adding its nodes to ``found``; None if ``node`` is not that."""
    if not _function(node, operator.add, torch.add) or node.kwargs or len(node.args) != 2:
        return None
    for plain, rotated in (node.args, node.args[::-1]):
        if not (_function(plain, operator.mul, torch.mul) and _function(rotated, operator.mul, torch.mul)):
            continue
        for cat, sin in (rotated.args, rotated.args[::-1]):
            if not _function(cat, torch.cat) or _arg(cat, 1, "dim", 0) not in (-1, 3):
                continue
            parts = cat.args[0]
            if (
                not isinstance(parts, (list, tuple))
                or len(parts) != 2
                or not _function(parts[0], operator.neg)
            ):
                continue
            for x, cos in (plain.args, plain.args[::-1]):
                shape = _shape(x)
                if not isinstance(x, torch.fx.Node) or not shape or shape[-1] % 2:
                    continue
                half = shape[-1] // 2
                neg, low = parts
                if _half(neg.args[0], x, True, half) and _half(low, x, False, half):
                    found |= {node, plain, rotated, cat, neg, neg.args[0], low}
                    return x, cos, sin
    return None


def _table(node: Any, found: set[torch.fx.Node]) -> torch.fx.Node | None:
    """The rotary's cos/sin as the region's input: ``t.unsqueeze(1)`` of a [B or 1, S, D] table is taken in
    (each layer makes its own), a [B or 1, 1, S, D] table is read as it is."""
    if not isinstance(node, torch.fx.Node):
        return None
    if _method(node, "unsqueeze") and node.args[1:] == (1,) and isinstance(node.args[0], torch.fx.Node):
        found.add(node)
        return node.args[0]
    return node


def _repeated(node: torch.fx.Node, found: set[torch.fx.Node]) -> torch.fx.Node:
    """The [B, Hkv, S, D] tensor ``node`` repeats for grouped-query attention (transformers' ``repeat_kv``), or
    ``node``."""
    if not _method(node, "reshape"):
        return node
    expand = node.args[0]
    if not _method(expand, "expand") or len(expand.users) != 1:
        return node
    item = expand.args[0]
    if not _function(item, operator.getitem) or len(item.users) != 1:
        return node
    index = item.args[1]
    full = slice(None, None, None)
    if index != (full, full, None, full, full):
        return node
    found |= {node, expand, item}
    return item.args[0]


def recognise(sdpa: torch.fx.Node) -> Attention | None:
    """The attention block around one ``scaled_dot_product_attention`` node, or None where it is not one
    harvest can write with its seed (dropout, an unknown layout, nodes used outside the block)."""
    q, k, v = (_arg(sdpa, i, name) for i, name in enumerate(_SDPA_PARAMS[:3]))
    mask = _arg(sdpa, 3, "attn_mask")
    dropout, causal = _arg(sdpa, 4, "dropout_p", 0.0), _arg(sdpa, 5, "is_causal", False)
    scale, gqa = _arg(sdpa, 6, "scale"), _arg(sdpa, 7, "enable_gqa", False)
    if not isinstance(dropout, (int, float)) or dropout != 0.0 or not isinstance(causal, bool):
        return None  # dropout, or settings that are graph inputs (dynamic=True)
    if (mask is not None and causal) or not (scale is None or isinstance(scale, (int, float))):
        return None
    if not all(isinstance(n, torch.fx.Node) for n in (q, k, v)) or (
        mask is not None and not isinstance(mask, torch.fx.Node)
    ):
        return None
    shapes = [_shape(n) for n in (q, k, v)]
    if any(s is None or len(s) != 4 for s in shapes) or _shape(sdpa) != shapes[0]:
        return None
    b, hq, s, d = shapes[0]
    found: set[torch.fx.Node] = {sdpa}
    operands = []
    for node, repeat in ((q, False), (k, not gqa), (v, not gqa)):
        base = _repeated(node, found) if repeat else node
        rotary = _rotary(base, found)
        if rotary is not None:
            x, cos, sin = rotary
            operand = _heads(x, found)
            operand.cos, operand.sin = _table(cos, found), _table(sin, found)
        else:
            operand = _heads(base, found)
        operands.append(operand)
    key_source = _shape(operands[1].source)
    if key_source is None:
        return None
    hkv = key_source[-1] // d if operands[1].split else key_source[1]
    sk = _shape(k)[2]
    value_source = _shape(operands[2].source)
    value_heads = (
        None if value_source is None else value_source[-1] // d if operands[2].split else value_source[1]
    )
    if hq % hkv or _shape(v)[2] != sk or value_heads != hkv or operands[2].cos is not None:
        return None  # the seed reads k and v with one head mapping, and rotates neither v
    if sk != s and (operands[1].cos is not None or causal):
        # Keys longer than the queries (a KV cache): rotated before they were cached, so the rotary table
        # here has the queries' rows only; and ``is_causal`` would align the mask top-left, as no step wants.
        return None
    output, merged = _merged(sdpa, found, b, s, hq * d)
    inside = found - {output}
    if any(u not in found for n in inside for u in n.users):
        return None  # an intermediate the rest of the model reads too
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    return Attention(
        found, *operands, mask=mask, causal=causal, scale=float(scale), merged=merged, output=output,
        shape={"B": b, "S": s, "SK": sk, "HQ": hq, "HKV": hkv, "D": d},
    )  # fmt: skip


def _merged(
    sdpa: torch.fx.Node, found: set[torch.fx.Node], b: int, s: int, width: int
) -> tuple[torch.fx.Node, bool]:
    """Follow the output through the heads' merge, ``o.transpose(1, 2)`` then views to [B, S, Hq*D] (views
    that keep [B, Hq, S, D] before it, ``contiguous`` calls anywhere): (the region's output node, whether it is
    the merged tensor). A reshape to [B, S, Hq*D] without the transpose is no merge: it is left out."""
    shape = _shape(sdpa)
    chain, node, transposed = [], sdpa, False
    while len(node.users) == 1:
        user = next(iter(node.users))
        if _method(user, "transpose") and not transposed and tuple(user.args[1:]) in ((1, 2), (2, 1)):
            transposed = True
        elif not (
            _method(user, "contiguous")
            or (_method(user, "reshape", "view") and (transposed or _shape(user) == shape))
        ):
            break
        chain.append((user, transposed))
        node = user
    # The longest prefix of the chain, past the transpose, that ends in the contiguous [B, S, Hq*D] tensor.
    for end in range(len(chain), 0, -1):
        last, after = chain[end - 1]
        value = value_of(last)
        if (
            after
            and isinstance(value, torch.Tensor)
            and tuple(value.shape) == (b, s, width)
            and value.is_contiguous()
        ):
            found.update(n for n, _ in chain[:end])
            return last, True
    return sdpa, False


def inputs_of(attention: Attention) -> dict[torch.fx.Node, str]:
    """Each input node of the block by the role the seed gives it."""
    roles: dict[torch.fx.Node, str] = {}
    for name in ("q", "k", "v"):
        operand: Operand = getattr(attention, name)
        roles.setdefault(operand.source, name)
        for table in ("cos", "sin"):
            node = getattr(operand, table)
            if node is not None:
                roles.setdefault(node, table)
    if attention.mask is not None:
        roles.setdefault(attention.mask, "mask")
    return roles


ATTENTION_SEED = '''"""Seed for a harvested attention block{what}: one Triton kernel, each program a block of one query head's
rows; it applies the rotary embedding to the q and k tiles it loads (rounded as eager rounds each step), reads
its key/value head in place of the repeated copies and runs an online softmax over the keys, in base 2 (written
by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rotated(ptr, row_stride, table_ptr, sin_ptr, table_stride, rows, rows_ok, half, HALF: tl.constexpr, ROTARY: tl.constexpr):
    """The two halves of a [rows, 2*HALF] tile, rotated as x * cos + cat(-x2, x1) * sin, each step rounded."""
    lo = tl.load(ptr + rows[:, None] * row_stride + half[None, :], mask=rows_ok[:, None], other=0.0)
    hi = tl.load(ptr + rows[:, None] * row_stride + HALF + half[None, :], mask=rows_ok[:, None], other=0.0)
    if ROTARY:  # in fp32, each product and the sum rounded to the input's dtype
        dt = lo.dtype
        at = rows[:, None] * table_stride + half[None, :]
        c_lo = tl.load(table_ptr + at, mask=rows_ok[:, None], other=0.0).to(tl.float32)
        c_hi = tl.load(table_ptr + at + HALF, mask=rows_ok[:, None], other=0.0).to(tl.float32)
        s_lo = tl.load(sin_ptr + at, mask=rows_ok[:, None], other=0.0).to(tl.float32)
        s_hi = tl.load(sin_ptr + at + HALF, mask=rows_ok[:, None], other=0.0).to(tl.float32)
        x_lo, x_hi = lo.to(tl.float32), hi.to(tl.float32)
        new_lo = (x_lo * c_lo).to(dt).to(tl.float32) - (x_hi * s_lo).to(dt).to(tl.float32)
        new_hi = (x_hi * c_hi).to(dt).to(tl.float32) + (x_lo * s_hi).to(dt).to(tl.float32)
        lo, hi = new_lo.to(dt), new_hi.to(dt)
    return lo, hi


@triton.jit
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, cos_ptr, sin_ptr, mask_ptr, out_ptr,
    S, SK, scale,
    sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s,
    sc_b, sc_s, sm_b, sm_h, sm_q, sm_k, so_b, so_h, so_s,
    HQ: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
    ROTARY_Q: tl.constexpr, ROTARY_K: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
    DOT: tl.constexpr, IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # MASK: 0 none, 1 boolean (True keeps a key), 2 added to the scores.
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    hk = h // GROUP
    half = tl.arange(0, D // 2)
    dims = tl.arange(0, D)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = rm < S
    q_lo, q_hi = _rotated(q_ptr + b * sq_b + h * sq_h, sq_s, cos_ptr + b * sc_b, sin_ptr + b * sc_b, sc_s,
                          rm, m_ok, half, D // 2, ROTARY_Q)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    end = SK
    if CAUSAL:  # S == SK
        end = tl.minimum(S, (pid_m + 1) * BLOCK_M)
    for n0 in range(0, end, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        n_ok = rn < SK
        keep = m_ok[:, None] & n_ok[None, :]
        if CAUSAL:
            keep = keep & (rn[None, :] <= rm[:, None])
        at = mask_ptr + b * sm_b + h * sm_h + rm[:, None] * sm_q + rn[None, :] * sm_k
        if MASK == 1:
            keep = keep & (tl.load(at, mask=keep, other=0) != 0)
        # A block with no key kept (above a causal mask's diagonal, however the mask came) costs no work.
        if tl.max(keep.to(tl.int32)) > 0:
            k_lo, k_hi = _rotated(k_ptr + b * sk_b + hk * sk_h, sk_s, cos_ptr + b * sc_b, sin_ptr + b * sc_b,
                                  sc_s, rn, n_ok, half, D // 2, ROTARY_K)
            if DOT:
                if IEEE:
                    scores = tl.dot(q_lo, tl.trans(k_lo), input_precision="ieee")
                    scores += tl.dot(q_hi, tl.trans(k_hi), input_precision="ieee")
                else:
                    scores = tl.dot(q_lo, tl.trans(k_lo)) + tl.dot(q_hi, tl.trans(k_hi))
            else:
                scores = tl.sum(q_lo.to(tl.float32)[:, None, :] * k_lo.to(tl.float32)[None, :, :], axis=2)
                scores += tl.sum(q_hi.to(tl.float32)[:, None, :] * k_hi.to(tl.float32)[None, :, :], axis=2)
            # The softmax in base 2, log2(e) folded into the scale: exp2 is one instruction, exp two.
            scores = (scores * (scale * 1.4426950408889634)).to(tl.float32)  # Inductor passes a float as fp64
            if MASK == 2:
                scores += tl.load(at, mask=keep, other=0.0).to(tl.float32) * 1.4426950408889634
            scores = tl.where(keep, scores, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key kept so far
            p = tl.exp2(scores - m_safe[:, None])
            alpha = tl.exp2(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_ptr + b * sv_b + hk * sv_h + rn[:, None] * sv_s + dims[None, :], mask=n_ok[:, None],
                        other=0.0)
            acc = acc * alpha[:, None]
            if DOT:
                if IEEE:
                    acc += tl.dot(p.to(v.dtype), v, input_precision="ieee")
                else:
                    acc += tl.dot(p.to(v.dtype), v)
            else:
                acc += tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
            m_i = m_new
    out = tl.where(l_i[:, None] > 0, acc / l_i[:, None], 0.0)  # a row with no key kept: 0, as SDPA gives
    at = out_ptr + b * so_b + h * so_h + rm[:, None] * so_s + dims[None, :]
    tl.store(at, out.to(out_ptr.dtype.element_ty), mask=m_ok[:, None])


class ModelNew(nn.Module):
    def forward(self, {args}):
        B, S, SK, HQ, HKV, D = {B}, {S}, {SK}, {HQ}, {HKV}, {D}
        q, k, v = {q}, {k}, {v}
        out = torch.empty({out_shape}, dtype=q.dtype, device=q.device)
        o = {out_view}
        cos = {cos}
        sin = {sin}
        mask = {mask}
        grid = (triton.cdiv(S, {block_m}), B * HQ)
        _attention_kernel[grid](
            q, k, v, cos, sin, mask, o, S, SK, {scale!r},
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), cos.stride(0), cos.stride(1),
            mask.stride(0), mask.stride(1), mask.stride(2), mask.stride(3), o.stride(0), o.stride(1), o.stride(2),
            HQ=HQ, GROUP=HQ // HKV, D=D, ROTARY_Q={rotary_q}, ROTARY_K={rotary_k}, MASK={mask_kind}, CAUSAL={causal},
            DOT={dot}, IEEE=q.dtype == torch.float32, BLOCK_M={block_m}, BLOCK_N={block_n},{options}
        )
        return out
'''


def _heads_view(name: str, operand: Operand, heads: str, rows: str = "S") -> str:
    """The [B, H, rows, D] view (strides only, no copy) of an operand input, its last dimension contiguous."""
    if operand.split:
        return f"{name}.contiguous().view(B, {rows}, {heads}, D).transpose(1, 2)"
    return f"{name}.contiguous()"


def attention_seed(attention: Attention, activations: list[torch.fx.Node]) -> str | None:
    """The seed kernel's source for a recognised block whose problem takes ``activations`` in this order."""
    shape = attention.shape
    d = shape["D"]
    if d < 2 or d & (d - 1):
        return None  # tl.arange wants powers of two
    index = {node: f"in{i}" for i, node in enumerate(activations)}
    roles = inputs_of(attention)
    if set(roles) != set(activations):
        return None
    q, k, v = attention.q, attention.k, attention.v
    tables = [(o.cos, o.sin) for o in (q, k) if o.cos is not None]
    if len(set(tables)) > 1:
        return None  # q and k rotated with different tables
    cos_sin = tables[0] if tables else None
    for node in cos_sin or ():
        table = _shape(node)
        if (
            table is None
            or table[-2:] != (shape["S"], d)
            or len(table) not in (3, 4)
            or table[0] not in (1, shape["B"])
        ):
            return None
        if len(table) == 4 and table[1] != 1:
            return None
    mask_kind = 0
    if attention.mask is not None:
        value = value_of(attention.mask)
        if not isinstance(value, torch.Tensor) or value.dim() != 4:
            return None
        mask_kind = 1 if value.dtype == torch.bool else 2
    dtype = value_of(q.source).dtype
    half_precision = dtype in (torch.float16, torch.bfloat16)
    dot = d // 2 >= 16
    # A decode step's few rows: the smallest tile tl.dot takes (and keys 64 at a time where a cache holds
    # more). A long sequence: flash attention's usual 128 x 64 tiles at 8 warps. The search moves from there.
    block_m, block_n, warps = (16, 16, 4) if shape["S"] <= 16 or not dot else (64, 64, 4)
    if dot and shape["SK"] > 16:
        block_n = 64
    if dot and shape["S"] >= 512:
        block_m, warps = 128, 8
    options = f" num_warps={warps}, num_stages={2 if half_precision else 1}," if dot else ""

    def table(node: torch.fx.Node | None) -> str:
        if node is None:
            return "q  # unused"
        return f"{index[node]}.contiguous().reshape(-1, S, D).expand(B, S, D)"

    mask = "q.new_empty((1, 1, 1, 1))  # unused"
    if attention.mask is not None:
        m = index[attention.mask]
        mask = f"{m}.expand(B, HQ, S, SK)"  # a bool mask is read as it is (Inductor cannot bitcast bool)
    what = " (rotary embedding, grouped-query attention)" if cos_sin and shape["HQ"] != shape["HKV"] else ""
    if attention.merged:
        out_shape, out_view = "(B, S, HQ * D)", "out.view(B, S, HQ, D).transpose(1, 2)"
    else:
        out_shape, out_view = "(B, HQ, S, D)", "out"
    return ATTENTION_SEED.format(
        what=what,
        args=", ".join(index.values()),
        **shape,
        q=_heads_view(index[q.source], q, "HQ"),
        k=_heads_view(index[k.source], k, "HKV", "SK"),
        v=_heads_view(index[v.source], v, "HKV", "SK"),
        out_shape=out_shape,
        out_view=out_view,
        cos=table(cos_sin[0] if cos_sin else None),
        sin=table(cos_sin[1] if cos_sin else None),
        mask=mask,
        scale=attention.scale,
        rotary_q=q.cos is not None,
        rotary_k=k.cos is not None,
        mask_kind=mask_kind,
        causal=attention.causal,
        dot=dot,
        block_m=block_m,
        block_n=block_n,
        options=options,
    )
