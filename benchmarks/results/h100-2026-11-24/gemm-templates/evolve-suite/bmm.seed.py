"""bmm: the Triton kernels Inductor generates for the reference, as a seed.

Launch configurations are literals to be tuned; they start from
the configurations Inductor's autotuner kept on CUDA.
The kernels are compiled for these input shapes only: A (16, 2048, 1024), B (16, 1024, 2048).
Matmuls and convolutions are Inductor's max-autotune Triton templates (epilogues fused), each
with the block sizes its autotuner kept, launched on the grid Inductor computed for them.
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
def triton_tem_fused_bmm_0(arg_A, arg_B, out_ptr0):
    EVEN_K : tl.constexpr = True
    USE_FAST_ACCUM : tl.constexpr = False
    ACC_TYPE : tl.constexpr = tl.float32
    BLOCK_M : tl.constexpr = 128
    BLOCK_N : tl.constexpr = 128
    BLOCK_K : tl.constexpr = 64
    GROUP_M : tl.constexpr = 8
    ALLOW_TF32 : tl.constexpr = False
    INDEX_DTYPE : tl.constexpr = tl.int32
    A = arg_A
    B = arg_B

    M = 2048
    N = 2048
    K = 1024

    stride_aq = 2097152
    stride_am = 1024
    stride_ak = 1

    stride_bq = 2097152
    stride_bk = 2048
    stride_bn = 1

    # based on triton.ops.matmul
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N

    # re-order program ID for better L2 performance
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // (group_size)
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if (stride_am == 1 and stride_ak == M) or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if (stride_bk == 1 and stride_bn == K) or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N

    rk = tl.arange(0, BLOCK_K)

    idx_q = tl.program_id(1).to(INDEX_DTYPE)  # batch dimension for BMM
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q*stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q*stride_bq)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.)
            b = tl.load(B, mask=rk[:, None] < k, other=0.)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk

    # rematerialize rm and rn to save registers
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)  # batch dimension for BMM
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)

    # inductor generates a suffix
    xindex = idx_n + 2048*idx_m + 4194304*idx_q
    tl.store(out_ptr0 + (tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N])), acc, mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        _expect_layout(A, (16, 2048, 1024), (2097152, 1024, 1), 'A')
        _expect_layout(B, (16, 1024, 2048), (2097152, 2048, 1), 'B')
        buf0 = torch.empty_strided((16, 2048, 2048), (4194304, 2048, 1), dtype=torch.float16, device=A.device)
        grid = (256, 16, 1)
        triton_tem_fused_bmm_0[grid](A, B, buf0, num_warps=4, num_stages=3)
        return buf0
