"""Background driver load on one GPU, to run beside another benchmark (GPU only; docs/benchmarks.md §8h).

``--mode contexts``: one process making and destroying CUDA contexts on ``--gpu`` one after another, as each
evaluation's fresh worker does once; ``--mode alloc``: ``--procs`` processes allocating, sharing (IPC handles)
and freeing device memory there, as the trials and comparisons do. The workers are ``driver_contention.py``'s;
this only runs them for ``--seconds`` and prints how many loops each made.

    python benchmarks/driver_load.py --gpu 1 --mode contexts --seconds 150 &
    python benchmarks/ray_scaling.py --configs ray1 ...
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver_contention import context_worker, worker  # noqa: E402 - the script beside this one


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=1)
    parser.add_argument("--mode", choices=("contexts", "alloc"), default="contexts")
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--mb", type=int, default=64)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    target, procs = (context_worker, 1) if args.mode == "contexts" else (worker, args.procs)
    start_at = time.time() + 2.0
    children = [
        ctx.Process(target=target, args=(args.gpu, args.seconds, args.mb * 2**20, start_at, queue))
        for _ in range(procs)
    ]
    for child in children:
        child.start()
    results = [queue.get(timeout=args.seconds + 120) for _ in children]
    for child in children:
        child.join()
    loops = [r["loops"] for r in results]
    errors = [r["error"] for r in results if "error" in r]
    print(
        f"driver load {args.mode} on GPU {args.gpu}: {sum(loops)} loops in {args.seconds:.0f} s {errors or ''}"
    )
    return 0 if not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
