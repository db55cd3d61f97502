"""How long does the first launch of each of the harness's torch operations take in a fresh process, with the
host quiet and with CUDA contexts being made for another GPU? (GPU only, two GPUs; docs/benchmarks.md §8g.)

A candidate worker is a fresh process: the first time its trials copy, fill, compare or clone a tensor, torch's
kernel for it is loaded through the driver (CUDA loads modules lazily), and a driver call can wait behind a
context being made or destroyed for any GPU of the host (``driver_contention.py``). This starts ``--procs``
fresh processes one after another on GPU 0; each makes its context, then times each operation twice (the
first call includes the load, the second does not), synchronising after each. With ``contexts`` a process
makes and destroys contexts on GPU 1 meanwhile.

    python benchmarks/first_launch_probe.py --out first_launch.json [--procs 6]

Prints a table last: per configuration and operation, the median first and second call in ms.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time


def _ops(torch):
    x = torch.empty(4096, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(1)
    host = torch.empty(4096).pin_memory()
    where = torch.arange(0, 4096, 8, device="cuda")
    other = torch.empty(4096, device="cuda")  # a second tensor: equal(x, x) may be answered without a kernel
    return {
        "empty (allocation)": lambda: torch.empty(8 << 20, dtype=torch.uint8, device="cuda"),
        "randn": lambda: torch.randn(4096, device="cuda", generator=g),
        "fill_ nan": lambda: x.fill_(float("nan")),
        "copy_": lambda: x.copy_(torch.ones(4096, device="cuda")),
        "clone": lambda: x.clone(),
        "equal": lambda: torch.equal(x, other),
        "take": lambda: torch.take(x, where),
        "to pinned": lambda: host.copy_(x, non_blocking=True),
        "sum item": lambda: x.sum().item(),
    }


def probe(queue) -> None:
    import torch

    t0 = time.perf_counter()
    torch.cuda.set_device(0)
    torch.cuda.init()
    torch.empty(1, device="cuda")
    times = {"context": [(time.perf_counter() - t0) * 1e3, 0.0]}
    for name, op in _ops(torch).items():
        pair = []
        for _ in range(2):
            start = time.perf_counter()
            op()
            torch.cuda.synchronize()
            pair.append((time.perf_counter() - start) * 1e3)
        times[name] = pair
    queue.put(times)


def churn(stop, made) -> None:
    """Contexts made and destroyed on GPU 1 until ``stop``; ``made`` counts those that succeeded (a failure
    ends the loop with ``made`` negative)."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), 1):
        made.value = -1
        return
    while not stop.is_set():
        if (
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
            or cuda.cuCtxSetCurrent(context)
            or cuda.cuDevicePrimaryCtxReset_v2(device)
        ):
            made.value = -1
            return
        made.value += 1


def run(procs: int, contexts: bool) -> dict:
    ctx = mp.get_context("spawn")
    stop, made = ctx.Event(), ctx.Value("i", 0)
    churner = ctx.Process(target=churn, args=(stop, made)) if contexts else None
    if churner is not None:
        churner.start()
        time.sleep(2.0)
    started, made_before = time.perf_counter(), made.value  # the head start's contexts not counted
    results = []
    for _ in range(procs):
        queue = ctx.Queue()
        p = ctx.Process(target=probe, args=(queue,))
        p.start()
        results.append(queue.get(timeout=300))
        p.join()
    seconds = time.perf_counter() - started
    made_during = made.value - made_before if made.value >= 0 else -1  # -1: the churner failed
    if churner is not None:
        stop.set()
        churner.join(timeout=30)
    summary = {
        name: {
            "first_ms": round(statistics.median(r[name][0] for r in results), 3),
            "second_ms": round(statistics.median(r[name][1] for r in results), 3),
            "first_max_ms": round(max(r[name][0] for r in results), 3),
        }
        for name in results[0]
    }
    return {"processes": results, "summary": summary, "contexts_per_s": round(made_during / seconds, 2)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--procs", type=int, default=6)
    args = parser.parse_args()
    report = {}
    for name, contexts in (("quiet", False), ("contexts on GPU 1", True)):
        report[name] = run(args.procs, contexts)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    print(f"\n{'operation':20s}" + "".join(f"  {n:>30s}" for n in report))
    print(f"{'':20s}" + "".join(f"  {'first (max) / second ms':>30s}" for _ in report))
    for op in report["quiet"]["summary"]:
        cells = "".join(
            f"  {r['summary'][op]['first_ms']:>12.3f} ({r['summary'][op]['first_max_ms']:8.3f}) / "
            f"{r['summary'][op]['second_ms']:6.3f}"
            for r in report.values()
        )
        print(f"{op:20s}{cells}")
    print("contexts a second on GPU 1:", report["contexts on GPU 1"]["contexts_per_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
