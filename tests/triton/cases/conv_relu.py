"""Conv2d followed by ReLU; the convolution may stay in PyTorch, the epilogue must be Triton."""

import torch
import torch.nn as nn

KSMITH_ALLOWED_OPS = ["aten.convolution"]
KSMITH_SMALL = {"batch_size": 2, "height": 8, "width": 8}

batch_size = 16
in_channels = 3
out_channels = 8
kernel_size = 3
height = 64
width = 64


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
