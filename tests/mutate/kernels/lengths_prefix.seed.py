"""The lengths and their prefix sum in one program, one request per iteration, as SGLang's
``_fused_decode_metadata_kernel`` writes it."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def lengths_prefix_kernel(seq_lens, lengths, cu_seqlens, B, DELTA: tl.constexpr):
    acc = 0
    for idx in range(B):
        seq = tl.load(seq_lens + idx)
        val = (seq + DELTA).to(tl.int32)
        tl.store(lengths + idx, val)
        tl.store(cu_seqlens + idx, acc)
        acc += val
    tl.store(cu_seqlens + B, acc)


class ModelNew(nn.Module):
    def forward(self, seq_lens):
        batch = seq_lens.shape[0]
        out = torch.empty(2 * batch + 1, dtype=torch.int32, device=seq_lens.device)
        lengths_prefix_kernel[(1,)](seq_lens, out, out[batch:], batch, DELTA=1)
        return out
