"""Seed kernels that ``ksmith harvest`` writes beside the matmul problems it cuts from a model (Inductor writes no
Triton for them: it calls an extern matmul), so that ``evolve`` and ``bench`` start from a working kernel:

- a tiled GEMM for a bare ``linear`` and for ``linear`` followed by ``+ other``, ``* other`` or ``silu(.) * other``;
- the gate/up pair, ``silu(x @ gate.T) * (x @ up.T)``: two accumulators over one read of ``x``;
- two or three projections of one input: one launch, the grid's third axis picking the projection;
- each group also behind Llama's RMSNorm, optionally with the residual add before it: one kernel normalises
  the rows it reads and writes the residual sum once.

Every seed rounds each step to the model's dtype where eager does, so that it agrees with the model at the
evaluator's tolerances; the search moves from there.
"""

from __future__ import annotations

import operator
import textwrap

import torch

from .nodes import epilogue_name, init_expr, is_linear, is_residual_add, no_bias, value_of

MAX_GROUP = 3  # projections of one input written as one problem (q, k and v); the seed kernel takes this many


def seed_for(
    kind: str, nodes: list[torch.fx.Node], activations: list[torch.fx.Node], weights: list[torch.fx.Node]
) -> str | None:
    """The seed kernel's source for a harvested region (its nodes in graph order, its tensor inputs and
    parameters in the order the problem takes them), or None where harvest writes none."""
    if kind == "matmuls":
        return (
            _normed_seed(nodes, activations, weights)
            or _gate_up_seed(nodes, activations, weights)
            or _grouped_seed(nodes, activations, weights)
        )
    if kind == "matmul":
        return _linear_seed(nodes, activations, weights)
    if kind == "attention" and not weights:
        from .attention import attention_seed, is_attention, recognise

        block = next((recognise(n) for n in nodes if is_attention(n)), None)
        return attention_seed(block, activations) if block is not None else None
    return None


# What both linear seeds do with their fp32 sum: round it, apply the epilogue (EPILOGUE 0 none, 1 + r, 2 * r,
# 3 silu(.) * r), each step rounded to the output dtype as eager does, and store.
_EPILOGUE_STEPS = """\
y = {value}.to(out_ptr.dtype.element_ty)
if EPILOGUE == 3:
    yf = y.to(tl.float32)
    y = (yf / (1.0 + tl.exp(-yf))).to(out_ptr.dtype.element_ty)
if EPILOGUE == 1:
    y = y + tl.load(r_ptr + offs, mask=mask, other=0.0)
if EPILOGUE >= 2:
    y = y * tl.load(r_ptr + offs, mask=mask, other=0.0)
tl.store(out_ptr + offs, y, mask=mask)"""


def _epilogue_steps(value: str, indent: int) -> str:
    return textwrap.indent(_EPILOGUE_STEPS.format(value=value), " " * indent)


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
{epilogue_steps}


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
        grid = (triton.cdiv(M, {block_m}), triton.cdiv(N, {block_n}))
        _linear_kernel[grid](
            x, w, other, out, M, N, K,
            EPILOGUE={epilogue}, IEEE=x.dtype == torch.float32, BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k},{options}
        )
        return out.reshape(*in0.shape[:-1], N)
'''
_SPLIT_LINEAR_SEED = '''"""Seed for a harvested {what} region at a decode shape, K long beside N: each column slice's K is split
over SPLIT programs of one launch; the last of them to finish adds their partials in a fixed order (the same
sum every call), rounds, applies the epilogue and stores (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _split_linear_kernel(
    x_ptr, w_ptr, r_ptr, out_ptr, part_ptr, arrived_ptr, M, N, K,
    EPILOGUE: tl.constexpr, SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # EPILOGUE: 0 none, 1 (+ r), 2 (* r), 3 silu(.) * r; each step rounded to the output dtype as eager does.
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    rm = tl.arange(0, BLOCK_M)  # every row in one tile
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    span = tl.cdiv(tl.cdiv(K, SPLIT), BLOCK_K) * BLOCK_K
    k_end = tl.minimum(split * span + span, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(split * span, split * span + span, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < k_end), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < k_end), other=0.0)
        acc += tl.dot(x, w)
    # The partials are [SPLIT, M, N] fp32 (whatever BLOCK_M is). A column slice's count of arrivals is zero
    # between calls: its last program resets it.
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    tl.store(part_ptr + split * M * N + offs, acc, mask=mask)
    tl.debug_barrier()  # every thread's partial written before the count says so
    if tl.atomic_add(arrived_ptr + pid_n, 1, sem="acq_rel") == SPLIT - 1:
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for i in tl.static_range(SPLIT):
            total += tl.load(part_ptr + i * M * N + offs, mask=mask, other=0.0, cache_modifier=".cg")
{epilogue_steps}
        tl.atomic_xchg(arrived_ptr + pid_n, 0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter({init})
        # One arrival count per output column (enough for any BLOCK_N), made once and left at zero by each call.
        self.register_buffer("arrived", torch.zeros(self.p0.shape[0], dtype=torch.int32), persistent=False)

    def forward(self, {args}):
        x = in0.reshape(-1, in0.shape[-1]).contiguous()
        w = self.p0.contiguous()
        M, K = x.shape
        N = w.shape[0]
        split = {split}
        out = torch.empty((M, N), dtype=in0.dtype, device=in0.device)
        partials = torch.empty((split, M, N), dtype=torch.float32, device=in0.device)
        other = {other}
        grid = (triton.cdiv(N, {block_n}), split)
        _split_linear_kernel[grid](
            x, w, other, out, partials, self.arrived, M, N, K,
            EPILOGUE={epilogue}, SPLIT=split, BLOCK_M=16, BLOCK_N={block_n}, BLOCK_K={block_k},{options}
        )
        return out.reshape(*in0.shape[:-1], N)
'''
# Where K is at least SPLIT_RATIO times N and the rows fit one 16-row tile, the seed splits K. Down + residual
# (K 8192, N 2048) at 8 rows on an H200 took 12.50 us in 4 slices of K, 16 columns a program in steps of 128 at
# 2 warps and 4 stages, against 13.82 unsplit and 13.32 for cuBLAS's mm; o_proj (K = N) was slower split
# (docs/benchmarks.md §11h). (SPLIT, BLOCK_N, BLOCK_K, warps, stages):
SPLIT_LINEAR_CONFIG = (4, 16, 128, 2, 4)
SPLIT_RATIO = 4

# A decode-shaped GEMM (a few rows against a weight streamed from DRAM) wants many programs, each streaming a
# narrow slice of the weight in long K steps: on an H100 the best skinny kernel for the Llama weights at 8 rows
# took 16 columns a program and 128-256 of K a step, 2-4 warps, 5-6 stages (docs/benchmarks.md §11c). A seed
# with 64 columns a program left most of the GPU's SMs with one program each. Up to DECODE_ROWS rows, one
# program covers every row (BLOCK_M the rows' next power of two, at least 16, what tl.dot takes), so each
# weight tile is read once: at 64 rows, 16-row tiles read each weight four times and the o_proj seed ran at
# 0.62x of torch.compile (§11f). Other shapes keep a small square tile the search moves from.
DECODE_ROWS = 64
# Where the rows fit one 16-row tile, the configurations (BLOCK_N, BLOCK_K, warps, stages) measured fastest as
# seeds on the Llama decode step's harvested problems at 8 rows on an H200 (docs/benchmarks.md §11g): a single
# projection (o_proj, down, each + residual) in K steps of 512 at 2 warps, 1.37x and 1.18x of torch.compile
# where 128 at 4 warps gave 1.23x (evolved) and a check that failed; the q/k/v group 32 columns a program in
# steps of 256 at 2 warps, 10.2 us against 13.0. A stage is then 32 KB of shared memory at most.
# The gate/up pair's seed kernel at 8 rows (K 2048, N 8192, four layers' weights in one graph on an H200): 32
# columns a program in steps of 128 at 4 warps and 3 stages took 19.3 us a layer, where (16, 128, 2, 5) took
# 21.0 and a budget-8 evolution's winner (16, 64, 2, 5) 19.7 (docs/benchmarks.md §11i).
ONE_TILE_CONFIGS = {"linear": (16, 512, 2, 5), "grouped": (32, 256, 2, 5), "gate_up": (32, 128, 4, 3)}


def _one_tile(x: torch.Tensor) -> bool:
    """Whether activations ``x`` are fp16/bf16 rows that fit one 16-row ``tl.dot`` tile."""
    rows = x.numel() // max(x.shape[-1], 1)
    return rows <= 16 and x.dtype in (torch.float16, torch.bfloat16)


def _tile(x: torch.Tensor, warps: int, kind: str | None = None) -> dict[str, object]:
    """The seed's ``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K`` and launch options for activations ``x``; ``kind`` (a
    key of ONE_TILE_CONFIGS) picks a measured configuration where the rows fit one 16-row tile."""
    rows, k = x.numel() // max(x.shape[-1], 1), x.shape[-1]
    if rows <= DECODE_ROWS and x.dtype in (torch.float16, torch.bfloat16):
        block_m = max(16, 1 << max(0, rows - 1).bit_length())
        if _one_tile(x) and kind in ONE_TILE_CONFIGS:
            block_n, block_k, tile_warps, stages = ONE_TILE_CONFIGS[kind]
            return {
                "block_m": 16,
                "block_n": block_n,
                "block_k": min(block_k, max(32, 1 << (k - 1).bit_length())),
                "options": f" num_warps={tile_warps}, num_stages={stages},",
            }
        block_k = min(128, max(32, 1 << (k - 1).bit_length()))
        stages = 5 if block_m <= 32 else 4  # a stage holds a [BLOCK_M, BLOCK_K] tile of the rows too
        return {
            "block_m": block_m,
            "block_n": 16,
            "block_k": block_k,
            "options": f" num_warps={warps}, num_stages={stages},",
        }
    return {"block_m": 16, "block_n": 64, "block_k": 32, "options": ""}


_EPILOGUES = {(): (0, "linear"), ("add",): (1, "linear + add"), ("mul",): (2, "linear * other"),
              ("silu", "mul"): (3, "silu(linear) * other")}  # fmt: skip


def _linear_seed(
    nodes: list[torch.fx.Node], activations: list[torch.fx.Node], weights: list[torch.fx.Node]
) -> str | None:
    """A plain Triton GEMM seed for ``linear`` regions (no bias) alone or followed by ``+ other``,
    ``* other`` or ``silu(.) * other``, else None: harvest writes it with the problem, on any machine (on CPU
    Inductor calls an extern matmul; ``ksmith seed --from inductor`` on a GPU can use Inductor's templates)."""
    first = nodes[0]
    if not is_linear(first) or not no_bias(first):
        return None
    if (
        not activations
        or first.args[0] is not activations[0]
        or len(weights) != 1
        or first.args[1] is not weights[0]
    ):
        return None
    x, w = value_of(activations[0]), value_of(weights[0])
    if x.dtype != w.dtype or w.dim() != 2:
        return None
    names = tuple(epilogue_name(n) for n in nodes[1:])
    if names not in _EPILOGUES:
        return None
    epilogue, what = _EPILOGUES[names]
    if epilogue:
        if len(activations) != 2:
            return None
        other, last = activations[1], nodes[-1]
        if value_of(other).dtype != x.dtype or tuple(value_of(other).shape) != tuple(value_of(last).shape):
            return None
        previous = nodes[-2]
        if sorted(map(id, last.args)) != sorted(map(id, (previous, other))) or len(last.args) != 2:
            return None
        if names == ("silu", "mul") and (nodes[1].args != (first,) or nodes[1].kwargs.get("inplace", False)):
            return None
    elif len(activations) != 1:
        return None
    fields = {
        "what": what,
        "init": init_expr(w),
        "args": "in0, in1" if epilogue else "in0",
        "other": "in1.reshape(M, N).contiguous()" if epilogue else "out  # unused",
        "epilogue": epilogue,
    }
    n, k = w.shape
    if _one_tile(x) and k >= SPLIT_RATIO * n:
        split, block_n, block_k, warps, stages = SPLIT_LINEAR_CONFIG
        return _SPLIT_LINEAR_SEED.format(
            **fields,
            epilogue_steps=_epilogue_steps("total", 8),
            split=split,
            block_n=block_n,
            block_k=block_k,
            options=f" num_warps={warps}, num_stages={stages},",
        )
    return _LINEAR_SEED.format(
        **_tile(x, warps=4, kind="linear"), **fields, epilogue_steps=_epilogue_steps("acc", 4)
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
        grid = (triton.cdiv(M, {block_m}), triton.cdiv(N, {block_n}))
        _gate_up_kernel[grid](
            x, gate, up, out, M, N, K, IEEE=x.dtype == torch.float32,
            BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k},{options}
        )
        return out.reshape(*in0.shape[:-1], N)
'''


def gate_up_pair(nodes: list[torch.fx.Node]) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """(gate, up) of ``silu(linear(x, a)) * linear(x, b)`` (either operand order, no bias), else None."""
    linears = [n for n in nodes if is_linear(n)]
    rest = [n for n in nodes if not is_linear(n)]
    if len(nodes) != 4 or len(linears) != 2 or not all(no_bias(n) for n in linears):
        return None
    silu, mul = rest
    if epilogue_name(silu) != "silu" or silu.kwargs.get("inplace", False) or len(silu.args) != 1:
        return None
    gate = silu.args[0]
    up = next((n for n in linears if n is not gate), None)
    if gate not in linears or up is None or epilogue_name(mul) != "mul" or set(mul.args) != {silu, up}:
        return None
    if gate.args[0] is not up.args[0]:
        return None
    return gate, up


def _gate_up_seed(
    nodes: list[torch.fx.Node], activations: list[torch.fx.Node], weights: list[torch.fx.Node]
) -> str | None:
    """The pair kernel's seed for ``silu(linear(x, a)) * linear(x, b)`` (either operand order, no bias), else
    None."""
    pair = gate_up_pair(nodes)
    if pair is None or len(activations) != 1 or len(weights) != 2:
        return None
    gate, up = pair
    x, wg, wu = value_of(activations[0]), value_of(gate.args[1]), value_of(up.args[1])
    if wg.dim() != 2 or wg.shape != wu.shape or not x.dtype == wg.dtype == wu.dtype:
        return None
    names = {w: f"p{i}" for i, w in enumerate(weights)}
    return _GATE_UP_SEED.format(
        **_tile(x, warps=2, kind="gate_up"),
        init0=init_expr(value_of(weights[0])),
        init1=init_expr(value_of(weights[1])),
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
    if pid_n * BLOCK_N >= N:  # the grid spans the widest projection: past a narrower one's columns, no work
        return
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
        grid = (triton.cdiv(M, {block_m}), triton.cdiv(max(n3), {block_n}), len(ws))
        _grouped_linear_kernel[grid](
            x, *w3, *o3, *n3, M, K, IEEE=x.dtype == torch.float32,
            BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k},{options}
        )
        return tuple(o.reshape(*in0.shape[:-1], o.shape[-1]) for o in outs)
'''


def _grouped_seed(
    nodes: list[torch.fx.Node], activations: list[torch.fx.Node], weights: list[torch.fx.Node]
) -> str | None:
    """The grouped kernel's seed for ``linear(x, w_i)`` projections of one input (no bias), else None."""
    if not 2 <= len(nodes) <= MAX_GROUP or len(activations) != 1 or len(weights) != len(nodes):
        return None
    if not all(is_linear(n) and no_bias(n) for n in nodes):
        return None
    x = value_of(activations[0])
    values = [value_of(n.args[1]) for n in nodes]
    if any(w.dim() != 2 or w.dtype != x.dtype or w.shape[1] != x.shape[-1] for w in values):
        return None
    names = {w: f"p{i}" for i, w in enumerate(weights)}
    return _GROUPED_SEED.format(
        **_tile(x, warps=4, kind="grouped"),
        count=len(nodes),
        params="\n".join(
            f"        self.p{i} = nn.Parameter({init_expr(value_of(w))})" for i, w in enumerate(weights)
        ),
        weights=", ".join(f"self.{names[n.args[1]]}" for n in nodes) + ",",
    )


# What the normed seeds share: each program first reads its rows whole for the norm's statistics (the few rows
# of a decode step come from L2), then multiplies the normalised rows by its slice of the weights. Every step
# is Llama's RMSNorm as eager runs it: the sum x + r rounded to the model's dtype, the mean square and the
# scaling in fp32, the cast back, the weight product in the model's dtype; so the GEMM sees eager's operands.
# (Scaling the product by the rows' rstd after the GEMM would need no first pass, but rounds x * weight once
# where eager rounds twice: at K = 2048 in bfloat16 about one output in 80,000 then falls outside the 1e-2
# tolerance, and the evaluator's five trials see several.) The first pass is a chain of loads the GEMM's
# pipelining does not reach: on an H100 each of its steps cost about 1 us (docs/benchmarks.md section 11e),
# so it reads the rows in steps of its own, BLOCK_KS wide. Wider is not better: a [16, 1024] step holds 128
# fp32 values a thread at 4 warps, and the seed fell from 0.89x to 0.64x of torch.compile (section 11f);
# 256 was the fastest step measured. The steps are unrolled (K is a constexpr: a seed is for one width) and
# store nothing -- the residual sum is written in the GEMM's loop, which reads it anyway -- so that all of the
# pass's loads can be in flight at once instead of one after another.
STATISTICS_BLOCK = 256  # the first pass's step: [16, 256] 16-bit values, 8 KB (16 with a residual)
_NORM_STATISTICS = """\
    sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in tl.static_range(0, K, BLOCK_KS):
        rks = k0 + tl.arange(0, BLOCK_KS)
        xs_mask = (rm[:, None] < M) & (rks[None, :] < K)
        xs = tl.load(x_ptr + rm[:, None] * K + rks[None, :], mask=xs_mask, other=0.0)
        if RESIDUAL:
            xs = xs + tl.load(r_ptr + rm[:, None] * K + rks[None, :], mask=xs_mask, other=0.0)
        xf = xs.to(tl.float32)
        sq += tl.sum(xf * xf, axis=1)
    rstd = tl.rsqrt(sq / K + eps)"""
_NORMED_ROWS = """\
        x_mask = (rm[:, None] < M) & (rk[None, :] < K)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=x_mask, other=0.0)
        if RESIDUAL:
            x = x + tl.load(r_ptr + rm[:, None] * K + rk[None, :], mask=x_mask, other=0.0)
            if writes_sum:
                tl.store(h_ptr + rm[:, None] * K + rk[None, :], x, mask=x_mask)
        g = tl.load(g_ptr + rk, mask=rk < K, other=0.0)
        x = g[None, :] * (x.to(tl.float32) * rstd[:, None]).to(x_ptr.dtype.element_ty)"""

_NORMED_GROUPED_SEED = '''"""Seed for a harvested RMSNorm{residual_doc} and {count} projections of its output, in one Triton launch:
each program normalises the rows it reads as the model does and multiplies them by its slice of one
projection's weight, the grid's third axis picking the projection (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _normed_grouped_kernel(
    x_ptr, r_ptr, h_ptr, g_ptr, w0_ptr, w1_ptr, w2_ptr, o0_ptr, o1_ptr, o2_ptr, N0, N1, N2, M, K: tl.constexpr, eps,
    RESIDUAL: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_KS: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    which = tl.program_id(2)
    w_ptr, o_ptr, N = w0_ptr, o0_ptr, N0
    if which == 1:
        w_ptr, o_ptr, N = w1_ptr, o1_ptr, N1
    if which == 2:
        w_ptr, o_ptr, N = w2_ptr, o2_ptr, N2
    if pid_n * BLOCK_N >= N:  # the grid spans the widest projection: past a narrower one's columns, no work
        return  # (never a program that writes the residual sum: projection 0 has columns)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    writes_sum = (pid_n == 0) & (which == 0)  # one program of each row block writes the residual sum
{statistics}
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
{rows}
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

    def forward(self, {args}):
        shape = {x}.shape
        x = {x}.reshape(-1, shape[-1]).contiguous()
        r = {r}
        h = {h}
        ws = [w.contiguous() for w in ({weights})]
        M, K = x.shape
        outs = [torch.empty((M, w.shape[0]), dtype=x.dtype, device=x.device) for w in ws]
        # A missing projection has no columns and tensors of its own (never one of the others').
        spare = [x.new_empty(1) for _ in range(3 - len(ws))]
        w3, o3 = ws + spare, outs + [x.new_empty(1) for _ in spare]
        n3 = [w.shape[0] for w in ws] + [0] * len(spare)
        grid = (triton.cdiv(M, {block_m}), triton.cdiv(max(n3), {block_n}), len(ws))
        _normed_grouped_kernel[grid](
            x, r, h, self.{norm}.contiguous(), *w3, *o3, *n3, M, K, {eps!r},
            RESIDUAL={residual}, IEEE=x.dtype == torch.float32,
            BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k}, BLOCK_KS={block_ks},{options}
        )
        projections = tuple(o.reshape(*shape[:-1], o.shape[-1]) for o in outs)
        return {returns}
'''

_NORMED_GATE_UP_SEED = '''"""Seed for a harvested RMSNorm{residual_doc} and the gate/up pair of its output, silu(n @ gate.T) * (n @ up.T),
in one Triton kernel: each program normalises the rows it reads as the model does, streams its slice of both
weights and writes only the product (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _normed_gate_up_kernel(
    x_ptr, r_ptr, h_ptr, g_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K: tl.constexpr, eps,
    RESIDUAL: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_KS: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    writes_sum = pid_n == 0  # one program of each row block writes the residual sum
{statistics}
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
{rows}
        w_mask = (rn[None, :] < N) & (rk[:, None] < K)
        wg = tl.load(wg_ptr + rn[None, :] * K + rk[:, None], mask=w_mask, other=0.0)
        wu = tl.load(wu_ptr + rn[None, :] * K + rk[:, None], mask=w_mask, other=0.0)
        if IEEE:
            acc_g += tl.dot(x, wg, input_precision="ieee")
            acc_u += tl.dot(x, wu, input_precision="ieee")
        else:
            acc_g += tl.dot(x, wg)
            acc_u += tl.dot(x, wu)
    gate = acc_g.to(out_ptr.dtype.element_ty).to(tl.float32)
    up = acc_u.to(out_ptr.dtype.element_ty)
    y = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty) * up
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
{params}

    def forward(self, {args}):
        shape = {x}.shape
        x = {x}.reshape(-1, shape[-1]).contiguous()
        r = {r}
        h = {h}
        gate, up = self.{gate}.contiguous(), self.{up}.contiguous()
        M, K = x.shape
        N = gate.shape[0]
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(M, {block_m}), triton.cdiv(N, {block_n}))
        _normed_gate_up_kernel[grid](
            x, r, h, self.{norm}.contiguous(), gate, up, out, M, N, K, {eps!r},
            RESIDUAL={residual}, IEEE=x.dtype == torch.float32,
            BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k}, BLOCK_KS={block_ks},{options}
        )
        product = out.reshape(*shape[:-1], N)
        return {returns}
'''


def _normed_seed(
    nodes: list[torch.fx.Node], activations: list[torch.fx.Node], weights: list[torch.fx.Node]
) -> str | None:
    """The seed for Llama's RMSNorm (optionally after a residual add) feeding a gate/up pair or a group of bare
    projections, all without bias, in one dtype; else None."""
    first = next((i for i, n in enumerate(nodes) if is_linear(n)), None)
    if not first:
        return None
    prologue, group = nodes[:first], nodes[first:]
    residual = prologue[0] if len(prologue) == 9 and is_residual_add(prologue[0]) else None
    norm = rms_norm(prologue[1:] if residual is not None else prologue)
    if norm is None:
        return None
    source, weight, eps = norm
    linears = [n for n in group if is_linear(n)]
    if any(not no_bias(n) or n.args[0] is not prologue[-1] for n in linears):
        return None
    if residual is not None:
        if source is not residual or len(activations) != 2 or set(residual.args) != set(activations):
            return None
    elif activations != [source]:
        return None
    dtype, width = value_of(source).dtype, value_of(source).shape[-1]
    projections = [value_of(n.args[1]) for n in linears]
    if value_of(weight).dtype != dtype or tuple(value_of(weight).shape) != (width,):
        return None
    if any(w.dim() != 2 or w.dtype != dtype or w.shape[1] != value_of(source).shape[-1] for w in projections):
        return None
    names = {w: f"p{i}" for i, w in enumerate(weights)}
    if set(names) != {weight, *(n.args[1] for n in linears)}:
        return None
    x_in, r_in = ("in0", "in1") if residual is not None else ("in0", None)
    # The sum is an output where the model reads it again (the next residual); an add that only the norm reads
    # is inside the norm's piece, and the kernel adds the two inputs without returning the sum.
    returns_sum = residual is not None and any(u not in set(nodes) for u in residual.users)
    tile = _tile(value_of(source), warps=4)
    common = dict(
        **tile,
        # The statistics step keeps its [BLOCK_M, BLOCK_KS] tile at STATISTICS_BLOCK x 16 values.
        block_ks=min(STATISTICS_BLOCK * 16 // tile["block_m"], 1 << max(0, width - 1).bit_length()),
        residual_doc=" after a residual add" if residual is not None else "",
        params="\n".join(
            f"        self.p{i} = nn.Parameter({init_expr(value_of(w))})" for i, w in enumerate(weights)
        ),
        args=", ".join(a for a in (x_in, r_in) if a),
        x=x_in,
        r=f"{r_in}.reshape(-1, shape[-1]).contiguous()" if r_in else "x  # no residual: unused",
        h=("torch.empty_like(x)  # the residual sum" + (", an output of the region" if returns_sum else ""))
        if r_in
        else "x  # unused",
        residual=residual is not None,
        norm=names[weight],
        eps=eps,
        statistics=_NORM_STATISTICS,
        rows=_NORMED_ROWS,
    )
    sum_first = "h.reshape(shape), " if returns_sum else ""
    pair = gate_up_pair(group)
    if pair is not None:
        gate, up = pair
        return _NORMED_GATE_UP_SEED.format(
            **common,
            gate=names[gate.args[1]],
            up=names[up.args[1]],
            returns=f"({sum_first}product)" if returns_sum else "product",
        )
    if len(linears) != len(group) or not 2 <= len(group) <= MAX_GROUP:
        return None
    return _NORMED_GROUPED_SEED.format(
        **common,
        count=len(linears),
        weights=", ".join(f"self.{names[n.args[1]]}" for n in linears) + ",",
        returns=f"({sum_first}*projections)" if returns_sum else "projections",
    )


def rms_norm(nodes: list[torch.fx.Node]) -> tuple[torch.fx.Node, torch.fx.Node, float] | None:
    """(input, weight, eps) where ``nodes`` are Llama's RMSNorm as Dynamo records it, else None::

    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)
    """
    if len(nodes) != 8:
        return None
    up, square, mean, add, rsqrt, scale, down, product = nodes
    source = up.args[0] if up.args else None
    if not isinstance(source, torch.fx.Node) or not isinstance(value_of(source), torch.Tensor):
        return None
    dtype = value_of(source).dtype
    if _cast_to(up) != torch.float32 or _cast_to(down) != dtype:
        return None
    if not (_is_method_or(square, "pow", torch.pow, operator.pow) and square.args == (up, 2)):
        return None
    last = value_of(source).dim() - 1
    if not (
        _is_method_or(mean, "mean", torch.mean)
        and mean.args[:1] == (square,)
        and mean.args[1:] in ((-1,), (last,), ([-1],), ([last],))
        and mean.kwargs == {"keepdim": True}
    ):
        return None
    if not (epilogue_name(add) == "add" and add.args[0] is mean and isinstance(add.args[1], float)):
        return None
    if not (_is_method_or(rsqrt, "rsqrt", torch.rsqrt) and rsqrt.args == (add,)):
        return None
    if not (epilogue_name(scale) == "mul" and set(scale.args) == {up, rsqrt} and len(scale.args) == 2):
        return None
    if down.args[:1] != (scale,) or epilogue_name(product) != "mul" or len(product.args) != 2:
        return None
    weight = next((a for a in product.args if a is not down), None)
    if down not in product.args or not isinstance(weight, torch.fx.Node):
        return None
    return source, weight, float(add.args[1])


def _cast_to(node: torch.fx.Node) -> torch.dtype | None:
    """The dtype a ``.to(dtype)`` / ``.float()`` node casts to, else None."""
    if node.op != "call_method":
        return None
    if node.target == "float" and len(node.args) == 1 and not node.kwargs:
        return torch.float32
    if node.target != "to":
        return None
    dtypes = [a for a in (*node.args[1:], *node.kwargs.values()) if isinstance(a, torch.dtype)]
    others = [a for a in node.args[1:] if not isinstance(a, torch.dtype)]
    return dtypes[0] if len(dtypes) == 1 and not others and set(node.kwargs) <= {"dtype"} else None


def _is_method_or(node: torch.fx.Node, method: str, *functions: object) -> bool:
    if node.op == "call_method":
        return node.target == method
    return node.op == "call_function" and node.target in functions
