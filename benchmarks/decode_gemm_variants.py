"""Decode-shaped GEMMs (a few rows times a weight): cuBLAS beside a skinny Triton kernel, measured before any
of it goes into ksmith's seeds.

At a decode step a Llama-style layer multiplies 8 rows by each of its weights; the step streams every weight
from DRAM once, so each GEMM is a memory-bound read of its weight. This script times, per weight shape of the
model benchmarked in docs/benchmarks.md section 11 (hidden 2048, intermediate 8192, 4 KV heads of 128):

- ``F.linear`` (cuBLAS, what Inductor calls), and a sweep of the skinny kernel's configurations (output
  columns per program, K step, K slices added atomically, warps, stages), each call's GPU time with the L2
  flushed before it and the launch hidden behind a spin (as ksmith's own timing loop does);
- the whole step's GEMM chain (4 layers x 7 weights, 486 MB) replayed as one CUDA graph, cuBLAS vs the best
  configuration per shape: the model's memory state, where no weight is in L2 when it is read.

    python benchmarks/decode_gemm_variants.py [--rows 8] [--out OUT]

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

SHAPES = {  # name: (K, N) of a weight stored as nn.Linear does, [N, K]
    "q_proj/o_proj 2048x2048": (2048, 2048),
    "k_proj/v_proj 2048x512": (2048, 512),
    "gate/up 2048x8192": (2048, 8192),
    "down 8192x2048": (8192, 2048),
}
CHAIN = [
    "q_proj/o_proj 2048x2048",
    "k_proj/v_proj 2048x512",
    "k_proj/v_proj 2048x512",
    "q_proj/o_proj 2048x2048",
    "gate/up 2048x8192",
    "gate/up 2048x8192",
    "down 8192x2048",
]


@triton.jit
def skinny_mm(
    x_ptr,
    w_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_om,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    span = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    k_start = pid_k * span
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, tl.minimum(k_start + span, K), BLOCK_K):
        offs_k = k + tl.arange(0, BLOCK_K)
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
            mask=(offs_m[:, None] < M) & (offs_k[None, :] < K),
            other=0.0,
        )
        w = tl.load(
            w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :],
            mask=(offs_n[:, None] < N) & (offs_k[None, :] < K),
            other=0.0,
        )
        acc += tl.dot(x, tl.trans(w))
    out = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K == 1:
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(out, acc.to(out_ptr.dtype.element_ty), mask=mask, sem="relaxed")


def launcher(cfg):
    bn, bk, split, warps, stages = cfg

    def run(x, w, out):
        m, k = x.shape
        n = w.shape[0]
        if split > 1:
            out.zero_()
        skinny_mm[(triton.cdiv(n, bn), split)](
            x,
            w,
            out,
            m,
            n,
            k,
            x.stride(0),
            w.stride(0),
            out.stride(0),
            BLOCK_M=16,
            BLOCK_N=bn,
            BLOCK_K=bk,
            SPLIT_K=split,
            num_warps=warps,
            num_stages=stages,
        )
        return out

    return run


def gpu_ms(fn, calls=60):
    """Median GPU time of one call, the L2 flushed before it and its launch hidden behind a spin."""
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5):
        fn()
    samples = []
    for _ in range(calls):
        flush.zero_()
        torch.cuda._sleep(40_000)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples), (max(samples) - min(samples))


def graph_ms(calls, replays=40, rounds=3):
    """Median GPU time of one replay of ``calls`` captured as a CUDA graph, per round."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    result = []
    for _ in range(rounds):
        samples = []
        for _ in range(replays):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        result.append(statistics.median(samples))
    return result


def chain_ms(weights, x_by_k, call, replays=40, rounds=3):
    """The GEMM chain of a decode step as one CUDA graph; median replay time of each round."""
    outs = [
        torch.empty(x_by_k[w.shape[1]].shape[0], w.shape[0], dtype=w.dtype, device="cuda") for w in weights
    ]
    calls = [lambda w=w, o=o: call(w)(x_by_k[w.shape[1]], w, o) for w, o in zip(weights, outs)]
    return graph_ms(calls, replays, rounds), outs


def sweep_shape(name, k, n, rows, dtype, grid):
    """cuBLAS and every configuration of the skinny kernel on one weight shape; the best first."""
    x = torch.randn(rows, k, dtype=dtype, device="cuda")
    w = torch.randn(n, k, dtype=dtype, device="cuda") / k**0.5
    ref = F.linear(x.double(), w.double())
    out = torch.empty(rows, n, dtype=dtype, device="cuda")
    cublas, cublas_spread = gpu_ms(lambda: F.linear(x, w))
    rows_out = []

    def measure(cfg):
        run = launcher(cfg)
        try:
            got = run(x, w, out).double()
        except Exception as exc:  # noqa: BLE001 - a configuration that does not compile is skipped
            return {"cfg": cfg, "error": type(exc).__name__}
        err = ((got - ref).norm() / ref.norm()).item()
        ms, spread = gpu_ms(lambda: run(x, w, out))
        return {"cfg": cfg, "ms": ms, "spread": spread, "rel_err": err}

    for cfg in grid:
        rows_out.append(measure(cfg))
    timed = sorted((r for r in rows_out if "ms" in r and r["rel_err"] < 1e-2), key=lambda r: r["ms"])
    for r in timed[:4]:  # the four best, at other warps and depths
        bn, bk, split, _, _ = r["cfg"]
        for warps, stages in itertools.product((2, 4, 8), (2, 3, 4, 5, 6)):
            cfg = (bn, bk, split, warps, stages)
            if all(cfg != q["cfg"] for q in rows_out):
                rows_out.append(measure(cfg))
    timed = sorted((r for r in rows_out if "ms" in r and r["rel_err"] < 1e-2), key=lambda r: r["ms"])
    top = timed[0]
    gbps = lambda ms: (n * k * 2 + rows * k * 2 + rows * n * 2) / ms / 1e6  # noqa: E731
    result = {
        "k": k,
        "n": n,
        "cublas_ms": cublas,
        "cublas_spread": cublas_spread,
        "cublas_gbps": gbps(cublas),
        "best": top,
        "best_gbps": gbps(top["ms"]),
        "top5": timed[:5],
        "cublas_rel_err": ((F.linear(x, w).double() - ref).norm() / ref.norm()).item(),
    }
    print(
        f"{name:26} cuBLAS {cublas * 1e3:7.2f} us ({gbps(cublas):6.0f} GB/s)  skinny {top['ms'] * 1e3:7.2f} us "
        f"({gbps(top['ms']):6.0f} GB/s) cfg={top['cfg']} err={top['rel_err']:.1e}  x{cublas / top['ms']:.2f}",
        flush=True,
    )
    return result


def script_args(check: bool = False) -> argparse.Namespace:
    """The decode exploration scripts' common options: ``--rows``, ``--out`` and, where the script has one,
    ``--check`` (its kernels on the CPU under ``TRITON_INTERPRET=1``)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--out", default=None)
    if check:
        parser.add_argument(
            "--check", action="store_true", help="the kernels on the CPU (TRITON_INTERPRET=1)"
        )
    return parser.parse_args()


def report_header(rows: int) -> dict:
    """What every report of these scripts starts with: the GPU, the versions, the date and the rows."""
    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }


def write_report(report: dict, out: str | None) -> None:
    if out:
        with open(out, "w") as fh:
            json.dump(report, fh, indent=1, default=str)


def main() -> int:
    args = script_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16
    rows = args.rows
    report = {**report_header(rows), "shapes": {}}
    grid = list(itertools.product((16, 32, 64, 128), (128, 256, 512), (1, 2, 4, 8), (4,), (3, 4)))
    best = {}
    for name, (k, n) in SHAPES.items():
        report["shapes"][name] = sweep_shape(name, k, n, rows, dtype, grid)
        best[name] = report["shapes"][name]["best"]["cfg"]
    # The model's memory state: 4 layers x 7 weights, each read once per step.
    weights = [
        torch.randn(SHAPES[s][1], SHAPES[s][0], dtype=dtype, device="cuda") / 50
        for _ in range(4)
        for s in CHAIN
    ]
    x_by_k = {k: torch.randn(rows, k, dtype=dtype, device="cuda") for k in (2048, 8192)}
    shape_of = {v: s for s, v in SHAPES.items()}

    def cublas_call(w):
        return lambda x, w_, o: torch.mm(x, w_.t(), out=o)

    def skinny_call(w):
        return launcher(best[shape_of[(w.shape[1], w.shape[0])]])

    results = {}
    for label, call in (("cublas", cublas_call), ("skinny", skinny_call), ("cublas again", cublas_call)):
        results[label], outs = chain_ms(weights, x_by_k, call)
        if label == "skinny":
            worst = max(
                (
                    (o.double() - F.linear(x_by_k[w.shape[1]].double(), w.double())).norm()
                    / F.linear(x_by_k[w.shape[1]].double(), w.double()).norm()
                ).item()
                for w, o in zip(weights, outs)
            )
            report["chain_skinny_rel_err"] = worst
    report["chain_ms"] = results
    mb = sum(w.numel() * 2 for w in weights) / 1e6
    print(f"\nchain of {len(weights)} GEMMs, {mb:.0f} MB of weights, CUDA graph, median per round (ms):")
    for label, values in results.items():
        med = statistics.median(values)
        print(f"  {label:13} {' '.join(f'{v:.4f}' for v in values)}  -> {mb / med / 1e3:.2f} TB/s")
    print(
        f"  skinny vs cuBLAS: x{statistics.median(results['cublas'] + results['cublas again']) / statistics.median(results['skinny']):.3f}"
    )
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
