#!/usr/bin/env bash
# Seeds from Inductor with each kind of GEMM template (`--gemm-templates inductor|ksmith`) on nine GEMM and
# convolution problems: the shipped suite's matmul, matmul_bias_relu, matmul_gelu, bmm and conv2d_bias_relu, and
# KernelBench's level-1 1 and 17 and level-2 56 and 76. Each seed is judged once by `ksmith bench`; rows go to
# $OUT/{inductor,ksmith}/results.jsonl (docs/benchmarks.md section 6d). With EVOLVE=1, the suite's five are
# evolved instead (budget 16) from Inductor-template seeds, rows in $OUT/evolve-suite/results.jsonl; with
# EVOLVE=l2, KernelBench level 2's 14 and 18 (rows in $OUT/evolve-l2/results.jsonl).
#
#   KERNELBENCH=~/KernelBench/KernelBench bash benchmarks/gemm_templates.sh
#   EVOLVE=1 bash benchmarks/gemm_templates.sh
#   EVOLVE=1 BUDGET=32 ONLY="matmul bmm" bash benchmarks/gemm_templates.sh   # a subset, another budget
#   KERNELBENCH=~/KernelBench/KernelBench EVOLVE=l2 bash benchmarks/gemm_templates.sh
#
# KERNELBENCH: a directory holding KernelBench's level1/ and level2/ (not shipped with ksmith). Where dependency
# wheels were carried in .whl/ (a machine without network), they are installed first.
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh
OUT=${OUT:-$PWD/gemm_templates_out}
P=plugins/ksmith_problems/problems K=${KERNELBENCH:-.carry/kernelbench}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; git rev-parse --short HEAD 2>/dev/null
  date -u; } > "$OUT/env.txt"
SUITE="$P/matmul/matmul.py $P/matmul/matmul_bias_relu.py $P/matmul/matmul_gelu.py $P/matmul/bmm.py
  $P/pooling/conv2d_bias_relu.py"
KB="$K/level1/1_Square_matrix_multiplication_.py $K/level1/17_Matmul_with_transposed_B.py
  $K/level2/56_Matmul_Sigmoid_Sum.py $K/level2/76_Gemm_Add_ReLU.py"
KB_L2="$K/level2/14_Gemm_Divide_Sum_Scaling.py $K/level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py"

# bench NAME TEMPLATES FILES [ksmith bench options...]: the files copied into a folder of their own (no seed
# beside them), benched with Inductor seeds of that template kind; rows in $OUT/NAME/results.jsonl.
bench() {
  local name=$1 templates=$2 files=$3 dir
  shift 3
  dir=$(mktemp -d)
  cp $files "$dir/"
  ksmith bench "$dir" --seed-from inductor --gemm-templates "$templates" --device cuda --parallel 4 \
    -o "$OUT/$name" --json "$@" > "$OUT/$name.log" 2>&1
  echo "bench $name rc=$?"
}

case "${EVOLVE:-0}" in
  l2) bench evolve-l2 inductor "$KB_L2" --evolve --budget 16 ;;
  1) if [ -n "${ONLY:-}" ]; then SUITE=$(for f in $SUITE; do for n in $ONLY; do [ "$(basename $f .py)" = "$n" ] && echo $f; done; done); fi
     bench evolve-suite inductor "$SUITE" --evolve --budget "${BUDGET:-16}" ;;
  *) for T in ${TEMPLATES:-inductor ksmith}; do bench "$T" "$T" "$SUITE $KB"; done ;;
esac
[ "${EVOLVE:-0}" = 0 ] || exit 0
python - "$OUT" <<'PY'
import json, math, sys
from pathlib import Path

out = Path(sys.argv[1])
rows = {}
for kind in ("inductor", "ksmith"):
    path = out / kind / "results.jsonl"
    if path.is_file():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            rows.setdefault(row["problem"], {})[kind] = row
print(f"{'problem':34} {'inductor vs compile':>20} {'ksmith vs compile':>18}")
for name, kinds in rows.items():
    cells = [kinds.get(k, {}).get("speedup_vs_compile") for k in ("inductor", "ksmith")]
    print(f"{name:34} " + " ".join(f"{c:>19.3f}x" if c else f"{'-':>20}" for c in cells))
for kind in ("inductor", "ksmith"):
    values = [k[kind]["speedup_vs_compile"] for k in rows.values() if k.get(kind, {}).get("speedup_vs_compile")]
    if values:
        print(f"{kind}: geomean {math.exp(sum(map(math.log, values)) / len(values)):.3f}x over {len(values)}")
PY
