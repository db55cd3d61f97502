"""Two bare projections of one input at the tiny decoder's k and v shapes (hidden 64 -> 32 each, fp32), and
nothing else: its harvested group, swapped into the decoder, must find k and v beside q (64 -> 64)."""

import torch
import torch.nn as nn

batch_size = 2
seq_len = 8
hidden = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = nn.Linear(hidden, 32, bias=False)
        self.v = nn.Linear(hidden, 32, bias=False)

    def forward(self, x):
        return torch.cat([self.k(x), self.v(x)], dim=-1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
