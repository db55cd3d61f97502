"""Conv2d + bias + ReLU: torch convolves, then a program per (N*C plane, block) adds bias, applies ReLU.

The problem allows aten.convolution; the kernel reads the convolution's output once, adds the
per-channel bias in fp32, applies ReLU and writes fp16.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _bias_relu_kernel(y_ptr, bias_ptr, out_ptr, channels, hw, BLOCK_SIZE: tl.constexpr):
    # Grid: (sample * channel planes, blocks of one plane); every plane adds one bias value.
    plane = tl.program_id(0).to(tl.int64)
    bias = tl.load(bias_ptr + plane % channels).to(tl.float32)
    offs = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < hw
    y = tl.load(y_ptr + plane * hw + offs, mask=mask).to(tl.float32)
    out = tl.maximum(y + bias, 0.0)
    tl.store(out_ptr + plane * hw + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size, padding=kernel_size // 2, dtype=torch.float16
        )
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1).to(torch.float16))

    def forward(self, x):
        # The problem allows the convolution itself (aten.convolution); the epilogue runs in Triton.
        y = F.conv2d(x, self.conv.weight, self.conv.bias, padding=self.conv.padding)
        out = torch.empty_like(y)
        batch, channels, height, width = y.shape
        hw = height * width
        grid = lambda meta: (batch * channels, triton.cdiv(hw, meta["BLOCK_SIZE"]))
        _bias_relu_kernel[grid](y, self.bias, out, channels, hw, BLOCK_SIZE=1024, num_warps=4)
        return out
