"""How fast one process's host work runs while N others run too (no GPU needed; docs/benchmarks.md §8h).

With two GPUs the ``ray`` executor's shared holds grow and so does the host time inside the exclusive timing
hold (the timed loop's sample check and launches, which make no driver calls), while the GPU's own time per
call does not. This asks whether the host's cores themselves slow down as more of them are busy (SMT siblings
sharing a core, a lower turbo clock with more cores active, a shared memory bus): ``N`` processes each run the
same fixed pure-Python workload (interpreter-bound, like the harness's Python) and the same small-array NumPy
workload (cache-bound) for ``--seconds``, for each ``N`` in ``--procs``, and the median rate per process is
compared with one process alone. Prints the host's CPU topology as ``lscpu`` gives it.

    python benchmarks/host_cpu_scaling.py [--procs 1 2 4 8 12 16 24 32] [--seconds 3] [--out cpu.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import time


def python_work() -> None:
    total = 0
    for i in range(20000):
        total += (i * 7) % 13
    d = {str(k): k for k in range(200)}
    sum(d.values())


def numpy_work(arrays) -> None:
    a, b = arrays
    (a * b).sum()


def worker(kind: str, seconds: float, start_at: float, queue) -> None:
    import numpy as np

    arrays = (np.random.rand(64 * 1024), np.random.rand(64 * 1024))  # 1 MB: fits a core's L2
    step = python_work if kind == "python" else (lambda: numpy_work(arrays))
    while time.time() < start_at:
        time.sleep(0.001)
    loops, end = 0, start_at + seconds
    while time.time() < end:
        step()
        loops += 1
    queue.put(loops / seconds)


def rates(kind: str, procs: int, seconds: float) -> list[float]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 1.5  # every process started before any begins
    workers = [ctx.Process(target=worker, args=(kind, seconds, start_at, queue)) for _ in range(procs)]
    for w in workers:
        w.start()
    out = [queue.get(timeout=seconds + 60) for _ in workers]
    for w in workers:
        w.join()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    try:
        topology = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        topology = ""
    keep = ("Model name", "Thread(s) per core", "Core(s) per socket", "Socket(s)", "CPU(s)", "CPU max MHz")
    lines = [line for line in topology.splitlines() if line.split(":")[0].strip() in keep]
    print("\n".join(lines) or "lscpu: not available")
    print(f"usable CPUs: {len(os.sched_getaffinity(0))}")
    report = {"lscpu": lines, "usable_cpus": len(os.sched_getaffinity(0)), "rows": []}
    print(f"{'kind':8s} {'procs':>5s} {'rate/proc':>10s} {'vs alone':>8s} {'min':>8s}")
    for kind in ("python", "numpy"):
        alone = None
        for n in args.procs:
            got = rates(kind, n, args.seconds)
            median = statistics.median(got)
            alone = alone or median
            row = {"kind": kind, "procs": n, "median": median, "min": min(got), "max": max(got)}
            report["rows"].append(row)
            print(f"{kind:8s} {n:5d} {median:10.1f} {median / alone:8.3f} {min(got) / alone:8.3f}")
            if args.out:
                with open(args.out, "w") as fh:
                    json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
