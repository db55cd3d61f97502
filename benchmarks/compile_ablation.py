"""Which library entries make a compiled model faster, and which slower: one entry at a time.

An entry's own verdict times its region alone against torch.compile of that region; inside the model the
neighbours, the caches and Inductor's fusions around it differ. This compiles the model with Inductor, with
the whole library, and with each entry of the library alone, all in the same mode, and times them in
interleaved rounds (back-to-back forwards between CUDA events, as benchmarks/compile_llama.py does).

GPU, on a directory compile_llama.py wrote:
    python benchmarks/compile_ablation.py OUT/b8_s1 --mode reduce-overhead --out ablation_8x1.json
Smoke test on CPU (interpreter; timings mean nothing):
    TRITON_INTERPRET=1 python benchmarks/compile_ablation.py WORK --device cpu --mode default --rounds 1
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from compile_llama import time_forward, versions  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "work", type=Path, help="a shape's directory of compile_llama.py (model.py, library/)"
    )
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--mode", default="reduce-overhead", choices=["default", "reduce-overhead"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    import ksmith_compile
    from ksmith_compile.backend import kernelsmith_backend
    from ksmith_compile.report import load_model_file

    library = args.work / "library"
    entries = sorted(d for d in library.iterdir() if (d / "entry.json").is_file())
    module = load_model_file(args.work / "model.py")
    torch.manual_seed(0)
    with torch.device(args.device):
        model = module.Model().eval()
        inputs = list(module.get_inputs())
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    scratch = Path(tempfile.mkdtemp(prefix="ksmith-ablation-"))
    libraries = {"inductor": None, "all entries": library}
    for entry in entries:
        alone = scratch / entry.name
        shutil.copytree(entry, alone / entry.name)
        libraries[entry.name] = alone
    fns, swapped = {}, {}
    with torch.no_grad():
        want = model(*inputs)
        torch._dynamo.reset()
        for name, lib in libraries.items():
            # One backend object per variant: Dynamo's cache is keyed by the backend, and the model's copies
            # would otherwise share the first variant's compiled graph.
            backend = (
                "inductor"
                if lib is None
                else functools.partial(kernelsmith_backend, mode=args.mode, options={"library": str(lib)})
            )
            mode = args.mode if lib is None else None
            with ksmith_compile.Recorder() as recorder:
                fns[name] = torch.compile(copy.deepcopy(model), backend=backend, mode=mode)
                got = fns[name](*inputs)
            swapped[name] = sum(1 for r in recorder.regions if r.swapped)
            diff = (got.float() - want.float()).abs().max().item()
            print(f"compiled {name}: {swapped[name]} swapped, max abs diff vs eager {diff:.3g}", flush=True)
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times[name].append(time_forward(fn, inputs, args.device, args.warmup, args.reps, args.calls))
    shutil.rmtree(scratch, ignore_errors=True)
    base = statistics.median(times["inductor"])
    rows = []
    for name, ts in times.items():
        ms = statistics.median(ts)
        paired = [i / t for i, t in zip(times["inductor"], ts)]  # per round: inductor over this variant
        rows.append({
            "variant": name, "swapped": swapped[name], "ms": ms, "rounds_ms": ts,
            "spread": (max(ts) - min(ts)) / ms, "speedup_vs_inductor": base / ms,
            "speedup_per_round": paired,
        })  # fmt: skip
    result = {"mode": args.mode, "work": args.work.name, "rounds": args.rounds, "variants": rows}
    result.update(versions(args.device))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(f"{args.work.name}, mode {args.mode}: ms per forward, median of {args.rounds} rounds")
    print("| variant | swapped | ms (±half spread) | vs inductor | per round |")
    print("|---|---|---|---|---|")
    for r in rows:
        rounds = " ".join(f"{v:.3f}" for v in r["speedup_per_round"])
        print(
            f"| {r['variant']} | {r['swapped']} | {r['ms']:.4f} (±{50 * r['spread']:.1f}%) "
            f"| {r['speedup_vs_inductor']:.3f}x | {rounds} |"
        )


if __name__ == "__main__":
    main()
