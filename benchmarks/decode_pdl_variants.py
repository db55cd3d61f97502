"""Programmatic dependent launch for the decode step's kernels (issue 13; GPU, docs/benchmarks.md §11h).

At decode (8 rows, hidden 2048, bf16) a forward is about forty short kernels, and §11g found about 32 µs of a
0.27 ms step in the gaps between them, beside each GEMM's own ramp (its first weight tiles' DRAM latency) in a
kernel of 6-13 µs. Hopper's programmatic dependent launch (PDL) lets a kernel launched with it start while the
kernel before it is still running: it waits for that kernel's results (``griddepcontrol.wait``,
``tl.extra.cuda.gdc_wait``) only where it reads them, and the kernel before says when its dependents may start
(``gdc_launch_dependents``; at its end when it does not say). A decode GEMM's weights do not depend on the kernel
before it, so it can pull its first weight tiles into L2 before it waits (what CUTLASS's example 63 does for
Hopper GEMMs).

The chain is ``decode_prefetch_variants.py``'s four decoder layers (486 MB of distinct weights, one CUDA graph),
with its RMSNorms and SiLU·mul as small Triton kernels (so they can take part, as Inductor's own kernels do with
``TORCHINDUCTOR_ENABLE_PDL=1``); rotary and attention stay torch's. Variants:

- ``baseline``: no PDL;
- ``pdl``: every Triton kernel launched with PDL and waiting at its start (the launch overlaps, nothing else);
- ``pdl, trigger``: and each says at its start that its dependents may launch;
- ``GEMMs ...`` / ``glue ...``: the same for one kind of kernel only (a GEMM launched by Inductor's code for a
  user kernel has no PDL launch; Inductor's own kernels have it with ``TORCHINDUCTOR_ENABLE_PDL=1``);
- ``pdl, trigger, prefetch P``: and each GEMM program first asks for its first P weight elements of every row
  it owns into L2 (``prefetch.global.L2``, one address per 128-byte line), before it waits; ``all``: its whole
  slice of K.

Every variant's final hidden state must equal the baseline's bit for bit (waiting where results are read changes
no result); the cuBLAS chain is timed beside them. Then the baseline and ``pdl, trigger`` again, the whole chain
one opaque custom op under ``torch.compile(mode="reduce-overhead")``: recorded by Inductor's CUDA graph trees
instead of one ``torch.cuda.graph`` capture, the way the backend's ``pdl`` option runs in a model.

    python benchmarks/decode_pdl_variants.py [--rows 8] [--out OUT.json]
    TRITON_INTERPRET=1 python benchmarks/decode_pdl_variants.py --check   # the kernels (PDL off) on the CPU

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import statistics
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from decode_gemm_variants import report_header, script_args, write_report  # the scripts beside this one
from decode_prefetch_variants import (
    CONFIGS,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    INTER,
    KV_HEADS,
    Chain,
    time_variants,
)


@triton.jit
def _prefetch_l2(ptrs):
    """Ask for the 128-byte line at each pointer to be read into L2; nothing is returned or waited for."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def skinny_pdl(
    x_ptr, w_ptr, r_ptr, o_ptr, M, N, K,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, RESIDUAL: tl.constexpr,
    PDL: tl.constexpr, TRIGGER: tl.constexpr, PREFETCH_K: tl.constexpr,
):  # fmt: skip
    """out[M, N] = x[M, K] @ w[N, K]^T (+ r), ``decode_prefetch_variants.skinny_gemm``'s structure, with PDL."""
    rm = tl.arange(0, 16)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    if PREFETCH_K > 0:  # the weights are not the kernel before's output: ask for them before waiting
        lines = tl.arange(0, PREFETCH_K // 64) * 64  # 64 bf16 elements a 128-byte line
        ok = (rn[:, None] < N) & (lines[None, :] < K)
        _prefetch_l2(tl.where(ok, w_ptr + rn[:, None] * K + lines[None, :], w_ptr))
    if PDL:
        tl.extra.cuda.gdc_wait()  # x and r are the kernels before's outputs
    if TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    acc = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(
            x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0
        )
        w = tl.load(
            w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0
        )
        acc += tl.dot(x, w)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if RESIDUAL:
        acc += tl.load(r_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc.to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_kernel(
    x_ptr, w_ptr, o_ptr, N, eps, BLOCK: tl.constexpr, PDL: tl.constexpr, TRIGGER: tl.constexpr
):
    """One row a program, as ``F.rms_norm`` computes it in float32."""
    if PDL:
        tl.extra.cuda.gdc_wait()
    if TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(o_ptr + row * N + offs, (x * rstd * w).to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def silu_mul_kernel(gu_ptr, o_ptr, INTER_SIZE, BLOCK: tl.constexpr, PDL: tl.constexpr, TRIGGER: tl.constexpr):
    """out[row] = silu(gate) * up for ``gu = [gate | up]`` rows."""
    if PDL:
        tl.extra.cuda.gdc_wait()
    if TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < INTER_SIZE
    gate = tl.load(gu_ptr + row * 2 * INTER_SIZE + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gu_ptr + row * 2 * INTER_SIZE + INTER_SIZE + offs, mask=mask, other=0.0).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(o_ptr.dtype.element_ty).to(tl.float32)  # eager rounds silu first
    tl.store(o_ptr + row * INTER_SIZE + offs, (silu * up).to(o_ptr.dtype.element_ty), mask=mask)


def _flags(variant, part):
    """``part`` ("gemm" or "glue") takes ``<part>_pdl`` / ``<part>_trigger`` where given, else ``pdl`` / ``trigger``."""
    pdl = bool(variant.get(f"{part}_pdl", variant.get("pdl")))
    trigger = bool(variant.get(f"{part}_trigger", variant.get("trigger")))
    return {"PDL": pdl, "TRIGGER": trigger}, ({"launch_pdl": True} if pdl else {})


def gemm(x, w, out, variant, residual=None):
    if variant.get("cublas"):
        torch.mm(x, w.t(), out=out)
        return out.add_(residual) if residual is not None else out
    m, k = x.shape
    n = w.shape[0]
    bn, bk, warps, stages = CONFIGS.get((n, k), (32, 256, 2, 4))
    prefetch = variant.get("prefetch", 0)
    prefetch = k if prefetch == "all" else min(prefetch, k)
    flags, launch = _flags(variant, "gemm")
    skinny_pdl[(triton.cdiv(n, bn),)](
        x, w, residual if residual is not None else out, out, m, n, k,
        BLOCK_N=bn, BLOCK_K=bk, RESIDUAL=residual is not None, PREFETCH_K=prefetch, **flags,
        num_warps=warps, num_stages=stages, **launch,
    )  # fmt: skip
    return out


def rms_norm(x, weight, out, variant):
    if variant.get("cublas"):
        return F.rms_norm(x, (x.shape[1],), weight, 1e-5)
    flags, launch = _flags(variant, "glue")
    rms_norm_kernel[(x.shape[0],)](
        x,
        weight,
        out,
        x.shape[1],
        1e-5,
        BLOCK=triton.next_power_of_2(x.shape[1]),
        **flags,
        num_warps=4,
        **launch,
    )
    return out


def silu_mul(gu, out, variant):
    if variant.get("cublas"):
        return F.silu(gu[:, :INTER]) * gu[:, INTER:]
    flags, launch = _flags(variant, "glue")
    silu_mul_kernel[(triton.cdiv(INTER, 1024), gu.shape[0])](
        gu, out, INTER, BLOCK=1024, **flags, num_warps=4, **launch
    )
    return out


class PdlChain(Chain):
    """``Chain``'s four layers, its glue as the Triton kernels above (torch's with ``cublas``)."""

    def __init__(self, rows, dtype, device):
        super().__init__(rows, dtype, device)
        self.normed = torch.empty(rows, HIDDEN, dtype=dtype, device=device)
        self.act = torch.empty(rows, INTER, dtype=dtype, device=device)

    def step(self, variant):
        h = self.x0
        for index, layer in enumerate(self.layers):
            n1 = rms_norm(h, layer["norm1"], self.normed, variant)
            qkv = gemm(n1, layer["qkv"], self.qkv_out, variant)
            q, k, v = qkv.view(self.rows, 1, -1, HEAD_DIM).split([HEADS, KV_HEADS, KV_HEADS], dim=2)
            q, k = self.rotary(q).transpose(1, 2), self.rotary(k).transpose(1, 2)
            attn = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), enable_gqa=True)
            attn = attn.transpose(1, 2).reshape(self.rows, HEADS * HEAD_DIM)
            h = gemm(attn, layer["o"], self.h_attn, variant, residual=h)
            n2 = rms_norm(h, layer["norm2"], self.normed, variant)
            gu = gemm(n2, layer["gate_up"], self.gu_out, variant)
            act = silu_mul(gu, self.act, variant)
            h = gemm(act, layer["down"], self.h_out[index], variant, residual=h)
        return h


VARIANTS = {
    "baseline": {},
    "pdl": {"pdl": True},
    "pdl, trigger": {"pdl": True, "trigger": True},
    "pdl, trigger, prefetch 512": {"pdl": True, "trigger": True, "prefetch": 512},
    "pdl, trigger, prefetch 1024": {"pdl": True, "trigger": True, "prefetch": 1024},
    "pdl, trigger, prefetch all": {"pdl": True, "trigger": True, "prefetch": "all"},
    "pdl, prefetch 1024": {"pdl": True, "prefetch": 1024},
    "GEMMs pdl + trigger, glue without": {"gemm_pdl": True, "gemm_trigger": True},
    "GEMMs trigger (no pdl launch), glue pdl + trigger": {
        "gemm_trigger": True,
        "glue_pdl": True,
        "glue_trigger": True,
    },
    "glue pdl + trigger, GEMMs without": {"glue_pdl": True, "glue_trigger": True},
    "cuBLAS and torch's glue": {"cublas": True},
    "baseline again": {},
}


# The same chain recorded by torch.compile's CUDA graphs (Inductor's graph trees, ``mode="reduce-overhead"``)
# instead of one ``torch.cuda.graph`` capture: whether the graph Inductor records keeps what PDL gains.
COMPILED = ("baseline", "pdl, trigger", "baseline again")


def compiled_rounds(chain, label, variant, calls=20, rounds=5):
    """Median GPU time of one step per round, the whole chain one opaque custom op under ``reduce-overhead``;
    ``calls`` back-to-back steps a sample, so the graph trees' host work per call overlaps the GPU's."""
    slug = "".join(c if c.isalnum() else "_" for c in label)

    @torch.library.custom_op(f"ksmith_pdl_probe::chain_{slug}", mutates_args=())
    def step(x: torch.Tensor) -> torch.Tensor:
        return chain.step(variant).clone()

    @step.register_fake
    def _(x):
        return torch.empty_like(x)

    torch._dynamo.reset()
    run = torch.compile(lambda x: step(x), mode="reduce-overhead", fullgraph=True)
    for _ in range(5):  # graph trees warm up, then record, then replay
        out = run(chain.x0)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    result = []
    for _ in range(rounds):
        samples = []
        for _ in range(10):
            start.record()
            for _ in range(calls):
                out = run(chain.x0)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / calls)
        result.append(statistics.median(samples))
    return result, out.clone()


def time_compiled(chain) -> dict:
    found: dict = {}
    base_out = None
    for label in COMPILED:
        rounds_ms, out = compiled_rounds(chain, label, VARIANTS[label])
        base_out = out if base_out is None else base_out
        found[label] = {"rounds_ms": rounds_ms, "same_as_baseline": bool(torch.equal(out, base_out))}
    both = found["baseline"]["rounds_ms"] + found["baseline again"]["rounds_ms"]
    base = statistics.median(both)
    print(
        f"\nunder torch.compile(mode='reduce-overhead'), baseline {base:.4f} ms (rounds {min(both):.4f}-{max(both):.4f}):"
    )
    for label, entry in found.items():
        med = statistics.median(entry["rounds_ms"])
        entry["ratio_vs_baseline"] = base / med
        print(f"  {label:32} {med:.4f} ms  x{base / med:.3f}  same output: {entry['same_as_baseline']}")
    return {"compiled": found, "compiled_baseline_ms": base}


def check() -> int:
    """The kernels (PDL and prefetch off: the interpreter has neither) against torch on the CPU."""
    torch.manual_seed(0)
    worst = 0.0
    for (n, k), _ in CONFIGS.items():
        x, w, r = torch.randn(8, k) / 4, torch.randn(n, k) / k**0.5, torch.randn(8, n)
        out = gemm(x, w, torch.empty(8, n), {}, residual=r)
        ref = x.double() @ w.double().t() + r.double()
        worst = max(worst, ((out.double() - ref).norm() / ref.norm()).item())
    x, weight = torch.randn(8, HIDDEN), torch.rand(HIDDEN) + 0.5
    ref = F.rms_norm(x.double(), (HIDDEN,), weight.double(), 1e-5)
    worst = max(
        worst, ((rms_norm(x, weight, torch.empty(8, HIDDEN), {}).double() - ref).norm() / ref.norm()).item()
    )
    gu = torch.randn(8, 2 * INTER)
    ref = F.silu(gu[:, :INTER].double()) * gu[:, INTER:].double()
    worst = max(worst, ((silu_mul(gu, torch.empty(8, INTER), {}).double() - ref).norm() / ref.norm()).item())
    print(f"largest relative error: {worst:.1e}")
    ok = worst < 1e-4
    print("check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main() -> int:
    args = script_args(check=True)
    if args.check:
        return check()
    torch.manual_seed(0)
    chain = PdlChain(args.rows, torch.bfloat16, "cuda")
    report = {**report_header(args.rows), **time_variants(chain, VARIANTS, width=32)}
    report.update(time_compiled(chain))
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
