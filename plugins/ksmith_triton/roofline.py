"""The roofline floor: the least time the hardware needs to move a problem's bytes and do its FLOPs.

Bytes moved are the inputs read once plus the outputs written once; FLOPs come from the problem's optional
``ksmith_flops(*inputs)``. Ceilings are measured on the GPU itself (a large copy, a large bf16 matmul).
"""

from __future__ import annotations


def floor_ms(bytes_moved: float, flops: float, bandwidth_bytes_s: float, flops_s: float) -> float:
    seconds = max(
        bytes_moved / bandwidth_bytes_s if bandwidth_bytes_s > 0 else 0.0,
        flops / flops_s if flops_s > 0 else 0.0,
    )
    return seconds * 1e3


def roofline_bound(bytes_moved: float, flops: float, bandwidth_bytes_s: float, flops_s: float) -> str | None:
    """``"memory"`` or ``"compute"``: which of the two floors is the higher one (None if neither is known)."""
    memory = bytes_moved / bandwidth_bytes_s if bandwidth_bytes_s > 0 else 0.0
    compute = flops / flops_s if flops_s > 0 else 0.0
    if memory <= 0 and compute <= 0:
        return None
    return "memory" if memory >= compute else "compute"


def roofline_fraction(
    runtime_ms: float, bytes_moved: float, flops: float, ceilings: dict[str, float]
) -> float | None:
    """Floor time / measured time: 1.0 means the kernel runs at the hardware's limit."""
    if runtime_ms <= 0:
        return None
    floor = floor_ms(bytes_moved, flops, ceilings.get("bandwidth_bytes_s", 0.0), ceilings.get("flops_s", 0.0))
    return floor / runtime_ms if floor > 0 else None
