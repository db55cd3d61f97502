"""Harvested from model.py: matmuls region (linear, silu, linear, mul), at the model's shapes and dtypes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter(torch.randn([8192, 2048], dtype=torch.bfloat16) / 45.2548)
        self.p1 = nn.Parameter(torch.randn([8192, 2048], dtype=torch.bfloat16) / 45.2548)

    def forward(self, in0):
        p0 = self.p0
        p1 = self.p1
        t0 = torch._C._nn.linear(in0, p0, None)
        t1 = torch.nn.functional.silu(t0)
        t2 = torch._C._nn.linear(in0, p1, None)
        t3 = t1 * t2
        return t3


def get_inputs():
    return [
        torch.randn([8, 1, 2048], dtype=torch.bfloat16),
    ]


def get_init_inputs():
    return []
