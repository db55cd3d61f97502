"""The engine: drives the hooks around the loop select -> propose -> evaluate -> archive.

The engine is the only writer of the run store. Proposals are de-duplicated before evaluation (a candidate
whose source was already evaluated in this run -- exactly, or up to comments, layout and local variable
names -- is never evaluated again), evaluations of one step run in
parallel threads (each evaluation is its own child process, so threads only wait), and every finished
evaluation is committed before the next step, so a run killed at any point resumes where it stopped.

Every generation that never reaches evaluation is counted by reason (``Run.note_dropped``): the proposer's
own drops (no usable edit, nothing left to try), and the engine's -- duplicates, near duplicates, proposals
past the budget, steps where the proposer returned nothing and said nothing, a selector with no parent. Each
step's drops are committed as ``dropped`` events in one transaction before its evaluations start, and the
counts are rebuilt from them on resume.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ksmith_core import plugins
from ksmith_core.capabilities import Backend, EvalJob, Executor, Proposer, Selector
from ksmith_core.environment import device_facts, versions
from ksmith_core.errors import ConfigError, PluginError, RunStoreError
from ksmith_core.feedback import feedback_for
from ksmith_core.loading import load_problem, with_backend
from ksmith_core.model import (
    Candidate,
    EvalOptions,
    Problem,
    Proposal,
    Scored,
    Selection,
    Verdict,
    freeze,
    thaw,
)
from ksmith_core.novelty import fingerprint
from ksmith_core.registry import lookup, registry
from ksmith_core.run import Run, RunConfig
from ksmith_core.store import RunStore, default_runs_root

# How many consecutive steps may bring no new candidate before the run stops as exhausted.
MAX_BARREN_STEPS = 8
# Candidates re-validated at the end of a run, at most: the best, then the next while one fails. Past that the
# problem's check itself is suspect, and what is left is reported as not re-validated.
MAX_REVALIDATIONS = 3

log = logging.getLogger("ksmith")

ProgressCallback = Callable[[str, dict[str, Any]], None]


def evaluate(problem: Problem, candidate: Candidate, options: EvalOptions) -> Verdict:
    """A verdict on one candidate from the backend the problem names, with its feedback text filled in."""
    verdict = lookup(Backend, problem.backend).evaluate(problem, candidate, options)
    if not isinstance(verdict, Verdict):
        raise PluginError(f"the {problem.backend!r} backend returned {type(verdict).__name__}, not a Verdict")
    if not verdict.feedback:
        verdict = replace(verdict, feedback=feedback_for(candidate, verdict))
    return verdict


def executor_for(name: str | None) -> Executor:
    """The executor ``name``, or the installed default (the local pool) when ``None``."""
    if name is not None:
        return lookup(Executor, name)
    found = registry().default(Executor)
    if found is None:
        raise PluginError("no executor is installed (the built-in 'local' executor comes with ksmith_basics)")
    return found


def evaluate_all(
    jobs: list[EvalJob],
    parallel: int = 1,
    executor: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[Verdict]:
    """Verdicts for many evaluations, in order, dispatched by the executor (``parallel`` in flight)."""
    if not jobs:
        return []
    verdicts = executor_for(executor).run(jobs, max(1, parallel), dict(options or {}))
    if len(verdicts) != len(jobs):
        raise PluginError(f"executor returned {len(verdicts)} verdicts for {len(jobs)} evaluations")
    return verdicts


def selector_for(name: str | None) -> Selector:
    """The selector ``name``, or the installed default when ``None``."""
    if name is not None:
        return lookup(Selector, name)
    found = registry().default(Selector)
    if found is None:
        raise PluginError("no selector is installed; name one with --select (see `ksmith plugins`)")
    return found


@dataclass
class RunResult:
    run_dir: Path
    evaluations: int
    best: Scored | None
    seed: Scored | None
    stop_reason: str
    revalidated: Verdict | None  # the re-validation of ``best``; None when it was not re-validated
    # Candidates that were the best in turn and failed their re-validation, in order; ``best`` is the next.
    set_aside: tuple[Scored, ...] = ()
    failed_revalidations: tuple[Verdict, ...] = ()  # their re-validations' verdicts, in the same order


def new_run_dir(problem: Problem, root: Path | None = None) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    root = root or default_runs_root()
    base = root / f"{stamp}-{problem.name}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = Path(f"{base}-{n}")
    return path


class Engine:
    def __init__(self, run: Run, on_event: ProgressCallback | None = None) -> None:
        self.run = run
        self.pm = plugins.get_plugin_manager()
        # Looked up once: an unknown name fails here, before any evaluation, with the registered names.
        self.proposer = proposer_for(run.config.proposer)
        self.selector = selector_for(run.config.select)
        self.executor = executor_for(run.config.executor)
        self.on_event = on_event or (lambda kind, data: None)
        # Near-duplicate detection: sources equal up to comments, layout and local names.
        self.fingerprints: set[str] = set()

    # -- construction --------------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        problem: Problem,
        seed: Candidate,
        config: RunConfig,
        run_dir: Path | None = None,
        on_event: ProgressCallback | None = None,
    ) -> Engine:
        problem = with_backend(problem, config.backend)
        config = resolved_config(problem, config)
        run_dir = run_dir or new_run_dir(problem)
        manifest = {
            "versions": versions(),
            "device": device_facts(config.eval.device),
            "config": config.to_dict(),
            "seed": {"search_seed": config.seed, "seed_candidate": seed.id},
            "problem": {"name": problem.name, "source_path": str(problem.path), "sha": problem.sha},
            "sessions": [{"started": time.time(), "resumed": False}],
        }
        meta = {
            "problem": problem.name,
            "problem_sha": problem.sha,
            "config": config.to_dict(),
            "seed_id": seed.id,
        }
        store = RunStore.create(run_dir, problem.source, meta, manifest)
        (run_dir / "seed.py").write_text(seed.source, encoding="utf-8")
        run = Run(with_backend(_problem_in_run(problem, store), config.backend), config, store)
        return cls(run, on_event)

    @classmethod
    def resume(
        cls, run_dir: Path, overrides: dict[str, Any] | None = None, on_event: ProgressCallback | None = None
    ) -> Engine:
        store = RunStore.open(run_dir, writable=True)
        meta = store.meta()
        try:
            config = RunConfig.from_dict(meta["config"])
            if overrides:
                config = replace(config, **overrides)
        except (KeyError, TypeError) as exc:
            store.close()
            raise RunStoreError(f"run {run_dir} has no usable configuration: {exc}") from exc
        except ConfigError:
            store.close()
            raise
        try:
            problem = with_backend(load_problem(store.problem_path, name=meta.get("problem")), config.backend)
            config = resolved_config(problem, config)
        except PluginError:
            store.close()
            raise
        manifest = store.manifest()
        manifest.setdefault("sessions", []).append({"started": time.time(), "resumed": True})
        manifest["config"] = config.to_dict()
        store.write_manifest(manifest)
        store.set_meta("config", config.to_dict())
        run = Run(problem, config, store, resumed=True)
        engine = cls(run, on_event)
        engine._replay()
        return engine

    def _replay(self) -> None:
        """Rebuild in-memory state (population, archives) from the stored evaluations."""
        self.run.replaying = True
        try:
            for _, candidate, verdict in self.run.store.evaluations():
                self.run.add(candidate, verdict)
                self.fingerprints.add(fingerprint(candidate.source))
                self.pm.hook.ksmith_archive(run=self.run, candidate=candidate, verdict=verdict)
            self.run.dropped.update(self.run.store.dropped()["by_reason"])
        finally:
            self.run.replaying = False

    # -- the loop ------------------------------------------------------------------------------------------

    def _stop_reason(self) -> str | None:
        cfg = self.run.config
        if self.run.evaluations >= cfg.budget:
            return "budget"
        if cfg.gpu_minutes is not None and self.run.store.eval_seconds() / 60.0 >= cfg.gpu_minutes:
            return "gpu_minutes"
        if (
            cfg.patience is not None
            and self.run.best is not None
            and self.run.evaluations_since_best() >= cfg.patience
        ):
            return "patience"
        best = self.run.best
        if cfg.stop_at_roofline is not None and best is not None:
            fraction = best.verdict.roofline_fraction
            if fraction is not None and not best.verdict.interpreted and fraction >= cfg.stop_at_roofline:
                return "near_roofline"
        return None

    def _stop_detail(self, reason: str) -> str:
        cfg = self.run.config
        return {
            "budget": f"{self.run.evaluations} of {cfg.budget} evaluations",
            "gpu_minutes": f"{cfg.gpu_minutes:g} evaluation minutes spent" if cfg.gpu_minutes else "",
            "patience": f"{cfg.patience} evaluations without a new best",
            "exhausted": f"no new candidate in {MAX_BARREN_STEPS} steps in a row",
            "near_roofline": self._near_roofline_detail(),
        }.get(reason, "")

    def _near_roofline_detail(self) -> str:
        best, cfg = self.run.best, self.run.config
        fraction = best.verdict.roofline_fraction if best is not None else None
        if fraction is None or cfg.stop_at_roofline is None:
            return ""
        left = max(1.0 / fraction - 1.0, 0.0)
        return (
            f"the best runs at {fraction:.2f} of its {best.verdict.roofline_bound or 'measured'} roofline "
            f"(--stop-at-roofline {cfg.stop_at_roofline:g}): at most {left:.0%} left to gain"
        )

    def _store_dropped(self, drops: list[dict[str, Any]], new: int = 0) -> None:
        """Commit one step's drops (``by`` the proposer or the engine) as ``dropped`` events, in one
        transaction, and tell the live view (a ``step`` event); ``new`` is how many candidates the step
        brought."""
        run = self.run
        rows = [{**drop, "proposer": self.proposer.name, "evaluations": run.evaluations} for drop in drops]
        run.store.record_dropped(rows)
        for row in rows:
            log.info("dropped by the %s (%s): %s", row["by"], row["reason"], row["detail"])
        self.on_event("step", {"drops": rows, "new": new, "run": run})

    def _evaluate_and_record(self, candidates: list[Candidate]) -> None:
        jobs = [EvalJob(self.run.problem, c, self.run.config.eval) for c in candidates]
        verdicts = self.executor.run(
            jobs, min(self.run.config.parallel, len(jobs)), dict(self.run.config.executor_options)
        )
        for candidate, verdict in zip(candidates, verdicts):
            self._record(candidate, verdict)

    def _record(self, candidate: Candidate, verdict: Verdict) -> None:
        scored, is_new_best = self.run.add(candidate, verdict)
        self.fingerprints.add(fingerprint(candidate.source))
        records: list[dict[str, Any]] = []
        for result in self.pm.hook.ksmith_archive(run=self.run, candidate=candidate, verdict=verdict):
            records.extend(result or [])
        self.run.store.record_evaluation(candidate, verdict, records)
        if is_new_best:
            self.run.store.record_event(
                "new_best", {"speedup": verdict.speedup, "evaluation": self.run.evaluations}, candidate.id
            )
            self.pm.hook.ksmith_new_best(run=self.run, candidate=candidate, verdict=verdict)
        self.on_event("evaluated", {"scored": scored, "new_best": is_new_best, "run": self.run})

    def _fresh(self, proposals: list[Proposal], selection: Selection) -> list[Candidate]:
        fresh: dict[str, Candidate] = {}
        seen = set(self.fingerprints)
        shown = selection_record(selection)
        for proposal in proposals:
            candidate = Candidate.from_proposal(proposal, island=selection.island)
            if shown:  # what the proposer was shown besides the parent, for the step-level datasets
                candidate = replace(candidate, meta=freeze({**shown, **thaw(candidate.meta)}))
            print_ = fingerprint(candidate.source)
            if candidate.id in self.run.by_id or candidate.id in fresh:
                when = "earlier in the run" if candidate.id in self.run.by_id else "twice in this step"
                self.run.note_dropped("duplicate", f"{candidate.id} was proposed {when}")
            elif print_ in seen:
                self.run.note_dropped(
                    "near_duplicate",
                    f"{candidate.id} differs from a kernel of the run only in comments, layout or local names",
                )
            else:
                seen.add(print_)
                fresh[candidate.id] = candidate
                continue
            self.on_event("duplicate", {"candidate": candidate})
        return list(fresh.values())

    def evolve(self, seed: Candidate | None = None) -> RunResult:
        """Run until a budget is spent, patience runs out, or the proposer has nothing new to offer."""
        run = self.run
        self.pm.hook.ksmith_run_start(run=run)
        if seed is not None and seed.id not in run.by_id:
            self.on_event("seed", {"candidate": seed})
            self._evaluate_and_record([seed])
        barren = 0
        detail = None
        reason = self._stop_reason()
        while reason is None:
            selection: Selection | None = self.selector.select(run)
            if selection is None or not selection.parents:
                run.note_dropped("no_selection", f"the {self.selector.name} selector offered no parent")
                self._store_dropped(_by("engine", run.take_dropped()))
                reason, detail = "exhausted", "the selector offered no parent"
                break
            try:
                proposals = list(self.proposer.propose(run, selection) or [])
            except BaseException:
                self._store_dropped(_by("proposer", run.take_dropped()))  # what it noted before it failed
                raise
            drops = _by("proposer", run.take_dropped())
            if not proposals and not drops:
                parents = ", ".join(p.candidate.id for p in selection.parents)
                run.note_dropped(
                    "no_proposal", f"the {self.proposer.name} proposer returned nothing for {parents}"
                )
            fresh = self._fresh(proposals, selection)
            room = run.config.budget - run.evaluations
            for candidate in fresh[room:]:
                run.note_dropped("over_budget", f"{candidate.id} did not fit in the evaluation budget")
            candidates = fresh[:room]
            self._store_dropped(drops + _by("engine", run.take_dropped()), new=len(candidates))
            if not candidates:
                barren += 1
                if barren >= MAX_BARREN_STEPS:
                    reason = "exhausted"
                    break
                continue
            barren = 0
            self._evaluate_and_record(candidates)
            reason = self._stop_reason()
        return self._finish(reason, detail)

    def _finish(self, reason: str, detail: str | None = None) -> RunResult:
        run = self.run
        detail = detail or self._stop_detail(reason)  # of the best that stopped the run, before re-validation
        revalidated, set_aside, failed = self._revalidate() if run.config.revalidate_best else (None, [], [])
        end = {
            "reason": reason,
            "detail": detail,
            "evaluations": run.evaluations,
            "dropped": run.dropped_counts(),
        }
        if set_aside:
            end["failed_revalidation"] = [scored.candidate.id for scored in set_aside]
        run.store.record_event("run_end", end)
        self.pm.hook.ksmith_run_end(run=run, reason=reason)
        seed = run.by_id.get(run.seed_id) if run.seed_id else None
        return RunResult(
            run.store.path,
            run.evaluations,
            run.best,
            seed,
            reason,
            revalidated,
            tuple(set_aside),
            tuple(failed),
        )

    def _revalidate(self) -> tuple[Verdict | None, list[Scored], list[Verdict]]:
        """Fresh seeds, fresh inputs, a fresh process: the best must hold up once more, dispatched by the
        executor like any evaluation. One that does not is set aside and the next best is tried, up to
        :data:`MAX_REVALIDATIONS` in all; returns the re-validation of the best that held (None if none was
        left to try or none held), those set aside and their failed re-validations."""
        run, set_aside, failed = self.run, [], []
        while run.best is not None and len(set_aside) < MAX_REVALIDATIONS:
            best = run.best
            job = EvalJob(run.problem, best.candidate, run.config.eval)
            (verdict,) = self.executor.run([job], 1, dict(run.config.executor_options))
            run.store.record_event("revalidation", verdict.to_dict(), best.candidate.id)
            self.on_event("revalidated", {"verdict": verdict, "candidate": best.candidate})
            if verdict.accepted:
                return verdict, set_aside, failed
            run.set_aside(best.candidate.id)
            set_aside.append(best)
            failed.append(verdict)
        return None, set_aside, failed

    def close(self) -> None:
        self.run.store.close()


def selection_record(selection: Selection) -> dict[str, Any]:
    """What a candidate's meta keeps of the selection it came from: its mode and the inspirations' ids."""
    record: dict[str, Any] = {}
    if selection.inspirations:
        record["inspiration_ids"] = [scored.candidate.id for scored in selection.inspirations]
    if selection.mode:
        record["selection_mode"] = selection.mode
    return record


def _by(origin: str, drops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drops as noted, marked with who dropped them (``"proposer"`` or ``"engine"``)."""
    return [{**drop, "by": origin} for drop in drops]


def proposer_for(name: str | None) -> Proposer:
    """The proposer ``name``, or the installed default (mutate) when ``None``."""
    if name is not None:
        return lookup(Proposer, name)
    found = registry().default(Proposer)
    if found is None:
        raise PluginError("no default proposer is installed; name one with --proposer (see `ksmith plugins`)")
    return found


def resolved_config(problem: Problem, config: RunConfig) -> RunConfig:
    """``config`` with its proposer named, after checking that every capability it names exists (one line
    listing the registered names if one does not)."""
    lookup(Backend, problem.backend)
    selector_for(config.select)
    executor_for(config.executor)
    return replace(config, proposer=proposer_for(config.proposer).name)


def _problem_in_run(problem: Problem, store: RunStore) -> Problem:
    """The problem as copied into the run directory: later edits of the user's file do not change the run."""
    return load_problem(store.problem_path, name=problem.name)
