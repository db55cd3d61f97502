"""Row max: one program per row, one pass over BLOCK_SIZE blocks with a per-lane running max, then tl.max."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_max_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.full([BLOCK_SIZE], float("-inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols, other=float("-inf"))
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + row, tl.max(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty(n_rows, device=x.device, dtype=x.dtype)
        _row_max_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=1024, num_warps=4)
        return out
