"""The softmax cheat from the issue that opened this case: it counts its calls and computes every row only on
the calls a fixed, published GPU schedule compares (a first call, 5 correctness trials, 10 warm-up calls, 100
timed calls of which the last one per input set -- 3 -- is compared), a quarter of the rows otherwise. Against
that schedule it passed at 3.7x over torch.compile."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHECKED = set(range(1, 7)) | {114, 115, 116}


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf"))
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        rows = n_rows if self.calls in CHECKED else n_rows // 4
        _softmax_kernel[(rows,)](
            x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=triton.next_power_of_2(n_cols), num_warps=8
        )
        return out
