"""Where a timed call's host time goes when the host is busy: ksmith's own GPU timing loop, with its after-call
check, alone and beside the kinds of work other evaluations do while it holds the GPU.

The evaluator's throughput trace (docs/benchmarks.md §1b3) shows each timed call holding the GPU's exclusive
lock for about 2.6 ms, of which the GPU is busy for under 1 ms: the rest is host time -- staging inputs,
launching, waiting, checking samples. This runs ``timing.time_gpu`` with the real ``TimedCallCheck`` (its
reports serialised as they would be sent) on an elementwise kernel, and reports the loop's wall time per call
and its parts, in each of these conditions:

* ``idle``: nothing else runs;
* ``cpu``: one busy Python process per core (host CPU contention alone, no CUDA);
* ``contexts``: four processes creating CUDA contexts one after another, as spare workers do (the driver's
  locks, and the CPU that context creation takes);
* ``cpu+contexts``: both;
* any of these with ``+priority``: the loop's thread at niceness -10 (root or CAP_SYS_NICE);
* ``nicecpu`` and ``nicecontexts`` in place of ``cpu`` and ``contexts``: that work at niceness 19.

    python benchmarks/timing_host_interference.py --out interference.json

It runs against the timing loop of the installed ksmith, with or without the ``after_wait`` hook (the loop
before it had none), so the same script compares two versions of the loop.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BURN = "while True: pass"
CONTEXTS = """
import subprocess, sys
code = "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
while True:
    subprocess.run([sys.executable, "-c", code], check=False)
"""


def background(condition: str) -> list[subprocess.Popen]:
    """The processes of ``condition``'s parts: ``cpu`` and ``contexts`` as above; ``nicecpu`` and
    ``nicecontexts``: the same at niceness 19."""
    procs: list[subprocess.Popen] = []
    for part in condition.split("+"):
        nice = ["nice", "-n", "19"] if part.startswith("nice") else []
        if part.removeprefix("nice") == "cpu":
            procs += [
                subprocess.Popen([*nice, sys.executable, "-c", BURN]) for _ in range(os.cpu_count() or 1)
            ]
        elif part.removeprefix("nice") == "contexts":
            procs += [subprocess.Popen([*nice, sys.executable, "-c", CONTEXTS]) for _ in range(4)]
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()
    # The context loops' children outlive a killed parent for a moment: let them end.
    subprocess.run(["pkill", "-f", "torch.zeros\\(1, device='cuda'\\)"], check=False)
    time.sleep(1.0)


@contextlib.contextmanager
def raised_priority(step: int = 10):
    """This thread ``step`` below its niceness while the block runs (root or CAP_SYS_NICE)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, before - step)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


def measure(repeats: int, trials: int, numel: int, priority: bool = False) -> dict:
    import inspect

    import torch

    from ksmith_triton import timing
    from ksmith_triton.candidate_side import TimedCallCheck

    class Channel:  # what the worker's channel does with a report, short of writing it to the pipe
        def send(self, kind, **fields):
            json.dumps({"kind": kind, **fields})

    inputs = [torch.randn(numel, device="cuda") for _ in range(3)]
    timers = timing.reference_timers("cuda")
    per_call, parts = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(repeats):
            check = TimedCallCheck(Channel(), os.urandom, Path(scratch), False, trials, device="cuda")
            schedule = timing.Schedule(os.urandom, trials, 10)
            begin = time.perf_counter()
            hooks = {"before_wait": check.queue}
            if "after_wait" in inspect.signature(timing.time_gpu).parameters:
                hooks["after_wait"] = check.keep
            with raised_priority() if priority else contextlib.nullcontext():
                result = timing.time_gpu(
                    lambda x, y, z: (x + y) * z, [inputs], timers, schedule, check, **hooks
                )
            wall_ms = (time.perf_counter() - begin) * 1e3
            per_call.append(wall_ms / (len(result.samples_ms) + result.warmup))
            parts.append({**result.loop_ms, **{f"check_{k}": v for k, v in check.parts_ms().items()}})
            parts[-1]["calls"] = len(result.samples_ms)
            parts[-1]["gpu_ms_median"] = statistics.median(result.samples_ms)
            parts[-1]["prequeue_ms"] = result.prequeue_ms
            parts[-1]["exposed"] = result.exposed
    keys = sorted({k for p in parts for k in p})
    return {
        "wall_ms_per_call_median": round(statistics.median(per_call), 4),
        "wall_ms_per_call": [round(x, 4) for x in per_call],
        "median_parts": {k: round(statistics.median(p[k] for p in parts if k in p), 4) for k in keys},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--numel", type=int, default=16 * 2**20)
    parser.add_argument(
        "--conditions",
        nargs="+",
        default=["idle", "cpu", "cpu+priority", "contexts", "contexts+priority", "cpu+contexts"],
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # as the evaluator's GPU workers run (child_common.host_threads_for_gpu_work)
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "conditions": {}}
    measure(2, args.trials, args.numel)  # warm: Triton, the allocator, the caching host allocator
    for condition in args.conditions:
        procs = background(condition) if not condition.startswith("idle") else []
        try:
            time.sleep(3.0 if procs else 0.0)
            results["conditions"][condition] = measure(
                args.repeats, args.trials, args.numel, priority="priority" in condition
            )
        finally:
            stop(procs)
        found = results["conditions"][condition]
        print(f"{condition:14s} {found['wall_ms_per_call_median']:.3f} ms per call  {found['median_parts']}")
    args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
