"""59_Matmul_Swish_Scaling: the Triton kernels Inductor generates for the reference, as a seed.

Launch configurations are literals to be tuned; they start from
the configurations Inductor's autotuner kept on CUDA.
The kernels are compiled for these input shapes only: x (128, 32768).
"""

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
def triton_poi_fused_addmm_mul_sigmoid_0(in_out_ptr0, in_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 4194304
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x0 = (xindex % 32768)
    x2 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), None, eviction_policy='evict_last')
    tmp1 = tl.load(in_out_ptr0 + (x2), None)
    tmp2 = tmp0 + tmp1
    tmp3 = tl.sigmoid(tmp2)
    tmp4 = tmp2 * tmp3
    tmp5 = tl.full([1], 2.0, tl.float32)
    tmp6 = tmp4 * tmp5
    tl.store(in_out_ptr0 + (x2), tmp6, None)


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
    """out = beta * bias + alpha * (a @ b), for 2-D or batched 3-D operands (mm in Inductor's code)."""
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
    def __init__(self, in_features, out_features, scaling_factor):
        super(ModelNew, self).__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        _expect_layout(x, (128, 32768), (32768, 1), 'x')
        buf0 = torch.empty_strided((128, 32768), (32768, 1), dtype=torch.float32, device=x.device)
        _gemm_0(x, torch.as_strided(self.matmul.weight, (32768, 32768), (1, 32768), 0), buf0)
        buf1 = buf0
        grid = lambda meta: (triton.cdiv(4194304, meta["XBLOCK"]),)
        triton_poi_fused_addmm_mul_sigmoid_0[grid](buf1, self.matmul.bias, 4194304, XBLOCK=512, num_warps=8, num_stages=1)
        return buf1
