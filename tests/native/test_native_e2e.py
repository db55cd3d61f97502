"""The cuda backend's whole path on the CPU: a C++-only extension (``cpp_sources``, no CUDA) built by torch's
builder, loaded into the candidate's process and judged under the Triton backend's protocol. One build
(about a minute: torch's headers) serves the three candidates, which differ only in what forward calls."""

from __future__ import annotations

import pytest

from ksmith_core.engine import evaluate
from ksmith_core.loading import resolve_problem, with_backend
from ksmith_core.model import Candidate, EvalOptions

pytestmark = pytest.mark.slow

EXTENSION = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = """
torch::Tensor relu_forward(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const float* src = input.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t i = 0; i < input.numel(); ++i) dst[i] = src[i] > 0.0f ? src[i] : 0.0f;
    return out;
}

torch::Tensor relu_with_torch(torch::Tensor x) {
    return torch::relu(x);  // torch computes: the dispatch mode sees aten.relu from inside the C++
}
"""

relu_cpu = load_inline(
    name="ksmith_test_relu_cpu", cpp_sources=relu_source, functions=["relu_forward", "relu_with_torch"]
)


class ModelNew(nn.Module):
    def forward(self, x):
        return {call}
'''


@pytest.fixture(scope="module", autouse=True)
def compile_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("KSMITH_NATIVE_CACHE_DIR", str(tmp_path_factory.mktemp("native-cache")))
    yield
    mp.undo()


def judge(call: str):
    problem = with_backend(resolve_problem("relu"), "cuda")
    candidate = Candidate.from_source(EXTENSION.replace("{call}", call))
    return evaluate(problem, candidate, EvalOptions(device="cpu", correctness_trials=3))


def test_a_cpp_kernel_is_built_loaded_and_accepted():
    verdict = judge("relu_cpu.relu_forward(x)")
    assert verdict.status.value == "ok", verdict.reasons
    assert verdict.correct and verdict.runtime is not None and verdict.interpreted
    assert verdict.launches == (1, 1, 1)  # one call into the extension per trial
    assert list(verdict.details["native"]["extensions"]) == ["ksmith_test_relu_cpu"]
    assert "native_compile" in verdict.phases


def test_torch_compute_inside_the_cpp_is_refused():
    verdict = judge("relu_cpu.relu_with_torch(x)")
    assert verdict.status.value == "rejected"
    assert verdict.reasons[0].startswith("FORBIDDEN_TORCH_OP: aten.relu")
    assert verdict.details["native"]["cached"]  # the same extension as above: built once


def test_forward_that_never_calls_the_extension_is_refused():
    verdict = judge("torch.empty_like(x)")
    assert verdict.status.value == "rejected"
    assert any(
        r.startswith("NO_KERNEL_LAUNCH: forward launched no kernel of its compiled extension")
        for r in verdict.reasons
    )
