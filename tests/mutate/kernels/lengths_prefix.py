"""A batch's lengths and their prefix sum (``cu_seqlens``), as a serving engine's decode metadata computes them:
``lengths = seq_lens + delta`` as int32, then ``cu = [0, l0, l0 + l1, ...]``, returned as one int32 tensor."""

import torch
import torch.nn as nn

batch_size = 3000  # three blocks of 1024 and a tail
delta = 1

KSMITH_SMALL = {"batch_size": 3000}


class Model(nn.Module):
    def forward(self, seq_lens):
        lengths = (seq_lens + delta).to(torch.int32)
        cu = torch.zeros(lengths.shape[0] + 1, dtype=torch.int32, device=lengths.device)
        cu[1:] = torch.cumsum(lengths, 0)
        return torch.cat([lengths, cu])


def get_inputs():
    return [torch.randint(1, 5000, (batch_size,), dtype=torch.int64)]


def get_init_inputs():
    return []
