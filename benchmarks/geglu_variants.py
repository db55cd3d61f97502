"""The suite's GeGLU (8192 rows of 2 x 4096 fp32) in several structures, timed beside torch.compile before any
becomes an edit: where the evolved kernel's last 5 % against Inductor goes.

- ``grid2d``: the seed's structure, a program per (row, column block), with the row on the grid's first axis
  (``rows_fast``: neighbouring programs read blocks a row apart, 32 KiB) or the column block on it
  (``cols_fast``: neighbouring programs read neighbouring blocks, as a flat loop would);
- ``flat``: one axis over the output's elements, the row and column recovered by ``//`` and ``%`` (Inductor's
  form), with the half's width a run-time value or a compile-time constant;
- torch.compile's kernel, whose source is written to OUT/inductor_geglu.py.

Each variant is checked against eager and timed with ``triton.testing.do_bench`` (median, L2 flushed) twice;
the table gives the lower median and the fraction of the memory roofline (the input read once, the output
written once, at the GPU's nominal bandwidth).

    python benchmarks/geglu_variants.py [--out OUT]

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

ROWS, HALF = 8192, 4096
NOMINAL_TBPS = {"H100": 3.35, "H200": 4.8}


@triton.jit
def grid2d(x_ptr, out_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr, COLS_FAST: tl.constexpr):
    if COLS_FAST:
        row = tl.program_id(1).to(tl.int64)
        block = tl.program_id(0)
    else:
        row = tl.program_id(0).to(tl.int64)
        block = tl.program_id(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate = tl.load(x_ptr + row * x_stride + cols, mask=mask)
    up = tl.load(x_ptr + row * x_stride + n_cols + cols, mask=mask)
    gelu = 0.5 * gate * (1.0 + tl.erf(gate * 0.7071067811865476))
    tl.store(out_ptr + row * out_stride + cols, gelu * up, mask=mask)


@triton.jit
def flat(x_ptr, out_ptr, numel, n_cols, BLOCK: tl.constexpr):
    index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = index < numel
    col = index % n_cols
    row = index // n_cols
    gate = tl.load(x_ptr + row * (2 * n_cols) + col, mask=mask)
    up = tl.load(x_ptr + row * (2 * n_cols) + n_cols + col, mask=mask)
    gelu = 0.5 * gate * (1.0 + tl.erf(gate * 0.7071067811865476))
    tl.store(out_ptr + index, gelu * up, mask=mask)


@triton.jit
def flat_fixed(x_ptr, out_ptr, numel: tl.constexpr, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = index < numel
    col = index % n_cols
    row = index // n_cols
    gate = tl.load(x_ptr + row * (2 * n_cols) + col, mask=mask)
    up = tl.load(x_ptr + row * (2 * n_cols) + n_cols + col, mask=mask)
    gelu = 0.5 * gate * (1.0 + tl.erf(gate * 0.7071067811865476))
    tl.store(out_ptr + index, gelu * up, mask=mask)


def variants(x):
    rows, n = x.shape[0], x.shape[1] // 2
    out = torch.empty(rows, n, device=x.device, dtype=x.dtype)

    def g2(block, warps, cols_fast):
        def run():
            blocks = triton.cdiv(n, block)
            grid = (blocks, rows) if cols_fast else (rows, blocks)
            grid2d[grid](
                x, out, n, x.stride(0), out.stride(0), BLOCK=block, COLS_FAST=cols_fast, num_warps=warps
            )
            return out

        return run

    def fl(block, warps, fixed):
        def run():
            numel = rows * n
            kernel = flat_fixed if fixed else flat
            kernel[(triton.cdiv(numel, block),)](x, out, numel, n, BLOCK=block, num_warps=warps)
            return out

        return run

    for cols_fast in (False, True):
        for block, warps in ((1024, 4), (1024, 8), (2048, 8), (4096, 16), (512, 4)):
            yield (
                f"grid2d {'cols_fast' if cols_fast else 'rows_fast'} {block}/{warps}",
                g2(block, warps, cols_fast),
            )
    for fixed in (False, True):
        for block, warps in ((1024, 4), (1024, 8), (2048, 8), (512, 4)):
            yield f"flat{' fixed' if fixed else ''} {block}/{warps}", fl(block, warps, fixed)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for the table (JSON) and Inductor's kernel source")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("geglu_variants.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    tbps = next((v for k, v in NOMINAL_TBPS.items() if k in name), 3.35)
    floor_ms = 3 * ROWS * HALF * 4 / (tbps * 1e12) * 1e3
    torch.manual_seed(0)
    x = torch.randn(ROWS, 2 * HALF, device="cuda")

    def eager(t):
        gate, up = t.chunk(2, dim=-1)
        return F.gelu(gate) * up

    want = eager(x)

    def timed(fn):
        return min(triton.testing.do_bench(fn, warmup=50, rep=400) for _ in range(2))

    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(eager)
    _, codes = run_and_get_code(compiled, x)
    if args.out:
        with open(f"{args.out}/inductor_geglu.py", "w") as f:
            f.write("\n\n".join(codes))
    rows = [{"variant": "torch.compile", "ms": timed(lambda: compiled(x)), "ok": True}]
    for label, fn in variants(x):
        try:
            ok = bool(torch.allclose(fn(), want, atol=1e-5, rtol=1e-5))
            rows.append({"variant": label, "ms": timed(fn), "ok": ok})
        except Exception as e:  # a configuration that does not compile is a row, not a stop
            rows.append({"variant": label, "ms": None, "ok": False, "error": str(e).splitlines()[0][:120]})
        print(json.dumps(rows[-1]), flush=True)
    compile_ms = rows[0]["ms"]
    print(f"\n{name}, torch {torch.__version__}, triton {triton.__version__}; roofline {floor_ms:.4f} ms")
    print("| variant | ms | roofline | vs torch.compile | correct |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r["ms"]:
            print(
                f"| {r['variant']} | {r['ms']:.4f} | {floor_ms / r['ms']:.2f} | {compile_ms / r['ms']:.3f}x "
                f"| {r['ok']} |"
            )
        else:
            print(f"| {r['variant']} | - | - | - | {r.get('error')} |")
    if args.out:
        with open(f"{args.out}/geglu_variants.json", "w") as f:
            json.dump(
                {"gpu": name, "torch": torch.__version__, "triton": triton.__version__, "rows": rows},
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
