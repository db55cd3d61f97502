"""Row argmax: one program per row, one pass keeping a per-lane max and its column, then a lane merge.

The merge takes the smallest column holding the row max, the first one, as torch.argmax does.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_argmax_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    # Per-lane running maximum and its column; strictly greater keeps the first maximum per lane.
    best_value = tl.full([BLOCK_SIZE], float("-inf"), dtype=tl.float32)
    best_index = tl.zeros([BLOCK_SIZE], dtype=tl.int32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols, other=float("-inf"))
        better = x > best_value
        best_index = tl.where(better, cols, best_index)
        best_value = tl.where(better, x, best_value)
    # The smallest column holding the row maximum, as torch.argmax returns the first one.
    row_max = tl.max(best_value, axis=0)
    first = tl.min(tl.where(best_value == row_max, best_index, n_cols), axis=0)
    tl.store(out_ptr + row, first.to(tl.int64))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty(n_rows, device=x.device, dtype=torch.int64)
        _row_argmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=1024, num_warps=4)
        return out
