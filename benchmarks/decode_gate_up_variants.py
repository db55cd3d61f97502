"""Launch configurations of harvest's gate/up seed at decode shape (issue 13; GPU, docs/benchmarks.md §11i).

In the decode step of §11's Llama at 8 rows, ``silu(x @ gate.T) * (x @ up.T)`` is the largest kernel ksmith
swaps in: 18.5-18.8 us a layer on an H200 for 67 MB of weights, 3.6 TB/s, while the single projections'
configurations were measured (§11g) and this one was not: it starts from (BLOCK_N 16, BLOCK_K 128, 2 warps,
5 stages). This sweeps the seed's own kernel (``_GATE_UP_SEED`` of ``ksmith_compile.seeds``, written to a
file and imported, as harvest writes it) over (BLOCK_N, BLOCK_K, warps, stages). Each configuration is timed
as one CUDA graph of the four layers' distinct weight pairs (268 MB, more than L2 holds), GPU time per layer;
its output is checked against eager's rounding first (each step rounded to the dtype as eager does).

    python benchmarks/decode_gate_up_variants.py [--rows 8] [--out OUT.json]
    TRITON_INTERPRET=1 python benchmarks/decode_gate_up_variants.py --check   # the kernel on the CPU

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import importlib.util
import itertools
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from decode_gemm_variants import (  # the script beside this one
    graph_ms,
    report_header,
    script_args,
    write_report,
)

HIDDEN, INTERMEDIATE, LAYERS = 2048, 8192, 4
SEED_CONFIG = (16, 128, 2, 5)  # what harvest writes at one 16-row tile (seeds._tile, warps=2)
EVOLVED = (16, 64, 2, 5)  # the winner of a budget-8 evolution from it in the model run of §11i
GRID = list(itertools.product((16, 32, 64), (32, 64, 128, 256), (2, 4), (3, 4, 5, 6)))


def seed_kernel():
    """The seed's ``_gate_up_kernel``, from a file of its own (Triton reads a kernel's source from its file)."""
    from ksmith_compile.seeds import _GATE_UP_SEED

    source = _GATE_UP_SEED.format(init0="None", init1="None", gate="p0", up="p1", block_m=16, block_n=16,
                                  block_k=128, options="")  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "gate_up_seed.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("gate_up_seed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._gate_up_kernel


def launcher(kernel, cfg):
    block_n, block_k, warps, stages = cfg

    def run(x, gate, up, out):
        m, k = x.shape
        n = gate.shape[0]
        kernel[(1, triton.cdiv(n, block_n))](
            x, gate, up, out, m, n, k, IEEE=False, BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=block_k,
            num_warps=warps, num_stages=stages,
        )  # fmt: skip

    return run


def eager(x, gate, up):
    return F.silu(x @ gate.t()) * (x @ up.t())


def max_ulps_off(got, want):
    spacing = torch.finfo(got.dtype).eps * want.double().abs().clamp_min(1.0)
    return ((got.double() - want.double()).abs() / spacing).nan_to_num(nan=float("inf")).max().item()


def sweep(rows, dtype):
    kernel = seed_kernel()
    x = torch.randn(rows, HIDDEN, dtype=dtype, device="cuda")
    layers = [
        tuple(torch.randn(INTERMEDIATE, HIDDEN, dtype=dtype, device="cuda") / HIDDEN**0.5 for _ in range(2))
        for _ in range(LAYERS)
    ]
    outs = [torch.empty(rows, INTERMEDIATE, dtype=dtype, device="cuda") for _ in layers]
    want = eager(x, *layers[0])

    def per_layer_us(run):
        calls = [lambda g=g, u=u, o=o: run(x, g, u, o) for (g, u), o in zip(layers, outs)]
        return statistics.median(graph_ms(calls, replays=30)) / len(layers) * 1e3

    rows_out = []
    eager_us = per_layer_us(lambda x, g, u, o: o.copy_(eager(x, g, u)))
    for cfg in [SEED_CONFIG, *(c for c in GRID if c != SEED_CONFIG)]:
        try:
            run = launcher(kernel, cfg)
            out = torch.full((rows, INTERMEDIATE), float("nan"), dtype=dtype, device="cuda")
            run(x, *layers[0], out)
            ulps = max_ulps_off(out, want)
        except Exception as exc:  # noqa: BLE001 - a configuration that does not compile is skipped
            rows_out.append({"cfg": cfg, "error": f"{type(exc).__name__}: {str(exc)[:80]}"})
            continue
        rows_out.append({"cfg": cfg, "us": per_layer_us(run), "max_ulps": ulps})
    seed = rows_out[0]
    timed = sorted((r for r in rows_out if "us" in r and r["max_ulps"] <= 2), key=lambda r: r["us"])
    tbps = lambda us: 2 * INTERMEDIATE * HIDDEN * 2 / us / 1e6  # noqa: E731
    print(f"eager (cuBLAS x2 + silu, mul): {eager_us:6.2f} us a layer ({tbps(eager_us):.2f} TB/s)")
    print(
        f"seed {seed['cfg']}: {seed.get('us', float('nan')):6.2f} us ({tbps(seed.get('us', 1e9)):.2f} TB/s)"
    )
    for r in timed[:8] + [r for r in timed if r["cfg"] == EVOLVED]:
        rank = timed.index(r) + 1
        print(f"  #{rank} {r['cfg']}: {r['us']:6.2f} us ({tbps(r['us']):.2f} TB/s), {r['max_ulps']:.1f} ulps")
    return {
        "eager_us": eager_us,
        "seed": seed,
        "timed": timed,
        "off_by_more_than_2_ulps": [r for r in rows_out if r.get("max_ulps", 0) > 2][:3],
        "errors": [r for r in rows_out if "error" in r][:3],
        "configurations": len(rows_out),
    }


def check() -> int:
    """The seed's kernel at three configurations against eager on the CPU (``TRITON_INTERPRET=1``, fp16)."""
    torch.manual_seed(0)
    kernel = seed_kernel()
    x = torch.randn(5, 96, dtype=torch.float16)
    gate, up = ((torch.randn(72, 96) / 96**0.5).half() for _ in range(2))
    worst = 0.0
    for cfg in ((16, 32, 2, 2), (32, 64, 4, 3), (64, 128, 2, 2)):
        out = torch.full((5, 72), float("nan"), dtype=torch.float16)
        launcher(kernel, cfg)(x, gate, up, out)
        worst = max(worst, max_ulps_off(out, eager(x, gate, up)))
        print(f"{cfg}: {worst:.1f} ulps off eager at most")
    print("check:", "ok" if worst <= 2 else "FAILED")
    return 0 if worst <= 2 else 1


def main() -> int:
    args = script_args(check=True)
    if args.check:
        return check()
    torch.manual_seed(0)
    write_report({**report_header(args.rows), "gate_up": sweep(args.rows, torch.bfloat16)}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
