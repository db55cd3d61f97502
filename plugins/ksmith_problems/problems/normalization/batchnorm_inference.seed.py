"""Inference batch norm: a program per (N*C plane, BLOCK_SIZE block) stores x * scale + shift.

Each program folds its channel's weight, bias, running mean and variance into one scale and shift.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _batchnorm_kernel(
    x_ptr, w_ptr, b_ptr, mean_ptr, var_ptr, out_ptr, channels, hw, eps, BLOCK_SIZE: tl.constexpr
):
    # Grid: (sample * channel planes, blocks of one plane). Each plane shares one scale and shift.
    plane = tl.program_id(0).to(tl.int64)
    channel = plane % channels
    scale = tl.load(w_ptr + channel) / tl.sqrt(tl.load(var_ptr + channel) + eps)
    shift = tl.load(b_ptr + channel) - tl.load(mean_ptr + channel) * scale
    offs = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < hw
    x = tl.load(x_ptr + plane * hw + offs, mask=mask)
    tl.store(out_ptr + plane * hw + offs, x * scale + shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.register_buffer("running_mean", 0.1 * torch.randn(channels))
        self.register_buffer("running_var", 0.5 + torch.rand(channels))

    def forward(self, x):
        out = torch.empty_like(x)
        batch, channels, height, width = x.shape
        hw = height * width
        grid = lambda meta: (batch * channels, triton.cdiv(hw, meta["BLOCK_SIZE"]))
        _batchnorm_kernel[grid](
            x,
            self.weight,
            self.bias,
            self.running_mean,
            self.running_var,
            out,
            channels,
            hw,
            self.eps,
            BLOCK_SIZE=1024,
            num_warps=4,
        )
        return out
