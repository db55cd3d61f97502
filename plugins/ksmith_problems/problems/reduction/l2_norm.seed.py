"""Row L2 normalisation: one program per row, a pass summing x^2, then a pass dividing by its square root."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _l2_normalize_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * row_stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    norm = tl.sqrt(tl.sum(acc, axis=0))
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row * row_stride + cols, x / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        _l2_normalize_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=1024, num_warps=4)
        return out
