#!/usr/bin/env bash
# The shipped suite evolved with the mutate proposer at the current protocol (docs/benchmarks.md section 4c):
# `ksmith bench --evolve` over the problem directories named in SUITE (default: the 29 memory-bound problems),
# then bench_table.py over its rows. Resumable: run it again with the same WORK to go on after a device call's
# time limit (the bench skips problems whose row is written); RESUME, if set, is a results.jsonl copied into
# a WORK that does not have one yet (a fresh machine after the last one was given back).
#
#   BUDGET=16 WORK=suite-out bash benchmarks/suite_evolve.sh
#   SUITE="matmul attention" bash benchmarks/suite_evolve.sh        # the compute-bound directories
#
# Where dependency wheels were carried in .whl/ (a machine without network), they are installed first.
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh
WORK=${WORK:-$PWD/suite_evolve_out}
mkdir -p "$WORK"
if [ -n "${RESUME:-}" ] && [ -f "$RESUME" ] && [ ! -f "$WORK/results.jsonl" ]; then
  cp "$RESUME" "$WORK/results.jsonl"
fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; git rev-parse --short HEAD
  date -u; } >> "$WORK/env.txt"
DIRS=""
for d in ${SUITE:-elementwise loss normalization pooling/avgpool2d.py pooling/maxpool2d.py quantization reduction scan softmax}; do
  DIRS="$DIRS plugins/ksmith_problems/problems/$d"
done
timeout "${DEADLINE:-540}" ksmith bench $DIRS --evolve --budget "${BUDGET:-16}" --parallel "${PARALLEL:-8}" \
  --device cuda --json -o "$WORK" > "$WORK/bench.json" 2> "$WORK/bench.err"
echo "bench exit $?"
python benchmarks/bench_table.py "$WORK/results.jsonl"
