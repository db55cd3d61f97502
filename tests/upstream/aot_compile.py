"""Compile an imported seed's kernels for an H100 (sm_90) without a GPU: ``python aot_compile.py PROBLEM...``.

The seed's ``forward`` runs on meta tensors at full size with launches intercepted, and each launch is compiled
ahead of time with Triton's own compiler (as ``tests/problems/compile_for_gpu.py`` does for the suite). ``None``
arguments are constexprs, as Triton treats them. This finds lowering errors the interpreter does not see. Run
it with TRITON_INTERPRET unset. Prints one line per problem; exits 1 if any failed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

H100 = GPUTarget("cuda", 90, 32)
LAUNCH_OPTIONS = ("num_warps", "num_stages")
POINTERS = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.int32: "*i32"}
POINTERS |= {torch.int64: "*i64", torch.int8: "*i8", torch.bool: "*i1"}


def _import(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _type(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return POINTERS[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"unsupported kernel argument {value!r}")


def compile_seed(problem: Path) -> int:
    launches: list[tuple[JITFunction, tuple, dict]] = []
    module = _import(problem)
    seed = _import(problem.with_name(problem.stem + ".seed.py"))
    original = JITFunction.__getitem__
    JITFunction.__getitem__ = lambda self, grid: lambda *a, **k: launches.append((self, a, k))
    try:
        with torch.device("meta"):
            model = seed.ModelNew(*module.get_init_inputs())
            inputs = module.get_inputs()
        with torch.no_grad():
            model(*inputs)
    finally:
        JITFunction.__getitem__ = original
    if not launches:
        raise RuntimeError("no kernel launch captured")
    for kernel, args, kwargs in launches:
        names = kernel.arg_names
        values = dict(zip(names, args))
        values.update({k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS})
        const = {names[i] for i in kernel.constexprs} | {
            n for n in names if n in values and values[n] is None
        }
        signature = {n: "constexpr" if n in const else _type(values[n]) for n in names if n in values}
        constexprs = {n: values[n] for n in names if n in const and n in values}
        options = {k: kwargs[k] for k in LAUNCH_OPTIONS if k in kwargs}
        triton.compile(
            ASTSource(fn=kernel, signature=signature, constexprs=constexprs), target=H100, options=options
        )
    return len(launches)


def main(paths: list[str]) -> int:
    failed = 0
    for path in paths:
        try:
            print(f"OK {path} {compile_seed(Path(path))}")
        except Exception as exc:  # noqa: BLE001 - every failure is reported, per problem
            failed += 1
            print(f"FAIL {path} {type(exc).__name__}: {str(exc)[-400:]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
