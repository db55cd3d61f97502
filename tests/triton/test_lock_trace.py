"""The GPU lock's trace (``KSMITH_GPU_LOCK_TRACE``), what it says about where a GPU's time went, and the lock
order that keeps a queue of reference requests from holding a timer up."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest

from ksmith_triton import locks
from ksmith_triton.evaluator import ReferenceWorker
from ksmith_triton.locktrace import read_trace, render, summarise


@pytest.fixture
def trace(tmp_path, monkeypatch):
    monkeypatch.setenv(locks.LOCK_DIR_ENV, str(tmp_path / "locks"))
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(locks.LOCK_TRACE_ENV, str(path))
    return path


def _hold(seconds: float, **line):
    return {"pid": 1, "gpu": "0", "what": "w", **line, "released": line["got"] + seconds}


def test_the_states_of_a_window_add_up_exactly():
    holds = [
        _hold(1.0, mode="shared", what="compare trial", asked=0.0, got=0.0),
        _hold(0.2, mode="exclusive", what="candidate timing", asked=0.5, got=1.0),
    ]
    summary = summarise(holds, 0.0, 2.0)
    assert summary["states"] == {"timing": 0.2, "draining": 0.5, "shared": 0.5, "idle": 0.8}
    assert summary["timers_waited_for"] == {"compare trial": 0.5}
    row = summary["holders"]["exclusive: candidate timing"]
    assert row["holds"] == 1 and row["held_s"] == 0.2 and row["waited_s"] == 0.5
    # A window cuts holds at its ends.
    assert summarise(holds, 0.75, 1.1)["states"] == {
        "timing": 0.1,
        "draining": 0.25,
        "shared": 0.0,
        "idle": 0.0,
    }
    assert "draining 0.5 s (25%)" in render(summary)


def test_a_gzipped_trace_reads_as_the_trace(tmp_path):
    import gzip

    lines = [
        json.dumps({"gpu": "0", "what": "b", "mode": "shared", "asked": 2.0, "got": 2.5, "released": 3.0}),
        '{"gpu": "0", "what": "cut off mid-wr',  # a process killed while writing
        json.dumps({"gpu": "1", "what": "a", "mode": "exclusive", "asked": 0.0, "got": 1.0, "released": 2.0}),
    ]
    plain = tmp_path / "trace.jsonl"
    plain.write_text("\n".join(lines) + "\n")
    packed = tmp_path / "trace.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    holds = read_trace(plain)
    assert [h["what"] for h in holds] == ["a", "b"] and read_trace(packed) == holds


def test_every_hold_is_traced_with_who_held_it_and_for_how_long(trace):
    got_shared = threading.Event()

    def shared_work():
        with locks.shared_gpu_lock("cuda", "t0", "compare trial"):
            got_shared.set()
            time.sleep(0.3)

    worker = threading.Thread(target=shared_work)
    worker.start()
    got_shared.wait(5)
    with locks.exclusive_gpu_lock("cuda", "t0", "candidate timing"):  # waits for the shared hold
        time.sleep(0.1)
    worker.join()
    with locks.shared_gpu_lock("cpu", None, "ignored"):  # no GPU lock on the CPU, nothing traced
        pass

    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(h["mode"], h["what"], h["gpu"]) for h in lines] == [
        ("shared", "compare trial", "t0"),
        ("exclusive", "candidate timing", "t0"),
    ]
    shared, timer = lines
    assert all(h["asked"] <= h["got"] <= h["released"] for h in lines)
    assert timer["got"] >= shared["released"] and timer["released"] - timer["got"] >= 0.09
    summary = summarise(read_trace(trace))
    assert summary["states"]["draining"] > 0.1 and summary["states"]["timing"] >= 0.09
    assert summary["timers_waited_for"].keys() == {"compare trial"}


def test_a_request_queued_behind_another_holds_no_gpu_lock_while_it_waits(trace, monkeypatch):
    """Two evaluations of one problem ask its reference process for comparisons at once, and a timer comes
    meanwhile. The queued request takes the GPU's lock only in its turn, so the timer runs between the two
    requests instead of waiting for both."""

    class SlowChild:
        def send(self, message):
            self.op = message["op"]

        def wait_message(self, op, timeout_s):
            time.sleep(0.3)
            return {"kind": op}

        def cpu_seconds(self):
            return None  # no process to read

    worker = ReferenceWorker.__new__(ReferenceWorker)
    worker.lock, worker.closed = threading.Lock(), False
    monkeypatch.setattr(worker, "_running", SlowChild, raising=False)

    def compare(name):
        worker.request("compare", 5, locks.shared_gpu_lock("cuda", "t0", name))

    first = threading.Thread(target=compare, args=("first",))
    first.start()
    time.sleep(0.1)  # the first request is being answered, under its shared hold
    second = threading.Thread(target=compare, args=("second",))
    second.start()
    time.sleep(0.05)  # the second is queued behind it
    with locks.exclusive_gpu_lock("cuda", "t0", "timer"):
        pass
    first.join()
    second.join()
    order = [h["what"] for h in sorted(read_trace(trace), key=lambda h: h["got"])]
    assert order == ["first", "timer", "second"]


def test_timers_queued_behind_a_timer_run_before_shared_work_that_came_between(trace, tmp_path):
    """A timer times; shared work of another process arrives, then a second timer. When the first timer ends,
    the second goes next: the shared work, which would make it wait for whatever it does, goes after."""
    import os
    import subprocess
    import sys

    from test_transport_and_pool import _LOCK_SCRIPT, _until, turnstile_held

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "t0"}
    timing = threading.Event()

    def timer(name, seconds):
        with locks.exclusive_gpu_lock("cuda", "t0", name):
            timing.set()
            time.sleep(seconds)

    first = threading.Thread(target=timer, args=("first timer", 0.8))
    first.start()
    timing.wait(5)
    worker = subprocess.Popen([sys.executable, "-c", _LOCK_SCRIPT, "worker", str(tmp_path / "log")], env=env)
    time.sleep(0.3)  # the worker is trying for its shared hold
    second = threading.Thread(target=timer, args=("second timer", 0.05))
    second.start()
    # The second timer waits at the turnstile while the first still times (not in this process's gate), so
    # the worker, which can only take the lock while passing through the turnstile, cannot get in between.
    _until(lambda: turnstile_held(tmp_path / "locks" / "cuda-t0.turnstile"), 0.4)
    assert first.is_alive()
    first.join()
    second.join()
    assert worker.wait(20) == 0
    order = [h["what"] for h in sorted(read_trace(trace), key=lambda h: h["got"])]
    assert order == ["first timer", "second timer", "worker"]


def _exclusive_from_another_process(wait_s: float) -> bool:
    """Whether another process gets GPU 0's lock exclusively within ``wait_s`` (it inherits the lock dir)."""
    import subprocess
    import sys

    code = (
        "from ksmith_triton import locks\n"
        "try:\n"
        "    with locks.exclusive_gpu_lock('cuda', '0', 'timer'):\n"
        "        print('got')\n"
        "except locks.GpuLockTimeout:\n"
        "    print('busy')\n"
    )
    env = {**__import__("os").environ, locks.LOCK_WAIT_ENV: str(wait_s)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    return done.stdout.strip() == "got"


def test_a_worker_hold_paused_for_a_compilation_lets_a_timer_in_and_is_taken_again(trace, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    hold = locks.WorkerSharedHold("cuda", "candidate first call")
    drained = []
    try:
        assert not _exclusive_from_another_process(0.5)  # held: a timer waits
        with hold.paused(lambda: drained.append(True)):
            assert drained == [True]  # the worker's GPU work finished before the lock went
            assert _exclusive_from_another_process(5.0)
        assert not _exclusive_from_another_process(0.5)  # taken again
    finally:
        hold.release()
    assert _exclusive_from_another_process(5.0)
    whats = [(h["what"], h["mode"]) for h in read_trace(trace)]
    assert whats.count(("candidate first call", "shared")) == 2  # before and after the pause
    # Once released for good (after the first call), a pause does nothing.
    with hold.paused(lambda: drained.append(False)):
        pass
    assert drained == [True]


def test_triton_compilations_in_the_first_call_run_with_the_hold_paused(monkeypatch):
    import triton.compiler

    from ksmith_triton.candidate_side import compile_unheld

    events = []

    class Hold:
        @contextlib.contextmanager
        def paused(self, drain):
            drain()
            events.append("paused")
            yield
            events.append("taken again")

    monkeypatch.setattr(
        triton.compiler, "compile", lambda *a, **k: events.append(("compiled", a, k)) or "kernel"
    )
    compile_unheld(Hold(), lambda: events.append("drained"))
    assert triton.compiler.compile("src", target="t") == "kernel"
    assert events == ["drained", "paused", ("compiled", ("src",), {"target": "t"}), "taken again"]
