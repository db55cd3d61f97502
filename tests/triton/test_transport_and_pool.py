"""The pieces that make evaluation fast without weakening it: raw output files read back strictly, the
GPU lock that keeps timing alone on its device, and candidate workers started ahead of need."""

from __future__ import annotations

import threading
import time
import types
from pathlib import Path

import pytest
import torch
from evaluator_helpers import candidate, problem, quick_options

from ksmith_core.errors import ProblemError
from ksmith_triton import locks
from ksmith_triton.candidate_side import save_outputs
from ksmith_triton.compare import load_outputs, tolerance_table, tolerances
from ksmith_triton.evaluator import evaluate
from ksmith_triton.pool import WarmPool, _key, discard


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(3, 5),
        torch.randn(4, 6).t(),  # not contiguous
        torch.randn(7).to(torch.bfloat16),
        torch.arange(10, dtype=torch.int64),
        torch.tensor([True, False, True]),
        torch.tensor(2.5),  # zero-dimensional
        torch.empty(0, 3),
    ],
)
def test_outputs_round_trip_through_raw_files(tmp_path: Path, tensor):
    report = save_outputs(tmp_path, "trial_0", "tensor", [tensor])
    loaded = load_outputs(report, tmp_path, "cpu")
    assert loaded.structure == "tensor" and loaded.devices == ["cpu"]
    (back,) = loaded.tensors
    assert back.dtype == tensor.dtype and back.shape == tensor.shape and torch.equal(back, tensor)


def test_output_files_that_disagree_with_their_description_are_refused(tmp_path: Path):
    report = save_outputs(tmp_path, "trial_0", "tensor", [torch.randn(4, 4)])
    item = report["outputs"][0]
    with pytest.raises(ValueError, match="bytes"):
        load_outputs({**report, "outputs": [{**item, "shape": [4, 5]}]}, tmp_path, "cpu")
    with pytest.raises(ValueError, match="dtype"):
        load_outputs({**report, "outputs": [{**item, "dtype": "torch.Tensor"}]}, tmp_path, "cpu")
    with pytest.raises(ValueError, match="plain file"):
        load_outputs({**report, "outputs": [{**item, "file": "../elsewhere.bin"}]}, tmp_path, "cpu")
    (tmp_path / "link.bin").symlink_to(tmp_path / item["file"])
    with pytest.raises(ValueError, match="plain file"):
        load_outputs({**report, "outputs": [{**item, "file": "link.bin"}]}, tmp_path, "cpu")


def test_tolerances_travel_as_a_table():
    prob = problem("scale_add")
    lookup = tolerances(tolerance_table(prob.tolerance_for, ("float32", "float16")))
    assert lookup("torch.float16") == prob.tolerance_for("float16")
    assert lookup("float32") == prob.tolerance_for("float32")
    assert lookup("int8") == prob.tolerance_for("int8")  # the fallback


def test_waiting_timer_goes_before_new_shared_work():
    gate = locks._Gate()
    order: list[str] = []
    gate.acquire_shared()  # a correctness trial is running

    def timer():
        gate.acquire_exclusive()
        order.append("timing")
        time.sleep(0.05)
        gate.release_exclusive()

    def later_work():
        gate.acquire_shared()
        order.append("later work")
        gate.release_shared()

    t1 = threading.Thread(target=timer)
    t1.start()
    time.sleep(0.1)  # the timer is now waiting for the running trial
    t2 = threading.Thread(target=later_work)
    t2.start()
    time.sleep(0.1)
    assert order == []  # neither may start while the trial runs; the later work queues behind the timer
    gate.release_shared()
    t1.join(5)
    t2.join(5)
    assert order == ["timing", "later work"]


def test_gpu_lock_is_shared_between_work_and_exclusive_for_timing(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "lock_dir", lambda: tmp_path)
    inside = []
    with locks.shared_gpu_lock("cuda", "t0"):
        with locks.shared_gpu_lock("cuda", "t0"):  # shared holders overlap
            inside.append("both")
        started = threading.Event()
        done = threading.Event()

        def time_it():
            started.set()
            with locks.exclusive_gpu_lock("cuda", "t0"):
                done.set()

        thread = threading.Thread(target=time_it)
        thread.start()
        started.wait(5)
        assert not done.wait(0.2)  # timing waits for the work in flight
    assert done.wait(5)
    thread.join(5)
    assert inside == ["both"]


_LOCK_SCRIPT = """
import sys, time
from ksmith_core.errors import ProblemError
from ksmith_triton import locks
role, log = sys.argv[1], sys.argv[2]
def note(text):
    with open(log, "a") as fh:
        fh.write(text + "\\n")
if role == "timer":
    with locks.exclusive_gpu_lock("cuda", "t0"):
        note("timing")
        time.sleep(0.3)
        note("timing done")
else:
    note("worker waiting")
    with locks.WorkerSharedHold("cuda"):  # a worker's own setup work on its GPU (CUDA_VISIBLE_DEVICES=t0)
        note("worker setup")
"""


def turnstile_held(path) -> bool:
    """Whether a timer holds the turnstile of a GPU's lock (a shared probe of it would block)."""
    import fcntl

    with open(path, "a+") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False


def _until(condition, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the other process"
        time.sleep(0.02)


def test_a_waiting_timer_goes_before_new_work_of_other_processes(tmp_path, monkeypatch):
    """Three processes: this one holds the GPU shared; a timer in another waits; then a worker in a third asks
    for a shared hold. The worker must wait behind the timer (the turnstile), not slip in beside this one."""
    import os
    import subprocess
    import sys

    monkeypatch.setenv(locks.LOCK_DIR_ENV, str(tmp_path))
    env = {**os.environ, locks.LOCK_DIR_ENV: str(tmp_path), "CUDA_VISIBLE_DEVICES": "t0"}
    log = tmp_path / "order.log"

    def start(role):
        return subprocess.Popen([sys.executable, "-c", _LOCK_SCRIPT, role, str(log)], env=env)

    def lines():
        return log.read_text().splitlines() if log.exists() else []

    with locks.shared_gpu_lock("cuda", "t0"):
        timer = start("timer")
        _until(
            lambda: turnstile_held(tmp_path / "cuda-t0.turnstile")
        )  # the timer is waiting for this process's shared hold
        worker = start("worker")
        _until(lambda: "worker waiting" in lines())
        time.sleep(0.5)
        assert lines() == ["worker waiting"]  # neither got in while the GPU was held
    assert timer.wait(20) == 0 and worker.wait(20) == 0
    assert lines() == ["worker waiting", "timing", "timing done", "worker setup"]


def test_a_lock_held_too_long_is_reported_not_waited_for_forever(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setenv(locks.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(locks.LOCK_WAIT_ENV, "1")
    with open(tmp_path / "cuda-t1.lock", "a+") as stuck:  # another process's hold (a separate open file)
        fcntl.flock(stuck, fcntl.LOCK_SH)
        started = time.monotonic()
        with pytest.raises(locks.GpuLockTimeout, match="GPU_BUSY"):
            with locks.exclusive_gpu_lock("cuda", "t1"):
                pass
        assert 0.9 < time.monotonic() - started < 10
        with locks.shared_gpu_lock("cuda", "t1"):  # shared work still passes beside a shared holder
            pass
    with locks.exclusive_gpu_lock("cuda", "t1"):  # and the turnstile was left open for the next timer
        pass

    # Inside one process the gate times out the same way.
    with locks.exclusive_gpu_lock("cuda", "t2"):
        with pytest.raises(locks.GpuLockTimeout):
            with locks.shared_gpu_lock("cuda", "t2"):
                pass


def test_a_relative_lock_directory_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(locks.LOCK_DIR_ENV, "locks-here")
    assert locks.lock_dir() == tmp_path / "locks-here"


def test_workers_lock_the_same_files_as_their_driver(monkeypatch, tmp_path):
    from ksmith_triton.evaluator import child_env

    monkeypatch.setenv(locks.LOCK_DIR_ENV, str(tmp_path))
    env = child_env("cuda", "3")
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env[locks.LOCK_DIR_ENV] == str(tmp_path)
    assert locks.LOCK_DIR_ENV not in child_env("cpu", None)
    with locks.WorkerSharedHold("cpu") as hold:  # on the CPU there is no GPU lock to hold
        assert hold._held is None


def test_candidate_workers_get_one_cuda_work_queue_unless_the_user_chose(monkeypatch):
    from ksmith_triton import evaluator

    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    env = evaluator.candidate_env("cuda", "2")
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "2"
    assert {k: v for k, v in env.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"} == evaluator.child_env(
        "cuda", "2"
    )
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in evaluator.child_env(
        "cuda", "2"
    )  # reference processes: default
    assert evaluator.candidate_env("cpu", None) == evaluator.child_env("cpu", None)
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4")
    assert evaluator.candidate_env("cuda", "2")["CUDA_DEVICE_MAX_CONNECTIONS"] == "4"


def test_a_candidate_runs_in_the_environment_candidate_env_gives(reference_cache, monkeypatch):
    """The wiring: what ``candidate_env`` returns is the environment the candidate's own process sees."""
    from ksmith_core.model import Candidate
    from ksmith_triton import evaluator

    source = candidate("env_secret").source.replace(
        'if "OPENAI_API_KEY" in os.environ:', 'if os.environ.get("KSMITH_TEST_CANDIDATE_ENV") != "seen":'
    )
    assert "KSMITH_TEST_CANDIDATE_ENV" in source
    checks_its_environment = Candidate.from_source(source)
    without = evaluate(problem("scale_add"), checks_its_environment, quick_options(reference_cache))
    assert without.status.value != "ok"  # the check can fail

    made = evaluator.candidate_env
    monkeypatch.setattr(
        evaluator,
        "candidate_env",
        lambda device, gpu: {**made(device, gpu), "KSMITH_TEST_CANDIDATE_ENV": "seen"},
    )
    verdict = evaluate(problem("scale_add"), checks_its_environment, quick_options(reference_cache))
    assert verdict.status.value == "ok", (verdict.reasons, verdict.error)


def test_gpu_workers_compile_with_inductor_in_their_own_process_unless_the_user_chose(monkeypatch):
    from ksmith_triton.evaluator import child_env

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    assert child_env("cuda", "0")["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "8")
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in child_env(
        "cuda", "0"
    )  # the user's own setting goes through


def test_spares_start_from_the_second_evaluation_and_serve_one_candidate_each(monkeypatch):
    monkeypatch.delenv("KSMITH_WARM_WORKERS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 4)  # room for two spares on the CPU
    pool = WarmPool()
    env = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
    try:
        first = pool.take("cpu", env)
        pool.done()
        assert pool.spawned == 1 and not pool._spares  # one evaluation: no spares
        second = pool.take("cpu", env)
        pool.done()
        assert pool.spawned == 4 and pool.reused == 0  # the second starts two spares for what follows
        spare = next(iter(pool._spares.values()))[0]
        third = pool.take("cpu", env)
        pool.done()
        assert third is spare and pool.reused == 1
        assert len({first.proc.pid, second.proc.pid, third.proc.pid}) == 3
        for child in (first, second, third):
            discard(child)
        fourth = pool.take("cpu", {**env, "KSMITH_SOMETHING": "changed"})  # another environment
        pool.done()
        assert fourth is not spare and pool.reused == 1
        new_key = _key("cpu", {**env, "KSMITH_SOMETHING": "changed"})
        assert list(pool._spares) == [new_key]  # the old environment's spare was retired
        assert spare.proc.poll() is not None
        discard(fourth)
    finally:
        pool.close()
    assert not pool._spares


def test_a_spare_whose_parent_goes_away_exits(monkeypatch):
    pool = WarmPool()
    child = pool.take("cpu", {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"})
    pool.done()
    try:
        child.proc.stdin.close()  # what the parent's death does to its end of the pipe
        assert child.proc.wait(timeout=60) == 0
        assert not child.scratch.exists()  # nobody else is left to remove its directory
    finally:
        discard(child)


def test_sequential_evaluations_reuse_warm_workers(reference_cache, monkeypatch):
    from ksmith_triton import pool as pool_module

    monkeypatch.setenv("KSMITH_WARM_WORKERS", "1")
    before = pool_module.POOL.reused
    verdicts = [
        evaluate(problem("scale_add"), candidate(name), quick_options(reference_cache))
        for name in ("scale_add_ok", "wrong_output", "scale_add_ok")
    ]
    assert [v.status.value for v in verdicts] == ["ok", "incorrect", "ok"]
    assert pool_module.POOL.reused - before >= 2
    assert all("candidate_import_and_first_call" in v.phases for v in verdicts)
    # Each verdict says what it cost the host: the worker imported torch and ran the interpreted kernel (whole
    # seconds). The reference process's share of a problem this small can be below the kernel's 10 ms tick,
    # so it is only required to be there (its accounting: the test below).
    for verdict in verdicts:
        spent = verdict.details["cpu_s"]
        assert spent["worker"] > 0.0 and spent["reference"] >= 0.0 and spent["evaluator"] >= 0.0, spent


def test_process_cpu_seconds_reads_the_kernels_account():
    import os

    from ksmith_triton.sandbox import process_cpu_seconds

    before = process_cpu_seconds(os.getpid())
    deadline = time.thread_time() + 0.3
    while time.thread_time() < deadline:  # 0.3 s of this process's CPU
        pass
    after = process_cpu_seconds(os.getpid())
    assert before is not None and after is not None and after - before >= 0.2
    assert process_cpu_seconds(2**22 + 12345) is None  # above any pid Linux hands out


def test_a_reference_request_charges_the_cpu_its_process_spent_answering_it():
    from ksmith_triton import evaluator
    from ksmith_triton.evaluator import ReferenceWorker

    class Answering:  # a reference process that spends 0.5 CPU-seconds on each answer
        used = 1.0

        def send(self, message):
            self.op = message["op"]

        def wait_message(self, op, timeout_s):
            Answering.used += 0.5
            return {"kind": op}

        def cpu_seconds(self):
            return Answering.used

    worker = ReferenceWorker.__new__(ReferenceWorker)
    worker.lock, worker.closed = threading.Lock(), False
    child = Answering()
    worker._running = lambda: child
    evaluator._reference_cpu.seconds = 0.0
    try:
        worker.request("compare")
        worker.request("check_samples")
        assert evaluator._reference_cpu.seconds == 1.0
    finally:
        evaluator._reference_cpu.seconds = None


def test_outputs_are_mapped_before_the_comparisons_hold_and_released_after_it(tmp_path):
    """Mapping the candidate's outputs (CUDA IPC) and letting them go are driver calls, not GPU work: they
    happen outside the shared hold, which covers the comparison alone; a comparison with nothing to map is
    one request, as before."""
    import contextlib

    from ksmith_triton.evaluator import ReferenceWorker

    held = []
    sent = []

    @contextlib.contextmanager
    def hold():
        held.append(True)
        try:
            yield
        finally:
            held.pop()

    class Recording:
        def send(self, message):
            sent.append((message["op"], bool(held), message.get("prepared") is not None))
            tokens.append(message.get("token") or message.get("prepared"))

        def wait_message(self, op, timeout_s):
            return {"kind": op, "steps": {f"{op} step": 0.5}}

        def cpu_seconds(self):
            return None

        def output_tail(self):
            return {"stderr": ""}

        def kill(self):
            pass

    tokens = []
    worker = ReferenceWorker.__new__(ReferenceWorker)
    worker.lock, worker.closed = threading.Lock(), False
    worker.problem = types.SimpleNamespace(name="scale_add")
    worker.child = Recording()
    worker._running = lambda: worker.child
    got = [{"structure": "tensor", "outputs": []}]
    answer = worker.compare_with_reference(1, [2], got, tmp_path, hold=hold())
    assert sent == [
        ("prepare_outputs", False, False),
        ("compare", True, True),
        ("release_outputs", False, False),
    ]
    assert tokens[0] and tokens[0] == tokens[1]  # the comparison names the preparation it uses
    assert set(answer["steps"]) == {"prepare_outputs step", "compare step", "release_outputs step"}
    sent.clear()
    worker.compare_with_reference(1, [2], [], tmp_path, hold=hold())
    assert sent == [("compare", True, False)]

    # A process lost while letting go does not undo the comparison it answered.
    class LostOnRelease(Recording):
        def wait_message(self, op, timeout_s):
            if op == "release_outputs":
                return {"kind": "error", "reason": "gone"}
            return super().wait_message(op, timeout_s)

    worker.child = LostOnRelease()
    answer = worker.compare_with_reference(1, [2], got, tmp_path, hold=hold())
    assert answer["kind"] == "compare" and "compare step" in answer["steps"]
    assert worker.child is None  # the failed process was let go

    # A comparison that fails (its process killed) sends no release to a process started after it.
    class FailsToCompare(Recording):
        def wait_message(self, op, timeout_s):
            if op == "compare":
                return {"kind": "error", "reason": "gone"}
            return super().wait_message(op, timeout_s)

    worker.child = FailsToCompare()
    sent.clear()
    with pytest.raises(ProblemError):
        worker.compare_with_reference(1, [2], got, tmp_path, hold=hold())
    assert [op for op, _, _ in sent] == ["prepare_outputs", "compare"]


def test_outputs_not_prepared_by_this_process_are_read_by_the_comparison(tmp_path):
    """The comparison uses mapped sets only under the token they were prepared with; otherwise (a reference
    process started after the preparation) it reads them itself: nothing prepared is never a forgery. A
    set the preparation could not read is reported as the candidate's."""
    from ksmith_triton import reference_side
    from ksmith_triton.child_common import load_problem_module, make_inputs, make_model

    case = Path(__file__).parent / "cases" / "scale_add.py"
    prob = load_problem_module(case.read_text(), {"batch_size": 4, "dim": 256})
    model = make_model(prob.Model, prob, 7, "cpu")
    report = save_outputs(tmp_path, "trial_0", "tensor", [model(*make_inputs(prob, 11, "cpu"))])
    command = {
        "init_seed": 7,
        "seeds": [11],
        "got": [report],
        "directory": str(tmp_path),
        "label": "trial",
        "tolerances": {"default": [1e-5, 1e-5]},
    }
    # File outputs are left to the comparison (read one set at a time): nothing is prepared for them.
    assert reference_side.prepare_outputs(prob, "cpu", {**command, "token": "t1"})["prepared"] == 0
    try:
        reference_side._prepared[0] = ValueError("unmappable")
        stale = reference_side.compare_with_reference(prob, "cpu", {**command, "prepared": "t0"})
        assert [c["correct"] for c in stale["comparisons"]] == [True]
        used = reference_side.compare_with_reference(prob, "cpu", {**command, "prepared": "t1"})
        reason = used["comparisons"][0]["reasons"][0]
        assert not used["comparisons"][0]["correct"]
        assert reason.startswith("FORGED_OUTPUT: trial 0") and "unmappable" in reason
    finally:
        assert reference_side.release_outputs(prob, "cpu", {})["released"] == 1
    assert not reference_side._prepared and not reference_side._prepared_token


def test_a_real_reference_process_answers_the_three_requests_of_a_comparison(reference_cache):
    # On the CPU the outputs are files, read by the comparison itself; the GPU test below maps them.
    verdict = evaluate(problem("scale_add"), candidate("scale_add_ok"), quick_options(reference_cache))
    assert verdict.status == "ok", verdict.reasons
    steps = verdict.details["reference_steps"]["compare trial"]
    assert steps["map outputs, unheld"] >= 0.0 and steps["release outputs, unheld"] >= 0.0
    assert steps["load outputs"] >= 0.0


def test_reference_cpu_is_charged_only_inside_an_evaluations_account():
    from ksmith_triton import evaluator

    evaluator._reference_cpu.seconds = None
    evaluator.charge_reference_cpu(1.0)  # no evaluation on this thread: nothing to charge
    assert evaluator._reference_cpu.seconds is None
    evaluator._reference_cpu.seconds = 0.0
    try:
        evaluator.charge_reference_cpu(0.25)
        evaluator.charge_reference_cpu(-1.0)  # a clock read out of order never takes CPU back
        assert evaluator._reference_cpu.seconds == 0.25
    finally:
        evaluator._reference_cpu.seconds = None


def test_concurrent_takes_start_no_more_spares_than_the_target(monkeypatch):
    monkeypatch.setenv("KSMITH_WARM_WORKERS", "2")
    pool = WarmPool()
    env = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
    barrier = threading.Barrier(6)
    taken = []

    def take():
        barrier.wait()
        taken.append(pool.take("cpu", env))
        pool.done()

    threads = [threading.Thread(target=take) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(taken) == 6
        assert sum(len(group) for group in pool._spares.values()) <= 2
        assert pool.spawned <= 6 + 2
    finally:
        for child in taken:
            discard(child)
        pool.close()


@pytest.mark.gpu
@pytest.mark.parametrize("transport", ["ipc", "files"])
def test_gpu_outputs_reach_the_reference_by_either_transport(reference_cache, monkeypatch, transport):
    from evaluator_helpers import quick_options as options

    monkeypatch.setenv("KSMITH_OUTPUT_TRANSPORT", transport)
    gpu = options(reference_cache, device="cuda", correctness_trials=5, timing_trials=100)
    good = evaluate(problem("scale_add"), candidate("two_kernels"), gpu)
    assert good.status.value == "ok", good.reasons
    if transport == "ipc":  # mapped before the comparison's hold (files: read by the comparison)
        assert good.details["reference_steps"]["compare trial"]["map outputs, unheld"] > 0.0
    bad = evaluate(problem("scale_add"), candidate("off_by_tolerance"), gpu)
    assert bad.status.value == "incorrect" and bad.mismatch.max_abs_error > 1e-3, bad.reasons


def test_candidates_are_spread_over_the_visible_gpus(monkeypatch, tmp_path):
    """Without a GPU here, the assignment itself: round-robin over the visible GPUs, each child pinned to one
    physical GPU, one independent lock per GPU, and spares kept per GPU."""
    from ksmith_core.model import EvalOptions
    from ksmith_triton import evaluator

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setenv(locks.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(locks, "visible_gpu_count", lambda: 2)
    prob, cand = problem("scale_add"), candidate("scale_add_ok")
    gpus = [evaluator.Evaluation(prob, cand, EvalOptions(device="cuda")).gpu for _ in range(4)]
    assert sorted(gpus) == ["3", "3", "5", "5"] and gpus[0] != gpus[1]
    assert evaluator.child_env("cuda", "5")["CUDA_VISIBLE_DEVICES"] == "5"
    assert evaluator.Evaluation(prob, cand, EvalOptions(device="cuda", gpu_index=1)).gpu == "5"

    with locks.exclusive_gpu_lock("cuda", "3"):  # timing on one GPU does not hold up the other
        done = threading.Event()

        def time_other():
            with locks.exclusive_gpu_lock("cuda", "5"):
                done.set()

        thread = threading.Thread(target=time_other)
        thread.start()
        assert done.wait(5)
        thread.join(5)
    # Spares of two GPUs share an environment key, so taking for one never retires the other's.
    assert _key("cuda", {"CUDA_VISIBLE_DEVICES": "3"})[2] == _key("cuda", {"CUDA_VISIBLE_DEVICES": "5"})[2]
    assert _key("cuda", {"CUDA_VISIBLE_DEVICES": "3"}) != _key("cuda", {"CUDA_VISIBLE_DEVICES": "5"})


def test_fewer_outputs_than_the_reference_never_pass():
    from ksmith_triton.compare import Outputs, compare_outputs

    reference = Outputs("tuple:2", [torch.ones(3), torch.ones(3)])
    lookup = tolerances({"default": [1e-4, 1e-4]})
    assert not compare_outputs(Outputs("tuple:2", [torch.ones(3)]), reference, "cpu", lookup).correct
    assert not compare_outputs(
        Outputs("tensor", []), Outputs("tensor", [torch.ones(3)]), "cpu", lookup
    ).correct


def test_output_reader_refuses_fifos_and_a_symlinked_directory(tmp_path: Path):
    import os

    report = save_outputs(tmp_path, "trial_0", "tensor", [torch.empty(0)])
    item = report["outputs"][0]
    os.mkfifo(tmp_path / "pipe.bin")  # a reader that opened this would wait forever
    with pytest.raises(ValueError, match="plain file"):
        load_outputs({**report, "outputs": [{**item, "file": "pipe.bin"}]}, tmp_path, "cpu")
    (tmp_path / "linked").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="plain file"):
        load_outputs(report, tmp_path / "linked", "cpu")


def test_a_retired_reference_worker_revived_by_an_evaluation_is_closed_after_it(reference_cache):
    from ksmith_triton.evaluator import ReferenceWorker

    worker = ReferenceWorker(problem("scale_add"), "cpu", None, True)
    worker.close()  # retired from the table while an evaluation still holds it
    assert worker.request("info")["kind"] == "info"  # the evaluation still gets its answer
    assert worker.child is None and not worker.dir.exists()  # and nothing is left running or on disk
