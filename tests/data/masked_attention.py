"""Attention with a mask: a model the inductor seed method refuses in one line (tests/inductor)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def get_inputs():
    return [
        torch.randn(1, 2, 16, 32),
        torch.randn(1, 2, 16, 32),
        torch.randn(1, 2, 16, 32),
        torch.randn(16, 16),
    ]


def get_init_inputs():
    return []
