import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _wild_store_kernel(y_ptr, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE).to(tl.int64) + (1 << 40)
    tl.store(y_ptr + offsets, tl.zeros([BLOCK_SIZE], dtype=tl.float32))


class ModelNew(nn.Module):
    """Stores far outside its buffer: an illegal address, a sticky CUDA error for this process."""

    def forward(self, x):
        y = torch.empty_like(x)
        _wild_store_kernel[(1,)](y, BLOCK_SIZE=1024)
        return y
