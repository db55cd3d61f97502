"""The reference's autotuning under ksmith's measurement (inductor_tuning.py): Inductor's real autotuner class,
patched and restored; on a GPU, a real compiled reduction whose pick is recorded in the verdict."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from evaluator_helpers import quick_options

from ksmith_core.loading import load_problem
from ksmith_core.model import Candidate, Status
from ksmith_triton.evaluator import evaluate
from ksmith_triton.inductor_tuning import ProtocolBenchmarker, autotune_summary, steady_autotuning

heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")


def _config(block: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(kwargs={"XBLOCK": 1, "R0_BLOCK": block}, num_warps=4, num_stages=1)


class _Launcher:
    """What the autotuner keys its timings on (hashable, like Inductor's launchers)."""

    def __init__(self, config: types.SimpleNamespace) -> None:
        self.config = config


def _tuner(times: dict[int, list[float]]):
    """A real CachingAutotuner object (no kernel behind it) whose ``bench`` returns the given times in turn."""
    tuner = heuristics.CachingAutotuner.__new__(heuristics.CachingAutotuner)
    tuner.launchers = [_Launcher(_config(block)) for block in times]
    tuner.inductor_meta = {"kernel_name": "triton_red_fused_mean_0"}
    tuner.calls = []
    left = {block: list(values) for block, values in times.items()}

    def bench(launcher, *args, **kwargs):
        block = launcher.config.kwargs["R0_BLOCK"]
        tuner.calls.append(block)
        return left[block].pop(0)

    tuner.bench = bench
    tuner.reset_to_zero_args = lambda *a, **k: None
    return tuner


def test_configurations_are_measured_in_interleaved_rounds_and_the_lowest_median_is_kept():
    # 512 has the lowest single reading (what a minimum would pick) but the higher median.
    tuner = _tuner({512: [0.090, 0.150, 0.160], 2048: [0.120, 0.118, 0.121]})
    original_all, original_benchmarker = (
        heuristics.CachingAutotuner.benchmark_all_configs,
        heuristics.benchmarker,
    )
    with steady_autotuning(rounds=3) as record:
        assert isinstance(heuristics.benchmarker, ProtocolBenchmarker)
        timings = tuner.benchmark_all_configs("arg")
    assert tuner.calls == [512, 2048, 2048, 512, 512, 2048]  # ABBA: drift hits both alike
    assert {launcher.config.kwargs["R0_BLOCK"]: t for launcher, t in timings.items()} == {
        512: 0.150,
        2048: 0.120,
    }
    assert record["available"]
    (pick,) = record["picks"]
    assert pick["kernel"] == "triton_red_fused_mean_0"
    assert pick["chosen"] == "R0_BLOCK=2048, XBLOCK=1, num_warps=4, num_stages=1"
    assert [c["rounds_ms"] for c in pick["configs"]] == [[0.09, 0.15, 0.16], [0.12, 0.118, 0.121]]
    # Restored on exit: nothing outside the reference's compile is touched.
    assert heuristics.CachingAutotuner.benchmark_all_configs is original_all
    assert heuristics.benchmarker is original_benchmarker
    summary = autotune_summary(record)
    assert summary == [
        {
            "kernel": "triton_red_fused_mean_0",
            "chosen": "R0_BLOCK=2048, XBLOCK=1, num_warps=4, num_stages=1",
            "medians_ms": {
                "R0_BLOCK=512, XBLOCK=1, num_warps=4, num_stages=1": 0.15,
                "R0_BLOCK=2048, XBLOCK=1, num_warps=4, num_stages=1": 0.12,
            },
        }
    ]


def test_a_failed_measurement_leaves_the_pick_to_inductor_and_is_recorded(monkeypatch):
    tuner = _tuner({512: [0.1], 2048: [0.2]})

    def broken(*args, **kwargs):
        raise RuntimeError("no GPU for the loop")

    inductor_pick = []
    monkeypatch.setattr(
        heuristics.CachingAutotuner,
        "benchmark_all_configs",
        lambda self, *a, **k: inductor_pick.append(self) or {"inductor": 1.0},
    )
    tuner.bench = broken
    with steady_autotuning() as record:
        assert tuner.benchmark_all_configs() == {"inductor": 1.0}
    assert inductor_pick == [tuner]
    assert record["errors"] == ["RuntimeError: no GPU for the loop"] and record["picks"] == []


def test_patches_are_restored_when_the_compile_fails():
    original_all = heuristics.CachingAutotuner.benchmark_all_configs
    with pytest.raises(RuntimeError, match="compile failed"), steady_autotuning():
        raise RuntimeError("compile failed")
    assert heuristics.CachingAutotuner.benchmark_all_configs is original_all


def test_cpu_benchmarks_go_to_inductors_own_benchmarker():
    seen = []
    original = types.SimpleNamespace(benchmark=lambda fn, a, k, device=None, **kw: seen.append(device) or 1.5)
    assert ProtocolBenchmarker(original).benchmark(lambda: None, device="cpu") == 1.5
    assert seen == ["cpu"]
    assert autotune_summary(None) == [] and autotune_summary({"picks": []}) == []


@pytest.mark.gpu
def test_gpu_reference_autotune_pick_is_recorded_in_the_verdict(reference_cache):
    # A strided column reduction at full size: Inductor generates a reduction with several configurations.
    root = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems" / "reduction"

    options = quick_options(reference_cache, device="cuda", small=False, timing_trials=30)
    seed = Candidate.from_source((root / "mean_reduction.seed.py").read_text())
    verdict = evaluate(load_problem(root / "mean_reduction.py"), seed, options)
    assert verdict.status is Status.OK, verdict.reasons
    assert "compile_reference_error" not in verdict.details and verdict.reference_compile
    tuned = verdict.details["compile_reference_autotune"]
    assert tuned, "the compiled mean has at least one kernel with several configurations"
    for kernel in tuned:
        medians = kernel["medians_ms"]
        assert len(medians) >= 2 and kernel["chosen"] in medians
        assert medians[kernel["chosen"]] == min(medians.values())
