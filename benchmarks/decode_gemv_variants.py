"""The decode step's GEMMs as the kernelsmith backend launches them (q/k/v as one, o_proj, gate/up as one, down),
in CUDA graphs: cuBLAS beside two skinny kernel families, each with and without programmatic dependent launch.

Section 11e of docs/benchmarks.md profiles the decode step of its Llama model with the evolved groups swapped in:
the q/k/v kernel streams 12 MB at about 1.3 TB/s and o_proj 8 MB at about 1.3 TB/s, where gate/up (64 MB)
reaches 2.6 TB/s. Small weights are bound by how few bytes each program has in flight and by each launch's
ramp, not by bandwidth. Two structural answers are measured here before any goes into ksmith's seeds:

- ``fma``: a GEMV without ``tl.dot``, so a program owns as few as 2-8 output columns (``tl.dot`` needs 16):
  more programs, fewer bytes each, the next weight tile loaded while the current one is multiplied;
- ``pdl``: programmatic dependent launch (Hopper): each kernel lets the next one start early
  (``gdc_launch_dependents``) and waits for its predecessor's writes (``gdc_wait``) only before it reads the
  activations, so the next weights' first tiles stream while the previous kernel finishes.

Each configuration is timed as a graph of 12 GEMMs of one shape with distinct weights (more than L2 holds), the
GPU time per GEMM; the best per family then runs the model's whole chain (4 layers x 4 launches, 487 MB) as one
graph, every weight from DRAM as in the model.

    python benchmarks/decode_gemv_variants.py [--rows 8] [--out OUT.json]

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from decode_gemm_variants import graph_ms  # the script beside this one

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # a Triton without grid dependency control: the pdl variants are skipped
    gdc_launch_dependents = gdc_wait = None

SHAPES = {  # name: (K, N) of the weight as the backend's kernels read it, [N, K]
    "q/k/v 2048x3072": (2048, 3072),
    "o_proj 2048x2048": (2048, 2048),
    "gate/up 2048x16384": (2048, 16384),
    "down 8192x2048": (8192, 2048),
}
LAYER = list(SHAPES)


@triton.jit
def dot_gemv(x_ptr, w_ptr, o_ptr, M, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    """The skinny seed's structure: a 16-row tile, BLOCK_N columns a program, tl.dot over K steps."""
    if PDL:
        gdc_launch_dependents()
    rm = tl.arange(0, 16)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    if PDL:
        gdc_wait()
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(
            x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0
        )
        w = tl.load(
            w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0
        )
        acc += tl.dot(x, w)
    tl.store(
        o_ptr + rm[:, None] * N + rn[None, :],
        acc.to(o_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@triton.jit
def fma_gemv(
    x_ptr,
    w_ptr,
    o_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    """A GEMV without tl.dot: BLOCK_N (2-8) columns a program, products summed over K in fp32; the next
    weight tile is loaded before the current one is used, and the first before waiting on the predecessor."""
    if PDL:
        gdc_launch_dependents()
    rm = tl.arange(0, BLOCK_M)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    w = tl.load(w_ptr + rn[:, None] * K + rk[None, :], mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
    if PDL:
        gdc_wait()
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(
            x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0
        )
        rk_next = rk + BLOCK_K
        w_next = tl.load(
            w_ptr + rn[:, None] * K + rk_next[None, :],
            mask=(rn[:, None] < N) & (rk_next[None, :] < K),
            other=0.0,
        )
        acc += tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
        w = w_next
    tl.store(
        o_ptr + rm[:, None] * N + rn[None, :],
        acc.to(o_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def launcher(family, cfg, pdl):
    """A call ``run(x, w, out)`` of one family's kernel at one configuration."""
    bn, bk, warps, stages = cfg

    def run(x, w, out):
        m, k = x.shape
        n = w.shape[0]
        grid = (triton.cdiv(n, bn),)
        options = dict(num_warps=warps, num_stages=stages, **({"launch_pdl": True} if pdl else {}))
        if family == "dot":
            dot_gemv[grid](x, w, out, m, n, k, BLOCK_N=bn, BLOCK_K=bk, PDL=pdl, **options)
        else:
            fma_gemv[grid](
                x,
                w,
                out,
                m,
                n,
                k,
                BLOCK_M=triton.next_power_of_2(m),
                BLOCK_N=bn,
                BLOCK_K=bk,
                PDL=pdl,
                **options,
            )
        return out

    return run


def cublas(x, w, out):
    return torch.mm(x, w.t(), out=out)


def rel_err(got, x, w):
    ref = F.linear(x.double(), w.double())
    return ((got.double() - ref).norm() / ref.norm()).item()


GRIDS = {
    "dot": list(itertools.product((16, 32), (128, 256, 512), (2, 4), (3, 4, 5))),
    "fma": list(itertools.product((2, 4, 8), (128, 256, 512), (2, 4, 8), (1,))),
}


def sweep(name, k, n, rows, dtype, pdl_ok):
    """Per GEMM GPU time of cuBLAS and of every configuration, as 12 distinct weights in one graph."""
    x = torch.randn(rows, k, dtype=dtype, device="cuda")
    ws = [torch.randn(n, k, dtype=dtype, device="cuda") / k**0.5 for _ in range(12)]
    outs = [torch.empty(rows, n, dtype=dtype, device="cuda") for _ in ws]
    per = lambda run: (
        statistics.median(graph_ms([lambda w=w, o=o: run(x, w, o) for w, o in zip(ws, outs)], replays=30))
        / len(ws)
    )  # noqa: E731
    result = {"k": k, "n": n, "cublas_us": per(cublas) * 1e3, "families": {}}
    for family, grid in GRIDS.items():
        rows_out = []
        for cfg in grid:
            run = launcher(family, cfg, False)
            try:
                err = rel_err(run(x, ws[0], outs[0]), x, ws[0])
            except Exception as exc:  # noqa: BLE001 - a configuration that does not compile is skipped
                rows_out.append({"cfg": cfg, "error": f"{type(exc).__name__}: {str(exc)[:80]}"})
                continue
            rows_out.append({"cfg": cfg, "us": per(run) * 1e3, "rel_err": err})
        timed = sorted((r for r in rows_out if "us" in r and r["rel_err"] < 1e-2), key=lambda r: r["us"])
        best = timed[0] if timed else None
        entry = {"best": best, "top3": timed[:3], "errors": [r for r in rows_out if "error" in r][:3]}
        if best and pdl_ok:
            run = launcher(family, best["cfg"], True)
            entry["best_pdl_us"] = per(run) * 1e3
            entry["best_pdl_rel_err"] = rel_err(run(x, ws[0], outs[0]), x, ws[0])
        result["families"][family] = entry
    gbps = lambda us: (n * k * 2) / us / 1e3  # noqa: E731
    line = f"{name:20} cuBLAS {result['cublas_us']:6.2f} us ({gbps(result['cublas_us']):5.0f} GB/s)"
    for family, entry in result["families"].items():
        if entry["best"]:
            line += f" | {family} {entry['best']['us']:6.2f} us {entry['best']['cfg']}"
            if "best_pdl_us" in entry:
                line += f" pdl {entry['best_pdl_us']:6.2f}"
    print(line, flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    dtype, rows = torch.bfloat16, args.rows
    pdl_ok = gdc_wait is not None and torch.cuda.get_device_capability()[0] >= 9
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
        "pdl": pdl_ok,
        "shapes": {name: sweep(name, k, n, rows, dtype, pdl_ok) for name, (k, n) in SHAPES.items()},
    }
    # The whole chain: 4 layers of the backend's four launches, each weight distinct (487 MB).
    weights = [
        torch.randn(SHAPES[s][1], SHAPES[s][0], dtype=dtype, device="cuda") / 50
        for _ in range(4)
        for s in LAYER
    ]
    xs = {k: torch.randn(rows, k, dtype=dtype, device="cuda") for k in (2048, 8192)}
    outs = [torch.empty(rows, w.shape[0], dtype=dtype, device="cuda") for w in weights]
    names = [s for _ in range(4) for s in LAYER]

    def chain(pick):
        runs = [pick(s) for s in names]
        calls = [
            lambda w=w, o=o, run=run: run(xs[w.shape[1]], w, o) for w, o, run in zip(weights, outs, runs)
        ]
        return graph_ms(calls, replays=40, rounds=3)

    def best_of(family, pdl):
        def pick(shape):
            entry = report["shapes"][shape]["families"][family]
            return launcher(family, entry["best"]["cfg"], pdl)

        return pick

    def fastest(pdl):
        def pick(shape):
            fams = report["shapes"][shape]["families"]
            family = min(fams, key=lambda f: fams[f]["best"]["us"] if fams[f]["best"] else float("inf"))
            return launcher(family, fams[family]["best"]["cfg"], pdl)

        return pick

    variants = {
        "cublas": lambda s: cublas,
        "dot": best_of("dot", False),
        "fma": best_of("fma", False),
        "fastest": fastest(False),
    }
    if pdl_ok:
        variants.update(
            {"dot pdl": best_of("dot", True), "fma pdl": best_of("fma", True), "fastest pdl": fastest(True)}
        )
    variants["cublas again"] = lambda s: cublas
    mb = sum(w.numel() * 2 for w in weights) / 1e6
    report["chain_mb"] = mb
    report["chain_ms"] = {}
    print(
        f"\nchain of {len(weights)} launches, {mb:.0f} MB of weights, one CUDA graph, median per round (ms):"
    )
    for label, pick in variants.items():
        values = chain(pick)
        report["chain_ms"][label] = values
        worst = max(rel_err(o, xs[w.shape[1]], w) for w, o in zip(weights, outs))
        print(
            f"  {label:13} {' '.join(f'{v:.4f}' for v in values)}  -> {mb / statistics.median(values) / 1e3:.2f} TB/s  err {worst:.1e}",
            flush=True,
        )
    base = statistics.median(report["chain_ms"]["cublas"] + report["chain_ms"]["cublas again"])
    for label, values in report["chain_ms"].items():
        print(f"  {label:13} x{base / statistics.median(values):.3f} vs cuBLAS")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
