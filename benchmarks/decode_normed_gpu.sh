#!/usr/bin/env bash
# The Llama decode step (docs/benchmarks.md section 11e) with each RMSNorm inside the kernel of the projections
# it feeds: harvest the 4-layer model at 8x1, evolve the normed q/k/v groups (with and without the residual add
# before the norm), the normed gate/up pair, the plain groups and the GEMM + residual regions, export them into
# one library (where a normed and a plain group overlap, the one that saved more on its own problem is swapped)
# and time the model against Inductor (compile_llama.py; its harvest also writes each region's time share). Then the
# GPU tests of the normed groups and of the time shares. Files under $OUT:
# compile_llama.log, results.json, bench.log, harvest.json, lineage.txt, library.tgz, gpu_test.log.
# BUDGET (8), BENCH_SECONDS (150) and ROUNDS (5) set the run; LIMIT (420 s) caps the model step. TESTS="" skips
# the tests (up to 300 s more; together they outlast one 600 s device call, so run them in a call of their own).
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh
export PYTHONUNBUFFERED=1
W=/tmp/decode_normed
timeout ${LIMIT:-420} python benchmarks/compile_llama.py --shapes 8x1 --budget ${BUDGET:-8} --parallel 8 \
  --only '_matmuls_to_pow_mean_add_rsqrt_mul_linear' '_matmuls_add_to_pow_mean_rsqrt_mul_linear$' '_matmul_linear_add$' \
    ${PLAIN-'_matmuls_linear$' '_matmuls_linear_silu_mul$'} \
  --bench-seconds ${BENCH_SECONDS:-150} --rounds ${ROUNDS:-5} --out $W 2>&1 | tee $OUT/compile_llama.log
cp $W/results.json $W/b8_s1/bench.log $W/b8_s1/problems/harvest.json $OUT/ 2>/dev/null
for run in $W/b8_s1/bench/runs/*; do echo "== $(basename $run)"; python benchmarks/lineage.py $run; done > $OUT/lineage.txt 2>&1
tar czf $OUT/library.tgz -C $W/b8_s1 library 2>/dev/null
if [ -n "${TESTS-1}" ]; then
  # Unbuffered and verbose, so a test stopped by the timeout leaves its name in the log (they took 230 s on an H200).
  timeout 300 python -u -m pytest -v -m gpu tests/compile/test_inline_gpu.py tests/compile/test_time_share.py \
    -k "norms or attributed" -p no:cacheprovider > $OUT/gpu_test.log 2>&1; tail -5 $OUT/gpu_test.log
fi
