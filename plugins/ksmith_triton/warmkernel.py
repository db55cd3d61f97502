"""A kernel of the harness's own, run by an idle candidate worker before its job arrives.

Its first launch in a process loads Triton's backend, its launcher and the CUDA driver glue, which would
otherwise be paid inside the candidate's first call. It lives in its own module so that a candidate's
module-level code never shares a namespace with it.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _fill(out_ptr, value, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, value, mask=offsets < n)


def run_warm_kernel() -> None:
    import torch

    out = torch.empty(64, device="cuda")
    _fill[(1,)](out, 1.0, out.numel(), BLOCK=64)
    torch.cuda.synchronize()
    if float(out.sum()) != 64.0:
        raise RuntimeError("the warm-up kernel computed a wrong result: this GPU's Triton path is broken")
