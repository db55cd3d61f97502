"""Row sums of the suite's sum_reduction (16384 rows of 4096 fp32) in several structures, timed beside
torch.compile before any becomes an edit: one row a program looped in blocks (the seed), the row length as a
compile-time constant (as Inductor writes it), the whole row in one block, and several rows a program as a 2-D
tile. Inductor's kernel is written to OUT/inductor_row_sum.py.

    python benchmarks/row_reduction_variants.py [--out OUT]

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import argparse
import sys

import torch
import triton
import triton.language as tl

ROWS, COLS = 16384, 4096


@triton.jit
def looped(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def looped_fixed(x_ptr, out_ptr, n_cols: tl.constexpr, stride, BLOCK: tl.constexpr, HINT: tl.constexpr):
    # The row length a compile-time constant, as Inductor writes it: masks fold, the trip count is known.
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        if HINT:
            acc += tl.load(
                x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_first"
            )
        else:
            acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def tiled(x_ptr, out_ptr, n_rows, n_cols, stride, ROWS_PER: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS_PER + tl.arange(0, ROWS_PER)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([ROWS_PER, BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        mask = (rows[:, None] < n_rows) & (c[None, :] < n_cols)
        acc += tl.load(x_ptr + rows[:, None].to(tl.int64) * stride + c[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1), mask=rows < n_rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("row_reduction_variants.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    x = torch.randn(ROWS, COLS, device="cuda")
    want = x.sum(-1)
    floor_ms = ROWS * COLS * 4 / 3.35e12 * 1e3

    def timed(fn):
        return min(triton.testing.do_bench(fn, warmup=50, rep=400) for _ in range(2))

    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(lambda t: t.sum(-1))
    _, codes = run_and_get_code(compiled, x)
    if args.out:
        with open(f"{args.out}/inductor_row_sum.py", "w") as f:
            f.write("\n\n".join(codes))
    rows = [("torch.compile", timed(lambda: compiled(x)), True)]

    def run_looped(block, warps):
        def run():
            out = torch.empty(ROWS, device="cuda")
            looped[(ROWS,)](x, out, COLS, x.stride(0), BLOCK=block, num_warps=warps)
            return out

        return run

    def run_tiled(per, block, warps):
        def run():
            out = torch.empty(ROWS, device="cuda")
            tiled[(triton.cdiv(ROWS, per),)](
                x, out, ROWS, COLS, x.stride(0), ROWS_PER=per, BLOCK=block, num_warps=warps
            )
            return out

        return run

    def run_fixed(block, warps, hint):
        def run():
            out = torch.empty(ROWS, device="cuda")
            looped_fixed[(ROWS,)](x, out, COLS, x.stride(0), BLOCK=block, HINT=hint, num_warps=warps)
            return out

        return run

    variants = [("seed (1024, 4 warps)", run_looped(1024, 4))]
    for b, w in [(1024, 4), (2048, 8), (4096, 8), (4096, 16)]:
        for hint in (False, True):
            label = f"row length constexpr, block {b}, {w} warps" + (", evict_first" if hint else "")
            variants.append((label, run_fixed(b, w, hint)))
    variants += [
        (f"one row, block {b}, {w} warps", run_looped(b, w))
        for b, w in [(2048, 4), (4096, 4), (4096, 8), (4096, 16)]
    ]
    for per, block, warps in [
        (2, 2048, 4),
        (2, 4096, 8),
        (4, 1024, 4),
        (4, 2048, 8),
        (8, 512, 4),
        (8, 1024, 8),
        (16, 256, 4),
        (16, 512, 8),
    ]:
        variants.append((f"{per} rows a program, block {block}, {warps} warps", run_tiled(per, block, warps)))
    for label, fn in variants:
        ok = bool(torch.allclose(fn(), want, atol=1e-3, rtol=1e-4))
        rows.append((label, timed(fn), ok))
        print(label, rows[-1][1], ok, flush=True)
    print(
        f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; roofline {floor_ms:.4f} ms"
    )
    print("| variant | ms | roofline | vs torch.compile | correct |\n|---|---|---|---|---|")
    for label, ms, ok in rows:
        print(f"| {label} | {ms:.4f} | {floor_ms / ms:.2f} | {rows[0][1] / ms:.3f}x | {ok} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
