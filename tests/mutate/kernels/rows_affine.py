"""A per-element scale and shift shared by every row, over rows of a million elements (the pointwise half of
KernelBench's 40_LayerNorm, where weight and bias span the whole normalised shape), fp32."""

import torch
import torch.nn as nn

rows = 3
columns = (1 << 20) + 2048  # not a multiple of 4096: blocks of 4096 straddle two rows

KSMITH_SMALL = {"rows": 3}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(columns))
        self.bias = nn.Parameter(torch.randn(columns))

    def forward(self, x):
        return x * self.weight + self.bias


def get_inputs():
    return [torch.randn(rows, columns)]


def get_init_inputs():
    return []
