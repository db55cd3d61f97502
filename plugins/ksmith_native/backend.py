"""The ``cuda`` backend: native candidates built ahead, then judged under the Triton backend's protocol.

:class:`NativeEvaluation` is :class:`ksmith_triton.evaluator.Evaluation` with one step before it: read the
candidate's ``load_inline`` calls, build them (outside the GPU lock, cached: ``build.py``), refuse libraries
that would compute for it (``symbols.py``), and hand the built libraries to the candidate's process
(``candidate_hooks.py``). Everything after -- the child process, seeds, poisoned outputs, the reference in
its own process, the guards, timing, re-validation -- is the Triton backend's code, unchanged.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ksmith_core.errors import BackendUnavailable
from ksmith_core.model import Candidate, EvalOptions, Problem, Status, Verdict
from ksmith_native.build import Built, CompileFailure, Toolchain, toolchain_for
from ksmith_native.build import build as build_extension
from ksmith_native.spec import ExtensionSpec, NativeSourceError, extract_extensions
from ksmith_native.symbols import NotAnElfLibrary, forbidden_imports, undefined_symbols
from ksmith_triton import evaluator
from ksmith_triton.evaluator import Evaluation

NAME = "cuda"
CANDIDATE_SETUP = "ksmith_native.candidate_hooks"

# An empty extension, built once per toolchain (cached): what it imports is the toolchain's, not a candidate's.
BASELINE_CPP = "torch::Tensor ksmith_baseline(torch::Tensor x) { return x; }"
BASELINE_CUDA = (
    "__global__ void ksmith_baseline_kernel(float* x) { x[threadIdx.x] = 0.0f; }\n"
    "void ksmith_baseline_launch(float* x) { ksmith_baseline_kernel<<<1, 1>>>(x); }"
)


def baseline_imports(toolchain: Toolchain, with_cuda: bool) -> frozenset[str]:
    """The undefined symbols of an empty extension built by ``toolchain`` (with a CUDA source or without)."""
    spec = ExtensionSpec(
        name="ksmith_baseline_cuda" if with_cuda else "ksmith_baseline_cpp",
        cpp_sources=(BASELINE_CPP,),
        cuda_sources=(BASELINE_CUDA,) if with_cuda else (),
        functions=(("ksmith_baseline", "ksmith_baseline"),),
    )
    try:
        built = build_extension(spec, toolchain)
    except CompileFailure as failure:
        raise BackendUnavailable(
            f"the cuda backend's toolchain cannot build an empty extension: {failure.headline}"
        ) from None
    return frozenset(undefined_symbols(built.path))


def evaluate(problem: Problem, candidate: Candidate, options: EvalOptions) -> Verdict:
    """Judge one native candidate. Raises :class:`~ksmith_core.errors.BackendUnavailable` (one line) when
    this machine cannot build or run it: no GPU for CUDA sources, no nvcc, no ninja."""
    return evaluator.evaluate(problem, candidate, options, evaluation=NativeEvaluation)


class NativeEvaluation(Evaluation):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._built: list[Built] = []
        self._prepared = False

    def run(self) -> Verdict:
        # A re-validation or a retry alone is a new instance: its build comes from the cache.
        early = None if self._prepared else self.before_admission()
        return early if early is not None else super().run()

    def before_admission(self) -> Verdict | None:
        """Read, build and scan the candidate's extensions before it waits for the GPU's memory; a verdict
        when that already decides (a compile error, a library that would compute)."""
        self._prepared = True
        try:
            compile(self.candidate.source, "candidate.py", "exec")
        except SyntaxError:
            return None  # the protocol's own syntax verdict, in run()
        try:
            specs = extract_extensions(self.candidate.source)
        except NativeSourceError as exc:
            self.error = str(exc)
            return self.verdict(Status.COMPILE_ERROR, [f"LOAD_INLINE: {exc}"])
        if not specs:
            return self.verdict(
                Status.COMPILE_ERROR,
                [
                    "NO_EXTENSION: the candidate builds no extension with torch.utils.cpp_extension.load_inline; "
                    "the cuda backend judges C++/CUDA kernels (KernelBench's CUDA format)"
                ],
            )
        toolchain = toolchain_for(self.device, any(spec.has_cuda for spec in specs))
        clock = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(specs)) as pool:
            futures = [pool.submit(build_extension, spec, toolchain) for spec in specs]
        self.phases["native_compile"] = round(time.monotonic() - clock, 3)
        failures = [f.exception() for f in futures if f.exception() is not None]
        self.details["native"] = {"toolchain": toolchain.description, "extensions": [s.name for s in specs]}
        if failures:
            failure = failures[0]
            if not isinstance(failure, CompileFailure):
                raise failure
            self.error = failure.feedback
            status = Status.TIMEOUT if failure.timed_out else Status.COMPILE_ERROR
            code = "NATIVE_COMPILE_TIMEOUT" if failure.timed_out else "NATIVE_COMPILE_ERROR"
            return self.verdict(status, [f"{code}: {failure.headline}"])
        self._built = [f.result() for f in futures]
        self.details["native"]["cached"] = all(b.cached for b in self._built)
        for built in self._built:
            try:
                baseline = baseline_imports(toolchain, built.spec.has_cuda)
                forbidden = forbidden_imports(undefined_symbols(built.path), baseline)
            except (NotAnElfLibrary, OSError) as exc:
                return self.verdict(Status.COMPILE_ERROR, [f"NATIVE_LIBRARY: {exc}"])
            if forbidden:
                return self.verdict(
                    Status.REJECTED,
                    [
                        f"LIBRARY_CALL: extension {built.spec.name} calls {', '.join(forbidden[:4])}"
                        f"{' and more' if len(forbidden) > 4 else ''}; only the candidate's own kernels may "
                        "compute"
                    ],
                )
        return None

    def job_extra(self) -> dict[str, Any]:
        return {
            "candidate_setup": [CANDIDATE_SETUP],
            "native_extensions": {
                b.spec.key: {"name": b.spec.name, "path": str(b.path), "sha256": b.sha256}
                for b in self._built
            },
        }
