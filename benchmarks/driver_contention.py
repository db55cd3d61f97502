"""Do driver calls on one GPU slow down when another GPU of the host makes them too? (GPU only, two GPUs;
docs/benchmarks.md §8g.)

With the timing's memory reserved, the ``ray`` executor's exclusive timing hold no longer grows from one GPU to
two, but the shared holds do: the candidate's trials (which copy each output into a fresh block and make an
IPC handle for it), the comparison beside them, the spare worker's warm-up. Those make driver calls; the
GPU work in them is the same per GPU. This times the calls alone: ``--procs`` processes per GPU, each looping
for ``--seconds`` over a device allocation (``cudaMalloc`` through torch's allocator, its cache emptied each
time) and its release (``cudaFree``), then making IPC handles (``cudaIpcGetMemHandle``) for up to
``IPC_LOOPS`` fresh blocks; first with GPU 0 alone busy, then with GPUs 0 and 1 busy at once. Two last
configurations put beside GPU 0's processes one that makes and destroys CUDA contexts on GPU 0 or 1, one after
another (what each evaluation's fresh worker does once). If the driver served each GPU on its own, GPU 0's
latencies would not change.

    python benchmarks/driver_contention.py --out driver.json [--procs 8] [--seconds 8] [--mb 64]
        [--configs gpu0_alone gpu0_and_gpu1 gpu0_alone_again gpu0_with_gpu0_contexts gpu0_with_gpu1_contexts]

Prints a table last: per configuration and GPU, loops per second (allocations, or contexts) and the median,
90th and 99th percentile and the largest time of each call in microseconds.
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


def worker(gpu: int, seconds: float, size: int, start_at: float, queue, stop=None) -> None:
    """Allocations and frees for ``seconds``, then IPC handles; ``stop`` (an event) ends both early."""
    import torch

    torch.cuda.set_device(gpu)
    torch.empty(1, device="cuda")  # the context, outside the measured loops
    times = {p: [] for p in PARTS}
    while time.time() < start_at:
        time.sleep(0.001)
    # Allocation and release: the allocator's cache emptied each time, so each is a driver call.
    end = time.perf_counter() + seconds
    loops = 0
    while time.perf_counter() < end and not _stopped(stop):
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
    while time.perf_counter() < end and len(kept) < IPC_LOOPS and not _stopped(stop):
        x = torch.empty(size, dtype=torch.uint8, device="cuda")
        t0 = time.perf_counter()
        x.untyped_storage()._share_cuda_()
        times["ipc_handle"].append((time.perf_counter() - t0) * 1e6)
        kept.append(x)
    queue.put({"gpu": gpu, "loops": loops, "seconds": seconds, "times": times})
    del kept


def _stopped(stop) -> bool:
    return stop is not None and stop.is_set()


def context_worker(gpu: int, seconds: float, size: int, start_at: float, queue, stop=None) -> None:
    """CUDA contexts made and destroyed on ``gpu`` one after another, as fast as the driver allows: the
    primary context, as torch makes it (``cuDevicePrimaryCtxRetain``), then ``cuDevicePrimaryCtxReset``."""
    try:
        _contexts(gpu, seconds, start_at, queue, stop)
    except Exception as exc:  # noqa: BLE001 - said in the report, not a hung queue
        queue.put(
            {"gpu": gpu, "loops": 0, "seconds": seconds, "times": {}, "role": "contexts", "error": repr(exc)}
        )


def _contexts(gpu: int, seconds: float, start_at: float, queue, stop=None) -> None:
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    device, context = ctypes.c_int(), ctypes.c_void_p()

    def ok(result: int, call: str) -> None:
        if result != 0:
            raise RuntimeError(f"{call} returned CUDA error {result}")

    ok(cuda.cuInit(0), "cuInit")
    ok(cuda.cuDeviceGet(ctypes.byref(device), gpu), "cuDeviceGet")
    times = {"context_create": [], "context_destroy": []}
    while time.time() < start_at:
        time.sleep(0.001)
    end = time.perf_counter() + seconds
    made = 0
    while time.perf_counter() < end and not _stopped(stop):
        t0 = time.perf_counter()
        ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
        ok(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        t1 = time.perf_counter()
        ok(cuda.cuDevicePrimaryCtxReset_v2(device), "cuDevicePrimaryCtxReset_v2")
        t2 = time.perf_counter()
        times["context_create"].append((t1 - t0) * 1e6)
        times["context_destroy"].append((t2 - t1) * 1e6)
        made += 1
    queue.put({"gpu": gpu, "loops": made, "seconds": seconds, "times": times, "role": "contexts"})


def run(gpus: list[int], procs: int, seconds: float, size: int, contexts_on: dict[int, int] | None = None):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 15.0  # every process has its context before any starts
    workers = [
        ctx.Process(target=worker, args=(g, seconds, size, start_at, queue))
        for g in gpus
        for _ in range(procs)
    ]
    workers += [
        ctx.Process(target=context_worker, args=(g, seconds, size, start_at, queue))
        for g, n in (contexts_on or {}).items()
        for _ in range(n)
    ]
    for w in workers:
        w.start()
    results = [queue.get(timeout=3 * seconds + 120) for _ in workers]
    for w in workers:
        w.join()
    return results


def summary(results: list[dict]) -> dict:
    out = {}
    for role in ("memory", "contexts"):
        for gpu in sorted({r["gpu"] for r in results if r.get("role", "memory") == role}):
            rows = [r for r in results if r["gpu"] == gpu and r.get("role", "memory") == role]
            entry = {"loops_per_s": round(sum(r["loops"] / r["seconds"] for r in rows), 1)}
            errors = [r["error"] for r in rows if r.get("error")]
            if errors:
                entry["errors"] = errors
            for part in sorted({p for r in rows for p in r["times"]}):
                values = sorted(v for r in rows for v in r["times"].get(part, []))
                if not values:
                    continue
                entry[part] = {
                    "median_us": round(statistics.median(values), 1),
                    "p90_us": round(values[int(0.9 * (len(values) - 1))], 1),
                    "p99_us": round(values[int(0.99 * (len(values) - 1))], 1),
                    "max_us": round(values[-1], 1),
                }
            out[str(gpu) if role == "memory" else f"{gpu} (contexts)"] = entry
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--configs", nargs="*", help="which configurations, in order (default: all)")
    args = parser.parse_args()
    size = args.mb * 2**20
    configs = {
        "gpu0_alone": ([0], {}),
        "gpu0_and_gpu1": ([0, 1], {}),
        "gpu0_alone_again": ([0], {}),
        # GPU 0's allocations while one process makes and destroys contexts on GPU 0, or on GPU 1.
        "gpu0_with_gpu0_contexts": ([0], {0: 1}),
        "gpu0_with_gpu1_contexts": ([0], {1: 1}),
    }
    report = {"procs_per_gpu": args.procs, "seconds": args.seconds, "mb": args.mb, "configs": {}}
    for name in args.configs or list(configs):
        gpus, contexts_on = configs[name]
        report["configs"][name] = summary(run(gpus, args.procs, args.seconds, size, contexts_on))
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    print(f"\n{'config':24s} {'GPU':>12s}  loops/s  part: median / p90 / p99 / max us")
    for name, per_gpu in report["configs"].items():
        for gpu, e in per_gpu.items():
            cells = "  ".join(
                f"{p} {v['median_us']:.0f}/{v['p90_us']:.0f}/{v['p99_us']:.0f}/{v['max_us']:.0f}"
                for p, v in e.items()
                if isinstance(v, dict)
            )
            print(f"{name:24s} {gpu:>12s}  {e['loops_per_s']:7.1f}  {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
