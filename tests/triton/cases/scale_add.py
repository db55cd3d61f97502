"""y = 2 * x + 1 (elementwise)."""

import torch
import torch.nn as nn

KSMITH_SMALL = {"batch_size": 4, "dim": 256}

batch_size = 64
dim = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
