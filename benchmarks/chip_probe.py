"""Why does a cuBLAS GEMM take ~3 % longer on one H100 than on another? (issue 21; GPU only)

docs/benchmarks.md section 1d: on two fresh H100s the suite's Triton seeds timed within 0.3 %, but the cuBLAS
kernel behind eager and torch.compile of matmul, matmul_bias_relu and bmm took 0.1864 ms on one and 0.1809 ms
on the other, with the SM clock at its maximum. cuBLAS's Hopper GEMMs (``nvjet_sm90_..._2x1_...``) launch
thread-block clusters, and a cluster runs inside one GPC (graphics processing cluster). Which SMs a chip has
enabled, and so how many SMs each of its GPCs holds, differs from chip to chip of one product (132 of 144 on
an H100 SXM). This probe records, on the machine it runs on:

- the chip: name, UUID, serial, VBIOS, power limit and maximum SM clock;
- its GPC layout, two ways: how many clusters of 1-16 CTAs (one per SM) can be resident at once (the driver's
  occupancy query; a layout's fingerprint), and the SM groups seen sharing a cluster of eight (``%smid`` of
  every CTA of many clusters, joined into groups: each group is a GPC);
- the suite's matmul and bmm timed with ksmith's own timing loop, eager (cuBLAS) beside the shipped seed (a
  Triton GEMM without clusters), in interleaved blocks, with ``nvidia-smi`` sampling the SM clock and power.

Run it on several freshly started machines of one kind and put their outputs side by side:

    python benchmarks/chip_probe.py --out probe.json
    python benchmarks/chip_probe.py --compare probe_a.json probe_b.json ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
IDENTITY = "name,uuid,serial,pci.bus_id,vbios_version,power.limit,clocks.max.sm,clocks.max.mem"
PROBLEMS = ("matmul", "bmm")


def identity() -> dict[str, str]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={IDENTITY}", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return dict(zip(IDENTITY.split(","), (v.strip() for v in out.split(","))))


def cluster_occupancy() -> dict[str, Any]:
    """Clusters of each size resident at once, one CTA per SM (the driver's count for this chip)."""
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import driver

    @triton.jit
    def nothing(x_ptr):
        tl.store(x_ptr, 0)

    x = torch.zeros(1, device="cuda")
    kernel = nothing[(1,)](x)
    query = getattr(driver.active.utils, "cuOccupancyMaxActiveClusters", None)
    if query is None:
        return {"error": "this Triton has no cuOccupancyMaxActiveClusters"}
    counts = {}
    # Shared memory past half an SM's (228 KB on an H100) keeps one CTA per SM, so a count is of whole SMs.
    shared = 160 * 1024
    for size in (1, 2, 4, 8, 16):
        try:
            counts[str(size)] = query(kernel.function, shared, size)
        except Exception as exc:  # noqa: BLE001 - a size the driver refuses is recorded, not fatal
            counts[str(size)] = f"{type(exc).__name__}: {exc}"[:80]
    return counts


def sm_groups(clusters: int = 20000) -> dict[str, Any]:
    """SMs seen together in a cluster of eight CTAs, joined into groups (each a GPC)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def where(out_ptr, BLOCK: tl.constexpr):
        # With num_ctas=8 a program is a cluster of eight CTAs and a tensor is split between them: each CTA
        # writes its eighth of the block with the %smid of the SM it runs on. (A cluster of two always lands on
        # the two SMs of one TPC, so it shows TPCs, not GPCs.)
        offs = tl.arange(0, BLOCK)
        smid = tl.inline_asm_elementwise(
            "mov.u32 $0, %smid;", "=r,r", [offs], dtype=tl.int32, is_pure=False, pack=1
        )
        tl.store(out_ptr + tl.program_id(0) * BLOCK + offs, smid)

    block = 1024
    out = torch.full((clusters, block), -1, dtype=torch.int32, device="cuda")
    try:
        where[(clusters,)](out, BLOCK=block, num_ctas=8, num_warps=4)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a Triton that cannot launch clusters leaves this unknown
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}
    pairs = [sorted(set(row)) for row in out.tolist()]
    spread = sum(len(p) > 1 for p in pairs)
    pairs = [(p[0], q) for p in pairs for q in p[1:]] or [(-1, -1)]
    parent: dict[int, int] = {}

    def find(a: int) -> int:
        while parent.setdefault(a, a) != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    bad = 0
    for a, b in pairs:
        if a < 0 or b < 0:
            bad += 1
            continue
        parent[find(a)] = find(b)
    groups: dict[int, list[int]] = {}
    for sm in parent:
        groups.setdefault(find(sm), []).append(sm)
    sizes = sorted((len(g) for g in groups.values()), reverse=True)
    return {
        "clusters_on_several_sms": spread,
        "sms_seen": len(parent),
        "unwritten_pairs": bad,
        "gpc_sizes": sizes,
        "gpcs": sorted(sorted(g) for g in groups.values()),
    }


def memory_and_math(reps: int = 200, rounds: int = 7) -> dict[str, Any]:
    """Where a chip can differ besides its clock: DRAM bandwidth (a 1 GiB copy), L2 bandwidth (an 8 MiB copy,
    resident), and tensor-core math with operands that stay in L2 (a 2048-cube fp16 GEMM, cuBLAS). Median of
    ``rounds`` rounds, each the mean of ``reps`` back-to-back calls between CUDA events."""
    import torch

    def timed(fn) -> list[float]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(20):
            fn()
        out = []
        for _ in range(rounds):
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / reps)
        return out

    result: dict[str, Any] = {}
    for label, nbytes in (("dram_copy", 2**30), ("l2_copy", 8 * 2**20)):
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        ms = timed(lambda s=src, d=dst: d.copy_(s))
        result[label] = {
            "ms": statistics.median(ms),
            "gbps": 2 * nbytes / statistics.median(ms) / 1e6,
            "rounds": ms,
        }
        del src, dst
    a = torch.randn(2048, 2048, dtype=torch.float16, device="cuda")
    b = torch.randn(2048, 2048, dtype=torch.float16, device="cuda")
    ms = timed(lambda: a @ b)
    result["l2_gemm"] = {
        "ms": statistics.median(ms),
        "tflops": 2 * 2048**3 / statistics.median(ms) / 1e9,
        "rounds": ms,
    }
    return result


def time_problems(blocks: int, trials: int) -> dict[str, Any]:
    import torch
    from reference_stability import PROBLEMS as PROBLEM_DIR
    from reference_stability import ClockSampler, kernels_of, load_module

    from ksmith_triton.child_common import make_inputs, make_model
    from ksmith_triton.timing import reference_timers, time_calls

    sampler = ClockSampler()
    timers = reference_timers("cuda")
    result: dict[str, Any] = {}
    try:
        for name in PROBLEMS:
            path = next(PROBLEM_DIR.rglob(f"{name}.py"))
            problem = load_module(path, f"problem_{name}")
            seed = load_module(path.with_name(f"{name}.seed.py"), f"seed_{name}")
            variants = {
                "eager": make_model(problem.Model, problem, 1234, "cuda"),
                "seed": make_model(seed.ModelNew, problem, 1234, "cuda"),
            }
            inputs = [make_inputs(problem, s, "cuda") for s in (11, 12, 13)]
            row: dict[str, Any] = {"kernels": {k: kernels_of(v, inputs[0]) for k, v in variants.items()}}
            for variant in variants:
                row[variant] = []
            for _ in range(blocks):
                for variant, fn in variants.items():
                    sampler.mark()
                    with torch.no_grad():
                        timed = time_calls("cuda", fn, inputs, timers, trials, 10)
                    row[variant].append(
                        {"median_ms": statistics.median(timed.samples_ms), **sampler.window()}
                    )
            for variant in variants:
                medians = [b["median_ms"] for b in row[variant]]
                row[f"{variant}_ms"] = statistics.median(medians)
                row[f"{variant}_spread"] = max(medians) / min(medians) - 1
            result[name] = row
            del variants, inputs
            torch.cuda.empty_cache()
    finally:
        sampler.close()
    return result


def compare(paths: list[str]) -> None:
    probes = [json.loads(Path(p).read_text()) for p in paths]
    print(f"{'machine':<10}{'uuid':<14}{'clusters of 2/4/8/16':<22}{'GPC sizes':<44}", end="")
    for name in PROBLEMS:
        print(f"{name + ' eager':>13}{name + ' seed':>12}", end="")
    print(f"{'SM MHz':>8}{'W':>6}{'DRAM GB/s':>11}{'L2 GB/s':>9}{'GEMM TF':>9}")
    for path, probe in zip(paths, probes):
        occ = probe["occupancy"]
        occ_s = "/".join(str(occ.get(s, "?")) for s in ("2", "4", "8", "16"))
        sizes = probe["sm_groups"].get("gpc_sizes", probe["sm_groups"].get("error", "?"))
        print(
            f"{Path(path).stem[:9]:<10}{probe['identity']['uuid'][4:16]:<14}{occ_s:<22}{str(sizes)[:43]:<44}",
            end="",
        )
        clocks, watts = [], []
        for name in PROBLEMS:
            row = probe["timing"][name]
            print(f"{row['eager_ms']:>13.4f}{row['seed_ms']:>12.4f}", end="")
            clocks += [b["sm_mhz"] for b in row["eager"] if b["sm_mhz"]]
            watts += [b["power_w"] for b in row["eager"] if b["power_w"]]
        print(
            f"{statistics.fmean(clocks) if clocks else 0:>8.0f}{statistics.fmean(watts) if watts else 0:>6.0f}",
            end="",
        )
        mm = probe.get("memory_and_math")
        if mm:
            print(
                f"{mm['dram_copy']['gbps']:>11.0f}{mm['l2_copy']['gbps']:>9.0f}{mm['l2_gemm']['tflops']:>9.1f}",
                end="",
            )
        print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--blocks", type=int, default=9)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--compare", nargs="+", default=None, help="probe outputs to put side by side")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare)
        return 0
    import torch
    import triton

    probe = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "identity": identity(),
        "occupancy": cluster_occupancy(),
        "sm_groups": sm_groups(),
        "memory_and_math": memory_and_math(),
    }
    print(json.dumps({k: probe[k] for k in ("identity", "occupancy")}))
    print("GPC sizes:", probe["sm_groups"].get("gpc_sizes", probe["sm_groups"]))
    mm = probe["memory_and_math"]
    print(
        f"DRAM copy {mm['dram_copy']['gbps']:.0f} GB/s, L2 copy {mm['l2_copy']['gbps']:.0f} GB/s, "
        f"2048-cube GEMM {mm['l2_gemm']['tflops']:.1f} TFLOP/s"
    )
    probe["timing"] = time_problems(args.blocks, args.trials)
    for name, row in probe["timing"].items():
        print(
            f"{name}: eager {row['eager_ms']:.4f} ms (±{row['eager_spread']:.2%}) seed {row['seed_ms']:.4f} ms "
            f"(±{row['seed_spread']:.2%}); kernels {row['kernels']['eager'][:2]}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(probe, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
