#!/usr/bin/env bash
# The suite's two attention problems (fp16, batch 8, 16 heads, seq 2048, head dim 64; non-causal and causal)
# evolved by the mutate proposer from their hand-written flash-attention seeds, budget 16, on one GPU. The
# structural edits of ksmith_mutate.attention (exp2_softmax, diagonal_split, attention_config) are what moves
# them (docs/benchmarks.md section 6e). Rows go to $OUT/evolve-attention/results.jsonl, env to $OUT/env.txt.
#
#   bash benchmarks/attention_edits.sh            # BUDGET=16 by default
#
# Where dependency wheels were carried in .whl/ (a machine without network), they are installed first.
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh
OUT=${OUT:-$PWD/attention_edits_out}
P=plugins/ksmith_problems/problems/attention
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; git rev-parse --short HEAD 2>/dev/null
  date -u; } > "$OUT/env.txt"
dir=$(mktemp -d)
cp $P/attention.py $P/attention.seed.py $P/causal_attention.py $P/causal_attention.seed.py "$dir/"
ksmith bench "$dir" --evolve --budget "${BUDGET:-16}" --device cuda --parallel 4 -o "$OUT/evolve-attention" \
  --json > "$OUT/evolve-attention.log" 2>&1
echo "bench rc=$?"
python - "$OUT/evolve-attention/results.jsonl" <<'PY'
import json, sys

print(f"{'problem':18} {'seed vs compile':>16} {'best vs compile':>16} {'spread best/compile':>20} {'evals':>6} status")
for line in open(sys.argv[1]):
    r = json.loads(line)
    spread = f"{r.get('runtime_spread') or 0:.2%}/{r.get('reference_compile_spread') or 0:.2%}"
    print(f"{r['problem']:18} {r.get('seed_speedup_vs_compile') or 0:>15.3f}x {r.get('speedup_vs_compile') or 0:>15.3f}x "
          f"{spread:>20} {r.get('evaluations'):>6} {r['status']}")
PY
