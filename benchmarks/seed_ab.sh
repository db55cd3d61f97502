#!/usr/bin/env bash
# A/B of seed kernels on one harvested problem, on the GPU: each SEED file (a module defining ModelNew) judged by
# `ksmith eval --json` in the order given (repeat a seed, e.g. A B B A, to see the spread), one line each:
# seed, status, speedup over torch.compile, the candidate's time in ms. JSON verdicts go to $OUT/seed_ab/.
# Usage: bash benchmarks/seed_ab.sh PROBLEM.py SEED.py [SEED.py ...]
# (docs/benchmarks.md §11g made its problems with `ksmith harvest MODEL -o DIR --device cpu`, MODEL the 8x1
# model file benchmarks/compile_llama.py writes, and its variants by editing one launch of the harvested seed.)
set -u
problem=$1; shift
dir="${OUT:-.}/seed_ab"
mkdir -p "$dir"
for seed in "$@"; do
  i=$(ls "$dir" | wc -l)
  out="$dir/$i-$(basename "$seed" .py).json"
  timeout 120 ksmith eval "$problem" "$seed" --json > "$out" 2> "${out%.json}.err"
  python - "$out" "$seed" <<'PY'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
except ValueError:
    v = {"status": "no verdict"}
print(sys.argv[2], v.get("status"), v.get("speedup_vs_compile"), v.get("runtime_ms"))
PY
done
