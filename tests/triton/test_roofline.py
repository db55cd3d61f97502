"""The roofline of a problem that does not say its FLOPs (every KernelBench problem): the reference process
counts them around its own forward, adds the model's weights to the bytes moved and names the compute dtype,
which picks the FLOP/s ceiling. A KernelBench GEMM (``nn.Linear(32768, 32768)`` on 128 rows, fp32) was called
memory-bound at 0.0008 of its roofline when FLOPs were 0 and its 4 GiB weight was not counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ksmith_core.loading import load_problem
from ksmith_triton import reference_side
from ksmith_triton.child_common import load_problem_module, make_inputs, make_model
from ksmith_triton.reference_side import ReferenceOutputs
from ksmith_triton.roofline import ceilings_within_peaks, flops_ceiling, place_on_roofline, roofline_work

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"

LINEAR = """
import torch
import torch.nn as nn

M, K, N = 16, 96, 40
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, dtype=DTYPE)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
"""

ELEMENTWISE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0 + 1.0)


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
"""

OWN_FLOPS = (
    LINEAR
    + """

def ksmith_flops(x):
    return 12345.0
"""
)

# One weight matrix read three ways: a second Parameter on its storage and a buffer viewing its first rows.
SHARED_STORAGE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 32, bias=False)
        self.again = nn.Parameter(self.a.weight.data)
        self.register_buffer("rows", self.a.weight.data[:8])
        self.register_buffer("scale", torch.ones(32))

    def forward(self, x):
        return self.a(x) * self.scale


def get_inputs():
    return [torch.randn(4, 32)]


def get_init_inputs():
    return []
"""


def _meta(source: str) -> dict:
    """The meta a comparison's reference outputs report, on the CPU."""
    problem = load_problem_module(source, None)
    model = make_model(problem.Model, problem, 0, "cpu")
    return ReferenceOutputs(problem, model, [1, 2], "cpu").meta


# -- what the reference process reports -----------------------------------------------------------------------


def test_flops_of_a_problem_without_ksmith_flops_are_counted_from_its_forward():
    meta = _meta(LINEAR)
    assert meta["flops_source"] == "counted"
    assert meta["flops"] == pytest.approx(2 * 16 * 96 * 40, rel=0.01)  # 2 M N K; the bias add is not priced


def test_elementwise_work_counts_no_flops():
    meta = _meta(ELEMENTWISE)
    assert meta["flops_source"] == "counted" and meta["flops"] == 0.0


def test_the_problems_own_ksmith_flops_wins_over_the_count():
    meta = _meta(OWN_FLOPS)
    assert meta["flops_source"] == "problem" and meta["flops"] == 12345.0


# The suite's problems that state their FLOPs, counted as if they did not. Attention is priced by ksmith's own
# formula (torch's counter prices no CPU attention kernel, and a causal one as full): the suite states causal
# attention as exactly half, the diagonal's (seq + 1) / (2 seq) at seq = 100 is 1 % more.
@pytest.mark.parametrize(
    "name",
    [
        "pooling/conv2d_bias_relu",
        "matmul/matmul",
        "matmul/bmm",
        "matmul/matmul_bias_relu",
        "attention/attention",
        "attention/causal_attention",
    ],
)
def test_counted_flops_agree_with_the_suites_own_formulas(name):
    problem = load_problem(PROBLEMS / f"{name}.py")
    module = load_problem_module(problem.source, problem.small_sizes)
    inputs = make_inputs(module, 0, "cpu")
    stated = module.ksmith_flops(*inputs)
    del module.ksmith_flops
    model = make_model(module.Model, module, 0, "cpu")
    _, flops, _ = reference_side.forward_with_flops(module, model, inputs, lambda: inputs)
    assert flops["flops_source"] == "counted"
    assert flops["flops"] == pytest.approx(stated, rel=0.011)


# After query, key and value: flash (dropout_p, is_causal), efficient and cudnn (attn_bias, compute_log_sumexp,
# dropout_p, is_causal), the CPU flash kernel (dropout_p, is_causal).
CAUSAL_AFTER_QKV = {
    "_scaled_dot_product_flash_attention": 1,
    "_scaled_dot_product_efficient_attention": 3,
    "_scaled_dot_product_cudnn_attention": 3,
    "_scaled_dot_product_flash_attention_for_cpu": 1,
}


@pytest.mark.parametrize("op", reference_side.ATTENTION_OPS)
def test_attention_formula_prices_the_causal_mask_of_each_kernel(op):
    """Every fused attention kernel's formula finds ``is_causal`` where that kernel takes it."""
    formula = reference_side.attention_flop_formulas()[getattr(torch.ops.aten, op)]
    q, k, v = torch.empty(2, 3, 8, 16), torch.empty(2, 3, 5, 16), torch.empty(2, 3, 5, 32)
    full = 2 * 6 * 8 * 5 * 16 + 2 * 6 * 8 * 5 * 32
    flags = [None] * CAUSAL_AFTER_QKV[op]
    assert formula(q, k, v, *flags, False) == full
    # rows 0..4 see 1..5 keys, rows 5..7 all five: 15 + 15 = 30 of 40 score entries
    assert formula(q, k, v, *flags, True) == full * 30 // 40
    assert formula(q, k, v, is_causal=True) == full * 30 // 40


def test_flops_are_counted_on_the_forward_that_gives_the_reference_output_and_once_per_process(monkeypatch):
    problem = load_problem_module(LINEAR, None)
    model = make_model(problem.Model, problem, 0, "cpu")
    forwards, counted = [], []
    monkeypatch.setattr(model, "forward", lambda x: forwards.append(x) or model.fc(x))
    real = reference_side.forward_counting_flops
    monkeypatch.setattr(
        reference_side, "forward_counting_flops", lambda *args: counted.append(1) or real(*args)
    )
    first = ReferenceOutputs(problem, model, [1, 2], "cpu")
    assert len(forwards) == 1 and len(counted) == 1  # one forward for the first output and its count
    again = ReferenceOutputs(problem, model, [3], "cpu")  # the next comparison of the same problem
    assert len(forwards) == 2 and len(counted) == 1
    assert again.meta["flops"] == first.meta["flops"] > 0


def test_a_counter_that_fails_leaves_the_reference_right_and_the_flops_at_zero(monkeypatch):
    """Even for a forward that changes its input in place before the counter fails: the plain run that gives
    the reference output starts from fresh inputs."""

    def boom(*args, **kwargs):
        raise RuntimeError("no formula for this")

    class FailingCounter(FlopCounterMode):  # fails in the middle of the forward, at the matmul
        def __init__(self, custom_mapping=None, **kwargs):
            super().__init__(custom_mapping={**(custom_mapping or {}), torch.ops.aten.addmm: boom}, **kwargs)

    monkeypatch.setattr("torch.utils.flop_counter.FlopCounterMode", FailingCounter)
    problem = load_problem_module(LINEAR, None)
    model = make_model(problem.Model, problem, 0, "cpu")
    monkeypatch.setattr(model, "forward", lambda x: model.fc(x.mul_(2)))
    out, flops, used = reference_side.forward_with_flops(
        problem, model, make_inputs(problem, 5, "cpu"), lambda: make_inputs(problem, 5, "cpu")
    )
    assert flops["flops"] == 0.0 and flops["flops_source"] == "uncounted"
    assert "RuntimeError: no formula for this" in flops["flops_error"]
    with torch.no_grad():
        assert torch.equal(out, model(*make_inputs(problem, 5, "cpu")))


def test_param_bytes_are_the_weight_and_bias():
    assert _meta(LINEAR)["param_bytes"] == (96 * 40 + 40) * 4


def test_param_bytes_count_shared_storage_once():
    assert _meta(SHARED_STORAGE)["param_bytes"] == (32 * 32 + 32) * 4


def test_the_memory_estimate_keeps_to_inputs_and_outputs():
    meta = _meta(LINEAR)
    assert (meta["input_bytes"], meta["output_bytes"]) == (16 * 96 * 4, 16 * 40 * 4)


@pytest.mark.parametrize(
    "dtype, expected",
    [("torch.float32", "float32"), ("torch.bfloat16", "bfloat16"), ("torch.float16", "float16")],
)
def test_compute_dtype_is_the_largest_floating_point_tensors(dtype, expected):
    assert _meta(LINEAR.replace("torch.float32", dtype))["compute_dtype"] == expected


def test_compute_dtype_follows_a_large_fp32_weight_past_small_bf16_inputs():
    problem = load_problem_module(LINEAR, None)
    model = make_model(problem.Model, problem, 0, "cpu")
    assert reference_side.compute_dtype([torch.randn(2, 96, dtype=torch.bfloat16)], model) == "float32"
    assert reference_side.compute_dtype([torch.arange(10)], None) is None  # no floating-point tensor at all


# -- the roofline from it -------------------------------------------------------------------------------------

# Made-up ceilings of the right kind: copy bandwidth, bf16 matmul, fp32 matmul (the TF32 rate).
H100 = {"bandwidth_bytes_s": 3.0e12, "flops_s": 750e12, "flops_s_fp32": 130e12}


@pytest.mark.parametrize(
    "dtype, ceiling",
    [
        ("float32", 130e12),
        ("float64", 130e12),
        ("bfloat16", 750e12),
        ("float16", 750e12),  # fp16 runs at bf16's rate
        (None, 750e12),  # nothing floating-point: the bf16 ceiling, as before
    ],
)
def test_the_flops_ceiling_follows_the_compute_dtype(dtype, ceiling):
    assert flops_ceiling(H100, dtype) == ceiling


def test_ceilings_cached_without_fp32_fall_back_to_bf16():
    assert flops_ceiling({"bandwidth_bytes_s": 3e12, "flops_s": 750e12}, "float32") == 750e12


def test_the_kernelbench_gemm_is_compute_bound_near_where_cublas_runs():
    m, k, n = 128, 32768, 32768
    meta = {
        "input_bytes": m * k * 4,
        "output_bytes": m * n * 4,
        "param_bytes": (k * n + n) * 4,  # the 4 GiB weight
        "flops": 2.0 * m * n * k,
        "flops_source": "counted",
        "compute_dtype": "float32",
    }
    # Compute floor 2.75e11 / 130e12 = 2.1 ms; memory floor 4.3e9 B / 3e12 = 1.4 ms.
    fraction, bound = place_on_roofline(5.5, meta, H100)  # about an SGEMM's time for it
    assert bound == "compute"
    assert fraction == pytest.approx(2.0 * m * n * k / 130e12 * 1e3 / 5.5)
    assert 0.3 < fraction < 0.5
    work = roofline_work(meta, H100)
    assert work["bytes_moved"] > 4 * 2**30 and work["flops_ceiling"] == 130e12
    # Without the weight and the FLOPs: "memory", at a fraction of a percent of the roofline.
    old_fraction, old_bound = place_on_roofline(5.5, {**meta, "param_bytes": 0, "flops": 0.0}, H100)
    assert old_bound == "memory" and old_fraction < 0.01


def test_a_bf16_gemm_is_judged_against_the_bf16_ceiling():
    meta = {"input_bytes": 2**20, "output_bytes": 2**20, "param_bytes": 2**21, "flops": 1e12}
    fp32, _ = place_on_roofline(10.0, {**meta, "compute_dtype": "float32"}, H100)
    bf16, bound = place_on_roofline(10.0, {**meta, "compute_dtype": "bfloat16"}, H100)
    assert bound == "compute" and bf16 == pytest.approx(1e12 / 750e12 * 1e3 / 10.0)
    assert fp32 == pytest.approx(bf16 * 750 / 130)


def test_the_fp32_ceiling_is_bounded_by_the_peak_but_never_made_up_from_it():
    peaks = {"bandwidth_bytes_s": 3.35e12, "flops_s": 989e12}
    assert ceilings_within_peaks({**H100, "flops_s_fp32": 2e15}, peaks)["flops_s_fp32"] == 989e12
    assert ceilings_within_peaks(H100, peaks)["flops_s_fp32"] == 130e12
    assert "flops_s_fp32" not in ceilings_within_peaks({}, peaks)


# -- GPU: run on a machine with an NVIDIA GPU -----------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_ceilings_measure_an_fp32_matmul_below_bf16():
    torch.backends.cuda.matmul.allow_tf32 = False
    ceilings = reference_side.measure_ceilings(None, "cuda", {})
    assert torch.backends.cuda.matmul.allow_tf32 is False  # put back after the TF32 measurement
    assert ceilings["bandwidth_bytes_s"] > 0
    assert 0 < ceilings["flops_s_fp32"] < ceilings["flops_s"]


def test_the_tf32_switch_is_set_and_put_back_whichever_api_the_problem_used():
    """A problem that set TF32 through the new API (after the process turned it off through the legacy one)
    made reading the legacy ``allow_tf32`` raise; the ceiling's switch reads and restores the new one. (In a
    process of its own: the mixed state it makes would stay with this one.)"""
    script = """
import pytest, torch
from ksmith_triton.reference_side import matmul_tf32
matmul = torch.backends.cuda.matmul
matmul.allow_tf32 = False  # fp32_means_fp32, before the problem module runs
matmul.fp32_precision = "tf32"  # the problem's own choice
with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
    matmul.allow_tf32  # what the ceiling measurement used to read
with matmul_tf32(False):  # inside, both switches agree (cuBLAS may read either)
    assert matmul.fp32_precision == "ieee" and matmul.allow_tf32 is False
assert matmul.fp32_precision == "tf32" and matmul.allow_tf32 is True
torch.set_float32_matmul_precision("highest")
with matmul_tf32(True):
    assert matmul.fp32_precision == "tf32" and matmul.allow_tf32 is True
assert matmul.fp32_precision == "ieee"
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
