"""The mutate proposer tunes within the platform's limits: on MetaX never num_warps 32 and its pipeline /
scenario options; on NVIDIA never those options (upstream Triton rejects them)."""

from __future__ import annotations

from pathlib import Path

import pytest

import ksmith_problems
from ksmith_core.platform import PlatformSignals, platform_facts
from ksmith_mutate.edits import Limits, platform_limits, possible_edits

SUITE = Path(ksmith_problems.__file__).parent / "problems"
RELU = (SUITE / "elementwise" / "relu.seed.py").read_text()
MATMUL = (SUITE / "matmul" / "matmul.seed.py").read_text()


def limits(backend: str) -> Limits:
    return Limits.from_platform(platform_facts(signals=PlatformSignals(triton_backend=backend)))


def warps_proposed(source: str, lim: Limits) -> set[int]:
    return {e.detail["new"] for e in possible_edits(source, ("num_warps",), lim)} | {
        e.detail["config"][4] for e in possible_edits(source, ("gemm_config",), lim)
    }


def test_metax_never_gets_num_warps_32_and_gets_its_options():
    maca = limits("maca")
    at_16 = RELU.replace("num_warps=4", "num_warps=16")
    assert 32 not in warps_proposed(at_16, maca) and 8 in warps_proposed(at_16, maca)
    assert 32 not in warps_proposed(MATMUL, maca)
    options = [e.description.split(" on ")[0] for e in possible_edits(RELU, ("launch_option",), maca)]
    assert "pipeline none -> cpasync" in options and "scenario none -> storeCoalesce" in options
    edit = next(e for e in possible_edits(RELU, ("launch_option",), maca) if "cpasync" in e.description)
    assert 'pipeline="cpasync"' in edit.source
    assert not possible_edits(MATMUL, ("tma_loads",), maca)  # no TMA on MetaX


def test_a_kernel_past_the_metax_limit_is_brought_back():
    at_32 = RELU.replace("num_warps=4", "num_warps=32")
    (edit,) = possible_edits(at_32, ("num_warps",), limits("maca"))
    assert edit.detail["new"] == 16 and edit.safer


def test_nvidia_never_gets_metax_options():
    nvidia = limits("cuda")
    assert not possible_edits(RELU, ("launch_option",), nvidia)
    assert 32 in warps_proposed(RELU.replace("num_warps=4", "num_warps=16"), nvidia)
    assert all(
        "pipeline" not in e.source and "scenario" not in e.source for e in possible_edits(RELU, None, nvidia)
    )


def test_an_existing_option_is_changed_or_removed():
    tuned = RELU.replace("num_warps=4", 'num_warps=4, pipeline="basic"')
    described = {
        e.description.split(" on ")[0] for e in possible_edits(tuned, ("launch_option",), limits("maca"))
    }
    assert {"pipeline basic -> cpasync", "pipeline basic -> none"} <= described


@pytest.mark.parametrize("forced, expected", [("metax", "metax"), ("maca", "metax"), ("nvidia", "nvidia")])
def test_the_proposer_reads_the_detected_platform(monkeypatch, forced, expected):
    monkeypatch.setenv("KSMITH_PLATFORM", forced)
    assert platform_limits().platform == expected
    kinds = {e.kind for e in possible_edits(RELU)}
    assert ("launch_option" in kinds) == (expected == "metax")


def test_no_platform_detected_means_nvidia_limits(monkeypatch):
    monkeypatch.delenv("KSMITH_PLATFORM", raising=False)
    assert platform_limits().num_warps[-1] == 32
