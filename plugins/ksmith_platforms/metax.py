"""MetaX GPUs (C500 and kin): MetaX's Triton fork mcTriton (backend ``maca``), 64-lane warps, ``mxcc``.

Written from MetaX's public sources (mcTriton, mcPytorch, vLLM-metax, maca-samples; see the MACA reference's
§5) and tested with faked signals only. **Not run on MetaX hardware**: ``ksmith doctor --backend maca``
checks a machine's toolchain and runs the conformance set there.

- Detection, surest first: mcTriton's active driver names ``maca``; ``+metax`` in torch's or Triton's
  version; ``MACA_PATH``, ``mxcc`` under it, ``/dev/mxcd`` or ``mx-smi``; a device name like ``MXC500``.
  The vendor torch calls the device ``cuda`` (``torch.cuda.is_available()`` is True), so NVIDIA's detection
  steps aside whenever one of these says MetaX.
- A warp is 64 lanes; ``num_warps`` must be a power of two up to 16 (mcTriton's ``MACAOptions``).
- mcTriton takes MACA-only compile options, as launch keyword arguments or ``triton.Config`` kwargs:
  ``pipeline`` (``"basic"``, ``"cpasync"``) and ``scenario`` (``;``-separated hints). Upstream Triton
  rejects them, so they are proposed only here.
- Native sources compile with ``$MACA_PATH/mxgpu_llvm/bin/mxcc -x maca ... --maca-path=$MACA_PATH``; torch's
  extension builder goes through cu-bridge (``CUDA_HOME=$MACA_PATH/tools/cu-bridge``).
"""

from __future__ import annotations

import os
from pathlib import Path

from ksmith_core.platform import (
    BY_DEVICE_NAME,
    BY_TOOLCHAIN_ON_DISK,
    BY_TRITON_DRIVER,
    BY_VERSION_STRING,
    DEFAULT_MACA_PATH,
    NativeCompiler,
    PlatformFacts,
    PlatformSignals,
)

NAME = "metax"
TRITON_BACKEND = "maca"

# mcTriton's MACA-only compile options worth proposing for any kernel. The scenario hints made for one kind
# of kernel (``mla``, ``flashattn-fwd``, ``flashattn-bwd``) are left to whoever writes such a kernel.
PIPELINES = ("basic", "cpasync")
SCENARIOS = ("storeCoalesce", "unprefetch", "fullstage", "singleshm", "unroll", "noaddropt")

NOT_VERIFIED = (
    "not run on MetaX hardware: detection, limits, options and compile commands follow MetaX's public "
    "sources and are tested with faked signals only; `ksmith doctor --backend maca` checks a real machine"
)


def metax_marked(signals: PlatformSignals) -> bool:
    """A vendor version string says MetaX (its torch calls the GPU cuda, so this must come before NVIDIA)."""
    return "metax" in signals.torch_version.lower() or "metax" in signals.triton_version.lower()


def maca_path(signals: PlatformSignals) -> str:
    return signals.environ.get("MACA_PATH") or DEFAULT_MACA_PATH


def detect(signals: PlatformSignals) -> int | None:
    if signals.triton_backend == TRITON_BACKEND:
        return BY_TRITON_DRIVER
    if signals.triton_backend:
        return None
    if metax_marked(signals):
        return BY_VERSION_STRING
    mxcc = f"{maca_path(signals)}/mxgpu_llvm/bin/mxcc"
    if (
        "MACA_PATH" in signals.environ
        or {mxcc, "/dev/mxcd"} & signals.existing_paths
        or signals.has_executable("mx-smi")
        or signals.has_executable("mxcc")
    ):
        return BY_TOOLCHAIN_ON_DISK
    name = signals.device_name or ""
    if "metax" in name.lower() or name.upper().startswith("MXC"):
        return BY_DEVICE_NAME
    return None


def mxcc(signals: PlatformSignals) -> NativeCompiler:
    root = maca_path(signals)
    path = Path(root) / "mxgpu_llvm" / "bin" / "mxcc"
    found = path.is_file() and os.access(path, os.X_OK)
    on_path = signals.executables.get("mxcc")
    executable = str(path) if found or not on_path else on_path
    bridge = f"{root}/tools/cu-bridge"
    return NativeCompiler(
        name="mxcc",
        executable=executable,
        language=("-x", "maca"),
        flags=("-O3", "-std=c++17", "-fPIC", f"--maca-path={root}"),
        env={"MACA_PATH": root, "CUDA_HOME": bridge, "CUCC_PATH": bridge},
        found=bool(found or on_path),
    )


def facts(signals: PlatformSignals) -> PlatformFacts:
    return PlatformFacts(
        platform=NAME,
        vendor="MetaX",
        triton_backend=TRITON_BACKEND,
        device_name=signals.device_name,
        warp_size=signals.triton_warp_size or 64,
        num_warps=(1, 2, 4, 8, 16),
        num_stages=(1, 5),
        shared_memory_bytes=signals.max_shared_memory,  # not published: only the device can say
        launch_options={"pipeline": PIPELINES, "scenario": SCENARIOS},
        features=frozenset(),
        peak_bandwidth_bytes_s=None,
        peak_flops_s=None,
        native_compiler=mxcc(signals),
        verified=False,
        notes=(NOT_VERIFIED,),
    )
