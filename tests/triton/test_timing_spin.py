"""The GPU spin before each timed call covers the host's launch, sized from the recent launches; a launch
that outlasts it is counted and lengthens the next call's spin (``timing.time_gpu``), and too many are
flagged in the verdict.
Slow calls get a shorter warm-up and fewer timed calls (``Schedule.fitted``).

The loop runs here on the CPU with stand-in CUDA timers: a host clock the fake kernel advances by a chosen
launch time, and a record of the spins asked for."""

from __future__ import annotations

import os

import torch
from evaluator_helpers import stand_in_timers

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


def test_a_slow_launch_is_counted_and_the_spin_covers_the_next_call(monkeypatch):
    result, spins = run_loop(monkeypatch, lambda call: 0.5 if call == 3 else 0.01)
    assert result.exposed == 1  # the slow launch itself
    # spins[0] measures the rate (its stand-in event reads 0.1 ms); spins[k + 1] is timed call k's, in cycles.
    per_ms = spins[0] / 0.1
    assert spins[4] == int((2 * 0.01 + timing.PREQUEUE_MIN_MS) * per_ms)
    assert spins[5] == int(
        (2 * 0.5 + timing.PREQUEUE_MIN_MS) * per_ms
    )  # the call after the slow one: covered
    # ...and one slow launch does not keep the later spins long (the window's 75th percentile lets it go).
    assert spins[6] == spins[4] and spins[-1] == spins[4]
    assert result.prequeue_ms == timing.PREQUEUE_MIN_MS + 2 * 0.01  # the median spin
    capped, capped_spins = run_loop(monkeypatch, lambda call: 50.0 if call == 1 else 0.01)
    assert capped.exposed == 1 and max(capped_spins[1:]) == capped_spins[3] > 100 * capped_spins[2]


def test_launches_that_stay_slow_are_covered_after_a_few_calls(monkeypatch):
    """The host slows down for good from call 3 (another process took the core): a few calls are exposed
    while the window fills, then the spin covers every launch."""
    result, spins = run_loop(monkeypatch, lambda call: 0.5 if call >= 3 else 0.01)
    assert 1 <= result.exposed <= 4
    per_ms = spins[0] / 0.1
    assert spins[-1] == spins[-2] == int((2 * 0.5 + timing.PREQUEUE_MIN_MS) * per_ms)
    assert abs(result.prequeue_ms - (2 * 0.5 + timing.PREQUEUE_MIN_MS)) < 1e-9  # most calls' spin


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
    timers = stand_in_timers(lambda: clock["host_s"])
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda: torch.zeros(16))
    monkeypatch.setattr(timing, "spin_rate", lambda timers: 1.0)

    def kernel(x):
        clock["calls"] += 1
        clock["host_s"] += 2.0 if clock["calls"] == 1 else 0.0001
        return x

    schedule = timing.Schedule(os.urandom, trials=40, warmup=6)
    result = timing.time_gpu(kernel, [[torch.ones(8)]], timers, schedule)
    assert 3 <= result.warmup <= 9 and 32 <= len(result.samples_ms) <= 48


def test_the_next_call_is_prepared_on_the_gpu_while_the_host_checks_the_last_one(monkeypatch):
    """After the wait: ``after_wait`` (the full check's copies) first, then the next call's inputs and L2
    flush are queued, then ``after_call`` checks on the host while the GPU copies and flushes; the spin comes
    right before the call (it covers the launch only); after the last call nothing is queued."""
    clock = {"host_s": 0.0}
    order: list[str] = []
    timers = stand_in_timers(lambda: clock["host_s"], sleep=lambda cycles: order.append("spin"))

    class Flush:
        def zero_(self):
            order.append("flush")

    monkeypatch.setattr(timing, "l2_flush_buffer", Flush)
    monkeypatch.setattr(timing, "spin_rate", lambda timers: 1.0)
    slow_check = {"call": 5}

    def kernel(x):
        order.append("call")
        clock["host_s"] += 0.01 / 1e3
        return x

    def after_wait(index, out, last):
        order.append("after_wait")

    def after_call(index, chosen, out, last, gpu_ms, host_ms):
        order.append("after_call")
        if index == slow_check["call"]:  # a check of 0.5 ms on a busy host
            clock["host_s"] += 0.5 / 1e3

    schedule = timing.Schedule(os.urandom, trials=20, warmup=4)
    result = timing.time_gpu(kernel, [[torch.ones(8)]], timers, schedule, after_call, after_wait=after_wait)
    timed = order[order.index("flush") :]  # the warm-up's calls have no flush
    calls = len(result.samples_ms)
    each = ["after_wait", "flush", "after_call", "spin", "call"]
    assert timed == ["flush", "spin", "call"] + each * (calls - 1) + ["after_wait", "after_call"]
    # The slow check ran before the next call's spin was queued: not the launch's time, nothing exposed.
    assert result.exposed == 0
    assert result.prequeue_ms < 0.5


def test_each_call_s_report_names_its_own_fresh_inputs_though_the_next_ones_are_made_before_it(
    monkeypatch, tmp_path
):
    """The harness's real after-call check in the GPU loop's order: a call's report must carry the seed of
    the inputs it ran on, not of the next call's, made while the host checks it (else the driver compares it
    with the outputs of other inputs and the kernel is wrongly judged incorrect)."""
    from ksmith_triton.candidate_side import TimedCallCheck

    class Channel:
        def __init__(self):
            self.sent = []

        def send(self, kind, **fields):
            self.sent.append((kind, fields))

    timers = stand_in_timers(__import__("time").perf_counter)
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda: torch.zeros(16))
    monkeypatch.setattr(timing, "spin_rate", lambda timers: 1.0)
    channel = Channel()
    check = TimedCallCheck(channel, os.urandom, tmp_path, share_cuda=False, trials=30)

    def fresh_inputs(seed):
        check.input_seed = seed
        return [torch.full((8,), float(seed % 1000))]

    schedule = timing.Schedule(os.urandom, trials=30, warmup=4)
    result = timing.time_gpu(
        lambda x: x * 2,
        [[torch.ones(8)]],
        timers,
        schedule,
        check,
        fresh_inputs,
        before_wait=check.queue,
        after_wait=check.keep,
    )
    reports = [fields for kind, fields in channel.sent if kind == "call"]
    assert len(reports) == len(result.samples_ms)
    fresh = [(r["input_seed"], result.input_seeds[r["index"]]) for r in reports if r["set"] < 0]
    assert fresh, "a third of the calls get fresh inputs"
    assert all(reported == made for reported, made in fresh)
    assert sum(1 for r in reports if r.get("full")) == len(check.full) >= 1


def test_the_loop_reports_its_thread_s_cpu_time_per_part_and_its_context_switches(monkeypatch):
    """Where a slow loop's wall time went: its thread's CPU time per part beside the wall time (a host check
    that waited for a CPU shows wall time its thread did not run), and the thread's context switches."""
    clock = {"host_s": 0.0, "cpu_s": 0.0}
    timers = stand_in_timers(lambda: clock["host_s"])
    timers["thread_time"] = lambda: clock["cpu_s"]
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda: torch.zeros(16))
    monkeypatch.setattr(timing, "spin_rate", lambda timers: 1.0)

    def kernel(x):
        clock["host_s"] += 0.02 / 1e3
        clock["cpu_s"] += 0.02 / 1e3  # the launch runs on the CPU all the time it takes
        return x

    def after_call(index, chosen, out, last, gpu_ms, host_ms):
        clock["host_s"] += 0.4 / 1e3  # a check of 0.4 ms wall time, of which the thread ran 0.1 ms
        clock["cpu_s"] += 0.1 / 1e3

    schedule = timing.Schedule(os.urandom, trials=20, warmup=4)
    result = timing.time_gpu(kernel, [[torch.ones(8)]], timers, schedule, after_call)
    calls = len(result.samples_ms)
    assert set(result.loop_cpu_ms) == set(result.loop_ms)
    assert abs(result.loop_ms["check"] - 0.4 * calls) < 0.05
    assert abs(result.loop_cpu_ms["check"] - 0.1 * calls) < 0.05
    assert abs(result.loop_cpu_ms["launch"] - result.loop_ms["launch"]) < 0.05
    if hasattr(__import__("resource"), "RUSAGE_THREAD"):
        assert set(result.switches) == {"voluntary", "involuntary"}
        assert all(isinstance(n, int) and n >= 0 for n in result.switches.values())


def test_without_a_thread_clock_the_loop_reports_wall_time_only(monkeypatch):
    timers = stand_in_timers(lambda: 0.0)
    timers.pop("thread_time", None)
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda: torch.zeros(16))
    monkeypatch.setattr(timing, "spin_rate", lambda timers: 1.0)
    result = timing.time_gpu(lambda x: x, [[torch.ones(8)]], timers, timing.Schedule(os.urandom, 10, 2))
    assert result.loop_ms and result.loop_cpu_ms == {}


def test_the_loop_counts_what_it_asked_the_driver_for_in_the_warm_up_and_in_the_timed_calls(monkeypatch):
    """Each driver allocation inside the exclusive hold can wait behind another process's new context: the
    report splits them between the set-up and warm-up and the timed calls."""
    asked = {"device": 0, "host": 0}
    monkeypatch.setattr(timing, "driver_allocations", lambda: dict(asked))
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda: torch.zeros(16))
    monkeypatch.setattr(timing, "spin_rate", lambda timers: 1.0)
    calls = {"n": 0}

    def kernel(x):
        calls["n"] += 1
        asked["device"] += 1  # every call asks for a segment; every fifth a pinned block as well
        asked["host"] += calls["n"] % 5 == 0
        return x

    schedule = timing.Schedule(os.urandom, trials=20, warmup=4)
    result = timing.time_gpu(kernel, [[torch.ones(8)]], stand_in_timers(lambda: 0.0), schedule)
    timed, warm = len(result.samples_ms), result.warmup
    assert result.allocations["device_warmup"] == warm and result.allocations["device_calls"] == timed
    assert result.allocations["host_warmup"] == warm // 5
    assert result.allocations["host_calls"] == (warm + timed) // 5 - warm // 5


def test_without_cuda_the_loop_reports_no_allocations(monkeypatch):
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda: torch.zeros(16))
    monkeypatch.setattr(timing, "spin_rate", lambda timers: 1.0)
    result = timing.time_gpu(
        lambda x: x, [[torch.ones(8)]], stand_in_timers(lambda: 0.0), timing.Schedule(os.urandom, 10, 2)
    )
    assert result.allocations == {} and timing.driver_allocations() == {}
