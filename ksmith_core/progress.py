"""The live view of ``ksmith evolve``: step, best speedup, archive fill, evaluations/min, failures by status,
and the generations dropped before evaluation, by reason.

Drawn on stderr with rich, so ``--json`` output on stdout stays clean; on a non-terminal it prints one line
per new best, and one per step that brought nothing new (with what it dropped), instead of redrawing.
Plugins can add a line by setting ``run.state(name)["progress_text"]``.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ksmith_core.clitools import fmt_speedup
from ksmith_core.run import Run
from ksmith_core.store import drop_words


class EvolveProgress:
    def __init__(self, enabled: bool = True) -> None:
        self.console = Console(stderr=True)
        self.enabled = enabled
        self.live_mode = enabled and self.console.is_terminal
        self.live: Live | None = None
        self.run: Run | None = None
        self.started = time.monotonic()
        self.session_evals = 0
        self.failures: Counter[str] = Counter()

    def __enter__(self) -> EvolveProgress:
        if self.live_mode:
            self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self._render())
            self.live.__exit__(*exc)

    def attach(self, run: Run) -> None:
        self.run = run
        for scored in run.population:
            if not scored.verdict.accepted:
                self.failures[scored.verdict.status.value] += 1
        if self.enabled and not self.live_mode and run.resumed:
            self.console.print(f"resuming {run.id} at {run.evaluations}/{run.config.budget} evaluations")

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "evaluated":
            self.session_evals += 1
            verdict = data["scored"].verdict
            if not verdict.accepted:
                self.failures[verdict.status.value] += 1
            if self.enabled and not self.live_mode and data["new_best"]:
                run = data["run"]
                self.console.print(
                    f"[{run.evaluations}/{run.config.budget}] new best {data['scored'].candidate.id}: "
                    f"{fmt_speedup(verdict.speedup)} vs eager"
                    + (" (interpreted)" if verdict.interpreted else "")
                )
        elif kind == "step" and self.enabled and not self.live_mode and not data["new"]:
            run = data["run"]
            drops = Counter(row["reason"] for row in data["drops"])
            what = ", ".join(f"{n} {drop_words(reason)}" for reason, n in drops.most_common())
            self.console.print(
                f"[{run.evaluations}/{run.config.budget}] nothing new this step"
                + (f", dropped: {what}" if what else ""),
                markup=False,
                highlight=False,
            )
        if self.live is not None:
            self.live.update(self._render())

    def _render(self) -> Table:
        table = Table.grid(padding=(0, 2))
        run = self.run
        if run is None:
            table.add_row("starting...")
            return table
        minutes = max(time.monotonic() - self.started, 1e-6) / 60.0
        best = run.best.verdict if run.best else None
        best_text = "none yet"
        if best is not None:
            best_text = f"{fmt_speedup(best.speedup)} vs eager"
            if best.speedup_vs_compile is not None:
                best_text += f", {fmt_speedup(best.speedup_vs_compile)} vs torch.compile"
            if best.interpreted:
                best_text += " (interpreted CPU timings)"
        table.add_row("[bold]ksmith evolve[/]", f"{run.problem.name} ({run.config.proposer})")
        table.add_row("evaluations", f"{run.evaluations}/{run.config.budget}")
        table.add_row("best", best_text)
        table.add_row("rate", f"{self.session_evals / minutes:.1f} evaluations/min")
        failures = ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items())) or "none"
        table.add_row("failures", failures)
        dropped = run.dropped_counts()
        what = ", ".join(f"{n} {drop_words(reason)}" for reason, n in dropped.items())
        table.add_row("dropped", f"{sum(dropped.values())}: {what}" if dropped else "none")
        for name, state in run.plugin_states():
            text = state.get("progress_text")
            if text:
                table.add_row(name, str(text))
        return table
