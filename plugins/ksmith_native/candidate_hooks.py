"""Set up in the candidate's process before the candidate is imported (``job["candidate_setup"]``).

``torch.utils.cpp_extension.load_inline`` no longer compiles: it finds the library the driver built for the
same arguments (copied into this process's scratch directory and checked against its sha256 before any
candidate code runs) and returns it with every function counted as a launch. Nothing here moves the
dispatch accounting: torch ops the C++ code dispatches reach the guards' dispatch mode as any torch op in
``forward`` does, and are refused unless the problem allows them. ``load`` (sources from files) is refused.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import shutil
import types
from pathlib import Path
from typing import Any

from ksmith_native.spec import ExtensionSpec

NOT_BUILT = (
    "ksmith: this load_inline call was not built before the candidate ran (its arguments differ from the "
    "module constants the harness read); write the sources and flags as module-level constants"
)


def install(guards: Any, job: dict[str, Any]) -> None:
    import torch.utils.cpp_extension as cpp_extension

    libraries = _copy_and_check(job.pop("native_extensions", {}))
    modules: dict[str, Any] = {}

    def load_inline(*args: Any, **kwargs: Any) -> Any:
        spec = ExtensionSpec.from_call(args, kwargs)  # NativeSourceError: the candidate's import fails
        entry = libraries.get(spec.key)
        if entry is None:
            raise ImportError(NOT_BUILT)
        if spec.key not in modules:
            modules[spec.key] = CountedExtension(_load_library(spec.name, entry), guards)
        return modules[spec.key]

    def load(*args: Any, **kwargs: Any) -> Any:
        raise ImportError(
            "ksmith: cpp_extension.load builds from files; the cuda backend builds load_inline only"
        )

    cpp_extension.load_inline = load_inline
    cpp_extension.load = load
    guards.capture("torch.utils.cpp_extension.load_inline", cpp_extension, "load_inline")
    guards.capture("torch.utils.cpp_extension.load", cpp_extension, "load")
    guards.kernel_noun = "kernel of its compiled extension"
    guards.kernel_plural = "kernels of its compiled extension"
    guards.no_launch_code = "NO_KERNEL_LAUNCH"


def _copy_and_check(table: dict[str, dict[str, str]]) -> dict[str, Path]:
    """Each library copied here (a private copy no other process loads), then checked: the cache is
    writable by anyone running as this user."""
    here = Path.cwd() / "native"
    here.mkdir(mode=0o700, exist_ok=True)
    libraries: dict[str, Path] = {}
    for key, entry in table.items():
        target = here / key[:16] / f"{entry['name']}.so"
        target.parent.mkdir(mode=0o700)
        shutil.copyfile(entry["path"], target)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        if digest != entry["sha256"]:
            raise RuntimeError(
                f"NATIVE_CACHE_CHANGED: the built library {entry['path']} changed after it was built "
                "(something wrote into ksmith's compile cache); remove the cache entry and evaluate again"
            )
        libraries[key] = target
    return libraries


def _load_library(name: str, path: Path) -> types.ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class CountedExtension(types.ModuleType):
    """The loaded extension as the candidate sees it: the same functions, each call counted as a launch
    (and, on a GPU, a call made while a non-default stream is current counted as a side-stream launch)."""

    def __init__(self, module: types.ModuleType, guards: Any) -> None:
        super().__init__(module.__name__, module.__doc__)
        self.__file__ = getattr(module, "__file__", None)
        for attr in dir(module):
            if attr.startswith("__"):
                continue
            value = getattr(module, attr)
            setattr(self, attr, _counted(value, guards) if callable(value) else value)


def _counted(function: Any, guards: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        if guards.device == "cuda" and guards._raw_stream(guards._device_index) != guards._default_raw_stream:
            guards.side_stream_launches += 1
        result = function(*args, **kwargs)
        guards.launches += 1
        return result

    call.__name__ = getattr(function, "__name__", "kernel")
    call.__qualname__ = call.__name__
    call.__doc__ = getattr(function, "__doc__", None)
    return call
