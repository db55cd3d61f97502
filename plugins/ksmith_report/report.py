"""The run report: one self-contained HTML file that tells what a run found and how.

``ksmith report RUN`` writes it. Everything is inline -- CSS, and SVG charts drawn here -- so the file opens
offline, attaches to an issue, and never fetches anything. It shows the best speedup over evaluations (and
over cumulative evaluation time), the lineage of the best candidate edit by edit, the sections installed
plugins add through ``ksmith_report_sections`` (the MAP-Elites archive map), failures by status, the generations
dropped before evaluation by reason, and the best kernel's source with its diff from the seed. Why the run
stopped is said in those terms. A run where nothing was accepted, or nothing beat the seed, or whose timings
come from the Triton interpreter on a CPU, says so at the top, with where to look.
"""

from __future__ import annotations

import difflib
import html
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ksmith_core.model import Candidate, ReportSection, Verdict
from ksmith_core.plugins import get_plugin_manager
from ksmith_core.store import RunStore, drop_words

REPORT_NAME = "report.html"


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the report of the run in ``run_dir`` to ``out`` (default ``RUN_DIR/report.html``)."""
    run_dir = Path(run_dir)
    with RunStore.open(run_dir) as store:
        facts = _collect(store)
    out = Path(out) if out is not None else run_dir / REPORT_NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_render(facts), encoding="utf-8")
    return out


# --------------------------------------------------------------------------------------------------------------
# What the report needs, read from the store
# --------------------------------------------------------------------------------------------------------------


@dataclass
class _Evaluation:
    seq: int
    candidate: Candidate
    verdict: Verdict
    cumulative_seconds: float
    best_so_far: float | None


@dataclass
class _Facts:
    summary: dict[str, Any]
    meta: dict[str, Any]
    manifest: dict[str, Any]
    evaluations: list[_Evaluation]
    best: tuple[Candidate, Verdict] | None
    seed: tuple[Candidate, Verdict] | None
    plugin_sections: list[ReportSection]
    revalidation: dict[str, Any] | None  # the best's latest re-validation
    set_aside: list[dict[str, Any]]  # failed re-validations of candidates that were the best before
    by_id: dict[str, _Evaluation] = field(default_factory=dict)

    @property
    def interpreted(self) -> bool:
        return any(e.verdict.interpreted for e in self.evaluations)


def _collect(store: RunStore) -> _Facts:
    evaluations: list[_Evaluation] = []
    seconds, best = 0.0, None
    for seq, candidate, verdict in store.evaluations():
        seconds += verdict.eval_seconds
        if verdict.accepted and (best is None or verdict.score > best):
            best = verdict.score
        evaluations.append(_Evaluation(seq, candidate, verdict, seconds, best))
    meta = store.meta()
    by_id = {e.candidate.id: e for e in evaluations}
    seed_id = meta.get("seed_id")
    seed_eval = (
        by_id.get(seed_id) if seed_id else next((e for e in evaluations if not e.candidate.parent_ids), None)
    )
    revalidations = store.revalidations()
    best_found = store.best()
    return _Facts(
        summary=store.summary(),
        meta=meta,
        manifest=store.manifest(),
        evaluations=evaluations,
        best=best_found,
        seed=(seed_eval.candidate, seed_eval.verdict) if seed_eval else None,
        plugin_sections=_plugin_sections(store),
        revalidation=revalidations.get(best_found[0].id) if best_found else None,
        set_aside=sorted(
            (revalidations[cid] for cid in store.failed_revalidation()), key=lambda event: event["seq"]
        ),
        by_id=by_id,
    )


def _plugin_sections(store: RunStore) -> list[ReportSection]:
    """What installed plugins add (the MAP-Elites archive map, ...), ordered by ``order`` then title."""
    sections: list[ReportSection] = []
    for contributed in get_plugin_manager().hook.ksmith_report_sections(store=store):
        sections.extend(s for s in contributed or () if isinstance(s, ReportSection))
    return sorted(sections, key=lambda s: (s.order, s.title))


# --------------------------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------------------------


_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1100px;
       color: #1d2330; padding: 0 16px; }
h1 { font-size: 24px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #dde;
     padding-bottom: 4px; }
.sub { color: #5a6478; }
.banner { padding: 10px 14px; border-radius: 6px; margin: 10px 0; }
.banner.warn { background: #fff4d6; border: 1px solid #e8c66a; }
.banner.bad { background: #fde4e1; border: 1px solid #e59a90; }
.banner.good { background: #e2f5e6; border: 1px solid #8fcf9c; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #dde; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f5f9; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font: 12px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre { background: #f7f8fb; border: 1px solid #e3e6ee; padding: 10px; overflow-x: auto; }
.diff .add { background: #e3f7e6; display: block; } .diff .del { background: #fbe4e4; display: block; }
.diff .hunk { color: #6b55b0; display: block; } .diff .ctx { display: block; }
svg text { font-family: system-ui, sans-serif; }
.kv td:first-child { color: #5a6478; }
"""


def _render(facts: _Facts) -> str:
    problem = facts.summary.get("problem") or "?"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>ksmith report: {_e(problem)} ({_e(facts.summary.get('run'))})</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>ksmith run report: {_e(problem)}</h1>",
        f'<p class="sub">run {_e(facts.summary.get("run"))} &middot; generated '
        f"{_e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))}</p>",
        _section_overview(facts),
        _section_curves(facts),
        _section_lineage(facts),
        *(f"<h2>{_e(section.title)}</h2>\n{section.html}" for section in facts.plugin_sections),
        _section_failures(facts),
        _section_dropped(facts),
        _section_source(facts),
        "</body></html>",
    ]
    return "\n".join(parts)


def _section_overview(facts: _Facts) -> str:
    summary, config = facts.summary, facts.meta.get("config") or {}
    rows = [
        ("problem", summary.get("problem")),
        ("proposer", summary.get("proposer")),
        ("evaluations", f"{summary.get('evaluations')} of a budget of {summary.get('budget')}"),
        ("stop reason", summary.get("stop_explanation") or "not finished (still running or killed)"),
        ("islands", config.get("islands")),
        ("device", _device_text(facts)),
        ("evaluation time", _duration(summary.get("eval_seconds") or 0.0)),
    ]
    banners = []
    if facts.interpreted:
        banners.append(
            '<div class="banner warn"><b>Interpreted timings.</b> These candidates ran under the Triton '
            "interpreter on a CPU. The timings show the search working, not kernel performance, and must "
            "never be compared with GPU numbers.</div>"
        )
    if facts.best is None:
        banners.append(
            '<div class="banner bad"><b>No candidate was accepted.</b> Every evaluated kernel failed to compile, '
            "run, or match the reference; see the failures below.</div>"
        )
    else:
        candidate, verdict = facts.best
        text = (
            f"<b>Best: {_e(candidate.id)}</b> &mdash; {_x(verdict.speedup)} vs eager PyTorch, "
            f"{_x(verdict.speedup_vs_compile)} vs torch.compile"
        )
        if verdict.runtime_ms is not None and verdict.reference_ms is not None:
            text += f" ({verdict.runtime_ms:.4g} ms vs {verdict.reference_ms:.4g} ms eager)"
        beats = (verdict.speedup or 0.0) > 1.0
        if not beats:
            text += ". <b>No candidate beat eager PyTorch.</b>"
        banners.append(f'<div class="banner {"good" if beats else "bad"}">{text}</div>')
        if facts.revalidation is not None:
            status = facts.revalidation.get("status")
            held = status == "ok"
            banners.append(
                f'<div class="banner {"good" if held else "bad"}">Re-validated with fresh seeds: {_e(status)}, '
                f"{_x(facts.revalidation.get('speedup'))} vs eager"
                + ("" if held else " &mdash; the best did <b>not</b> hold up on re-validation")
                + _speed_drift(verdict.speedup, facts.revalidation.get("speedup"))
                + "</div>"
            )
    for event in facts.set_aside:
        evaluated = facts.by_id.get(event["candidate_id"])
        banners.append(
            f'<div class="banner bad">Set aside: {_e(event["candidate_id"])} passed its evaluation'
            + (f" at {_x(evaluated.verdict.speedup)} vs eager" if evaluated else "")
            + f" and failed re-validation ({_e(event.get('status'))}); it is not reported as the best</div>"
        )
    looks = summary.get("where_to_look") or []
    if looks:
        items = "".join(f"<li>{_e(line)}</li>" for line in looks)
        banners.append(f'<div class="banner warn"><b>Where to look.</b><ul>{items}</ul></div>')
    table = _table(("", ""), rows, css="kv")
    return "<h2>Overview</h2>" + "".join(banners) + table


def _speed_drift(found: float | None, again: float | None) -> str:
    """A note when the re-validated speedup is far from the one the search recorded (noisy timings)."""
    if not found or not again or abs(again / found - 1.0) < 0.2:
        return ""
    return f" (the search measured {_x(found)}: timings vary by more than 20% between runs)"


def _device_text(facts: _Facts) -> str:
    device = (facts.manifest.get("device") or {}) if isinstance(facts.manifest.get("device"), dict) else {}
    name = device.get("name") or device.get("gpu") or device.get("device")
    devices = {e.verdict.device for e in facts.evaluations}
    text = ", ".join(sorted(devices)) or "?"
    if name:
        text += f" ({name})"
    if facts.interpreted:
        text += " — interpreted CPU timings"
    return text


# -- curves ----------------------------------------------------------------------------------------------------


def _section_curves(facts: _Facts) -> str:
    head = "<h2>Best speedup over the run</h2>"
    if not facts.evaluations:
        return head + "<p>No evaluations yet.</p>"
    steps = [(float(i + 1), e.best_so_far) for i, e in enumerate(facts.evaluations)]
    dots = [(float(i + 1), e.verdict.score, e.verdict.accepted) for i, e in enumerate(facts.evaluations)]
    by_evals = _step_chart(steps, dots, "evaluations", "best speedup vs eager")
    seconds = [e.cumulative_seconds for e in facts.evaluations]
    unit, scale = ("minutes", 60.0) if seconds[-1] > 600 else ("seconds", 1.0)
    what = "interpreted evaluation" if facts.interpreted else "GPU evaluation"
    time_steps = [(s / scale, e.best_so_far) for s, e in zip(seconds, facts.evaluations)]
    time_dots = [(s / scale, e.verdict.score, e.verdict.accepted) for s, e in zip(seconds, facts.evaluations)]
    by_time = _step_chart(time_steps, time_dots, f"cumulative {what} time ({unit})", "best speedup vs eager")
    legend = (
        '<p class="sub">Line: best accepted speedup so far. Dots: each accepted candidate; crosses on the axis: '
        "failed candidates. Dashed: eager PyTorch (1.0x)."
        + (" Speedups here are interpreted CPU timings." if facts.interpreted else "")
        + "</p>"
    )
    return head + by_evals + by_time + legend


def _step_chart(
    steps: Sequence[tuple[float, float | None]],
    dots: Sequence[tuple[float, float, bool]],
    x_label: str,
    y_label: str,
    width: int = 960,
    height: int = 300,
) -> str:
    left, right, top, bottom = 64, 20, 16, 48
    x_max = max((x for x, _ in steps), default=1.0) or 1.0
    y_values = [y for _, y in steps if y is not None] + [y for _, y, ok in dots if ok]
    top_value = max(y_values, default=0.0)
    # Keep eager (1.0x) in view unless every speedup is far below it (interpreted CPU timings often are).
    show_eager = top_value >= 0.5 or top_value <= 0.0
    y_max = max(top_value, 1.2 if show_eager else 0.0) * 1.1
    x_ticks, y_ticks = _ticks(0.0, x_max), _ticks(0.0, y_max)
    x_max, y_max = max(x_max, x_ticks[-1]), max(y_max, y_ticks[-1])

    def px(x: float) -> float:
        return left + (width - left - right) * x / x_max

    def py(y: float) -> float:
        return top + (height - top - bottom) * (1.0 - y / y_max)

    out = [f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    out.append(
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" fill="#fbfcfe" stroke="#ccd"/>'
    )
    for t in y_ticks:
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#e6e9f0"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{py(t) + 4:.1f}" font-size="11" text-anchor="end">{_num(t)}</text>'
        )
    for t in x_ticks:
        out.append(
            f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{height - bottom}" y2="{height - bottom + 4}" stroke="#889"/>'
        )
        out.append(
            f'<text x="{px(t):.1f}" y="{height - bottom + 17}" font-size="11" text-anchor="middle">{_num(t)}</text>'
        )
    if show_eager:
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{py(1.0):.1f}" y2="{py(1.0):.1f}" stroke="#888" '
            'stroke-dasharray="5 4"/>'
        )
        out.append(
            f'<text x="{width - right - 4}" y="{py(1.0) - 4:.1f}" font-size="11" text-anchor="end" '
            'fill="#666">eager 1.0x</text>'
        )
    else:
        out.append(
            f'<text x="{width - right - 4}" y="{top + 14}" font-size="11" text-anchor="end" fill="#666">'
            "eager 1.0x is far above this scale</text>"
        )
    for x, y, ok in dots:
        if ok:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="#8fb3e8" fill-opacity="0.8"/>')
        else:
            cx, cy = px(x), py(0.0)
            out.append(
                f'<path d="M{cx - 3:.1f},{cy - 3:.1f} l6,6 m0,-6 l-6,6" stroke="#d0574a" stroke-width="1.3"/>'
            )
    path, previous = [], None
    for x, y in steps:
        if y is None:
            continue
        if previous is None:
            path.append(f"M{px(x):.1f},{py(y):.1f}")
        else:
            path.append(f"H{px(x):.1f}V{py(y):.1f}")
        previous = y
    if path:
        path.append(f"H{px(steps[-1][0]):.1f}")
        out.append(f'<path d="{"".join(path)}" fill="none" stroke="#1f5fbf" stroke-width="2.2"/>')
    out.append(
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - 10}" font-size="12" text-anchor="middle">{_e(x_label)}</text>'
    )
    out.append(
        f'<text x="14" y="{(top + height - bottom) / 2:.0f}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {(top + height - bottom) / 2:.0f})">{_e(y_label)}</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


def _ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick positions covering [low, high]."""
    span = max(high - low, 1e-9)
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks, t = [], low
    while t < high + step * 0.999:
        ticks.append(round(t, 10))
        t += step
    return ticks


# -- lineage ---------------------------------------------------------------------------------------------------


def _section_lineage(facts: _Facts) -> str:
    head = "<h2>Lineage of the best</h2>"
    if facts.best is None:
        return head + "<p>No accepted candidate, so no lineage.</p>"
    chain: list[_Evaluation] = []
    current = facts.by_id.get(facts.best[0].id)
    while current is not None and current not in chain:
        chain.append(current)
        parent_ids = current.candidate.parent_ids
        current = facts.by_id.get(parent_ids[0]) if parent_ids else None
    chain.reverse()
    rows = []
    for i, e in enumerate(chain):
        parent = chain[i - 1] if i else None
        gain = ""
        if parent is not None and parent.verdict.accepted and e.verdict.accepted and parent.verdict.score > 0:
            gain = f"{(e.verdict.score / parent.verdict.score - 1) * 100:+.1f}%"
        rows.append(
            (
                f'<td class="num">{e.seq}</td>',
                f"<td><code>{_e(e.candidate.id)}</code></td>",
                f"<td>{_e(e.candidate.edit or ('seed' if not e.candidate.parent_ids else ''))}</td>",
                f"<td>{_e(e.candidate.proposer)}</td>",
                f"<td>{_e(e.verdict.status.value)}</td>",
                f'<td class="num">{_x(e.verdict.speedup)}</td>',
                f'<td class="num">{_e(gain)}</td>',
            )
        )
    header = ("#", "candidate", "edit", "proposer", "status", "speedup vs eager", "gain vs parent")
    return head + _raw_table(header, rows)


# -- failures --------------------------------------------------------------------------------------------------


def _section_failures(facts: _Facts) -> str:
    head = "<h2>Failures by status</h2>"
    counts = Counter(e.verdict.status.value for e in facts.evaluations)
    if not counts:
        return head + "<p>No evaluations yet.</p>"
    order = sorted(counts, key=lambda s: (s != "ok", -counts[s], s))
    width, row, left = 620, 24, 130
    most = max(counts.values())
    bars = [
        f'<svg role="img" width="{width}" height="{row * len(order) + 8}" viewBox="0 0 {width} {row * len(order) + 8}">'
    ]
    for i, status in enumerate(order):
        y = 4 + i * row
        length = (width - left - 60) * counts[status] / most
        fill = "#5aa469" if status == "ok" else "#d0574a"
        bars.append(f'<text x="{left - 8}" y="{y + 15}" font-size="12" text-anchor="end">{_e(status)}</text>')
        bars.append(f'<rect x="{left}" y="{y + 3}" width="{length:.1f}" height="{row - 8}" fill="{fill}"/>')
        bars.append(f'<text x="{left + length + 6:.1f}" y="{y + 15}" font-size="12">{counts[status]}</text>')
    bars.append("</svg>")
    examples = []
    for status in order:
        if status == "ok":
            continue
        latest = next(e for e in reversed(facts.evaluations) if e.verdict.status.value == status)
        reason = (
            latest.verdict.reasons[0] if latest.verdict.reasons else latest.verdict.feedback.split("\n")[0]
        )
        examples.append((status, str(counts[status]), f"{latest.candidate.id}: {reason}"))
    total = sum(counts.values())
    failed = total - counts.get("ok", 0)
    text = f"<p>{failed} of {total} evaluations failed.</p>"
    table = _table(("status", "count", "latest example"), examples) if examples else ""
    return head + text + "\n".join(bars) + table


# -- dropped ---------------------------------------------------------------------------------------------------


def _section_dropped(facts: _Facts) -> str:
    head = "<h2>Dropped before evaluation</h2>"
    dropped = facts.summary.get("dropped") or {}
    by_reason = dropped.get("by_reason") or {}
    if not by_reason:
        return head + "<p>Every generation reached evaluation: nothing was dropped.</p>"
    latest = dropped.get("latest") or {}
    rows = [(drop_words(reason), reason, str(n), latest.get(reason, "")) for reason, n in by_reason.items()]
    text = (
        f"<p>{dropped.get('total', sum(by_reason.values()))} generations never reached the evaluator: the "
        "proposer could not use them, or the engine dropped them as duplicates. Each is a "
        "<code>dropped</code> event in the run store.</p>"
    )
    return head + text + _table(("reason", "label", "count", "latest detail"), rows)


# -- source ----------------------------------------------------------------------------------------------------


def _section_source(facts: _Facts) -> str:
    head = "<h2>Best kernel</h2>"
    if facts.best is None:
        if facts.seed is None:
            return head + "<p>No candidate was accepted.</p>"
        seed, verdict = facts.seed
        reasons = "\n".join(verdict.reasons) or verdict.feedback
        return (
            head
            + "<p>No candidate was accepted. The seed's verdict:</p>"
            + f"<pre>{_e(reasons)}</pre><h3>Seed source</h3><pre>{_e(seed.source)}</pre>"
        )
    best, _ = facts.best
    parts = [
        head,
        f"<p><code>{_e(best.id)}</code></p>",
        f"<pre>{_e(best.source)}</pre>",
        "<h3>Diff from the seed</h3>",
    ]
    if facts.seed is None:
        parts.append("<p>The seed is not in the run store.</p>")
    elif facts.seed[0].id == best.id:
        parts.append("<p>The best candidate is the seed itself: no edit improved on it.</p>")
    else:
        diff = difflib.unified_diff(
            facts.seed[0].source.splitlines(),
            best.source.splitlines(),
            "seed",
            f"best ({best.id})",
            lineterm="",
        )
        parts.append('<pre class="diff">' + "".join(_diff_line(line) for line in diff) + "</pre>")
    return "\n".join(parts)


def _diff_line(line: str) -> str:
    if line.startswith(("+++", "---")):
        kind = "hunk"
    elif line.startswith("@@"):
        kind = "hunk"
    elif line.startswith("+"):
        kind = "add"
    elif line.startswith("-"):
        kind = "del"
    else:
        kind = "ctx"
    return f'<span class="{kind}">{_e(line) or " "}</span>'


# -- small helpers ---------------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _x(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}x" if abs(value) >= 0.1 or value == 0 else f"{value:.3g}x"


def _num(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e5 else f"{value:.2e}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    """A table of plain-text cells (escaped here)."""
    cells = [tuple(f"<td>{_e(c)}</td>" for c in row) for row in rows]
    return _raw_table(header if any(header) else (), cells, css)


def _raw_table(header: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    out = [f'<table class="{css}">' if css else "<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>")
    out.extend("<tr>" + "".join(row) + "</tr>" for row in rows)
    out.append("</table>")
    return "\n".join(out)
