"""Platforms: what differs between kinds of GPU, behind one small interface.

A :class:`~ksmith_core.capabilities.Platform` (registered like every capability, so a third party can add
one) answers two questions from the same :class:`PlatformSignals`:

``detect(signals) -> int | None``
    How surely this machine is this platform: ``1`` when Triton's active driver names the platform's backend
    (``triton.runtime.driver.active.get_current_target().backend``), ``2`` from version strings (a vendor
    build of torch or Triton), ``3`` from the toolchain or device files on disk, ``4`` from the device's name;
    ``None`` when nothing says so. The surest platform wins; a tie goes to the one registered first.
``facts(signals) -> PlatformFacts``
    What backends, proposers and the roofline read: the device's name, warp size, the ``num_warps`` a launch
    may use, the range of ``num_stages``, shared memory per block, extra Triton launch options, datasheet
    peaks for the roofline, and the compiler for native (C++/CUDA) sources.

:func:`gather_signals` is the only place that looks at the machine. Everything else is a pure function of the
signals, so tests fake a platform at that boundary (``PlatformSignals(triton_backend="maca", ...)``) and the
detection, the option mapping and the compile commands run the same as on the hardware.
``KSMITH_PLATFORM=NAME`` (a platform's name or its Triton backend name) skips detection.
"""

from __future__ import annotations

import os
import shlex
import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ksmith_core.errors import PluginError

if TYPE_CHECKING:
    from ksmith_core.capabilities import Platform

PLATFORM_ENV = "KSMITH_PLATFORM"

# Detection strengths, surest first (the order of docs/platforms.md and of the MACA reference's §5.2).
BY_TRITON_DRIVER = 1
BY_VERSION_STRING = 2
BY_TOOLCHAIN_ON_DISK = 3
BY_DEVICE_NAME = 4

# What gather_signals looks at on disk and on PATH; platforms read only these.
PROBED_ENV = ("MACA_PATH", "CUDA_HOME", "CUDA_PATH", "CUCC_PATH")
PROBED_EXECUTABLES = ("nvidia-smi", "nvcc", "mx-smi", "mxcc", "ninja", "c++")
DEFAULT_MACA_PATH = "/opt/maca"  # MetaX's usual install prefix, checked when MACA_PATH is unset


def _probed_paths(environ: Mapping[str, str]) -> tuple[str, ...]:
    maca = environ.get("MACA_PATH") or DEFAULT_MACA_PATH
    return (
        "/dev/nvidiactl",
        "/dev/nvidia0",
        "/dev/mxcd",
        f"{maca}/mxgpu_llvm/bin/mxcc",
    )


@dataclass(frozen=True)
class PlatformSignals:
    """Everything detection and facts may read about the machine, gathered once (:func:`gather_signals`)."""

    triton_backend: str | None = None  # the active Triton driver's target backend: "cuda", "maca", "hip"
    triton_arch: str | None = None  # that target's arch (an int on NVIDIA and MACA), as text
    triton_warp_size: int | None = None
    torch_version: str = ""
    triton_version: str = ""
    torch_cuda: str | None = None  # torch.version.cuda
    torch_hip: str | None = None  # torch.version.hip
    gpu_available: bool = False  # torch.cuda.is_available() (True on MetaX too: its torch calls it cuda)
    device_name: str | None = None
    compute_capability: str | None = None  # "9.0", from nvidia-smi (no device context needed)
    max_shared_memory: int | None = None  # bytes per block, from Triton's driver
    environ: Mapping[str, str] = field(default_factory=dict)  # the PROBED_ENV variables that are set
    existing_paths: frozenset[str] = frozenset()  # which probed paths exist
    executables: Mapping[str, str] = field(default_factory=dict)  # PROBED_EXECUTABLES found on PATH -> path

    def has_executable(self, name: str) -> bool:
        return name in self.executables


@dataclass(frozen=True)
class NativeCompiler:
    """The compiler for native kernel sources on a platform, and how to call it.

    :meth:`command` builds the command line for one source file; ``env`` is what a build needs in its
    environment (``CUDA_HOME`` for torch's extension builder, ``TORCH_CUDA_ARCH_LIST``, ...). Nothing here
    runs anything: the commands are data, so they are tested where the compiler is absent.
    """

    name: str  # "nvcc", "mxcc"
    executable: str  # a path, or the bare name when it was not found
    language: tuple[str, ...] = ()  # ("-x", "cu") / ("-x", "maca")
    flags: tuple[str, ...] = ()  # passed on every compile
    arch_flags: tuple[str, ...] = ()  # the target architecture
    env: Mapping[str, str] = field(default_factory=dict)
    version_args: tuple[str, ...] = ("--version",)
    found: bool = False  # whether ``executable`` exists on this machine

    def command(
        self,
        sources: Sequence[str | Path],
        output: str | Path,
        *,
        extra_flags: Sequence[str] = (),
        include_dirs: Sequence[str | Path] = (),
        shared: bool = False,
    ) -> list[str]:
        """The compile command: an object file for one source (``shared=False``), or a shared library."""
        cmd = [self.executable, *self.language, *self.flags, *self.arch_flags]
        cmd += [f"-I{d}" for d in include_dirs]
        cmd += [f for f in extra_flags if f]
        cmd += ["-shared"] if shared else ["-c"]
        cmd += [str(s) for s in sources]
        cmd += ["-o", str(output)]
        return cmd

    def version_command(self) -> list[str]:
        return [self.executable, *self.version_args]

    def describe(self) -> str:
        source = "kernel.cu" if "cu" in self.language else "kernel.cpp"
        return shlex.join(self.command([source], "kernel.o"))


@dataclass(frozen=True)
class PlatformFacts:
    """What differs between platforms, as backends, proposers and the roofline read it."""

    platform: str  # the registered name: "nvidia", "metax"
    vendor: str  # "NVIDIA", "MetaX"
    triton_backend: str  # Triton's target backend name: "cuda", "maca"
    device_name: str | None = None
    warp_size: int = 32
    num_warps: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # values a Triton launch may use
    num_stages: tuple[int, int] = (1, 5)  # lowest and highest num_stages worth proposing
    shared_memory_bytes: int | None = None  # per block; None: not known here
    # Extra Triton compile options a launch (or triton.Config) may take on this platform: name -> values worth
    # proposing. Empty on NVIDIA, where upstream Triton rejects unknown options.
    launch_options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    features: frozenset[str] = frozenset()  # "tma": tensor-descriptor loads compile here
    peak_bandwidth_bytes_s: float | None = None  # datasheet peaks for the roofline (None: not known)
    peak_flops_s: float | None = None  # dense bf16
    native_compiler: NativeCompiler | None = None
    verified: bool = True  # whether ksmith has been run on this platform's hardware
    notes: tuple[str, ...] = ()

    @property
    def max_num_warps(self) -> int:
        return max(self.num_warps)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["features"] = sorted(self.features)
        data["launch_options"] = {k: list(v) for k, v in self.launch_options.items()}
        if self.native_compiler is not None:
            data["native_compiler"] = {
                "name": self.native_compiler.name,
                "executable": self.native_compiler.executable,
                "found": self.native_compiler.found,
                "command": self.native_compiler.describe(),
            }
        return data

    def summary(self) -> dict[str, Any]:
        """The few facts a run's manifest and a prompt carry."""
        out: dict[str, Any] = {
            "accelerator": self.platform,
            "vendor": self.vendor,
            "triton_backend": self.triton_backend,
            "warp_size": self.warp_size,
            "max_num_warps": self.max_num_warps,
        }
        if self.launch_options:
            out["launch_options"] = {k: list(v) for k, v in self.launch_options.items()}
        if not self.verified:
            out["verified"] = False
        return out


def facts_from(value: PlatformFacts | Mapping[str, Any], name: str) -> PlatformFacts:
    """A platform's ``facts()`` as :class:`PlatformFacts` (a plain mapping of its fields is accepted)."""
    if isinstance(value, PlatformFacts):
        return value
    known = set(PlatformFacts.__dataclass_fields__)
    data = {k: v for k, v in dict(value).items() if k in known}
    data.setdefault("platform", name)
    data.setdefault("vendor", name)
    data.setdefault("triton_backend", name)
    for key in ("num_warps", "num_stages"):
        if key in data:
            data[key] = tuple(data[key])
    if "features" in data:
        data["features"] = frozenset(data["features"])
    return PlatformFacts(**data)


# --------------------------------------------------------------------------------------------------------------
# The boundary: the machine
# --------------------------------------------------------------------------------------------------------------


def gather_signals(probe_device: bool = True) -> PlatformSignals:
    """Read the machine: Triton's active driver, torch's and Triton's versions, devices and tools on disk.

    With ``probe_device`` a visible GPU is asked for its name and Triton's active driver for its target, warp
    size and shared memory, which initialises the device in this process (``ksmith doctor``, a run's manifest).
    Without, nothing touches the device: versions, files, the environment, ``torch.cuda.is_available()`` and,
    where there is ``nvidia-smi``, the first visible GPU's name and compute capability."""
    environ = {k: os.environ[k] for k in PROBED_ENV if os.environ.get(k)}
    executables = {name: path for name in PROBED_EXECUTABLES if (path := shutil.which(name))}
    existing = frozenset(p for p in _probed_paths(environ) if os.path.exists(p))
    values: dict[str, Any] = {"environ": environ, "executables": executables, "existing_paths": existing}
    try:
        import torch

        values.update(
            torch_version=str(torch.__version__),
            torch_cuda=getattr(torch.version, "cuda", None),
            torch_hip=getattr(torch.version, "hip", None),
            gpu_available=bool(torch.cuda.is_available()),
        )
        if probe_device and values["gpu_available"]:
            values["device_name"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - a broken torch still lets detection answer from the rest
        pass
    if not probe_device and values.get("gpu_available") and "nvidia-smi" in executables:
        values.update(_nvidia_smi(executables["nvidia-smi"]))
    try:
        import triton

        values["triton_version"] = str(getattr(triton, "__version__", ""))
        if probe_device and values.get("gpu_available") and os.environ.get("TRITON_INTERPRET") != "1":
            from triton.runtime import driver

            active = driver.active
            target = active.get_current_target()
            values["triton_backend"] = str(target.backend)
            values["triton_arch"] = str(target.arch)
            values["triton_warp_size"] = int(getattr(target, "warp_size", 0)) or None
            try:
                props = active.utils.get_device_properties(active.get_current_device())
                values["max_shared_memory"] = int(props["max_shared_mem"])
            except Exception:  # noqa: BLE001 - an older driver without the query: the platform's default
                pass
    except Exception:  # noqa: BLE001 - no Triton, or no active driver (a CPU machine)
        pass
    return PlatformSignals(**values)


def _nvidia_smi(executable: str) -> dict[str, Any]:
    """The first visible GPU's name and compute capability, asked of nvidia-smi (no CUDA context here)."""
    import subprocess

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    try:
        done = subprocess.run(
            [executable, "--query-gpu=name,compute_cap", "--format=csv,noheader", "-i", visible],
            capture_output=True,
            text=True,
            timeout=30,
        )
        name, capability = (part.strip() for part in done.stdout.strip().splitlines()[0].split(","))
    except (OSError, subprocess.TimeoutExpired, IndexError, ValueError):
        return {}
    return {"device_name": name or None, "compute_capability": capability or None}


_signals_lock = threading.Lock()
_signals: dict[bool, PlatformSignals] = {}


def current_signals(probe_device: bool = False) -> PlatformSignals:
    """This machine's signals, gathered once per process. Without ``probe_device`` (evaluations, proposers)
    the device is not touched -- unless something in this process has probed it already (a run's manifest,
    ``ksmith doctor``), whose fuller signals are then used."""
    with _signals_lock:
        if True in _signals:
            return _signals[True]
        if probe_device or False not in _signals:
            _signals[probe_device] = gather_signals(probe_device)
        return _signals[probe_device]


def forget_signals() -> None:
    """Gather again next time (tests, after changing the environment)."""
    with _signals_lock:
        _signals.clear()


# --------------------------------------------------------------------------------------------------------------
# Detection and lookup
# --------------------------------------------------------------------------------------------------------------


def _platforms() -> list[Platform]:
    from ksmith_core.capabilities import Platform
    from ksmith_core.registry import registry

    return registry().all(Platform)


def find_platform(name: str) -> Platform:
    """The platform called ``name``, or whose Triton backend is ``name`` (``maca`` finds MetaX's)."""
    from ksmith_core.capabilities import Platform
    from ksmith_core.registry import registry

    platforms = _platforms()
    for platform in platforms:
        if platform.name == name:
            return platform
    for platform in platforms:
        if name in platform.aliases:
            return platform
    return registry().lookup(Platform, name)  # one line naming the registered platforms


def detect_platform(signals: PlatformSignals | None = None) -> Platform | None:
    """The platform this machine is (``KSMITH_PLATFORM`` first), or ``None`` when no platform claims it."""
    forced = os.environ.get(PLATFORM_ENV, "").strip()
    if forced:
        return find_platform(forced)
    signals = current_signals() if signals is None else signals
    best: tuple[int, int, Platform] | None = None
    for order, platform in enumerate(_platforms()):
        try:
            strength = platform.detect(signals)
        except Exception:  # noqa: BLE001 - one broken platform must not stop detection
            continue
        if strength is None or strength is False:
            continue
        rank = BY_DEVICE_NAME + 1 if strength is True else int(strength)
        if best is None or (rank, order) < best[:2]:
            best = (rank, order, platform)
    return best[2] if best else None


def platform_facts(
    name: str | None = None, signals: PlatformSignals | None = None, default: str | None = None
) -> PlatformFacts | None:
    """Facts of the platform ``name`` (else the detected one, else ``default``); ``None`` when there is none."""
    signals = current_signals() if signals is None else signals
    if name:
        platform = find_platform(name)
    else:
        platform = detect_platform(signals)
        if platform is None and default:
            try:
                platform = find_platform(default)
            except PluginError:
                return None
    if platform is None:
        return None
    return facts_from(platform.facts(signals), platform.name)


def tuning_facts() -> PlatformFacts | None:
    """The facts a proposer tunes for in this process: the detected platform's (``KSMITH_PLATFORM`` first),
    else NVIDIA's (a CPU machine runs Triton's interpreter, and its kernels are meant for NVIDIA GPUs first)."""
    return platform_facts(default="nvidia")
