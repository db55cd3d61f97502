"""Int8 dequantisation: a program per (row, BLOCK_SIZE columns) stores q * the row's scale in fp32."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _dequantize_int8_kernel(q_ptr, scale_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    # Grid: (rows, column blocks); every row has one scale.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    scale = tl.load(scale_ptr + row)
    q = tl.load(q_ptr + row * n_cols + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, q.to(tl.float32) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, scale):
        n_rows, n_cols = q.shape
        out = torch.empty((n_rows, n_cols), device=q.device, dtype=torch.float32)
        grid = lambda meta: (n_rows, triton.cdiv(n_cols, meta["BLOCK_SIZE"]))
        _dequantize_int8_kernel[grid](q, scale, out, n_cols, BLOCK_SIZE=1024, num_warps=4)
        return out
