#!/usr/bin/env bash
# The split_row edit on the GPU (docs/benchmarks.md section 4d): its GPU tests, then each looped row-reduction
# seed of the suite and the seed split over 4, 8 and 16 programs a row, one `ksmith eval --json` each into
# $OUT/evals.tgz. ROWS="" skips the evals; TESTS="" skips the tests.
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh
if [ -n "${TESTS-1}" ]; then
  timeout 300 python -m pytest -q -m gpu tests/mutate/test_split_row.py -p no:cacheprovider 2>&1 | tail -3 | tee $OUT/gpu_tests.log
fi
mkdir -p /tmp/sr /tmp/sr_evals
P=plugins/ksmith_problems/problems
for p in ${ROWS-softmax/online_softmax normalization/rmsnorm normalization/layernorm reduction/l2_norm}; do
  n=$(basename $p)
  python -c "
from pathlib import Path; from ksmith_mutate.edits import possible_edits
for e in possible_edits(Path('$P/$p.seed.py').read_text(), ('split_row',)):
    Path('/tmp/sr/${n}_split%d.py' % e.detail['split']).write_text(e.source)
    # The same without the output pass's second load of the slice (x still holds it): what a reuse would buy.
    again = '        x = tl.load(x_row + cols, mask=mask, other=float(\"-inf\"))\n'
    if '$n' == 'online_softmax' and again in e.source:
        Path('/tmp/sr/${n}_split%dreuse.py' % e.detail['split']).write_text(e.source.replace(again, '', 1))"
  for c in seed split4 split8 split16 ${EXTRA-}; do
    [ -f /tmp/sr/${n}_$c.py ] || [ $c = seed ] || continue
    f=$P/$p.seed.py; [ $c != seed ] && f=/tmp/sr/${n}_$c.py
    timeout 120 ksmith eval $P/$p.py $f --device cuda --json > /tmp/sr_evals/eval_${n}_$c.json 2>/dev/null
    python -c "
import json; v = json.load(open('/tmp/sr_evals/eval_${n}_$c.json')); r = v.get('runtime') or {}; c = v.get('reference_compile') or {}
print('$n', '$c', v['status'], round(v['runtime_ms'] or 0, 4), 'x_compile', v.get('speedup_vs_compile'),
      'roof', v.get('roofline_fraction'), 'spread', r.get('spread'), 'compile_spread', c.get('spread'), v.get('reasons'))"
  done
done
tar czf $OUT/evals.tgz -C /tmp/sr_evals .
