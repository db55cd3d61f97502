"""Background driver load on one GPU, to run beside another benchmark (GPU only; docs/benchmarks.md §8h).

``--mode contexts``: one process making and destroying CUDA contexts on ``--gpu`` one after another, as each
evaluation's fresh worker does once; ``--mode alloc``: ``--procs`` processes allocating, sharing (IPC handles)
and freeing device memory there, as the trials and comparisons do. The workers are ``driver_contention.py``'s;
this runs them for ``--seconds``, or for as long as the process ``--while-pid`` lives, and prints how many
loops each made. The load must cover the other benchmark's measured phase: a fixed ``--seconds`` shorter than
the benchmark's start-up ends before it (docs/benchmarks.md §8h), so tie it to the benchmark's process:

    python benchmarks/ray_scaling.py --configs ray1 ... & BENCH=$!
    python benchmarks/driver_load.py --gpu 1 --mode contexts --while-pid $BENCH
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver_contention import context_worker, worker  # noqa: E402 - the script beside this one


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs: an exited process its parent has not reaped yet (a zombie) has ended."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=1)
    parser.add_argument("--mode", choices=("contexts", "alloc"), default="contexts")
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--while-pid", type=int, default=None, help="load until this process has exited")
    args = parser.parse_args()
    if args.while_pid is not None:
        args.seconds = 24 * 3600.0  # the children's own limit; the watched process ends the load
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
    if args.while_pid is not None:
        started = time.time()
        while _alive(args.while_pid):
            time.sleep(0.5)
        for child in children:
            child.terminate()
            child.join()
        print(f"driver load {args.mode} on GPU {args.gpu}: stopped after {time.time() - started:.0f} s")
        return 0
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
