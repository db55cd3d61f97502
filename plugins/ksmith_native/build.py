"""Building a candidate's extensions before its process starts: the toolchain, the cache, the compiler's
feedback.

Builds run in the driver's evaluation threads, outside the GPU lock, several at once (``KSMITH_NATIVE_BUILD_JOBS``
at a time, default half the cores), each in a child process (``build_child.py``: torch's own builder, with a
scrubbed environment and a time limit). A built library is kept in a cache keyed by the extension's sources and
flags and the toolchain (compiler version, host compiler, torch, Python, target architecture), so the same
source is built once; a source that failed to compile is remembered too, with the compiler's output. The cache
lives in ``KSMITH_NATIVE_CACHE_DIR`` (default ``~/.cache/ksmith/native``, mode 0700); every library's sha256 is
recorded and checked again where it is loaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ksmith_core.errors import BackendUnavailable
from ksmith_core.platform import NativeCompiler, PlatformFacts, platform_facts
from ksmith_native.spec import ExtensionSpec

CACHE_ENV = "KSMITH_NATIVE_CACHE_DIR"
JOBS_ENV = "KSMITH_NATIVE_BUILD_JOBS"
TIMEOUT_ENV = "KSMITH_NATIVE_COMPILE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600.0
FEEDBACK_LINES = 20
NINJA_JOBS_PER_BUILD = "2"  # each build's own parallelism (ninja's MAX_JOBS): builds run side by side


class CompileFailure(Exception):
    """The compiler refused the sources (or took too long). ``headline`` is its first error line,
    ``feedback`` its first lines from there, written for whoever fixes the source."""

    def __init__(self, headline: str, feedback: str, timed_out: bool = False) -> None:
        super().__init__(headline)
        self.headline, self.feedback, self.timed_out = headline, feedback, timed_out


@dataclass(frozen=True)
class Toolchain:
    """What builds a device's extensions: the platform's compiler (none for C++-only builds on the CPU), the
    environment a build gets, and a fingerprint of every version that changes the built code."""

    device: str
    platform: str
    compiler: NativeCompiler | None
    env: dict[str, str] = field(default_factory=dict)
    fingerprint: str = ""
    description: str = ""


@dataclass(frozen=True)
class Built:
    spec: ExtensionSpec
    path: Path
    sha256: str
    seconds: float
    cached: bool


# --------------------------------------------------------------------------------------------------------------
# The toolchain
# --------------------------------------------------------------------------------------------------------------


def _which(name: str) -> str | None:
    """``name`` on PATH, or beside this Python (a virtual environment's ninja when it is not activated)."""
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def _first_lines(command: list[str], lines: int = 4) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({type(exc).__name__})"
    text = (done.stdout or done.stderr).strip().splitlines()
    return " | ".join(text[:lines])


def check_toolchain(device: str, facts: PlatformFacts | None, needs_gpu_compiler: bool) -> None:
    """One clear line (:class:`BackendUnavailable`) for the first thing missing, else nothing."""
    if device == "cuda" and facts is None:
        raise BackendUnavailable("the cuda backend found no GPU platform here (see `ksmith doctor`)")
    if needs_gpu_compiler:
        if device != "cuda":
            raise BackendUnavailable(
                "this candidate compiles CUDA sources, which need a GPU: on --device cpu the cuda backend "
                "runs C++-only extensions (cpp_sources) alone"
            )
        compiler = facts.native_compiler if facts else None
        if compiler is None or not compiler.found:
            name = compiler.name if compiler else "a native compiler"
            where = (
                "CUDA_HOME/bin, PATH or /usr/local/cuda"
                if name == "nvcc"
                else "MACA_PATH/mxgpu_llvm/bin or PATH"
            )
            raise BackendUnavailable(
                f"the cuda backend needs {name}, the {facts.vendor if facts else 'GPU'} compiler: none found "
                f"in {where} (install the toolkit, or set "
                f"{'CUDA_HOME' if name == 'nvcc' else 'MACA_PATH'})"
            )
    if _which("c++") is None:
        raise BackendUnavailable("the cuda backend needs a C++ compiler: no c++ on PATH")
    if _which("ninja") is None:
        raise BackendUnavailable(
            "the cuda backend builds with torch.utils.cpp_extension, which needs ninja: pip install ninja"
        )


@functools.cache
def _toolchain(device: str, needs_gpu_compiler: bool, platform_name: str | None) -> Toolchain:
    facts = platform_facts(platform_name, default="nvidia") if device == "cuda" else None
    check_toolchain(device, facts, needs_gpu_compiler)
    compiler = facts.native_compiler if facts and needs_gpu_compiler else None
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    env["MAX_JOBS"] = NINJA_JOBS_PER_BUILD
    if compiler is not None:
        env.update(compiler.env)
        if "TORCH_CUDA_ARCH_LIST" in compiler.env:
            env["CUDA_VISIBLE_DEVICES"] = ""  # the arch is known: the build never needs to touch a GPU
    import torch

    parts = {
        "device": device,
        "platform": facts.platform if facts else "cpu",
        "compiler": _first_lines(compiler.version_command()) if compiler else None,
        "cxx": _first_lines([_which("c++") or "c++", "--version"], 1),
        "torch": torch.__version__,
        "torch_cuda": getattr(torch.version, "cuda", None),
        "python": sys.version.split()[0],
        "env": {k: v for k, v in sorted(env.items()) if k not in ("PATH", "MAX_JOBS")},
    }
    description = parts["compiler"] or parts["cxx"]
    return Toolchain(
        device=device,
        platform=str(parts["platform"]),
        compiler=compiler,
        env=env,
        fingerprint=json.dumps(parts, sort_keys=True),
        description=str(description)[:200],
    )


def toolchain_for(device: str, needs_gpu_compiler: bool) -> Toolchain:
    """The toolchain that builds for ``device`` (checked once per process; :class:`BackendUnavailable` names
    what is missing). ``needs_gpu_compiler``: some extension has CUDA sources."""
    return _toolchain(device, needs_gpu_compiler, os.environ.get("KSMITH_PLATFORM") or None)


def forget_toolchains() -> None:
    _toolchain.cache_clear()


# --------------------------------------------------------------------------------------------------------------
# The cache and the build
# --------------------------------------------------------------------------------------------------------------


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        root = Path(configured)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = Path(base) / "ksmith" / "native"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    return root


def build_timeout_s() -> float:
    try:
        return max(1.0, float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def _slots() -> int:
    configured = os.environ.get(JOBS_ENV, "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return max(1, (os.cpu_count() or 2) // 2)


_build_slots = threading.BoundedSemaphore(_slots())


def cache_key(spec: ExtensionSpec, toolchain: Toolchain) -> str:
    return hashlib.sha256(f"{spec.key}\n{toolchain.fingerprint}".encode()).hexdigest()[:40]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build(spec: ExtensionSpec, toolchain: Toolchain, timeout_s: float | None = None) -> Built:
    """The library for ``spec``: from the cache, or built now. :class:`CompileFailure` when it does not build."""
    root = cache_root()
    key = cache_key(spec, toolchain)
    entry = root / key
    started = time.monotonic()
    with _locked(root / f"{key}.lock"):
        found = _cached(spec, entry)
        if found is not None:
            return Built(spec, found[0], found[1], round(time.monotonic() - started, 3), cached=True)
        failed = entry / "failed.json"
        if failed.is_file():
            record = json.loads(failed.read_text())
            raise CompileFailure(record["headline"], record["feedback"])
        shutil.rmtree(entry, ignore_errors=True)
        entry.mkdir(mode=0o700)
        with _build_slots:
            code, output, timed_out = _run_build(spec, toolchain, entry, timeout_s or build_timeout_s())
        (entry / "build.log").write_text(output, encoding="utf-8")
        library = entry / f"{spec.name}.so"
        if code == 0 and library.is_file():
            sha = file_sha256(library)
            seconds = round(time.monotonic() - started, 3)
            record = {
                "library": library.name,
                "sha256": sha,
                "seconds": seconds,
                "toolchain": toolchain.fingerprint,
            }
            (entry / "built.json").write_text(json.dumps(record), encoding="utf-8")
            return Built(spec, library, sha, seconds, cached=False)
        if timed_out:
            limit = timeout_s or build_timeout_s()
            raise CompileFailure(
                f"the build took longer than {limit:g} s ({TIMEOUT_ENV})", tail(output), timed_out=True
            )
        headline, feedback = compiler_feedback(output, entry)
        if code == 1:  # the compiler's verdict on the source: the same source fails the same way
            failed.write_text(json.dumps({"headline": headline, "feedback": feedback}), encoding="utf-8")
        raise CompileFailure(headline, feedback)


def _cached(spec: ExtensionSpec, entry: Path) -> tuple[Path, str] | None:
    record_path = entry / "built.json"
    if not record_path.is_file():
        return None
    try:
        record = json.loads(record_path.read_text())
        library = entry / record["library"]
        if library.name == f"{spec.name}.so" and file_sha256(library) == record["sha256"]:
            return library, record["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    return None  # changed or half-written: built again


def _run_build(
    spec: ExtensionSpec, toolchain: Toolchain, entry: Path, timeout_s: float
) -> tuple[int, str, bool]:
    from ksmith_triton.sandbox import scrubbed_environment

    env = scrubbed_environment(toolchain.env)
    job = json.dumps({"arguments": spec.load_inline_arguments(), "build_directory": str(entry)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "ksmith_native.build_child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=entry,
        env=env,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(job.encode(), timeout=timeout_s)
        return proc.returncode, output.decode("utf-8", "replace"), False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return -9, output.decode("utf-8", "replace"), True


# --------------------------------------------------------------------------------------------------------------
# The compiler's feedback
# --------------------------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ERROR = re.compile(r"\berror\b", re.IGNORECASE)
_NOISE = re.compile(
    r"^(\[\d+/\d+\]|FAILED:|ninja: |subprocess\.CalledProcessError|The above exception|Traceback)"
)


def compiler_feedback(output: str, build_dir: Path | None = None) -> tuple[str, str]:
    """(the first error line, the first lines from it): paths of the build directory cut to file names,
    ninja's progress and command lines left out."""
    text = _ANSI.sub("", output)
    if build_dir is not None:
        text = text.replace(f"{build_dir}/", "").replace(str(build_dir), ".")
    lines = [
        line.rstrip()
        for line in text.splitlines()
        if line.strip() and not _NOISE.match(line.strip()) and len(line) <= 400
    ]
    first = next(
        (i for i, line in enumerate(lines) if _ERROR.search(line) and "Error building extension" not in line),
        None,
    )
    if first is None:
        chosen = lines[-FEEDBACK_LINES:]
        headline = chosen[-1] if chosen else "the build failed without a message"
    else:
        chosen = lines[first : first + FEEDBACK_LINES]
        headline = chosen[0]
    return headline.strip()[:300], "\n".join(chosen)


def tail(output: str, lines: int = FEEDBACK_LINES) -> str:
    return "\n".join(_ANSI.sub("", output).strip().splitlines()[-lines:])
