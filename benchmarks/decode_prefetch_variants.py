"""Weights pulled into L2 while the decode step's latency-bound kernels run (issue 13; GPU, docs/benchmarks.md §11f).

At decode (8 rows, hidden 2048, bf16) the step's small GEMMs stream their weights at 1.3 TB/s, well under the
copy ceiling, because each launch's ramp (the first weight tiles' DRAM latency, the last programs' tail) is a
large part of a 6-10 µs kernel (§11f). Meanwhile, the kernels between them -- the norms, rotary, attention at one
token -- leave DRAM idle for several microseconds a layer. This measures whether reading a GEMM's weights into
L2 on a second stream during those kernels (``evict_last``) shortens the GEMM that follows enough to shorten
the step: the o_proj weights (8.4 MB) during rotary and attention, and the next layer's q/k/v weights (12.6 MB)
during the down projection, whose own weight loads are then marked ``evict_first`` so they do not push the
prefetched lines out (H100 and H200 have a 50 MB L2).

The chain is four decoder layers of the §11 model with distinct weights (486 MB, more than L2 holds, so every
replay reads its weights from DRAM), as one CUDA graph: RMSNorm, q/k/v (one GEMM), rotary, attention
(``scaled_dot_product_attention``, 16 heads / 4 KV heads, one token), o_proj + residual, RMSNorm, gate/up (one
GEMM) + SiLU·mul, down + residual. The GEMMs are the skinny ``tl.dot`` kernel of ksmith's decode seeds
(``decode_gemv_variants.py``'s, at §11f's best configurations), or cuBLAS. The norms, rotary and attention are
torch's eager kernels, so the window between GEMMs is a little longer than Inductor's fused kernels leave.

    python benchmarks/decode_prefetch_variants.py [--rows 8] [--out OUT.json]
    TRITON_INTERPRET=1 python benchmarks/decode_prefetch_variants.py --check   # the kernels on the CPU

Prints, per variant, the chain's median replay time per round and its ratio to the baseline, and checks that
every variant's final hidden state equals the baseline's bit for bit (a prefetch changes no result).
Exploration, not a ksmith result: numbers it prints go into docs only with this command named. Measured on an
H200 (docs/benchmarks.md §11g): every prefetch variant made the chain slower, so the backend has none.
"""

from __future__ import annotations

import statistics
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from decode_gemm_variants import (  # the script beside this one
    graph_ms,
    report_header,
    script_args,
    write_report,
)

HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 2048, 8192, 16, 4, 128, 4
# §11f's best skinny configurations on the H200 (BLOCK_N, BLOCK_K, warps, stages), per weight [N, K].
CONFIGS = {
    (3072, 2048): (32, 256, 2, 5),
    (2048, 2048): (16, 512, 2, 5),
    (16384, 2048): (32, 128, 2, 3),
    (2048, 8192): (16, 512, 2, 5),
}


@triton.jit
def skinny_gemm(
    x_ptr, w_ptr, r_ptr, o_ptr, M, N, K,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, RESIDUAL: tl.constexpr, EVICT_FIRST: tl.constexpr,
):  # fmt: skip
    """out[M, N] = x[M, K] @ w[N, K]^T (+ r): a 16-row tile, BLOCK_N columns a program, tl.dot over K steps."""
    rm = tl.arange(0, 16)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(
            x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0
        )
        w_mask = (rn[None, :] < N) & (rk[:, None] < K)
        if EVICT_FIRST:
            w = tl.load(
                w_ptr + rn[None, :] * K + rk[:, None], mask=w_mask, other=0.0, eviction_policy="evict_first"
            )
        else:
            w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=w_mask, other=0.0)
        acc += tl.dot(x, w)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if RESIDUAL:
        acc += tl.load(r_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc.to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def l2_prefetch(w_ptr, sink_ptr, numel, BLOCK: tl.constexpr):
    """Read ``numel`` elements into L2 (``evict_last``), grid-strided; each program stores one sum so the loads
    are kept. The sum is never read."""
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(w_ptr + offs, mask=offs < numel, other=0.0, eviction_policy="evict_last").to(
            tl.float32
        )
    tl.store(sink_ptr + pid, tl.sum(acc, axis=0))


def gemm(x, w, out, residual=None, evict_first=False, cublas=False):
    if cublas:
        torch.mm(x, w.t(), out=out)
        if residual is not None:
            out.add_(residual)
        return out
    m, k = x.shape
    n = w.shape[0]
    bn, bk, warps, stages = CONFIGS.get((n, k), (32, 256, 2, 4))
    skinny_gemm[(triton.cdiv(n, bn),)](
        x, w, residual if residual is not None else out, out, m, n, k,
        BLOCK_N=bn, BLOCK_K=bk, RESIDUAL=residual is not None, EVICT_FIRST=evict_first,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def prefetch(w, sink, programs):
    """``programs`` None: one 2048-element tile a program, so no program waits on DRAM more than once."""
    programs = programs or triton.cdiv(w.numel(), 2048)
    l2_prefetch[(programs,)](w, sink, w.numel(), BLOCK=2048, num_warps=4)


class Chain:
    """Four decoder layers at decode with distinct weights; ``step(variant)`` launches one forward."""

    def __init__(self, rows, dtype, device):
        def weight(n, k):
            return torch.randn(n, k, dtype=dtype, device=device) / k**0.5

        self.layers = [
            {
                "qkv": weight((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN),
                "o": weight(HIDDEN, HEADS * HEAD_DIM),
                "gate_up": weight(2 * INTER, HIDDEN),
                "down": weight(HIDDEN, INTER),
                "norm1": torch.rand(HIDDEN, dtype=dtype, device=device) + 0.5,
                "norm2": torch.rand(HIDDEN, dtype=dtype, device=device) + 0.5,
            }
            for _ in range(LAYERS)
        ]
        self.x0 = torch.randn(rows, HIDDEN, dtype=dtype, device=device)
        angle = torch.rand(rows, 1, 1, HEAD_DIM // 2, device=device) * 6.28
        self.cos = torch.cat([angle.cos(), angle.cos()], dim=-1).to(dtype)
        self.sin = torch.cat([angle.sin(), angle.sin()], dim=-1).to(dtype)
        self.rows, self.dtype, self.device = rows, dtype, device
        self.qkv_out = torch.empty(rows, (HEADS + 2 * KV_HEADS) * HEAD_DIM, dtype=dtype, device=device)
        self.h_attn = torch.empty(rows, HIDDEN, dtype=dtype, device=device)
        self.gu_out = torch.empty(rows, 2 * INTER, dtype=dtype, device=device)
        self.h_out = [torch.empty(rows, HIDDEN, dtype=dtype, device=device) for _ in range(LAYERS)]
        self.sink = torch.empty(8192, dtype=torch.float32, device=device)
        self.side = torch.cuda.Stream() if device == "cuda" else None

    def rotary(self, t):
        half = t.shape[-1] // 2
        rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * self.cos + rotated * self.sin

    def _fork(self, weight, programs):
        """The prefetch on the side stream, ordered after what the main stream has launched so far."""
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            prefetch(weight, self.sink, programs)

    def _join(self):
        torch.cuda.current_stream().wait_stream(self.side)

    def step(self, variant):
        cublas = variant.get("cublas", False)
        programs = variant.get("programs", 32)
        h = self.x0
        for index, layer in enumerate(self.layers):
            if variant.get("qkv") and index > 0:
                self._join()  # the previous layer's down ran beside this layer's q/k/v prefetch
            if variant.get("o_proj") == "early":
                self._fork(layer["o"], programs)  # beside the norm and the q/k/v GEMM
            n1 = F.rms_norm(h, (HIDDEN,), layer["norm1"], 1e-5)
            qkv = gemm(n1, layer["qkv"], self.qkv_out, cublas=cublas)
            if variant.get("o_proj") is True:
                self._fork(layer["o"], programs)
            q, k, v = qkv.view(self.rows, 1, -1, HEAD_DIM).split([HEADS, KV_HEADS, KV_HEADS], dim=2)
            q, k = self.rotary(q).transpose(1, 2), self.rotary(k).transpose(1, 2)
            attn = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), enable_gqa=True)
            attn = attn.transpose(1, 2).reshape(self.rows, HEADS * HEAD_DIM)
            if variant.get("o_proj"):
                self._join()
            h = gemm(attn, layer["o"], self.h_attn, residual=h, cublas=cublas)
            n2 = F.rms_norm(h, (HIDDEN,), layer["norm2"], 1e-5)
            gu = gemm(
                n2,
                layer["gate_up"],
                self.gu_out,
                evict_first=variant.get("evict_first", False),
                cublas=cublas,
            )
            act = F.silu(gu[:, :INTER]) * gu[:, INTER:]
            if variant.get("qkv") and index + 1 < LAYERS:
                self._fork(self.layers[index + 1]["qkv"], programs)
            h = gemm(act, layer["down"], self.h_out[index], residual=h,
                     evict_first=variant.get("evict_first", False), cublas=cublas)  # fmt: skip
        return h


VARIANTS = {
    "baseline": {},
    "o_proj prefetched": {"o_proj": True},
    "o_proj prefetched, 16 programs": {"o_proj": True, "programs": 16},
    "o_proj prefetched, 66 programs": {"o_proj": True, "programs": 66},
    "evict_first alone": {"evict_first": True},
    "o_proj + next q/k/v prefetched, evict_first": {"o_proj": True, "qkv": True, "evict_first": True},
    "o_proj prefetched, a tile a program": {"o_proj": True, "programs": None},
    "o_proj prefetched early, a tile a program": {"o_proj": "early", "programs": None},
    "o_proj, a tile a program, evict_first": {"o_proj": True, "programs": None, "evict_first": True},
    "o_proj + next q/k/v, a tile a program, evict_first": {
        "o_proj": True,
        "qkv": True,
        "programs": None,
        "evict_first": True,
    },
    "cuBLAS baseline": {"cublas": True},
    "cuBLAS, o_proj prefetched": {"cublas": True, "o_proj": True},
    "baseline again": {},
}


def check() -> int:
    """The two kernels against torch on the CPU (``TRITON_INTERPRET=1``): the GEMM with and without its
    residual and ``evict_first``, and the prefetch's per-program sums."""
    torch.manual_seed(0)
    worst = 0.0
    for n, k in CONFIGS:
        x = torch.randn(8, k, dtype=torch.float32) / 4
        w = torch.randn(n, k, dtype=torch.float32) / k**0.5
        r = torch.randn(8, n, dtype=torch.float32)
        for residual, evict in ((None, False), (r, True)):
            out = gemm(x, w, torch.empty(8, n), residual=residual, evict_first=evict)
            ref = x.double() @ w.double().t() + (0 if residual is None else residual.double())
            err = ((out.double() - ref).norm() / ref.norm()).item()
            worst = max(worst, err)
            print(f"gemm {n}x{k} residual={residual is not None} evict_first={evict}: rel err {err:.1e}")
    w = torch.randn(3 * 2048 + 5, dtype=torch.float32)
    sink = torch.zeros(4)
    prefetch(w, sink, 4)
    err = abs(sink.double().sum().item() - w.double().sum().item())
    print(f"prefetch: sum of the programs' sums off by {err:.1e}")
    ok = worst < 1e-4 and err < 1e-2
    print("check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def time_variants(chain, variants: dict, width: int) -> dict:
    """Each variant's chain (``chain.step(variant)``) as one CUDA graph: its median replay time per round, and
    whether its final hidden state equals the first variant's bit for bit (None for cuBLAS variants, which
    round otherwise); then each one's ratio to the median of the ``baseline`` and ``baseline again`` rounds."""
    found: dict = {}
    base_out = None
    for label, variant in variants.items():
        try:
            rounds_ms = graph_ms([lambda variant=variant: chain.step(variant)], replays=40, rounds=5)
            out = chain.h_out[-1].clone()  # the last replay's final hidden state (each replay synchronised)
        except Exception as exc:  # noqa: BLE001 - a variant that fails is reported, the others still run
            found[label] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(f"  {label:{width}} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        if base_out is None:
            base_out = out
        same = bool(torch.equal(out, base_out)) if not variant.get("cublas") else None
        found[label] = {"rounds_ms": rounds_ms, "same_as_baseline": same}
        print(f"  {label:{width}} {' '.join(f'{v:.4f}' for v in rounds_ms)}  same output: {same}", flush=True)
    both = found["baseline"].get("rounds_ms", []) + found["baseline again"].get("rounds_ms", [])
    base = statistics.median(both)
    print(
        f"\nbaseline {base:.4f} ms (rounds {min(both):.4f}-{max(both):.4f}); per variant, median of rounds:"
    )
    for label, entry in found.items():
        if "rounds_ms" in entry:
            med = statistics.median(entry["rounds_ms"])
            entry["ratio_vs_baseline"] = base / med
            print(
                f"  {label:{width}} {med:.4f} ms  x{base / med:.3f}  same output: {entry['same_as_baseline']}"
            )
    return {"variants": found, "baseline_ms": base, "baseline_rounds": [min(both), max(both)]}


def main() -> int:
    args = script_args(check=True)
    if args.check:
        return check()
    torch.manual_seed(0)
    chain = Chain(args.rows, torch.bfloat16, "cuda")
    mb = sum(w.numel() * 2 for layer in chain.layers for key, w in layer.items() if w.dim() == 2) / 1e6
    print(f"{LAYERS} decoder layers, {args.rows} rows, {mb:.0f} MB of weights, one CUDA graph per variant")
    report = {**report_header(args.rows), "weights_mb": mb, **time_variants(chain, VARIANTS, width=52)}
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
