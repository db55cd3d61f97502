"""The GPU spin before each timed call covers the host's launch; a launch that outlasts it is counted and
lengthens the spin for the calls after it (``timing.time_gpu``), and too many are flagged in the verdict.

The loop runs here on the CPU with stand-in CUDA timers: a host clock the fake kernel advances by a chosen
launch time, and a record of the spins asked for."""

from __future__ import annotations

import os

import torch

from ksmith_triton import timing
from ksmith_triton.evaluator import host_delay_flag


def run_loop(monkeypatch, launch_ms_of_timed_call):
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
        clock["host_s"] += (launch_ms_of_timed_call(timed - 1) if timed > 0 else 0.01) / 1e3
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
