"""Harvested from model.py: matmul region (linear, add), at the model's shapes and dtypes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter(torch.randn([2048, 8192], dtype=torch.bfloat16) / 90.5097)

    def forward(self, in0, in1):
        p0 = self.p0
        t0 = torch._C._nn.linear(in0, p0, None)
        t1 = in1 + t0
        return t1


def get_inputs():
    return [
        torch.randn([8, 1, 8192], dtype=torch.bfloat16),
        torch.randn([8, 1, 2048], dtype=torch.bfloat16),
    ]


def get_init_inputs():
    return []
