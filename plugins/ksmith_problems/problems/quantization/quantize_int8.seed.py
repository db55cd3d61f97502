"""Per-row int8 quantisation: one program per row, a max |x| pass for the scale, then a quantise pass.

The scale is max(max |x|, 1e-12) / 127. The second pass divides with tl.div_rn (exactly rounded, as
torch divides), rounds half to even and clamps to [-127, 127].
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _round_half_to_even(v):
    # floor(v + 0.5) is exact for |v| <= 2^22; ties (r - v == 0.5) go to the even neighbour.
    r = tl.floor(v + 0.5)
    is_tie = (r - v) == 0.5
    is_odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
    return tl.where(is_tie & is_odd, r - 1.0, r)


@triton.jit
def _quantize_int8_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc = tl.maximum(acc, tl.abs(tl.load(x_row + cols, mask=cols < n_cols, other=0.0)))
    scale = tl.maximum(tl.max(acc, axis=0), 1e-12) * (1.0 / 127.0)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        # div_rn: an exactly rounded division, as torch computes x / scale (plain / may be approximate on GPUs)
        q = tl.minimum(tl.maximum(_round_half_to_even(tl.div_rn(x, scale)), -127.0), 127.0)
        tl.store(out_ptr + row * out_row_stride + cols, q.to(tl.int8), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty((n_rows, n_cols), device=x.device, dtype=torch.int8)
        _quantize_int8_kernel[(n_rows,)](
            x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=1024, num_warps=4
        )
        return out
