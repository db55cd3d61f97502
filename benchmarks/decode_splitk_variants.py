"""Split-K for the decode step's single projections + residual (issue 13; GPU, docs/benchmarks.md §11g).

At 8 rows the down projection (K 8192, N 2048) is the largest GEMM ksmith does not own: in the model cuBLAS runs
it as a split-K kernel and a reduce, 12.9 us a layer on an H200 (2.6 TB/s of weights), and Inductor adds the
residual in the next norm. ksmith's skinny seed, one program per 16 columns walking all of K, has 128 programs
for 132 SMs, each with a few tiles in flight. Split-K gives every column slice SPLIT programs, each walking
K / SPLIT, so more bytes are in flight at once; the partial sums must then be added, and the residual added
once, rounded as eager rounds (the product to the model's dtype, then the add).

Three structures, each with the residual add and eager's rounding, against cuBLAS (``mm``, and ``mm`` + add):

- ``skinny``: the seed's kernel, no split (the baseline the backend has);
- ``split_last``: one launch. Each program stores its fp32 partial tile in a workspace and counts itself in
  with an atomic (acquire-release); the program that counts last adds the partials in a fixed order, adds the
  residual and stores, then resets the counter for the next call. Deterministic: the same order every call;
- ``split_atomic``: fp32 atomics into a zeroed workspace, then a second kernel rounds and adds the residual
  (three launches with the zeroing: cuBLAS's structure).

Each configuration is timed as a graph of 12 GEMMs of one shape with distinct weights (more than L2 holds), the
GPU time per GEMM, as ``decode_gemv_variants.py`` does; every output is checked against float64 first.

    python benchmarks/decode_splitk_variants.py [--rows 8] [--out OUT.json]
    TRITON_INTERPRET=1 python benchmarks/decode_splitk_variants.py --check   # the kernels on the CPU

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import itertools
import statistics
import sys

import torch
import triton
import triton.language as tl
from decode_gemm_variants import (  # the script beside this one
    graph_ms,
    report_header,
    script_args,
    write_report,
)

SHAPES = {"down + residual": (8192, 2048), "o_proj + residual": (2048, 2048)}  # (K, N), weight stored [N, K]
ROWS = 16  # one tl.dot row tile holds every decode row (up to 16)


@triton.jit
def skinny(x_ptr, w_ptr, r_ptr, o_ptr, M, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out = round(x @ w^T) + r, one program per BLOCK_N columns over all of K (the seed's structure)."""
    rm = tl.arange(0, 16)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
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
    r = tl.load(r_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc.to(o_ptr.dtype.element_ty) + r, mask=mask)


@triton.jit
def _partial(x_ptr, w_ptr, rm, rn, M, N, K, k_begin, span, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The [16, BLOCK_N] fp32 product of columns ``rn`` over K in ``[k_begin, k_begin + span)``."""
    acc = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_begin, k_begin + span, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        in_k = rk < tl.minimum(k_begin + span, K)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & in_k[None, :], other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & in_k[:, None], other=0.0)
        acc += tl.dot(x, w)
    return acc


@triton.jit
def split_last(
    x_ptr, w_ptr, r_ptr, o_ptr, ws_ptr, count_ptr, M, N, K,
    SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """One launch: grid (column slices, SPLIT). The last program of a column slice to finish sums the slices'
    partials (in slice order), rounds, adds the residual and stores; ``count_ptr`` is left at zero."""
    pid_n, split = tl.program_id(0), tl.program_id(1)
    rm = tl.arange(0, 16)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    span = tl.cdiv(tl.cdiv(K, SPLIT), BLOCK_K) * BLOCK_K
    acc = _partial(x_ptr, w_ptr, rm, rn, M, N, K, split * span, span, BLOCK_N, BLOCK_K)
    tile = rm[:, None] * N + rn[None, :]  # the workspace is [SPLIT, 16, N] fp32
    tl.store(ws_ptr + split * 16 * N + tile, acc, mask=rn[None, :] < N)
    tl.debug_barrier()  # every thread's partial written before the count says so
    arrived = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel")
    if arrived == SPLIT - 1:
        total = tl.zeros((16, BLOCK_N), dtype=tl.float32)
        for i in tl.static_range(SPLIT):  # a fixed order: the same sum every call
            total += tl.load(
                ws_ptr + i * 16 * N + tile, mask=rn[None, :] < N, other=0.0, cache_modifier=".cg"
            )
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        r = tl.load(r_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
        tl.store(o_ptr + rm[:, None] * N + rn[None, :], total.to(o_ptr.dtype.element_ty) + r, mask=mask)
        tl.atomic_xchg(count_ptr + pid_n, 0)


@triton.jit
def split_atomic(
    x_ptr, w_ptr, ws_ptr, M, N, K, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr
):
    """Grid (column slices, SPLIT): each program adds its partial into the zeroed fp32 workspace [16, N]."""
    pid_n, split = tl.program_id(0), tl.program_id(1)
    rm = tl.arange(0, 16)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    span = tl.cdiv(tl.cdiv(K, SPLIT), BLOCK_K) * BLOCK_K
    acc = _partial(x_ptr, w_ptr, rm, rn, M, N, K, split * span, span, BLOCK_N, BLOCK_K)
    tl.atomic_add(ws_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def finish(ws_ptr, r_ptr, o_ptr, M, N, BLOCK: tl.constexpr):
    """out = round(ws) + r over the [M, N] output, flattened."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    r = tl.load(r_ptr + offs, mask=mask, other=0.0)
    y = tl.load(ws_ptr + offs, mask=mask, other=0.0).to(o_ptr.dtype.element_ty) + r
    tl.store(o_ptr + offs, y, mask=mask)


def launcher(family, cfg, n, device):
    """``run(x, w, r, out)`` for one configuration; the workspace and counters are made once, here."""
    if family == "skinny":
        bn, bk, warps, stages = cfg
        return lambda x, w, r, out: skinny[(triton.cdiv(n, bn),)](
            x,
            w,
            r,
            out,
            x.shape[0],
            n,
            x.shape[1],
            BLOCK_N=bn,
            BLOCK_K=bk,
            num_warps=warps,
            num_stages=stages,
        )
    split, bn, bk, warps, stages = cfg
    grid = (triton.cdiv(n, bn), split)
    if family == "split_last":
        ws = torch.empty(split, ROWS, n, dtype=torch.float32, device=device)
        counts = torch.zeros(triton.cdiv(n, bn), dtype=torch.int32, device=device)
        return lambda x, w, r, out: split_last[grid](
            x, w, r, out, ws, counts, x.shape[0], n, x.shape[1],
            SPLIT=split, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
        )  # fmt: skip
    ws = torch.empty(ROWS, n, dtype=torch.float32, device=device)

    def run(x, w, r, out):
        ws.zero_()
        split_atomic[grid](
            x, w, ws, x.shape[0], n, x.shape[1], SPLIT=split, BLOCK_N=bn, BLOCK_K=bk,
            num_warps=warps, num_stages=stages,
        )  # fmt: skip
        finish[(triton.cdiv(x.shape[0] * n, 1024),)](ws, r, out, x.shape[0], n, BLOCK=1024)

    return run


def reference(x, w, r):
    """Eager's rounding in float64: the product rounded to the model's dtype, then the residual added."""
    return ((x.double() @ w.double().t()).to(x.dtype).double() + r.double()).to(x.dtype)


def max_ulps_off(got, x, w, r):
    """How far ``got`` is from eager's result, in units of the output dtype's spacing at each value."""
    ref = reference(x, w, r).double()
    spacing = torch.finfo(got.dtype).eps * ref.abs().clamp_min(1.0)
    off = ((got.double() - ref).abs() / spacing).nan_to_num(nan=float("inf"))  # an unwritten output is NaN
    return off.max().item()


GRIDS = {
    "skinny": list(itertools.product((16, 32), (256, 512), (2, 4), (4, 5))),
    "split_last": list(itertools.product((2, 4, 8), (16, 32), (128, 256), (2, 4), (4,))),
    "split_atomic": list(itertools.product((2, 4, 8), (16, 32), (128, 256), (2, 4), (4,))),
}


def sweep(name, k, n, rows, dtype):
    """Per GEMM GPU time of cuBLAS and of every configuration, as 12 distinct weights in one graph."""
    x = torch.randn(rows, k, dtype=dtype, device="cuda")
    ws = [torch.randn(n, k, dtype=dtype, device="cuda") / k**0.5 for _ in range(12)]
    r = torch.randn(rows, n, dtype=dtype, device="cuda")
    outs = [torch.empty(rows, n, dtype=dtype, device="cuda") for _ in ws]

    def per(run):
        calls = [lambda w=w, o=o: run(x, w, r, o) for w, o in zip(ws, outs)]
        return statistics.median(graph_ms(calls, replays=30)) / len(ws) * 1e3

    result = {
        "k": k,
        "n": n,
        "cublas_mm_us": per(lambda x, w, r, o: torch.mm(x, w.t(), out=o)),
        "cublas_mm_add_us": per(lambda x, w, r, o: torch.add(torch.mm(x, w.t()), r, out=o)),
        "families": {},
    }
    for family, grid in GRIDS.items():
        rows_out = []
        for cfg in grid:
            try:
                run = launcher(family, cfg, n, "cuda")
                ulps = 0.0
                for _ in range(2):  # twice: a counter left wrong by the first call shows in the second
                    out = torch.full((rows, n), float("nan"), dtype=dtype, device="cuda")
                    run(x, ws[0], r, out)
                    ulps = max(ulps, max_ulps_off(out, x, ws[0], r))
            except Exception as exc:  # noqa: BLE001 - a configuration that does not compile is skipped
                rows_out.append({"cfg": cfg, "error": f"{type(exc).__name__}: {str(exc)[:80]}"})
                continue
            rows_out.append({"cfg": cfg, "us": per(run), "max_ulps": ulps})
        timed = sorted(
            (row for row in rows_out if "us" in row and row["max_ulps"] <= 2), key=lambda row: row["us"]
        )
        result["families"][family] = {
            "best": timed[0] if timed else None,
            "top3": timed[:3],
            "off_by_more_than_2_ulps": [row for row in rows_out if row.get("max_ulps", 0) > 2][:3],
            "errors": [row for row in rows_out if "error" in row][:3],
        }
    gbps = lambda us: n * k * 2 / us / 1e3  # noqa: E731
    line = f"{name:18} cuBLAS mm {result['cublas_mm_us']:6.2f} us ({gbps(result['cublas_mm_us']):5.0f} GB/s)"
    line += f", mm + add {result['cublas_mm_add_us']:6.2f}"
    for family, entry in result["families"].items():
        if entry["best"]:
            best = entry["best"]
            line += f" | {family} {best['us']:6.2f} us ({gbps(best['us']):5.0f} GB/s) {best['cfg']}"
    print(line, flush=True)
    return result


def check() -> int:
    """Every structure against eager's rounding on the CPU (``TRITON_INTERPRET=1``), at fp16 (numpy has no
    bfloat16), a ragged K and N, twice in a row (the counters must be reset)."""
    torch.manual_seed(0)
    worst = 0.0
    for k, n in ((1000, 72), (512, 64)):
        x = torch.randn(5, k, dtype=torch.float16)
        w = (torch.randn(n, k) / k**0.5).half()
        r = torch.randn(5, n, dtype=torch.float16)
        configs = [("skinny", (16, 64, 4, 2))] + [
            (family, (split, 16, 64, 4, 2)) for family in ("split_last", "split_atomic") for split in (2, 3)
        ]
        for family, cfg in configs:
            run = launcher(family, cfg, n, "cpu")
            for call in (1, 2):
                out = torch.full((5, n), float("nan"), dtype=torch.float16)  # nothing left from the last call
                run(x, w, r, out)
                ulps = max_ulps_off(out, x, w, r)
                worst = max(worst, ulps)
                print(f"{family:12} {cfg} K {k} N {n} call {call}: {ulps:.1f} ulps off eager at most")
    ok = worst <= 2
    print("check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main() -> int:
    args = script_args(check=True)
    if args.check:
        return check()
    torch.manual_seed(0)
    shapes = {name: sweep(name, k, n, args.rows, torch.bfloat16) for name, (k, n) in SHAPES.items()}
    write_report({**report_header(args.rows), "shapes": shapes}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
