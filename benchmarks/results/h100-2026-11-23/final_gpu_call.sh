#!/usr/bin/env bash
# The last device call of the session: cuda backend GPU tests and evaluations, memory admission bench.
set -u
python -m pip install -q --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi -L; which nvcc; nvcc --version | tail -2
start=$(date +%s)
timeout 230 python -m pytest -m gpu tests/native -q -rs -p no:cacheprovider > $OUT/native_gpu.log 2>&1; echo "native tests rc=$? in $(( $(date +%s) - start )) s"
tail -15 $OUT/native_gpu.log
P=plugins/ksmith_problems/problems
for n in elementwise/relu softmax/softmax; do
  b=$(basename $n)
  timeout 60 ksmith eval $b $P/$n.cuda.seed.py --backend cuda --device cuda --json > $OUT/eval_${b}_cuda.json 2>$OUT/eval_${b}_cuda.err
  timeout 60 ksmith eval $b $P/$n.seed.py --device cuda --json > $OUT/eval_${b}_triton.json 2>$OUT/eval_${b}_triton.err
done
python - <<'PY'
import json, os
out = os.environ["OUT"]
for b in ("relu", "softmax"):
    for k in ("cuda", "triton"):
        try:
            v = json.load(open(f"{out}/eval_{b}_{k}.json"))
            v = v.get("verdict", v)
            print(b, k, v.get("status"), v.get("runtime_ms"), v.get("speedup"), v.get("speedup_vs_compile"), (v.get("reasons") or [])[:1])
        except Exception as e:
            print(b, k, "no result", e, open(f"{out}/eval_{b}_{k}.err").read()[-300:])
PY
echo "elapsed $(( $(date +%s) - start )) s"
timeout $(( 420 - ($(date +%s) - start) )) python benchmarks/memory_admission.py --per-kind 1 --out $OUT/memory_admission.json > $OUT/memory_admission.log 2>&1; echo "memory rc=$?"
tail -12 $OUT/memory_admission.log
