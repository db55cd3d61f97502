"""Streamed trials (``KSMITH_STREAM_TRIALS=1``; on a GPU, automatic when every trial's outputs together would
not fit): each trial's outputs are compared before the candidate runs the next, so its process keeps one
trial's copy. The verdicts are the ones the trials compared at once give, with the same precedence."""

from __future__ import annotations

import pytest
from evaluator_helpers import candidate, problem, quick_options

from ksmith_core.model import Status
from ksmith_triton.evaluator import evaluate, evaluate_many

CASES = [
    ("scale_add_ok", Status.OK, None),
    ("wrong_output", Status.INCORRECT, "(trial 0 of 3)"),
    ("cache_by_shape", Status.INCORRECT, "(trial 1 of 3)"),  # right once, then the first answer replayed
    ("input_mutation", Status.INCORRECT, "INPUT_MUTATED"),
    ("symlink_output", Status.REJECTED, "FORGED_OUTPUT"),
    ("segfault", Status.CRASHED, None),
]


@pytest.mark.parametrize("stream", ["1", "0"])
def test_streamed_trials_give_the_verdicts_of_trials_compared_at_once(stream, monkeypatch, reference_cache):
    monkeypatch.setenv("KSMITH_STREAM_TRIALS", stream)
    options = quick_options(reference_cache, correctness_trials=3)
    verdicts = evaluate_many(
        problem("scale_add"), [candidate(name) for name, _, _ in CASES], options, workers=3
    )
    for (name, status, reason), verdict in zip(CASES, verdicts):
        assert verdict.status is status, (name, verdict.reasons)
        if reason is not None:
            assert any(reason in r for r in verdict.reasons), (name, verdict.reasons)
    ok = verdicts[0]
    assert bool(ok.details.get("trials_streamed")) is (stream == "1")
    # Streamed, the comparisons happen between trials: their time is counted apart from the candidate's.
    assert ("candidate_trials_alone" in ok.phases) is (stream == "1")
    assert ok.phases["reference_compare"] >= 0


def test_a_degenerate_reference_is_refused_when_streamed(monkeypatch, reference_cache):
    monkeypatch.setenv("KSMITH_STREAM_TRIALS", "1")
    verdict = evaluate(
        problem("degenerate_zeros"), candidate("constant_zeros"), quick_options(reference_cache)
    )
    assert verdict.status is Status.REJECTED
    assert verdict.reasons[0].startswith("DEGENERATE_REFERENCE:")


@pytest.mark.parametrize("stream", ["1", "0"])
def test_streamed_trials_share_one_time_budget(stream, monkeypatch, reference_cache):
    """Streamed, each trial is awaited separately: the candidate still gets one budget for all of them."""
    monkeypatch.setenv("KSMITH_STREAM_TRIALS", stream)
    options = quick_options(reference_cache, correctness_trials=3, timeout_s=6.0)
    verdict = evaluate(problem("scale_add"), candidate("slow_calls"), options)
    assert verdict.status is Status.TIMEOUT, verdict.reasons
