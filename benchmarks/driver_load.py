"""Background load on one GPU, to run beside another benchmark (GPU only; docs/benchmarks.md §8h, §8j).

Each mode is one thing a second GPU's evaluations bring to the host, on its own:

``--mode contexts``: one process making and destroying CUDA contexts on ``--gpu`` one after another, as each
evaluation's fresh worker does once; ``--mode alloc``: ``--procs`` processes allocating, sharing (IPC handles)
and freeing device memory there, as the trials and comparisons do (the workers are ``driver_contention.py``'s);
``--mode idle``: ``--procs`` processes that each make a context and a ``--mb`` block there and then only wait,
as the live workers and reference processes of another GPU do between their calls; ``--mode kernels``:
``--procs`` processes launching small copies and synchronising, as the other GPU's trials and timed loops keep
it busy. This runs them for ``--seconds``, or for as long as the process ``--while-pid`` lives, and prints how
many loops each mode made and at what rate. The load must cover the other benchmark's measured phase: a fixed
``--seconds`` shorter than the benchmark's start-up ends before it (docs/benchmarks.md §8h), so tie it to the
benchmark's process:

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


def idle_worker(gpu: int, seconds: float, size: int, start_at: float, queue, stop) -> None:
    """A context and a block on ``gpu``, then nothing until ``stop`` (or ``seconds``)."""
    try:
        import torch

        torch.cuda.set_device(gpu)
        block = torch.empty(size, dtype=torch.uint8, device="cuda").fill_(1)
        torch.cuda.synchronize()
        stop.wait(seconds)
        del block
        queue.put({"gpu": gpu, "loops": 0, "role": "idle"})
    except Exception as exc:  # noqa: BLE001 - said in the report, not a hung queue
        queue.put({"gpu": gpu, "loops": 0, "role": "idle", "error": repr(exc)})


def kernels_worker(gpu: int, seconds: float, size: int, start_at: float, queue, stop) -> None:
    """Copies of a ``size``-byte block on ``gpu``, eight launches then a synchronise, until ``stop``."""
    try:
        import torch

        torch.cuda.set_device(gpu)
        src = torch.empty(size, dtype=torch.uint8, device="cuda").fill_(1)
        dst = torch.empty_like(src)
        torch.cuda.synchronize()
        while time.time() < start_at:
            time.sleep(0.001)
        end = time.perf_counter() + seconds
        loops = 0
        while time.perf_counter() < end and not stop.is_set():
            for _ in range(8):
                dst.copy_(src)
            torch.cuda.synchronize()
            loops += 1
        queue.put({"gpu": gpu, "loops": loops, "role": "kernels"})
    except Exception as exc:  # noqa: BLE001
        queue.put({"gpu": gpu, "loops": 0, "role": "kernels", "error": repr(exc)})


TARGETS = {"contexts": context_worker, "alloc": worker, "idle": idle_worker, "kernels": kernels_worker}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=1)
    parser.add_argument("--mode", choices=tuple(TARGETS), default="contexts")
    parser.add_argument("--procs", type=int, default=8, help="processes (one for contexts)")
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--while-pid", type=int, default=None, help="load until this process has exited")
    args = parser.parse_args()
    if args.while_pid is not None:
        args.seconds = 24 * 3600.0  # the children's own limit; the watched process ends the load
    ctx = mp.get_context("spawn")
    queue, stop = ctx.Queue(), ctx.Event()
    procs = 1 if args.mode == "contexts" else args.procs
    start_at = time.time() + 2.0
    children = [
        ctx.Process(
            target=TARGETS[args.mode], args=(args.gpu, args.seconds, args.mb * 2**20, start_at, queue, stop)
        )
        for _ in range(procs)
    ]
    for child in children:
        child.start()
    if args.while_pid is not None:
        while _alive(args.while_pid):
            time.sleep(0.5)
        stop.set()
    results = [queue.get(timeout=300) for _ in children]
    elapsed = time.time() - start_at
    for child in children:
        child.join()
    loops = sum(r["loops"] for r in results)
    errors = [r["error"] for r in results if "error" in r]
    print(
        f"driver load {args.mode} on GPU {args.gpu}, {procs} process(es): {loops} loops in {elapsed:.0f} s "
        f"({loops / max(elapsed, 1e-9):.1f} a second) {errors or ''}"
    )
    return 0 if not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
