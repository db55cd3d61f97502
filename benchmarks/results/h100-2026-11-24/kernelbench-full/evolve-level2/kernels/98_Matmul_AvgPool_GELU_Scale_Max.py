"""98_Matmul_AvgPool_GELU_Scale_Max: the Triton kernels Inductor generates for the reference, as a seed.

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
from torch._inductor.runtime.triton_helpers import libdevice


if os.environ.get("TRITON_INTERPRET") == "1":
    # The Triton interpreter (CPU) has no libdevice: the same functions from tl operations.
    libdevice = types.SimpleNamespace(
        erf=lambda x: tl.erf(x),
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
def triton_red_fused_avg_pool2d_gelu_max_mul_squeeze_unsqueeze_0(in_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 1024
    r0_numel = 512
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp44 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.load(in_ptr0 + (1 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp3 = tl.load(in_ptr0 + (2 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp5 = tl.load(in_ptr0 + (3 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp7 = tl.load(in_ptr0 + (4 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp9 = tl.load(in_ptr0 + (5 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp11 = tl.load(in_ptr0 + (6 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp13 = tl.load(in_ptr0 + (7 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp15 = tl.load(in_ptr0 + (8 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp17 = tl.load(in_ptr0 + (9 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp19 = tl.load(in_ptr0 + (10 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp21 = tl.load(in_ptr0 + (11 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp23 = tl.load(in_ptr0 + (12 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp25 = tl.load(in_ptr0 + (13 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp27 = tl.load(in_ptr0 + (14 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp29 = tl.load(in_ptr0 + (15 + 16*r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp2 = tmp0 + tmp1
        tmp4 = tmp2 + tmp3
        tmp6 = tmp4 + tmp5
        tmp8 = tmp6 + tmp7
        tmp10 = tmp8 + tmp9
        tmp12 = tmp10 + tmp11
        tmp14 = tmp12 + tmp13
        tmp16 = tmp14 + tmp15
        tmp18 = tmp16 + tmp17
        tmp20 = tmp18 + tmp19
        tmp22 = tmp20 + tmp21
        tmp24 = tmp22 + tmp23
        tmp26 = tmp24 + tmp25
        tmp28 = tmp26 + tmp27
        tmp30 = tmp28 + tmp29
        tmp31 = tl.full([1, 1], 16.0, tl.float32)
        tmp32 = (tmp30 / tmp31)
        tmp33 = tl.full([1, 1], 0.5, tl.float32)
        tmp34 = tmp32 * tmp33
        tmp35 = tl.full([1, 1], 0.7071067811865476, tl.float32)
        tmp36 = tmp32 * tmp35
        tmp37 = libdevice.erf(tmp36)
        tmp38 = tl.full([1, 1], 1.0, tl.float32)
        tmp39 = tmp37 + tmp38
        tmp40 = tmp34 * tmp39
        tmp41 = tl.full([1, 1], 2.0, tl.float32)
        tmp42 = tmp40 * tmp41
        tmp43 = tl.broadcast_to(tmp42, [XBLOCK, R0_BLOCK])
        tmp45 = triton_helpers.maximum(_tmp44, tmp43)
        _tmp44 = tl.where(r0_mask & xmask, tmp45, _tmp44)
    tmp44 = triton_helpers.max2(_tmp44, 1)[:, None]
    tl.store(out_ptr1 + (x0), tmp44, xmask)


def _split_k_grid(grid, axis):
    # The launch grid with meta["SPLIT_K"] programs along ``axis``, one per slice of K (ksmith's split_k edit).
    def split(meta):
        dims = tuple(grid(meta) if callable(grid) else grid)
        dims = dims + (1,) * (axis + 1 - len(dims))
        return dims[:axis] + (meta["SPLIT_K"],) + dims[axis + 1 :]

    return split


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
    SPLIT_K: tl.constexpr,
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
    split_pid = tl.program_id(2)
    split_span = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    split_start = split_pid * split_span
    a_ptrs += split_start.to(tl.int64) * stride_ak
    b_ptrs += split_start.to(tl.int64) * stride_bk
    for k in range(split_start, min(split_start + split_span, K), BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0)
        # "ieee": fp32 operands get full fp32 products, as eager PyTorch computes them (the precision only
        # applies to fp32 x fp32; half operands use the tensor cores either way). One literal, so the mutate
        # proposer's dot_precision edit changes the product the kernel computes.
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    acc = acc * alpha
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if HAS_BIAS:
        d_ptrs = bias_ptr + batch * stride_db + offs_m[:, None] * stride_dm + offs_n[None, :] * stride_dn
        if split_pid == 0:
            acc += beta * tl.load(d_ptrs, mask=mask, other=0.0).to(tl.float32)
    c_ptrs = c_ptr + batch * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.atomic_add(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


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
    _gemm_0_kernel[_split_k_grid(grid, 2)](
        a3,
        b3,
        c3.zero_(),
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
        GROUP_M=8,
        num_warps=4,
        num_stages=3,
        SPLIT_K=4,
    )
    return out


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, pool_kernel_size, scale_factor):
        super(ModelNew, self).__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.avg_pool = nn.AvgPool1d(kernel_size=pool_kernel_size)
        self.scale_factor = scale_factor

    def forward(self, x):
        _expect_layout(x, (1024, 8192), (8192, 1), 'x')
        buf0 = torch.empty_strided((1024, 8192), (8192, 1), dtype=torch.float32, device=x.device)
        _gemm_0(x, torch.as_strided(self.matmul.weight, (8192, 8192), (1, 8192), 0), buf0, bias=self.matmul.bias, alpha=1, beta=1)
        buf2 = torch.empty_strided((1024,), (1,), dtype=torch.float32, device=x.device)
        grid = lambda meta: (triton.cdiv(1024, meta["XBLOCK"]),)
        triton_red_fused_avg_pool2d_gelu_max_mul_squeeze_unsqueeze_0[grid](buf0, buf2, 1024, 512, XBLOCK=1, R0_BLOCK=256, num_warps=4, num_stages=1)
        return buf2
