#!/usr/bin/env bash
# The whole_row edit on the GPU: each row-reduction seed of the suite and the same seed with the edit, one
# `ksmith eval --json` each into $OUT (docs/benchmarks.md section 4c). ROWS="" skips them; VARIANTS=1 adds the
# online-softmax variants of benchmarks/whole_row_variants.py.
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh
mkdir -p /tmp/wr
P=plugins/ksmith_problems/problems
for p in ${ROWS-normalization/rmsnorm normalization/layernorm softmax/online_softmax reduction/l2_norm}; do
  n=$(basename $p)
  python -c "
import sys; from pathlib import Path; from ksmith_mutate.edits import possible_edits
(e,)=[e for e in possible_edits(Path('$P/$p.seed.py').read_text(), ('whole_row',))]
Path('/tmp/wr/$n.py').write_text(e.source)"
  for c in seed whole_row; do
    f=$P/$p.seed.py; [ $c = whole_row ] && f=/tmp/wr/$n.py
    timeout 120 ksmith eval $P/$p.py $f --device cuda --json > $OUT/eval_${n}_$c.json 2>/dev/null
    python -c "import json;v=json.load(open('$OUT/eval_${n}_$c.json'));print('$n','$c',v['status'],round(v['runtime_ms'],4),'x_compile',round(v['speedup_vs_compile'],3),'roof',v.get('roofline_fraction'))"
  done
done
# VARIANTS=1: the online-softmax seed's whole_row edit with blocks up to 32768 and 8, 16 or 32 warps.
if [ -n "${VARIANTS:-}" ]; then
  python benchmarks/whole_row_variants.py /tmp/wr
  for f in /tmp/wr/online_softmax_32768_*.py; do
    n=$(basename $f .py)
    timeout 120 ksmith eval $P/softmax/online_softmax.py $f --device cuda --json > $OUT/eval_$n.json 2>/dev/null
    python -c "import json;v=json.load(open('$OUT/eval_$n.json'));print('$n',v['status'],round(v['runtime_ms'] or 0,4),'x_compile',v.get('speedup_vs_compile'),'roof',v.get('roofline_fraction'),v.get('reasons'))"
  done
fi
