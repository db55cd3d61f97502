"""y = 2 * x + 1, its reference a Triton kernel itself (as an imported upstream kernel is its own reference)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

KSMITH_SMALL = {"batch_size": 4, "dim": 256}

batch_size = 64
dim = 4096


@triton.jit
def _reference_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0 + 1.0, mask=mask)


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        _reference_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK_SIZE=1024)
        return y


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
