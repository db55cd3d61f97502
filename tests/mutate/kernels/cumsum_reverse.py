"""Reverse cumulative sum along rows (KernelBench level 1's 91_cumsum_reverse), fp32."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 32768

KSMITH_SMALL = {"batch_size": 5, "dim": 37}


class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x.flip(1), dim=1).flip(1)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
