"""A TorchDispatchMode pushed at import sits below the guards' own: it receives each op after the accounting
has recorded it, and may compute something else with torch (never seen by the accounting)."""

import torch
import torch.nn as nn
import triton
from torch.utils._python_dispatch import TorchDispatchMode


@triton.jit
def _token(y_ptr):
    pass


FLAG = [None]


class Below(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if FLAG[0] is not None and func is torch.ops.aten.empty_like.default:
            x = FLAG[0]
            FLAG[0] = None
            return x * 2.0 + 1.0  # torch compute, under an allowed op's name
        return func(*args, **kwargs)


Below().__enter__()


class ModelNew(nn.Module):
    def forward(self, x):
        FLAG[0] = x
        y = torch.empty_like(x)
        _token[(1,)](y)
        return y
