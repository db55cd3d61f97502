"""RMS norm for the problem ``ksmith harvest`` writes for the tiny decoder's norms (weight named ``p0``)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rms = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, w * (x * rms), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter(1.0 + 0.1 * torch.randn([64], dtype=torch.float32))  # as Model makes it

    def forward(self, in0):
        x = in0.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        _rmsnorm_kernel[(x.numel() // n_cols,)](
            x, self.p0, out, n_cols, 1e-6, BLOCK_SIZE=triton.next_power_of_2(n_cols)
        )
        return out
