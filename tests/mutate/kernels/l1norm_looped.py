"""L1 normalisation of long rows (KernelBench level 1's 38_L1Norm_), fp32."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 65535

KSMITH_SMALL = {"batch_size": 6, "dim": 203}


class Model(nn.Module):
    def forward(self, x):
        return x / torch.mean(torch.abs(x), dim=1, keepdim=True)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
