"""(x @ W^T + b) * 0.5: a linear layer with an affine epilogue and a K much longer than M and N, fp32."""

import torch
import torch.nn as nn

batch_size = 256
in_features = 65536
out_features = 256

KSMITH_SMALL = {"batch_size": 24, "in_features": 300, "out_features": 40}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x) * 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
