"""30_Gemm_GroupNorm_Hardtanh: the Triton kernels Inductor generates for the reference, as a seed.

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
        rsqrt=lambda x: tl.rsqrt(x),
    )


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
def triton_per_fused_native_group_norm_0(in_ptr0, out_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 16384
    r0_numel = 512
    R0_BLOCK: tl.constexpr = 512
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 512*x0), None)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp3 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
    tmp5 = tl.sum(tmp3, 1)[:, None].to(tl.float32)
    tmp6 = tl.full([1, 1], 512, tl.int32)
    tmp7 = tmp6.to(tl.float32)
    tmp8 = (tmp5 / tmp7)
    tmp9 = tmp1 - tmp8
    tmp10 = tmp9 * tmp9
    tmp11 = tl.broadcast_to(tmp10, [XBLOCK, R0_BLOCK])
    tmp13 = tl.sum(tmp11, 1)[:, None].to(tl.float32)
    tl.store(out_ptr0 + (x0), tmp8, None)
    tl.store(out_ptr1 + (x0), tmp13, None)


@triton.jit
def triton_poi_fused_hardtanh_native_group_norm_1(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, xnumel, XBLOCK : tl.constexpr):
    xnumel = 8388608
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x2 = xindex
    x0 = (xindex % 8192)
    tmp0 = tl.load(in_out_ptr0 + (x2), None)
    tmp1 = tl.load(in_ptr0 + (x2 // 512), None, eviction_policy='evict_last')
    tmp3 = tl.load(in_ptr1 + (x2 // 512), None, eviction_policy='evict_last')
    tmp10 = tl.load(in_ptr2 + (x0), None, eviction_policy='evict_last')
    tmp12 = tl.load(in_ptr3 + (x0), None, eviction_policy='evict_last')
    tmp2 = tmp0 - tmp1
    tmp4 = tl.full([1], 512.0, tl.float32)
    tmp5 = (tmp3 / tmp4)
    tmp6 = tl.full([1], 1e-05, tl.float32)
    tmp7 = tmp5 + tmp6
    tmp8 = libdevice.rsqrt(tmp7)
    tmp9 = tmp2 * tmp8
    tmp11 = tmp9 * tmp10
    tmp13 = tmp11 + tmp12
    tmp14 = tl.full([1], -2.0, tl.float32)
    tmp15 = triton_helpers.maximum(tmp13, tmp14)
    tmp16 = tl.full([1], 2.0, tl.float32)
    tmp17 = triton_helpers.minimum(tmp15, tmp16)
    tl.store(in_out_ptr0 + (x2), tmp17, None)


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
    def __init__(self, in_features, out_features, num_groups, hardtanh_min, hardtanh_max):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.hardtanh = nn.Hardtanh(min_val=hardtanh_min, max_val=hardtanh_max)

    def forward(self, x):
        _expect_layout(x, (1024, 8192), (8192, 1), 'x')
        buf0 = torch.empty_strided((1024, 8192), (8192, 1), dtype=torch.float32, device=x.device)
        _gemm_0(x, torch.as_strided(self.gemm.weight, (8192, 8192), (1, 8192), 0), buf0, bias=self.gemm.bias, alpha=1, beta=1)
        buf1 = torch.empty_strided((1024, 16, 1, 1), (16, 1, 16384, 16384), dtype=torch.float32, device=x.device)
        buf2 = torch.empty_strided((1024, 16, 1, 1), (16, 1, 16384, 16384), dtype=torch.float32, device=x.device)
        grid = lambda meta: (triton.cdiv(16384, meta["XBLOCK"]),)
        triton_per_fused_native_group_norm_0[grid](buf0, buf1, buf2, 16384, 512, XBLOCK=2, num_warps=1, num_stages=1)
        buf4 = buf0
        grid = lambda meta: (triton.cdiv(8388608, meta["XBLOCK"]),)
        triton_poi_fused_hardtanh_native_group_norm_1[grid](buf4, buf1, buf2, self.group_norm.weight, self.group_norm.bias, 8388608, XBLOCK=1024, num_warps=4, num_stages=1)
        return buf4
