#!/bin/bash
# The evaluator's throughput workload (docs/benchmarks.md §1b) on the device, traced: per-evaluation phases,
# the timed loops' parts, the after-call checks' parts, the reference process's steps, the memory gate and
# the GPU lock's timeline. Usage: bash benchmarks/throughput_gpu.sh NAME [WORKERS...]; results under
# $OUT/throughput/NAME_*.
set -u
. benchmarks/device_setup.sh
name=${1:-run}; shift || true
workers=${*:-24}
mkdir -p "$OUT/throughput"
nvidia-smi --query-gpu=name,memory.free,memory.total,clocks.max.sm --format=csv > "$OUT/throughput/${name}_gpu.txt"
for w in $workers; do
  python benchmarks/eval_protocol.py --skip references --skip stability --workers "$w" --device cuda \
    --out "$OUT/throughput/${name}_${w}workers.json" > "$OUT/throughput/${name}_${w}workers.log" 2>&1
  grep -v "^  \[" "$OUT/throughput/${name}_${w}workers.log" | tail -40
done
