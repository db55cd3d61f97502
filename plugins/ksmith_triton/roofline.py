"""The roofline floor: the least time the hardware needs to move a problem's bytes and do its FLOPs.

What the reference process reports of the problem (``reference_side.ReferenceOutputs.meta``): bytes moved are
the inputs read once, the outputs written once and the model's parameters and buffers read once; FLOPs come
from the problem's optional ``ksmith_flops(*inputs)``, else from torch's ``FlopCounterMode`` around the
reference's forward (matmuls, convolutions, attention; elementwise work counts as none). Ceilings are measured
on the GPU itself (a large copy; large bf16 and fp32 matmuls) and bounded by the platform's datasheet peaks
where the platform knows them (:func:`ceilings_within_peaks`). The FLOP/s ceiling follows the problem's
compute dtype (:func:`flops_ceiling`): an fp32 problem against the fp32 matmul's best (TF32 tensor cores), the
rest against bf16.
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
    runtime_ms: float, bytes_moved: float, flops: float, bandwidth_bytes_s: float, flops_s: float
) -> float | None:
    """Floor time / measured time: 1.0 means the kernel runs at the hardware's limit."""
    if runtime_ms <= 0:
        return None
    floor = floor_ms(bytes_moved, flops, bandwidth_bytes_s, flops_s)
    return floor / runtime_ms if floor > 0 else None


# Compute dtypes held to the fp32 matmul's ceiling: a bf16 matmul's rate is out of their reach. (fp64 has no
# ceiling of its own; the fp32 one is still nearer than bf16's.)
FP32_CEILING_DTYPES = ("float32", "float64")


def flops_ceiling(ceilings: dict[str, float], compute_dtype: str | None) -> float:
    """The FLOP/s ceiling for a problem computing in ``compute_dtype``: ``flops_s_fp32`` for fp32 and fp64
    where it was measured, else the bf16 matmul's ``flops_s`` (bf16, fp16, no floating-point tensor at all,
    or ceilings cached before fp32 was measured)."""
    if compute_dtype in FP32_CEILING_DTYPES and ceilings.get("flops_s_fp32", 0.0) > 0:
        return float(ceilings["flops_s_fp32"])
    return float(ceilings.get("flops_s", 0.0))


def bytes_moved(meta: dict[str, Any]) -> int:
    """Bytes the problem must move at least once: its inputs and the model's parameters and buffers read,
    its outputs written (a GEMM's weight is most of what it reads)."""
    return sum(int(meta.get(key) or 0) for key in ("input_bytes", "output_bytes", "param_bytes"))


def place_on_roofline(
    runtime_ms: float, meta: dict[str, Any], ceilings: dict[str, float]
) -> tuple[float | None, str | None]:
    """(roofline fraction, bound) of a call taking ``runtime_ms``, for the work ``meta`` describes (the
    reference process's ``input_bytes``, ``output_bytes``, ``param_bytes``, ``flops``, ``compute_dtype``)."""
    moved, flops = bytes_moved(meta), float(meta.get("flops") or 0.0)
    bandwidth, flops_s = (
        ceilings.get("bandwidth_bytes_s", 0.0),
        flops_ceiling(ceilings, meta.get("compute_dtype")),
    )
    return (
        roofline_fraction(runtime_ms, moved, flops, bandwidth, flops_s),
        roofline_bound(moved, flops, bandwidth, flops_s),
    )


def roofline_work(meta: dict[str, Any], ceilings: dict[str, float]) -> dict[str, Any]:
    """What a roofline was worked out from, for the verdict's details: where its FLOPs came from (or why
    there are none), the bytes, the compute dtype and the FLOP/s ceiling that dtype picked."""
    work = {
        "bytes_moved": bytes_moved(meta),
        "flops": float(meta.get("flops") or 0.0),
        "flops_source": meta.get("flops_source"),
        "compute_dtype": meta.get("compute_dtype"),
        "flops_ceiling": flops_ceiling(ceilings, meta.get("compute_dtype")),
    }
    if meta.get("flops_error"):
        work["flops_error"] = meta["flops_error"]
    return work


CEILING_PEAKS = {"bandwidth_bytes_s": "peak_bandwidth_bytes_s", "flops_s": "peak_flops_s"}
# Ceilings with no datasheet figure of their own, bounded by another's peak. No platform publishes the fp32
# matmul rate, but the dense bf16 peak is far above it on every GPU, so a measurement past that is an
# artefact all the same. Such a peak never stands in for a missing measurement: :func:`flops_ceiling` then
# falls back to ``flops_s``.
BOUNDED_BY_PEAK_OF = {"flops_s_fp32": "flops_s"}


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
    """The ceilings the roofline divides by: each measured one (a device-to-device copy, large bf16 and fp32
    matmuls), bounded by the platform's datasheet peak where it knows one -- a measurement above the datasheet
    is an artefact (a cache hit, a clock misread) and would make every kernel look farther from its roofline
    than it is -- and the peak itself where nothing was measured (bandwidth and bf16 only: see
    :data:`BOUNDED_BY_PEAK_OF`)."""
    out = dict(measured)
    for key in CEILING_PEAKS:
        peak = peaks.get(key)
        value = measured.get(key) or 0.0
        if peak and (value <= 0 or value > peak):
            out[key] = float(peak)
    for key, peak_of in BOUNDED_BY_PEAK_OF.items():
        peak = peaks.get(peak_of)
        if peak and (measured.get(key) or 0.0) > peak:
            out[key] = float(peak)
    return out
