"""A badly posed problem: relu(-|x|) is zero everywhere, so any zero-writing kernel would "pass"."""

import torch
import torch.nn as nn

KSMITH_SMALL = {"n": 256}

n = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(-x.abs())


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
