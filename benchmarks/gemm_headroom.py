"""Where a tiled Triton matmul loses to cuBLAS on this GPU, and which structural change closes how much (GPU only).

For the suite's fp16 matmul (4096^3) this times, with ``triton.testing.do_bench`` (median, L2 flushed):

* ``cublas``           -- ``torch.matmul`` (what eager and torch.compile call for this problem);
* ``seed@<config>``    -- the shipped seed kernel at every config the ``gemm_config`` edit can propose
  (Inductor's mm template configs), i.e. the best the offline proposer's config jump can reach;
* ``no_k_mask@<best>`` -- the best config with the K-loop masks dropped (valid only when K % BLOCK_K == 0);
* ``tma@<cfg>``        -- the same tiling with TMA tensor descriptors (``tl.make_tensor_descriptor``);
* ``tma_ws@<cfg>``     -- TMA plus warp specialisation of the K loop (``tl.range(..., warp_specialize=True)``),
  where the installed Triton supports it;
* ``persistent[...]@<cfg>`` -- persistent forms: one program per SM looping over output tiles
  (``tl.range(pid, tiles, programs)``), with pointer or TMA loads, with the tile loop flattened into the K
  loop (``flatten=True``: the next tile's loads overlap this tile's epilogue) or not, warp-specialised or
  not, and the epilogue stored in two halves (``subtile``) or whole.

A variant that fails to compile is recorded with its error, not hidden. Prints a table last and writes JSON.

    python benchmarks/gemm_headroom.py --out gemm_headroom.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED = HERE.parent / "plugins" / "ksmith_problems" / "problems" / "matmul" / "matmul.seed.py"

TMA_KERNELS = """
import torch
import triton
import triton.language as tl


@triton.jit
def tma_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=WARP_SPECIALIZE):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


@triton.jit
def persistent_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr,
                      USE_TMA: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                      SUBTILE: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    tiles = num_pid_m * num_pid_n
    if USE_TMA:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
        if SUBTILE:
            c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                               block_shape=[BLOCK_M, BLOCK_N // 2])
        else:
            c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                               block_shape=[BLOCK_M, BLOCK_N])
    for pid in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
        pid_n = (pid % num_pid_in_group) // group_size_m
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        if USE_TMA:
            for k in range(0, tl.cdiv(K, BLOCK_K)):
                a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
                b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
                acc = tl.dot(a, b, acc)
            if SUBTILE:
                halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
                lo, hi = tl.split(halves)
                c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], lo.to(tl.float16))
                c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], hi.to(tl.float16))
            else:
                c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))
        else:
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            offs_k = tl.arange(0, BLOCK_K)
            a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
            for k in range(0, K, BLOCK_K):
                a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)
                b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0)
                acc = tl.dot(a, b, acc)
                a_ptrs += BLOCK_K
                b_ptrs += BLOCK_K * N
            c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]
            tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run_persistent(A, B, cfg, use_tma, flatten, warp_specialize, subtile):
    M, K = A.shape
    N = B.shape[1]
    C = torch.empty((M, N), device=A.device, dtype=A.dtype)
    bm, bn, bk, stages, warps = cfg
    sms = torch.cuda.get_device_properties(A.device).multi_processor_count
    programs = min(sms, triton.cdiv(M, bm) * triton.cdiv(N, bn))
    persistent_matmul[(programs,)](A, B, C, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                   PROGRAMS=programs, USE_TMA=use_tma, FLATTEN=flatten,
                                   WARP_SPECIALIZE=warp_specialize, SUBTILE=subtile, num_warps=warps,
                                   num_stages=stages)
    return C


def run(A, B, cfg, warp_specialize):
    M, K = A.shape
    N = B.shape[1]
    C = torch.empty((M, N), device=A.device, dtype=A.dtype)
    bm, bn, bk, stages, warps = cfg
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    tma_matmul[grid](A, B, C, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                     WARP_SPECIALIZE=warp_specialize, num_warps=warps, num_stages=stages)
    return C
"""


def _module(source: str, name: str, tmp: Path) -> Any:
    path = tmp / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()

    import torch
    import triton
    from triton.testing import do_bench

    from ksmith_core.environment import device_facts, versions
    from ksmith_mutate.edits import possible_edits
    from ksmith_mutate.gemm_configs import inductor_gemm_configs

    n = args.size
    torch.manual_seed(0)
    A = torch.randn(n, n, device="cuda", dtype=torch.float16)
    B = torch.randn(n, n, device="cuda", dtype=torch.float16)
    expected = torch.matmul(A, B)
    flops = 2 * n**3
    rows: list[dict[str, Any]] = []

    def measure(label: str, fn) -> float | None:
        try:
            out = fn()
            torch.cuda.synchronize()
            ok = torch.allclose(out.float(), expected.float(), atol=1e-1, rtol=1e-2)
            ms = do_bench(fn, warmup=50, rep=300)
            rows.append({"variant": label, "ms": ms, "tflops": flops / ms / 1e9, "correct": bool(ok)})
            print(f"{label:44s} {ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOP/s correct={ok}", flush=True)
            return ms
        except Exception as exc:  # a variant the installed Triton cannot build is a finding, not a crash
            rows.append({"variant": label, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            print(f"{label:44s} failed: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
            return None

    measure("cublas", lambda: torch.matmul(A, B))
    seed = SEED.read_text()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        seed_model = _module(seed, "seed", tmp).ModelNew()
        measure("seed@64x64x32,4w,3s", lambda: seed_model(A, B))
        best: tuple[float, tuple, str] | None = None
        for i, edit in enumerate(possible_edits(seed, ("gemm_config",))):
            cfg = tuple(edit.detail["config"])
            model = _module(edit.source, f"cfg{i}", tmp).ModelNew()
            ms = measure(f"seed@{cfg[0]}x{cfg[1]}x{cfg[2]},{cfg[4]}w,{cfg[3]}s", lambda m=model: m(A, B))
            if ms is not None and (best is None or ms < best[0]):
                best = (ms, cfg, edit.source)
        if best is not None:
            unmasked = (
                best[2]
                .replace(
                    "mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0",
                    "mask=offs_m[:, None] < M",
                )
                .replace(
                    "mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0",
                    "mask=offs_n[None, :] < N",
                )
            )
            model = _module(unmasked, "unmasked", tmp).ModelNew()
            cfg = best[1]
            measure(f"no_k_mask@{cfg[0]}x{cfg[1]}x{cfg[2]},{cfg[4]}w,{cfg[3]}s", lambda: model(A, B))

        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
        tma = _module(TMA_KERNELS, "tma", tmp)
        for cfg in [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 64, 3, 4), (256, 128, 64, 3, 8)]:
            label = f"{cfg[0]}x{cfg[1]}x{cfg[2]},{cfg[4]}w,{cfg[3]}s"
            measure(f"tma@{label}", lambda c=cfg: tma.run(A, B, c, False))
            measure(f"tma_ws@{label}", lambda c=cfg: tma.run(A, B, c, True))
        persistent_cfgs = [
            (128, 256, 64, 3, 8),
            (128, 256, 64, 4, 8),
            (128, 128, 64, 4, 8),
            (128, 128, 64, 3, 4),
            (256, 128, 64, 3, 8),
            (128, 128, 128, 3, 8),
        ]
        for cfg in persistent_cfgs:
            label = f"{cfg[0]}x{cfg[1]}x{cfg[2]},{cfg[4]}w,{cfg[3]}s"
            for use_tma, flatten, ws, subtile in [
                (False, False, False, False),
                (False, True, False, False),
                (True, False, False, False),
                (True, True, False, False),
                (True, True, False, True),
                (True, False, True, False),
                (True, True, True, True),
            ]:
                kind = (
                    "+".join(
                        name
                        for name, on in (("tma", use_tma), ("flat", flatten), ("ws", ws), ("sub", subtile))
                        if on
                    )
                    or "ptr"
                )
                measure(
                    f"persistent[{kind}]@{label}",
                    lambda c=cfg, t=use_tma, f=flatten, w=ws, s=subtile: tma.run_persistent(
                        A, B, c, t, f, w, s
                    ),
                )

    result = {
        "problem": f"matmul fp16 {n}^3",
        "versions": versions(),
        "device": device_facts("cuda"),
        "inductor_configs": [list(c) for c in inductor_gemm_configs()],
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=2, default=str))
    timed = sorted((r for r in rows if "ms" in r), key=lambda r: r["ms"])
    print("\nfastest first:")
    for r in timed[:16]:
        print(f"  {r['variant']:44s} {r['ms']:.4f} ms  {r['tflops']:.0f} TFLOP/s  correct={r['correct']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
