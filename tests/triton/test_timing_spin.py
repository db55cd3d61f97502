"""The GPU spin before each timed call covers the host's launch; a launch that outlasts it is counted and
lengthens the spin for the calls after it (``timing.time_gpu``), and too many are flagged in the verdict.
Slow calls get a shorter warm-up and fewer timed calls (``Schedule.fitted``).

The loop runs here on the CPU with stand-in CUDA timers: a host clock the fake kernel advances by a chosen
launch time, and a record of the spins asked for."""

from __future__ import annotations

import os

import torch

from ksmith_triton import timing
from ksmith_triton.evaluator import host_delay_flag


def run_loop(monkeypatch, launch_ms_of_timed_call, warmup_ms=0.01):
    clock = {"host_s": 0.0}
    spins: list[int] = []

    class Event:
        def __init__(self, enable_timing=True):
            pass

    timers = {
        "event_class": Event,
        "record": lambda event, stream: None,
        "elapsed": lambda start, end: 0.1,
        "synchronize": lambda: None,
        "stream": None,
        "sleep": spins.append,
        "perf_counter": lambda: clock["host_s"],
    }
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda: torch.zeros(16))

    def kernel(x):
        timed = len(spins) - 1  # the first spin measures the spin rate; each timed call has one before it
        clock["host_s"] += (launch_ms_of_timed_call(timed - 1) if timed > 0 else warmup_ms) / 1e3
        return x

    schedule = timing.Schedule(os.urandom, trials=40, warmup=6)
    result = timing.time_gpu(kernel, [[torch.ones(8)]], timers, schedule)
    return result, spins


def test_a_launch_the_spin_covers_is_not_exposed(monkeypatch):
    result, _ = run_loop(monkeypatch, lambda call: 0.01)
    assert result.exposed == 0
    assert result.prequeue_ms == timing.PREQUEUE_MIN_MS + 2 * 0.01  # twice the warm-up launch, plus the least


def test_a_slow_launch_is_counted_and_the_spin_grows_to_cover_the_next(monkeypatch):
    result, spins = run_loop(monkeypatch, lambda call: 0.5 if call >= 3 else 0.01)
    assert result.exposed == 1  # the first slow launch; every later one is covered by the longer spin
    assert abs(result.prequeue_ms - (2 * 0.5 + timing.PREQUEUE_MIN_MS)) < 1e-9
    assert spins[5] > 10 * spins[2]  # the spin before calls after it, in cycles, grew with it
    capped, _ = run_loop(monkeypatch, lambda call: 50.0 if call == 1 else 0.01)
    assert capped.prequeue_ms == timing.PREQUEUE_MAX_MS and capped.exposed == 1


def test_many_exposed_calls_are_flagged_few_are_not():
    assert host_delay_flag(5, 100) == []
    (flag,) = host_delay_flag(6, 100)
    assert flag.startswith("HOST_DELAYED_TIMING: 6 of 100 timed calls")


def test_slow_calls_get_fewer_timed_calls_and_a_shorter_warm_up(monkeypatch):
    """Calls of 200 ms: the warm-up may stop once the calls after its first have taken a second, and the timed
    calls are fitted to the budget -- 3 s is 15 calls, so the floor of 20, drawn between 16 and 24."""
    for _ in range(5):
        slow, _ = run_loop(monkeypatch, lambda call: 200.0, warmup_ms=200.0)
        assert (
            3 <= slow.warmup <= 9
        )  # the schedule's range for 6 asked, sometimes cut after calls 2-5 reach 1 s
        assert 16 <= len(slow.samples_ms) <= 24
    fast, _ = run_loop(monkeypatch, lambda call: 0.01)
    assert 32 <= len(fast.samples_ms) <= 48  # 40 asked, untouched


def test_fitted_keeps_what_fits_and_never_goes_below_the_floor():
    fitted = timing.Schedule.fitted
    assert fitted(100, 1.0, 3000.0) == 100
    assert fitted(100, 30.0, 3000.0) == 100  # exactly the budget
    assert fitted(100, 50.0, 3000.0) == 60
    assert fitted(100, 700.0, 3000.0) == timing.MIN_TIMED_CALLS
    assert fitted(10, 700.0, 3000.0) == 10  # never more than asked
    assert fitted(100, 700.0, 1000.0, least=7) == 7


def test_the_driver_accepts_fewer_calls_only_when_they_are_slow():
    from ksmith_triton.evaluator import allowed_calls

    def calls(n, gpu_ms):
        return [{"gpu_ms": gpu_ms, "host_ms": 0.1} for _ in range(n)]

    assert allowed_calls(calls(100, 1.0), 100) == (80, 120)
    low, high = allowed_calls(calls(20, 300.0), 100)
    assert low <= 16 and high == 120  # 20 calls of 300 ms: the harness's floor, and the driver lets it pass
    assert allowed_calls(calls(20, 1.0), 100)[0] == 80  # fast calls cut short are not the harness's


def test_a_slow_first_call_alone_neither_cuts_the_warm_up_nor_the_timed_calls(monkeypatch):
    """An autotuner benchmarking on the first warm-up call (2 s here) of a fast kernel: the calls after it
    decide, so the kernel keeps the asked number of timed calls and its warm-up is not cut."""
    clock = {"host_s": 0.0, "calls": 0}
    timers = {
        "event_class": lambda enable_timing=True: None,
        "record": lambda event, stream: None,
        "elapsed": lambda start, end: 0.1,
        "synchronize": lambda: None,
        "stream": None,
        "sleep": lambda cycles: None,
        "perf_counter": lambda: clock["host_s"],
    }
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda: torch.zeros(16))
    monkeypatch.setattr(timing, "spin_rate", lambda timers: 1.0)

    def kernel(x):
        clock["calls"] += 1
        clock["host_s"] += 2.0 if clock["calls"] == 1 else 0.0001
        return x

    schedule = timing.Schedule(os.urandom, trials=40, warmup=6)
    result = timing.time_gpu(kernel, [[torch.ones(8)]], timers, schedule)
    assert 3 <= result.warmup <= 9 and 32 <= len(result.samples_ms) <= 48
