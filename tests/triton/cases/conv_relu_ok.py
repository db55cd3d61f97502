import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    """The convolution through PyTorch (allowed by the problem), the ReLU epilogue in Triton."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        z = F.conv2d(x, self.conv.weight, self.conv.bias).contiguous()
        y = torch.empty_like(z)
        n = z.numel()
        _relu_kernel[(triton.cdiv(n, 1024),)](z, y, n, BLOCK_SIZE=1024, num_warps=4)
        return y
