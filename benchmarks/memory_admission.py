"""Does ``ksmith bench --parallel 8`` over large problems finish without contention out-of-memory verdicts?

Writes a suite of large synthetic problems (elementwise, row softmax and row sums in fp32, each with a Triton
seed) to a temporary directory, each sized so that one evaluation fits an 80 GB GPU but eight at once do not,
then runs ``ksmith bench DIR --parallel 8 --device cuda --json`` on it, in a process of its own with an empty
reference cache (so every footprint starts as an estimate), and counts what came back:

* ``oom``       -- rows whose verdict ran out of memory (``OUT_OF_MEMORY``, ``RESOURCE_EXHAUSTED``, torch's
  "out of memory");
* ``resource``  -- rows the problem could not even be set up for (``RESOURCE``: too large for the device);
* ``retried``   -- rows judged again alone after an out-of-memory beside other evaluations
  (``oom_retried_alone``; their verdict is the second run's);
* the wall time, and the most GPU memory in use while it ran (``nvidia-smi``, every half second).

``--baseline`` also runs the same bench with ``KSMITH_MEMORY_ADMISSION=0`` (no gate, no retry: the evaluator
as it was before), ``--warm-rerun`` once more with the first run's reference cache (measured footprints and
reference timings cached). The goal: no ``oom`` row with the gate on.

    python benchmarks/memory_admission.py --out memory_admission.json               # an 80 GB GPU
    python benchmarks/memory_admission.py --baseline --warm-rerun --out memory_admission.json
    python benchmarks/memory_admission.py --small --device cpu --out /tmp/smoke.json  # plumbing only, any machine

Sizes: each problem's input takes ``--elementwise-gib`` (elementwise and softmax, whose outputs are as large
as their inputs: the evaluation keeps the outputs of every trial on both sides) or ``--reduction-gib`` (row
sums, whose outputs are tiny), times a per-problem factor (0.8 to 1.2). With the defaults the admission's
estimates run from 26 to 60 GiB per evaluation (measured peaks should be lower), so an 80 GB GPU holds one or
two at a time, never eight. ``--small`` writes sizes of a few KB (for the CPU interpreter, or a quick GPU check).

Prints a short table last and writes everything (the rows included) as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "plugins" / "ksmith_problems" / "problems"
DIM = 4096
FACTORS = (1.0, 0.8, 1.2, 0.9)  # one problem of each kind per factor: distinct sizes, distinct problems

PROBLEM = '''"""{doc} ({rows} x {dim} fp32; written by benchmarks/memory_admission.py)."""

import torch
import torch.nn as nn

rows = {rows}
dim = {dim}
KSMITH_SMALL = {{"rows": 8, "dim": 256}}
{extra}

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expression}


def get_inputs():
    return [torch.randn(rows, dim)]


def get_init_inputs():
    return []
'''

# Each kind: its Model expression and its seed (source text, or the shipped seed file of the same Model).
KINDS: dict[str, dict[str, Any]] = {
    "scale_add": {
        "doc": "y = 2 x + 1, elementwise",
        "expression": "x * 2.0 + 1.0",
        "extra": "",
        "seed": """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_add_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _scale_add_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK_SIZE=4096, num_warps=8)
        return y
""",
    },
    "softmax": {
        "doc": "Row softmax over the last dim",
        "expression": "torch.softmax(x, dim=-1)",
        "extra": "",
        "seed": SHIPPED / "softmax" / "softmax.seed.py",  # the suite's own seed: same Model
    },
    "row_sum": {
        "doc": "Sum over the last dim, one value per row",
        "expression": "torch.sum(x, dim=-1)",
        # Sums of 4096 values in another order differ by a few 1e-5 (as the suite's sum_reduction).
        "extra": 'KSMITH_TOLERANCES = {"float32": [1e-3, 1e-4]}\n',
        "seed": SHIPPED / "reduction" / "sum_reduction.seed.py",  # the suite's own seed: same Model
    },
}


def write_suite(directory: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One problem (and its seed) per kind and factor; returns what was written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for index, factor in enumerate(FACTORS[: args.per_kind]):
        for kind, parts in KINDS.items():
            gib = args.reduction_gib if kind == "row_sum" else args.elementwise_gib
            rows = 8 + index if args.small else max(1, int(factor * gib * 2**30 / (DIM * 4)))
            dim = 256 if args.small else DIM
            name = f"{kind}_{index}"
            source = PROBLEM.format(
                doc=parts["doc"], rows=rows, dim=dim, expression=parts["expression"], extra=parts["extra"]
            )
            (directory / f"{name}.py").write_text(source)
            seed = parts["seed"]
            (directory / f"{name}.seed.py").write_text(seed.read_text() if isinstance(seed, Path) else seed)
            written.append(
                {"problem": name, "kind": kind, "rows": rows, "dim": dim, "input_gib": rows * dim * 4 / 2**30}
            )
    return written


class MemorySampler:
    """The most GPU memory in use (MiB, over all GPUs nvidia-smi lists) while it runs; none without nvidia-smi."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.peak_used_mib: float | None = None
        self.total_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        query = ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            try:
                text = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                return
            for line in text.splitlines():
                try:
                    used, total = (float(v) for v in line.split(","))
                except ValueError:
                    continue
                self.peak_used_mib = max(self.peak_used_mib or 0.0, used)
                self.total_mib = total
            self._stop.wait(interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


def run_bench(
    label: str, suite: Path, out_dir: Path, cache_home: Path, admission: bool, args: argparse.Namespace
) -> dict[str, Any]:
    """``ksmith bench`` in a process of its own; its rows, counts, wall time and peak GPU memory."""
    command = [
        sys.executable,
        "-c",
        "from ksmith_core.cli import main; main()",
        "bench",
        str(suite),
        "--parallel",
        str(args.parallel),
        "--device",
        args.device,
        "--json",
        "-o",
        str(out_dir),
    ]
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(cache_home)  # the reference cache, footprints included
    env["KSMITH_MEMORY_ADMISSION"] = "1" if admission else "0"
    print(f"[{label}] {' '.join(command[3:])} (admission {'on' if admission else 'off'})", file=sys.stderr)
    sampler = MemorySampler() if args.device == "cuda" else None
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout_s)
    wall_s = time.monotonic() - started
    if sampler:
        sampler.stop()
    try:
        result = json.loads(done.stdout)
    except ValueError:
        return {
            "label": label,
            "admission": admission,
            "exit_code": done.returncode,
            "wall_s": round(wall_s, 1),
            "error": (done.stderr or done.stdout)[-3000:],
        }
    rows = result["rows"]
    return {
        "label": label,
        "admission": admission,
        "exit_code": done.returncode,
        "wall_s": round(wall_s, 1),
        "problems": len(rows),
        "ok": sum(1 for r in rows if r["status"] == "ok"),
        "oom": sorted(r["problem"] for r in rows if out_of_memory(r)),
        "resource": sorted(r["problem"] for r in rows if resource(r)),
        "retried": sorted(r["problem"] for r in rows if r.get("oom_retried_alone")),
        "statuses": {
            s: sum(1 for r in rows if r["status"] == s) for s in sorted({r["status"] for r in rows})
        },
        "peak_gpu_used_gib": round(sampler.peak_used_mib / 1024, 1)
        if sampler and sampler.peak_used_mib
        else None,
        "gpu_total_gib": round(sampler.total_mib / 1024, 1) if sampler and sampler.total_mib else None,
        "rows": rows,
    }


def out_of_memory(row: dict[str, Any]) -> bool:
    reasons = row.get("reasons") or []
    return any(
        r.startswith(("OUT_OF_MEMORY", "RESOURCE_EXHAUSTED")) or "out of memory" in r.lower() for r in reasons
    )


def resource(row: dict[str, Any]) -> bool:
    return any("RESOURCE:" in r for r in row.get("reasons") or [])


def print_table(runs: list[dict[str, Any]]) -> None:
    header = f"{'run':<12} {'admission':>9} {'problems':>8} {'ok':>4} {'oom':>4} {'resource':>8} {'retried':>7} {'wall s':>8} {'peak GiB':>9}"
    print(header)
    print("-" * len(header))
    for run in runs:
        if "error" in run:
            print(
                f"{run['label']:<12} {'on' if run['admission'] else 'off':>9}  failed: {run['error'].splitlines()[-1:]}"
            )
            continue
        peak = (
            "-" if run["peak_gpu_used_gib"] is None else f"{run['peak_gpu_used_gib']}/{run['gpu_total_gib']}"
        )
        print(
            f"{run['label']:<12} {'on' if run['admission'] else 'off':>9} {run['problems']:>8} {run['ok']:>4} "
            f"{len(run['oom']):>4} {len(run['resource']):>8} {len(run['retried']):>7} {run['wall_s']:>8} {peak:>9}"
        )
    for run in runs:
        for key in ("oom", "resource", "retried"):
            if run.get(key):
                print(f"  {run['label']} {key}: {', '.join(run[key])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--per-kind", type=int, default=3, help=f"problems per kind (at most {len(FACTORS)})")
    parser.add_argument("--elementwise-gib", type=float, default=1.5, help="input GiB of elementwise/softmax")
    parser.add_argument("--reduction-gib", type=float, default=5.0, help="input GiB of the row sums")
    parser.add_argument("--small", action="store_true", help="tiny sizes (CPU interpreter, or a quick check)")
    parser.add_argument("--baseline", action="store_true", help="also run with KSMITH_MEMORY_ADMISSION=0")
    parser.add_argument("--warm-rerun", action="store_true", help="run again with the first run's cache")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per bench run")
    parser.add_argument("--keep", type=Path, default=None, help="write the suite and bench outputs here")
    args = parser.parse_args(argv)
    args.per_kind = max(1, min(args.per_kind, len(FACTORS)))

    with tempfile.TemporaryDirectory(prefix="ksmith-memory-admission-") as tmp:
        root = args.keep or Path(tmp)
        suite = root / "suite"
        problems = write_suite(suite, args)
        runs = [run_bench("gated", suite, root / "out-gated", root / "cache-gated", True, args)]
        if args.warm_rerun:
            runs.append(
                run_bench("gated-warm", suite, root / "out-gated-warm", root / "cache-gated", True, args)
            )
        if args.baseline:
            runs.append(
                run_bench("baseline", suite, root / "out-baseline", root / "cache-baseline", False, args)
            )
        report = {
            "device": args.device,
            "parallel": args.parallel,
            "small": args.small,
            "problems": problems,
            "runs": runs,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=str))
    print_table(runs)
    gated = runs[0]
    return 0 if "error" not in gated and not gated["oom"] else 1


if __name__ == "__main__":
    sys.exit(main())
