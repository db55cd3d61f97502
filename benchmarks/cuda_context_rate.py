"""How fast one host can start candidate workers' CUDA contexts, on one GPU and spread over two (issue 17).

Every evaluation of a GPU candidate runs in a fresh process, so a host's evaluation rate can be no higher than
the rate at which it creates (and tears down) CUDA contexts. If that rate is a property of the host and its
driver rather than of each GPU, a second GPU adds no evaluations per minute. This measures it directly, the way
the fork server starts workers: a parent that has imported torch and Triton (never CUDA) forks children; each
child picks its GPU with ``CUDA_VISIBLE_DEVICES``, creates its context (``torch.cuda.init`` and a
synchronize), compiles and launches the harness's warm-up kernel, and exits. ``--concurrency`` children are
kept in flight; a configuration's rate is children finished per second over ``--count`` children.

    python benchmarks/cuda_context_rate.py --out F [--gpus 0 0,1] [--concurrency 1 8 16] [--nice 0 15]
        [--mode torch torch_compiled torch_alloc torch_context driver]
        [--env "" "CUDA_DEVICE_MAX_CONNECTIONS=1"]

``--gpus 0,1`` hands GPUs out in turn. ``--mode driver`` makes the context through libcuda alone (no torch, no
kernel), to tell the driver's cost from torch's; ``torch_context``, ``torch_alloc`` and ``torch_compiled`` stop
a worker's start-up after its context, its first allocation and its warm-up kernel's compile, to tell each
step's cost from the next; ``--env`` gives the children extra variables; ``--nice N`` runs them at
niceness N (Ray runs its workers at 15). Each row also gives the median seconds of a child's
steps, its CPU seconds, and how busy the host's CPUs were (``/proc/stat``). The table is printed last.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from eval_protocol import host_cpu_seconds, host_cpu_use  # noqa: E402

MODES = {
    "torch": "as a worker starts (context, warm-up kernel compiled and launched under the guards)",
    "torch_context": "torch's context alone",
    "torch_alloc": "the context and a first allocation",
    "torch_compiled": "the context, a first allocation and the warm-up kernel compiled, not launched",
    "driver": "a context through libcuda alone",
}


def driver_context() -> None:
    """A context through the driver API alone (no torch): what the driver itself costs."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    for call in (
        lambda: cuda.cuInit(0),
        lambda: cuda.cuDeviceGet(ctypes.byref(device), 0),
        lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
        lambda: cuda.cuCtxSetCurrent(context),
        lambda: cuda.cuCtxSynchronize(),
    ):
        if call() != 0:
            raise RuntimeError("a CUDA driver call failed")


def child(gpu: str, nice: int, mode: str, env: dict[str, str], write_fd: int) -> None:
    """In the forked child: one context and as much of the warm-up as ``mode`` says, the times as a JSON line."""
    code = 1
    try:
        if nice:
            os.nice(nice)
        os.environ.update(env)
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        started = time.monotonic()
        if mode == "driver":
            driver_context()
            context = warm = time.monotonic()
        else:
            import torch

            from ksmith_triton.warmkernel import prepare_warm_kernel, run_warm_kernel

            torch.cuda.init()
            torch.cuda.synchronize()
            context = time.monotonic()
            # The warm-up in parts, each mode one step further: the first allocation, then the kernel compiled
            # (or read from Triton's cache), then its guarded launch (module load, launch, the guards' imports).
            if mode == "torch_alloc":
                torch.empty(64, device="cuda")
                torch.cuda.synchronize()
            elif mode in ("torch_compiled", "torch"):
                prepare_warm_kernel("cuda")
                if mode == "torch":
                    run_warm_kernel("cuda")
            warm = time.monotonic()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        line = {
            "context_s": context - started,
            "warm_s": warm - context,
            "user_s": usage.ru_utime,
            "sys_s": usage.ru_stime,
        }
        os.write(write_fd, (json.dumps(line) + "\n").encode())
        code = 0
    finally:
        os._exit(code)


def run_config(
    gpus: list[str], concurrency: int, count: int, nice: int, mode: str = "torch", env: str = ""
) -> dict:
    """``count`` children, ``concurrency`` at once, GPUs in turn; their rate and median steps."""
    turn = itertools.cycle(gpus)
    running: dict[int, int] = {}  # pid -> read end of its pipe
    rows: list[dict] = []
    failures = 0
    started_children = 0
    cpu_before, wall_started = host_cpu_seconds(), time.monotonic()
    while started_children < count or running:
        while started_children < count and len(running) < concurrency:
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                child(next(turn), nice, mode, dict(parse_env(env)), write_fd)
            os.close(write_fd)
            running[pid] = read_fd
            started_children += 1
        pid, status = os.wait()
        read_fd = running.pop(pid)
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read().decode().strip()
        if os.waitstatus_to_exitcode(status) == 0 and data:
            rows.append(json.loads(data))
        else:
            failures += 1
    seconds = time.monotonic() - wall_started
    host = host_cpu_use(cpu_before, host_cpu_seconds(), count)

    def median(key: str) -> float | None:
        return round(statistics.median(r[key] for r in rows), 3) if rows else None

    return {
        "gpus": ",".join(gpus),
        "concurrency": concurrency,
        "nice": nice,
        "mode": mode,
        "env": env,
        "children": count,
        "failures": failures,
        "seconds": round(seconds, 2),
        "per_second": round(len(rows) / seconds, 2),  # children that made a context and ran the kernel
        "median_context_s": median("context_s"),
        "median_warm_s": median("warm_s"),
        "median_user_s": median("user_s"),
        "median_sys_s": median("sys_s"),
        "host_cpu": host,
    }


def parse_env(text: str) -> list[tuple[str, str]]:
    """``"A=1,B=2"`` -> [("A", "1"), ("B", "2")]; ``""`` -> []."""
    return [tuple(item.split("=", 1)) for item in text.split(",") if "=" in item]  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpus", nargs="+", default=["0", "0,1"], help="GPU sets, each handed out in turn.")
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 16])
    parser.add_argument("--nice", nargs="+", type=int, default=[0])
    parser.add_argument("--count", type=int, default=48, help="Children per configuration.")
    parser.add_argument(
        "--mode",
        nargs="+",
        choices=list(MODES),
        default=["torch"],
        help="; ".join(f"{name}: {text}" for name, text in MODES.items()),
    )
    parser.add_argument(
        "--env",
        nargs="+",
        default=[""],
        help='Children\'s extra environment, e.g. "CUDA_DEVICE_MAX_CONNECTIONS=1".',
    )
    args = parser.parse_args(argv)

    # The fork server's imports, never CUDA; a private Triton cache compiled once by a first child.
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="ksmith-context-rate-triton-"))
    import torch  # noqa: F401
    import triton  # noqa: F401

    import ksmith_triton.guards  # noqa: F401
    import ksmith_triton.warmkernel  # noqa: F401
    from ksmith_core.environment import device_facts, versions

    # device_facts initialises CUDA, which a forking parent must never do: it is asked last.
    results: dict = {"versions": versions(), "configs": []}
    run_config(["0"], 1, 1, 0)  # compiles the warm-up kernel into the cache: not part of any row
    configs = itertools.product(args.mode, args.env, args.gpus, args.concurrency, args.nice)
    for mode, env, gpus, concurrency, nice in configs:
        row = run_config(gpus.split(","), concurrency, args.count, nice, mode, env)
        results["configs"].append(row)
        args.out.write_text(json.dumps(results, indent=2))
        print(json.dumps(row), file=sys.stderr, flush=True)

    results["device"] = device_facts("cuda")
    args.out.write_text(json.dumps(results, indent=2))
    print(
        f"{'mode':14} {'env':32} {'gpus':6} {'conc':>4} {'nice':>4} {'per s':>6} {'context s':>9} {'warm s':>6} {'user s':>6} "
        f"{'sys s':>6}  host CPU"
    )
    for r in results["configs"]:
        print(
            f"{r['mode']:14} {r['env'] or '-':32} {r['gpus']:6} {r['concurrency']:>4} {r['nice']:>4} {r['per_second']:>6} {r['median_context_s']!s:>9} "
            f"{r['median_warm_s']!s:>6} {r['median_user_s']!s:>6} {r['median_sys_s']!s:>6}  {r['host_cpu']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
