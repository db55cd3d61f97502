"""Does Inductor's own programmatic dependent launch change the decode step, and can an inlined kernel take part?
(issue 13; GPU, docs/benchmarks.md §11h)

Two questions before PDL goes into the backend's seeds (``decode_pdl_variants.py`` measures the kernels alone):

1. ``TORCHINDUCTOR_ENABLE_PDL=1`` (read when Inductor is imported) makes Inductor's Triton kernels wait for the
   kernel before them only where they read its results, and launch with PDL. The §11 model (4 layers, 8×1, bf16)
   compiled by ``inductor`` with ``mode="reduce-overhead"``, timed in fresh processes with it off and on,
   alternating (off, on, off, on), each process timing 3 rounds as ``compile_llama.py`` does.
2. A ``triton_op`` whose kernel is launched with ``launch_pdl=True`` under ``wrap_triton``, compiled by Inductor:
   does it compile and give the eager result?

    python benchmarks/inductor_pdl_probe.py [--processes 4]

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, statistics, sys, torch
sys.path.insert(0, "benchmarks")
from compile_llama import FULL, time_forward
from transformers import LlamaConfig, LlamaModel
torch.manual_seed(0)
model = LlamaModel(LlamaConfig(**FULL)).to(torch.bfloat16).cuda().eval()
ids = torch.randint(0, FULL["vocab_size"], (8, 1), device="cuda")
fn = torch.compile(lambda i: model(i, use_cache=False).last_hidden_state, backend="inductor", mode="reduce-overhead")
with torch.no_grad():
    rounds = [time_forward(fn, [ids], "cuda", warmup=10, reps=20, calls=20) for _ in range(3)]
import torch._inductor.config as config
print(json.dumps({"enable_pdl": getattr(config.triton, "enable_pdl", None), "rounds_ms": rounds}))
"""

PROBE = r"""
import torch, triton, triton.language as tl
from torch.library import triton_op, wrap_triton

@triton.jit
def add_one(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    tl.extra.cuda.gdc_wait()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

@triton_op("pdlprobe::add_one", mutates_args=())
def op(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    wrap_triton(add_one)[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024, launch_pdl=True)
    return out

x = torch.randn(4096, device="cuda")
try:
    got = torch.compile(lambda t: op(t * 2) * 3, backend="inductor")(x)
    print("inlined launch_pdl:", "same as eager" if torch.equal(got, (x * 2 + 1) * 3) else "DIFFERENT")
except Exception as exc:
    print("inlined launch_pdl fails:", type(exc).__name__, str(exc).splitlines()[0][:300])
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=4, help="alternating off/on processes")
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:  # @triton.jit needs a file
        fh.write(PROBE)
    probe = subprocess.run([sys.executable, fh.name], capture_output=True, text=True)
    print((probe.stdout + probe.stderr).strip().splitlines()[-1])
    runs: dict[str, list[float]] = {"0": [], "1": []}
    for i in range(args.processes):
        flag = "01"[i % 2]
        env = dict(os.environ, TORCHINDUCTOR_ENABLE_PDL=flag)
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            print(f"process {i} (PDL {flag}) failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:300]}")
            continue
        result = json.loads(lines[-1])
        runs[flag] += result["rounds_ms"]
        print(f"process {i}: enable_pdl {result['enable_pdl']}, rounds {result['rounds_ms']}", flush=True)
    for flag, times in runs.items():
        if times:
            print(
                f"inductor RO, TORCHINDUCTOR_ENABLE_PDL={flag}: median {statistics.median(times):.4f} ms, "
                f"rounds {min(times):.4f}-{max(times):.4f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
