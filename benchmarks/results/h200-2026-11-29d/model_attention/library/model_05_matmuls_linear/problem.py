"""Harvested from model.py: matmuls region (linear, linear, linear), at the model's shapes and dtypes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter(torch.randn([2048, 2048], dtype=torch.bfloat16) / 45.2548)
        self.p1 = nn.Parameter(torch.randn([512, 2048], dtype=torch.bfloat16) / 45.2548)
        self.p2 = nn.Parameter(torch.randn([512, 2048], dtype=torch.bfloat16) / 45.2548)

    def forward(self, in0):
        p0 = self.p0
        p1 = self.p1
        p2 = self.p2
        t0 = torch._C._nn.linear(in0, p0, None)
        t1 = torch._C._nn.linear(in0, p1, None)
        t2 = torch._C._nn.linear(in0, p2, None)
        return (t0, t1, t2)


def get_inputs():
    return [
        torch.randn([8, 1, 2048], dtype=torch.bfloat16),
    ]


def get_init_inputs():
    return []
