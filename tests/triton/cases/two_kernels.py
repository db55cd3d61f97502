import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_add_kernel(x_ptr, y_ptr, n_elements, shift, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * 2.0 + shift, mask=mask)


def scale_add(x, y, shift=1.0):
    n = x.numel()
    _scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, n, shift, BLOCK_SIZE=1024, num_warps=4)
    return y


@triton.jit
def _add_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)


class ModelNew(nn.Module):
    """Two launches: scale, then shift."""

    def forward(self, x):
        x = x.contiguous()
        scaled = scale_add(x, torch.empty_like(x), shift=0.0)
        y = torch.empty_like(x)
        n = x.numel()
        _add_kernel[(triton.cdiv(n, 512),)](scaled, y, n, BLOCK_SIZE=512, num_warps=4)
        return y
