"""A throwaway backend and proposer for testing the core's plumbing without a GPU or Triton.

The "toy" backend reads ``SPEED = <float>`` from a candidate's source and calls that its speedup, or fails
with the status named by ``FAIL = "<status>"``. The "toy" proposer rewrites SPEED. Real evaluation is tested
with the Triton plugin elsewhere; this isolates engine, store and CLI behaviour.
"""

from __future__ import annotations

import re
from pathlib import Path

from ksmith_core import Backend, Proposer, hookimpl
from ksmith_core.model import Proposal, Status, TimingStats, Verdict

PROBLEM = '''"""A toy problem for core tests."""
import torch.nn as nn

KSMITH_BACKEND = "toy"


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return []


def get_init_inputs():
    return []
'''

SEED = """import torch.nn as nn

SPEED = 1.0


class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


def write_toy_problem(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    problem, seed = directory / "toy.py", directory / "toy.seed.py"
    problem.write_text(PROBLEM)
    seed.write_text(SEED)
    return problem, seed


def speed_of(source: str) -> float:
    return float(re.search(r"^SPEED = ([0-9.]+)", source, re.M).group(1))


class ToyPlugin:
    """Register with ``pm.register(ToyPlugin(), name="toy")``; records what it was called with."""

    def __init__(self, step: float = 0.25, fail_every: int = 0, flaky_from: float | None = None) -> None:
        self.step = step
        self.fail_every = fail_every
        # Candidates at least this fast pass their evaluation and fail any later one (the re-validation).
        self.flaky_from = flaky_from
        self.calls: dict[str, int] = {}
        self.evaluated: list[str] = []
        self.ended: list[str] = []
        self.new_bests: list[float] = []

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    @hookimpl
    def ksmith_register_backends(self, register):
        register(Backend("toy", self.evaluate, "test backend: speed read from the source"))

    @hookimpl
    def ksmith_register_proposers(self, register):
        register(Proposer("toy", self.propose, "test proposer: bumps SPEED"))

    def evaluate(self, problem, candidate, options):
        self._count("evaluate")
        again = candidate.id in self.evaluated
        self.evaluated.append(candidate.id)
        fail = re.search(r'^FAIL = "(\w+)"', candidate.source, re.M)
        if fail:
            return Verdict(status=Status(fail.group(1)), reasons=(f"TOY: {fail.group(1)}",), eval_seconds=0.5)
        speed = speed_of(candidate.source)
        if again and self.flaky_from is not None and speed >= self.flaky_from:
            return Verdict(status=Status.INCORRECT, reasons=("TOY: flaky",), eval_seconds=0.5)
        ref = TimingStats.from_samples([1.0])
        run = TimingStats.from_samples([1.0 / speed])
        return Verdict(
            status=Status.OK,
            correct=True,
            runtime=run,
            reference_eager=ref,
            speedup=speed,
            speedup_vs_compile=speed / 2,
            roofline_fraction=min(1.0, speed / 4),  # toy ceiling: 4x eager; torch.compile sits at 0.5 of it
            roofline_bound="memory",
            device="toy",
            eval_seconds=0.5,
        )

    def propose(self, run, selection):
        self._count("propose")
        parent = selection.parents[0].candidate
        out = []
        for i in range(run.config.proposals_per_step):
            speed = speed_of(parent.source) + self.step * (i + 1)
            source = re.sub(r"^SPEED = [0-9.]+", f"SPEED = {speed}", parent.source, flags=re.M)
            n = len(run.population) + i
            if self.fail_every and n % self.fail_every == 0:
                source += f'\nFAIL = "incorrect"  # {n}\n'
            out.append(
                Proposal(
                    source=source,
                    parent_ids=(parent.id,),
                    edit=f"SPEED -> {speed}",
                    edit_kind="speed",
                    proposer="toy",
                )
            )
        return out

    @hookimpl
    def ksmith_run_start(self, run):
        self._count("ksmith_run_start")

    @hookimpl
    def ksmith_new_best(self, run, candidate, verdict):
        self.new_bests.append(verdict.speedup)

    @hookimpl
    def ksmith_run_end(self, run, reason):
        self.ended.append(reason)


# A ready instance for KSMITH_PLUGIN_MODULES="tests.core.toy:PLUGIN" (subprocess tests).
PLUGIN = ToyPlugin()
