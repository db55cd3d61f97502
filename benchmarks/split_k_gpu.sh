#!/usr/bin/env bash
# The split_k edit on the GPU: KernelBench level 1 6_Matmul_with_large_K_dimension_ seeded from Inductor, the
# seed and its split-K variants (benchmarks/split_k_variants.py) judged by `ksmith eval --json`, then
# `ksmith evolve --budget 16` from the seed. Results go to $OUT (default ./split_k_out).
#
#   KERNELBENCH=~/KernelBench/KernelBench bash benchmarks/split_k_gpu.sh
#
# KERNELBENCH: a directory holding KernelBench's level1/ (not shipped with ksmith). Where dependency wheels
# were carried in .whl/ (a machine without network), they are installed first.
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh
OUT=${OUT:-$PWD/split_k_out}
mkdir -p "$OUT" /tmp/sk
P=$(realpath "${KERNELBENCH:-.carry/kernelbench}/level1/6_Matmul_with_large_K_dimension_.py")
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; git rev-parse --short HEAD 2>/dev/null
  date -u; } > "$OUT/env.txt"
timeout 200 ksmith seed "$P" --from inductor -o /tmp/sk/seed.py --device cuda --no-check > "$OUT/seed.log" 2>&1
python benchmarks/split_k_variants.py /tmp/sk/seed.py /tmp/sk 2>&1 | tee "$OUT/variants.log"
for f in ${VARIANTS:-seed split4 split16 split32 split64}; do
  [ -f /tmp/sk/$f.py ] && timeout 100 ksmith eval "$P" /tmp/sk/$f.py --device cuda --json > "$OUT/eval_$f.json" 2> "$OUT/eval_$f.err"
done
(cd /tmp/sk && timeout ${EVOLVE_S:-240} ksmith evolve "$P" --seed /tmp/sk/seed.py --budget 16 --device cuda \
  --parallel 4 --json > "$OUT/evolve.json" 2> "$OUT/evolve.err")
python - <<'PY'
import glob, json, os
out = os.environ.get("OUT", "split_k_out")
for path in sorted(glob.glob(f"{out}/eval_*.json")):
    try:
        v = json.load(open(path))
    except Exception as exc:  # noqa: BLE001 - a missing or cut verdict is reported, not fatal
        print(os.path.basename(path), "unreadable", exc)
        continue
    print(f"{os.path.basename(path):22} {str(v.get('status')):10} ms={v.get('runtime_ms')} "
          f"eager_ms={v.get('reference_ms')} x_eager={v.get('speedup')} x_compile={v.get('speedup_vs_compile')}")
PY
tail -3 "$OUT/evolve.err"
