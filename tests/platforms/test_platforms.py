"""The platform seam, with the machine faked at its one boundary (``PlatformSignals``): detection, the facts
each platform gives, the compile commands, and what the mutate proposer and the roofline read from it.

Nothing here needs a GPU; MetaX's platform is only ever exercised this way (docs/platforms.md).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ksmith_core.capabilities import Platform
from ksmith_core.errors import PluginError
from ksmith_core.platform import (
    PlatformSignals,
    detect_platform,
    find_platform,
    gather_signals,
    platform_facts,
)
from ksmith_core.registry import lookup

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(autouse=True)
def no_forced_platform(monkeypatch):
    monkeypatch.delenv("KSMITH_PLATFORM", raising=False)


def detected(**signals) -> str | None:
    platform = detect_platform(PlatformSignals(**signals))
    return platform.name if platform else None


def test_the_triton_driver_decides_first():
    assert detected(triton_backend="cuda", gpu_available=True, torch_cuda="13.0") == "nvidia"
    assert detected(triton_backend="maca", gpu_available=True) == "metax"
    # Surest signal wins over weaker ones pointing elsewhere: a MACA_PATH left set on an NVIDIA machine.
    assert detected(triton_backend="cuda", environ={"MACA_PATH": "/opt/maca"}) == "nvidia"
    assert detected(triton_backend="hip", gpu_available=True) is None  # AMD: no platform registered


def test_metax_vendor_builds_are_not_mistaken_for_nvidia():
    """MetaX's torch calls its GPU cuda (is_available() is True); its +metax version says otherwise."""
    vendor = {"gpu_available": True, "torch_cuda": "12.1", "torch_version": "2.10.0+metax3.8.0.7"}
    assert detected(**vendor) == "metax"
    assert find_platform("nvidia").detect(PlatformSignals(**vendor)) is None
    assert detected(triton_version="3.6.0+metax3.8.0.7") == "metax"


def test_weaker_signals_in_order():
    assert detected(gpu_available=True, torch_cuda="13.0") == "nvidia"
    assert detected(existing_paths=frozenset({"/dev/nvidiactl"})) == "nvidia"
    assert detected(executables={"nvidia-smi": "/usr/bin/nvidia-smi"}) == "nvidia"
    assert detected(environ={"MACA_PATH": "/opt/maca"}) == "metax"
    assert detected(existing_paths=frozenset({"/dev/mxcd"})) == "metax"
    assert detected(executables={"mx-smi": "/opt/maca/bin/mx-smi"}) == "metax"
    assert detected(device_name="MXC500") == "metax"
    assert detected(device_name=H100) == "nvidia"
    assert detected() is None


def test_forced_by_name_or_triton_backend(monkeypatch):
    monkeypatch.setenv("KSMITH_PLATFORM", "maca")
    assert detected(triton_backend="cuda") == "metax"
    monkeypatch.setenv("KSMITH_PLATFORM", "nvidia")
    assert detected() == "nvidia"
    monkeypatch.setenv("KSMITH_PLATFORM", "tpu")
    with pytest.raises(PluginError, match=r"unknown platform 'tpu' \(registered: .*metax.*nvidia"):
        detected()


def test_nvidia_facts():
    facts = platform_facts(signals=PlatformSignals(triton_backend="cuda", triton_arch="90", device_name=H100))
    assert (facts.platform, facts.vendor, facts.triton_backend, facts.warp_size) == (
        "nvidia",
        "NVIDIA",
        "cuda",
        32,
    )
    assert facts.num_warps == (1, 2, 4, 8, 16, 32) and facts.launch_options == {}
    assert "tma" in facts.features and facts.verified
    assert facts.shared_memory_bytes == 227 * 1024  # no device to ask: the H100's
    assert facts.peak_bandwidth_bytes_s == 3.35e12 and facts.peak_flops_s == 989e12
    ampere = platform_facts(
        signals=PlatformSignals(triton_backend="cuda", triton_arch="80", max_shared_memory=166912)
    )
    assert "tma" not in ampere.features and ampere.shared_memory_bytes == 166912
    assert (
        platform_facts(
            signals=PlatformSignals(device_name="NVIDIA H100 PCIe", triton_backend="cuda")
        ).peak_flops_s
        == 756e12
    )


def test_metax_facts():
    facts = platform_facts(
        signals=PlatformSignals(triton_backend="maca", triton_warp_size=64, device_name="MXC500")
    )
    assert (facts.platform, facts.vendor, facts.triton_backend, facts.warp_size) == (
        "metax",
        "MetaX",
        "maca",
        64,
    )
    assert facts.max_num_warps == 16 and 32 not in facts.num_warps
    assert facts.launch_options["pipeline"] == ("basic", "cpasync")
    assert (
        "storeCoalesce" in facts.launch_options["scenario"] and "mla" not in facts.launch_options["scenario"]
    )
    assert "tma" not in facts.features
    assert not facts.verified and "not run on MetaX hardware" in facts.notes[0]
    assert facts.peak_bandwidth_bytes_s is None and facts.shared_memory_bytes is None  # not published
    summary = facts.summary()
    assert (
        summary["accelerator"] == "metax" and summary["max_num_warps"] == 16 and summary["verified"] is False
    )
    assert facts.to_dict()["native_compiler"]["name"] == "mxcc"


def test_compile_commands():
    nvcc = platform_facts("nvidia", PlatformSignals(triton_arch="90")).native_compiler
    command = nvcc.command(["k.cu"], "k.o", extra_flags=["-lineinfo", ""], include_dirs=["/inc"])
    assert command[1:3] == ["-x", "cu"]
    assert "-gencode=arch=compute_90,code=sm_90" in command and "-I/inc" in command and "-lineinfo" in command
    assert "" not in command and command[-4:] == ["-c", "k.cu", "-o", "k.o"]
    assert nvcc.env["TORCH_CUDA_ARCH_LIST"] == "9.0"
    # Without asking the device (no context in the driver): nvidia-smi's compute capability gives the arch.
    from_smi = platform_facts("nvidia", PlatformSignals(compute_capability="8.6")).native_compiler
    assert (
        from_smi.env["TORCH_CUDA_ARCH_LIST"] == "8.6"
        and "-gencode=arch=compute_86,code=sm_86" in from_smi.arch_flags
    )
    assert nvcc.command(["k.cu"], "k.so", shared=True)[-4:] == ["-shared", "k.cu", "-o", "k.so"]

    mxcc = platform_facts("maca", PlatformSignals(environ={"MACA_PATH": "/opt/maca-3.8"})).native_compiler
    command = mxcc.command(["k.cpp"], "k.o")
    assert command[:3] == ["/opt/maca-3.8/mxgpu_llvm/bin/mxcc", "-x", "maca"]
    assert "--maca-path=/opt/maca-3.8" in command and command[-4:] == ["-c", "k.cpp", "-o", "k.o"]
    assert (
        mxcc.env["CUDA_HOME"] == "/opt/maca-3.8/tools/cu-bridge"
    )  # torch's extension builder, via cu-bridge
    assert not mxcc.found


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc here")
def test_the_nvcc_command_compiles_and_its_errors_read_back(tmp_path):
    """The constructed command, run: a kernel compiles; a broken one gives the compiler's first error line."""
    from ksmith_native.build import compiler_feedback

    nvcc = platform_facts(
        "nvidia", PlatformSignals(executables={"nvcc": shutil.which("nvcc")})
    ).native_compiler
    good, bad = tmp_path / "good.cu", tmp_path / "bad.cu"
    good.write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    bad.write_text("__global__ void k(float* x) { x[threadIdx.x] *= undefined_name; }\n")
    assert subprocess.run(nvcc.command([good], tmp_path / "good.o"), capture_output=True).returncode == 0
    done = subprocess.run(nvcc.command([bad], tmp_path / "bad.o"), capture_output=True, text=True)
    headline, feedback = compiler_feedback(done.stdout + done.stderr, tmp_path)
    assert done.returncode != 0
    assert headline.startswith("bad.cu(1): error") and "undefined_name" in headline, headline
    assert str(tmp_path) not in feedback


def test_platforms_are_registered_capabilities():
    assert isinstance(lookup(Platform, "nvidia"), Platform) and isinstance(
        lookup(Platform, "metax"), Platform
    )
    assert find_platform("maca").name == "metax" and find_platform("cuda").name == "nvidia"


def test_this_machine_is_read_without_a_device():
    """On the CPU machine the suite runs on, the one boundary reads versions and files, and no platform is
    detected from a GPU (there is none)."""
    signals = gather_signals()
    assert signals.torch_version
    if not signals.gpu_available:
        assert signals.triton_backend is None and signals.device_name is None


def test_the_roofline_bounds_measured_ceilings_by_the_platform_peaks():
    from ksmith_triton.roofline import ceilings_within_peaks

    peaks = {"bandwidth_bytes_s": 3.35e12, "flops_s": 989e12}
    measured = {"bandwidth_bytes_s": 2.9e12, "flops_s": 1.5e15}  # a matmul "faster" than the datasheet
    assert ceilings_within_peaks(measured, peaks) == {"bandwidth_bytes_s": 2.9e12, "flops_s": 989e12}
    assert ceilings_within_peaks({}, peaks) == peaks  # nothing measured: the datasheet
    assert ceilings_within_peaks(measured, {}) == measured  # no peaks known (MetaX): as measured
