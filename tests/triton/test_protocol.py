"""The evaluator as the rest of ksmith uses it: the registered backend, the command line, batches, and the parts of the
protocol that are plain functions (comparison, degenerate references, the reference cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from evaluator_helpers import CASES, candidate, problem, quick_options

from ksmith_core import Backend, plugins
from ksmith_core.engine import evaluate as evaluate_through_the_core
from ksmith_core.errors import PluginError
from ksmith_core.loading import load_problem
from ksmith_core.model import Candidate, Problem, Status
from ksmith_core.registry import lookup
from ksmith_triton import PROTOCOL_VERSION
from ksmith_triton.compare import Outputs, compare_outputs, degenerate_reasons
from ksmith_triton.evaluator import evaluate, evaluate_many
from ksmith_triton.plugin import TRITON
from ksmith_triton.refcache import ReferenceCache
from ksmith_triton.sandbox import scrubbed_environment

REPO = Path(__file__).resolve().parents[2]


def test_backend_is_registered_through_the_entry_point():
    plugins.reset_plugin_manager()
    assert lookup(Backend, "triton") is TRITON


def test_other_backends_are_left_to_other_plugins(reference_cache):
    other = Problem(name="x", path=CASES / "scale_add.py", source="", backend="maca")
    with pytest.raises(
        PluginError, match=r"unknown backend 'maca' \(registered: ([a-z]+, )*triton(, [a-z]+)*\)"
    ):
        evaluate_through_the_core(other, candidate("scale_add_ok"), quick_options(reference_cache))


def test_batch_keeps_order_and_isolates_failures(reference_cache):
    names = ["scale_add_ok", "segfault", "wrong_output"]
    verdicts = evaluate_many(
        problem("scale_add"), [candidate(n) for n in names], quick_options(reference_cache), workers=3
    )
    assert [v.status for v in verdicts] == [Status.OK, Status.CRASHED, Status.INCORRECT]


def test_candidate_rewriting_the_problem_file_changes_nothing(tmp_path, reference_cache):
    problem_path = tmp_path / "scale_add.py"
    shutil.copy(CASES / "scale_add.py", problem_path)
    original = problem_path.read_text()
    prob = load_problem(problem_path)
    source = (
        (CASES / "write_problem.py.tmpl").read_text().replace("__PROBLEM_PATH__", repr(str(problem_path)))
    )
    verdict = evaluate(prob, Candidate.from_source(source), quick_options(reference_cache))
    assert problem_path.read_text() != original, "the attack did not even run"
    assert verdict.status is Status.INCORRECT, verdict.reasons
    assert any(r.startswith("MISMATCH:") for r in verdict.reasons)


def _ksmith(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from ksmith_core.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def test_cli_json_is_one_object_whatever_the_candidate_prints(reference_cache):
    env = {**os.environ, "XDG_CACHE_HOME": reference_cache, "OPENAI_API_KEY": "sk-fake"}
    result = _ksmith(
        "eval",
        str(CASES / "scale_add.py"),
        str(CASES / "prints_garbage.py"),
        "--device",
        "cpu",
        "--trials",
        "2",
        "--json",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # raises if anything else is on stdout
    assert data["status"] == "ok" and data["correct"] is True and data["interpreted"] is True
    for key in ("speedup", "speedup_vs_compile", "runtime_ms", "reference_ms", "reasons", "device"):
        assert key in data


def test_cli_failing_verdict_still_exits_zero(reference_cache):
    env = {**os.environ, "XDG_CACHE_HOME": reference_cache}
    result = _ksmith(
        "eval",
        str(CASES / "scale_add.py"),
        str(CASES / "os_exit.py"),
        "--device",
        "cpu",
        "--trials",
        "1",
        "--json",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "crashed"


def test_scrubbed_environment_drops_secrets(monkeypatch):
    for name in ("OPENAI_API_KEY", "HF_TOKEN", "MY_SECRET", "DB_PASSWORD", "aws_secret_access_key"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("HARMLESS", "y")
    env = scrubbed_environment()
    assert not {"OPENAI_API_KEY", "HF_TOKEN", "MY_SECRET", "DB_PASSWORD", "aws_secret_access_key"} & set(env)
    assert env["HARMLESS"] == "y"


# -- comparison and degenerate references -----------------------------------------------------------------------


def _tol(_dtype):
    from ksmith_core.model import Tolerance

    return Tolerance(1e-4, 1e-4)


def _outs(*tensors):
    return Outputs("tensor", list(tensors), ["cpu"] * len(tensors))


def test_relu_and_long_softmax_are_not_degenerate():
    torch.manual_seed(0)
    relu = [_outs(torch.relu(torch.randn(64, 256))) for _ in range(5)]
    softmax = [_outs(torch.softmax(torch.randn(4, 16384), dim=1)) for _ in range(5)]
    assert degenerate_reasons(relu, _tol) == []
    assert degenerate_reasons(softmax, _tol) == []


def test_degenerate_references_are_refused():
    zeros = [_outs(torch.zeros(64)) for _ in range(3)]
    constant = [_outs(torch.full((64,), 3.0)) for _ in range(3)]
    tiny = [_outs(torch.randn(64) * 1e-6) for _ in range(3)]
    fixed = torch.randn(64)
    unchanged = [_outs(fixed.clone()) for _ in range(3)]
    for trials in (zeros, constant, tiny, unchanged):
        reasons = degenerate_reasons(trials, _tol)
        assert reasons and reasons[0].startswith("DEGENERATE_REFERENCE:")


def test_compare_checks_type_shape_dtype_and_values():
    ref = torch.randn(8, 8)
    assert compare_outputs(_outs(ref.clone()), _outs(ref), "cpu", _tol).correct
    assert not compare_outputs(_outs(ref.double()), _outs(ref), "cpu", _tol).correct
    assert not compare_outputs(_outs(ref.t().contiguous()[:4]), _outs(ref), "cpu", _tol).correct
    off = ref.clone()
    off[3, 5] += 1.0
    result = compare_outputs(_outs(off), _outs(ref), "cpu", _tol)
    assert (
        not result.correct and result.mismatch["worst_index"] == [3, 5] and result.mismatch["mismatched"] == 1
    )


def test_reference_cache_is_private_json(tmp_path):
    cache = ReferenceCache(tmp_path / "cache")
    key = cache.key("reference", problem="abc", small=True)
    cache.set(key, {"eager_ms": [1.0, 2.0]})
    assert cache.get(key) == {"eager_ms": [1.0, 2.0]}
    assert f'"protocol": {PROTOCOL_VERSION}' in key
    cache.close()
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700


def test_the_trials_driver_allocations_and_steps_are_reported_and_none_are_counted_off_the_gpu(
    reference_cache,
):
    verdict = evaluate(problem("scale_add"), candidate("scale_add_ok"), quick_options(reference_cache))
    assert verdict.status is Status.OK, verdict.reasons
    assert verdict.details["trial_allocations"] == {}  # the worker's count, sent with its trials
    # Where the trials' hold went, step by step: every step of a CPU trial named, and together no longer than
    # the trials' phase the driver timed around them (its clock starts before the worker's and stops after).
    steps = verdict.details["trial_steps_ms"]
    assert {"inputs", "stage", "forward", "guards_checked", "inputs_compared", "outputs_saved"} <= set(steps)
    assert "poison" not in steps  # the poison block is a GPU step
    assert all(ms >= 0 for ms in steps.values())
    assert 0 < sum(steps.values()) <= verdict.phases["candidate_trials"] * 1e3 + 1


# -- GPU: run on a machine with an NVIDIA GPU ----------------------------------------------------------------------


def _gpu_options(cache_dir: str, **overrides):
    return quick_options(cache_dir, device="cuda", correctness_trials=5, timing_trials=100, **overrides)


@pytest.mark.gpu
def test_gpu_legit_kernel_is_timed_against_both_references(reference_cache):
    verdict = evaluate(problem("scale_add"), candidate("scale_add_ok"), _gpu_options(reference_cache))
    assert verdict.status is Status.OK, verdict.reasons
    assert not verdict.interpreted and verdict.device == "cuda"
    # About 100 timed calls (0.8 to 1.2 times the asked number, drawn as the loop goes: timing.py), all checked;
    # the reported time is the median over those on fresh inputs (about a third).
    assert 80 <= verdict.details["timing"]["calls"] <= 120
    assert 8 <= verdict.runtime.trials < verdict.details["timing"]["calls"]
    assert verdict.speedup and verdict.speedup_vs_compile and verdict.roofline_fraction
    assert 0 < verdict.roofline_fraction <= 1.5
    assert verdict.roofline_bound == "memory"  # an elementwise scale-add moves bytes, few FLOPs
    # What the trials asked of the driver inside their shared hold: device segments and pinned blocks.
    assert set(verdict.details["trial_allocations"]) == {"device", "host"}
    assert all(v >= 0 for v in verdict.details["trial_allocations"].values())
    assert {"poison", "forward", "timing_kernels_loaded"} <= set(verdict.details["trial_steps_ms"])
    roofline = verdict.details["roofline"]  # no ksmith_flops: counted, and elementwise work has no price
    assert roofline["flops_source"] == "counted" and roofline["flops"] == 0.0
    assert roofline["compute_dtype"] == "float32"
    assert roofline["flops_ceiling"] == roofline["ceilings"]["flops_s_fp32"]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name, status, code",
    [
        ("side_stream", "rejected", "SIDE_STREAM"),
        ("patch_cuda_event", "rejected", "TAMPERED"),
        ("cache_by_data_ptr", "incorrect", None),
        ("uninitialised_output", "incorrect", None),  # NAN_OUTPUT when the poisoned block is reused
        ("wrong_output", "incorrect", "MISMATCH"),
        ("torch_op", "rejected", "FORBIDDEN_TORCH_OP"),
        ("two_kernels", "ok", None),
    ],
)
def test_gpu_cheats(reference_cache, name, status, code):
    verdict = evaluate(problem("scale_add"), candidate(name), _gpu_options(reference_cache))
    assert verdict.status.value == status, verdict.reasons
    if code:
        assert any(r.startswith(code + ":") for r in verdict.reasons), verdict.reasons


@pytest.mark.gpu
def test_gpu_a_reference_that_launches_its_own_triton_kernel_is_evaluated(reference_cache):
    # Sizing the problem on the meta device once launched the reference's kernel on null pointers: the
    # reference process's CUDA context was lost, and every evaluation ended in a problem error.
    verdict = evaluate(problem("triton_reference"), candidate("scale_add_ok"), _gpu_options(reference_cache))
    assert verdict.status is Status.OK, verdict.reasons


@pytest.mark.gpu
def test_gpu_sticky_cuda_error_costs_the_candidate_only(reference_cache):
    bad = evaluate(problem("scale_add"), candidate("illegal_address"), _gpu_options(reference_cache))
    assert bad.status in (Status.RUNTIME_ERROR, Status.CRASHED), bad.reasons
    good = evaluate(problem("scale_add"), candidate("scale_add_ok"), _gpu_options(reference_cache))
    assert good.status is Status.OK, good.reasons


@pytest.mark.gpu
def test_gpu_timing_is_stable(reference_cache):
    runtimes = [
        evaluate(
            problem("scale_add"), candidate("scale_add_ok"), _gpu_options(reference_cache, small=False)
        ).runtime_ms
        for _ in range(3)
    ]
    assert max(runtimes) / min(runtimes) - 1 < 0.10, runtimes


def test_a_broken_problem_is_the_users_error_not_the_candidates(tmp_path, reference_cache):
    from ksmith_core.errors import ProblemError

    broken = tmp_path / "broken.py"
    broken.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return x\n\n\ndef get_inputs():\n    raise ValueError('no inputs today')\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    with pytest.raises(ProblemError, match="no inputs today"):
        evaluate(load_problem(broken), candidate("scale_add_ok"), quick_options(reference_cache))


def test_trial_inputs_are_made_one_at_a_time_when_they_do_not_fit():
    from ksmith_triton.candidate_side import InputSets
    from ksmith_triton.child_common import load_problem_module, make_inputs

    module = load_problem_module((CASES / "scale_add.py").read_text(), {"batch_size": 4, "dim": 256})
    seeds = [11, 12, 13]
    first = make_inputs(module, seeds[0], "cpu")
    lazy = InputSets(module, seeds, "cpu", first, input_bytes=4096, budget=0)
    eager = InputSets(module, seeds, "cpu", first, input_bytes=4096, budget=1 << 30)
    assert lazy.kept is None and eager.kept is not None and len(lazy) == len(eager) == 3
    for made, kept in zip(lazy, eager):  # the same inputs from the same seeds, whichever way
        assert torch.equal(made[0], kept[0])
    assert lazy.first is None  # the first set was let go once its trial had it


def test_timing_inputs_of_a_large_problem_are_made_when_the_timing_starts():
    from ksmith_triton.candidate_side import TimingInputs
    from ksmith_triton.child_common import load_problem_module, make_inputs

    module = load_problem_module((CASES / "scale_add.py").read_text(), {"batch_size": 4, "dim": 256})
    seeds = [21, 22, 23]
    input_bytes = sum(t.numel() * t.element_size() for t in make_inputs(module, seeds[0], "cpu"))
    up_front = TimingInputs(module, seeds, "cpu", input_bytes, budget=1 << 30)
    deferred = TimingInputs(module, seeds, "cpu", input_bytes, budget=2 * input_bytes)
    assert not up_front.deferred and len(up_front.sets) == 3
    assert deferred.deferred and deferred.sets == [] and len(deferred.seeds) == 1  # one set beside one more
    made = deferred.made()
    assert len(made) == 1 and all(torch.equal(a, b) for a, b in zip(made[0], up_front.sets[0]))
    deferred.clear()
    assert deferred.made() == []


def test_a_candidate_is_timed_on_deferred_timing_inputs(tmp_path, reference_cache):
    """End to end: a problem whose timing sets count as large (the candidate's process defers them) is judged
    and timed as usual."""
    source = (CASES / "scale_add.py").read_text() + (
        "\n\n# This test's knob: every input set counts as large in the candidate's process.\n"
        "from ksmith_triton.candidate_side import TimingInputs\n\nTimingInputs.UP_FRONT_SHARE = 10**18\n"
    )
    path = tmp_path / "scale_add_deferred.py"
    path.write_text(source)
    verdict = evaluate(load_problem(path), candidate("scale_add_ok"), quick_options(reference_cache))
    assert verdict.status is Status.OK, verdict.reasons
    assert verdict.runtime_ms is not None and verdict.runtime_ms > 0


def test_a_problem_too_large_for_the_device_is_one_resource_line(tmp_path, reference_cache):
    from ksmith_core.errors import ProblemError

    source = (
        (CASES / "scale_add.py")
        .read_text()
        .replace(
            "def get_inputs():\n",
            "def get_inputs():\n    raise MemoryError('CUDA out of memory. Tried to allocate 9.00 GiB')\n",
        )
    )
    path = tmp_path / "too_large.py"
    path.write_text(source)
    with pytest.raises(ProblemError) as caught:
        evaluate(load_problem(path), candidate("scale_add_ok"), quick_options(reference_cache))
    message = str(caught.value)
    assert message.startswith("problem too_large: RESOURCE: generating the inputs needs more memory")
    assert "asked for 9.00 GiB" in message and "\n" not in message


def test_problems_run_with_fp32_convolutions_and_matmuls():
    """cuDNN's default TF32 for fp32 convolutions would make the reference itself off by ~1e-3: the child
    processes turn it off before the problem runs; a problem that wants TF32 sets it itself."""
    from ksmith_triton.child_common import load_problem_module

    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        load_problem_module("SIZE = 1\n", None)
        assert torch.backends.cudnn.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is False
        load_problem_module("import torch\ntorch.backends.cudnn.allow_tf32 = True\n", None)
        assert torch.backends.cudnn.allow_tf32 is True
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
