"""Each timed call records the staging copy (placement in memory) its inputs were at, and a time that depends on
the placement is measured and flagged (``timing.placement_spread``, ``evaluator.placement_reasons``): on an
H100 the suite's layernorm seed runs 11 % faster on one of its three copies (docs/benchmarks.md §1b5).

The GPU loop runs here on the CPU with stand-in CUDA timers whose "GPU time" depends on the address of the
call's input."""

from __future__ import annotations

import os

import torch
from evaluator_helpers import stand_in_timers

from ksmith_triton import timing
from ksmith_triton.evaluator import UNSTEADY_SPREAD, _call_placement, placement_reasons


def _loop(monkeypatch, ms_of_address):
    """time_gpu over a kernel that remembers its input's address; elapsed reads ``ms_of_address`` of it."""
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda: torch.zeros(16))
    addresses: list[int] = []

    def kernel(x):
        addresses.append(x.data_ptr())
        return x

    clock = iter(range(10**6))
    timers = stand_in_timers(lambda: next(clock) * 1e-6)
    # Before any call, elapsed times the spin's rate.
    timers["elapsed"] = lambda start, end: ms_of_address(addresses[-1]) if addresses else 0.1
    schedule = timing.Schedule(os.urandom, trials=60, warmup=6)
    result = timing.time_gpu(kernel, [[torch.ones(64)], [torch.zeros(64)]], timers, schedule)
    return result, addresses[-len(result.samples_ms) :]


def test_each_timed_call_records_the_staging_copy_its_inputs_were_at(monkeypatch):
    result, addresses = _loop(monkeypatch, lambda address: 0.1)
    assert len(result.copies) == len(result.samples_ms)
    assert set(result.copies) == set(range(timing.STAGING_COPIES))
    # One copy, one address: the index names the placement the call read its inputs from.
    by_copy: dict[int, set[int]] = {}
    for copy, address in zip(result.copies, addresses):
        by_copy.setdefault(copy, set()).add(address)
    assert all(len(found) == 1 for found in by_copy.values())
    assert len({next(iter(found)) for found in by_copy.values()}) == timing.STAGING_COPIES
    # The copies are used in turn, one per call.
    assert all((b - a) % timing.STAGING_COPIES == 1 for a, b in zip(result.copies, result.copies[1:]))


def test_a_time_that_depends_on_the_placement_is_measured(monkeypatch):
    slow: dict[str, int] = {}

    def ms_of_address(address: int) -> float:
        slow.setdefault("address", address)  # the first placement the loop used is 10 % slower
        return 0.11 if address == slow["address"] else 0.1

    result, _ = _loop(monkeypatch, ms_of_address)
    spread = timing.placement_spread(result.samples_ms, result.copies)
    assert spread is not None and abs(spread - 0.1) < 1e-9
    steady, _ = _loop(monkeypatch, lambda address: 0.1)
    assert timing.placement_spread(steady.samples_ms, steady.copies) == 0.0


def test_placement_spread_counts_only_copies_with_enough_calls():
    least = timing.PLACEMENT_MIN_CALLS
    samples = [1.0] * least + [1.2] * least + [5.0] * (least - 1)
    copies = [0] * least + [1] * least + [2] * (least - 1)
    assert abs(timing.placement_spread(samples, copies) - 0.2) < 1e-9  # copy 2 has too few calls to count
    assert timing.placement_spread([1.0] * 40, [0] * 40) is None  # one placement: nothing to compare
    assert timing.placement_spread([], []) is None


def test_placement_reasons_flag_beyond_the_unsteady_threshold():
    assert placement_reasons(UNSTEADY_SPREAD, None, UNSTEADY_SPREAD) == []
    (candidate,) = placement_reasons(0.11, 0.001, None)
    assert candidate.startswith("PLACEMENT_SENSITIVE_TIMING:") and "11.0%" in candidate
    (reference,) = placement_reasons(None, None, 0.05)
    assert reference.startswith("PLACEMENT_SENSITIVE_REFERENCE: the torch.compile") and "5.0%" in reference


def test_a_worker_s_list_of_copies_that_does_not_fit_its_calls_gives_no_spread():
    calls = [{"index": i} for i in range(2 * timing.PLACEMENT_MIN_CALLS)]
    gpu_ms = [1.0] * timing.PLACEMENT_MIN_CALLS + [1.1] * timing.PLACEMENT_MIN_CALLS
    copies = [0] * timing.PLACEMENT_MIN_CALLS + [1] * timing.PLACEMENT_MIN_CALLS
    assert abs(_call_placement(copies, calls, gpu_ms) - 0.1) < 1e-9
    assert _call_placement(copies[:-1], calls, gpu_ms) is None  # one call short
    assert _call_placement(None, calls, gpu_ms) is None  # an older worker's report
    assert _call_placement(["x"] * len(calls), calls, gpu_ms) is None
    assert _call_placement(copies, [{"index": 99}] * len(calls), gpu_ms) is None
