"""The run context handed to hooks: problem, configuration, population, randomness and plugin state."""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ksmith_core.errors import ConfigError
from ksmith_core.feedback import feedback_for
from ksmith_core.model import Candidate, EvalOptions, Problem, Scored, Verdict
from ksmith_core.store import RunStore

# How much of a dropped generation's detail is kept with its event.
MAX_DROP_DETAIL = 500


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides what a run does. Stored in the run; never holds secrets."""

    proposer: str | None = None  # a proposer name; None means the installed default (mutate)
    select: str | None = None  # a selector name; None means the installed default selector
    executor: str | None = None  # how evaluations are dispatched; None means the default ("local")
    executor_options: dict[str, Any] = field(default_factory=dict)  # e.g. a Ray cluster address, never keys
    budget: int = 40  # total evaluations in the run, the seed included
    gpu_minutes: float | None = None  # total evaluation wall time across workers, in minutes
    patience: int | None = None  # stop after this many evaluations without a new best
    # Stop once the best kernel runs at this fraction of its roofline (measured on a GPU): at most 1/f - 1 is
    # left to gain there, and the budget is better spent where the gap is large. None: never stop for this.
    stop_at_roofline: float | None = 0.95
    islands: int = 4
    proposals_per_step: int = 2
    parallel: int = 1  # candidates evaluated at once
    seed: int = 0  # the search's random seed (never the evaluator's: those are fresh every trial)
    revalidate_best: bool = True
    eval: EvalOptions = field(default_factory=EvalOptions)
    proposer_options: dict[str, Any] = field(default_factory=dict)  # e.g. llm base URL and model, never keys
    backend: str | None = None  # judge with this backend instead of the problem's KSMITH_BACKEND (--backend)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ConfigError(f"--budget must be at least 1 (got {self.budget})")
        if self.islands < 1:
            raise ConfigError(f"--islands must be at least 1 (got {self.islands})")
        if self.gpu_minutes is not None and self.gpu_minutes <= 0:
            raise ConfigError(f"--gpu-minutes must be positive (got {self.gpu_minutes})")
        if self.stop_at_roofline is not None and not self.stop_at_roofline > 0:
            raise ConfigError(f"--stop-at-roofline must be positive (got {self.stop_at_roofline})")
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"--patience must be at least 1 (got {self.patience})")
        if self.parallel < 1 or self.proposals_per_step < 1:
            raise ConfigError("--parallel and proposals per step must be at least 1")
        if self.eval.device not in ("cpu", "cuda"):
            raise ConfigError(f"--device must be cpu or cuda (got {self.eval.device!r})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        data = dict(data)
        data["eval"] = EvalOptions(**data.get("eval", {}))
        return cls(**data)


class Run:
    """One evolutionary run as plugins see it.

    ``population`` holds every evaluated candidate in evaluation order; ``best`` the accepted one with the
    highest speedup. ``state(name)`` gives each plugin a dict of its own for in-memory archives, rebuilt on
    resume by replaying :func:`ksmith_archive` over the stored evaluations.

    ``note_dropped(reason, detail)`` is how a proposer says that a generation came to nothing (no usable
    edit, nothing left to try); the engine notes its own drops (duplicates, steps with no proposal) the same
    way. ``dropped`` counts them by reason for the whole run (rebuilt from the store on resume).
    """

    def __init__(self, problem: Problem, config: RunConfig, store: RunStore, resumed: bool = False) -> None:
        self.problem = problem
        self.config = config
        self.store = store
        self.resumed = resumed
        self.replaying = False
        self.rng = random.Random(config.seed)
        self.population: list[Scored] = []
        self.by_id: dict[str, Scored] = {}
        self.children: Counter[str] = Counter()
        self.best: Scored | None = None
        self._best_position = -1  # index of ``best`` in ``population``
        # Accepted once, then failed their re-validation at the end of a run: never the best again.
        self.failed_revalidation: set[str] = store.failed_revalidation()
        self.seed_id: str | None = None
        # What the run evaluates on (GPU name, capability, memory; or the CPU interpreter): proposers tell
        # their model. Taken from the run's manifest.
        self.hardware: dict[str, Any] = dict(store.manifest().get("device") or {})
        self._state: dict[str, dict[str, Any]] = {}
        # Generations that came to nothing, by reason, for the whole run; and those not yet stored.
        self.dropped: Counter[str] = Counter()
        self._pending_drops: list[dict[str, Any]] = []
        self._drops_lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.store.path.name

    def state(self, plugin: str) -> dict[str, Any]:
        return self._state.setdefault(plugin, {})

    def note_dropped(self, reason: str, detail: str = "") -> None:
        """Count one generation that came to nothing, under a short stable ``reason`` label.

        ``reason`` is a snake_case label that reads as words in summaries (``no_edit_block`` prints as "no
        edit block"); ``detail`` says what exactly happened (the parser's complaint, the parent's id) and is
        kept with the stored event, cut to :data:`MAX_DROP_DETAIL` characters. Thread-safe. The engine stores
        what was noted as ``dropped`` events in one transaction at the end of every step; plugins never
        write to the store themselves.
        """
        label = str(reason).strip() or "unspecified"
        with self._drops_lock:
            self.dropped[label] += 1
            self._pending_drops.append({"reason": label, "detail": str(detail)[:MAX_DROP_DETAIL]})

    def take_dropped(self) -> list[dict[str, Any]]:
        """The drops noted since the last call (the engine stores them); the counts stay."""
        with self._drops_lock:
            taken, self._pending_drops = self._pending_drops, []
        return taken

    def dropped_counts(self) -> dict[str, int]:
        """A copy of ``dropped``, most frequent reason first, then by name (safe while proposers note)."""
        with self._drops_lock:
            return dict(sorted(self.dropped.items(), key=lambda item: (-item[1], item[0])))

    def add(self, candidate: Candidate, verdict: Verdict) -> tuple[Scored, bool]:
        """Add an evaluation to the in-memory population; returns it and whether it is a new best."""
        parent = self.by_id.get(candidate.parent_ids[0]) if candidate.parent_ids else None
        scored = Scored(candidate, verdict, feedback_for(candidate, verdict, parent))
        self.population.append(scored)
        self.by_id[candidate.id] = scored
        for parent_id in candidate.parent_ids:
            self.children[parent_id] += 1
        if self.seed_id is None and not candidate.parent_ids:
            self.seed_id = candidate.id
        is_new_best = self._may_be_best(scored) and (
            self.best is None or verdict.score > self.best.verdict.score
        )
        if is_new_best:
            self.best = scored
            self._best_position = len(self.population) - 1
        return scored, is_new_best

    def _may_be_best(self, scored: Scored) -> bool:
        return scored.verdict.accepted and scored.candidate.id not in self.failed_revalidation

    def set_aside(self, candidate_id: str) -> None:
        """The best failed its re-validation: take it out of the running; ``best`` becomes the next one
        (highest score, earliest on ties, as :meth:`add` would have chosen without it)."""
        self.failed_revalidation.add(candidate_id)
        self.best, self._best_position = None, -1
        for position, scored in enumerate(self.population):
            if self._may_be_best(scored) and (
                self.best is None or scored.verdict.score > self.best.verdict.score
            ):
                self.best, self._best_position = scored, position

    @property
    def evaluations(self) -> int:
        return len(self.population)

    def evaluations_since_best(self) -> int:
        if self.best is None:
            return self.evaluations
        return self.evaluations - 1 - self._best_position

    def plugin_states(self) -> list[tuple[str, dict[str, Any]]]:
        """Every plugin's state dict, by plugin name (the live view shows their ``progress_text``)."""
        return sorted(self._state.items())
