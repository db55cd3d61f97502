"""64_Gemm_LogSumExp_LeakyReLU_LeakyReLU_GELU_GELU: the Triton kernels Inductor generates for the reference, as a seed.

Launch configurations are literals to be tuned; they start from
the configurations Inductor's autotuner kept on CUDA.
The kernels are compiled for these input shapes only: x (1024, 8192).
"""

import os
import types
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math


if os.environ.get("TRITON_INTERPRET") == "1":
    # The Triton interpreter (CPU) has no libdevice: the same functions from tl operations.
    libdevice = types.SimpleNamespace(
        erf=lambda x: tl.erf(x),
        exp=lambda x: tl.exp(x),
    )
    # The interpreter runs a reduction with a combine function element by element; tl's own
    # reductions compute the same result at numpy speed.
    triton_helpers = types.SimpleNamespace(**vars(triton_helpers))
    triton_helpers.max2 = lambda x, dim: tl.max(x, dim)


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
def triton_red_fused_gelu_leaky_relu_logsumexp_0(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 1024
    r0_numel = 8192
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp2 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp3 = triton_helpers.maximum(_tmp2, tmp1)
        _tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)
    tmp2 = triton_helpers.max2(_tmp2, 1)[:, None]
    _tmp13 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp4 = tl.load(in_ptr0 + (r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp5 = tl_math.abs(tmp2)
        tmp6 = tl.full([1, 1], float("inf"), tl.float32)
        tmp7 = tmp5 == tmp6
        tmp8 = tl.full([1, 1], 0.0, tl.float32)
        tmp9 = tl.where(tmp7, tmp8, tmp2)
        tmp10 = tmp4 - tmp9
        tmp11 = libdevice.exp(tmp10)
        tmp12 = tl.broadcast_to(tmp11, [XBLOCK, R0_BLOCK])
        tmp14 = _tmp13 + tmp12
        _tmp13 = tl.where(r0_mask & xmask, tmp14, _tmp13)
    tmp13 = tl.sum(_tmp13, 1)[:, None]
    tmp15 = tl_math.log(tmp13)
    tmp16 = tl_math.abs(tmp2)
    tmp17 = tl.full([1, 1], float("inf"), tl.float32)
    tmp18 = tmp16 == tmp17
    tmp19 = tl.full([1, 1], 0.0, tl.float32)
    tmp20 = tl.where(tmp18, tmp19, tmp2)
    tmp21 = tmp15 + tmp20
    tmp22 = tmp21 > tmp19
    tmp23 = tl.full([1, 1], 0.01, tl.float32)
    tmp24 = tmp21 * tmp23
    tmp25 = tl.where(tmp22, tmp21, tmp24)
    tmp26 = tmp25 > tmp19
    tmp27 = tmp25 * tmp23
    tmp28 = tl.where(tmp26, tmp25, tmp27)
    tmp29 = tl.full([1, 1], 0.5, tl.float32)
    tmp30 = tmp28 * tmp29
    tmp31 = tl.full([1, 1], 0.7071067811865476, tl.float32)
    tmp32 = tmp28 * tmp31
    tmp33 = libdevice.erf(tmp32)
    tmp34 = tl.full([1, 1], 1.0, tl.float32)
    tmp35 = tmp33 + tmp34
    tmp36 = tmp30 * tmp35
    tmp37 = tmp36 * tmp29
    tmp38 = tmp36 * tmp31
    tmp39 = libdevice.erf(tmp38)
    tmp40 = tmp39 + tmp34
    tmp41 = tmp37 * tmp40
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp41, xmask)


@triton.jit
def _gemm_0_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    bias_ptr,
    M,
    N,
    K,
    stride_ab,
    stride_am,
    stride_ak,
    stride_bb,
    stride_bk,
    stride_bn,
    stride_cb,
    stride_cm,
    stride_cn,
    stride_db,
    stride_dm,
    stride_dn,
    alpha,
    beta,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Grid: (output tiles of one matrix, batch). Tiles are visited in GROUP_M-row groups.
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + batch * stride_ab + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0)
        # "ieee": fp32 operands get full fp32 products, as eager PyTorch computes them (the precision only
        # applies to fp32 x fp32; half operands use the tensor cores either way). One literal, so the mutate
        # proposer's dot_precision edit changes the product the kernel computes.
        acc = tl.dot(a, b, acc, input_precision="tf32")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    acc = acc * alpha
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if HAS_BIAS:
        d_ptrs = bias_ptr + batch * stride_db + offs_m[:, None] * stride_dm + offs_n[None, :] * stride_dn
        acc += beta * tl.load(d_ptrs, mask=mask, other=0.0).to(tl.float32)
    c_ptrs = c_ptr + batch * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def _gemm_0(a, b, out, bias=None, alpha=1.0, beta=1.0):
    """out = beta * bias + alpha * (a @ b), for 2-D or batched 3-D operands (addmm in Inductor's code)."""
    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    c3 = out if out.dim() == 3 else out.unsqueeze(0)
    d3 = c3 if bias is None else torch.broadcast_to(bias, out.shape)
    d3 = d3 if d3.dim() == 3 else d3.unsqueeze(0)
    batch, M, K = a3.shape
    N = b3.shape[2]
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), batch)
    _gemm_0_kernel[grid](
        a3,
        b3,
        c3,
        d3,
        M,
        N,
        K,
        a3.stride(0),
        a3.stride(1),
        a3.stride(2),
        b3.stride(0),
        b3.stride(1),
        b3.stride(2),
        c3.stride(0),
        c3.stride(1),
        c3.stride(2),
        d3.stride(0),
        d3.stride(1),
        d3.stride(2),
        float(alpha),
        float(beta),
        HAS_BIAS=bias is not None,
        BLOCK_M=64,
        BLOCK_N=64,
        BLOCK_K=32,
        GROUP_M=4,
        num_warps=4,
        num_stages=3,
    )
    return out


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super(ModelNew, self).__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x):
        _expect_layout(x, (1024, 8192), (8192, 1), 'x')
        buf0 = torch.empty_strided((1024, 8192), (8192, 1), dtype=torch.float32, device=x.device)
        _gemm_0(x, torch.as_strided(self.linear.weight, (8192, 8192), (1, 8192), 0), buf0, bias=self.linear.bias, alpha=1, beta=1)
        buf2 = torch.empty_strided((1024, 1), (1, 1024), dtype=torch.float32, device=x.device)
        buf3 = torch.as_strided(buf2, (1024, 1), (1, 1), 0)
        grid = lambda meta: (triton.cdiv(1024, meta["XBLOCK"]),)
        triton_red_fused_gelu_leaky_relu_logsumexp_0[grid](buf3, buf0, 1024, 8192, XBLOCK=1, R0_BLOCK=2048, num_warps=16, num_stages=1)
        return buf3
