"""Evolve imported upstream kernels on a GPU, patch them, and check the patch there (issue 14, docs/upstream.md).

For each problem file made by ``ksmith import`` (SGLang's or LMDeploy's kernel as the reference):

1. ``ksmith evolve PROBLEM --device cuda --budget B`` (the reference is upstream's own Triton kernel);
2. ``ksmith patch PROJECT RUN -o PATCH --source SRC`` (SRC: the upstream tree, a wheel, or a directory with
   the unpacked kernel module and the package's ``dist-info``);
3. ``python -m ksmith_upstream.standalone PATCH`` (the generated test under pytest, and on a GPU the generated
   benchmark: upstream vs evolved per shape, each call's GPU time in a CUDA graph and its time with the launch);
4. where that benchmark found shapes the evolved path makes slower: ``ksmith patch ... --gate-from
   PATCH/check.json -o PATCH-gated`` (the fast path only over the measured range where it was not slower) and
   the same check of that patch.

Prints a table last and writes OUT/results.json with each step's exit code, the run's best speedup over
upstream, and the standalone check's per-shape timings::

    python benchmarks/upstream_gpu.py --out OUT --source sglang=SRC_SG --source lmdeploy=SRC_LM \\
        sglang:work/sglang/normal_decode_set_metadata.py lmdeploy:work/lmdeploy/fused_single_group_topk_router.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def step(command: list[str], log: Path) -> tuple[int, float]:
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT)
    return code, time.monotonic() - started


def best_of(run_dir: Path) -> dict:
    """The run's summary (``ksmith show --json``), or what went wrong reading it."""
    found = subprocess.run(
        ["ksmith", "show", str(run_dir), "--json"], capture_output=True, text=True, check=False
    )
    try:
        return json.loads(found.stdout)
    except json.JSONDecodeError:
        return {"error": (found.stderr or found.stdout).strip()[-300:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("problems", nargs="+", help="PROJECT:PROBLEM_FILE")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--source", action="append", default=[], help="PROJECT=DIR (upstream sources)")
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args(argv)

    sources = dict(item.split("=", 1) for item in args.source)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "steps.log"
    rows = []
    for item in args.problems:
        project, problem = item.split(":", 1)
        name = Path(problem).stem
        run_dir, patch_dir = args.out / f"run-{name}", args.out / f"patch-{name}"
        row: dict = {"project": project, "problem": name}
        row["evolve_rc"], row["evolve_s"] = step(
            [
                "ksmith",
                "evolve",
                problem,
                "--device",
                args.device,
                "--budget",
                str(args.budget),
                "--parallel",
                str(args.parallel),
                "--run-dir",
                str(run_dir),
            ],
            log,
        )
        row["run"] = best_of(run_dir)

        source = ["--source", sources[project]] if project in sources else []
        patch = ["ksmith", "patch", project, str(run_dir), *source, "-o"]
        row["patch_rc"], _ = step([*patch, str(patch_dir)], log)
        if row["patch_rc"] == 0:
            check = ["python", "-m", "ksmith_upstream.standalone", str(patch_dir)]
            if args.device == "cpu":
                check += ["--device", "cpu", "--cases", "3"]
            row["check_rc"], row["check_s"] = step(check, log)
            check_file = patch_dir / "check.json"
            row["check"] = json.loads(check_file.read_text()) if check_file.exists() else None
            slower = ((row["check"] or {}).get("bench") or {}).get("regressions")
            if slower and args.device != "cpu":
                # Shapes where the evolved path measured slower: patch again with the fast path gated to the
                # measured range where it was not (``ksmith patch --gate-from``), and check that patch.
                gated = args.out / f"patch-{name}-gated"
                row["gated_patch_rc"], _ = step([*patch, str(gated), "--gate-from", str(check_file)], log)
                if row["gated_patch_rc"] == 0:
                    row["gated_check_rc"], _ = step(
                        ["python", "-m", "ksmith_upstream.standalone", str(gated)], log
                    )
                    gated_check = gated / "check.json"
                    row["gated_check"] = json.loads(gated_check.read_text()) if gated_check.exists() else None
        rows.append(row)
        (args.out / "results.json").write_text(json.dumps(rows, indent=2, default=str))

    print(f"\n{'problem':<34}{'evolve':>7}{'patch':>6}{'check':>6}{'gated':>6}  best")
    for row in rows:
        best = row["run"].get("best") or {}
        print(
            f"{row['problem']:<34}{row['evolve_rc']:>7}{row['patch_rc']:>6}{row.get('check_rc', '-'):>6}"
            f"{row.get('gated_check_rc', '-'):>6}  {best.get('speedup', '-')} vs upstream"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
