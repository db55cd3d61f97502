"""Write split-K variants of a seed (benchmarks/split_k_gpu.sh): the split_k edit at 4 and 16, then its x2 steps up
to 64, as SEED_DIR/splitN.py.

    python benchmarks/split_k_variants.py SEED.py OUT_DIR
"""

import sys
from pathlib import Path

from ksmith_mutate.edits import possible_edits

seed = Path(sys.argv[1]).read_text()
out = Path(sys.argv[2])
written = {e.detail["split_k"]: e.source for e in possible_edits(seed, ("split_k",))}
source = written.get(16)
while source is not None and max(written) < 64:
    up = [e for e in possible_edits(source, ("split_k",)) if e.detail["direction"] == "up"]
    source = up[0].source if up else None
    if source is not None:
        written[up[0].detail["split_k"]] = source
for value, text in written.items():
    (out / f"split{value}.py").write_text(text)
print("split variants:", sorted(written))
