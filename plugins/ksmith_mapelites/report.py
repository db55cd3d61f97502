"""The archive map of ``ksmith report``: one SVG grid per island, drawn from the run's ``archive`` records.

Contributed through ``ksmith_report_sections``; self-contained HTML (inline CSS and SVG, nothing fetched).
"""

from __future__ import annotations

import html
from typing import Any

_CSS = (
    "<style>.islands { display: flex; flex-wrap: wrap; gap: 16px; } "
    ".island h3 { font-size: 14px; margin: 6px 0; }</style>"
)


def archive_map_html(records: list[dict[str, Any]]) -> str:
    """One grid per island from the run's ``archive`` records, projected onto block size and num_warps."""
    if not records:
        return "<p>No archive records in this run.</p>"
    islands: dict[int, dict[tuple[int, ...], dict[str, Any]]] = {}
    for record in records:
        islands.setdefault(int(record.get("island", 0)), {})[tuple(record.get("cell") or ())] = record
    scores = [float(r.get("score") or 0.0) for grid in islands.values() for r in grid.values()]
    low, high = min(scores), max(scores)
    blocks = sorted({_block_key(r) for grid in islands.values() for r in grid.values()})
    warps = sorted({_warps_of(r) for grid in islands.values() for r in grid.values()})
    maps = [_island_map(island, islands[island], blocks, warps, low, high) for island in sorted(islands)]
    filled = sum(len(grid) for grid in islands.values())
    migrated = sum(1 for r in records if r.get("reason") == "migrated")
    intro = (
        f'<p class="sub">{filled} filled cells over {len(islands)} islands ({migrated} placements by migration). '
        "Each map projects an island's grid onto block size (elements per program) and num_warps; a square "
        "shows the best score among the elites there (speedup vs eager) and, when more than one, how many "
        "elites differ in the other descriptors (stages, tl.dot, launches, memory access).</p>"
    )
    return _CSS + intro + '<div class="islands">' + "".join(maps) + "</div>" + _colour_legend(low, high)


def _block_key(record: dict[str, Any]) -> int:
    block = (record.get("descriptors") or {}).get("block")
    return int(block) if isinstance(block, (int, float)) else 0


def _warps_of(record: dict[str, Any]) -> int:
    warps = (record.get("descriptors") or {}).get("num_warps")
    return int(warps) if isinstance(warps, (int, float)) else 0


def _island_map(
    island: int,
    grid: dict[tuple[int, ...], dict[str, Any]],
    blocks: list[int],
    warps: list[int],
    low: float,
    high: float,
) -> str:
    size, left, top = 46, 70, 10
    width, height = max(left + size * len(blocks) + 10, 260), top + size * len(warps) + 46
    projected: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for record in grid.values():
        projected.setdefault((_block_key(record), _warps_of(record)), []).append(record)
    out = [f'<div class="island"><h3>island {island}: {len(grid)} cells</h3>']
    out.append(f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">')
    for j, w in enumerate(warps):
        y = top + size * (len(warps) - 1 - j)
        out.append(
            f'<text x="{left - 6}" y="{y + size / 2 + 4:.0f}" font-size="11" text-anchor="end">{w} warps</text>'
        )
        for i, b in enumerate(blocks):
            x = left + size * i
            records = projected.get((b, w))
            if not records:
                out.append(f'<rect x="{x}" y="{y}" width="{size - 2}" height="{size - 2}" fill="#f1f2f6"/>')
                continue
            top_record = max(records, key=lambda r: float(r.get("score") or 0.0))
            score = float(top_record.get("score") or 0.0)
            fill = _colour(0.5 if high <= low else (score - low) / (high - low))
            tip = _e(f"{top_record.get('candidate')}: {score:.3f}x, cell {top_record.get('cell')}")
            out.append(
                f'<rect x="{x}" y="{y}" width="{size - 2}" height="{size - 2}" fill="{fill}"><title>{tip}</title></rect>'
            )
            ink = "#fff" if (score - low) / ((high - low) or 1) < 0.55 else "#111"
            out.append(
                f'<text x="{x + size / 2 - 1:.0f}" y="{y + size / 2 + 1:.0f}" font-size="11" '
                f'text-anchor="middle" fill="{ink}">{_compact(score)}</text>'
            )
            if len(records) > 1:
                out.append(
                    f'<text x="{x + size - 5}" y="{y + size - 6}" font-size="9" text-anchor="end" '
                    f'fill="{ink}">&#215;{len(records)}</text>'
                )
    for i, b in enumerate(blocks):
        x = left + size * i + size / 2 - 1
        label = "run-time" if b == 0 else _short_int(b)
        out.append(
            f'<text x="{x:.0f}" y="{top + size * len(warps) + 14}" font-size="10" text-anchor="middle">{label}</text>'
        )
    out.append(
        f'<text x="{left + size * len(blocks) / 2:.0f}" y="{top + size * len(warps) + 34}" font-size="11" '
        'text-anchor="middle">block (elements per program)</text>'
    )
    out.append("</svg></div>")
    return "\n".join(out)


def _colour_legend(low: float, high: float) -> str:
    stops = "".join(
        f'<rect x="{60 + i * 24}" y="4" width="24" height="14" fill="{_colour(i / 9)}"/>' for i in range(10)
    )
    return (
        '<svg role="img" width="640" height="24" viewBox="0 0 640 24">'
        f'<text x="54" y="15" font-size="11" text-anchor="end">{_compact(low)}x</text>{stops}'
        f'<text x="306" y="15" font-size="11">{_compact(high)}x (score = speedup vs eager)</text></svg>'
    )


_PALETTE = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]


def _colour(t: float) -> str:
    """A viridis-like colour for ``t`` in [0, 1]."""
    t = min(max(t, 0.0), 1.0) * (len(_PALETTE) - 1)
    i = min(int(t), len(_PALETTE) - 2)
    a, b = _PALETTE[i], _PALETTE[i + 1]
    f = t - i
    return "#" + "".join(f"{round(a[k] + (b[k] - a[k]) * f):02x}" for k in range(3))


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _compact(value: float) -> str:
    """At most five characters, for a grid square: 1.25, 0.84, 7.4e-4."""
    if value == 0 or abs(value) >= 0.1:
        return f"{value:.2f}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _short_int(value: int) -> str:
    return f"{value // 1024}K" if value >= 1024 and value % 1024 == 0 else str(value)
