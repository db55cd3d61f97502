"""Do driver calls on one GPU slow down when another GPU of the host makes them too? (GPU only, two GPUs;
docs/benchmarks.md §8g.)

With the timing's memory reserved, the ``ray`` executor's exclusive timing hold no longer grows from one GPU to
two, but the shared holds do: the candidate's trials (which copy each output into a fresh block and make an
IPC handle for it), the comparison beside them, the spare worker's warm-up. Those make driver calls; the
GPU work in them is the same per GPU. This times the calls alone: ``--procs`` processes per GPU, each looping
for ``--seconds`` over a device allocation (``cudaMalloc`` through torch's allocator, its cache emptied each
time) and its release (``cudaFree``), then making IPC handles (``cudaIpcGetMemHandle``) for up to
``IPC_LOOPS`` fresh blocks; first with GPU 0 alone busy, then with GPUs 0 and 1 busy at once. If the driver served each GPU on its own, GPU 0's latencies would
not change.

    python benchmarks/driver_contention.py --out driver.json [--procs 8] [--seconds 8] [--mb 64]

Prints a table last: per configuration and GPU, allocation loops per second and the median and 90th percentile of each
call in microseconds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time

PARTS = ("malloc", "ipc_handle", "free")


IPC_LOOPS = 200  # blocks shared per process: torch may keep a shared block until a receiver lets it go


def worker(gpu: int, seconds: float, size: int, start_at: float, queue) -> None:
    import torch

    torch.cuda.set_device(gpu)
    torch.empty(1, device="cuda")  # the context, outside the measured loops
    times = {p: [] for p in PARTS}
    while time.time() < start_at:
        time.sleep(0.001)
    # Allocation and release: the allocator's cache emptied each time, so each is a driver call.
    end = time.perf_counter() + seconds
    loops = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        x = torch.empty(size, dtype=torch.uint8, device="cuda")
        t1 = time.perf_counter()
        del x
        torch.cuda.empty_cache()
        t2 = time.perf_counter()
        times["malloc"].append((t1 - t0) * 1e6)
        times["free"].append((t2 - t1) * 1e6)
        loops += 1
    # IPC handles, each for a fresh block kept until the end (the same time window in every process).
    kept = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end and len(kept) < IPC_LOOPS:
        x = torch.empty(size, dtype=torch.uint8, device="cuda")
        t0 = time.perf_counter()
        x.untyped_storage()._share_cuda_()
        times["ipc_handle"].append((time.perf_counter() - t0) * 1e6)
        kept.append(x)
    queue.put({"gpu": gpu, "loops": loops, "seconds": seconds, "times": times})
    del kept


def run(gpus: list[int], procs: int, seconds: float, size: int) -> list[dict]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 15.0  # every process has its context before any starts
    workers = [
        ctx.Process(target=worker, args=(g, seconds, size, start_at, queue))
        for g in gpus
        for _ in range(procs)
    ]
    for w in workers:
        w.start()
    results = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    return results


def summary(results: list[dict]) -> dict:
    out = {}
    for gpu in sorted({r["gpu"] for r in results}):
        rows = [r for r in results if r["gpu"] == gpu]
        entry = {"loops_per_s": round(sum(r["loops"] / r["seconds"] for r in rows), 1)}
        for part in PARTS:
            values = sorted(v for r in rows for v in r["times"][part])
            entry[part] = {
                "median_us": round(statistics.median(values), 1),
                "p90_us": round(values[int(0.9 * (len(values) - 1))], 1),
            }
        out[str(gpu)] = entry
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--mb", type=int, default=64)
    args = parser.parse_args()
    size = args.mb * 2**20
    configs = {"gpu0_alone": [0], "gpu0_and_gpu1": [0, 1], "gpu0_alone_again": [0]}
    report = {"procs_per_gpu": args.procs, "seconds": args.seconds, "mb": args.mb, "configs": {}}
    for name, gpus in configs.items():
        report["configs"][name] = summary(run(gpus, args.procs, args.seconds, size))
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    print(f"\n{'config':18s} GPU  loops/s  " + "  ".join(f"{p} med/p90 us" for p in PARTS))
    for name, per_gpu in report["configs"].items():
        for gpu, e in per_gpu.items():
            cells = "  ".join(f"{e[p]['median_us']:8.1f}/{e[p]['p90_us']:8.1f}" for p in PARTS)
            print(f"{name:18s} {gpu:>3s}  {e['loops_per_s']:7.1f}  {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
