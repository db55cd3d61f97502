"""Layer norm: one program per row, three passes over the row: mean, variance, normalise and store."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, row_stride, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * row_stride
    out_row = out_ptr + row * row_stride
    # Three passes over the row: mean, variance, then normalise and write.
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        diff = tl.where(cols < n_cols, x - mean, 0.0)
        acc += diff * diff
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        tl.store(out_row + cols, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x):
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        _layernorm_kernel[(n_rows,)](
            x, self.weight, self.bias, out, n_cols, x.stride(0), self.eps, BLOCK_SIZE=1024, num_warps=4
        )
        return out
