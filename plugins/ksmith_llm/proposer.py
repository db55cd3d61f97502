"""From selection to proposals: ask, read the answer, apply it, repair once, validate.

Shared by the ``llm`` (server) and ``vllm`` (offline) proposers: each generation of a step is one
conversation; the first round of conversations goes out as a batch, every answer that cannot be used (edits
that do not apply, no code, a module that does not parse or defines no ``ModelNew``, no change at all) gets
one repair request in a second batch showing what failed, and what still fails is dropped with its reason:
``run.note_dropped(label, detail)`` with one of the labels of :data:`DROP_REASONS`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ksmith_core.errors import CandidateError, ProposerError
from ksmith_core.loading import check_candidate_source
from ksmith_core.model import Problem, Proposal, Scored, Selection, source_id
from ksmith_llm import prompts
from ksmith_llm.backends import Completion, Conversation, GenerationFailed, Generator
from ksmith_llm.edits import apply_edits, closest_lines, normalise_newlines, parse_answer

log = logging.getLogger("ksmith_llm")

STATE = "llm"  # the run.state() key holding token totals and the count of rejected generations

# The reasons a generation is dropped with (``run.note_dropped``), after its repair request failed too.
DROP_REASONS = {
    "request_failed": "the request still failed after its retries",
    "no_answer": "no answer came back",
    "no_edit_block": "the answer held no SEARCH/REPLACE block and no ```python module",
    "edit_not_applied": "a SEARCH text was not found in the kernel (or was empty)",
    "syntax_error": "the resulting module does not parse",
    "no_modelnew": "the resulting module defines no class ModelNew",
    "no_change": "the edit left the kernel exactly as it was",
    "cut_off": "the answer was cut off by the token limit and could not be used",
    "no_kernel_to_edit": "SEARCH/REPLACE blocks were sent where a whole first module was asked for",
}

_state_lock = threading.Lock()


@dataclass
class Reading:
    """What one answer amounts to: a usable source, or the failures to show in a repair request."""

    source: str | None = None
    summary: str = ""
    kind: str = ""
    label: str = ""  # why it cannot be used: a key of DROP_REASONS
    placement: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)


def read_answer(text: str, parent_source: str | None, fixing: bool) -> Reading:
    """Turn an answer into a candidate source against ``parent_source`` (``None`` when writing a first kernel)."""
    parsed = parse_answer(text)
    reading = Reading()
    if parsed.edits:
        if parent_source is None:
            reading.label = "no_kernel_to_edit"
            reading.failures.append("there is no kernel to edit yet: send the complete module")
            return reading
        outcome = apply_edits(parent_source, parsed.edits)
        if not outcome.ok:
            reading.label = "edit_not_applied"
            reading.failures += outcome.failures
            for number in outcome.unmatched:
                edit = parsed.edits[number]
                reading.hints.append(
                    f"Block {number + 1} searched for:\n{edit.search.strip(chr(10))}\n"
                    f"The closest lines in the current kernel are:\n{closest_lines(parent_source, edit.search)}"
                )
            return reading
        reading.source, reading.placement = outcome.source, outcome.applied
        reading.kind = "llm-fix" if fixing else "llm-diff"
        reading.summary = parsed.explanation or f"SEARCH/REPLACE x{len(parsed.edits)}"
    elif parsed.rewrite is not None:
        reading.source = parsed.rewrite
        reading.kind = "llm-fix" if fixing else "llm-rewrite"
        reading.summary = parsed.explanation or "full rewrite"
    else:
        reading.label = "no_edit_block"
        reading.failures.append(
            "it holds no SEARCH/REPLACE block and no ```python block defining class ModelNew"
        )
        reading.failures += parsed.problems
        return reading

    source = normalise_newlines(reading.source).strip("\n") + "\n"
    try:
        check_candidate_source(source)
    except CandidateError as exc:
        reading.label = "no_modelnew" if "defines no class ModelNew" in str(exc) else "syntax_error"
        message = str(exc).replace("candidate <candidate>", "the resulting module")
        reading.failures.append(message.replace("<candidate>", "the resulting module"))
        reading.failures += parsed.problems
        reading.source = None
        return reading
    if parent_source is not None and source_id(source) == source_id(parent_source):
        reading.label = "no_change"
        reading.failures.append("the change leaves the kernel exactly as it was")
        reading.source = None
        return reading
    reading.source = source
    return reading


@dataclass
class Generation:
    """One generation of a step: its conversation, its tokens so far, and what came of it."""

    parent: Scored | None
    conversation: Conversation
    fixing: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    model: str = ""
    reading: Reading | None = None
    error: str | None = None

    def take(self, result: Completion | GenerationFailed) -> str | None:
        """Account for an answer and read it; returns the answer text, or ``None`` if the request failed."""
        self.requests += 1
        if isinstance(result, GenerationFailed):
            self.error = f"the request failed: {result}"
            self.reading = None
            return None
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        self.model = result.model
        parent_source = self.parent.candidate.source if self.parent is not None else None
        self.reading = read_answer(result.text, parent_source, self.fixing)
        if self.reading.failures and result.finish_reason == "length":
            self.reading.label = "cut_off"
            self.reading.failures.append("the answer was cut off by the token limit; keep it shorter")
        return result.text

    @property
    def usable(self) -> bool:
        return self.reading is not None and self.reading.source is not None

    def label(self) -> str:
        """Why this generation is unusable, as a key of :data:`DROP_REASONS`."""
        if self.error:
            return "request_failed"
        if self.reading is None:
            return "no_answer"
        return self.reading.label or "no_edit_block"

    def reason(self) -> str:
        if self.error:
            return self.error
        if self.reading is None:
            return "no answer"
        return "; ".join(self.reading.failures) or "unusable answer"


def run_generations(generator: Generator, generations: list[Generation]) -> None:
    """Ask every conversation, then send one repair request for each answer that could not be used."""
    first = generator.chat_batch([g.conversation for g in generations])
    retry: list[tuple[Generation, Conversation]] = []
    for generation, result in zip(generations, first):
        text = generation.take(result)
        if text is None or generation.usable:
            continue
        reading = generation.reading
        assert reading is not None
        repair = prompts.repair_message(reading.failures, reading.hints)
        retry.append((generation, [*generation.conversation, {"role": "assistant", "content": text}, repair]))
    if not retry:
        return
    second = generator.chat_batch([conversation for _, conversation in retry])
    for (generation, _), result in zip(retry, second):
        generation.take(result)


def _record_usage(run: Any, generations: list[Generation]) -> None:
    """Add the step's tokens to the run's totals; every unusable generation is noted as dropped."""
    state = run.state(STATE)
    with _state_lock:
        for g in generations:
            state["prompt_tokens"] = state.get("prompt_tokens", 0) + g.prompt_tokens
            state["completion_tokens"] = state.get("completion_tokens", 0) + g.completion_tokens
            state["requests"] = state.get("requests", 0) + g.requests
            if not g.usable:
                state["rejected"] = state.get("rejected", 0) + 1
    for g in generations:
        if not g.usable:
            parent = f"from {g.parent.candidate.id}: " if g.parent is not None else ""
            run.note_dropped(g.label(), parent + g.reason())


def propose(run: Any, selection: Selection, generator: Generator, proposer: str) -> list[Proposal]:
    """One step: ``run.config.proposals_per_step`` generations over the selection's parents."""
    parents = list(selection.parents)
    if not parents:
        return []
    best = run.best
    hints = str((run.config.proposer_options or {}).get("hints") or "")
    generations = []
    for i in range(run.config.proposals_per_step):
        parent = parents[i % len(parents)]
        messages = prompts.improve_messages(
            run.problem, selection, parent, best, run.hardware, run.config.eval.device, hints
        )
        fixing = selection.mode == "fix" or not parent.verdict.accepted
        generations.append(Generation(parent, messages, fixing))
    run_generations(generator, generations)
    _record_usage(run, generations)

    proposals = []
    for g in generations:
        if not g.usable:
            log.info(
                "%s proposal from %s rejected (%s): %s",
                proposer,
                g.parent.candidate.id,
                g.label(),
                g.reason(),
            )
            continue
        assert g.reading is not None and g.reading.source is not None and g.parent is not None
        proposals.append(
            Proposal(
                source=g.reading.source,
                parent_ids=(g.parent.candidate.id,),
                edit=g.reading.summary,
                edit_kind=g.reading.kind,
                proposer=proposer,
                meta=_meta(g),
            )
        )
    return proposals


def _meta(g: Generation) -> dict[str, Any]:
    assert g.reading is not None
    meta: dict[str, Any] = {
        "prompt_tokens": g.prompt_tokens,
        "completion_tokens": g.completion_tokens,
        "model": g.model,
        "requests": g.requests,
    }
    if g.reading.placement:
        meta["placement"] = list(g.reading.placement)
    return meta


def first_kernel(
    problem: Problem,
    generator: Generator,
    proposer: str,
    device: str = "cpu",
    hardware: Mapping[str, Any] | None = None,
    hints: str = "",
) -> Proposal:
    """Ask for a first ``ModelNew`` (one shot, one repair); raise :class:`ProposerError` if none is usable."""
    generation = Generation(None, prompts.seed_messages(problem, hardware or {}, device, hints), fixing=False)
    run_generations(generator, [generation])
    if not generation.usable:
        raise ProposerError(f"the LLM gave no usable first kernel for {problem.name}: {generation.reason()}")
    assert generation.reading is not None and generation.reading.source is not None
    return Proposal(
        source=generation.reading.source,
        edit=generation.reading.summary or "first kernel",
        edit_kind="llm-seed",
        proposer=proposer,
        meta=_meta(generation),
    )
