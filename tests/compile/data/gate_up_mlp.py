"""A gated MLP (SwiGLU, as Llama's) whose up projection is computed before the gate, KernelBench format; and a
second pair of projections over two different inputs, which is not one region."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 6
hidden = 48
intermediate = 80


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)
        self.left = nn.Linear(hidden, intermediate, bias=False)
        self.right = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x, y):
        up = self.up(x)
        h = self.down(F.silu(self.gate(x)) * up)
        return h + self.down(F.silu(self.left(h)) * self.right(y))


def get_inputs():
    return [torch.randn(batch_size, hidden), torch.randn(batch_size, hidden)]


def get_init_inputs():
    return []
