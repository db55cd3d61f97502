#!/bin/bash
# The throughput workload twice on one machine: the working tree as it is, then with PATCH reversed (the
# same workload and reference cache conditions; each run starts its own reference processes and caches).
# Usage: bash benchmarks/throughput_ab.sh PATCH WORKERS; results under $OUT/throughput/{new,base}_*.
set -u
patch=$1; workers=${2:-24}
bash benchmarks/throughput_gpu.sh new "$workers"
git apply -R "$patch" || patch -R -p1 < "$patch"
bash benchmarks/throughput_gpu.sh base "$workers"
git apply "$patch" || patch -p1 < "$patch"
