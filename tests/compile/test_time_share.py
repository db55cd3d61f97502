"""``harvest.json``'s ``time_share``: each region's share of the Inductor-compiled model's kernel time."""

from __future__ import annotations

import json

import pytest

from ksmith_compile import time_share
from ksmith_compile.time_share import CodeLaunch, attribute, parse_output_code, shares

from .conftest import DATA, ksmith

NORM = ["to", "pow_1", "variance", "add", "rsqrt", "mul", "to_1", "norm"]
NORM_1 = ["to_2", "pow_2", "variance_1", "add_1", "rsqrt_1", "mul_1", "to_3", "norm_1"]
KERNEL = "triton_per_fused_add_mean_mul_pow_rsqrt_0"

# The call function of a GPU wrapper as Inductor writes it (the layout of inductor_gpu_geglu.txt): a note above each
# Triton launch; one kernel reused for two identical layers; library calls whose notes also name the producers of
# their input, which earlier launches computed.
GPU_CALL = f"""
{KERNEL} = async_compile.triton('{KERNEL}', '''
''', device_str='cuda')

class Runner:
    def call(self, args):
        with torch.cuda._DeviceGuard(0):
            buf0 = empty_strided_cuda((8, 64), (64, 1), torch.float16)
            # Topologically Sorted Source Nodes: [{", ".join(NORM)}], Original ATen: [aten.pow]
            stream0 = get_raw_stream(0)
            {KERNEL}.run(arg0_1, arg1_1, buf0, 8, 64, stream=stream0)
            buf1 = empty_strided_cuda((8, 64), (64, 1), torch.float16)
            # Topologically Sorted Source Nodes: [{", ".join(NORM)}, linear], Original ATen: [aten.mm]
            extern_kernels.mm(buf0, reinterpret_tensor(arg2_1, (64, 64), (1, 64), 0), out=buf1)
            # Topologically Sorted Source Nodes: [{", ".join(NORM_1)}], Original ATen: [aten.pow]
            {KERNEL}.run(buf1, arg3_1, buf0, 8, 64, stream=stream0)
            # Topologically Sorted Source Nodes: [norm_1, linear_1], Original ATen: [aten.mm]
            extern_kernels.mm(buf0, reinterpret_tensor(arg4_1, (64, 64), (1, 64), 0), out=buf1)
        return (buf1, )
"""

CPU_CALL = """
cpp_fused_silu_0 = async_compile.cpp_pybinding(['float*'], r'''...''')
cpp_fused_tail_1 = async_compile.cpp_pybinding(['float*'], r'''...''')

def call(self, args):
    cpp_fused_silu_0(buf0)
    # Topologically Sorted Source Nodes: [silu, mul, down], Original ATen: [aten.silu, aten.mm]
    buf2 = torch.ops.aten._weight_int8pack_mm.default(buf0, arg2_1)
    cpp_fused_tail_1(buf2)
"""


def test_a_gpu_wrappers_triton_launch_carries_the_nodes_its_kernel_computes():
    code = (DATA / "inductor_gpu_geglu.txt").read_text()
    assert parse_output_code(code) == [
        CodeLaunch("triton_poi_fused_gelu_mul_split_0", ["chunk", "gelu", "mul"])
    ]


def test_each_launch_takes_its_own_note_and_a_library_call_leaves_out_what_came_before():
    assert parse_output_code(GPU_CALL) == [
        CodeLaunch(KERNEL, NORM),
        CodeLaunch("aten::mm", ["linear"]),
        CodeLaunch(KERNEL, NORM_1),  # the same kernel, launched for the second layer
        CodeLaunch("aten::mm", ["linear_1"]),
    ]


def test_a_library_call_whose_nodes_an_earlier_kernel_named_keeps_its_own():
    """On a GPU the kernels that prepare an attention call's inputs name the attention node too; the call
    still counts for it (the last node of its note), not for nothing."""
    prep = "triton_poi_fused__scaled_dot_product_efficient_attention_0"
    code = f"""
{prep} = async_compile.triton('{prep}', '''
''', device_str='cuda')

def call(self, args):
    # Topologically Sorted Source Nodes: [q_embed, attn_output], Original ATen: [aten.add]
    {prep}.run(arg0_1, buf0, stream=stream0)
    # Topologically Sorted Source Nodes: [q_embed, attn_output], Original ATen: [aten._efficient_attention]
    buf1 = torch.ops.aten._scaled_dot_product_efficient_attention.default(buf0, buf0, buf0, None, False)
"""
    assert parse_output_code(code) == [
        CodeLaunch(prep, ["q_embed", "attn_output"]),
        CodeLaunch("aten::_scaled_dot_product_efficient_attention", ["attn_output"]),
    ]


def test_a_cpu_kernel_with_no_note_shares_the_next_library_calls():
    assert parse_output_code(CPU_CALL) == [
        CodeLaunch("cpp_fused_silu_0", ["silu", "mul", "down"]),
        CodeLaunch("aten::_weight_int8pack_mm", ["silu", "mul", "down"]),
        CodeLaunch("cpp_fused_tail_1", None),  # no library call after it: attributed to nothing
    ]


def test_profiled_launches_are_matched_to_the_code_in_order_and_averaged_over_forwards():
    graph = parse_output_code(GPU_CALL)
    forward = [
        ("aten::empty_strided", 0.0),  # an allocation: no kernel time, not a launch
        (KERNEL, 0.002),
        ("aten::mm", 0.010),
        (KERNEL, 0.003),  # the same kernel again: the second layer's norm
        ("aten::copy_", 0.004),  # GPU time of an op the code does not launch: counted, attributed to nothing
        ("aten::mm", 0.008),
    ]
    slower = [(name, 3 * ms) for name, ms in forward]
    launches = attribute([graph], [forward, slower], forwards=2, device="cuda")
    assert [(launch.name, round(launch.ms, 6)) for launch in launches] == [
        (KERNEL, 0.004), ("aten::mm", 0.02), (KERNEL, 0.006), ("aten::copy_", 0.008), ("aten::mm", 0.016),
    ]  # fmt: skip
    occurrences = {
        "layer0_norm": [(0, ["to", "norm"])],
        "layer1_norm": [(0, ["to_3", "norm_1"])],
        "projections": [(0, ["linear"]), (0, ["linear_1"])],
        "elsewhere": [(1, ["norm"])],  # another graph's node of the same name
    }
    share, table, total = shares(launches, occurrences)
    assert total == pytest.approx(0.054)
    assert share == pytest.approx(
        {
            "layer0_norm": 0.004 / 0.054,
            "layer1_norm": 0.006 / 0.054,
            "projections": 0.036 / 0.054,
            "elsewhere": 0,
        }
    )
    assert [row["problems"] for row in table] == [
        ["layer0_norm"], ["projections"], ["layer1_norm"], [], ["projections"],
    ]  # fmt: skip
    with pytest.raises(ValueError, match="ran more or less than once a forward"):
        attribute([graph], [forward], forwards=2, device="cuda")


@pytest.mark.slow
def test_harvest_measures_each_regions_share_of_the_compiled_models_time(tmp_path):
    """On CPU (``--time-share``): the tiny decoder compiled by Inductor and profiled. Its seven matmuls are
    library calls, each counting for matmul problems; the o_proj GEMM's call counts for the o_proj + residual
    problem alone and is its share; attention counts for the attention block's problem and no matmul's."""
    proc = ksmith(
        "harvest", DATA / "tiny_llama.py", "-o", tmp_path, "--device", "cpu", "--time-share", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    profile = summary["time_share"]
    assert "error" not in profile, profile
    assert profile["device"] == "cpu" and profile["launches_ms"] > 0
    assert 0 <= profile["unattributed_ms"] < profile["launches_ms"]
    matmul_problems = {p["problem"] for p in summary["problems"] if p["kind"] in ("matmul", "matmuls")}
    mms = [row for row in profile["launches"] if row["launch"] == "aten::mm"]
    assert len(mms) == 7  # q, k, v, o, gate, up, down
    assert all(set(row["problems"]) & matmul_problems for row in mms)
    (o_proj,) = [p for p in summary["problems"] if p["ops"] == ["linear", "add"]]
    (call,) = [row for row in mms if row["problems"] == [o_proj["problem"]]]
    assert o_proj["time_share"] == pytest.approx(call["ms"] / profile["launches_ms"])
    (attention,) = [
        row for row in profile["launches"] if row["launch"].startswith("aten::_scaled_dot_product")
    ]
    assert not set(attention["problems"]) & matmul_problems
    (block,) = [p["problem"] for p in summary["problems"] if p["kind"] == "attention"]
    assert block in attention["problems"]
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
    """On a GPU the shares are measured by default from the kernels' GPU time, each Triton launch by its own note:
    the norm's kernel counts for the norm's problems in both layers (the layer-1-only problem too: a kernel reused
    for both layers is attributed per launch), and the GEMMs count for the projections', not for the norm-only
    problem."""
    from ksmith_compile.harvest import harvest

    summary = harvest(DATA / "tiny_llama_decode.py", tmp_path, device="cuda")
    profile = summary["time_share"]
    assert "error" not in profile, profile
    problems = {tuple(p["ops"]): p for p in summary["problems"]}
    norm = problems[("to", "pow", "mean", "add", "rsqrt", "mul", "to", "mul")]
    layer1 = problems[
        ("add", "to", "pow", "mean", "add", "rsqrt", "mul", "to", "mul", "linear", "linear", "linear")
    ]
    assert layer1["occurrences"] == ["0:linear_9"]
    norms = [
        row
        for row in profile["launches"]
        if row["launch"].startswith("triton_") and norm["problem"] in row["problems"]
    ]
    assert norms and any(layer1["problem"] in row["problems"] for row in norms)
    gemms = [row for row in profile["launches"] if row["launch"] in ("aten::mm", "aten::addmm")]
    assert gemms and not any(norm["problem"] in row["problems"] for row in gemms)
    assert all(0 <= p["time_share"] <= 1 for p in summary["problems"])
