"""2-D average pooling: a program per (N*C plane, BLOCK_SIZE outputs) sums each KxK window, unrolled.

Out-of-bounds taps load 0 and still count, so the sum is divided by KERNEL_SIZE^2 (count_include_pad).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _avgpool2d_kernel(
    x_ptr,
    out_ptr,
    height,
    width,
    out_height,
    out_width,
    KERNEL_SIZE: tl.constexpr,
    STRIDE: tl.constexpr,
    PADDING: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # Grid: (sample * channel planes, blocks of output pixels in one plane).
    plane = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    out_mask = offs < out_height * out_width
    out_row = offs // out_width
    out_col = offs % out_width
    x_plane = x_ptr + plane * height * width
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for kh in tl.static_range(KERNEL_SIZE):
        for kw in tl.static_range(KERNEL_SIZE):
            in_row = out_row * STRIDE - PADDING + kh
            in_col = out_col * STRIDE - PADDING + kw
            inside = (in_row >= 0) & (in_row < height) & (in_col >= 0) & (in_col < width) & out_mask
            acc += tl.load(x_plane + in_row * width + in_col, mask=inside, other=0.0)
    # Zero padding counts towards the window (count_include_pad=True, PyTorch's default).
    result = acc / (KERNEL_SIZE * KERNEL_SIZE)
    tl.store(out_ptr + plane * out_height * out_width + offs, result, mask=out_mask)


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding

    def forward(self, x):
        batch, channels, height, width = x.shape
        out_height = (height + 2 * self.padding - self.kernel_size) // self.stride + 1
        out_width = (width + 2 * self.padding - self.kernel_size) // self.stride + 1
        out = torch.empty((batch, channels, out_height, out_width), device=x.device, dtype=x.dtype)
        grid = lambda meta: (batch * channels, triton.cdiv(out_height * out_width, meta["BLOCK_SIZE"]))
        _avgpool2d_kernel[grid](
            x,
            out,
            height,
            width,
            out_height,
            out_width,
            KERNEL_SIZE=self.kernel_size,
            STRIDE=self.stride,
            PADDING=self.padding,
            BLOCK_SIZE=256,
            num_warps=4,
        )
        return out
