"""Candidates that keep state across calls, and the timing protocol that leaves them no call to cheat on.

A candidate sees every call: it can count them, read the clock, remember input addresses, or cheat at random.
Against a fixed, published schedule that compares only some calls' outputs, each of these passed with a fake
speedup. Now the schedule is drawn as it goes and every timed call's outputs are checked (samples at positions
drawn after the call, a few calls in full), so every one of them is caught; the honest kernel still passes.
The pure functions behind it -- the schedule, the checks of the per-call reports and of the timings -- are
tested here too, the timings check with honest noise that must never be refused.
"""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from evaluator_helpers import candidate, problem, quick_options

from ksmith_triton import evaluator
from ksmith_triton.evaluator import evaluate, forged_call_reports, timing_contradictions
from ksmith_triton.timing import Schedule

CASES = {
    "honest": ("scale_add_ok", "ok", None),
    "call_counter": ("stateful_call_counter", "incorrect", "TIMED_OUTPUT_MISMATCH"),
    "clock": ("stateful_clock", "incorrect", "TIMED_OUTPUT_MISMATCH"),
    "pointer_history": ("stateful_pointer_history", "incorrect", "TIMED_OUTPUT_MISMATCH"),
    "random_majority": ("stateful_random_majority", "incorrect", "TIMED_OUTPUT_MISMATCH"),
    "torch_while_timed": ("stateful_torch_while_timed", "rejected", "FORBIDDEN_TORCH_OP"),
    "interpreter_hook": ("interpreter_hook", "rejected", "INTERPRETER_HOOK"),
}


@pytest.fixture(scope="module")
def stateful_verdicts(reference_cache):
    # More timed calls than the CPU default, so the cheats have calls to cheat on (the schedule is still drawn).
    saved = evaluator.CPU_TIMING_TRIALS
    evaluator.CPU_TIMING_TRIALS = 12
    try:
        options = quick_options(reference_cache, correctness_trials=2, timing_trials=12)

        def judge(item):
            name, (case, _, _) = item
            return name, evaluate(problem("scale_add"), candidate(case), options)

        with ThreadPoolExecutor(max_workers=4) as pool:
            return dict(pool.map(judge, CASES.items()))
    finally:
        evaluator.CPU_TIMING_TRIALS = saved


@pytest.mark.parametrize("name", list(CASES))
def test_stateful_candidate(stateful_verdicts, name):
    _, status, code = CASES[name]
    verdict = stateful_verdicts[name]
    summary = f"{name}: {verdict.status.value} {list(verdict.reasons)} {verdict.error[-600:]}"
    assert verdict.status.value == status, summary
    if code:
        # The clock cheat guesses the phase from bursts of calls; on a slow machine its burst may start with
        # the trials and it is caught there instead: caught either way.
        codes = (code, "MISMATCH") if name == "clock" else (code,)
        assert any(reason.startswith(c + ":") for c in codes for reason in verdict.reasons), summary


def test_a_caught_cheat_says_which_call_and_what_was_wrong(stateful_verdicts):
    verdict = stateful_verdicts["call_counter"]
    assert verdict.mismatch is not None and verdict.mismatch.where.startswith("timed call ")
    assert verdict.mismatch.got == 0.0 and verdict.mismatch.expected != 0.0  # the elements it skipped


def test_the_honest_kernel_reports_every_timed_call(stateful_verdicts):
    timing = stateful_verdicts["honest"].details["timing"]
    assert 10 <= timing["calls"] <= 14  # 12 asked: drawn between 0.8x and 1.2x
    assert timing["fully_checked_calls"] and stateful_verdicts["honest"].runtime.trials == timing["calls"]


# -- the schedule -------------------------------------------------------------------------------------------


def test_the_number_of_calls_is_uniform_and_drawn_only_as_calls_happen():
    draws = []

    def urandom(n):
        draws.append(n)
        return os.urandom(n)

    schedule = Schedule(urandom, trials=100, warmup=10)
    assert schedule.trials == (80, 120) and schedule.warmup == (5, 15)
    counts = []
    for _ in range(3000):
        done = 0
        while not schedule.stop(done := done + 1, schedule.trials):
            pass
        counts.append(done)
    assert min(counts) == 80 and max(counts) == 120
    histogram = [counts.count(n) for n in range(80, 121)]
    assert min(histogram) > 30 and max(histogram) < 120  # ~73 each: uniform, not front- or back-loaded
    before = len(draws)
    assert not schedule.stop(10, schedule.trials) and len(draws) == before  # no draw before the range


# -- the reports of the timed calls -------------------------------------------------------------------------


def _calls(count, sets=3, full=(0,)):
    return [
        {
            "index": i,
            "set": i % sets,
            "gpu_ms": 1.0,
            "host_ms": 0.1,
            "seed": 7,
            "samples": [],
            **({"outputs": []} if i in full else {}),
        }
        for i in range(count)
    ]


def test_reports_must_be_one_per_call_in_order():
    assert forged_call_reports(_calls(5), {"calls": 5}, 3) == ""
    assert forged_call_reports(_calls(5), {"calls": 6}, 3).startswith("FORGED_REPORT")
    swapped = _calls(5)
    swapped[1], swapped[2] = swapped[2], swapped[1]
    assert forged_call_reports(swapped, {"calls": 5}, 3).startswith("FORGED_REPORT")
    assert forged_call_reports(_calls(5) + _calls(1), {"calls": 5}, 3).startswith("FORGED_REPORT")
    bad_set = _calls(5)
    bad_set[3]["set"] = 9
    assert "input set 9" in forged_call_reports(bad_set, {"calls": 5}, 3)
    assert "full check" in forged_call_reports(_calls(5, full=()), {"calls": 5}, 3)


# -- timings that contradict themselves ---------------------------------------------------------------------


def _honest(rng, n, base=0.2):
    """Per-call GPU times of an honest kernel: ~1 % noise, now and then a slow outlier (a clock dip)."""
    return [
        base * rng.lognormvariate(0, 0.01) * (1 + rng.random() * 0.5 if rng.random() < 0.04 else 1)
        for _ in range(n)
    ]


def test_honest_noise_is_never_refused():
    rng = random.Random(2026)
    for _ in range(3000):
        n = rng.randint(80, 120)
        samples = _honest(rng, n, base=rng.choice([0.005, 0.2, 3.0]))
        checked = rng.sample(range(n), rng.randint(1, 5))
        fresh = [rng.random() < 1 / 3 for _ in range(n)]
        assert timing_contradictions(samples, checked, fresh) == [], samples


def test_a_kernel_that_does_less_work_on_some_calls_is_bimodal():
    rng = random.Random(7)
    samples = _honest(rng, 100)
    cheated = [i for i in range(100) if rng.random() < 0.3]  # a majority moves the median: output checks
    for i in cheated:
        samples[i] *= 0.3
    reasons = timing_contradictions(samples, [i for i in range(100) if i not in cheated][:3], [False] * 100)
    assert any(r.startswith("TIMING_BIMODAL:") for r in reasons)
    few = _honest(rng, 100)
    for i in range(0, 100, 25):  # four fast calls are fewer than a tenth: left to the output checks
        few[i] *= 0.3
    assert timing_contradictions(few, [1, 2], [False] * 100) == []


def test_checked_calls_that_are_all_slower_are_refused():
    rng = random.Random(11)
    samples = _honest(rng, 100)
    for i in (5, 40, 77):
        samples[i] *= 1.3
    reasons = timing_contradictions(samples, [5, 40, 77], [False] * 100)
    assert any(r.startswith("TIMING_CHECKED_SLOWER:") for r in reasons)
    assert timing_contradictions(samples, [5, 41, 77], [False] * 100) == []  # one at the honest speed: no


def test_results_remembered_for_inputs_seen_before_are_refused():
    rng = random.Random(3)
    fresh = [rng.random() < 1 / 3 for _ in range(100)]
    samples = [t * (1.0 if f else 0.25) for t, f in zip(_honest(rng, 100), fresh)]
    reasons = timing_contradictions(samples, [0, 1], fresh)
    assert any(r.startswith("TIMING_RESULT_CACHE:") for r in reasons)


# -- on the GPU, at the suite's full sizes ------------------------------------------------------------------

SUITE = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"


def _suite(name: str):
    from ksmith_core.loading import load_problem

    return load_problem(next(SUITE.rglob(f"{name}.py")))


def _suite_seed(name: str):
    from ksmith_core.loading import load_candidate

    return load_candidate(next(SUITE.rglob(f"{name}.seed.py")))


def _gpu(cache_dir: str):
    return quick_options(cache_dir, device="cuda", correctness_trials=5, timing_trials=100, small=False)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "problem_name, case, status, code",
    [
        ("softmax", "stateful_softmax_quarter_rows", "incorrect", "TIMED_OUTPUT_MISMATCH"),
        ("matmul", "stateful_matmul_result_cache", "rejected", "TIMING_RESULT_CACHE"),
        ("softmax", None, "ok", None),
        ("matmul", None, "ok", None),
    ],
)
def test_gpu_stateful_cheats_and_their_honest_seeds(reference_cache, problem_name, case, status, code):
    cand = candidate(case) if case else _suite_seed(problem_name)
    verdict = evaluate(_suite(problem_name), cand, _gpu(reference_cache))
    assert verdict.status.value == status, (verdict.reasons, verdict.error[-500:])
    if code:
        assert any(r.startswith(code + ":") for r in verdict.reasons), verdict.reasons
    else:
        assert not any(r.startswith(("TIMING_", "UNSTEADY_")) for r in verdict.reasons), verdict.reasons


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case", ["stateful_random_majority", "stateful_call_counter", "stateful_pointer_history"]
)
def test_gpu_stateful_cheats_at_full_size(reference_cache, case):
    verdict = evaluate(problem("scale_add"), candidate(case), _gpu(reference_cache))
    assert verdict.status.value == "incorrect", verdict.reasons
    assert any(r.startswith(("TIMED_OUTPUT_MISMATCH:", "MISMATCH:")) for r in verdict.reasons), (
        verdict.reasons
    )
