"""Structured feedback: what a verdict tells the next proposal.

A proposer improves on what it is told. Each verdict becomes a short text with the parts that matter for the
next edit: the relevant lines of a compile error, a mismatch summary (max error, where, how many elements),
speedups against eager and torch.compile, the roofline fraction, and what the edit from the parent gained.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ksmith_core.model import Candidate, Mismatch, Status, Verdict, thaw

if TYPE_CHECKING:
    from ksmith_core.model import Scored

MAX_ERROR_LINES = 12


def _fmt_x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:#.3g}".rstrip(".") + "x"


def error_excerpt(text: str, limit: int = MAX_ERROR_LINES) -> str:
    """The lines of an error that locate it: the last frames of a traceback and the message itself."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= limit:
        return "\n".join(lines)
    # Keep the final message and the frames right above it, where the candidate's own line usually is.
    return "\n".join(["..."] + lines[-limit:])


def mismatch_summary(mismatch: Mismatch) -> str:
    parts = []
    if mismatch.output is not None:
        parts.append(f"output {mismatch.output}" + (f" ({mismatch.where})" if mismatch.where else ""))
    if mismatch.max_abs_error is not None:
        parts.append(f"max abs error {mismatch.max_abs_error:.3g}")
    if mismatch.max_rel_error is not None:
        parts.append(f"max rel error {mismatch.max_rel_error:.3g}")
    if mismatch.worst_index:
        parts.append(f"at index {mismatch.worst_index}")
    if mismatch.mismatched is not None and mismatch.numel is not None:
        parts.append(f"{mismatch.mismatched} of {mismatch.numel} elements out of tolerance")
    if mismatch.expected is not None or mismatch.got is not None:
        parts.append(f"expected {_value(mismatch.expected)}, got {_value(mismatch.got)}")
    if mismatch.atol is not None:
        rtol = mismatch.rtol if mismatch.rtol is not None else mismatch.atol
        parts.append(f"(atol {mismatch.atol:g}, rtol {rtol:g})")
    return ", ".join(parts)


def _value(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else repr(thaw(value))


def feedback_for(candidate: Candidate, verdict: Verdict, parent: Scored | None = None) -> str:
    """The feedback text for one evaluated candidate (``parent`` is its first parent, if evaluated)."""
    lines = [f"status: {verdict.status.value}"]
    if verdict.status is Status.OK:
        lines.append(
            f"speedup vs eager {_fmt_x(verdict.speedup)}, vs torch.compile {_fmt_x(verdict.speedup_vs_compile)}"
            + (" (interpreted: CPU timings, not comparable to a GPU)" if verdict.interpreted else "")
        )
        if verdict.runtime_ms is not None and verdict.reference_ms is not None:
            lines.append(f"runtime {verdict.runtime_ms:.4g} ms vs eager {verdict.reference_ms:.4g} ms")
        if verdict.roofline_fraction is not None:
            bound = f", {verdict.roofline_bound}-bound" if verdict.roofline_bound else ""
            lines.append(
                f"roofline fraction {verdict.roofline_fraction:.2f} (1.0 = at the hardware floor{bound})"
            )
    if verdict.reasons:
        lines.append("reasons:")
        lines.extend(f"  - {reason}" for reason in verdict.reasons[:8])
    if verdict.error:
        lines.append("error:")
        lines.extend("  " + line for line in error_excerpt(verdict.error).splitlines())
    if verdict.mismatch is not None:
        lines.append("mismatch: " + mismatch_summary(verdict.mismatch))
    if candidate.edit:
        lines.append(f"edit from parent: {candidate.edit}")
    if parent is not None:
        before, after = parent.verdict.score, verdict.score
        if parent.verdict.accepted and verdict.accepted and before > 0:
            change = (after / before - 1.0) * 100.0
            lines.append(f"gain vs parent: {change:+.1f}% ({_fmt_x(before)} -> {_fmt_x(after)})")
        elif parent.verdict.accepted and not verdict.accepted:
            lines.append(
                f"the edit broke a working parent ({parent.verdict.status.value} -> {verdict.status.value})"
            )
        elif not parent.verdict.accepted and verdict.accepted:
            lines.append("the edit fixed a broken parent")
    return "\n".join(lines)
