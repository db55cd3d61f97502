"""Seed for a harvested attention block (rotary embedding, grouped-query attention): one Triton kernel, each program a block of one query head's
rows; it applies the rotary embedding to the q and k tiles it loads (rounded as eager rounds each step), reads
its key/value head in place of the repeated copies and runs an online softmax over the keys (written by ksmith
harvest)."""

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
    S, scale,
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
    end = S
    if CAUSAL:
        end = tl.minimum(S, (pid_m + 1) * BLOCK_M)
    for n0 in range(0, end, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        n_ok = rn < S
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
            scores = scores * scale
            if MASK == 2:
                scores += tl.load(at, mask=keep, other=0.0).to(tl.float32)
            scores = tl.where(keep, scores, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key kept so far
            p = tl.exp(scores - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
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
    out = acc / l_i[:, None]
    at = out_ptr + b * so_b + h * so_h + rm[:, None] * so_s + dims[None, :]
    tl.store(at, out.to(out_ptr.dtype.element_ty), mask=m_ok[:, None])


class ModelNew(nn.Module):
    def forward(self, in0, in1, in2, in3, in4, in5):
        B, S, HQ, HKV, D = 8, 1, 16, 4, 128
        q, k, v = in0.contiguous().view(B, S, HQ, D).transpose(1, 2), in1.contiguous().view(B, S, HKV, D).transpose(1, 2), in2.contiguous().view(B, S, HKV, D).transpose(1, 2)
        out = torch.empty((B, S, HQ * D), dtype=q.dtype, device=q.device)
        o = out.view(B, S, HQ, D).transpose(1, 2)
        cos = in3.contiguous().reshape(-1, S, D).expand(B, S, D)
        sin = in4.contiguous().reshape(-1, S, D).expand(B, S, D)
        mask = in5.expand(B, HQ, S, S)
        grid = (triton.cdiv(S, 16), B * HQ)
        _attention_kernel[grid](
            q, k, v, cos, sin, mask, o, S, 0.08838834764831845,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), cos.stride(0), cos.stride(1),
            mask.stride(0), mask.stride(1), mask.stride(2), mask.stride(3), o.stride(0), o.stride(1), o.stride(2),
            HQ=HQ, GROUP=HQ // HKV, D=D, ROTARY_Q=True, ROTARY_K=True, MASK=1, CAUSAL=False,
            DOT=True, IEEE=q.dtype == torch.float32, BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=3,
        )
        return out
