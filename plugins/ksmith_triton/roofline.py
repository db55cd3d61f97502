"""The roofline floor: the least time the hardware needs to move a problem's bytes and do its FLOPs.

Bytes moved are the inputs read once plus the outputs written once; FLOPs come from the problem's optional
``ksmith_flops(*inputs)``. Ceilings are measured on the GPU itself (a large copy, a large bf16 matmul) and
bounded by the platform's datasheet peaks where the platform knows them (:func:`ceilings_within_peaks`).
"""

from __future__ import annotations

from typing import Any


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


CEILING_PEAKS = {"bandwidth_bytes_s": "peak_bandwidth_bytes_s", "flops_s": "peak_flops_s"}


def platform_peaks(device_name: str | None = None) -> dict[str, Any]:
    """The detected platform's name and datasheet peaks for ``device_name`` (``ksmith_core.platform``; read
    without touching the device); ``{}`` when none is known."""
    try:
        from dataclasses import replace

        from ksmith_core.platform import current_signals, platform_facts

        signals = current_signals()
        if device_name:
            signals = replace(signals, device_name=device_name)
        facts = platform_facts(signals=signals)
    except Exception:  # noqa: BLE001 - no platform plugin, or a broken one: measured ceilings alone
        return {}
    if facts is None:
        return {}
    peaks = {key: getattr(facts, attr) for key, attr in CEILING_PEAKS.items() if getattr(facts, attr)}
    return {"platform": facts.platform, "device_name": facts.device_name, **peaks}


def ceilings_within_peaks(measured: dict[str, float], peaks: dict[str, Any]) -> dict[str, float]:
    """The ceilings the roofline divides by: each measured one (a device-to-device copy, a large bf16
    matmul), bounded by the platform's datasheet peak where it knows one -- a measurement above the datasheet
    is an artefact (a cache hit, a clock misread) and would make every kernel look farther from its roofline
    than it is -- and the peak itself where nothing was measured."""
    out = dict(measured)
    for key in CEILING_PEAKS:
        peak = peaks.get(key)
        value = measured.get(key) or 0.0
        if peak and (value <= 0 or value > peak):
            out[key] = float(peak)
    return out
