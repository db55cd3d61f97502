"""Right, but each call takes 2.5 s: three trials together outlast a 6 s budget, though no single one does."""

import time

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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        time.sleep(2.5)
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024, num_warps=4)
        return y
