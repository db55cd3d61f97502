"""Stored runs as step-level rows: what the proposer was shown, the change it made, and what it earned.

Each evaluated candidate with a parent is one *step*. Its row holds

- the prompt, built by the ``llm`` proposer's own :func:`ksmith_llm.prompts.improve_messages` from the parent,
  the parent's verdict and the feedback text the run gave it (:func:`ksmith_core.feedback.feedback_for`,
  exactly as ``Run.add`` makes it), the run's best kernel among the evaluations before this one, the run's
  hardware and device;
- the answer: the change written the way that prompt asks for it -- one line saying what changed, then
  SEARCH/REPLACE blocks (the complete module in one ```python block where blocks would be longer than it) --
  checked by reading it back with the proposer's own :func:`ksmith_llm.proposer.read_answer`, which must
  rebuild the child exactly;
- the labels: status, correct, gain over the parent, the verdict's reasons, the timing noise of the two
  measurements, and which filter kept or dropped the step.

Nothing here needs the ``train`` extra: rows are plain dicts. The prompt shows the inspirations the live
proposer was shown (their ids are in the child's ``meta``; runs stored before that was recorded show only the
run's best kernel at that moment); user hints are left out.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksmith_core.feedback import feedback_for
from ksmith_core.loading import load_problem
from ksmith_core.model import Candidate, Problem, Scored, Selection, Status, Verdict, source_id
from ksmith_core.store import RunStore

# Why a step is not kept for supervised training; the first that applies is recorded.
FILTERS = {
    "kept": "correct, and faster than its parent by more than the timing noise",
    "broken_parent": "its parent did not work (a repair step, not an improvement)",
    "refused": "refused by the evaluator's checks (a hack): kept as a negative",
    "incorrect": "the child failed to compile, run or match the reference",
    "no_timing": "a speedup is missing on the parent or the child",
    "no_noise": "no timing spread was recorded, so a gain cannot be told from noise",
    "within_noise": "the gain is not larger than the timing noise (or the child is slower)",
    "below_min_gain": "the gain is above the noise but below --min-gain",
    "failed_revalidation": "the child was re-validated and did not hold its gain",
    "no_answer": "the change could not be written as an answer that rebuilds the child",
    "duplicate": "the same change to the same parent of the same problem is an earlier row (another run)",
}

# How many unchanged lines a block may grow by, each way, to make its SEARCH text unique.
MAX_CONTEXT = 12
# Changes closer than this many unchanged lines go in one block.
MERGE_GAP = 3


@dataclass(frozen=True)
class RunSteps:
    """One run read as steps: its rows and what the dataset card says about it."""

    run: str
    problem: str
    problem_sha: str
    evaluations: int
    device: str
    interpreted: bool
    rows: list[dict[str, Any]]


# --------------------------------------------------------------------------------------------------------------
# The answer: a change as SEARCH/REPLACE blocks
# --------------------------------------------------------------------------------------------------------------


def _hunks(parent: list[str], child: list[str]) -> list[list[int]]:
    """Changed regions as [i1, i2, j1, j2] (parent lines i1:i2 become child lines j1:j2), close ones merged."""
    hunks: list[list[int]] = []
    matcher = difflib.SequenceMatcher(None, parent, child, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if hunks and i1 - hunks[-1][1] <= MERGE_GAP:
            hunks[-1][1], hunks[-1][3] = i2, j2
        else:
            hunks.append([i1, i2, j1, j2])
    return hunks


def _grow(hunk: list[int], parent: list[str], child: list[str]) -> list[int] | None:
    """Widen a hunk by unchanged lines until its SEARCH text is unique and both sides start and end on code."""
    i1, i2, j1, j2 = hunk
    text = "\n".join(parent)
    for _ in range(2 * MAX_CONTEXT + 2):
        search, replace = parent[i1:i2], child[j1:j2]
        unique = (
            any(line.strip() for line in search)
            and any(line.strip() for line in replace)
            and text.count("\n".join(search)) == 1
        )
        top = bool(search and replace and search[0].strip() and replace[0].strip())
        bottom = bool(search and replace and search[-1].strip() and replace[-1].strip())
        if unique and top and bottom:
            return [i1, i2, j1, j2]
        grew = False
        if (not unique or not top) and i1 > 0 and j1 > 0:
            i1, j1, grew = i1 - 1, j1 - 1, True
        if (not unique or not bottom) and i2 < len(parent) and j2 < len(child):
            i2, j2, grew = i2 + 1, j2 + 1, True
        if not grew:
            return None
    return None


def edit_blocks(parent_source: str, child_source: str) -> str | None:
    """The change from parent to child as SEARCH/REPLACE blocks, or ``None`` if it cannot be written so."""
    parent = parent_source.rstrip("\n").split("\n")
    child = child_source.rstrip("\n").split("\n")
    grown: list[list[int]] = []
    for hunk in _hunks(parent, child):
        wide = _grow(hunk, parent, child)
        if wide is None:
            return None
        if grown and wide[0] < grown[-1][1]:  # overlaps the previous block: make them one
            merged = _grow([grown[-1][0], wide[1], grown[-1][2], wide[3]], parent, child)
            if merged is None:
                return None
            grown[-1] = merged
        else:
            grown.append(wide)
    if not grown:
        return None
    blocks = []
    for i1, i2, j1, j2 in grown:
        blocks.append(
            "\n".join(["<<<<<<< SEARCH", *parent[i1:i2], "=======", *child[j1:j2], ">>>>>>> REPLACE"])
        )
    return "\n\n".join(blocks)


def answer_for(parent_source: str, child_source: str, edit: str, fixing: bool) -> tuple[str, str] | None:
    """The answer the ``llm`` prompt asks for that turns the parent into the child, and its form.

    Returns ``(text, "blocks" | "rewrite")``, or ``None`` when neither form reads back as the child. Every
    answer is checked by the proposer's own reader, so training targets are answers the proposer can use.
    """
    from ksmith_llm.proposer import read_answer

    summary = " ".join((edit or "").split())[:160] or (
        "Repair the kernel." if fixing else "Change the kernel."
    )
    module = child_source.strip("\n")
    rewrite = f"{summary}\n\n```python\n{module}\n```"
    blocks = edit_blocks(parent_source, child_source)
    candidates = []
    if blocks is not None and len(blocks) < len(module):
        candidates.append((f"{summary}\n\n{blocks}", "blocks"))
    candidates.append((rewrite, "rewrite"))
    target = source_id(child_source)
    for text, form in candidates:
        reading = read_answer(text, parent_source, fixing)
        if reading.source is not None and source_id(reading.source) == target:
            return text, form
    return None


# --------------------------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------------------------


def timing_noise(*verdicts: Verdict) -> float | None:
    """The largest relative spread any of these verdicts' timings recorded (kernel and eager reference).

    A speedup is reference time over kernel time, so the ratio of two speedups moves by as much as either
    measurement does; ``None`` when no spread was recorded (too few timed calls).
    """
    spreads = [
        stats.spread
        for verdict in verdicts
        for stats in (verdict.runtime, verdict.reference_eager)
        if stats is not None and stats.spread is not None
    ]
    return max(spreads) if spreads else None


def gain_over(parent: Verdict, child: Verdict) -> float | None:
    """Relative speedup change, child over parent (``0.10`` is 10 % faster); ``None`` unless both work."""
    if parent.accepted and child.accepted and parent.score > 0 and child.score > 0:
        return child.score / parent.score - 1.0
    return None


def step_filter(
    parent: Verdict,
    child: Verdict,
    noise: float | None,
    min_gain: float,
    revalidated: Verdict | None = None,
) -> str:
    """Which :data:`FILTERS` entry a step falls under (``kept`` for a correctness-preserving, high gain)."""
    if not parent.accepted:
        return "broken_parent"
    if child.status is Status.REJECTED:
        return "refused"
    if not child.accepted:
        return "incorrect"
    gain = gain_over(parent, child)
    if gain is None:
        return "no_timing"
    if noise is None:
        return "no_noise"
    if gain <= noise:
        return "within_noise"
    if gain <= min_gain:
        return "below_min_gain"
    if revalidated is not None:
        held = gain_over(parent, revalidated)
        if held is None or held <= noise:
            return "failed_revalidation"
    return "kept"


# --------------------------------------------------------------------------------------------------------------
# Reading a run
# --------------------------------------------------------------------------------------------------------------


def _replay(store: RunStore) -> Iterator[tuple[Scored, Scored | None, Scored | None, tuple[Scored, ...]]]:
    """Every evaluation as (scored child, scored parent, best before it, inspirations), as the live run saw them."""
    by_id: dict[str, Scored] = {}
    best: Scored | None = None
    for _, candidate, verdict in store.evaluations():
        parent = by_id.get(candidate.parent_ids[0]) if candidate.parent_ids else None
        scored = Scored(candidate, verdict, feedback_for(candidate, verdict, parent))
        shown = candidate.meta.get("inspiration_ids") or ()
        yield scored, parent, best, tuple(by_id[i] for i in shown if i in by_id)
        by_id[candidate.id] = scored
        if verdict.accepted and (best is None or verdict.score > best.verdict.score):
            best = scored


def messages_for(
    problem: Problem,
    parent: Scored,
    best: Scored | None,
    hardware: dict[str, Any],
    device: str,
    inspirations: tuple[Scored, ...] = (),
) -> list[dict[str, str]]:
    """The ``llm`` proposer's conversation for improving (or repairing) ``parent``."""
    from ksmith_llm import prompts

    fixing = not parent.verdict.accepted
    selection = Selection(parents=(parent,), inspirations=inspirations, mode="fix" if fixing else "improve")
    return prompts.improve_messages(problem, selection, parent, best, hardware, device)


def read_run(path: Path, min_gain: float = 0.0) -> RunSteps:
    """Every step of the run at ``path`` as a row (see the module docstring for what a row holds)."""
    with RunStore.open(Path(path)) as store:
        meta = store.meta()
        manifest = store.manifest()
        config = meta.get("config") or {}
        device = str((config.get("eval") or {}).get("device") or "cpu")
        hardware = dict(manifest.get("device") or {})
        problem = load_problem(store.problem_path, name=meta.get("problem"))
        revalidations = {e["candidate_id"]: e for e in store.events("revalidation")}
        rows: list[dict[str, Any]] = []
        evaluations = 0
        interpreted = False
        for child, parent, best, inspirations in _replay(store):
            evaluations += 1
            interpreted = interpreted or child.verdict.interpreted
            if parent is None:
                continue
            rows.append(
                _row(
                    store.path.name,
                    problem,
                    child,
                    parent,
                    best,
                    hardware,
                    device,
                    revalidations,
                    min_gain,
                    inspirations,
                )
            )
    return RunSteps(
        run=store.path.name,
        problem=problem.name,
        problem_sha=problem.sha,
        evaluations=evaluations,
        device=device,
        interpreted=interpreted,
        rows=rows,
    )


def _row(
    run: str,
    problem: Problem,
    child: Scored,
    parent: Scored,
    best: Scored | None,
    hardware: dict[str, Any],
    device: str,
    revalidations: dict[str, dict[str, Any]],
    min_gain: float,
    inspirations: tuple[Scored, ...] = (),
) -> dict[str, Any]:
    fixing = not parent.verdict.accepted
    messages = messages_for(problem, parent, best, hardware, device, inspirations)
    answer = answer_for(parent.candidate.source, child.candidate.source, child.candidate.edit, fixing)
    event = revalidations.get(child.candidate.id)
    revalidated = _verdict_of(event) if event is not None else None
    noise = timing_noise(parent.verdict, child.verdict)
    kept = step_filter(parent.verdict, child.verdict, noise, min_gain, revalidated)
    if answer is None and kept == "kept":
        kept = "no_answer"
    return {
        "run": run,
        "problem": problem.name,
        "problem_sha": problem.sha,
        "problem_source": problem.source,
        "step": _candidate_label(child.candidate),
        "parent_id": parent.candidate.id,
        "inspiration_ids": [s.candidate.id for s in inspirations],
        "child_id": child.candidate.id,
        "proposer": child.candidate.proposer,
        "edit": child.candidate.edit,
        "edit_kind": child.candidate.edit_kind,
        "mode": "fix" if fixing else "improve",
        "parent_source": parent.candidate.source,
        "parent_status": parent.verdict.status.value,
        "parent_speedup": parent.verdict.speedup,
        "parent_feedback": parent.feedback,
        "child_source": child.candidate.source,
        "messages": messages,
        "answer": answer[0] if answer else None,
        "answer_form": answer[1] if answer else None,
        "status": child.verdict.status.value,
        "correct": bool(child.verdict.accepted),
        "speedup": child.verdict.speedup,
        "gain": gain_over(parent.verdict, child.verdict),
        "noise": noise,
        "reasons": list(child.verdict.reasons),
        "refused": child.verdict.status is Status.REJECTED,
        "interpreted": bool(child.verdict.interpreted),
        "revalidated": None if revalidated is None else revalidated.accepted,
        "revalidated_gain": None if revalidated is None else gain_over(parent.verdict, revalidated),
        "filter": kept,
        "kept": kept == "kept",
    }


def _candidate_label(candidate: Candidate) -> str:
    return f"{candidate.parent_ids[0]}->{candidate.id}"


def _verdict_of(event: dict[str, Any]) -> Verdict | None:
    try:
        return Verdict.from_dict(event)
    except (KeyError, ValueError, TypeError):
        return None
