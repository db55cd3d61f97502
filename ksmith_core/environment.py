"""Facts about the machine and software a run or a benchmark was made on (for manifests and cache keys)."""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from functools import cache
from typing import Any


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@cache
def versions() -> dict[str, str | None]:
    return {
        "python": platform.python_version(),
        "kernel-smith": package_version("kernel-smith"),
        "torch": package_version("torch"),
        "triton": package_version("triton"),
        "numpy": package_version("numpy"),
    }


def default_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - a broken torch install still lets the CLI answer
        return "cpu"


def platform_summary() -> dict[str, Any]:
    """The detected platform's few facts for manifests and prompts (``{}`` when none is detected)."""
    try:
        from ksmith_core.platform import current_signals, platform_facts

        facts = platform_facts(signals=current_signals(probe_device=True))  # the device is open here already
    except Exception:  # noqa: BLE001 - no platform plugin, or a broken one: the facts go without
        return {}
    return facts.summary() if facts is not None else {}


@cache
def device_facts(device: str) -> dict[str, Any]:
    facts: dict[str, Any] = {"device": device, "machine": platform.machine(), "platform": sys.platform}
    if device == "cuda":
        import torch

        props = torch.cuda.get_device_properties(0)
        facts.update(
            name=props.name,
            capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
        )
        facts.update(platform_summary())
    else:
        facts["name"] = f"cpu ({platform.processor() or platform.machine()}), Triton interpreter"
    return facts
