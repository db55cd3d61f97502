"""The mutate proposer's edits of native (CUDA C++, ``load_inline``) candidates: launch parameters it can
read with certainty, and a stated reason when it cannot."""

from __future__ import annotations

import difflib
from pathlib import Path

import libcst as cst
import pytest

from ksmith_core.loading import load_problem
from ksmith_core.model import Candidate, Selection, Status, Verdict
from ksmith_core.run import Run, RunConfig
from ksmith_core.store import RunStore
from ksmith_mutate import plugin
from ksmith_mutate.edits import Limits, possible_edits
from ksmith_mutate.native import NATIVE_KINDS, why_no_native_edit
from ksmith_native.spec import extract_extensions

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"
RELU = PROBLEMS / "elementwise" / "relu.cuda.seed.py"
SOFTMAX = PROBLEMS / "softmax" / "softmax.cuda.seed.py"
OK = Verdict(status=Status.OK, correct=True, speedup=1.0)

NVIDIA = Limits()
METAX = Limits(num_warps=(1, 2, 4, 8, 16), platform="metax", warp_size=64, native_compiler="mxcc")


def module_with(cuda: str, flags: str = '["-O3"]') -> str:
    return (
        "import torch.nn as nn\n"
        "from torch.utils.cpp_extension import load_inline\n\n"
        f'cuda_source = """{cuda}"""\n\n'
        'cpp_source = "torch::Tensor run(torch::Tensor x);"\n\n'
        "ext = load_inline(\n"
        '    name="ext",\n'
        "    cpp_sources=cpp_source,\n"
        "    cuda_sources=cuda_source,\n"
        '    functions=["run"],\n'
        f"    extra_cuda_cflags={flags},\n"
        ")\n\n\n"
        "class ModelNew(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return ext.run(x)\n"
    )


def changed_lines(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def native(source: str, limits: Limits = NVIDIA) -> list:
    return [e for e in possible_edits(source, limits=limits) if e.kind in NATIVE_KINDS]


LITERAL_LAUNCH = """
__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


def test_the_shipped_cuda_seeds_offer_block_grid_unroll_and_fast_math_edits():
    relu = RELU.read_text()
    kinds = {e.kind for e in native(relu)}
    assert kinds == set(NATIVE_KINDS)
    softmax = SOFTMAX.read_text()
    by_description = {e.description: e for e in native(softmax)}
    up = by_description["THREADS 256 -> 512 threads per block"]
    assert changed_lines(softmax, up.source) == [
        "-constexpr int THREADS = 256;",
        "+constexpr int THREADS = 512;",
    ]
    assert by_description["THREADS 256 -> 128 threads per block"].safer
    for edit in native(softmax) + native(relu):
        # Every edit still reads as a load_inline the cuda backend can build ahead.
        [spec] = extract_extensions(edit.source)
        assert spec.cuda_sources


def test_a_literal_block_moves_with_the_grid_that_derives_from_it():
    source = module_with(LITERAL_LAUNCH)
    [down, up] = [e for e in native(source) if e.kind == "native_block"]
    assert changed_lines(source, up.source) == [
        "-    scale<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "+    scale<<<(n + 511) / 512, 512>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
    ]
    assert "(n + 127) / 128, 128>>>" in down.source and down.safer


def test_the_grid_variable_line_follows_a_literal_block():
    cuda = LITERAL_LAUNCH.replace(
        "scale<<<(n + 255) / 256, 256>>>", "int blocks = (n + 255) / 256;\n    scale<<<blocks, 256>>>"
    )
    [_, up] = [e for e in native(module_with(cuda)) if e.kind == "native_block"]
    assert "int blocks = (n + 511) / 512;" in up.source and "scale<<<blocks, 512>>>" in up.source


def test_a_block_value_used_elsewhere_is_ambiguous_and_left_alone():
    cuda = LITERAL_LAUNCH.replace("int i =", "__shared__ float tile[256];\n    int i =")
    source = module_with(cuda)
    assert not [e for e in native(source) if e.kind == "native_block"]
    # The other edits remain; with them gone too, mutate says what it could not read.
    bare = module_with(cuda.replace("for", ""), flags='["-O3", "--use_fast_math"]')
    reason = why_no_native_edit(cst.parse_module(bare), compiler="mxcc")
    assert reason is not None and "the literal block 256 of the launch also appears elsewhere" in reason


def test_a_computed_block_is_reported_not_edited():
    cuda = LITERAL_LAUNCH.replace("scale<<<(n + 255) / 256, 256>>>", "scale<<<(n + 255) / 256, x.size(1)>>>")
    source = module_with(cuda)
    assert not [e for e in native(source) if e.kind == "native_block"]
    reason = why_no_native_edit(cst.parse_module(source), compiler=None)
    assert "the block of the launch (x.size(1)) is computed, not a constant" in reason


def test_launch_bounds_follow_a_named_block():
    cuda = (
        "constexpr int THREADS = 128;\n"
        "__global__ void __launch_bounds__(128) k(float* y) { y[threadIdx.x] = 0.0f; }\n"
        "void run(float* y) { k<<<1, THREADS>>>(y); }\n"
    )
    edits = {e.description: e for e in native(module_with(cuda))}
    up = edits["THREADS 128 -> 256 threads per block"]
    assert "constexpr int THREADS = 256;" in up.source and "__launch_bounds__(256)" in up.source


def test_a_name_assigned_twice_is_not_a_block_constant():
    cuda = (
        "__global__ void k(float* y) { y[threadIdx.x] = 0.0f; }\n"
        "void run(float* y, int wide) { int threads = 128; if (wide) threads = 512; k<<<1, threads>>>(y); }\n"
    )
    source = module_with(cuda)
    assert not [e for e in native(source) if e.kind == "native_block"]
    assert "block 'threads' is defined or assigned more than once" in why_no_native_edit(
        cst.parse_module(source), compiler=None
    )


def test_blocks_stay_multiples_of_the_platform_warp():
    cuda = (
        "__global__ void k(float* y) { y[threadIdx.x] = 0.0f; }\n"
        "void run(float* y) { const int threads = 64; k<<<1, threads>>>(y); }\n"
    )
    on_nvidia = {e.detail["new"] for e in native(module_with(cuda)) if e.kind == "native_block"}
    on_metax = {e.detail["new"] for e in native(module_with(cuda), METAX) if e.kind == "native_block"}
    assert on_nvidia == {32, 128} and on_metax == {128}


def test_unroll_pragmas_step_along_the_ladder():
    cuda = (
        "__global__ void k(const float* x, float* y, int n) {\n"
        "    float acc = 0.0f;\n"
        "    #pragma unroll 4\n"
        "    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];\n"
        "    y[threadIdx.x] = acc;\n"
        "}\n"
    )
    found = {e.description for e in native(module_with(cuda)) if e.kind == "native_unroll"}
    assert found == {"#pragma unroll 4 -> 2", "#pragma unroll 4 -> 8"}


def test_fast_math_is_added_or_removed_for_nvcc_only():
    source = module_with(LITERAL_LAUNCH)
    [add] = [e for e in native(source) if e.kind == "native_fast_math"]
    assert 'extra_cuda_cflags=["-O3", "--use_fast_math"]' in add.source and not add.safer
    [remove] = [e for e in native(add.source) if e.kind == "native_fast_math"]
    assert 'extra_cuda_cflags=["-O3"]' in remove.source and remove.safer
    assert not [e for e in native(source, METAX) if e.kind == "native_fast_math"]
    without = source.replace('    extra_cuda_cflags=["-O3"],\n', "")
    [added] = [e for e in native(without) if e.kind == "native_fast_math"]
    assert [spec.extra_cuda_cflags for spec in extract_extensions(added.source)] == [("--use_fast_math",)]


@pytest.fixture
def relu_run(tmp_path):
    problem = load_problem(PROBLEMS / "elementwise" / "relu.py")
    store = RunStore.create(tmp_path / "run", problem.source, {}, {})
    yield Run(problem, RunConfig(proposer="mutate", proposals_per_step=4), store)
    store.close()


def test_the_proposer_evolves_a_cuda_seed_with_native_edits(relu_run):
    seed = relu_run.add(Candidate.from_source(RELU.read_text()), OK)[0]
    proposals = plugin.propose(relu_run, Selection(parents=(seed,)))
    assert len(proposals) == 4
    assert {p.edit_kind for p in proposals} <= set(NATIVE_KINDS)
    assert len({p.edit_kind for p in proposals}) >= 3  # untried kinds come first


def test_a_native_parent_with_nothing_to_read_is_dropped_with_the_reason(relu_run):
    cuda = LITERAL_LAUNCH.replace("scale<<<(n + 255) / 256, 256>>>", "scale<<<(n + 255) / 256, x.size(1)>>>")
    source = module_with(cuda, flags="FLAGS").replace("import torch.nn", 'FLAGS = ["-O3"]\nimport torch.nn')
    parent = relu_run.add(Candidate.from_source(source), OK)[0]
    assert plugin.propose(relu_run, Selection(parents=(parent,))) == []
    [dropped] = relu_run.take_dropped()
    assert dropped["reason"] == "no_edit"
    assert "native source: mutate edits literal or named-constant block sizes" in dropped["detail"]
    assert "is computed, not a constant" in dropped["detail"]
