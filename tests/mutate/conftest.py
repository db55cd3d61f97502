"""Helpers for the mutate proposer's tests: the test kernels, running a candidate against its problem."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ksmith_core.model import source_id

KERNELS = Path(__file__).parent / "kernels"
KERNEL_NAMES = ("softplus", "softmax", "rmsnorm", "matmul_bias_relu", "linear_scaled")


def seed_source(name: str) -> str:
    return (KERNELS / f"{name}.seed.py").read_text(encoding="utf-8")


def import_file(path: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # Triton's jit reads kernel sources through the module
    spec.loader.exec_module(module)
    return module


class KernelChecker:
    """Runs candidate sources of one test problem against its reference ``Model`` at the small size."""

    def __init__(self, name: str, scratch: Path, directory: Path = KERNELS) -> None:
        import torch

        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.problem = import_file(directory / f"{name}.py", f"_mutate_problem_{directory.name}_{name}")
        for key, value in self.problem.KSMITH_SMALL.items():
            setattr(self.problem, key, value)
        self.scratch = scratch

    def output_dtype(self, source: str) -> str:
        return str(self._run(source)[1].dtype).removeprefix("torch.")

    def max_error(self, source: str) -> float:
        expected, got = self._run(source)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        expected, got = expected.double(), got.double()
        return float((got - expected).abs().max() / (1.0 + expected.abs().max()))

    def _run(self, source: str):
        torch = self.torch
        path = self.scratch / f"cand_{source_id(source)}.py"
        path.write_text(source, encoding="utf-8")
        candidate = import_file(path, f"_mutate_candidate_{source_id(source)}")
        init = self.problem.get_init_inputs()
        torch.manual_seed(0)
        reference = self.problem.Model(*init).to(self.device)
        torch.manual_seed(0)
        model = candidate.ModelNew(*init).to(self.device)
        torch.manual_seed(1)
        inputs = [x.to(self.device) for x in self.problem.get_inputs()]
        with torch.no_grad():
            expected = reference(*inputs)
            with _poisoned_allocations(torch):
                return expected, model(*inputs)


@contextlib.contextmanager
def _poisoned_allocations(torch) -> Iterator[None]:
    """Floating-point tensors a candidate makes with ``torch.empty`` / ``torch.empty_like`` come filled with NaN, as
    the evaluator poisons outputs: what a broken variant never writes cannot hold an earlier run's right values
    (the allocator hands a freed output back)."""
    originals = {name: getattr(torch, name) for name in ("empty", "empty_like")}

    def poisoned(make):
        def allocate(*args, **kwargs):
            tensor = make(*args, **kwargs)
            return tensor.fill_(float("nan")) if tensor.is_floating_point() else tensor

        return allocate

    for name, make in originals.items():
        setattr(torch, name, poisoned(make))
    try:
        yield
    finally:
        for name, make in originals.items():
            setattr(torch, name, make)


@pytest.fixture
def kernel_checker(tmp_path):
    return lambda name: KernelChecker(name, tmp_path)
