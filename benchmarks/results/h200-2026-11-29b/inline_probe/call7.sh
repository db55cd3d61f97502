#!/bin/bash
# issue 13: why the down + residual seed's triton_op fails opcheck at static shapes
. benchmarks/device_setup.sh
export PYTHONUNBUFFERED=1
python - <<'P'
import sys; sys.path.insert(0, "benchmarks")
from compile_llama import MODEL_FILE, FULL
open("/tmp/model.py", "w").write(MODEL_FILE.format(config=FULL, dtype="bfloat16", batch=8, seq=1))
P
timeout 120 ksmith harvest /tmp/model.py -o /tmp/p --device cpu > $OUT/harvest.log 2>&1
P=$(python -c "
import json; d=json.load(open('/tmp/p/harvest.json'))
print(next(p['file'] for p in d['problems'] if p['ops']==['linear','add'] and p['inputs'][0]['shape'][-1]==8192))")
echo "problem $P"
timeout 90 ksmith evolve /tmp/p/$P --budget 1 --device cuda --run-dir /tmp/r --json > $OUT/evolve.json 2> $OUT/evolve.err
timeout 30 ksmith export /tmp/r --target library -o /tmp/lib > /dev/null 2>&1
timeout 90 python benchmarks/inline_check_probe.py /tmp/lib/* 2>&1 | grep -v "^WARNING\|UserWarning\|warn" | tail -25
