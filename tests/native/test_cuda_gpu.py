"""The cuda backend on an NVIDIA GPU (``pytest -m gpu tests/native``; skipped without a GPU): KernelBench-
format CUDA candidates built with nvcc and judged under the full protocol.

- the shipped CUDA ReLU and softmax seeds are accepted, with speedups, timed like Triton kernels;
- a kernel that calls cuBLAS itself is refused before it runs (``LIBRARY_CALL``), one that lets torch
  compute inside its C++ (``torch::matmul``) is refused by the dispatch accounting (``FORBIDDEN_TORCH_OP``);
- a CUDA syntax error is a ``compile_error`` with nvcc's first error line;
- ``ksmith doctor --backend cuda`` passes its checks and conformance set.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ksmith_core.engine import evaluate
from ksmith_core.loading import load_problem, resolve_problem, seed_path_for, with_backend
from ksmith_core.model import Candidate, EvalOptions

pytestmark = pytest.mark.gpu

CASES = Path(__file__).parent / "cases"
OPTIONS = EvalOptions(device="cuda", timing_trials=50)


def cuda_seed(name: str) -> str:
    return seed_path_for(with_backend(resolve_problem(name), "cuda")).read_text()


def judge(problem, source: str):
    return evaluate(with_backend(problem, "cuda"), Candidate.from_source(source), OPTIONS)


@pytest.mark.parametrize("name", ["relu", "softmax", "rmsnorm"])
def test_the_cuda_seeds_are_accepted_with_a_speedup(name):
    verdict = judge(resolve_problem(name), cuda_seed(name))
    assert verdict.status.value == "ok", (verdict.reasons, verdict.error)
    assert verdict.speedup is not None and verdict.speedup > 0
    assert verdict.speedup_vs_compile is not None and verdict.roofline_fraction is not None
    assert all(n >= 1 for n in verdict.launches)
    assert not verdict.interpreted and verdict.details["native"]["extensions"]


CUBLAS = '''
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# cuBLAS declared by hand, so the test needs no cuBLAS headers: the library's import is what gets refused.
source = """
#include <torch/extension.h>

extern "C" int cublasCreate_v2(void** handle);
extern "C" int cublasSgemm_v2(void* handle, int transa, int transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc);

torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty({a.size(0), b.size(1)}, a.options());
    const float alpha = 1.0f, beta = 0.0f;
    const int m = a.size(0), k = a.size(1), n = b.size(1);
    void* handle = nullptr;
    cublasCreate_v2(&handle);
    // Row-major C = A B is column-major C^T = B^T A^T.
    cublasSgemm_v2(handle, 0, 0, n, m, k, &alpha, b.data_ptr<float>(), n, a.data_ptr<float>(), k, &beta,
                   c.data_ptr<float>(), n);
    return c;
}
"""

ext = load_inline(name="ksmith_test_cublas", cpp_sources="torch::Tensor mm(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=source, functions=["mm"], extra_ldflags=["-lcublas"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.mm(a.contiguous(), b.contiguous())
'''


def test_a_kernel_calling_cublas_is_refused_before_it_runs():
    verdict = judge(load_problem(CASES / "matmul512.py"), CUBLAS)
    assert verdict.status.value == "rejected", (verdict.reasons, verdict.error)
    assert verdict.reasons[0].startswith("LIBRARY_CALL: extension ksmith_test_cublas calls ")
    assert "cublasSgemm_v2 (cuBLAS)" in verdict.reasons[0]


def test_torch_computing_inside_the_cpp_is_refused():
    start = CUBLAS.index("    void* handle = nullptr;")
    end = CUBLAS.index("    return c;") + len("    return c;")
    torch_inside = (CUBLAS[:start] + "    return torch::matmul(a, b);" + CUBLAS[end:]).replace(
        "ksmith_test_cublas", "ksmith_test_torch_matmul"
    )
    verdict = judge(load_problem(CASES / "matmul512.py"), torch_inside)
    assert verdict.status.value == "rejected", (verdict.reasons, verdict.error)
    assert verdict.reasons[0].startswith("FORBIDDEN_TORCH_OP: aten.mm")


def test_a_compile_error_carries_nvccs_first_error_line():
    broken = cuda_seed("relu").replace("float4 v = x[i];", "float4 v = x[i] +;")
    verdict = judge(resolve_problem("relu"), broken)
    assert verdict.status.value == "compile_error"
    assert verdict.reasons[0].startswith("NATIVE_COMPILE_ERROR: cuda.cu(") and "error" in verdict.reasons[0]
    assert "float4 v = x[i] +;" in verdict.error


def test_doctor_passes_on_this_gpu():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ksmith_core.cli import main; main()",
            "doctor",
            "--backend",
            "cuda",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    report = json.loads(done.stdout)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert done.returncode == 0 and not failed, failed
    names = {c["name"] for c in report["checks"] if c["status"] == "ok"}
    assert {"conformance: cuda: ReLU seed", "conformance: cuda: torch inside the C++"} <= names
