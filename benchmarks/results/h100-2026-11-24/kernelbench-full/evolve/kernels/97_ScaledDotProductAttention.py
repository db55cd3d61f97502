"""97_ScaledDotProductAttention: the Triton kernels Inductor generates for the reference, as a seed.

Launch configurations are literals to be tuned; they start from
the configurations Inductor's autotuner kept on CUDA.
The kernels are compiled for these input shapes only: Q (32, 32, 512, 1024), K (32, 32, 512, 1024), V (32, 32, 512, 1024).
"""

import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


def _expect_layout(tensor: torch.Tensor, size: tuple, stride: tuple, name: str) -> None:
    """The kernels index with the sizes and strides Inductor compiled them for."""
    if tuple(tensor.shape) != size or any(
        n > 1 and s != want for n, s, want in zip(size, tensor.stride(), stride)
    ):
        raise ValueError(
            f"{name} has size {tuple(tensor.shape)} and stride {tensor.stride()}; "
            f"this seed was generated for size {size} and stride {stride}"
        )


@triton.jit
def _attention_0_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    H,
    Lq,
    Lk,
    D,
    DV,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sob,
    soh,
    som,
    sod,
    scale,
    CAUSAL: tl.constexpr,
    IEEE: tl.constexpr,
    Q_RESIDENT: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # Grid: (query blocks, batch x heads, output-feature blocks).
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    pid_dv = tl.program_id(2)
    b = bh // H
    h = bh % H
    q_base = q_ptr + b * sqb + h * sqh
    k_base = k_ptr + b * skb + h * skh
    v_base = v_ptr + b * svb + h * svh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_dv = pid_dv * BLOCK_DV + tl.arange(0, BLOCK_DV)
    offs_d = tl.arange(0, BLOCK_D)
    m_mask = offs_m < Lq
    if Q_RESIDENT:
        q = tl.load(
            q_base + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
            mask=m_mask[:, None] & (offs_d[None, :] < D),
            other=0.0,
        )
    qk_scale = scale * 1.4426950408889634  # softmax in base 2
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    hi = Lk
    if CAUSAL:
        hi = tl.minimum(Lk, (pid_m + 1) * BLOCK_M)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_mask = offs_n < Lk
        s = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        if Q_RESIDENT:
            k = tl.load(
                k_base + offs_d[:, None] * skd + offs_n[None, :] * skn,
                mask=(offs_d[:, None] < D) & n_mask[None, :],
                other=0.0,
            )
            if IEEE:
                s = tl.dot(q, k, s, input_precision="ieee")
            else:
                s = tl.dot(q, k, s)
        else:
            for d0 in range(0, D, BLOCK_D):
                d = d0 + offs_d
                q_part = tl.load(
                    q_base + offs_m[:, None] * sqm + d[None, :] * sqd,
                    mask=m_mask[:, None] & (d[None, :] < D),
                    other=0.0,
                )
                k_part = tl.load(
                    k_base + d[:, None] * skd + offs_n[None, :] * skn,
                    mask=(d[:, None] < D) & n_mask[None, :],
                    other=0.0,
                )
                if IEEE:
                    s = tl.dot(q_part, k_part, s, input_precision="tf32x3")
                else:
                    s = tl.dot(q_part, k_part, s)
        s = s * qk_scale
        keep = n_mask[None, :]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + offs_n[:, None] * svn + offs_dv[None, :] * svd,
            mask=n_mask[:, None] & (offs_dv[None, :] < DV),
            other=0.0,
        )
        acc = acc * alpha[:, None]
        if IEEE:
            acc = tl.dot(p, v, acc, input_precision="ieee")
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    acc = acc / l_i[:, None]
    o_ptrs = o_ptr + b * sob + h * soh + offs_m[:, None] * som + offs_dv[None, :] * sod
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=m_mask[:, None] & (offs_dv[None, :] < DV))


def _attention_0(q, k, v, is_causal=False, scale=None, out=None):
    """softmax(q @ k^T * scale) @ v over the last two dimensions (aten._scaled_dot_product_efficient_attention in Inductor's code); ``out`` is allocated contiguous
    when None. Returns (out,) like the first of ATen's results; the others (log-sum-exp, ...) are not made."""
    if k.shape[:-2] != q.shape[:-2] or v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"attention over q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: heads differ")
    *lead, Lq, D = q.shape
    Lk, DV = k.shape[-2], v.shape[-1]
    q4, k4, v4 = (t.reshape((-1, 1, *t.shape[-2:])) if t.dim() == 3 else t for t in (q, k, v))
    if out is None:
        out = torch.empty((*lead, Lq, DV), dtype=q.dtype, device=q.device)
    o4 = out.reshape((-1, 1, Lq, DV)) if out.dim() == 3 else out
    B, H = q4.shape[0], q4.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    BLOCK_D = min(max(16, triton.next_power_of_2(D)), 128)
    BLOCK_DV = min(max(16, triton.next_power_of_2(DV)), 128)
    grid = lambda meta: (triton.cdiv(Lq, meta["BLOCK_M"]), B * H, triton.cdiv(DV, BLOCK_DV))
    _attention_0_kernel[grid](
        q4,
        k4,
        v4,
        o4,
        H,
        Lq,
        Lk,
        D,
        DV,
        *q4.stride(),
        *k4.stride(),
        *v4.stride(),
        *o4.stride(),
        float(scale),
        CAUSAL=bool(is_causal),
        IEEE=q.dtype == torch.float32,
        Q_RESIDENT=BLOCK_D >= D,
        BLOCK_D=BLOCK_D,
        BLOCK_DV=BLOCK_DV,
        BLOCK_M=64,
        BLOCK_N=32,
        num_warps=4,
        num_stages=2,
    )
    return (out,)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, Q, K, V):
        _expect_layout(Q, (32, 32, 512, 1024), (16777216, 524288, 1024, 1), 'Q')
        _expect_layout(K, (32, 32, 512, 1024), (16777216, 524288, 1024, 1), 'K')
        _expect_layout(V, (32, 32, 512, 1024), (16777216, 524288, 1024, 1), 'V')
        buf0 = _attention_0(Q, K, V)
        buf1 = buf0[0]
        return buf1
