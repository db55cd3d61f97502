"""conv2d_bias_relu: the Triton kernels Inductor generates for the reference, as a seed.

Launch configurations are literals to be tuned; they start from
the configurations Inductor's autotuner kept on CUDA.
The kernels are compiled for these input shapes only: x (32, 64, 128, 128).
Matmuls and convolutions are Inductor's max-autotune Triton templates (epilogues fused), each
with the block sizes its autotuner kept, launched on the grid Inductor computed for them.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers


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
def triton_poi_fused_convolution_0(in_ptr0, out_ptr0, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 2048
    xnumel = 16384
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    ymask = tl.full([YBLOCK], True, tl.int1)[:, None]
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = tl.full([XBLOCK], True, tl.int1)[None, :]
    x2 = xindex
    y3 = yindex
    y0 = (yindex % 64)
    y1 = yindex // 64
    tmp0 = tl.load(in_ptr0 + (x2 + 16384*y3), None, eviction_policy='evict_last').to(tl.float32)
    tl.store(out_ptr0 + (y0 + 64*x2 + 1048576*y1), tmp0, None)


@triton.jit
def triton_poi_fused_convolution_1(in_ptr0, out_ptr0, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 8192
    xnumel = 9
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    ymask = tl.full([YBLOCK], True, tl.int1)[:, None]
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < xnumel
    x2 = xindex
    y3 = yindex
    y0 = (yindex % 64)
    y1 = yindex // 64
    tmp0 = tl.load(in_ptr0 + (x2 + 9*y3), xmask, eviction_policy='evict_last').to(tl.float32)
    tl.store(out_ptr0 + (y0 + 64*x2 + 576*y1), tmp0, xmask)


@triton.jit
def triton_tem_fused_add_convolution_relu_2(arg_X, arg_W, in_ptr2, in_ptr3, out_ptr1):
    KERNEL_H : tl.constexpr = 3
    KERNEL_W : tl.constexpr = 3
    STRIDE_H : tl.constexpr = 1
    STRIDE_W : tl.constexpr = 1
    PADDING_H : tl.constexpr = 1
    PADDING_W : tl.constexpr = 1
    GROUPS : tl.constexpr = 1
    UNROLL : tl.constexpr = False
    ALLOW_TF32 : tl.constexpr = False
    BLOCK_M : tl.constexpr = 128
    BLOCK_N : tl.constexpr = 128
    BLOCK_K : tl.constexpr = 64
    INDEX_DTYPE : tl.constexpr = tl.int32
    X = arg_X
    W = arg_W

    # Tensor dimensions
    BATCH = 32
    IN_C = 64
    IN_H = 128
    IN_W = 128
    OUT_C = 128
    OUT_H = 128
    OUT_W = 128

    # Strides:
    stride_xn = 1048576
    stride_xc = 1
    stride_xh = 8192
    stride_xw = 64
    stride_wc_out = 576
    stride_wc_in = 1
    stride_wh = 192
    stride_ww = 64

    nhw = tl.program_id(0).to(INDEX_DTYPE) * BLOCK_M + tl.arange(0, BLOCK_M)
    idx_y_w = nhw % OUT_W
    nh = nhw // OUT_W
    idx_y_h = nh % OUT_H
    idx_n = nh // OUT_H
    idx_y_c = tl.program_id(1).to(INDEX_DTYPE) * BLOCK_N + tl.arange(0, BLOCK_N)


    group = 0
    GROUP_IN_C = IN_C
    GROUP_OUT_C = OUT_C


    x_base = X + (group * stride_xc * GROUP_IN_C + idx_n * stride_xn)[:, None]
    w_base = (
        W + (group * stride_wc_out * GROUP_OUT_C + idx_y_c * stride_wc_out)[None, :]
    )

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)


    # Could be simplified, but slightly slower:
    # for i in range(KERNEL_H):
    #     for j in range(KERNEL_W):
    #         for k in range(0, GROUP_IN_C, BLOCK_K):
    BLOCK_K_COUNT = (GROUP_IN_C + BLOCK_K - 1) // BLOCK_K
    for ijk in range(KERNEL_H * KERNEL_W * BLOCK_K_COUNT):
        k = (ijk % BLOCK_K_COUNT) * BLOCK_K
        ij = ijk // BLOCK_K_COUNT
        i = ij // KERNEL_W
        j = ij % KERNEL_W

        idx_x_h = i - PADDING_H + idx_y_h * STRIDE_H
        idx_x_w = j - PADDING_W + idx_y_w * STRIDE_W
        idx_x_c = tl.arange(0, BLOCK_K) + k

        x_ptrs = x_base + (
            (idx_x_h * stride_xh)[:, None]
            + (idx_x_w * stride_xw)[:, None]
            + (idx_x_c * stride_xc)[None, :]
        )
        mask_x = (
            (idx_n < BATCH)[:, None]
            & (idx_x_h >= 0)[:, None]
            & (idx_x_h < IN_H)[:, None]
            & (idx_x_w >= 0)[:, None]
            & (idx_x_w < IN_W)[:, None]
            & (idx_x_c < GROUP_IN_C)[None, :]
        )
        matrix_x = tl.load(x_ptrs, mask=mask_x, other=0.0)

        w_ptrs = w_base + (
            (idx_x_c * stride_wc_in)[:, None] + (i * stride_wh) + (j * stride_ww)
        )
        mask_w = (idx_x_c[:, None] < GROUP_IN_C) & (idx_y_c[None, :] < GROUP_OUT_C)
        matrix_w = tl.load(w_ptrs, mask=mask_w, other=0.0)
        acc += tl.dot(matrix_x, matrix_w, allow_tf32=ALLOW_TF32)



    mask = (
        (idx_n < BATCH)[:, None]
        & (idx_y_h < OUT_H)[:, None]
        & (idx_y_w < OUT_W)[:, None]
        & (idx_y_c < GROUP_OUT_C)[None, :]
    )
    idx_n = idx_n[:, None]
    idx_c = idx_y_c[None, :] + group * GROUP_OUT_C
    idx_h = idx_y_h[:, None]
    idx_w = idx_y_w[:, None]

    # inductor generates a suffix
    xindex = idx_w + 128*idx_h + 16384*idx_c + 2097152*idx_n
    x5 = (xindex % 16384)
    tmp0 = tl.load(in_ptr2 + (tl.broadcast_to(idx_c, [BLOCK_M, BLOCK_N])), mask, eviction_policy='evict_last').to(tl.float32)
    tmp2 = tl.load(in_ptr3 + (tl.broadcast_to(idx_c, [BLOCK_M, BLOCK_N])), mask, eviction_policy='evict_last').to(tl.float32)
    tmp1 = acc + tmp0
    tmp3 = tmp1 + tmp2
    tmp4 = tl.full([1], 0, tl.int32)
    tmp5 = triton_helpers.maximum(tmp4, tmp3)
    tl.store(out_ptr1 + (x5 + 16384*idx_c + 2097152*idx_n), tmp5, mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size, padding=kernel_size // 2, dtype=torch.float16
        )
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1).to(torch.float16))

    def forward(self, x):
        _expect_layout(x, (32, 64, 128, 128), (1048576, 16384, 128, 1), 'x')
        buf0 = torch.empty_strided((32, 64, 128, 128), (1048576, 1, 8192, 64), dtype=torch.float16, device=x.device)
        grid = lambda meta: (triton.cdiv(16384, meta["XBLOCK"]), triton.cdiv(2048, meta["YBLOCK"]))
        triton_poi_fused_convolution_0[grid](x, buf0, 2048, 16384, XBLOCK=64, YBLOCK=64, num_warps=8, num_stages=1)
        buf1 = torch.empty_strided((128, 64, 3, 3), (576, 1, 192, 64), dtype=torch.float16, device=x.device)
        grid = lambda meta: (triton.cdiv(9, meta["XBLOCK"]), triton.cdiv(8192, meta["YBLOCK"]))
        triton_poi_fused_convolution_1[grid](self.conv.weight, buf1, 8192, 9, XBLOCK=16, YBLOCK=256, num_warps=8, num_stages=1)
        buf3 = torch.empty_strided((32, 128, 128, 128), (2097152, 16384, 128, 1), dtype=torch.float16, device=x.device)
        grid = (4096, 1, 1)
        triton_tem_fused_add_convolution_relu_2[grid](buf0, buf1, self.conv.bias, self.bias, buf3, num_warps=8, num_stages=3)
        return buf3
