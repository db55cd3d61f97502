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
* ``alloc``: four processes allocating and freeing 256 MB on the GPU and giving the cache back
  (``torch.cuda.empty_cache``), as workers do between their phases (cudaMalloc / cudaFree);
* ``pinned``: four processes pinning and freeing 64 MB of host memory (cudaHostAlloc / cudaFreeHost);
* ``live``: 32 processes each holding a CUDA context and 256 MB of GPU memory, idle (the workload's workers
  and reference processes between their steps);
* ``sync``: eight processes recording and querying an event and synchronising in a loop (driver calls with no
  GPU work behind them);
* ``memory``: one process per core, as ``cpu``, but each copying 256 MB on the host again and again (the
  memory bus and the last-level cache busy as well);
* ``compile``: two processes compiling a new Triton kernel again and again (a constant changed each time, so
  the cache never hits), as candidates' first calls do;
* any of these with ``+priority``: the loop's thread at niceness -10 (root or CAP_SYS_NICE);
* ``nicecpu`` and ``nicecontexts`` in place of ``cpu`` and ``contexts``: that work at niceness 19.

With ``--fresh`` the loop also makes fresh inputs for about a third of its calls, the way a candidate's timing
does (``child_common.make_inputs``: the seed set, the problem's ``get_inputs`` run under ``torch.device``):
the evaluator's loop does, and without them the loop alone misses that part of a timed call's host work.

    python benchmarks/timing_host_interference.py --out interference.json [--fresh] [--conditions ...]

With ``--state`` the loop runs in parts of a candidate worker's state instead of a bare process, to find which
part makes the same loop slower in a worker (docs/benchmarks.md §1b9):

* ``triton``: the timed call is a Triton kernel rather than torch ops;
* ``warm``: the worker's warm-up (dynamo imported, its own kernel run under the guards' dispatch mode);
* ``guards``: ``Guards`` made, the clocks and the harness captured, installed, and the loop run through
  ``candidate_side.time_candidate``, the candidate's own loop, with the checks' interpreter-hook comparison
  (name ``triton`` with it: the guards refuse a call that launches no Triton kernel);
* ``poison``: the allocator poisoned, then its cache given back, before each loop, as around a worker's trials;
* ``ipc``: an output shared through CUDA IPC before the loop, as the trials' outputs are.

Each state in a process of its own (guards cannot be removed):

    python benchmarks/timing_host_interference.py --out F --fresh --state triton warm guards --conditions idle

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


ALLOC = """
import torch
while True:
    x = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    del x
    torch.cuda.empty_cache()
"""
PINNED = """
import torch
torch.zeros(1, device="cuda")
# The caching host allocator keeps a freed pinned block: empty it, so every round allocates again (the name
# of that call has moved between torch versions).
names = ("_accelerator_emptyHostCache", "_host_emptyCache", "_cuda_hostEmptyCache")
empty = next((getattr(torch._C, n) for n in names if hasattr(torch._C, n)), None)
if empty is None:
    raise SystemExit("no way to empty the pinned-memory cache in this torch")
while True:
    x = torch.empty(64 * 2**20, dtype=torch.int8).pin_memory()
    del x
    empty()
"""
COMPILE = """
import itertools, os, tempfile
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
import torch, triton, triton.language as tl

@triton.jit
def k(x_ptr, n, C: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * C + 1.0, mask=offs < n)

x = torch.zeros(1024, device="cuda")
for c in itertools.count():
    k[(1,)](x, 1024, C=float(c) + 0.5, BLOCK=1024)  # a new constexpr: a new compile
"""
LIVE = """
import time, torch
x = torch.ones(64 * 2**20, device="cuda")  # a context and some memory, then nothing
time.sleep(1e9)
"""
SYNC = """
import torch
torch.zeros(1, device="cuda")
event = torch.cuda.Event()
while True:  # driver calls with no GPU work behind them, as processes waiting outside the lock make
    event.record()
    event.query()
    torch.cuda.synchronize()
"""
MEMORY = """
import torch
torch.set_num_threads(1)
a = torch.ones(64 * 2**20)  # 256 MB: every pass goes through the memory, not the caches
b = torch.empty_like(a)
while True:
    b.copy_(a)
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
        elif part == "alloc":
            procs += [subprocess.Popen([sys.executable, "-c", ALLOC]) for _ in range(4)]
        elif part == "pinned":
            procs += [subprocess.Popen([sys.executable, "-c", PINNED]) for _ in range(4)]
        elif part == "compile":
            procs += [subprocess.Popen([sys.executable, "-c", COMPILE]) for _ in range(2)]
        elif part == "live":
            procs += [subprocess.Popen([sys.executable, "-c", LIVE]) for _ in range(32)]
        elif part == "sync":
            procs += [subprocess.Popen([sys.executable, "-c", SYNC]) for _ in range(8)]
        elif part == "memory":
            procs += [subprocess.Popen([sys.executable, "-c", MEMORY]) for _ in range(os.cpu_count() or 1)]
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


TRITON_CALL = """
import triton
import triton.language as tl


@triton.jit
def _add_mul(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    z = tl.load(z_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, (x + y) * z, mask=mask)


def add_mul(x, y, z):
    out = x.new_empty(x.shape)
    _add_mul[(triton.cdiv(x.numel(), 1024),)](x, y, z, out, x.numel(), BLOCK=1024)
    return out
"""


class WorkerState:
    """The parts of a candidate worker's state that ``--state`` names, set up in this process (see the module's
    docstring); what the timed loop then runs."""

    def __init__(self, parts: list[str], numel: int) -> None:
        import importlib.util

        import torch

        self.parts = set(parts)
        self.call = lambda x, y, z: (x + y) * z
        if "triton" in self.parts:
            # From a file: Triton reads a kernel's source, which ``-c`` code has none of.
            path = Path(tempfile.mkdtemp()) / "interference_kernel.py"
            path.write_text(TRITON_CALL)
            spec = importlib.util.spec_from_file_location("interference_kernel", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.call = module.add_mul
        if "warm" in self.parts:
            from ksmith_triton.candidate_side import import_launch_path
            from ksmith_triton.warmkernel import prepare_warm_kernel, run_warm_kernel

            import_launch_path()
            prepare_warm_kernel("cuda")
            run_warm_kernel("cuda")
        self.guards = self.hooks_before = None
        if "guards" in self.parts:
            from ksmith_triton.candidate_side import capture_harness
            from ksmith_triton.guards import Guards, capture_timers, interpreter_hooks

            self.guards = Guards(frozenset(), "cuda")
            self.timers = capture_timers(self.guards, "cuda")
            capture_harness(self.guards)
            self.guards.install()
            self.hooks_before = interpreter_hooks()
        self.input_bytes = 3 * numel * 4
        if (
            "ipc" in self.parts
        ):  # the shared copy stays alive in candidate_side.SHARED_OUTPUTS, as in a worker
            from ksmith_triton.candidate_side import save_outputs

            out = self.call(*[torch.randn(numel, device="cuda") for _ in range(3)])
            save_outputs(Path(tempfile.mkdtemp()), "trial", "tensor", [out], share_cuda=True)

    def before_loop(self) -> None:
        if "poison" in self.parts:
            from ksmith_triton.candidate_side import poison_allocator, release_cached_memory

            poison_allocator(self.input_bytes)
            release_cached_memory("cuda")


def measure(
    repeats: int,
    trials: int,
    numel: int,
    priority: bool = False,
    fresh: bool = False,
    state: WorkerState | None = None,
) -> dict:
    import inspect
    import types

    import torch

    from ksmith_triton import timing
    from ksmith_triton.candidate_side import TimedCallCheck, time_candidate
    from ksmith_triton.child_common import make_inputs

    problem = types.ModuleType("interference_problem")
    problem.get_inputs = lambda: [torch.randn(numel) for _ in range(3)]

    class Channel:  # what the worker's channel does with a report, short of writing it to the pipe
        def send(self, kind, **fields):
            json.dumps({"kind": kind, **fields})

    inputs = [torch.randn(numel, device="cuda") for _ in range(3)]
    timers = timing.reference_timers("cuda")
    call = state.call if state is not None else (lambda x, y, z: (x + y) * z)
    guards = state.guards if state is not None else None
    per_call, parts = [], []
    if guards is not None:  # as a candidate's timing runs (the background work's processes start outside it)
        guards.candidate_phase = True
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(repeats):
            if state is not None:
                state.before_loop()
            check = TimedCallCheck(
                Channel(),
                os.urandom,
                Path(scratch),
                False,
                trials,
                guards,
                state.hooks_before if state is not None else None,
                device="cuda",
            )
            begin = time.perf_counter()
            with raised_priority() if priority else contextlib.nullcontext():
                if guards is not None:  # the candidate's own loop, through the installed guards
                    command = {"trials": trials, "warmup": 10}
                    result = time_candidate(
                        guards, call, problem, [inputs], state.timers, command, "cuda", check
                    )
                else:
                    schedule = timing.Schedule(os.urandom, trials, 10)
                    hooks = {"before_wait": check.queue}
                    if "after_wait" in inspect.signature(timing.time_gpu).parameters:
                        hooks["after_wait"] = check.keep
                    made = None
                    if fresh:

                        def made(seed: int, check=check) -> list:
                            check.input_seed = seed  # as the candidate's loop does
                            return make_inputs(problem, seed, "cuda")

                    result = timing.time_gpu(call, [inputs], timers, schedule, check, made, **hooks)
            wall_ms = (time.perf_counter() - begin) * 1e3
            per_call.append(wall_ms / (len(result.samples_ms) + result.warmup))
            parts.append({**result.loop_ms, **{f"check_{k}": v for k, v in check.parts_ms().items()}})
            parts[-1].update({f"cpu_{k}": v for k, v in getattr(result, "loop_cpu_ms", {}).items()})
            parts[-1].update({f"switches_{k}": v for k, v in getattr(result, "switches", {}).items()})
            parts[-1]["calls"] = len(result.samples_ms)
            parts[-1]["gpu_ms_median"] = statistics.median(result.samples_ms)
            parts[-1]["prequeue_ms"] = result.prequeue_ms
            parts[-1]["exposed"] = result.exposed
    if guards is not None:
        guards.candidate_phase = False
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
    parser.add_argument("--fresh", action="store_true", help="fresh inputs for a third of the calls")
    parser.add_argument(
        "--state",
        nargs="*",
        default=[],
        choices=["triton", "warm", "guards", "poison", "ipc"],
        help="parts of a candidate worker's state to set up first (the candidate's loop always makes fresh "
        "inputs)",
    )
    parser.add_argument(
        "--conditions",
        nargs="+",
        default=["idle", "cpu", "cpu+priority", "contexts", "contexts+priority", "cpu+contexts"],
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # as the evaluator's GPU workers run (child_common.host_threads_for_gpu_work)
    state = WorkerState(args.state, args.numel) if args.state else None
    results = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "fresh": args.fresh or (state is not None and state.guards is not None),
        "state": args.state,
        "conditions": {},
    }
    measure(2, args.trials, args.numel, fresh=args.fresh, state=state)  # warm: Triton, the allocators
    for condition in args.conditions:
        procs = background(condition) if not condition.startswith("idle") else []
        try:
            time.sleep(10.0 if "live" in condition else 3.0 if procs else 0.0)  # 32 contexts take a while
            results["conditions"][condition] = measure(
                args.repeats,
                args.trials,
                args.numel,
                priority="priority" in condition,
                fresh=args.fresh,
                state=state,
            )
            # Background work that died (a torch without what it calls) would make this condition idle.
            results["conditions"][condition]["background_exited"] = sum(
                proc.poll() is not None for proc in procs
            )
        finally:
            stop(procs)
        found = results["conditions"][condition]
        died = (
            f"  ({found['background_exited']} background processes had exited)"
            if found["background_exited"]
            else ""
        )
        print(
            f"{condition:14s} {found['wall_ms_per_call_median']:.3f} ms per call  {found['median_parts']}{died}"
        )
    args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
