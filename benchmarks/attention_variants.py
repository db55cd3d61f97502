"""Variants of ksmith's flash-attention seed kernel timed against SDPA on one GPU: which structural changes matter.

Flags of one kernel: FOLD (softmax in base 2 with the scale folded and the row max taken before scaling; the
scores are not masked for the sequence bound), DOTACC (P V accumulated in the dot), BOUNDS off (no bound masks:
the sequence must divide the key block), SPLIT (causal key loop split at the diagonal). Sweeps the tile,
warps and stages for the seed's code and for all flags on, then turns each flag off (on) alone at the best
configuration. Timed with triton.testing.do_bench (L2 flushed); an exploration, not ksmith's protocol.

    python benchmarks/attention_variants.py rows.json
"""

import itertools
import json
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _inner(
    acc,
    l_i,
    m_i,
    q,
    k_ptr,
    v_ptr,
    base,
    stride_s,
    offs_m,
    offs_d,
    seq_len,
    qk_scale,
    lo,
    hi,
    MASKED: tl.constexpr,
    BOUNDS: tl.constexpr,
    FOLD: tl.constexpr,
    DOTACC: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if BOUNDS:
            kv_mask = offs_n[:, None] < seq_len
            k = tl.load(k_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=kv_mask, other=0.0)
        else:
            k = tl.load(k_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :])
            v = tl.load(v_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :])
        qk = tl.dot(q, tl.trans(k))
        if FOLD:
            if MASKED:
                qk = qk * qk_scale + tl.where(offs_n[None, :] <= offs_m[:, None], 0, -1.0e6)
                m_new = tl.maximum(m_i, tl.max(qk, 1))
                qk -= m_new[:, None]
            else:
                m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                qk = qk * qk_scale - m_new[:, None]
            p = tl.math.exp2(qk)
            alpha = tl.math.exp2(m_i - m_new)
        else:
            scores = qk * qk_scale
            if MASKED:
                scores = tl.where(offs_n[None, :] <= offs_m[:, None], scores, float("-inf"))
            if BOUNDS:
                scores = tl.where(offs_n[None, :] < seq_len, scores, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, axis=1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if DOTACC:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    seq_len,
    sm_scale,
    stride_b,
    stride_h,
    stride_s,
    num_heads,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FOLD: tl.constexpr,
    DOTACC: tl.constexpr,
    BOUNDS: tl.constexpr,
    SPLIT: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    base = (bh // num_heads).to(tl.int64) * stride_b + (bh % num_heads).to(tl.int64) * stride_h
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    if BOUNDS:
        q = tl.load(
            q_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :],
            mask=offs_m[:, None] < seq_len,
            other=0.0,
        )
    else:
        q = tl.load(q_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale
    if FOLD:
        qk_scale = sm_scale * 1.44269504
    if CAUSAL:
        end_n = tl.minimum(start_m + BLOCK_M, seq_len)
        if SPLIT:
            acc, l_i, m_i = _inner(
                acc,
                l_i,
                m_i,
                q,
                k_ptr,
                v_ptr,
                base,
                stride_s,
                offs_m,
                offs_d,
                seq_len,
                qk_scale,
                0,
                start_m,
                False,
                BOUNDS,
                FOLD,
                DOTACC,
                BLOCK_N,
            )
            acc, l_i, m_i = _inner(
                acc,
                l_i,
                m_i,
                q,
                k_ptr,
                v_ptr,
                base,
                stride_s,
                offs_m,
                offs_d,
                seq_len,
                qk_scale,
                start_m,
                end_n,
                True,
                BOUNDS,
                FOLD,
                DOTACC,
                BLOCK_N,
            )
        else:
            acc, l_i, m_i = _inner(
                acc,
                l_i,
                m_i,
                q,
                k_ptr,
                v_ptr,
                base,
                stride_s,
                offs_m,
                offs_d,
                seq_len,
                qk_scale,
                0,
                end_n,
                True,
                BOUNDS,
                FOLD,
                DOTACC,
                BLOCK_N,
            )
    else:
        acc, l_i, m_i = _inner(
            acc,
            l_i,
            m_i,
            q,
            k_ptr,
            v_ptr,
            base,
            stride_s,
            offs_m,
            offs_d,
            seq_len,
            qk_scale,
            0,
            seq_len,
            False,
            BOUNDS,
            FOLD,
            DOTACC,
            BLOCK_N,
        )
    out = acc / l_i[:, None]
    if BOUNDS:
        tl.store(
            out_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=offs_m[:, None] < seq_len,
        )
    else:
        tl.store(
            out_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], out.to(out_ptr.dtype.element_ty)
        )


def run(q, k, v, causal, BM, BN, w, s, fold, dotacc, bounds, split):
    B, H, S, D = q.shape
    out = torch.empty_like(q)
    _attn[(triton.cdiv(S, BM), B * H)](
        q,
        k,
        v,
        out,
        S,
        D**-0.5,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        H,
        CAUSAL=causal,
        HEAD_DIM=D,
        BLOCK_M=BM,
        BLOCK_N=BN,
        FOLD=fold,
        DOTACC=dotacc,
        BOUNDS=bounds,
        SPLIT=split,
        num_warps=w,
        num_stages=s,
    )
    return out


def main():
    torch.manual_seed(0)
    shape = (8, 16, 2048, 64)
    q, k, v = (torch.randn(shape, dtype=torch.float16, device="cuda") for _ in range(3))
    bench = lambda f: triton.testing.do_bench(f, warmup=50, rep=300)
    rows = []
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        sdpa = bench(lambda causal=causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        print(f"causal={causal} sdpa {sdpa:.4f} ms", flush=True)

        def t(BM, BN, w, s, fold, dotacc, bounds, split, causal=causal, ref=ref):
            try:
                o = run(q, k, v, causal, BM, BN, w, s, fold, dotacc, bounds, split)
                err = (o.float() - ref.float()).abs().max().item()
                ms = bench(lambda: run(q, k, v, causal, BM, BN, w, s, fold, dotacc, bounds, split))
            except Exception as e:
                return None, str(e)[:80]
            return ms, err

        seed = t(64, 32, 4, 2, False, False, True, False)
        print(f"  seed cfg 64/32 w4 s2: {seed}", flush=True)
        best = {}
        for name, flags in [("seed-code", (False, False, True, False)), ("all", (True, True, False, True))]:
            for BM, BN, w, s in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3, 4)):
                if BN > 64 and BM == 128 and s == 4:
                    continue
                ms, err = t(BM, BN, w, s, *flags)
                if ms is None:
                    continue
                rows.append((causal, name, BM, BN, w, s, ms, err))
                if name not in best or ms < best[name][0]:
                    best[name] = (ms, (BM, BN, w, s), err)
            print(f"  best {name}: {best[name]} -> {sdpa / best[name][0]:.3f}x sdpa", flush=True)
        cfg = best["all"][1]
        for off in range(4):
            flags = [True, True, False, True]
            flags[off] = not flags[off]
            ms, err = t(*cfg, *flags)
            print(
                f"  all but flag{off} ({['fold', 'dotacc', 'nobounds', 'split'][off]} undone) at {cfg}: {ms} err {err}",
                flush=True,
            )
        cfg = best["seed-code"][1]
        for on in range(4):
            flags = [False, False, True, False]
            flags[on] = not flags[on]
            ms, err = t(*cfg, *flags)
            print(
                f"  seed-code + {['fold', 'dotacc', 'nobounds', 'split'][on]} at {cfg}: {ms} err {err}",
                flush=True,
            )
    json.dump(rows, open(sys.argv[1], "w"))


main()
