"""``torch.compile(model, backend="kernelsmith")``: evolved kernels swapped into real models.

The backend is registered under the name ``kernelsmith`` both by importing this package and through the
``torch_dynamo_backends`` entry point (so ``backend="kernelsmith"`` works with no import at all).
"""

from __future__ import annotations

from .backend import Recorder, Region, kernelsmith_backend, swap_regions
from .library import Entry, Library, LibraryWarning, load_library

__all__ = [
    "Entry",
    "Library",
    "LibraryWarning",
    "Recorder",
    "Region",
    "kernelsmith_backend",
    "load_library",
    "swap_regions",
]


def _register() -> None:
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "kernelsmith" not in _BACKENDS:
        register_backend(compiler_fn=kernelsmith_backend, name="kernelsmith")


_register()
