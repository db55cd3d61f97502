"""Memory admission (``ksmith_triton.admission``): the gate's rules with a fake memory reading, footprints from
estimate to measurement, and the retry alone of an evaluation that ran out of memory beside another one, through
the real evaluator on CPU.

The CPU's gate reads no memory and an out-of-memory there is never retried (a candidate's process runs into its
own address-space limit); the end-to-end tests put a GPU's conditions in at the two seams that say so:
``admission.shares_memory`` and the gate of the CPU.
"""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path

import pytest
from evaluator_helpers import CASES, problem, quick_options

from ksmith_core.model import Candidate, Status, Verdict
from ksmith_triton import admission
from ksmith_triton.admission import Footprints, MemoryGate, estimate_bytes, margin_bytes, parse_nvidia_smi
from ksmith_triton.evaluator import evaluate, memory_failure, out_of_memory_reason

GIB = 2**30
TOTAL = 80 * GIB  # margin: 4 GiB, so 76 GiB of reservations fit on an idle device


class FakeDevice:
    """Free and total bytes as a test sets them; counts readings."""

    def __init__(self, free: int = TOTAL, total: int = TOTAL) -> None:
        self.free, self.total, self.readings = free, total, 0

    def __call__(self, max_age_s: float) -> tuple[int, int]:
        self.readings += 1
        return self.free, self.total


def acquire_in_thread(gate: MemoryGate, need: int, order: list[str], name: str, **kwargs) -> threading.Thread:
    def run() -> None:
        ticket = gate.acquire(need, **kwargs)
        order.append(name)
        tickets[name] = ticket

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


tickets: dict[str, admission.Ticket] = {}


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def queued(gate: MemoryGate, count: int) -> None:
    """Wait until ``count`` tickets wait. One seen waiting has been refused under the gate's lock already."""
    wait_until(lambda: gate.snapshot()["waiting"] == count)


# ---------------------------------------------------------------------------------------------------------------
# The gate
# ---------------------------------------------------------------------------------------------------------------


def test_evaluations_are_admitted_while_their_reservations_fit_and_wait_otherwise():
    assert margin_bytes(TOTAL) == 4 * GIB
    gate = MemoryGate(FakeDevice())
    first = gate.acquire(40 * GIB)
    second = gate.acquire(36 * GIB)  # 76 GiB: exactly what fits beside the margin
    assert gate.snapshot() == {"running": 2, "reserved": 76 * GIB, "waiting": 0, "exclusive_waiting": False}
    order: list[str] = []
    third = acquire_in_thread(gate, 1, order, "third")
    queued(gate, 1)
    assert order == []
    gate.release(second)
    third.join(5)
    assert order == ["third"]
    assert first.overlapped and second.overlapped and tickets["third"].overlapped
    gate.release(first)
    gate.release(tickets["third"])
    assert gate.snapshot()["running"] == 0


def test_waiting_is_first_in_first_out_so_a_large_evaluation_is_not_starved():
    gate = MemoryGate(FakeDevice())
    held = gate.acquire(50 * GIB)
    order: list[str] = []
    large = acquire_in_thread(gate, 40 * GIB, order, "large")  # does not fit beside 50 GiB
    queued(gate, 1)
    small = acquire_in_thread(gate, 1 * GIB, order, "small")  # would fit, but comes after the large one
    queued(gate, 2)
    assert order == []
    gate.release(held)
    large.join(5)
    small.join(5)
    assert order == ["large", "small"]
    for name in order:
        gate.release(tickets[name])


def test_an_evaluation_alone_is_always_admitted_even_when_it_cannot_fit():
    device = FakeDevice(free=10 * GIB)
    gate = MemoryGate(device)
    ticket = gate.acquire(500 * GIB)  # gets its RESOURCE verdict rather than waiting for ever
    assert not ticket.overlapped and ticket.waited_s < 1.0
    order: list[str] = []
    thread = acquire_in_thread(gate, 1, order, "next")
    queued(gate, 1)
    gate.release(ticket)
    thread.join(5)
    assert order == ["next"] and not tickets["next"].overlapped  # it never ran beside the large one
    gate.release(tickets["next"])


def test_an_exclusive_ticket_waits_for_the_device_to_empty_goes_first_and_keeps_others_out():
    gate = MemoryGate(FakeDevice())
    running = gate.acquire(GIB)
    order: list[str] = []
    plain = acquire_in_thread(gate, GIB, order, "plain")
    wait_until(lambda: order == ["plain"])  # fits: admitted at once
    later = acquire_in_thread(gate, GIB, order, "later", exclusive=False)
    wait_until(lambda: order == ["plain", "later"])
    alone = acquire_in_thread(gate, GIB, order, "alone", exclusive=True)
    queued(gate, 1)
    after = acquire_in_thread(gate, GIB, order, "after")  # fits, but the retry waits ahead of it
    queued(gate, 2)
    assert gate.snapshot()["exclusive_waiting"]
    for ticket in (running, tickets["plain"], tickets["later"]):
        gate.release(ticket)
    alone.join(5)
    assert order[-1] == "alone" and gate.snapshot()["running"] == 1
    time.sleep(0.1)
    assert "after" not in order  # nothing beside an exclusive ticket
    gate.release(tickets["alone"])
    after.join(5)
    assert order[-1] == "after"
    gate.release(tickets["after"])
    plain.join(1)
    later.join(1)


def test_a_reservation_is_released_when_the_evaluation_raises_and_a_failed_wait_leaves_the_queue():
    device = FakeDevice()
    gate = MemoryGate(device)
    with pytest.raises(RuntimeError), gate.admitted(70 * GIB):
        raise RuntimeError("the evaluation failed")
    assert gate.snapshot()["running"] == 0

    held = gate.acquire(70 * GIB)
    failures: list[BaseException] = []

    def broken_reading(max_age_s: float):
        raise OSError("the device went away")

    def wait() -> None:
        try:
            gate.acquire(10 * GIB)
        except OSError as exc:
            failures.append(exc)

    gate._read = broken_reading  # the waiting ticket's next look at the device fails
    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    thread.join(5)
    assert failures and gate.snapshot() == {
        "running": 1,
        "reserved": 70 * GIB,
        "waiting": 0,
        "exclusive_waiting": False,
    }
    gate.release(held)


def test_memory_other_programs_took_since_the_device_was_idle_counts():
    device = FakeDevice()
    gate = MemoryGate(device)
    held = gate.acquire(10 * GIB)  # idle reading: 80 GiB free
    device.free = 40 * GIB  # another program took 40 GiB; the running evaluation has not allocated yet
    order: list[str] = []
    thread = acquire_in_thread(gate, 40 * GIB, order, "big")  # 10 + 40 > 40 + 10 - 4
    queued(gate, 1)
    device.free = 80 * GIB  # the other program ended: seen at the next look (a second at most)
    thread.join(5)
    assert order == ["big"]
    gate.release(held)
    gate.release(tickets["big"])


def test_a_device_that_cannot_say_admits_everything():
    gate = MemoryGate(lambda max_age_s: None)
    tickets_ = [gate.acquire(500 * GIB) for _ in range(3)]
    assert not gate.reads_memory() and gate.snapshot()["running"] == 3
    for ticket in tickets_:
        gate.release(ticket)


def test_nvidia_smi_readings_by_index_and_uuid_and_mig_rows_left_out():
    text = "0, GPU-aaaa, 81000, 81559\n1, GPU-bbbb, [N/A], [N/A]\n"
    found = parse_nvidia_smi(text)
    assert found["0"] == found["GPU-aaaa"] == (81000 * 2**20, 81559 * 2**20)
    assert "1" not in found and "GPU-bbbb" not in found
    assert parse_nvidia_smi("") == {}


# ---------------------------------------------------------------------------------------------------------------
# Footprints
# ---------------------------------------------------------------------------------------------------------------


def test_a_footprint_is_estimated_until_measured_then_the_largest_recent_measurement():
    footprints = Footprints()
    key = ("sha", "cuda", False, 5)
    assert footprints.expected(key) is None
    footprints.estimate(key, estimate_bytes(GIB, GIB, 5))
    assert footprints.expected(key) == (10 * GIB + 12 * GIB, "estimate")
    assert footprints.record(key, 3 * GIB)
    assert footprints.expected(key) == (3 * GIB, "measured")  # the measurement replaces the estimate
    assert footprints.record(key, 9 * GIB)  # a heavier candidate raises it ...
    assert not footprints.record(key, 2 * GIB)
    assert footprints.expected(key) == (9 * GIB, "measured")
    for _ in range(admission.WINDOW):  # ... until it is no longer among the recent ones
        footprints.record(key, 2 * GIB)
    assert footprints.expected(key) == (2 * GIB, "measured")


def test_the_estimate_grows_with_outputs_kept_per_trial():
    assert estimate_bytes(GIB, 0, 5) == 10 * GIB  # a reduction: the inputs dominate
    assert estimate_bytes(GIB, GIB, 5) > estimate_bytes(GIB, GIB, 2) > estimate_bytes(GIB, 0, 2)


def test_a_problems_input_and_output_bytes_come_from_the_meta_device():
    from ksmith_triton.child_common import load_problem_module
    from ksmith_triton.reference_side import problem_sizes

    module = load_problem_module((CASES / "scale_add.py").read_text(), {"batch_size": 8, "dim": 512})
    assert problem_sizes(module) == {"input_bytes": 8 * 512 * 4, "output_bytes": 8 * 512 * 4}
    module.Model.forward = lambda self, x: x.sum().item()  # data-dependent: no meta answer
    assert problem_sizes(module) == {"input_bytes": 8 * 512 * 4}


def test_sizing_on_the_meta_device_lets_no_triton_kernel_launch():
    import triton

    from ksmith_triton.child_common import load_problem_module
    from ksmith_triton.reference_side import MetaLaunchError, no_triton_launches, problem_sizes

    def earlier(metadata):
        return None

    triton.knobs.runtime.launch_enter_hook = earlier
    try:
        with no_triton_launches():
            # What Triton's launcher calls before every launch; raising there stops the launch.
            with pytest.raises(MetaLaunchError):
                triton.knobs.runtime.launch_enter_hook({"name": "kernel"})
        assert triton.knobs.runtime.launch_enter_hook is earlier
    finally:
        triton.knobs.runtime.launch_enter_hook = None
    # A reference that is a Triton kernel itself: its inputs are sized, its outputs are not (no launch).
    module = load_problem_module((CASES / "triton_reference.py").read_text(), {"batch_size": 8, "dim": 512})
    assert problem_sizes(module) == {"input_bytes": 8 * 512 * 4}


def test_out_of_memory_verdicts_and_problem_errors_are_recognised():
    def verdict(status, reason):
        return Verdict(status=status, reasons=(reason,))

    assert out_of_memory_reason(verdict(Status.RUNTIME_ERROR, "OUT_OF_MEMORY: in trial 1 (asked for 2 GiB)"))
    assert out_of_memory_reason(verdict(Status.RUNTIME_ERROR, "RESOURCE_EXHAUSTED: the reference could not"))
    assert out_of_memory_reason(
        verdict(Status.COMPILE_ERROR, "KERNEL_COMPILE_ERROR: ...: RuntimeError: CUDA error: out of memory")
    )
    # The host's limit on one process's resident size is its own: no retry.
    assert not out_of_memory_reason(verdict(Status.CRASHED, "OUT_OF_MEMORY: resident memory passed 16 MB"))
    assert not out_of_memory_reason(verdict(Status.INCORRECT, "MISMATCH: output 0"))
    assert memory_failure("problem p: RESOURCE: generating the inputs needs more memory than the cuda has")
    assert memory_failure("the reference Model of problem p failed: OutOfMemoryError: CUDA out of memory.")
    assert not memory_failure("problem p: get_inputs() raised ValueError: bad size")


# ---------------------------------------------------------------------------------------------------------------
# Through the real evaluator (CPU)
# ---------------------------------------------------------------------------------------------------------------


def oom_once(marker: Path) -> Candidate:
    """scale_add_ok, whose first process (none has made ``marker`` yet) runs out of memory in its first call."""
    source = (CASES / "scale_add_ok.py").read_text() + textwrap.dedent(
        f"""

        import os as _os

        _FIRST = not _os.path.exists({str(marker)!r})
        open({str(marker)!r}, "a").close()
        _forward = ModelNew.forward


        def _forward_or_out_of_memory(self, x):
            if _FIRST:
                raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return _forward(self, x)


        ModelNew.forward = _forward_or_out_of_memory
        """
    )
    return Candidate.from_source(source)


@pytest.fixture
def cpu_shares_memory(monkeypatch):
    """The CPU as if it were a GPU whose memory evaluations share (the retry's condition)."""
    monkeypatch.setattr(admission, "shares_memory", lambda device: True)
    gate = admission.gate_for("cpu", None)
    assert gate.snapshot()["running"] == 0
    return gate


def test_an_out_of_memory_beside_another_evaluation_is_judged_again_alone(
    tmp_path, reference_cache, cpu_shares_memory
):
    gate = cpu_shares_memory
    other = gate.acquire(0)  # another evaluation, running on the same device
    found: dict[str, Verdict] = {}
    thread = threading.Thread(
        target=lambda: found.update(
            verdict=evaluate(problem("scale_add"), oom_once(tmp_path / "ran"), quick_options(reference_cache))
        ),
        daemon=True,
    )
    try:
        thread.start()
        # The first attempt runs out of memory beside the other one and asks for the device alone, which it
        # gets only once the other evaluation is done.
        deadline = time.monotonic() + 120
        while not gate.snapshot()["exclusive_waiting"]:
            assert thread.is_alive(), f"finished without a retry: {found}"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert (tmp_path / "ran").exists()
    finally:
        gate.release(other)
    thread.join(120)
    verdict = found["verdict"]
    assert verdict.status is Status.OK, verdict.reasons
    assert verdict.details["oom_retried_alone"] is True
    assert verdict.details["oom_first_reason"].startswith("OUT_OF_MEMORY: in the first call")
    assert verdict.details["memory"]["shared_gpu"] is False
    assert gate.snapshot()["running"] == 0


def test_an_out_of_memory_alone_is_the_verdict(tmp_path, reference_cache, cpu_shares_memory):
    verdict = evaluate(problem("scale_add"), oom_once(tmp_path / "ran"), quick_options(reference_cache))
    assert verdict.status is Status.RUNTIME_ERROR
    assert verdict.reasons[0].startswith("OUT_OF_MEMORY: in the first call")
    assert "oom_retried_alone" not in verdict.details
    assert verdict.details["memory"]["shared_gpu"] is False


def test_an_evaluation_admitted_alone_to_a_crowded_device_knows_it():
    device = FakeDevice(free=TOTAL - 3 * GIB)  # 3 GiB used by others: within the 4 GiB margin
    gate = MemoryGate(device)
    ticket = gate.acquire(GIB)
    assert not ticket.crowded_at_start and not ticket.overlapped
    gate.release(ticket)
    device.free = TOTAL - 20 * GIB  # others (warm workers, an exiting process, other programs) hold 20 GiB
    ticket = gate.acquire(GIB)
    assert ticket.crowded_at_start and not ticket.overlapped
    gate.release(ticket)


def test_an_out_of_memory_alone_on_a_crowded_device_is_judged_again(
    tmp_path, reference_cache, cpu_shares_memory, monkeypatch
):
    from ksmith_triton import evaluator

    gate = cpu_shares_memory
    monkeypatch.setattr(gate, "_read", FakeDevice(free=TOTAL - 20 * GIB))
    made_room: list[str] = []
    monkeypatch.setattr(evaluator.POOL, "drop_spares", lambda: made_room.append("spares"))
    verdict = evaluate(problem("scale_add"), oom_once(tmp_path / "ran"), quick_options(reference_cache))
    assert verdict.status is Status.OK, verdict.reasons
    assert verdict.details["oom_retried_alone"] is True
    assert verdict.details["oom_first_reason"].startswith("OUT_OF_MEMORY: in the first call")
    assert made_room == ["spares"]


def test_the_first_evaluation_reserves_the_estimate_and_the_next_what_it_measured(tmp_path, monkeypatch):
    footprints = Footprints()
    monkeypatch.setattr(admission, "FOOTPRINTS", footprints)
    # The CPU's gate, reading a device of 64 GiB: estimates and measurements are looked up as on a GPU.
    monkeypatch.setitem(admission._gates, ("cpu", None), MemoryGate(FakeDevice(64 * GIB, 64 * GIB)))
    options = quick_options(str(tmp_path / "cache"))
    seed = Candidate.from_source((CASES / "scale_add_ok.py").read_text())
    small = 4 * 256 * 4  # scale_add at its small size: one fp32 input, one output alike

    first = evaluate(problem("scale_add"), seed, options)
    assert first.status is Status.OK, first.reasons
    memory = dict(first.details["memory"])
    peaks = memory.pop("peaks")
    assert memory | {"waited_s": 0} == {
        "reserved_bytes": estimate_bytes(small, small, 2),
        "footprint": "estimate",
        "waited_s": 0,
        "shared_gpu": False,
    }
    assert peaks["candidate"] > 0 and peaks["reference"] > 0  # each process's own peak (on CPU, RSS)
    ((key, measured),) = [(k, footprints.expected(k)) for k in footprints._measured]
    assert measured[1] == "measured" and measured[0] > 2 * small  # both processes' peaks (on CPU, RSS)

    second = evaluate(problem("scale_add"), seed, options)
    assert second.details["memory"]["footprint"] == "measured"
    assert second.details["memory"]["reserved_bytes"] == measured[0]

    # A later process starts from the measurement kept in the reference cache.
    monkeypatch.setattr(admission, "FOOTPRINTS", Footprints())
    third = evaluate(problem("scale_add"), seed, options)
    assert third.details["memory"]["footprint"] == "measured"
    assert third.details["memory"]["reserved_bytes"] == max(footprints._measured[key])
