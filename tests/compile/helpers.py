"""What the compile tests share: the tiny decoder, Dynamo graphs without Inductor, Triton launch counting."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

DATA = Path(__file__).parent / "data"


def tiny_llama() -> tuple[torch.nn.Module, list[torch.Tensor]]:
    return load_model_file(DATA / "tiny_llama.py")


def load_model_file(path: Path) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """A KernelBench-format model file's model (seeded) and inputs; the data models are transformers' Llama."""
    pytest.importorskip("transformers")  # the train extra
    spec = importlib.util.spec_from_file_location(f"ksmith_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return module.Model().eval(), module.get_inputs()


def dynamo_graph(fn: Any, *args: Any, dynamic: bool = False) -> tuple[torch.fx.GraphModule, list[Any]]:
    """Dynamo's (first) graph of ``fn(*args)``, as a backend receives it."""
    box: dict[str, Any] = {}

    def grab(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        box.setdefault("gm", gm)
        box.setdefault("inputs", example_inputs)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=grab, dynamic=dynamic)(*args)
    return box["gm"], box["inputs"]


@contextlib.contextmanager
def triton_launches(entry: Any) -> Iterator[list[str]]:
    """Every launch of a Triton kernel defined in the entry's kernel file, by kernel name."""
    module = sys.modules[type(entry.kernel).__module__]
    kernels = [obj for obj in vars(module).values() if hasattr(obj, "pre_run_hooks") and hasattr(obj, "fn")]
    assert kernels, "the entry's kernel file defines no Triton kernel"
    launched: list[str] = []
    hooks = []
    for kernel in kernels:

        def hook(*args: Any, _name: str = kernel.fn.__name__, **kwargs: Any) -> None:
            launched.append(_name)

        kernel.pre_run_hooks.append(hook)
        hooks.append((kernel, hook))
    try:
        yield launched
    finally:
        for kernel, hook in hooks:
            kernel.pre_run_hooks.remove(hook)
