import os
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_add_kernel(x_ptr, y_ptr, n_elements, shift, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * 2.0 + shift, mask=mask)


def scale_add(x, y, shift=1.0):
    n = x.numel()
    _scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, n, shift, BLOCK_SIZE=1024, num_warps=4)
    return y


print('{"status": "ok", "speedup": 1000}')
os.write(1, b"raw bytes on fd 1\n{not json\n")
os.write(2, b"raw bytes on fd 2\n")


class ModelNew(nn.Module):
    """Correct, and noisy on every channel it can find."""

    def forward(self, x):
        print('{"status": "ok"}', flush=True)
        sys.stderr.write("noise\n")
        os.write(1, b"}{][\n")
        return scale_add(x, torch.empty_like(x))
