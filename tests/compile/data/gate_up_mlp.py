"""A gated MLP (SwiGLU, as Llama's) whose up projection is computed before the gate, KernelBench format; a
second pair of projections over two different inputs, which is not one region; and two bare projections of
one input (k and v of different widths), which are."""

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
        self.k = nn.Linear(hidden, 16, bias=False)
        self.v = nn.Linear(hidden, 24, bias=False)
        self.back = nn.Linear(40, hidden, bias=False)

    def forward(self, x, y):
        up = self.up(x)
        h = self.down(F.silu(self.gate(x)) * up)
        kv = torch.cat([self.k(h), self.v(h)], dim=-1)
        return h + self.down(F.silu(self.left(h)) * self.right(y)) + self.back(kv)


def get_inputs():
    return [torch.randn(batch_size, hidden), torch.randn(batch_size, hidden)]


def get_init_inputs():
    return []
