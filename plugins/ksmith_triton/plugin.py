"""Registers the Triton / NVIDIA evaluation backend (the protocol itself lives in ``evaluator.py``)."""

from __future__ import annotations

from ksmith_core import hookimpl
from ksmith_core.capabilities import Backend
from ksmith_triton.evaluator import evaluate, evaluate_many

BACKEND = "triton"
TRITON = Backend(
    BACKEND,
    evaluate,
    "Triton kernels on NVIDIA GPUs (or the Triton interpreter on CPU), isolated and guarded",
)

__all__ = ["BACKEND", "TRITON", "evaluate_many", "ksmith_register_backends"]


@hookimpl
def ksmith_register_backends(register):
    register(TRITON)
