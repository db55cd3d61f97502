"""Seeds from Inductor: real Inductor code generation, real Triton (interpreter on CPU), the real evaluator.

On CPU the kernels come from Inductor's Triton CPU backend (generated, not run by Inductor) and the seed runs
under ``TRITON_INTERPRET=1``; the ``gpu`` tests generate on CUDA, where Inductor runs and autotunes first.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import triton

from ksmith_core.engine import evaluate
from ksmith_core.loading import check_candidate_source, load_problem
from ksmith_core.model import Candidate, EvalOptions, Problem, Status
from ksmith_inductor.seeding import (
    INTERPRETER_HELPERS,
    INTERPRETER_LIBDEVICE,
    InductorSeedError,
    seed_from_inductor,
)

SUITE = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"
# Tests that launch a seed's kernels on CPU tensors in this process need the Triton interpreter.
interpreted = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="runs Triton kernels on CPU tensors (TRITON_INTERPRET=1)",
)
LAUNCH_OPTIONS = re.compile(r"\[grid\]\(.*XBLOCK=\d+(?:, R\d?_?BLOCK=\d+)?, num_warps=\d+, num_stages=\d+\)")


def suite_problem(relative: str) -> Problem:
    return load_problem(SUITE / relative)


def import_seed(source: str, directory: Path, name: str) -> ModuleType:
    """Import a seed from a file (the Triton interpreter reads kernel source from disk)."""
    path = directory / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def problem_module(problem: Problem, small: bool = True) -> ModuleType:
    module = ModuleType(f"problem_{problem.name}")
    exec(compile(problem.source, str(problem.path), "exec"), module.__dict__)
    if small:
        for name, value in problem.small_sizes.items():
            setattr(module, name, value)
    return module


def models_and_inputs(
    problem: Problem, seed_module: ModuleType
) -> tuple[torch.nn.Module, torch.nn.Module, list]:
    """Model and ModelNew built as the evaluator builds them: the same torch seed before each."""
    reference = problem_module(problem)
    init_inputs = reference.get_init_inputs()
    torch.manual_seed(7)
    model = reference.Model(*init_inputs)
    torch.manual_seed(7)
    model_new = seed_module.ModelNew(*init_inputs)
    torch.manual_seed(11)
    return model, model_new, reference.get_inputs()


@pytest.fixture(scope="module")
def softmax_seed() -> str:
    return seed_from_inductor(suite_problem("softmax/softmax.py"), "cpu", small=True)


@pytest.fixture(scope="module")
def layernorm_seed() -> str:
    return seed_from_inductor(suite_problem("normalization/layernorm.py"), "cpu", small=True)


def test_seed_keeps_inductor_kernels_and_writes_launch_configs_as_literals(softmax_seed: str) -> None:
    check_candidate_source(softmax_seed)
    assert re.search(r"^@triton\.jit\ndef triton_per_fused__softmax_0\(", softmax_seed, re.M)
    assert "triton_heuristics" not in softmax_seed  # Inductor's autotuning decorator is gone
    assert "async_compile" not in softmax_seed and "empty_strided_cpu" not in softmax_seed
    assert LAUNCH_OPTIONS.search(softmax_seed), softmax_seed
    assert 'grid = lambda meta: (triton.cdiv(8, meta["XBLOCK"]),)' in softmax_seed
    assert "device=x.device" in softmax_seed and "cuda" not in softmax_seed
    assert "def forward(self, x):" in softmax_seed


def test_softmax_seed_passes_the_evaluator(softmax_seed: str) -> None:
    problem = suite_problem("softmax/softmax.py")
    verdict = evaluate(
        problem, Candidate.from_source(softmax_seed), EvalOptions(device="cpu", correctness_trials=3)
    )
    assert verdict.status is Status.OK, verdict.reasons


def test_pointwise_seed_passes_the_evaluator() -> None:
    problem = suite_problem("elementwise/gelu_tanh.py")
    source = seed_from_inductor(problem, "cpu", small=True)
    assert "def triton_poi_fused_gelu_0(" in source
    assert 'triton.cdiv(16000, meta["XBLOCK"])' in source
    verdict = evaluate(
        problem, Candidate.from_source(source), EvalOptions(device="cpu", correctness_trials=3)
    )
    assert verdict.status is Status.OK, verdict.reasons


@interpreted
def test_seed_builds_parameters_like_model_and_stays_correct_when_tuned(
    layernorm_seed: str, tmp_path: Path
) -> None:
    problem = suite_problem("normalization/layernorm.py")
    assert "def __init__(self, hidden, eps):" in layernorm_seed
    assert "self.weight, self.bias" in layernorm_seed  # parameters reach the kernel from ModelNew itself
    # The tunables are literals a proposer can change: another XBLOCK / num_warps must still be correct.
    tuned = re.sub(r"XBLOCK=\d+, num_warps=\d+", "XBLOCK=4, num_warps=2", layernorm_seed)
    assert tuned != layernorm_seed
    for name, source in (("seed_layernorm", layernorm_seed), ("seed_layernorm_tuned", tuned)):
        seed_module = import_seed(source, tmp_path, name)
        model, model_new, inputs = models_and_inputs(problem, seed_module)
        assert [n for n, _ in model_new.named_parameters()] == ["weight", "bias"]
        torch.testing.assert_close(model_new.weight, model.weight)
        with torch.no_grad():
            torch.testing.assert_close(model_new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)


def test_seed_refuses_inputs_of_another_shape(softmax_seed: str, tmp_path: Path) -> None:
    seed_module = import_seed(softmax_seed, tmp_path, "seed_softmax_shape")
    with pytest.raises(ValueError, match=r"generated for size \(8, 1000\)"):
        seed_module.ModelNew()(torch.randn(4, 1000))


@interpreted
def test_tuple_outputs_and_several_kernels(tmp_path: Path) -> None:
    path = tmp_path / "two_outputs.py"
    path.write_text(
        '"""Row sums and a scaled ReLU of the same input."""\n'
        "import torch\nimport torch.nn as nn\n\nrows = 64\ncols = 100\n\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n        super(Model, self).__init__()\n\n"
        "    def forward(self, x, y):\n"
        "        return torch.relu(x) * 2.0 + y, (x * y).sum(dim=0)\n\n\n"
        "def get_inputs():\n    return [torch.randn(rows, cols), torch.randn(rows, cols)]\n\n\n"
        "def get_init_inputs():\n    return []\n",
        encoding="utf-8",
    )
    problem = load_problem(path)
    source = seed_from_inductor(problem, "cpu", small=False)
    assert "super(ModelNew, self).__init__()" in source
    assert re.search(r"return \(\w+, \w+\)", source)
    seed_module = import_seed(source, tmp_path, "seed_two_outputs")
    x, y = torch.randn(64, 100), torch.randn(64, 100)
    first, second = seed_module.ModelNew()(x, y)
    torch.testing.assert_close(first, torch.relu(x) * 2.0 + y)
    torch.testing.assert_close(second, (x * y).sum(dim=0), atol=1e-4, rtol=1e-4)


@interpreted
def test_submodule_parameters_and_buffers_reach_the_kernels(tmp_path: Path) -> None:
    path = tmp_path / "stacked_norms.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self, n):\n"
        "        super().__init__()\n"
        "        self.blocks = nn.ModuleList([nn.LayerNorm(n), nn.LayerNorm(n)])\n"
        '        self.register_buffer("shift", torch.randn(n))\n\n'
        "    def forward(self, x):\n"
        "        return self.blocks[1](torch.relu(self.blocks[0](x)) + self.shift)\n\n\n"
        "def get_inputs():\n    return [torch.randn(8, 64)]\n\n\n"
        "def get_init_inputs():\n    return [64]\n",
        encoding="utf-8",
    )
    problem = load_problem(path)
    source = seed_from_inductor(problem, "cpu", small=False)
    assert "blocks_1_bias = self.get_parameter('blocks.1.bias')" in source
    assert "self.shift" in source
    seed_module = import_seed(source, tmp_path, "seed_stacked_norms")
    model, model_new, inputs = models_and_inputs(problem, seed_module)
    with torch.no_grad():
        torch.testing.assert_close(model_new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)


# A KernelBench-style level-2 problem in fp32: a Linear (addmm), a scale and a tanh, then a batched matmul
# with beta and alpha (baddbmm); fp32 must pass the fp32 tolerance, so no TF32 may creep in.
FP32_GEMM_PROBLEM = """
import torch
import triton
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x, bias, a, b):
        y = torch.tanh(self.linear(x) * self.scale)
        return y, torch.baddbmm(bias, a, b, beta=2.0, alpha=0.5)


batch_size, in_features, out_features, scale = 48, 96, 80, 0.7


def get_inputs():
    return [
        torch.randn(batch_size, in_features),
        torch.randn(3, 1, 40),
        torch.randn(3, 24, 56),
        torch.randn(3, 56, 40),
    ]


def get_init_inputs():
    return [in_features, out_features, scale]
"""


@pytest.mark.parametrize("relative", ["matmul/matmul.py", "matmul/bmm.py", "matmul/matmul_bias_relu.py"])
def test_library_matmuls_become_ksmith_gemm_kernels_the_evaluator_accepts(relative: str) -> None:
    from ksmith_mutate.edits import possible_edits

    problem = suite_problem(relative)
    source = seed_from_inductor(problem, "cpu", small=True)
    check_candidate_source(source)
    assert "extern_kernels" not in source and "_gemm_0_kernel[grid](" in source
    assert 'input_precision="ieee"' in source  # in every GEMM kernel; it applies to fp32 operands only
    # Each product is one tl.dot with the literal: a dot_precision edit changes what the kernel computes, never
    # a branch the launch does not take.
    precision_edits = possible_edits(source, ("dot_precision",))
    assert precision_edits and all(" ieee -> " in edit.description for edit in precision_edits)
    kinds = {edit.kind for edit in possible_edits(source)}
    assert {"gemm_config", "dot_tile"} <= kinds  # the tiling edits recognise the GEMM
    verdict = evaluate(
        problem, Candidate.from_source(source), EvalOptions(device="cpu", correctness_trials=2)
    )
    assert verdict.status is Status.OK, (verdict.reasons, verdict.error)


def test_fp32_addmm_and_baddbmm_seed_keeps_fp32_numerics(tmp_path: Path) -> None:
    path = tmp_path / "gemm_scale_tanh.py"
    path.write_text(FP32_GEMM_PROBLEM, encoding="utf-8")
    problem = load_problem(path)
    source = seed_from_inductor(problem, "cpu", small=True)
    assert "bias=self.linear.bias, alpha=1, beta=1)" in source  # the Linear, as addmm
    assert "alpha=0.5, beta=2.0)" in source  # the baddbmm, its scaling applied in the kernel
    assert "_gemm_1_kernel" in source  # one kernel per library call, each tuned on its own
    verdict = evaluate(
        problem, Candidate.from_source(source), EvalOptions(device="cpu", correctness_trials=3)
    )
    assert verdict.status is Status.OK, (verdict.reasons, verdict.error)
    # The ieee path is what keeps fp32: the same seed with TF32-style rounding of the operands fails.
    rounded = source.replace(
        'acc = tl.dot(a, b, acc, input_precision="ieee")',
        "acc = tl.dot(a.to(tl.float16).to(tl.float32), b.to(tl.float16).to(tl.float32), acc)",
    )
    assert rounded != source
    worse = evaluate(problem, Candidate.from_source(rounded), EvalOptions(device="cpu", correctness_trials=3))
    assert worse.status is Status.INCORRECT, worse.reasons


@pytest.mark.slow
@pytest.mark.parametrize(
    "relative",
    [
        "elementwise/geglu.py",
        "loss/cross_entropy.py",
        "normalization/groupnorm.py",
        "pooling/maxpool2d.py",
        "quantization/quantize_int8.py",
        "reduction/argmax.py",
        "reduction/l2_norm.py",
        "softmax/log_softmax.py",
    ],
)
def test_suite_seeds_from_inductor_pass_the_evaluator(relative: str) -> None:
    problem = suite_problem(relative)
    source = seed_from_inductor(problem, "cpu", small=True)
    verdict = evaluate(
        problem, Candidate.from_source(source), EvalOptions(device="cpu", correctness_trials=2)
    )
    assert verdict.status is Status.OK, verdict.reasons


def test_non_tensor_inputs_and_unknown_devices_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "scale.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n\n"
        "class Model(nn.Module):\n    def forward(self, x, factor):\n        return x * factor\n\n\n"
        "def get_inputs():\n    return [torch.randn(16), 3]\n\n\n"
        "def get_init_inputs():\n    return []\n",
        encoding="utf-8",
    )
    problem = load_problem(path)
    with pytest.raises(InductorSeedError, match="forward input 1 is a int, not a tensor"):
        seed_from_inductor(problem, "cpu", small=False)
    with pytest.raises(InductorSeedError, match="device must be 'cpu' or 'cuda'"):
        seed_from_inductor(problem, "tpu", small=False)


@pytest.mark.slow
def test_cpu_generation_needs_no_interpreter(tmp_path: Path) -> None:
    """``ksmith seed`` runs without TRITON_INTERPRET; generation must not depend on it."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = (
        "from ksmith_core.loading import load_problem\n"
        "from ksmith_inductor.seeding import seed_from_inductor\n"
        f"print(seed_from_inductor(load_problem({str(SUITE / 'softmax/softmax.py')!r}), 'cpu', small=True))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert LAUNCH_OPTIONS.search(result.stdout), result.stdout


# -- on a GPU machine: generated on CUDA (autotuned by Inductor), judged by the real evaluator -------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "relative", ["elementwise/gelu_tanh.py", "softmax/softmax.py", "normalization/layernorm.py"]
)
def test_cuda_seed_from_inductor_passes_the_evaluator(relative: str) -> None:
    problem = suite_problem(relative)
    source = seed_from_inductor(problem, "cuda", small=False)
    check_candidate_source(source)
    assert "triton_heuristics" not in source and LAUNCH_OPTIONS.search(source), source
    verdict = evaluate(problem, Candidate.from_source(source), EvalOptions(device="cuda"))
    assert verdict.status is Status.OK, (verdict.reasons, source)


@interpreted
@pytest.mark.parametrize("name", sorted(INTERPRETER_LIBDEVICE))
def test_interpreter_libdevice_stand_ins_match_torch(name: str, tmp_path: Path) -> None:
    source = (
        "import types\n\nimport triton\nimport triton.language as tl\n\n"
        f"libdevice = types.SimpleNamespace({name}={INTERPRETER_LIBDEVICE[name]})\n\n\n"
        "@triton.jit\n"
        "def apply_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):\n"
        "    offsets = tl.arange(0, BLOCK_SIZE)\n"
        "    mask = offsets < n\n"
        "    x = tl.load(x_ptr + offsets, mask=mask)\n"
        f"    tl.store(y_ptr + offsets, libdevice.{name}(x).to(tl.float32), mask=mask)\n"
    )
    module = import_seed(source, tmp_path, f"libdevice_{name}")
    torch.manual_seed(0)
    x = torch.randn(100) * 3
    if name in ("log", "log2", "log1p", "sqrt", "rsqrt"):
        x = x.abs() + 0.05
    if name in ("isnan", "isinf"):
        x[::7], x[::11] = float("nan"), float("inf")
    if name == "nearbyint":
        x[:8] = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5])
    out = torch.empty_like(x)
    module.apply_kernel[(1,)](x, out, x.numel(), BLOCK_SIZE=128)
    reference = torch.round if name == "nearbyint" else getattr(torch, name)  # torch.round: half to even
    torch.testing.assert_close(out, reference(x).float(), atol=1e-5, rtol=1e-5)


@interpreted
@pytest.mark.parametrize("name", ["max_with_index", "min_with_index"])
def test_interpreter_index_reductions_match_torch(name: str, tmp_path: Path) -> None:
    """The stand-ins for Inductor's argmax/argmin reductions: first index of the extreme, NaN wins."""
    source = "\n".join(
        [
            "import triton",
            "import triton.language as tl",
            "",
            *INTERPRETER_HELPERS[name],
            "",
            "",
            "@triton.jit",
            "def index_kernel(x_ptr, out_ptr, BLOCK_SIZE: tl.constexpr):",
            "    row = tl.program_id(0)",
            "    cols = tl.arange(0, BLOCK_SIZE)[None, :]",
            "    values = tl.load(x_ptr + row * BLOCK_SIZE + cols)",
            f"    best_value, best_index = {name}(values, tl.broadcast_to(cols, [1, BLOCK_SIZE]), 1)",
            "    tl.store(out_ptr + row + tl.arange(0, 1), best_index)",
            "",
        ]
    )
    module = import_seed(source, tmp_path, f"helper_{name}")
    torch.manual_seed(0)
    x = torch.randn(4, 64)
    x[1, 5] = x[1, 40] = 9.0 if name == "max_with_index" else -9.0  # a tie: the first index wins
    x[2, 17] = x[2, 50] = float("nan")  # NaN wins over every number
    out = torch.empty(4, dtype=torch.int32)
    module.index_kernel[(4,)](x, out, BLOCK_SIZE=64)
    expected = torch.argmax(x, dim=1) if name == "max_with_index" else torch.argmin(x, dim=1)
    assert out.tolist() == expected.tolist()


SCALAR_CONSTANT_PROBLEM = """
import torch
import triton
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, constant_value, scaling_factor):
        super().__init__()
        self.constant_value = constant_value
        self.bias = nn.Parameter(torch.randn(8, 1))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.min(x, torch.tensor(self.constant_value))
        return (x + self.bias) * self.scaling_factor


def get_inputs():
    return [torch.randn(4, 8, 16)]


def get_init_inputs():
    return [0.5, 2.0]
"""


def test_a_tensor_made_in_forward_is_folded_into_the_kernels(tmp_path: Path) -> None:
    """``torch.tensor(self.constant_value)`` in forward is a traced constant, not an input ModelNew lacks."""
    path = tmp_path / "min_constant.py"
    path.write_text(SCALAR_CONSTANT_PROBLEM, encoding="utf-8")
    problem = load_problem(path)
    source = seed_from_inductor(problem, "cpu", small=True)
    verdict = evaluate(
        problem, Candidate.from_source(source), EvalOptions(device="cpu", correctness_trials=2)
    )
    assert verdict.status is Status.OK, (verdict.reasons, verdict.error)


def test_a_y_grid_above_the_hardware_limit_is_folded_into_z_as_inductor_does() -> None:
    """Grid2DWithYZOverflow: the kernel adds program_id(2) * num_programs(1) to its y block, so the launch
    splits y blocks over z; a kernel that cannot fold is refused when its y grid may pass the limit."""
    from ksmith_inductor.seeding import Kernel, LaunchConfig, _ForwardWriter

    def kernel(source: str) -> Kernel:
        config = LaunchConfig({"XBLOCK": 16, "YBLOCK": 8}, num_warps=4, num_stages=1)
        return Kernel("k", source, "pointwise", "Grid2DWithYZOverflow", config, [], ["XBLOCK", "YBLOCK"])

    writer = _ForwardWriter.__new__(_ForwardWriter)
    folding = "yoffset = (tl.program_id(1) + tl.program_id(2) * tl.num_programs(1)) * YBLOCK"
    grid = eval(writer._grid(kernel(folding), {"xnumel": "16", "ynumel": "1000000"}), {"triton": triton})
    x, y, z = grid({"XBLOCK": 16, "YBLOCK": 8})
    assert x == 1 and y <= 65535 and z == 2 and y * z * 8 >= 1000000
    small = eval(writer._grid(kernel(folding), {"xnumel": "16", "ynumel": "4096"}), {"triton": triton})
    assert small({"XBLOCK": 16, "YBLOCK": 8}) == (1, 512, 1)
    with pytest.raises(InductorSeedError, match="folded into z"):
        writer._grid(kernel("yoffset = tl.program_id(1) * YBLOCK"), {"xnumel": "16", "ynumel": "1000000"})
