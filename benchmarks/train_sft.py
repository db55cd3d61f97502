"""SFT of the local improver on a GPU, and the trained proposer against its base model.

1. ``ksmith evolve`` (mutate proposer) on each training problem, budget ``--budget``: the suite's runs;
2. ``ksmith dataset`` over those runs (``--steps correct`` trains on every correct step when too few clear
   the timing noise; the card says how many did);
3. ``ksmith train sft`` for ``--max-steps`` steps;
4. ``ksmith evolve --proposer llm`` on each comparison problem, with the base model and with the adapter
   (transformers in process), budget ``--compare-budget``; best speedups side by side.

Writes OUT/train_sft.json (card, training record, comparison) and prints a markdown table.

    python benchmarks/train_sft.py --model MODEL_DIR_OR_GGUF --out results/train_sft \\
        --train relu silu gelu_tanh add_mul leaky_relu swiglu geglu layernorm \\
        --compare softmax rmsnorm --budget 24 --max-steps 300 --compare-budget 12

Run it on the GPU (the evaluator needs CUDA for real timings; on CPU everything is interpreted).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

KSMITH = [sys.executable, "-c", "from ksmith_core.cli import main; main()"]


def ksmith(*args: str) -> dict:
    started = time.time()
    proc = subprocess.run([*KSMITH, *args, "--json"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"ksmith {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout)
    print(f"  ksmith {args[0]} {args[1] if len(args) > 1 else ''}: {time.time() - started:.0f}s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train", nargs="+", required=True, help="problems whose runs make the data")
    parser.add_argument("--compare", nargs="+", required=True, help="problems evolved with base and adapter")
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--steps", choices=["kept", "correct"], default="kept")
    parser.add_argument("--compare-budget", type=int, default=12)
    parser.add_argument("--parallel", type=int, default=4, help="evaluations at once in each run")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke test only")
    args = parser.parse_args()
    out = args.out
    (out / "runs").mkdir(parents=True, exist_ok=True)

    print("1. runs", flush=True)
    for problem in args.train:
        run_dir = out / "runs" / problem
        if not (run_dir / "run.sqlite").exists():
            ksmith(
                "evolve",
                problem,
                "--budget",
                str(args.budget),
                "--parallel",
                str(args.parallel),
                "--device",
                args.device,
                "--run-dir",
                str(run_dir),
            )
    # Each stage's result is kept in OUT/train_sft.json as it lands, so a rerun with the same --out resumes.
    saved_path = out / "train_sft.json"
    saved = json.loads(saved_path.read_text()) if saved_path.exists() else {}

    def save(**parts) -> None:
        saved.update(parts, args=vars(args) | {"out": str(out)})
        saved_path.write_text(json.dumps(saved, indent=2, default=str))

    print("2. dataset", flush=True)
    if "card" not in saved:
        save(card=ksmith("dataset", str(out / "runs"), "-o", str(out / "data"), "--test-fraction", "0"))
    card = saved["card"]
    print(f"  {card['steps']} steps, {card['kept']} kept, filters {card['filters']}", flush=True)
    print("3. sft", flush=True)
    if "sft" not in saved:
        save(
            sft=ksmith(
                "train",
                "sft",
                "--model",
                args.model,
                "--data",
                str(out / "data"),
                "--steps",
                args.steps,
                "--max-steps",
                str(args.max_steps),
                "-o",
                str(out / "adapter"),
            )  # fmt: skip
        )
    record = saved["sft"]
    print("4. compare", flush=True)
    comparison = saved.get("comparison", [])
    for problem in args.compare:
        if any(row["problem"] == problem for row in comparison):
            continue
        row = {"problem": problem}
        for label, model in (("base", args.model), ("adapter", str(out / "adapter"))):
            shutil.rmtree(out / "compare" / f"{label}-{problem}", ignore_errors=True)  # an interrupted one
            summary = ksmith(
                "evolve", problem, "--proposer", "llm", "--llm-model", model, "--llm-option",
                f"max_tokens={args.max_tokens}", "--budget", str(args.compare_budget), "--device", args.device,
                "--parallel", str(args.parallel),
                "--run-dir", str(out / "compare" / f"{label}-{problem}"),
            )  # fmt: skip
            best = summary.get("best") or {}
            row[label] = {
                "best_speedup": best.get("speedup"),
                "evaluations": summary["evaluations"],
                "statuses": summary["statuses"],
                "dropped": summary["dropped"]["total"],
            }
        comparison.append(row)
        save(comparison=comparison)
    print(f"  sft: {json.dumps(record, default=str)[:600]}", flush=True)
    print(
        "\n| problem | base best | adapter best | base ok/evals | adapter ok/evals | dropped base/adapter |"
    )
    print("|---|---|---|---|---|---|")
    for row in comparison:
        b, a = row["base"], row["adapter"]
        print(
            f"| {row['problem']} | {b['best_speedup']} | {a['best_speedup']} | "
            f"{b['statuses'].get('ok', 0)}/{b['evaluations']} | {a['statuses'].get('ok', 0)}/{a['evaluations']} | "
            f"{b['dropped']}/{a['dropped']} |"
        )


if __name__ == "__main__":
    main()
