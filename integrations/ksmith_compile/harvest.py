"""``ksmith harvest``: a model's fusible regions and matmuls, each written as a KernelBench-format problem.

The model's Dynamo graphs (the ones ``backend="kernelsmith"`` receives) are cut into regions:

- **fusible regions**: connected pointwise / reduction / cast nodes (norms, activation products, softmax,
  residual + norm, ...) between the nodes Inductor would not fuse into them (matmuls, views, indexing,
  attention). A region with several outputs is cut at its earliest output until each piece has one, since a
  library entry replaces one output;
- **matmuls with their epilogue**: each matmul and the chain of fusible nodes that is its only consumer;
- **matmul groups** (kind ``matmuls``): two ``linear``s of one input whose epilogue chains meet in one node
  (Llama's gate and up projections with ``silu(gate) * up``): one kernel can read the input once, stream both
  weights and never write the two products, where Inductor calls two GEMMs and a pointwise kernel; and
  ``linear``s of one input with no epilogue (Llama's q, k and v projections), one problem returning each
  projection: one launch instead of one a projection.

Each region becomes a problem whose ``Model.forward`` is the region's own code as Dynamo recorded it, at the
model's real shapes and dtypes, so that Dynamo captures the same graph from it and the library entry evolved
for it matches back into the model. Parameters the region reads become parameters of ``Model``
(``p0``, ``p1``, ...); ``ModelNew`` must use the same names. Identical regions are written once, with how many
times they occur.
"""

from __future__ import annotations

import json
import math
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ksmith_core.errors import ProblemError

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


def is_matmul(node: torch.fx.Node) -> bool:
    if node.op == "call_function":
        return node.target in _MATMUL_FUNCTIONS
    return node.op == "call_method" and node.target in _MATMUL_METHODS


@dataclass
class Harvested:
    """One written problem: its source, and where in the model the region occurs."""

    name: str
    kind: str  # "fusible", "matmul" or "matmuls" (a group of projections of one input)
    source: str
    ops: list[str]
    inputs: list[dict[str, Any]]
    seed: str | None = None  # a seed kernel (NAME.seed.py), where harvest can write one
    occurrences: list[str] = field(default_factory=list)  # "<graph>:<output node>"


def _value(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def _outputs(region: set[torch.fx.Node]) -> list[torch.fx.Node]:
    return [n for n in region if any(u not in region for u in n.users)]


def _ancestors_in(node: torch.fx.Node, region: set[torch.fx.Node]) -> set[torch.fx.Node]:
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in seen or n not in region:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen


def _components(nodes: set[torch.fx.Node]) -> list[set[torch.fx.Node]]:
    left, parts = set(nodes), []
    while left:
        stack, part = [left.pop()], set()
        while stack:
            n = stack.pop()
            part.add(n)
            for m in (*n.all_input_nodes, *n.users):
                if m in left:
                    left.discard(m)
                    stack.append(m)
        parts.append(part)
    return parts


def _single_output(region: set[torch.fx.Node], order: dict[torch.fx.Node, int]) -> list[set[torch.fx.Node]]:
    outs = _outputs(region)
    if len(outs) <= 1:
        return [region]
    first = min(outs, key=order.__getitem__)
    upstream = _ancestors_in(first, region)
    pieces = _single_output(upstream, order)
    for part in _components(region - upstream):
        pieces.extend(_single_output(part, order))
    return pieces


def find_regions(gm: torch.fx.GraphModule) -> list[tuple[str, list[torch.fx.Node]]]:
    """(kind, nodes in graph order) of every fusible region and every matmul with its epilogue."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    fusible = {n for n in gm.graph.nodes if is_fusible(n)}
    regions: list[tuple[str, list[torch.fx.Node]]] = []
    for component in _components(fusible):
        for piece in _single_output(component, order):
            if len(piece) >= 2:  # a lone pointwise op is Inductor's business
                regions.append(("fusible", sorted(piece, key=order.__getitem__)))
    chains: dict[torch.fx.Node, list[list[torch.fx.Node]]] = {}  # last node -> the chains ending there
    bare: dict[torch.fx.Node, list[torch.fx.Node]] = {}  # input -> the linears of it with no epilogue
    for node in gm.graph.nodes:
        if not is_matmul(node):
            continue
        chain, cur = [node], node
        while len(cur.users) == 1 and is_fusible(next(iter(cur.users))):
            cur = next(iter(cur.users))
            chain.append(cur)
        regions.append(("matmul", chain))
        chains.setdefault(cur, []).append(chain)
        if len(chain) == 1 and _is_linear(node) and node.args:
            bare.setdefault(node.args[0], []).append(node)
    for ending in chains.values():
        if len(ending) == 2 and _linears_of_one_input(ending[0][0], ending[1][0]):
            regions.append(("matmuls", sorted({*ending[0], *ending[1]}, key=order.__getitem__)))
    for group in bare.values():
        if 2 <= len(group) <= MAX_GROUP:
            regions.append(("matmuls", group))
    regions.sort(key=lambda r: (order[r[1][0]], r[0]))
    return regions


MAX_GROUP = 3  # projections of one input written as one problem (q, k and v); the seed kernel takes this many


def _is_linear(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in (torch._C._nn.linear, F.linear)


def _linears_of_one_input(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    return _is_linear(a) and _is_linear(b) and bool(a.args) and bool(b.args) and a.args[0] is b.args[0]


def _op_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    return getattr(node.target, "__name__", str(node.target)).strip("_")


def _init_expr(value: torch.Tensor) -> str:
    shape, dtype = list(value.shape), str(value.dtype)
    if value.dtype.is_floating_point:
        if value.dim() <= 1:
            return f"1.0 + 0.1 * torch.randn({shape}, dtype={dtype})"
        return f"torch.randn({shape}, dtype={dtype}) / {math.sqrt(max(1, shape[-1])):.6g}"
    return f"torch.randint(0, 16, {shape}, dtype={dtype})"


def region_problem(
    kind: str, nodes: list[torch.fx.Node], params: set[torch.fx.Node], origin: str
) -> tuple[str, list[str], list[dict[str, Any]], str | None] | str:
    """The problem source of one region (with a seed where harvest can write one), or why it cannot be
    written as one."""
    inside = set(nodes)
    external: list[torch.fx.Node] = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a not in inside and a not in external:
                external.append(a)
    for a in external:
        if not isinstance(_value(a), torch.Tensor):
            return f"input {a.name} is not a tensor"
    leaving = set(_outputs(inside))
    outs = [n for n in nodes if n in leaving]  # in graph order
    if not all(isinstance(_value(o), torch.Tensor) for o in outs):
        return "the region does not end in tensors"
    if outs != [nodes[-1]] and not (kind == "matmuls" and len(outs) > 1):
        return "the region does not end in one tensor"
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    activations = [a for a in external if a not in params]
    weights = [a for a in external if a in params]
    for i, a in enumerate(activations):
        env[a] = graph.placeholder(f"in{i}")
    for i, a in enumerate(weights):
        root.register_parameter(f"p{i}", torch.nn.Parameter(torch.empty(0), requires_grad=False))
        env[a] = graph.get_attr(f"p{i}")
    for i, n in enumerate(nodes):
        env[n] = graph.node_copy(n, lambda a: env[a])
        env[n].meta = {}
        env[n]._rename(f"t{i}")  # names from the model's graph would keep identical regions apart
    graph.output(env[outs[0]] if len(outs) == 1 else tuple(env[o] for o in outs))
    code = graph.python_code("self")  # names it needs beyond torch fail in matches_back(), which runs it
    body = code.src.strip().splitlines()
    signature = ", ".join(["self", *(f"in{i}" for i in range(len(activations)))])
    forward = [f"    def forward({signature}):"] + [
        "    " + line for line in body[1:] if line.strip() and not line.strip().startswith("#")
    ]
    forward = [re.sub(r";\s+[\w =]+= None$", "", line) for line in forward]
    ops = [_op_name(n) for n in nodes]
    inputs = [
        {"shape": list(_value(a).shape), "dtype": str(_value(a).dtype).removeprefix("torch.")}
        for a in activations
    ]
    header = ["import torch", "import torch.nn as nn"]
    if "device(" in "\n".join(forward):
        header.append("from torch import device")  # FX writes device literals as device(type='cuda', ...)
    lines = [
        f'"""Harvested from {origin}: {kind} region ({", ".join(ops)}), at the model\'s shapes and dtypes."""',
        "",
        *header,
        "",
        "",
        "class Model(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
    ]
    for i, a in enumerate(weights):
        lines.append(f"        self.p{i} = nn.Parameter({_init_expr(_value(a))})")
    lines += ["", *forward, "", "", "def get_inputs():", "    return ["]
    for a in activations:
        lines.append(f"        {_randn(a) if _value(a).dtype.is_floating_point else _init_expr(_value(a))},")
    lines += ["    ]", "", "", "def get_init_inputs():", "    return []", ""]
    if kind == "matmuls":
        seed = _gate_up_seed(nodes, activations, weights) or _grouped_seed(nodes, activations, weights)
    else:
        seed = _linear_seed(nodes, activations, weights, origin)
    return "\n".join(lines), ops, inputs, seed


_LINEAR_SEED = '''"""Seed for a harvested {what} region: a tiled Triton GEMM, fp32 accumulation (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_kernel(
    x_ptr, w_ptr, r_ptr, out_ptr, M, N, K,
    EPILOGUE: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # EPILOGUE: 0 none, 1 (+ r), 2 (* r), 3 silu(.) * r; each step rounded to the output dtype as eager does.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        if IEEE:
            acc += tl.dot(x, w, input_precision="ieee")
        else:
            acc += tl.dot(x, w)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    y = acc.to(out_ptr.dtype.element_ty)
    if EPILOGUE == 3:
        yf = y.to(tl.float32)
        y = (yf / (1.0 + tl.exp(-yf))).to(out_ptr.dtype.element_ty)
    if EPILOGUE == 1:
        y = y + tl.load(r_ptr + offs, mask=mask, other=0.0)
    if EPILOGUE >= 2:
        y = y * tl.load(r_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter({init})

    def forward(self, {args}):
        x = in0.reshape(-1, in0.shape[-1]).contiguous()
        w = self.p0.contiguous()
        M, K = x.shape
        N = w.shape[0]
        out = torch.empty((M, N), dtype=in0.dtype, device=in0.device)
        other = {other}
        grid = (triton.cdiv(M, 16), triton.cdiv(N, {block_n}))
        _linear_kernel[grid](
            x, w, other, out, M, N, K,
            EPILOGUE={epilogue}, IEEE=x.dtype == torch.float32, BLOCK_M=16, BLOCK_N={block_n}, BLOCK_K={block_k},{options}
        )
        return out.reshape(*in0.shape[:-1], N)
'''
# A decode-shaped GEMM (a few rows against a weight streamed from DRAM) wants many programs, each streaming a
# narrow slice of the weight in long K steps: on an H100 the best skinny kernel for the Llama weights at 8 rows
# took 16 columns a program and 128-256 of K a step, 2-4 warps, 5-6 stages (docs/benchmarks.md §11c). A seed
# with 64 columns a program left most of the GPU's SMs with one program each. Other shapes keep a small square
# tile the search moves from.
DECODE_ROWS = 16


def _tile(x: torch.Tensor, warps: int) -> dict[str, object]:
    """The seed's ``BLOCK_N``, ``BLOCK_K`` and launch options for activations ``x``."""
    rows, k = x.numel() // max(x.shape[-1], 1), x.shape[-1]
    if rows <= DECODE_ROWS and x.dtype in (torch.float16, torch.bfloat16):
        block_k = min(128, max(32, 1 << (k - 1).bit_length()))
        return {"block_n": 16, "block_k": block_k, "options": f" num_warps={warps}, num_stages=5,"}
    return {"block_n": 64, "block_k": 32, "options": ""}


_EPILOGUES = {(): (0, "linear"), ("add",): (1, "linear + add"), ("mul",): (2, "linear * other"),
              ("silu", "mul"): (3, "silu(linear) * other")}  # fmt: skip


def _linear_seed(
    nodes: list[torch.fx.Node], activations: list[torch.fx.Node], weights: list[torch.fx.Node], origin: str
) -> str | None:
    """A plain Triton GEMM seed for ``linear`` regions (no bias) alone or followed by ``+ other``,
    ``* other`` or ``silu(.) * other``, else None: harvest writes it with the problem, on any machine (on CPU
    Inductor calls an extern matmul; ``ksmith seed --from inductor`` on a GPU can use Inductor's templates)."""
    first = nodes[0]
    if not _is_linear(first) or not _no_bias(first):
        return None
    if (
        not activations
        or first.args[0] is not activations[0]
        or len(weights) != 1
        or first.args[1] is not weights[0]
    ):
        return None
    x, w = _value(activations[0]), _value(weights[0])
    if x.dtype != w.dtype or w.dim() != 2:
        return None
    names = tuple(_epilogue_name(n) for n in nodes[1:])
    if names not in _EPILOGUES:
        return None
    epilogue, what = _EPILOGUES[names]
    if epilogue:
        if len(activations) != 2:
            return None
        other, last = activations[1], nodes[-1]
        if _value(other).dtype != x.dtype or tuple(_value(other).shape) != tuple(_value(last).shape):
            return None
        previous = nodes[-2]
        if sorted(map(id, last.args)) != sorted(map(id, (previous, other))) or len(last.args) != 2:
            return None
        if names == ("silu", "mul") and (nodes[1].args != (first,) or nodes[1].kwargs.get("inplace", False)):
            return None
    elif len(activations) != 1:
        return None
    return _LINEAR_SEED.format(
        **_tile(x, warps=4),
        what=what,
        init=_init_expr(w),
        args="in0, in1" if epilogue else "in0",
        other="in1.reshape(M, N).contiguous()" if epilogue else "out  # unused",
        epilogue=epilogue,
    )


_GATE_UP_SEED = '''"""Seed for a harvested gate/up pair, silu(in0 @ gate.T) * (in0 @ up.T): one Triton kernel streams both
weights over one read of the input and writes only the product (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gate_up_kernel(
    x_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K,
    IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w_mask = (rn[None, :] < N) & (rk[:, None] < K)
        wg = tl.load(wg_ptr + rn[None, :] * K + rk[:, None], mask=w_mask, other=0.0)
        wu = tl.load(wu_ptr + rn[None, :] * K + rk[:, None], mask=w_mask, other=0.0)
        if IEEE:
            acc_g += tl.dot(x, wg, input_precision="ieee")
            acc_u += tl.dot(x, wu, input_precision="ieee")
        else:
            acc_g += tl.dot(x, wg)
            acc_u += tl.dot(x, wu)
    # Each step rounded to the output dtype as eager does: both products, the SiLU, the product of the two.
    gate = acc_g.to(out_ptr.dtype.element_ty).to(tl.float32)
    up = acc_u.to(out_ptr.dtype.element_ty)
    y = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty) * up
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter({init0})
        self.p1 = nn.Parameter({init1})

    def forward(self, in0):
        x = in0.reshape(-1, in0.shape[-1]).contiguous()
        gate, up = self.{gate}.contiguous(), self.{up}.contiguous()
        M, K = x.shape
        N = gate.shape[0]
        out = torch.empty((M, N), dtype=in0.dtype, device=in0.device)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, {block_n}))
        _gate_up_kernel[grid](
            x, gate, up, out, M, N, K, IEEE=x.dtype == torch.float32,
            BLOCK_M=16, BLOCK_N={block_n}, BLOCK_K={block_k},{options}
        )
        return out.reshape(*in0.shape[:-1], N)
'''


def _gate_up_seed(
    nodes: list[torch.fx.Node], activations: list[torch.fx.Node], weights: list[torch.fx.Node]
) -> str | None:
    """The pair kernel's seed for ``silu(linear(x, a)) * linear(x, b)`` (either operand order, no bias), else
    None."""
    linears = [n for n in nodes if _is_linear(n)]
    rest = [n for n in nodes if not _is_linear(n)]
    if len(nodes) != 4 or len(linears) != 2 or len(activations) != 1 or len(weights) != 2:
        return None
    if not all(_no_bias(n) for n in linears):
        return None
    silu, mul = rest
    if _epilogue_name(silu) != "silu" or silu.kwargs.get("inplace", False) or len(silu.args) != 1:
        return None
    gate = silu.args[0]
    up = next((n for n in linears if n is not gate), None)
    if gate not in linears or up is None or _epilogue_name(mul) != "mul" or set(mul.args) != {silu, up}:
        return None
    x, wg, wu = _value(activations[0]), _value(gate.args[1]), _value(up.args[1])
    if wg.dim() != 2 or wg.shape != wu.shape or not x.dtype == wg.dtype == wu.dtype:
        return None
    names = {w: f"p{i}" for i, w in enumerate(weights)}
    return _GATE_UP_SEED.format(
        **_tile(x, warps=2),
        init0=_init_expr(_value(weights[0])),
        init1=_init_expr(_value(weights[1])),
        gate=names[gate.args[1]],
        up=names[up.args[1]],
    )


_GROUPED_SEED = '''"""Seed for a harvested group of {count} projections of one input, in0 @ w.T for each w: one Triton launch,
its third grid axis picking the projection (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _grouped_linear_kernel(
    x_ptr, w0_ptr, w1_ptr, w2_ptr, o0_ptr, o1_ptr, o2_ptr, N0, N1, N2, M, K,
    IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    which = tl.program_id(2)
    w_ptr, o_ptr, N = w0_ptr, o0_ptr, N0
    if which == 1:
        w_ptr, o_ptr, N = w1_ptr, o1_ptr, N1
    if which == 2:
        w_ptr, o_ptr, N = w2_ptr, o2_ptr, N2
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        if IEEE:
            acc += tl.dot(x, w, input_precision="ieee")
        else:
            acc += tl.dot(x, w)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc.to(o_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
{params}

    def forward(self, in0):
        x = in0.reshape(-1, in0.shape[-1]).contiguous()
        ws = [w.contiguous() for w in ({weights})]
        M, K = x.shape
        outs = [torch.empty((M, w.shape[0]), dtype=in0.dtype, device=in0.device) for w in ws]
        # A missing projection has no columns and tensors of its own (never one of the others': a compiler that
        # makes the launch functional would copy an aliased output apart from the one the kernel writes).
        spare = [x.new_empty(1) for _ in range(3 - len(ws))]
        w3, o3 = ws + spare, outs + [x.new_empty(1) for _ in spare]
        n3 = [w.shape[0] for w in ws] + [0] * len(spare)
        grid = (triton.cdiv(M, 16), triton.cdiv(max(n3), {block_n}), len(ws))
        _grouped_linear_kernel[grid](
            x, *w3, *o3, *n3, M, K, IEEE=x.dtype == torch.float32,
            BLOCK_M=16, BLOCK_N={block_n}, BLOCK_K={block_k},{options}
        )
        return tuple(o.reshape(*in0.shape[:-1], o.shape[-1]) for o in outs)
'''


def _grouped_seed(
    nodes: list[torch.fx.Node], activations: list[torch.fx.Node], weights: list[torch.fx.Node]
) -> str | None:
    """The grouped kernel's seed for ``linear(x, w_i)`` projections of one input (no bias), else None."""
    if not 2 <= len(nodes) <= MAX_GROUP or len(activations) != 1 or len(weights) != len(nodes):
        return None
    if not all(_is_linear(n) and _no_bias(n) for n in nodes):
        return None
    x = _value(activations[0])
    values = [_value(n.args[1]) for n in nodes]
    if any(w.dim() != 2 or w.dtype != x.dtype or w.shape[1] != x.shape[-1] for w in values):
        return None
    names = {w: f"p{i}" for i, w in enumerate(weights)}
    return _GROUPED_SEED.format(
        **_tile(x, warps=4),
        count=len(nodes),
        params="\n".join(
            f"        self.p{i} = nn.Parameter({_init_expr(_value(w))})" for i, w in enumerate(weights)
        ),
        weights=", ".join(f"self.{names[n.args[1]]}" for n in nodes) + ",",
    )


def _no_bias(node: torch.fx.Node) -> bool:
    return not node.kwargs and len(node.args) in (2, 3) and (len(node.args) == 2 or node.args[2] is None)


def _epilogue_name(node: torch.fx.Node) -> str:
    if node.op == "call_function" and not node.kwargs.get("alpha"):
        if node.target in (operator.add, torch.add):
            return "add"
        if node.target in (operator.mul, torch.mul):
            return "mul"
        if node.target is F.silu:
            return "silu"
    return "other"


def _randn(node: torch.fx.Node) -> str:
    value = _value(node)
    return f"torch.randn({list(value.shape)}, dtype={value.dtype})"


def matches_back(source: str, gm: torch.fx.GraphModule) -> str | None:
    """Why the written problem would not match back into the model's graph (None: it does)."""
    from torch.fx.passes.utils.matcher_utils import SubgraphMatcher

    from .library import EntryError, capture_pattern

    namespace: dict[str, Any] = {"__name__": "ksmith_harvested"}
    try:
        exec(compile(source, "<harvested>", "exec"), namespace)
        torch.manual_seed(0)
        model = namespace["Model"]().eval()
        inputs = list(namespace["get_inputs"]())
        pattern, _ = capture_pattern(model, inputs)
    except EntryError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - the generated code itself; the region is reported, not written
        return f"the written problem fails: {type(exc).__name__}: {exc}".splitlines()[0]
    matcher = SubgraphMatcher(
        pattern.graph, match_output=False, match_placeholder=False, remove_overlapping_matches=True
    )
    if not matcher.match(gm.graph):
        return "the written problem's graph does not match back into the model's"
    return None


def _param_placeholders(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> set[torch.fx.Node]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {
        n
        for n, ex in zip(placeholders, example_inputs)
        if isinstance(ex, torch.nn.Parameter) or "_parameters_" in n.name or "_buffers_" in n.name
    }


def harvest(model_file: Path, output: Path, device: str = "cpu") -> dict[str, Any]:
    """Write one problem per distinct region of the model into ``output``; returns what was written."""
    from ksmith_core.clitools import output_dir

    from .report import load_model_file

    module = load_model_file(model_file)
    try:
        torch.manual_seed(0)
        with torch.device(device):
            model = module.Model(*module.get_init_inputs()).eval()
            inputs = list(module.get_inputs())
        model = model.to(device)
        inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs]
    except Exception as exc:
        raise ProblemError(
            f"{model_file}: building the model or its inputs failed: {exc}".splitlines()[0]
        ) from exc
    graphs: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def grab(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=grab, dynamic=False)(*inputs)
    except Exception as exc:
        raise ProblemError(f"{model_file}: Dynamo cannot trace the model: {exc}".splitlines()[0]) from exc
    finally:
        torch._dynamo.reset()
    out_dir = output_dir(Path(output))
    written: dict[str, Harvested] = {}
    skipped: list[dict[str, str]] = []
    stem = re.sub(r"\W", "_", Path(model_file).stem)
    for index, (gm, example_inputs) in enumerate(graphs):
        params = _param_placeholders(gm, example_inputs)
        for kind, nodes in find_regions(gm):
            where = f"{index}:{nodes[-1].name}"
            made = region_problem(kind, nodes, params, Path(model_file).name)
            if isinstance(made, str):
                skipped.append({"region": where, "reason": made})
                continue
            source, ops, specs, seed = made
            if source not in written:
                why_not = matches_back(source, gm)
                if why_not is not None:
                    skipped.append({"region": where, "reason": why_not})
                    continue
                name = f"{stem}_{len(written):02d}_{kind}_{'_'.join(dict.fromkeys(ops))}"[:80]
                written[source] = Harvested(name, kind, source, ops, specs, seed)
            written[source].occurrences.append(where)
    problems = []
    for item in written.values():
        (out_dir / f"{item.name}.py").write_text(item.source, encoding="utf-8")
        if item.seed is not None:  # beside the problem, where evolve and bench look for a seed
            (out_dir / f"{item.name}.seed.py").write_text(item.seed, encoding="utf-8")
        problems.append(
            {
                "problem": item.name,
                "file": f"{item.name}.py",
                "kind": item.kind,
                "ops": item.ops,
                "inputs": item.inputs,
                "occurrences": item.occurrences,
                "seed": f"{item.name}.seed.py" if item.seed is not None else None,
                "gpu_time_share": None,  # measured from the Inductor-compiled model on a GPU: not written yet
            }
        )
    summary = {"model": str(model_file), "graphs": len(graphs), "problems": problems, "skipped": skipped}
    (out_dir / "harvest.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary
