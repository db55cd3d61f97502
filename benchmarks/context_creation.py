"""How long a new process takes to create its CUDA context, alone and with others doing the same at once.

Every candidate ksmith evaluates runs in a new process, so each evaluation creates one CUDA context. This
measures what that costs and whether contexts created at once wait for each other (the driver doing part of
the work one process at a time): K processes start together, each creates its context and reports how long
that took, for K = 1, 2, 4, 8, 16. Two ways: through the driver API alone (``cuInit`` and the primary
context, with ctypes: no torch), and the way a worker does it (``torch.cuda.init()`` then a synchronize).

    python benchmarks/context_creation.py --out context.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

DRIVER = """
import ctypes, sys, time
go = float(sys.argv[1])
while time.time() < go:
    time.sleep(0.001)
start = time.perf_counter()
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
device, context = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
assert cuda.cuCtxSetCurrent(context) == 0
assert cuda.cuCtxSynchronize() == 0
print(time.perf_counter() - start)
"""

TORCH = """
import sys, time
import torch
go = float(sys.argv[1])
while time.time() < go:
    time.sleep(0.001)
start = time.perf_counter()
torch.cuda.init()
torch.cuda.synchronize()
print(time.perf_counter() - start)
"""


def together(script: str, count: int, lead_s: float) -> list[float]:
    """Start ``count`` processes that all begin at the same moment (after their imports); their times (s)."""
    go = time.time() + lead_s
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    return [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("context_creation.py: needs an NVIDIA GPU (none is visible)", file=sys.stderr)
        return 2

    rows = []
    for name, script, lead in (("driver", DRIVER, 2.0), ("torch", TORCH, 8.0)):
        for count in args.counts:
            times = [t for _ in range(args.repeats) for t in together(script, count, lead)]
            rows.append(
                {
                    "how": name,
                    "processes": count,
                    "median_s": statistics.median(times),
                    "max_s": max(times),
                    "times_s": times,
                }
            )
            print(
                f"{name:<7} {count:>3} at once: median {rows[-1]['median_s']:.3f} s, max {max(times):.3f} s"
            )
    facts = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.write_text(json.dumps({"facts": facts, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
