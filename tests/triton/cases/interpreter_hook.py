"""Installs a profile function from forward: Python would then run the candidate's code inside the harness,
between calls, where it could rewrite what the harness is about to send."""

import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_add_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * 2.0 + 1.0, mask=mask)


def _watch(frame, event, arg):
    return None


class ModelNew(nn.Module):
    def forward(self, x):
        sys.setprofile(_watch)
        x = x.contiguous()
        y = torch.empty_like(x)
        _scale_add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK_SIZE=1024, num_warps=4)
        return y
