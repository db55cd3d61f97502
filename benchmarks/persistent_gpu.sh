#!/usr/bin/env bash
# The `persistent` edit on the GPU (docs/benchmarks.md §5c). First every variant persistent_variants.py writes
# (the suite's GEMM seeds with TMA loads at a large tile, with and without the persistent edit) judged by
# `ksmith eval`, JOBS at a time (the evaluator's GPU lock keeps timed loops exclusive across processes); then,
# with EVOLVE=1, the matmul directory evolved from its shipped seeds (suite_evolve.sh, BUDGET, DEADLINE).
# Resumable: an evaluation whose JSON is written is not repeated. EVAL_DEADLINE bounds the evaluations (s).
#
#   WORK=out bash benchmarks/persistent_gpu.sh
#   EVOLVE=1 BUDGET=16 WORK=out bash benchmarks/persistent_gpu.sh
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh
WORK=${WORK:-$PWD/persistent_out}
export WORK
mkdir -p "$WORK/variants" "$WORK/evals"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; git rev-parse --short HEAD
  date -u; } >> "$WORK/env.txt"
if [ "${VARIANTS:-1}" = 1 ]; then
  python benchmarks/persistent_variants.py --out "$WORK/variants" ${PROBLEMS:-matmul matmul_bias_relu} \
    > "$WORK/variants.txt"
  ls "$WORK"/variants/*.py | timeout "${EVAL_DEADLINE:-300}" xargs -P "${JOBS:-4}" -I{} sh -c '
    f={}; b=$(basename "$f" .py); p=${b%%.*}
    [ -s "$WORK/evals/$b.json" ] || ksmith eval "plugins/ksmith_problems/problems/matmul/$p.py" "$f" --device cuda \
      --json > "$WORK/evals/$b.json" 2> "$WORK/evals/$b.err"'
  python benchmarks/persistent_table.py "$WORK/evals" | tee "$WORK/evals_table.md"
fi
if [ "${EVOLVE:-0}" = 1 ]; then
  SUITE=matmul WORK="$WORK/evolve" bash benchmarks/suite_evolve.sh
fi
