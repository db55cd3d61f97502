"""Write the online-softmax seed with the ``whole_row`` edit at larger blocks and more warps, to see whether a
32768-wide row held in registers pays (benchmarks/whole_row_gpu.sh, VARIANTS=1).

    python benchmarks/whole_row_variants.py OUT_DIR
"""

import sys
from pathlib import Path

from ksmith_mutate.edits import possible_edits

SEED = Path(__file__).resolve().parents[1] / "plugins/ksmith_problems/problems/softmax/online_softmax.seed.py"
out = Path(sys.argv[1])
(edit,) = [e for e in possible_edits(SEED.read_text(), ("whole_row",))]
for warps in (8, 16, 32):
    text = edit.source.replace("), 8192), num_warps=4)", f"), 32768), num_warps={warps})")
    assert text != edit.source
    (out / f"online_softmax_32768_w{warps}.py").write_text(text)
print("written:", sorted(p.name for p in out.glob("online_softmax_32768_*.py")))
