"""Print each run's evaluations in order: id, parents, status, speedup over torch.compile and the edit that made
it (read from the run's SQLite store; what the lineage files under benchmarks/results hold).

    python benchmarks/lineage.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path


def lineage(run: Path) -> list[str]:
    with sqlite3.connect(f"file:{run / 'run.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT c.id, c.parent_ids, c.edit_kind, c.edit, v.status, v.speedup_vs_compile FROM candidates c "
            "LEFT JOIN verdicts v ON v.candidate_id = c.id ORDER BY c.seq"
        ).fetchall()
    lines = [f"== {run.name}: {sum(1 for r in rows if r[4])} evaluations"]
    for cid, parents, kind, edit, status, vs_compile in rows:
        speed = f"{vs_compile:.3f}" if vs_compile else "-"
        parents = ",".join(p[:8] for p in json.loads(parents))
        lines.append(f"   {cid[:8]} <- [{parents}] {status or 'unjudged':12} {speed:>6} {kind}: {edit}")
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    for arg in argv:
        run = Path(arg)
        if not (run / "run.sqlite").is_file():
            print(f"lineage.py: {run} holds no run.sqlite", file=sys.stderr)
            return 2
        print("\n".join(lineage(run)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
