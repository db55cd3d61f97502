"""The adversarial suite: every cheat from the public record that can be expressed on CPU, and the legitimate
candidates that must still pass. Each row names a problem, a candidate under ``cases/``, the status the
evaluator must give and the reason code it must cite.

All rows are evaluated once, concurrently (as the engine does), with a fake API key in the driver's
environment; each test then checks one verdict.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from evaluator_helpers import candidate, problem, quick_options

from ksmith_triton.evaluator import evaluate

FAKE_KEY = "sk-ksmith-test-not-a-real-key"

# id: (problem, candidate, options, status, reason code or None)
ROWS = {
    # legitimate candidates
    "one_kernel": ("scale_add", "scale_add_ok", {"correctness_trials": 5}, "ok", None),
    "two_kernels": ("scale_add", "two_kernels", {}, "ok", None),
    "allowed_conv_with_triton_epilogue": ("conv_relu", "conv_relu_ok", {}, "ok", None),
    "within_tolerance": ("scale_add", "within_tolerance", {}, "ok", None),
    "prints_garbage": ("scale_add", "prints_garbage", {}, "ok", None),
    "env_secret_scrubbed": ("scale_add", "env_secret", {}, "ok", None),
    # wrong answers
    "wrong_output": ("scale_add", "wrong_output", {}, "incorrect", "MISMATCH"),
    "off_by_tolerance": ("scale_add", "off_by_tolerance", {}, "incorrect", "MISMATCH"),
    "nan_output": ("scale_add", "nan_output", {}, "incorrect", "NAN_OUTPUT"),
    "inf_output": ("scale_add", "inf_output", {}, "incorrect", "INF_OUTPUT"),
    "wrong_shape": ("scale_add", "wrong_shape", {}, "incorrect", "SHAPE_MISMATCH"),
    "wrong_dtype": ("scale_add", "wrong_dtype", {}, "incorrect", "DTYPE_MISMATCH"),
    "input_mutation": ("scale_add", "input_mutation", {}, "incorrect", "INPUT_MUTATED"),
    "zero_inputs": ("scale_add", "zero_inputs", {}, "incorrect", "INPUT_MUTATED"),
    "cache_by_shape": ("scale_add", "cache_by_shape", {}, "incorrect", "MISMATCH"),
    "cache_by_data_ptr": ("scale_add", "cache_by_data_ptr", {}, "incorrect", None),
    "gc_hunt_finds_no_reference": ("scale_add", "gc_hunt", {}, "incorrect", None),
    # cheats
    "tensor_subclass": ("scale_add", "tensor_subclass", {}, "rejected", "TENSOR_SUBCLASS"),
    "lazy_output": ("scale_add", "lazy_output", {}, "rejected", "TENSOR_SUBCLASS"),
    "torch_op": ("scale_add", "torch_op", {}, "rejected", "FORBIDDEN_TORCH_OP"),
    "getattr_trick": ("scale_add", "getattr_trick", {}, "rejected", "FORBIDDEN_TORCH_OP"),
    "decoy_kernel": ("scale_add", "decoy_kernel", {}, "rejected", "NO_TRITON_LAUNCH"),
    "try_except_fallback": ("scale_add", "try_fallback", {}, "rejected", "FORBIDDEN_TORCH_OP"),
    "subclass_of_model": ("scale_add", "subclass_model", {}, "rejected", "NO_TRITON_LAUNCH"),
    "torch_op_not_allowed": ("conv_relu", "conv_relu_torch", {}, "rejected", "FORBIDDEN_TORCH_OP"),
    "patch_timer": ("scale_add", "patch_timer", {}, "rejected", "TAMPERED"),
    "patch_harness": ("scale_add", "patch_harness", {}, "rejected", "TAMPERED"),
    "thread_in_forward": ("scale_add", "thread_in_forward", {}, "rejected", "THREAD_STARTED"),
    "thread_at_import": ("scale_add", "thread_at_import", {}, "rejected", "THREAD_STARTED"),
    "numpy_escape": ("scale_add", "numpy_escape", {}, "rejected", "FORBIDDEN_TORCH_OP"),
    "pop_dispatch_mode": ("scale_add", "pop_dispatch_mode", {}, "rejected", "FORBIDDEN_TORCH_OP"),
    "spawn_process": ("scale_add", "spawn_process", {}, "rejected", "PROCESS_SPAWNED"),
    "forge_report": ("scale_add", "forge_report", {}, "rejected", "FORGED_REPORT"),
    "symlinked_output_file": ("scale_add", "symlink_output", {}, "rejected", "FORGED_OUTPUT"),
    "degenerate_reference": ("degenerate_zeros", "constant_zeros", {}, "rejected", "DEGENERATE_REFERENCE"),
    # failures that must cost the candidate only
    "os_exit": ("scale_add", "os_exit", {}, "crashed", "EXITED"),
    "sys_exit": ("scale_add", "sys_exit", {}, "crashed", "EXITED"),
    "segfault": ("scale_add", "segfault", {}, "crashed", "CRASHED"),
    "infinite_loop": ("scale_add", "infinite_loop", {"timeout_s": 20.0}, "timeout", "TIMEOUT"),
    "huge_allocation": (
        "scale_add",
        "huge_allocation",
        {"memory_limit_mb": 2048},
        "runtime_error",
        "OUT_OF_MEMORY",
    ),
    "syntax_error": ("scale_add", "syntax_error.txt", {}, "compile_error", "SYNTAX_ERROR"),
    "import_error": ("scale_add", "import_error", {}, "compile_error", "IMPORT_ERROR"),
    "kernel_compile_error": (
        "scale_add",
        "kernel_compile_error",
        {},
        "compile_error",
        "KERNEL_COMPILE_ERROR",
    ),
}


@pytest.fixture(scope="module")
def verdicts(reference_cache):
    os.environ["OPENAI_API_KEY"] = FAKE_KEY
    os.environ["HF_TOKEN"] = FAKE_KEY
    try:

        def judge(item):
            name, (prob, cand, overrides, _, _) = item
            return name, evaluate(problem(prob), candidate(cand), quick_options(reference_cache, **overrides))

        with ThreadPoolExecutor(max_workers=4) as pool:
            return dict(pool.map(judge, ROWS.items()))
    finally:
        del os.environ["OPENAI_API_KEY"], os.environ["HF_TOKEN"]


@pytest.mark.parametrize("name", list(ROWS))
def test_verdict(verdicts, name):
    _, _, _, status, code = ROWS[name]
    verdict = verdicts[name]
    summary = f"{name}: {verdict.status.value} {list(verdict.reasons)} {verdict.error[-800:]}"
    assert verdict.status.value == status, summary
    assert verdict.correct is (status == "ok")
    if code:
        assert any(reason.startswith(code + ":") for reason in verdict.reasons), summary
    for reason in verdict.reasons:
        head = reason.split(":", 1)[0]
        assert head.isupper() and " " not in head, f"reason without a stable code: {reason}"


def test_accepted_verdicts_carry_interpreted_timings(verdicts):
    for name, (_, _, _, status, _) in ROWS.items():
        if status != "ok":
            continue
        verdict = verdicts[name]
        assert verdict.interpreted and verdict.device == "cpu"
        assert verdict.runtime_ms and verdict.runtime_ms > 0
        assert verdict.reference_ms and verdict.reference_ms > 0
        assert verdict.speedup == pytest.approx(verdict.reference_ms / verdict.runtime_ms)
        assert verdict.speedup_vs_compile is None


def test_default_protocol_runs_at_least_five_trials(verdicts):
    assert list(verdicts["one_kernel"].launches) == [1, 1, 1, 1, 1]


def test_two_kernel_candidate_counts_both_launches(verdicts):
    assert set(verdicts["two_kernels"].launches) == {2}


def test_mismatch_details_for_the_proposer(verdicts):
    mismatch = verdicts["off_by_tolerance"].mismatch
    assert mismatch.output == 0 and mismatch.where.startswith("trial ")
    assert mismatch.worst_index and mismatch.numel and 0 < mismatch.mismatched <= mismatch.numel
    assert mismatch.max_abs_error == pytest.approx(2e-3, rel=0.05) and mismatch.max_rel_error > 0
    assert mismatch.atol == 1e-4 and mismatch.rtol == 1e-4
    assert mismatch.got - mismatch.expected == pytest.approx(2e-3, rel=0.05)


def test_a_real_mismatch_reaches_the_feedback_with_expected_and_actual_values(reference_cache):
    from ksmith_core.engine import evaluate as evaluate_through_the_core

    verdict = evaluate_through_the_core(
        problem("scale_add"), candidate("off_by_tolerance"), quick_options(reference_cache)
    )
    mismatch = verdict.mismatch
    assert verdict.status.value == "incorrect" and mismatch is not None
    assert f"expected {mismatch.expected:.6g}, got {mismatch.got:.6g}" in verdict.feedback
    assert "max abs error 0.002" in verdict.feedback and "(atol 0.0001, rtol 0.0001)" in verdict.feedback


def test_kernel_compile_error_shows_the_offending_line(verdicts):
    error = verdicts["kernel_compile_error"].error
    assert "fancy_exp" in error


def test_forbidden_op_is_named(verdicts):
    assert any("aten.mul" in reason for reason in verdicts["getattr_trick"].reasons)
    assert "aten.relu.default" in verdicts["torch_op_not_allowed"].details["ops"]


def test_crash_reports_the_signal(verdicts):
    assert any("SIGSEGV" in reason for reason in verdicts["segfault"].reasons)


def test_candidate_output_does_not_reach_the_verdict(verdicts):
    verdict = verdicts["prints_garbage"]
    assert verdict.status.value == "ok"
    assert verdict.speedup != 1000
