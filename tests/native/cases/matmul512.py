"""A small fp32 matmul (512 x 512): the problem the cuda backend's GPU tests call cuBLAS and torch on."""

import torch
import torch.nn as nn

M = N = K = 512


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
