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
from ksmith_triton.evaluator import (
    attach_full_outputs,
    checked_slower_flag,
    evaluate,
    forged_call_reports,
    timing_contradictions,
)
from ksmith_triton.timing import Schedule

CASES = {
    "honest": ("scale_add_ok", "ok", None),
    "call_counter": ("stateful_call_counter", "incorrect", "TIMED_OUTPUT_MISMATCH"),
    "clock": ("stateful_clock", "incorrect", "TIMED_OUTPUT_MISMATCH"),
    "pointer_history": ("stateful_pointer_history", "incorrect", "TIMED_OUTPUT_MISMATCH"),
    "random_majority": ("stateful_random_majority", "incorrect", "TIMED_OUTPUT_MISMATCH"),
    "torch_while_timed": ("stateful_torch_while_timed", "rejected", "FORBIDDEN_TORCH_OP"),
    "interpreter_hook": ("interpreter_hook", "rejected", "INTERPRETER_HOOK"),
    # Candidates that reach into the harness itself (found by a review of this protocol).
    "torch_function_mode": ("harness_torch_function_mode", "rejected", "INTERPRETER_HOOK"),
    "dispatch_mode_below": ("harness_dispatch_mode_below", "rejected", "INTERPRETER_HOOK"),
    "self_removing_hook": ("harness_self_removing_hook", "rejected", "INTERPRETER_HOOK"),
    "patched_methods": ("harness_patched_methods", "rejected", "TAMPERED"),
    "timers_dict": ("harness_timers_dict", "rejected", "TAMPERED"),
    "urandom": ("harness_urandom", "rejected", ("TAMPERED", "FORGED_REPORT")),
    "guard_counters": ("harness_guard_counters", "rejected", "FORBIDDEN_TORCH_OP"),
    "forged_samples": ("harness_forged_samples", "rejected", "FORGED_REPORT"),
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
        codes = code if isinstance(code, tuple) else (code,)
        codes = (*codes, "MISMATCH") if name == "clock" else codes
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
            "set": -1 if i % 3 == 0 else i % sets,
            "input_seed": 1000 + i if i % 3 == 0 else None,
            "gpu_ms": 1.0,
            "host_ms": 0.1,
            "seed": 7 + i,
            "structure": "tensor",
            "samples": ["AAAA"],
            "dtypes": ["torch.float32"],
            "shapes": [[4]],
            "devices": ["cpu"],
            **({"outputs": []} if i in full else {}),
        }
        for i in range(count)
    ]


def test_reports_must_be_one_per_call_in_order_as_the_schedule_allows():
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
    assert "schedule allows 80 to 120" in forged_call_reports(_calls(60), {"calls": 60}, 3, trials=100)
    same_seed = _calls(5)
    same_seed[4]["seed"] = same_seed[0]["seed"]
    assert "same sample seed" in forged_call_reports(same_seed, {"calls": 5}, 3)
    no_fresh = _calls(50)
    for call in no_fresh:
        call["set"], call["input_seed"] = 0, None
    assert "fresh inputs" in forged_call_reports(no_fresh, {"calls": 50}, 3)
    for field, value in (("samples", [3]), ("dtypes", []), ("structure", None)):
        malformed = _calls(5)
        malformed[2][field] = value
        assert forged_call_reports(malformed, {"calls": 5}, 3).startswith("FORGED_REPORT: timed call 2")


def test_kept_outputs_sent_after_the_timing_must_be_those_of_the_calls_that_said_so():
    outputs = [{"file": "timed_1_0.bin", "dtype": "torch.float32", "shape": [4]}]
    calls = [{"index": i, "full": True} if i == 1 else {"index": i} for i in range(3)]
    assert attach_full_outputs(calls, {"1": outputs}) == ""
    assert calls[1]["outputs"] == outputs and "outputs" not in calls[0]
    for sent in ({}, {"1": outputs, "2": outputs}, {"0": outputs}, None, [outputs]):
        fresh = [{"index": i, "full": True} if i == 1 else {"index": i} for i in range(3)]
        assert attach_full_outputs(fresh, sent).startswith("FORGED_REPORT: the kept outputs")


def test_small_outputs_are_checked_whole():
    from ksmith_triton.child_common import SAMPLES_PER_OUTPUT, sample_positions

    small, large, empty = sample_positions(5, [100, 10_000, 0])
    assert small.tolist() == list(range(100)) and len(large) == SAMPLES_PER_OUTPUT and len(empty) == 0


# -- timings that contradict themselves ---------------------------------------------------------------------


def _honest(rng, sets, base=0.2, per_input=0.3):
    """GPU times of an honest kernel whose work depends on the data (each input set, and each fresh input,
    up to ``per_input`` apart), with ~1 % noise and now and then a slow outlier (a clock dip)."""
    weight = {k: 1 + rng.uniform(-per_input, per_input) for k in (0, 1, 2)}
    times = []
    for chosen in sets:
        work = weight[chosen] if chosen >= 0 else 1 + rng.uniform(-per_input, per_input)
        outlier = 1 + rng.random() * 0.5 if rng.random() < 0.04 else 1
        times.append(base * work * rng.lognormvariate(0, 0.01) * outlier)
    return times


def _sets(rng, n):
    return [-1 if rng.random() < 1 / 3 else rng.randrange(3) for _ in range(n)]


def test_honest_noise_and_data_dependent_work_are_never_refused():
    rng = random.Random(2026)
    for _ in range(3000):
        sets = _sets(rng, rng.randint(80, 120))
        samples = _honest(
            rng, sets, base=rng.choice([0.005, 0.2, 3.0]), per_input=rng.choice([0.0, 0.1, 0.3])
        )
        assert timing_contradictions(samples, sets) == [], samples


def test_a_faster_staging_copy_is_not_a_kernel_doing_less_work():
    """The same data at another address can run 10-20 % faster (docs/benchmarks.md §1b5): one of the three
    staging copies fast, the calls rotating over them. With each call's copy the check takes that out and
    never refuses; without, such honest timings are refused now and then (the false rejection it fixes)."""
    rng = random.Random(5)
    refused_without = 0
    for _ in range(1000):
        n = rng.randint(80, 120)
        sets, copies = _sets(rng, n), [i % 3 for i in range(n)]
        faster = rng.uniform(0.80, 0.92)
        samples = [t * (faster if c == 0 else 1.0) for t, c in zip(_honest(rng, sets, per_input=0.0), copies)]
        assert timing_contradictions(samples, sets, copies) == [], samples
        refused_without += bool(timing_contradictions(samples, sets))
    assert refused_without > 100


def test_a_kernel_that_does_less_work_on_some_calls_is_bimodal():
    rng = random.Random(7)
    sets = _sets(rng, 100)
    samples = _honest(rng, sets, per_input=0.0)
    for i in range(100):
        if rng.random() < 0.3:  # a majority would move the median: the output checks catch that
            samples[i] *= 0.3
    assert any(r.startswith("TIMING_BIMODAL:") for r in timing_contradictions(samples, sets))
    # Where the inputs lay does not excuse it: the fast calls are on every staging copy.
    copies = [i % 3 for i in range(100)]
    assert any(r.startswith("TIMING_BIMODAL:") for r in timing_contradictions(samples, sets, copies))


# GPU times of honest candidates of two launches on 1 MB (two_kernels and its in-place variant, 20 evaluations,
# on an H200: benchmarks/bimodal_probe.py, docs/benchmarks.md §8g): calls per 0.25 us bin, 2074 of the 2089
# (the rest slow outliers, over 11 us).
TWO_LAUNCHES_US = {
    6.0: 7,
    6.25: 206,
    6.5: 369,
    6.75: 247,
    7.0: 222,
    7.25: 343,
    7.5: 329,
    7.75: 195,
    8.0: 101,
    8.25: 40,
    8.5: 12,
    8.75: 2,
    9.0: 1,
}


def _two_launches(rng, sets):
    """GPU times (ms) drawn from the measured ones: the second kernel's wait behind the first takes one of two
    lengths ~1 us apart, whatever the data, so the calls spread over 6-9 us; now and then a slow outlier."""
    bins, weights = list(TWO_LAUNCHES_US), list(TWO_LAUNCHES_US.values())
    times = []
    for _ in sets:
        us = rng.choices(bins, weights)[0] + 0.25 * (rng.random() - 0.5)
        outlier = 1 + rng.random() * 5 if rng.random() < 0.01 else 1
        times.append(us * 1e-3 * outlier)
    return times


def test_a_few_microseconds_of_launch_wait_are_not_a_second_mode(monkeypatch):
    rng = random.Random(17)
    runs = [
        (sets, _two_launches(rng, sets)) for sets in (_sets(rng, rng.randint(80, 120)) for _ in range(2000))
    ]
    assert all(timing_contradictions(samples, sets) == [] for sets, samples in runs)
    # The floor is what keeps them: by the relative gap alone, about a quarter of such runs are refused (on the
    # GPU, runs of two-launch candidates: 0 of 10 to 4 of 8, docs/benchmarks.md §8f and §8g).
    monkeypatch.setattr(evaluator, "BIMODAL_FLOOR_MS", 0.0)
    assert sum(bool(timing_contradictions(samples, sets)) for sets, samples in runs) > 200


def test_a_tiny_kernel_that_skips_its_work_on_some_calls_is_still_bimodal():
    rng = random.Random(19)
    sets = _sets(rng, 100)
    samples = [t if rng.random() > 0.3 else 0.002 for t in _two_launches(rng, sets)]
    assert any(r.startswith("TIMING_BIMODAL:") for r in timing_contradictions(samples, sets))


def test_results_remembered_for_inputs_seen_before_are_refused():
    rng = random.Random(3)
    sets = _sets(rng, 100)
    samples = [t * (1.0 if s < 0 else 0.25) for t, s in zip(_honest(rng, sets, per_input=0.0), sets)]
    assert any(r.startswith("TIMING_RESULT_CACHE:") for r in timing_contradictions(samples, sets))
    copies = [i % 3 for i in range(100)]
    assert any(r.startswith("TIMING_RESULT_CACHE:") for r in timing_contradictions(samples, sets, copies))


def test_checked_calls_all_slower_are_flagged_never_by_chance():
    rng = random.Random(11)
    samples = _honest(rng, _sets(rng, 100), per_input=0.0)
    for i in (5, 40, 77):
        samples[i] *= 1.3
    assert checked_slower_flag(samples, [5, 40, 77])[0].startswith("TIMING_CHECKED_SLOWER:")
    assert checked_slower_flag(samples, [5, 40]) == []  # two checked calls are too few to say
    flagged = 0
    for _ in range(2000):  # honest: the calls checked are any calls
        n = rng.randint(80, 120)
        honest = _honest(rng, _sets(rng, n))
        flagged += bool(checked_slower_flag(honest, rng.sample(range(n), rng.randint(3, 6))))
    assert flagged == 0


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
        # Its four entries are overwritten in turn by every call, fresh inputs included: a prepared set is
        # replayed on about 63 % of its calls, and in about a third of runs (simulating the schedule) one of
        # the three sets is replayed on at most half of them. That set's median is then not a replay, and
        # its fast calls show as a second mode on its own data instead: rejected either way.
        ("matmul", "stateful_matmul_result_cache", "rejected", ("TIMING_RESULT_CACHE", "TIMING_BIMODAL")),
        ("softmax", None, "ok", None),
        ("matmul", None, "ok", None),
    ],
)
def test_gpu_stateful_cheats_and_their_honest_seeds(reference_cache, problem_name, case, status, code):
    cand = candidate(case) if case else _suite_seed(problem_name)
    verdict = evaluate(_suite(problem_name), cand, _gpu(reference_cache))
    assert verdict.status.value == status, (verdict.reasons, verdict.error[-500:])
    if code:
        codes = code if isinstance(code, tuple) else (code,)
        assert any(r.startswith(tuple(c + ":" for c in codes)) for r in verdict.reasons), verdict.reasons
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
