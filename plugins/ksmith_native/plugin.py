"""Registers the ``cuda`` backend: KernelBench-format C++/CUDA candidates (``load_inline``)."""

from __future__ import annotations

from ksmith_core import hookimpl
from ksmith_core.capabilities import Backend
from ksmith_native.backend import NAME, evaluate

CUDA = Backend(
    NAME,
    evaluate,
    "C++/CUDA kernels built with torch.utils.cpp_extension.load_inline (KernelBench's CUDA format), judged "
    "under the Triton backend's protocol",
    language="cuda",
)


@hookimpl
def ksmith_register_backends(register):
    register(CUDA)
