"""A kernel of the harness's own, launched by an idle candidate worker before its job arrives.

Its first launch in a process loads Triton's backend, its launcher and the CUDA driver glue, and, launched
under the guards' ``TorchDispatchMode``, the parts of torch that a kernel launch inside a dispatch mode
imports lazily (``torch._higher_order_ops.triton_kernel_wrap``, which pulls in dynamo and sympy: seconds).
Otherwise all of that would be paid inside the candidate's first call. It lives in its own module so that a
candidate's module-level code never shares a namespace with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl


@triton.jit
def _fill(out_ptr, value, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, value, mask=offsets < n)


def _launch(out: Any) -> Any:
    _fill[(1,)](out, 1.0, out.numel(), BLOCK=64)
    return out


def prepare_warm_kernel(device: str, step: Callable[[str], None] = lambda name: None) -> None:
    """The slow part of a GPU worker's warm-up, which launches no kernel: the CUDA context, and the warm-up
    kernel compiled (or read from Triton's cache) and loaded. Seconds of host work on a busy machine, so a
    worker does it before it takes the GPU's lock (``candidate_side.warm_up``); nothing to do on the CPU.
    ``step`` is told when the context exists (``cuda_context``) and when the kernel is loaded (``compiled``)."""
    if device != "cuda":
        return
    import torch

    torch.cuda.init()
    torch.cuda.synchronize()  # creates the context; there is nothing queued to wait for
    step("cuda_context")
    out = torch.empty(64, device=device)  # its block stays in the allocator's cache for the launch
    compiled = _fill.warmup(out, 1.0, out.numel(), BLOCK=64, grid=(1,))
    # Loading the module is a driver call, not GPU work: done here, it stays out of the shared hold that the
    # launch takes (with two GPUs of the host busy, that hold took 0.06-0.17 s; docs/benchmarks.md §8i).
    load = getattr(compiled, "_init_handles", None)
    if callable(load):
        load()
    step("compiled")


def run_warm_kernel(device: str) -> None:
    """Launch the kernel once through the same guarded path a candidate's forward takes, and check it.

    The kernel writes every element, so the buffer needs no zeroing, and the result is checked on the host:
    no torch kernel runs here (each would be loaded lazily, inside the hold, on its first launch)."""
    import torch

    from ksmith_triton.guards import Guards

    out = torch.empty(64, device=device)
    Guards(frozenset(), device).run_forward(_launch, [out])  # never installed: only its dispatch mode
    if device == "cuda":
        torch.cuda.synchronize()
    if out.cpu().tolist() != [1.0] * 64:
        raise RuntimeError("the warm-up kernel computed a wrong result: Triton on this device is broken")
