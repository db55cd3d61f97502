"""Builders for tests of selectors and reports: real runs in a real run store, fed synthetic candidates and
verdicts.

The selector only reads sources, verdicts and the population, so these tests need no evaluator: a candidate
here is a Triton module that is parsed, never launched, and its verdict is written by the test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ksmith_core.model import Candidate, Problem, Status, TimingStats, Verdict
from ksmith_core.run import Run, RunConfig
from ksmith_core.store import RunStore
from ksmith_mapelites import plugin as mapelites

PROBLEM_SOURCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""


def kernel_source(
    block: int | str = 1024,
    warps: int | None = 4,
    stages: int | None = 2,
    dot: bool = False,
    hints: bool = False,
    launches: int = 1,
    note: str = "",
) -> str:
    """A ReLU candidate whose launch configuration and kernel body vary with the arguments."""
    load_hint = ', eviction_policy="evict_first"' if hints else ""
    body = "y = tl.dot(x, x)" if dot else "y = tl.maximum(x, 0.0)"
    tunables = [f"BLOCK_SIZE={block}"]
    if warps is not None:
        tunables.append(f"num_warps={warps}")
    if stages is not None:
        tunables.append(f"num_stages={stages}")
    launch = f"_relu_kernel[grid](x, out, n, {', '.join(tunables)})"
    launch_lines = "\n".join(f"        {launch}" for _ in range(launches))
    return f"""import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    # {note}
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask{load_hint})
    {body}
    tl.store(out_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
{launch_lines}
        return out
"""


def ok_verdict(speedup: float, eval_seconds: float = 2.0, **details: Any) -> Verdict:
    runtime = TimingStats.from_samples([1.0 / speedup])
    return Verdict(
        status=Status.OK,
        correct=True,
        runtime=runtime,
        reference_eager=TimingStats.from_samples([1.0]),
        reference_compile=TimingStats.from_samples([0.8]),
        speedup=speedup,
        speedup_vs_compile=0.8 * speedup,
        device="cpu",
        interpreted=True,
        details=details,
        eval_seconds=eval_seconds,
    )


def broken_verdict(
    status: Status = Status.COMPILE_ERROR, error: str = "CompilationError: at 12:4"
) -> Verdict:
    return Verdict(
        status=status,
        reasons=(f"{status.value.upper()}: {error}",),
        feedback=f"status: {status.value}\nerror:\n  {error}",
        device="cpu",
        interpreted=True,
        error=error,
        eval_seconds=1.0,
    )


class SyntheticRun:
    """A real :class:`Run` on a real store, recording evaluations the way the engine does."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def record(self, candidate: Candidate, verdict: Verdict) -> list[dict[str, Any]]:
        self.run.add(candidate, verdict)
        records = mapelites.ksmith_archive(run=self.run, candidate=candidate, verdict=verdict)
        self.run.store.record_evaluation(candidate, verdict, records)
        return records

    def child(
        self, parent: Candidate, source: str, verdict: Verdict, island: int | None = None, edit: str = ""
    ) -> Candidate:
        candidate = Candidate.from_source(
            source,
            parent_ids=(parent.id,),
            island=parent.island if island is None else island,
            edit=edit,
            edit_kind="block_size",
            proposer="mutate",
        )
        self.record(candidate, verdict)
        return candidate

    def seed(self, source: str, verdict: Verdict) -> Candidate:
        candidate = Candidate.from_source(source, proposer="seed")
        self.record(candidate, verdict)
        return candidate

    @property
    def archive(self):
        return mapelites.archive_of(self.run)


def open_run(run_dir: Path, **config: Any) -> Run:
    """Create a run directory and the Run on it, as ``Engine.start`` does."""
    config.setdefault("budget", 60)
    config.setdefault("islands", 2)
    cfg = RunConfig(**config)
    problem_path = run_dir / "problem.py"
    meta = {"problem": "relu", "problem_sha": "test", "config": cfg.to_dict()}
    manifest = {"device": {"device": "cpu", "name": "cpu, Triton interpreter"}, "config": cfg.to_dict()}
    store = RunStore.create(run_dir, PROBLEM_SOURCE, meta, manifest)
    problem = Problem(name="relu", path=problem_path, source=PROBLEM_SOURCE)
    return Run(problem, cfg, store)


# Fixtures (imported by the conftest of each test directory that builds runs).


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., SyntheticRun]:
    made: list[Run] = []

    def make(name: str = "run", **config: Any) -> SyntheticRun:
        run = open_run(tmp_path / name, **config)
        made.append(run)
        return SyntheticRun(run)

    yield make
    for run in made:
        run.store.close()  # closing twice is harmless


@pytest.fixture
def source() -> Callable[..., str]:
    return kernel_source
