"""Helpers shared by the evaluator tests: the case files and quick CPU options."""

from __future__ import annotations

from pathlib import Path

from ksmith_core.loading import load_problem
from ksmith_core.model import Candidate, EvalOptions

CASES = Path(__file__).parent / "cases"


def problem(name: str):
    return load_problem(CASES / f"{name}.py")


def candidate(name: str) -> Candidate:
    """Read as the engine would hand it over (no parse check: a syntax error is the evaluator's to report).

    ``name`` is a case file's stem, or a full file name for the few that are not Python (a syntax error)."""
    path = CASES / (name if "." in name else f"{name}.py")
    return Candidate.from_source(path.read_text(encoding="utf-8"))


def quick_options(cache_dir: str, **overrides) -> EvalOptions:
    """CPU, small sizes, two trials: enough where the point of a case is not the number of seeds."""
    base = {
        "device": "cpu",
        "correctness_trials": 2,
        "timing_trials": 2,
        "timeout_s": 90.0,
        "cache_dir": cache_dir,
    }
    return EvalOptions(**{**base, **overrides})


def stand_in_timers(perf_counter, sleep=lambda cycles: None) -> dict:
    """CUDA timers for the GPU loop run on the CPU: events that record nothing and read 0.1 ms, a spin that
    ``sleep`` records, the host clock ``perf_counter``."""
    return {
        "event_class": lambda enable_timing=True: None,
        "record": lambda event, stream: None,
        "elapsed": lambda start, end: 0.1,
        "synchronize": lambda: None,
        "stream": None,
        "sleep": sleep,
        "perf_counter": perf_counter,
    }
