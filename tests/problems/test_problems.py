"""The shipped suite: every problem loads, is large enough for a GPU, and its seed is correct at small size.

Seeds run for real through the Triton interpreter on CPU tensors (set up by the test conftest) and are
compared with the reference ``Model`` in process, with the problem's own tolerances.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ksmith_core.loading import load_problem, seed_path_for
from ksmith_core.model import Problem
from ksmith_problems.plugin import PROBLEMS_DIR, SUITE

PROBLEM_PATHS = sorted(
    p for p in PROBLEMS_DIR.rglob("*.py") if not p.name.startswith("_") and not p.name.endswith(".seed.py")
)
PROBLEM_IDS = [p.stem for p in PROBLEM_PATHS]
CATEGORIES = set(
    "elementwise normalization reduction softmax loss matmul attention scan pooling quantization".split()
)
# What a seed may do with torch inside forward: allocate, view, and ask for metadata. Everything else is
# compute the kernels should do (unless the problem's KSMITH_ALLOWED_OPS names it).
ALLOCATION_AND_VIEW_OPS = {
    f"aten.{name}"
    for name in (
        "empty empty_like empty_strided view _unsafe_view reshape permute transpose t expand unsqueeze "
        "squeeze slice select as_strided alias detach sym_size sym_stride sym_numel is_contiguous lift_fresh"
    ).split()
}
# The Triton interpreter itself copies every kernel argument to a host buffer and back.
INTERPRETER_OPS = {"aten.copy_", "aten.new_empty", "aten.set_"}
# Small sizes run through the interpreter on CPU; on a GPU machine (no interpreter) they run on the GPU.
SMALL_SIZE_DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
MIN_INPUT_BYTES = 64 << 20  # more than an H100's 50 MB L2, so memory-bound problems stream from HBM
MAX_INPUT_BYTES = 4 << 30


def _import(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton's JIT looks kernels' globals up through the module
    spec.loader.exec_module(module)
    return module


def _problem_module(path: Path, small: bool) -> ModuleType:
    module = _import(path, f"ksmith_problem_{path.stem}_{'small' if small else 'full'}")
    if small:
        for key, value in load_problem(path).small_sizes.items():
            assert hasattr(module, key), f"KSMITH_SMALL names {key!r}, which the problem does not define"
            setattr(module, key, value)
    return module


class _TorchOpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(f"aten.{func._schema.name.split('::')[-1]}")
        return func(*args, **(kwargs or {}))


def _as_list(out: object) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]  # type: ignore[list-item]


def test_suite_is_registered_and_large() -> None:
    from ksmith_core.capabilities import ProblemSuite
    from ksmith_core.registry import lookup

    assert lookup(ProblemSuite, SUITE).directory == PROBLEMS_DIR
    assert len(PROBLEM_PATHS) >= 30
    assert {p.parent.name for p in PROBLEM_PATHS} == CATEGORIES
    assert len(set(PROBLEM_IDS)) == len(PROBLEM_IDS), "problem names must be unique across categories"
    for name in ("softmax", "layernorm", "rmsnorm", "sum_reduction", "matmul_bias_relu"):
        assert name in PROBLEM_IDS


@pytest.mark.parametrize("path", PROBLEM_PATHS, ids=PROBLEM_IDS)
def test_problem_loads_with_seed_docstring_and_small_sizes(path: Path) -> None:
    problem = load_problem(path)
    assert problem.description and problem.description.endswith("."), "one-line docstring"
    assert len(ast.get_docstring(ast.parse(path.read_text())).splitlines()) == 1
    assert problem.small_sizes, "KSMITH_SMALL is needed so the interpreter runs the problem in seconds"
    assert seed_path_for(problem) is not None
    seed_source = seed_path_for(problem).read_text()
    assert "class ModelNew" in seed_source and "@triton.jit" in seed_source


@pytest.mark.parametrize("path", PROBLEM_PATHS, ids=PROBLEM_IDS)
def test_full_size_fills_a_gpu_and_fits_in_memory(path: Path) -> None:
    # Bytes a kernel must read at least once: the inputs plus the model's weights. The meta device allocates
    # nothing, so full sizes cost no memory here.
    module = _problem_module(path, small=False)
    with torch.device("meta"):
        inputs = [t for t in module.get_inputs() if isinstance(t, torch.Tensor)]
        model = module.Model(*module.get_init_inputs())
    tensors = inputs + list(model.parameters()) + list(model.buffers())
    total = sum(t.numel() * t.element_size() for t in tensors)
    assert MIN_INPUT_BYTES <= total <= MAX_INPUT_BYTES, f"{total / 2**20:.0f} MiB of inputs and weights"


def _check_close(problem: Problem, expected: torch.Tensor, actual: torch.Tensor, what: str) -> None:
    assert type(actual) is torch.Tensor, what
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    if not expected.is_floating_point():
        assert torch.equal(actual, expected), f"{what}: {(actual != expected).sum()} elements differ"
        return
    tol = problem.tolerance_for(str(expected.dtype))
    a, e = actual.double(), expected.double()
    bad = (a - e).abs() > tol.atol + tol.rtol * e.abs()
    assert not bad.any() and not torch.isnan(a).any(), (
        f"{what}: {int(bad.sum())}/{e.numel()} elements off, max abs error {(a - e).abs().max():.3g}"
    )


def _seed_against_reference(
    path: Path, device: str, small: bool, trials: int, seed_path: Path | None = None
) -> None:
    """Build Model and ModelNew from the same seed (the KernelBench convention) and compare on fresh inputs."""
    problem = load_problem(path)
    module = _problem_module(path, small=small)
    seed_path = seed_path or seed_path_for(problem)
    seed = _import(seed_path, f"ksmith_seed_{path.stem}_{device}_{seed_path.parent.name}")

    torch.manual_seed(1234)
    init_inputs = module.get_init_inputs()
    torch.manual_seed(1)
    reference = module.Model(*init_inputs).to(device)
    torch.manual_seed(1)
    candidate = seed.ModelNew(*init_inputs).to(device)
    allowed = ALLOCATION_AND_VIEW_OPS | {".".join(op.split(".")[:2]) for op in problem.allowed_ops}
    if os.environ.get("TRITON_INTERPRET") == "1":
        allowed |= INTERPRETER_OPS
    for trial in range(trials):
        torch.manual_seed(100 + trial)
        inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
        pristine = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
        recorder = _TorchOpRecorder()
        with torch.no_grad(), recorder:
            actual = _as_list(candidate(*inputs))
        with torch.no_grad():
            expected = _as_list(reference(*pristine))
        for before, after in zip(pristine, inputs):
            if isinstance(before, torch.Tensor):
                assert torch.equal(before, after), "the seed changed its inputs"
        assert len(actual) == len(expected)
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert a.device == e.device, f"output {i} is on {a.device}, expected {e.device}"
            _check_close(problem, e, a, f"trial {trial} output {i}")
        assert recorder.ops <= allowed, (
            f"torch compute in the seed's forward: {sorted(recorder.ops - allowed)}"
        )


@pytest.mark.parametrize("path", PROBLEM_PATHS, ids=PROBLEM_IDS)
def test_seed_matches_reference_at_small_size(path: Path) -> None:
    _seed_against_reference(path, device=SMALL_SIZE_DEVICE, small=True, trials=2)


@pytest.mark.gpu
@pytest.mark.parametrize("path", PROBLEM_PATHS, ids=PROBLEM_IDS)
def test_seed_matches_reference_at_full_size_on_gpu(path: Path) -> None:
    _seed_against_reference(path, device="cuda", small=False, trials=2)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


TUNABLE_CONSTEXPRS = {"BLOCK_SIZE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"}


@pytest.mark.parametrize("path", PROBLEM_PATHS, ids=PROBLEM_IDS)
def test_seed_launches_expose_their_tunables(path: Path) -> None:
    # Every launch `kernel[grid](...)` passes num_warps and its block sizes as keyword arguments: a literal
    # the mutate proposer can change, or a local computed from the shape (a whole-row block).
    tree = ast.parse(seed_path_for(load_problem(path)).read_text())
    launches = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)]
    assert launches, "the seed launches no Triton kernel"
    for launch in launches:
        keywords = {k.arg: k.value for k in launch.keywords}
        assert isinstance(keywords.get("num_warps"), ast.Constant), "num_warps must be a literal"
        tunables = TUNABLE_CONSTEXPRS & keywords.keys()
        assert tunables, "a launch must pass a block size such as BLOCK_SIZE"
        assert any(isinstance(keywords[name], ast.Constant) for name in tunables) or all(
            isinstance(keywords[name], ast.Name) for name in tunables
        )


# Other launch settings the search may try; the seeds' grids must follow them.
RETUNED = {"BLOCK_SIZE": 2048, "BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 8}


@pytest.mark.parametrize("path", PROBLEM_PATHS, ids=PROBLEM_IDS)
def test_seed_stays_correct_with_other_launch_settings(path: Path, tmp_path: Path) -> None:
    source = seed_path_for(load_problem(path)).read_text()
    retuned = re.sub(
        r"\b(" + "|".join(RETUNED) + r")=(\d+)", lambda m: f"{m.group(1)}={RETUNED[m.group(1)]}", source
    )
    assert retuned != source
    seed_path = tmp_path / f"{path.stem}.seed.py"
    seed_path.write_text(retuned)
    _seed_against_reference(path, device=SMALL_SIZE_DEVICE, small=True, trials=1, seed_path=seed_path)


def test_cli_lists_the_suite_and_finds_problems_by_name(ksmith_cmd: list[str]) -> None:
    from ksmith_core.loading import resolve_problem

    listed = subprocess.run([*ksmith_cmd, "problems", "--json"], capture_output=True, text=True, check=True)
    rows = [row for row in json.loads(listed.stdout) if row["suite"] == SUITE]
    assert sorted(row["name"] for row in rows) == sorted(PROBLEM_IDS)
    assert all(row["seed"] and row["description"] for row in rows)
    softmax = resolve_problem("softmax")
    assert softmax.path == PROBLEMS_DIR / "softmax" / "softmax.py"
    assert softmax.small_sizes


@pytest.mark.slow
def test_every_seed_compiles_for_an_h100_without_a_gpu() -> None:
    # The interpreter accepts some kernels the compiler rejects (a loop-carried value changing type, say),
    # so the seeds are also compiled ahead of time for sm_90, outside the interpreter.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    script = Path(__file__).with_name("compile_for_gpu.py")
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert json.loads(result.stdout) == {}
