"""What harvest, its seed kernels and the backend read off the nodes of Dynamo's FX graphs: which ops Inductor
fuses, which are matmuls, a node's example value, and how a harvested problem makes a parameter like it."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.nn.functional as F

_POINTWISE_FUNCTIONS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pow,
    torch.add, torch.sub, torch.mul, torch.div, torch.neg, torch.pow, torch.rsqrt, torch.sqrt, torch.exp,
    torch.log, torch.tanh, torch.sigmoid, torch.relu, torch.abs, torch.erf, torch.square, torch.reciprocal,
    torch.clamp, torch.mean, torch.sum, torch.amax, torch.softmax, torch.log_softmax,
    F.silu, F.gelu, F.relu, F.softmax, F.log_softmax, F.sigmoid, F.tanh, F.layer_norm, F.rms_norm,
}  # fmt: skip
_POINTWISE_METHODS = {
    "to", "float", "half", "bfloat16", "type_as", "pow", "mean", "sum", "amax", "exp", "rsqrt", "sqrt",
    "tanh", "sigmoid", "neg", "mul", "add", "sub", "div", "softmax", "relu", "square", "reciprocal", "abs",
    "clamp",
}  # fmt: skip
_MATMUL_FUNCTIONS = {
    torch._C._nn.linear,
    F.linear,
    torch.matmul,
    operator.matmul,
    torch.mm,
    torch.bmm,
    torch.addmm,
}
_MATMUL_METHODS = {"matmul", "mm", "bmm"}


def is_fusible(node: torch.fx.Node) -> bool:
    if node.op == "call_function":
        return node.target in _POINTWISE_FUNCTIONS
    if node.op == "call_method":
        return node.target in _POINTWISE_METHODS
    return False


_LAYOUT_METHODS = {"view", "reshape", "transpose", "permute", "contiguous", "expand", "unsqueeze", "squeeze"}


def is_layout(node: torch.fx.Node) -> bool:
    """A view or copy that only lays a tensor out (Inductor folds it into the kernels or library calls around
    it, whose notes then name it too)."""
    if node.op == "call_method":
        return node.target in _LAYOUT_METHODS
    return node.op == "call_function" and node.target in (operator.getitem, torch.reshape, torch.transpose)


def is_matmul(node: torch.fx.Node) -> bool:
    if node.op == "call_function":
        return node.target in _MATMUL_FUNCTIONS
    return node.op == "call_method" and node.target in _MATMUL_METHODS


def value_of(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def is_linear(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in (torch._C._nn.linear, F.linear)


def linears_of_one_input(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    return is_linear(a) and is_linear(b) and bool(a.args) and bool(b.args) and a.args[0] is b.args[0]


def is_residual_add(node: torch.fx.Node) -> bool:
    """``a + b`` of two tensors of one shape and dtype (a residual connection)."""
    if node.op != "call_function" or node.target not in (operator.add, torch.add) or node.kwargs:
        return False
    if len(node.args) != 2 or not all(isinstance(a, torch.fx.Node) for a in node.args):
        return False
    a, b = (value_of(x) for x in node.args)
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and a.dtype == b.dtype
    )


def no_bias(node: torch.fx.Node) -> bool:
    return not node.kwargs and len(node.args) in (2, 3) and (len(node.args) == 2 or node.args[2] is None)


def epilogue_name(node: torch.fx.Node) -> str:
    if node.op == "call_function" and not node.kwargs.get("alpha"):
        if node.target in (operator.add, torch.add):
            return "add"
        if node.target in (operator.mul, torch.mul):
            return "mul"
        if node.target is F.silu:
            return "silu"
    return "other"


def op_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    return getattr(node.target, "__name__", str(node.target)).strip("_")


def init_expr(value: torch.Tensor) -> str:
    shape, dtype = list(value.shape), str(value.dtype)
    if value.dtype == torch.bool:  # a mask: causal, as attention's is (random ones would mask whole rows)
        if value.dim() < 2:
            return f"torch.ones({shape}, dtype=torch.bool)"
        # Keys before the queries (a KV cache): each query sees all of them.
        past = max(shape[-1] - shape[-2], 0)
        return f"torch.ones({shape}, dtype=torch.bool).tril({past if past else ''})"
    if value.dtype.is_floating_point:
        if value.dim() <= 1:
            return f"1.0 + 0.1 * torch.randn({shape}, dtype={dtype})"
        return f"torch.randn({shape}, dtype={dtype}) / {math.sqrt(max(1, shape[-1])):.6g}"
    return f"torch.randint(0, 16, {shape}, dtype={dtype})"
