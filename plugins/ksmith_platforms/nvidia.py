"""NVIDIA GPUs: upstream Triton's ``cuda`` backend, 32-lane warps, nvcc for native sources."""

from __future__ import annotations

import os
from pathlib import Path

from ksmith_core.platform import (
    BY_DEVICE_NAME,
    BY_TOOLCHAIN_ON_DISK,
    BY_TRITON_DRIVER,
    BY_VERSION_STRING,
    NativeCompiler,
    PlatformFacts,
    PlatformSignals,
)
from ksmith_platforms.metax import metax_marked

NAME = "nvidia"
TRITON_BACKEND = "cuda"

# Shared memory one block may use on an H100 (227 KiB): the limit where the device cannot be asked.
H100_SHARED_MEMORY_BYTES = 227 * 1024

# Datasheet peaks (HBM bandwidth, dense bf16 tensor FLOP/s) by a substring of the device's name, most
# specific first. The roofline uses measured ceilings; these bound them (docs/platforms.md).
PEAKS: tuple[tuple[str, float, float], ...] = (
    ("H100 PCIe", 2.0e12, 756e12),
    ("H100 NVL", 3.9e12, 835e12),
    ("H100", 3.35e12, 989e12),  # SXM5 80GB HBM3
    ("H200", 4.8e12, 989e12),
    ("A100-SXM4-80GB", 2.039e12, 312e12),
    ("A100 80GB PCIe", 1.935e12, 312e12),
    ("A100", 1.555e12, 312e12),  # 40GB
    ("L40S", 0.864e12, 362e12),
)

COMPILE_FLAGS = ("-O3", "-std=c++17", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC")


def detect(signals: PlatformSignals) -> int | None:
    if signals.triton_backend == TRITON_BACKEND:
        return BY_TRITON_DRIVER
    if signals.triton_backend or metax_marked(signals):
        return None  # another platform's driver, or a vendor build that calls its GPU cuda
    if signals.gpu_available and signals.torch_cuda and not signals.torch_hip:
        return BY_VERSION_STRING
    if {"/dev/nvidiactl", "/dev/nvidia0"} & signals.existing_paths or signals.has_executable("nvidia-smi"):
        return BY_TOOLCHAIN_ON_DISK
    if (signals.device_name or "").startswith("NVIDIA"):
        return BY_DEVICE_NAME
    return None


def peaks(device_name: str | None) -> tuple[float | None, float | None]:
    for marker, bandwidth, flops in PEAKS:
        if device_name and marker in device_name:
            return bandwidth, flops
    return None, None


def arch_number(signals: PlatformSignals) -> int | None:
    """The target architecture as Triton numbers it (90 for sm_90), from its driver or from nvidia-smi."""
    try:
        if signals.triton_arch:
            return int(signals.triton_arch)
        if signals.compute_capability:
            major, _, minor = signals.compute_capability.partition(".")
            return int(major) * 10 + int(minor or 0)
    except ValueError:
        pass
    return None


def nvcc(signals: PlatformSignals) -> NativeCompiler:
    """nvcc from CUDA_HOME (or CUDA_PATH), else PATH, else /usr/local/cuda; compiling for the device's arch."""
    candidates = [
        Path(root) / "bin" / "nvcc"
        for root in (signals.environ.get("CUDA_HOME"), signals.environ.get("CUDA_PATH"))
        if root
    ]
    if signals.executables.get("nvcc"):
        candidates.append(Path(signals.executables["nvcc"]))
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    found = next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)
    executable = str(found) if found else "nvcc"
    arch = arch_number(signals)
    arch_flags = (f"-gencode=arch=compute_{arch},code=sm_{arch}",) if arch else ()
    env: dict[str, str] = {}
    if found is not None:
        home = _cuda_home(found)
        if home:
            env["CUDA_HOME"] = home
    if arch:
        env["TORCH_CUDA_ARCH_LIST"] = f"{arch // 10}.{arch % 10}"
    return NativeCompiler(
        name="nvcc",
        executable=executable,
        language=("-x", "cu"),
        flags=COMPILE_FLAGS,
        arch_flags=arch_flags,
        env=env,
        found=found is not None,
    )


def _cuda_home(nvcc_path: Path) -> str | None:
    """The CUDA root of an nvcc (what torch's extension builder wants as CUDA_HOME): the parent of its bin/
    directory, links followed, when that holds CUDA's headers; else /usr/local/cuda when it does (a wrapper
    script elsewhere on PATH, such as /usr/local/bin/nvcc running /usr/local/cuda-13.0/bin/nvcc)."""
    for root in (nvcc_path.resolve().parent.parent, Path("/usr/local/cuda")):
        if (root / "include" / "cuda_runtime.h").is_file() and (root / "bin" / "nvcc").exists():
            return str(root)
    return None


def facts(signals: PlatformSignals) -> PlatformFacts:
    arch = arch_number(signals)
    bandwidth, flops = peaks(signals.device_name)
    return PlatformFacts(
        platform=NAME,
        vendor="NVIDIA",
        triton_backend=TRITON_BACKEND,
        device_name=signals.device_name,
        warp_size=signals.triton_warp_size or 32,
        num_warps=(1, 2, 4, 8, 16, 32),
        num_stages=(1, 5),
        shared_memory_bytes=signals.max_shared_memory or H100_SHARED_MEMORY_BYTES,
        # TMA tensor descriptors need Hopper (sm_90) or newer; unknown arch (no GPU here): the H100 first.
        features=frozenset({"tma"}) if arch is None or arch >= 90 else frozenset(),
        peak_bandwidth_bytes_s=bandwidth,
        peak_flops_s=flops,
        native_compiler=nvcc(signals),
        verified=True,
    )
