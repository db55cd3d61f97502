"""``harvest.json``'s ``time_share``: each region's share of the Inductor-compiled model's kernel time."""

from __future__ import annotations

import json

import pytest

from ksmith_compile import time_share
from ksmith_compile.time_share import GraphLaunches, attribute, parse_output_code, shares

from .conftest import DATA, ksmith


def test_a_gpu_wrappers_triton_kernel_is_named_with_the_nodes_it_computes():
    code = (DATA / "inductor_gpu_geglu.txt").read_text()
    launches = parse_output_code(code)
    assert launches.kernels == {"triton_poi_fused_gelu_mul_split_0": ["chunk", "gelu", "mul"]}
    assert launches.externs == []


def test_library_calls_take_the_nodes_since_the_last_note_less_those_of_noted_kernels():
    code = """
# Topologically Sorted Source Nodes: [add, norm], Original ATen: [aten.add]
triton_red_fused_add_0 = async_compile.triton('triton_red_fused_add_0', '''...''')
cpp_fused_silu_1 = async_compile.cpp_pybinding(['float*'], r'''...''')

def call(self, args):
    # Topologically Sorted Source Nodes: [add, norm, linear], Original ATen: [aten.add, aten.mm]
    triton_red_fused_add_0.run(buf0, stream=stream0)
    extern_kernels.mm(buf0, arg1_1, out=buf1)
    cpp_fused_silu_1(buf1)
    # Topologically Sorted Source Nodes: [silu, linear_1], Original ATen: [aten.silu, aten.mm]
    buf2 = torch.ops.aten._weight_int8pack_mm.default(buf1, arg2_1)
    cpp_fused_silu_1(buf2)
"""
    launches = parse_output_code(code)
    assert launches.externs == [("mm", ["linear"]), ("_weight_int8pack_mm", ["silu", "linear_1"])]
    # A C++ kernel has no note of its own: it shares the one of the library call after it.
    assert launches.kernels == {
        "triton_red_fused_add_0": ["add", "norm"],
        "cpp_fused_silu_1": ["silu", "linear_1"],
    }
    assert launches.defined == {"triton_red_fused_add_0", "cpp_fused_silu_1"}


def test_launch_times_are_averaged_over_forwards_and_library_calls_matched_in_order():
    graph = GraphLaunches(
        kernels={"triton_k": ["norm"]},
        externs=[("mm", ["q"]), ("mm", ["k"])],
        defined={"triton_k", "triton_unnoted"},
    )
    forward = [
        ("aten::empty_strided", 0.0),  # an allocation: no kernel time, not a launch
        ("triton_k", 0.002),
        ("aten::mm", 0.010),
        ("aten::mm", 0.008),
        ("triton_unnoted", 0.001),  # a kernel with no nodes: counted, attributed to no region
        ("aten::copy_", 0.003),  # GPU time of an op the code does not call: counted, unattributed
    ]
    slower = [(name, 3 * ms) for name, ms in forward]
    launches = attribute([graph], [forward, slower], forwards=2, device="cuda")
    by_name = {(launch.name, tuple(sorted(launch.nodes or []))): round(launch.ms, 6) for launch in launches}
    assert by_name == {
        ("triton_k", ("norm",)): 0.004,
        ("aten::mm", ("q",)): 0.02,
        ("aten::mm", ("k",)): 0.016,
        ("triton_unnoted", ()): 0.002,
        ("aten::copy_", ()): 0.006,
    }
    share, table, total = shares(launches, {"norm_and_q": [(0, ["norm", "q"])], "k": [(0, ["k"])], "v": []})
    assert total == pytest.approx(0.048)
    assert share == pytest.approx({"norm_and_q": 0.024 / 0.048, "k": 0.016 / 0.048, "v": 0.0})
    assert sum(row["ms"] for row in table if not row["problems"]) == pytest.approx(0.008)
    with pytest.raises(ValueError, match="ran more or less than once a forward"):
        attribute([graph], [forward], forwards=2, device="cuda")


@pytest.mark.slow
def test_harvest_measures_each_regions_share_of_the_compiled_models_time(tmp_path):
    """On CPU (``--time-share``): the tiny decoder compiled by Inductor and profiled; every share is the time of
    the launches the profile attributes to the problem, over all launches."""
    proc = ksmith(
        "harvest", DATA / "tiny_llama.py", "-o", tmp_path, "--device", "cpu", "--time-share", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    profile = summary["time_share"]
    assert "error" not in profile, profile
    assert profile["device"] == "cpu" and profile["launches_ms"] > 0
    assert 0 <= profile["unattributed_ms"] < profile["launches_ms"]
    names = {p["problem"]: p for p in summary["problems"]}
    for name, problem in names.items():
        mine = sum(row["ms"] for row in profile["launches"] if name in row["problems"])
        assert problem["time_share"] == pytest.approx(mine / profile["launches_ms"])
    # The model's matmuls run in the library; the o_proj GEMM + residual is one of them.
    (o_proj,) = [p for p in summary["problems"] if p["ops"] == ["linear", "add"]]
    assert o_proj["time_share"] > 0
    mms = [row for row in profile["launches"] if row["launch"] == "aten::mm"]
    assert len(mms) == 7 and all(row["problems"] for row in mms)  # q, k, v, o, gate, up, down
    assert json.loads((tmp_path / "harvest.json").read_text()) == summary


@pytest.mark.slow
def test_a_measurement_that_fails_leaves_the_problems_written(tmp_path, monkeypatch):
    from ksmith_compile.harvest import harvest

    def broken(*args, **kwargs):
        raise RuntimeError("no profiler here")

    monkeypatch.setattr(time_share, "measure", broken)
    summary = harvest(DATA / "tiny_llama.py", tmp_path, time_share=True)
    assert summary["time_share"] == {"device": "cpu", "error": "RuntimeError: no profiler here"}
    assert summary["problems"] and all(p["time_share"] is None for p in summary["problems"])
    assert all((tmp_path / p["file"]).is_file() for p in summary["problems"])


@pytest.mark.gpu
def test_on_the_gpu_triton_kernels_and_library_calls_are_attributed(tmp_path):
    """On a GPU the shares are measured by default, from the kernels' GPU time: each of Inductor's Triton kernels
    carries its own note, so the norm's kernel counts for the norm's regions, the GEMMs for the projections'."""
    from ksmith_compile.harvest import harvest

    summary = harvest(DATA / "tiny_llama_decode.py", tmp_path, device="cuda")
    profile = summary["time_share"]
    assert "error" not in profile, profile
    triton = [row for row in profile["launches"] if row["launch"].startswith("triton_")]
    assert triton and any(row["problems"] for row in triton)
    norm = next(p for p in summary["problems"] if p["kind"] == "fusible" and "rsqrt" in p["ops"])
    assert norm["time_share"] > 0
    assert all(0 <= p["time_share"] <= 1 for p in summary["problems"])
