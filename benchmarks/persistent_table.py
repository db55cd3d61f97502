"""The table of persistent_gpu.sh's evaluations: per problem and tile, TMA alone beside TMA made persistent at
each number of programs per SM (runtime with its spread, vs torch.compile with the reference's spread, status
and reasons, and the speed relative to TMA alone).

    python benchmarks/persistent_table.py OUT/evals
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    rows: dict[tuple[str, str], dict[str, dict]] = {}
    for path in sorted(Path(sys.argv[1]).glob("*.json")):
        problem, form, label = path.stem.split(".", 2)
        try:
            verdict = json.loads(path.read_text())
        except json.JSONDecodeError:
            verdict = {"status": "no verdict", "error": (path.with_suffix(".err").read_text() or "")[-200:]}
        rows.setdefault((problem, label), {})[form] = verdict

    def cell(v: dict | None) -> str:
        if not v:
            return "-"
        if v.get("status") != "ok":
            return f"{v.get('status')}: {str(v.get('error') or '')[:60]}"
        spread = (v.get("runtime") or {}).get("spread") or 0.0
        ref = (v.get("reference_compile") or {}).get("spread") or 0.0
        flags = ",".join(r.split(":")[0] for r in v.get("reasons") or [])
        vs = v.get("speedup_vs_compile")
        text = (
            f"{v['runtime_ms']:.4f} ms ({spread:.1%}), {vs:.3f}x (ref {ref:.1%})"
            if vs
            else f"{v['runtime_ms']:.4f}"
        )
        return text + (f" [{flags}]" if flags else "")

    persistent_forms = sorted({f for forms in rows.values() for f in forms if f != "tma"})
    print("| problem | tile | TMA | " + " | ".join(f"TMA + {f}" for f in persistent_forms) + " |")
    print("|---|---|---|" + "---|" * len(persistent_forms))
    for (problem, label), forms in sorted(rows.items()):
        tma = forms.get("tma")
        cells = []
        for form in persistent_forms:
            v = forms.get(form)
            ratio = ""
            if tma and v and tma.get("status") == v.get("status") == "ok":
                ratio = f"; {tma['runtime_ms'] / v['runtime_ms']:.3f}x of TMA's speed"
            cells.append(cell(v) + ratio)
        print(f"| {problem} | {label} | {cell(tma)} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
