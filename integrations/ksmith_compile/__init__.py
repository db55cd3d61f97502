"""``torch.compile(model, backend="kernelsmith")``: evolved kernels swapped into real models.

The backend is registered under the name ``kernelsmith`` through the ``torch_dynamo_backends`` entry point, so
``backend="kernelsmith"`` works with no import at all (torch loads it the first time the name is looked up),
and it is registered by importing this package too.

Importing the package is cheap: every ``ksmith`` command loads it as a plugin, and the backend's modules import
``torch._dynamo`` and Inductor (seconds). So the names below load their module on first use, and the import
registers the backend itself only where the entry point cannot (the package used from a source tree without
being installed) or where ``torch._dynamo`` is loaded already.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

_MODULE_OF = {
    "Recorder": "backend",
    "Region": "backend",
    "kernelsmith_backend": "backend",
    "swap_regions": "backend",
    "Entry": "library",
    "Library": "library",
    "LibraryWarning": "library",
    "load_library": "library",
}
__all__ = sorted(_MODULE_OF)
ENTRY_POINT = "ksmith_compile.backend:kernelsmith_backend"


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def _entry_point_installed() -> bool:
    from importlib.metadata import entry_points

    return any(
        ep.value == ENTRY_POINT for ep in entry_points(group="torch_dynamo_backends", name="kernelsmith")
    )


def _register() -> None:
    if "torch._dynamo" not in sys.modules and _entry_point_installed():
        return  # torch finds the backend through its entry point when the name is first looked up
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "kernelsmith" not in _BACKENDS:
        register_backend(compiler_fn=__getattr__("kernelsmith_backend"), name="kernelsmith")


_register()
