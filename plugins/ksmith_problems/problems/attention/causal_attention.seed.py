"""Causal flash attention: a program per BLOCK_M queries of one head, streaming K, V up to the diagonal.

Key blocks past the program's last query row are skipped and scores above the diagonal set to -inf.
Otherwise as in attention: Q K^T and P V by tl.dot, an online softmax with fp32 running max, sum and
accumulator, one division by the row sum at the end.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _attention_kernel(
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
):
    # Grid: (query blocks, batch * heads). Each program streams over key/value blocks with an online softmax.
    start_m = tl.program_id(0) * BLOCK_M
    batch_head = tl.program_id(1)
    base = (batch_head // num_heads).to(tl.int64) * stride_b + (batch_head % num_heads).to(
        tl.int64
    ) * stride_h
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = q_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < seq_len, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    end_n = seq_len
    if CAUSAL:  # key blocks past the last query row of this block are fully masked
        end_n = tl.minimum(start_m + BLOCK_M, seq_len)
    for start_n in range(0, end_n, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < seq_len
        k = tl.load(k_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * sm_scale
        valid = offs_n[None, :] < seq_len
        if CAUSAL:
            valid = valid & (offs_n[None, :] <= offs_m[:, None])
        scores = tl.where(valid, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(
        out_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=offs_m[:, None] < seq_len,
    )


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        batch, heads, seq_len, head_dim = q.shape
        out = torch.empty_like(q)
        sm_scale = head_dim**-0.5
        grid = lambda meta: (triton.cdiv(seq_len, meta["BLOCK_M"]), batch * heads)
        _attention_kernel[grid](
            q,
            k,
            v,
            out,
            seq_len,
            sm_scale,
            q.stride(0),
            q.stride(1),
            q.stride(2),
            heads,
            CAUSAL=True,
            HEAD_DIM=head_dim,
            BLOCK_M=64,
            BLOCK_N=32,
            num_warps=4,
            num_stages=2,
        )
        return out
