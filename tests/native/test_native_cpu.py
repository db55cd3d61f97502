"""The cuda backend where there is no GPU: reading load_inline calls ahead, the compiler's feedback, the
library scan, the toolchain's one-line errors, and the verdicts that need no build. Seconds in all."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ksmith_core.engine import evaluate
from ksmith_core.errors import BackendUnavailable
from ksmith_core.loading import resolve_problem, seed_path_for, with_backend
from ksmith_core.model import Candidate, EvalOptions
from ksmith_core.platform import NativeCompiler, PlatformFacts
from ksmith_native.build import CompileFailure, build, check_toolchain, compiler_feedback, toolchain_for
from ksmith_native.spec import ExtensionSpec, NativeSourceError, extract_extensions
from ksmith_native.symbols import forbidden_imports, undefined_symbols

CASES = Path(__file__).parent / "cases"
KERNELBENCH_ADD = (CASES / "kernelbench_add.py").read_text()
RELU_CUDA = seed_path_for(with_backend(resolve_problem("relu"), "cuda"))


def test_a_kernelbench_candidate_is_read_as_it_is():
    (spec,) = extract_extensions(KERNELBENCH_ADD)
    assert spec.name == "elementwise_add" and spec.function_names == ("elementwise_add_cuda",)
    assert "__global__ void elementwise_add_kernel" in spec.cuda_sources[0]
    assert spec.cpp_sources == ("torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);",)
    assert spec.extra_cflags == ("",) and spec.has_cuda
    # The candidate's process makes the same spec from the call's real arguments: the keys meet.
    namespace: dict = {}
    exec(KERNELBENCH_ADD.split("# Compile the inline CUDA code")[0], namespace)
    runtime = ExtensionSpec.from_call(
        (),
        dict(
            name="elementwise_add",
            cpp_sources=namespace["elementwise_add_cpp_source"],
            cuda_sources=namespace["elementwise_add_source"],
            functions=["elementwise_add_cuda"],
            verbose=True,
            extra_cflags=[""],
            extra_ldflags=[""],
        ),
    )
    assert runtime.key == spec.key


def test_the_shipped_cuda_seed_is_found_beside_its_problem():
    assert RELU_CUDA is not None and RELU_CUDA.name == "relu.cuda.seed.py"
    assert seed_path_for(resolve_problem("relu")).name == "relu.seed.py"  # triton: as before
    (spec,) = extract_extensions(RELU_CUDA.read_text())
    assert spec.name == "ksmith_example_relu" and spec.extra_cuda_cflags == ("-O3",)


def test_constants_concatenated_positional_and_dict_functions():
    source = """
from torch.utils import cpp_extension
HEADER = "#include <torch/extension.h>\\n"
BODY = HEADER + f"torch::Tensor f(torch::Tensor x) {{ return x; }}"
FLAGS = ["-O2"] + ["-DX=1"]
ext = cpp_extension.load_inline("fx", [BODY], None, functions={"f": "identity"}, extra_cflags=FLAGS)
"""
    (spec,) = extract_extensions(source)
    assert spec.cpp_sources[0].startswith("#include <torch/extension.h>\ntorch::Tensor f")
    assert spec.functions == (("f", "identity"),) and spec.extra_cflags == ("-O2", "-DX=1")
    assert not spec.has_cuda


@pytest.mark.parametrize(
    "source, message",
    [
        ("import os\nfrom torch.utils.cpp_extension import load_inline\n"
         "m = load_inline(name='m', cpp_sources=os.environ['SRC'])", "argument cpp_sources"),
        ("from torch.utils.cpp_extension import load_inline\nkw = {}\nm = load_inline(**kw)", "**kwargs"),
        ("from torch.utils.cpp_extension import load\nm = load(name='m', sources=['m.cpp'])", "builds from files"),
        ("from torch.utils.cpp_extension import load_inline\nm = load_inline('m', 'x', None, None, ['f'])",
         "pass the others by keyword"),
        ("from torch.utils.cpp_extension import load_inline\nm = load_inline(name='not valid', cpp_sources='x')",
         "Python identifier"),
        ("from torch.utils.cpp_extension import load_inline\nm = load_inline(name='m', cpp_sources='x', "
         "sycl_sources='y')", "SYCL"),
        ("from torch.utils.cpp_extension import load_inline\na = load_inline(name='m', cpp_sources='x')\n"
         "b = load_inline(name='m', cpp_sources='y')", "two different load_inline calls"),
    ],
)  # fmt: skip
def test_what_cannot_be_read_ahead_says_where(source, message):
    with pytest.raises(NativeSourceError, match="line "):
        extract_extensions(source)
    with pytest.raises(NativeSourceError) as raised:
        extract_extensions(source)
    assert message in str(raised.value)


NVCC_OUTPUT = """\
[1/3] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=x {long}
FAILED: cuda.cuda.o
/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile {long}
/cache/ksmith/native/abc/cuda.cu(14): error: identifier "undefined_thing" is undefined
      out[idx] = undefined_thing;
                 ^

1 error detected in the compilation of "/cache/ksmith/native/abc/cuda.cu".
ninja: build stopped: subcommand failed.
""".format(long="-I/x " * 200)


def test_the_compiler_feedback_starts_at_its_first_error():
    headline, feedback = compiler_feedback(NVCC_OUTPUT, Path("/cache/ksmith/native/abc"))
    assert headline == 'cuda.cu(14): error: identifier "undefined_thing" is undefined'
    assert feedback.splitlines()[1].strip() == "out[idx] = undefined_thing;"
    assert "/cache/ksmith" not in feedback and "[1/3]" not in feedback and "ninja:" not in feedback
    assert compiler_feedback("")[0] == "the build failed without a message"


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler here")
def test_libraries_that_compute_are_found_in_the_imports(tmp_path):
    """A shared library's undefined symbols, read from its ELF tables: cuBLAS, runtime loading, threads."""
    source = tmp_path / "lib.c"
    source.write_text(
        "int cublasSgemm_v2(void); void* dlopen(const char*, int); int pthread_create(void*, void*, void*, void*);\n"
        "int run(void) { dlopen(0, 0); pthread_create(0, 0, 0, 0); return cublasSgemm_v2(); }\n"
        "int honest(int x) { return x * 2; }\n"
    )
    library = tmp_path / "lib.so"
    subprocess.run(["cc", "-shared", "-fPIC", source, "-o", library], check=True)
    symbols = undefined_symbols(library)
    assert {"cublasSgemm_v2", "dlopen", "pthread_create"} <= symbols and "honest" not in symbols
    found = forbidden_imports(symbols)
    assert "cublasSgemm_v2 (cuBLAS)" in found and any(f.startswith("dlopen") for f in found)
    assert any(f.startswith("pthread_create") for f in found)
    assert forbidden_imports({"_ZN2at4_ops5empty4callEv", "cudaLaunchKernel", "memcpy"}) == []
    assert forbidden_imports({"_ZN2at4_ops2mm10redispatchEN3c1014DispatchKeySetERKNS_6TensorES6_"})
    # What the same toolchain puts into an empty extension (a static CUDA runtime's dlopen) is its own.
    assert forbidden_imports({"dlopen", "cublasSgemm_v2"}, baseline={"dlopen"}) == ["cublasSgemm_v2 (cuBLAS)"]


def _facts(compiler: NativeCompiler | None) -> PlatformFacts:
    return PlatformFacts("nvidia", "NVIDIA", "cuda", native_compiler=compiler)


def test_the_toolchain_says_what_is_missing_in_one_line(monkeypatch):
    with pytest.raises(BackendUnavailable, match="compiles CUDA sources, which need a GPU"):
        check_toolchain("cpu", None, needs_gpu_compiler=True)
    missing = NativeCompiler("nvcc", "nvcc", found=False)
    with pytest.raises(BackendUnavailable, match=r"needs nvcc, the NVIDIA compiler: none found in CUDA_HOME"):
        check_toolchain("cuda", _facts(missing), needs_gpu_compiler=True)
    with pytest.raises(BackendUnavailable, match="found no GPU platform"):
        check_toolchain("cuda", None, needs_gpu_compiler=True)
    monkeypatch.setattr(
        "ksmith_native.build._which", lambda name: None if name == "ninja" else "/usr/bin/" + name
    )
    with pytest.raises(BackendUnavailable, match="needs ninja: pip install ninja"):
        check_toolchain("cpu", None, needs_gpu_compiler=False)


def _verdict(source: str, backend: str = "cuda"):
    problem = with_backend(resolve_problem("relu"), backend)
    return evaluate(problem, Candidate.from_source(source), EvalOptions(device="cpu"))


def test_a_cuda_candidate_on_a_cpu_machine_is_one_clear_error():
    with pytest.raises(BackendUnavailable, match="need a GPU"):
        _verdict(RELU_CUDA.read_text())


def test_verdicts_that_need_no_build():
    triton_seed = seed_path_for(resolve_problem("relu")).read_text()
    verdict = _verdict(triton_seed)
    assert verdict.status.value == "compile_error" and verdict.reasons[0].startswith("NO_EXTENSION")
    dynamic = "import os\nfrom torch.utils.cpp_extension import load_inline\n" + (
        "m = load_inline(name='m', cpp_sources=os.environ['X'])\nclass ModelNew:\n    pass\n"
    )
    verdict = _verdict(dynamic)
    assert verdict.status.value == "compile_error" and verdict.reasons[0].startswith("LOAD_INLINE: line 3")
    assert _verdict("class ModelNew(:\n").status.value == "compile_error"  # the protocol's syntax verdict


def test_a_compile_error_is_a_verdict_with_the_compilers_first_line(tmp_path, monkeypatch):
    """A flag the C++ compiler refuses fails in a second (no header is parsed): the compile_error verdict
    carries its first error line, and the failure is remembered for the same source."""
    monkeypatch.setenv("KSMITH_NATIVE_CACHE_DIR", str(tmp_path / "cache"))
    source = (
        "import torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
        "m = load_inline(name='flagged', cpp_sources='int f() { return 1; }', functions=['f'], "
        "extra_cflags=['-fno-such-flag-ksmith'])\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return m.f()\n"
    )
    verdict = _verdict(source)
    assert verdict.status.value == "compile_error", verdict
    assert (
        verdict.reasons[0].startswith("NATIVE_COMPILE_ERROR: ")
        and "-fno-such-flag-ksmith" in verdict.reasons[0]
    )
    assert "error" in verdict.error and str(tmp_path) not in verdict.error
    (spec,) = extract_extensions(source)
    with pytest.raises(CompileFailure) as again:  # from the cache: no second build
        build(spec, toolchain_for("cpu", False))
    assert "-fno-such-flag-ksmith" in again.value.headline
    assert list((tmp_path / "cache").glob("*/failed.json"))
