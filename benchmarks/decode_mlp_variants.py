"""A decode step's MLP block in one launch: gate/up, SiLU·mul and down fused, the down projection split over the
intermediate columns and summed with atomics. Measured against the launches the backend makes today.

Section 11f of docs/benchmarks.md leaves the decode target (1.3× over Inductor in ``reduce-overhead``) 34 µs a
forward short, spread over 40-odd launches, each small GEMM paying its ramp. The MLP is the largest block:
gate/up + SiLU·mul (67 MB, 24.7 µs a launch) then down (34 MB, 15.3 µs), two launches and an intermediate round
trip per layer. No GEMM structure measured there beats the skinny ``tl.dot`` kernel by more than a few percent
on its own, so this measures the structural change instead: one program per ``BLOCK_I`` intermediate columns
computes its slice of ``h = silu(x Wg^T) * (x Wu^T)`` and at once its share of ``h Wd^T``, added into an fp32
output with ``tl.atomic_add`` (no grid-wide wait: the down projection's reduction runs over the programs
themselves); a last small kernel adds the residual and rounds to bf16. Every weight is read once, the
intermediate never leaves the SM, and the block is three launches (the output's zeroing, the fused kernel, the
rounding) where today's are two larger ones.

Variants, each timed as CUDA graphs of ``--layers`` MLP blocks with distinct weights (every weight from DRAM,
as in the model):

- ``torch``: cuBLAS gate/up as one GEMM, SiLU·mul in torch, cuBLAS down with the residual (``addmm``);
- ``two kernels``: a fused gate/up + SiLU·mul kernel and a down + residual kernel, both the seeds' skinny
  ``tl.dot`` structure (what the backend swaps in today, §11f);
- ``fused``: the one-launch block above, over a sweep of ``BLOCK_I``, ``BLOCK_K``, ``BLOCK_H``, warps and stages.

    python benchmarks/decode_mlp_variants.py [--rows 8] [--layers 4] [--out OUT.json]
    TRITON_INTERPRET=1 python benchmarks/decode_mlp_variants.py --check   # correctness only, small sizes, CPU

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

HIDDEN, INTERMEDIATE = 2048, 8192  # the model of docs/benchmarks.md §11


@triton.jit
def silu_gate_up(x_ptr, wg_ptr, wu_ptr, M, H, INTER, cols, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``silu(x Wg[cols]^T) * (x Wu[cols]^T)`` in fp32 for a 16-row tile and ``BLOCK_N`` intermediate columns:
    the part both the fused block and today's first launch compute."""
    rm = tl.arange(0, 16)
    g = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    u = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(
            x_ptr + rm[:, None] * H + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < H), other=0.0
        )
        wmask = (cols[None, :] < INTER) & (rk[:, None] < H)
        g += tl.dot(x, tl.load(wg_ptr + cols[None, :] * H + rk[:, None], mask=wmask, other=0.0))
        u += tl.dot(x, tl.load(wu_ptr + cols[None, :] * H + rk[:, None], mask=wmask, other=0.0))
    return g * tl.sigmoid(g) * u


@triton.jit
def fused_mlp(
    x_ptr,
    wg_ptr,
    wu_ptr,
    wd_ptr,
    y_ptr,
    M,
    H,
    INTER,
    BLOCK_I: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """``y[M, H] += (silu(x Wg[cols]^T) * x Wu[cols]^T) Wd[:, cols]^T`` for this program's intermediate columns.
    Weights as ``nn.Linear`` keeps them: ``Wg``, ``Wu`` are [INTER, H], ``Wd`` is [H, INTER]; ``y`` is fp32, zeroed."""
    rm = tl.arange(0, 16)
    ri = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    h = silu_gate_up(x_ptr, wg_ptr, wu_ptr, M, H, INTER, ri, BLOCK_I, BLOCK_K)
    h = h.to(x_ptr.dtype.element_ty)  # rounded as the unfused path stores its intermediate
    for h0 in range(0, H, BLOCK_H):
        rh = h0 + tl.arange(0, BLOCK_H)
        wd = tl.load(
            wd_ptr + rh[None, :] * INTER + ri[:, None],
            mask=(rh[None, :] < H) & (ri[:, None] < INTER),
            other=0.0,
        )
        part = tl.dot(h, wd)
        tl.atomic_add(y_ptr + rm[:, None] * H + rh[None, :], part, mask=(rm[:, None] < M) & (rh[None, :] < H))


@triton.jit
def add_round(y_ptr, r_ptr, o_ptr, n, BLOCK: tl.constexpr):
    """``o = (y + r)`` rounded to ``o``'s dtype: the residual add after the fused block."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(o_ptr + offs, (y + r).to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gate_up_silu(x_ptr, wg_ptr, wu_ptr, h_ptr, M, H, INTER, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Today's first launch: ``h = silu(x Wg^T) * (x Wu^T)``, a 16-row tile, BLOCK_N columns a program."""
    rm = tl.arange(0, 16)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    h = silu_gate_up(x_ptr, wg_ptr, wu_ptr, M, H, INTER, rn, BLOCK_N, BLOCK_K)
    tl.store(
        h_ptr + rm[:, None] * INTER + rn[None, :],
        h.to(h_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < INTER),
    )


@triton.jit
def down_residual(h_ptr, wd_ptr, r_ptr, o_ptr, M, H, INTER, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Today's second launch: ``o = h Wd^T + r``."""
    rm = tl.arange(0, 16)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, INTER, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        h = tl.load(
            h_ptr + rm[:, None] * INTER + rk[None, :],
            mask=(rm[:, None] < M) & (rk[None, :] < INTER),
            other=0.0,
        )
        wd = tl.load(
            wd_ptr + rn[None, :] * INTER + rk[:, None],
            mask=(rn[None, :] < H) & (rk[:, None] < INTER),
            other=0.0,
        )
        acc += tl.dot(h, wd)
    mask = (rm[:, None] < M) & (rn[None, :] < H)
    r = tl.load(r_ptr + rm[:, None] * H + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(o_ptr + rm[:, None] * H + rn[None, :], (acc + r).to(o_ptr.dtype.element_ty), mask=mask)


class Block:
    """One MLP block's weights and buffers (distinct per layer, so a chain reads every weight from DRAM)."""

    def __init__(self, rows, hidden, inter, dtype, device):
        scale = hidden**-0.5
        self.wg = torch.randn(inter, hidden, dtype=dtype, device=device) * scale
        self.wu = torch.randn(inter, hidden, dtype=dtype, device=device) * scale
        self.wgu = torch.cat([self.wg, self.wu])  # the grouped gate/up weight the torch path multiplies once
        self.wd = torch.randn(hidden, inter, dtype=dtype, device=device) * inter**-0.5
        self.h = torch.empty(rows, inter, dtype=dtype, device=device)
        self.y32 = torch.empty(rows, hidden, dtype=torch.float32, device=device)
        self.out = torch.empty(rows, hidden, dtype=dtype, device=device)


def run_torch(x, r, b):
    gu = x @ b.wgu.t()
    inter = b.wg.shape[0]
    h = F.silu(gu[:, :inter]) * gu[:, inter:]
    return torch.addmm(r, h, b.wd.t(), out=b.out)


def run_two(cfg):
    (gn, gk, gw, gs), (dn, dk, dw, ds) = cfg

    def run(x, r, b):
        rows, hidden = x.shape
        inter = b.wg.shape[0]
        gate_up_silu[(triton.cdiv(inter, gn),)](
            x, b.wg, b.wu, b.h, rows, hidden, inter, BLOCK_N=gn, BLOCK_K=gk, num_warps=gw, num_stages=gs
        )
        down_residual[(triton.cdiv(hidden, dn),)](
            b.h, b.wd, r, b.out, rows, hidden, inter, BLOCK_N=dn, BLOCK_K=dk, num_warps=dw, num_stages=ds
        )
        return b.out

    return run


def run_fused(cfg):
    bi, bk, bh, warps, stages = cfg

    def run(x, r, b):
        rows, hidden = x.shape
        inter = b.wg.shape[0]
        b.y32.zero_()
        fused_mlp[(triton.cdiv(inter, bi),)](
            x, b.wg, b.wu, b.wd, b.y32, rows, hidden, inter,
            BLOCK_I=bi, BLOCK_K=bk, BLOCK_H=bh, num_warps=warps, num_stages=stages,
        )  # fmt: skip
        n = b.out.numel()
        add_round[(triton.cdiv(n, 1024),)](b.y32, r, b.out, n, BLOCK=1024)
        return b.out

    return run


def reference(x, r, b):
    xd = x.double()
    g, u = xd @ b.wg.double().t(), xd @ b.wu.double().t()
    return (g * torch.sigmoid(g) * u) @ b.wd.double().t() + r.double()


def rel_err(got, x, r, b):
    ref = reference(x, r, b)
    return ((got.double() - ref).norm() / ref.norm()).item()


FUSED_GRID = list(itertools.product((16, 32, 64), (64, 128, 256), (64, 128, 256), (4, 8), (2, 3)))
TWO_GRID = [
    ((32, 128, 2, 3), (16, 512, 2, 5)),  # §11f's best per-GEMM configurations (gate/up, down)
    ((32, 256, 4, 3), (32, 256, 4, 4)),
    ((16, 256, 2, 4), (16, 256, 2, 4)),
    ((64, 128, 4, 3), (32, 512, 4, 4)),
]


def check(rows: int) -> int:
    """Every variant against the float64 reference at small sizes (the interpreter on the CPU)."""
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available() else "cuda"
    hidden, inter = 64, 256
    torch.manual_seed(0)
    b = Block(rows, hidden, inter, torch.float32 if device == "cpu" else torch.bfloat16, device)
    x = torch.randn(rows, hidden, dtype=b.wg.dtype, device=device)
    r = torch.randn(rows, hidden, dtype=b.wg.dtype, device=device)
    worst = 0.0
    for name, run in [("torch", run_torch), ("two kernels", run_two(((16, 32, 4, 2), (16, 64, 4, 2))))] + [
        (f"fused {cfg}", run_fused(cfg))
        for cfg in [(16, 32, 32, 4, 2), (32, 64, 64, 4, 2), (64, 16, 64, 4, 2)]
    ]:
        err = rel_err(run(x, r, b), x, r, b)
        worst = max(worst, err)
        print(f"{name:28s} rel err {err:.2e}")
    return 0 if worst < 2e-2 else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--out", default=None)
    parser.add_argument("--check", action="store_true", help="correctness at small sizes only")
    args = parser.parse_args()
    if not 1 <= args.rows <= 16:
        parser.error("--rows: every kernel here holds the rows in one 16-row tile")
    if args.check:
        return check(args.rows)
    from decode_gemm_variants import graph_ms  # the script beside this one

    torch.manual_seed(0)
    dtype, rows = torch.bfloat16, args.rows
    blocks = [Block(rows, HIDDEN, INTERMEDIATE, dtype, "cuda") for _ in range(args.layers)]
    x = torch.randn(rows, HIDDEN, dtype=dtype, device="cuda")
    r = torch.randn(rows, HIDDEN, dtype=dtype, device="cuda")
    mb = sum((b.wg.numel() + b.wu.numel() + b.wd.numel()) * 2 for b in blocks) / 1e6

    def chain_ms(run):
        return statistics.median(graph_ms([lambda b=b: run(x, r, b) for b in blocks], replays=30, rounds=3))

    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
        "layers": args.layers,
        "weights_mb": mb,
        "variants": [],
    }

    rows_out = report["variants"]

    def timed_row(label, run):
        try:
            err = max(rel_err(run(x, r, b), x, r, b) for b in blocks[:1])
        except Exception as exc:  # noqa: BLE001 - a configuration that does not compile is skipped
            return {"label": label, "error": f"{type(exc).__name__}: {str(exc)[:100]}"}
        if err > 2e-2:
            return {"label": label, "rel_err": err, "error": "wrong result"}
        ms = chain_ms(run)
        return {"label": label, "ms": ms, "rel_err": err, "tb_s": mb / ms / 1e3}

    def measure(label, run):
        rows_out.append(timed_row(label, run))
        if args.out:  # after every row: a sweep cut short by a time limit keeps what it measured
            with open(args.out, "w") as fh:
                json.dump(report, fh, indent=1)

    measure("torch", run_torch)
    for cfg in TWO_GRID:
        measure(f"two kernels {cfg}", run_two(cfg))
    for cfg in FUSED_GRID:
        measure(f"fused {cfg}", run_fused(cfg))
    measure("torch again", run_torch)
    timed = [v for v in rows_out if "ms" in v]
    base = statistics.median(v["ms"] for v in timed if v["label"].startswith("torch"))
    print(
        f"{args.layers} MLP blocks at {rows} rows, {mb:.0f} MB of weights, one CUDA graph (ms, TB/s, vs torch):"
    )
    for family in ("torch", "two kernels", "fused"):
        best = sorted((v for v in timed if v["label"].startswith(family)), key=lambda v: v["ms"])[:3]
        for v in best:
            print(
                f"  {v['label']:40s} {v['ms']:.4f}  {v['tb_s']:.2f}  x{base / v['ms']:.3f}  err {v['rel_err']:.1e}"
            )
    errors = [v for v in rows_out if "error" in v]
    print(f"{len(errors)} of {len(rows_out)} configurations skipped (compile error or wrong result)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
