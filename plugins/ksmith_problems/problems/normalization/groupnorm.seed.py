"""Group norm: a program per (sample, group); a pass sums x and x^2 in fp32, a second normalises.

A group is contiguous in NCHW; the variance is E[x^2] - mean^2 from the single statistics pass, and the
weight and bias are gathered per channel in the second pass.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _groupnorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, channels_per_group, hw, eps, BLOCK_SIZE: tl.constexpr):
    # One program per (sample, group); in NCHW a group is contiguous: channels_per_group * hw elements.
    sample = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1)
    num_groups = tl.num_programs(1)
    group_size = channels_per_group * hw
    base = (sample * num_groups + group) * group_size
    acc_sum = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    acc_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, group_size, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + base + offs, mask=offs < group_size, other=0.0).to(tl.float32)
        acc_sum += x
        acc_sq += x * x
    mean = tl.sum(acc_sum, axis=0) / group_size
    var = tl.sum(acc_sq, axis=0) / group_size - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    for start in range(0, group_size, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        mask = offs < group_size
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        channel = group * channels_per_group + offs // hw
        w = tl.load(w_ptr + channel, mask=mask)
        b = tl.load(b_ptr + channel, mask=mask)
        tl.store(out_ptr + base + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels, num_groups, eps):
        super().__init__()
        self.num_groups = num_groups
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))

    def forward(self, x):
        out = torch.empty_like(x)
        batch, channels, height, width = x.shape
        grid = (batch, self.num_groups)
        _groupnorm_kernel[grid](
            x,
            self.weight,
            self.bias,
            out,
            channels // self.num_groups,
            height * width,
            self.eps,
            BLOCK_SIZE=1024,
            num_warps=4,
        )
        return out
