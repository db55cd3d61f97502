"""Where a persistent batched GEMM loses to cuBLAS on this GPU: the suite's bmm (16 x 2048 x 2048 x 1024, fp16)
timed with ``triton.testing.do_bench`` (median, L2 flushed), GPU only. An exploration beside ksmith's own
protocol (docs/benchmarks.md §5c), to say which structure the ``persistent`` edit should reach for.

* ``cublas``                    -- ``torch.bmm`` (what eager and torch.compile call);
* ``tile_per_program@cfg``      -- TMA loads, one program per (tile, batch), 2-D descriptors per program;
* ``batch_order_2d[P]@cfg``     -- persistent, P programs per SM looping over every batch's tiles in batch
  order, the 2-D descriptors made again for each tile (what the ``persistent`` edit writes today: a descriptor
  whose base reads the batch cannot leave the loop);
* ``batch_order_3d[P]@cfg``     -- the same loop with one 3-D descriptor per operand ([batch, M, K] and
  [batch, K, N], a block of one batch) made once per program, outside the loop.

    python benchmarks/bmm_headroom.py --out bmm_headroom.json
"""

from __future__ import annotations

import argparse
import json
import sys

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def _tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BATCH, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PERSISTENT: tl.constexpr, DESC_3D: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    if PERSISTENT:
        start = tl.program_id(0)
        stop = tiles * BATCH
        step = tl.num_programs(0)
    else:
        start = tl.program_id(1) * tiles + tl.program_id(0)
        stop = start + 1
        step = 1
    if DESC_3D:
        a3 = tl.make_tensor_descriptor(a_ptr, shape=[BATCH, M, K], strides=[M * K, K, 1],
                                       block_shape=[1, BLOCK_M, BLOCK_K])
        b3 = tl.make_tensor_descriptor(b_ptr, shape=[BATCH, K, N], strides=[K * N, N, 1],
                                       block_shape=[1, BLOCK_K, BLOCK_N])
    for work in tl.range(start, stop, step):
        batch = work // tiles
        pid_m, pid_n = _tile(work % tiles, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        if DESC_3D:
            for k in range(0, K, BLOCK_K):
                a = a3.load([batch, pid_m * BLOCK_M, k]).reshape(BLOCK_M, BLOCK_K)
                b = b3.load([batch, k, pid_n * BLOCK_N]).reshape(BLOCK_K, BLOCK_N)
                acc = tl.dot(a, b, acc)
        else:
            base = batch.to(tl.int64)
            a2 = tl.make_tensor_descriptor(a_ptr + base * M * K, shape=[M, K], strides=[K, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
            b2 = tl.make_tensor_descriptor(b_ptr + base * K * N, shape=[K, N], strides=[N, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
            for k in range(0, K, BLOCK_K):
                acc = tl.dot(a2.load([pid_m * BLOCK_M, k]), b2.load([k, pid_n * BLOCK_N]), acc)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + batch.to(tl.int64) * M * N + offs_m[:, None] * N + offs_n[None, :]
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import importlib.util
    import tempfile
    from pathlib import Path

    import torch
    import triton
    from triton.testing import do_bench

    triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    tmp = Path(tempfile.mkdtemp())
    (tmp / "bmm_kernels.py").write_text(KERNELS)
    spec = importlib.util.spec_from_file_location("bmm_kernels", tmp / "bmm_kernels.py")
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)

    batch, M, N, K = 16, 2048, 2048, 1024
    torch.manual_seed(0)
    A = torch.randn(batch, M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(batch, K, N, device="cuda", dtype=torch.float16)
    expected = torch.bmm(A, B)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results: dict[str, dict] = {}

    def measure(label: str, fn) -> None:
        try:
            out = fn()
            error = (out.float() - expected.float()).abs().max().item()
            ms = do_bench(fn, warmup=50, rep=300)
            results[label] = {"ms": ms, "max_error": error}
        except Exception as exc:  # a variant that fails is recorded, not hidden
            results[label] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        print(label, results[label], flush=True)

    measure("cublas", lambda: torch.bmm(A, B))

    def launch(config, grid, persistent, desc_3d):
        bm, bn, bk, warps, stages = config
        C = torch.empty(batch, M, N, device="cuda", dtype=torch.float16)
        kernels.bmm_kernel[grid](
            A, B, C, M, N, K, batch, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
            PERSISTENT=persistent, DESC_3D=desc_3d, num_warps=warps, num_stages=stages,
        )  # fmt: skip
        return C

    for config in ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 8, 3)):
        bm, bn, bk, warps, stages = config
        cfg = f"{bm}x{bn}x{bk}_{warps}w_{stages}s"
        tiles = (batch, triton.cdiv(M, bm) * triton.cdiv(N, bn))
        measure(f"tile_per_program@{cfg}", lambda c=config, t=tiles: launch(c, t[::-1], False, False))
        measure(f"tile_per_program_3d@{cfg}", lambda c=config, t=tiles: launch(c, t[::-1], False, True))
        for per_sm in (1, 2):
            grid = (min(tiles[0] * tiles[1], per_sm * sms),)
            measure(f"batch_order_2d[{per_sm}]@{cfg}", lambda c=config, g=grid: launch(c, g, True, False))
            measure(f"batch_order_3d[{per_sm}]@{cfg}", lambda c=config, g=grid: launch(c, g, True, True))

    env = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    Path(args.out).write_text(json.dumps({"env": env, "results": results}, indent=1))
    base = results["cublas"]["ms"]
    print(f"\n{env}\n| variant | ms | vs cuBLAS ({base:.4f} ms) |\n|---|---|---|")
    for label, r in results.items():
        cell = f"{r['ms']:.4f} | {base / r['ms']:.3f}x" if "ms" in r else f"{r['error'][:60]} | -"
        print(f"| {label} | {cell} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
