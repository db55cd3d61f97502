"""``ksmith doctor [--backend NAME]``: check this machine's toolchain for a backend or platform, then run a
small conformance set through the real evaluator.

``NAME`` is a backend (``triton``, ``cuda``) on the detected platform, or a platform by its name or its
Triton backend's (``nvidia``, ``metax``, ``maca``). Without it: the detected platform, both backends.

Checks, in order: which platform this machine is and why (the signals detection read), a visible GPU,
Triton's active driver naming the platform's backend (and its warp size), MetaX's vendor builds of torch and
Triton, the native compiler (found, its version, and the platform's compile command run on a tiny kernel),
the C++ compiler and ninja that torch's extension builder needs. Then, unless ``--no-conformance``, a few
evaluations whose verdicts are known: the shipped ReLU seed is accepted; the same kernel returning
``torch.relu`` is refused; on a platform with extra launch options, the seed with ``num_warps`` at the
platform's maximum and those options is accepted; for the ``cuda`` backend, the CUDA ReLU seed is accepted,
one calling torch inside its C++ is refused and one that does not compile is a ``compile_error``. On a
machine without a GPU the Triton cases run on the interpreter and the native ones are skipped.

Exit code 0 when nothing failed (skips are fine), 1 when a check failed, 2 for a name that is neither a
backend nor a platform. ``--json`` prints one object: the platform's facts, the signals, every check.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from ksmith_core.clitools import console, emit_json
from ksmith_core.errors import ConfigError, KsmithError, PluginError

TINY_KERNEL = """\
__global__ void ksmith_doctor_scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
"""
COMPILE_TIMEOUT_S = 300


@dataclass
class Check:
    name: str
    status: str  # "ok" | "fail" | "skip"
    detail: str = ""
    seconds: float | None = None


@dataclass
class Plan:
    platform: Any  # a Platform capability, or None
    backends: tuple[str, ...]
    named: str | None


def plan_for(target: str | None) -> Plan:
    """What ``--backend NAME`` asks to check: a backend on the detected platform, or a platform."""
    from ksmith_core.capabilities import Backend
    from ksmith_core.platform import detect_platform, find_platform
    from ksmith_core.registry import registry

    backends = tuple(name for name in ("triton", "cuda") if name in registry().names(Backend))
    if target is None:
        return Plan(detect_platform(), backends, None)
    if target in registry().names(Backend):
        return Plan(detect_platform(), (target,), target)
    try:
        return Plan(find_platform(target), backends, target)
    except PluginError:
        from ksmith_core.capabilities import Platform

        platforms = ", ".join(registry().names(Platform)) or "none installed"
        raise ConfigError(
            f"--backend {target}: neither a backend ({', '.join(registry().names(Backend))}) nor a platform "
            f"({platforms}; or a platform's Triton backend name, such as maca)"
        ) from None


def run_checks(target: str | None, device: str | None, conformance: bool) -> dict[str, Any]:
    from ksmith_core.platform import PlatformSignals, current_signals, detect_platform, facts_from

    plan = plan_for(target)
    signals: PlatformSignals = current_signals(probe_device=True)
    checks: list[Check] = []
    detected = detect_platform(signals)
    platform = plan.platform or detected
    if platform is None and "cuda" in plan.backends:
        from ksmith_core.platform import find_platform

        platform = find_platform("nvidia")  # no GPU here: its compiler can still be checked
    facts = facts_from(platform.facts(signals), platform.name) if platform else None
    checks.append(_platform_check(plan, detected, signals))
    gpu = signals.gpu_available
    if device == "cuda" and not gpu:
        checks.append(Check("gpu", "fail", "--device cuda, but torch sees no GPU"))
    else:
        checks.append(
            Check("gpu", "ok", f"{signals.device_name} (torch {signals.torch_version})")
            if gpu
            else Check(
                "gpu", "skip", f"torch {signals.torch_version or '?'} sees no GPU: Triton runs interpreted"
            )
        )
    if facts is not None:
        checks.append(_triton_check(facts, signals))
        if facts.platform == "metax":
            checks.append(_vendor_builds_check(signals))
    native_ready = False
    if "cuda" in plan.backends or (facts is not None and facts.platform == "metax"):
        native = _native_checks(facts)
        checks.extend(native)
        native_ready = all(c.status == "ok" for c in native)
    if conformance:
        run_device = device or ("cuda" if gpu else "cpu")
        if run_device == "cuda" and not gpu:
            checks.append(Check("conformance", "skip", "no GPU"))
        else:
            checks.extend(conformance_checks(plan.backends, facts, run_device, native_ready))
    return {
        "platform": facts.to_dict() if facts else None,
        "signals": {k: (sorted(v) if isinstance(v, frozenset) else v) for k, v in asdict(signals).items()},
        "checks": [asdict(c) for c in checks],
        "ok": not any(c.status == "fail" for c in checks),
    }


def _platform_check(plan: Plan, detected: Any, signals: Any) -> Check:
    seen = (
        f"Triton driver {signals.triton_backend or '-'}, torch {signals.torch_version or '-'}, "
        f"triton {signals.triton_version or '-'}, device {signals.device_name or '-'}"
    )
    if plan.platform is None:
        return Check("platform", "skip", f"no GPU platform detected ({seen})")
    if plan.named and detected is not None and detected.name != plan.platform.name:
        return Check(
            "platform", "fail", f"this machine looks like {detected.name}, not {plan.platform.name} ({seen})"
        )
    how = (
        "detected" if detected is not None and detected.name == plan.platform.name else "named, not detected"
    )
    return Check(
        "platform", "ok" if detected is not None else "skip", f"{plan.platform.name}, {how} ({seen})"
    )


def _triton_check(facts: Any, signals: Any) -> Check:
    if not signals.gpu_available:
        return Check("triton driver", "skip", "no GPU: no active Triton driver to ask")
    if signals.triton_backend != facts.triton_backend:
        return Check(
            "triton driver",
            "fail",
            f"Triton's active driver names {signals.triton_backend!r}, where {facts.platform} needs "
            f"{facts.triton_backend!r}",
        )
    warp = signals.triton_warp_size
    if warp and warp != facts.warp_size:
        return Check(
            "triton driver", "fail", f"warp size {warp}, where {facts.platform} has {facts.warp_size}"
        )
    return Check(
        "triton driver",
        "ok",
        f"backend {signals.triton_backend}, arch {signals.triton_arch}, warp size {warp or '?'}, shared memory "
        f"{signals.max_shared_memory or '?'} bytes per block",
    )


def _vendor_builds_check(signals: Any) -> Check:
    marked = [
        name
        for name, version in (("torch", signals.torch_version), ("triton", signals.triton_version))
        if "metax" in version.lower()
    ]
    if len(marked) == 2:
        return Check("vendor builds", "ok", f"torch {signals.torch_version}, triton {signals.triton_version}")
    return Check(
        "vendor builds",
        "fail",
        f"MetaX's torch and Triton carry +metax in their versions; here: torch {signals.torch_version or '-'}, "
        f"triton {signals.triton_version or '-'}",
    )


def _native_checks(facts: Any) -> list[Check]:
    from ksmith_native.build import _which, compiler_feedback

    checks: list[Check] = []
    compiler = facts.native_compiler if facts else None
    if compiler is None:
        return [Check("native compiler", "skip", "no GPU platform: no native compiler to check")]
    if not compiler.found:
        checks.append(Check("native compiler", "fail", f"{compiler.name} not found ({compiler.executable})"))
    else:
        version = _version(compiler.version_command())
        checks.append(Check("native compiler", "ok", f"{compiler.executable}: {version}"))
        with tempfile.TemporaryDirectory(prefix="ksmith-doctor-") as tmp:
            source = Path(tmp) / ("kernel.cu" if compiler.name == "nvcc" else "kernel.cpp")
            source.write_text(TINY_KERNEL)
            command = compiler.command([source], Path(tmp) / "kernel.o")
            started = time.monotonic()
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
                code, output = done.returncode, done.stdout + done.stderr
            except (OSError, subprocess.TimeoutExpired) as exc:
                code, output = -1, f"{type(exc).__name__}: {exc}"
            seconds = round(time.monotonic() - started, 2)
            shown = shlex.join(str(part) for part in command).replace(tmp + "/", "")
            if code == 0 and (Path(tmp) / "kernel.o").is_file():
                checks.append(Check("native compile", "ok", shown, seconds))
            else:
                headline, _ = compiler_feedback(output, Path(tmp))
                checks.append(Check("native compile", "fail", f"{shown}: {headline}", seconds))
    for tool, why in (("c++", "torch's extension builder links with it"), ("ninja", "pip install ninja")):
        found = _which(tool)
        checks.append(Check(tool, "ok", found) if found else Check(tool, "fail", f"not found ({why})"))
    return checks


def _version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({type(exc).__name__})"
    lines = [line for line in (done.stdout or done.stderr).splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no version output)"


# --------------------------------------------------------------------------------------------------------------
# Conformance: evaluations whose verdicts are known
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    backend: str
    problem: str
    source: str
    expected: str  # a verdict status
    reason: str = ""  # a reason code the verdict must carry


def conformance_cases(backends: tuple[str, ...], facts: Any, device: str, native_ready: bool) -> list[Case]:
    from ksmith_core.loading import resolve_problem, seed_path_for, with_backend

    cases: list[Case] = []
    relu = resolve_problem("relu")
    if "triton" in backends:
        seed = seed_path_for(relu).read_text()
        cases.append(Case("triton: ReLU seed", "triton", "relu", seed, "ok"))
        cheat = seed.replace("        return out\n", "        return torch.relu(x)\n")
        cases.append(
            Case("triton: torch in forward", "triton", "relu", cheat, "rejected", "FORBIDDEN_TORCH_OP")
        )
        if facts is not None and facts.launch_options and device == "cuda":
            options = ", ".join(f'{name}="{values[-1]}"' for name, values in facts.launch_options.items())
            tuned = seed.replace("num_warps=4", f"num_warps={facts.max_num_warps}, {options}")
            cases.append(
                Case(f"triton: num_warps {facts.max_num_warps} + {options}", "triton", "relu", tuned, "ok")
            )
    if "cuda" in backends and device == "cuda" and native_ready:
        seed_path = seed_path_for(with_backend(relu, "cuda"))
        if seed_path is not None and seed_path.name.endswith(".cuda.seed.py"):
            native = seed_path.read_text()
            cases.append(Case("cuda: ReLU seed", "cuda", "relu", native, "ok"))
            torch_inside = native.replace("    return out;\n}", "    return torch::relu(input);\n}")
            cases.append(
                Case(
                    "cuda: torch inside the C++",
                    "cuda",
                    "relu",
                    torch_inside,
                    "rejected",
                    "FORBIDDEN_TORCH_OP",
                )
            )
            broken = native.replace(
                "    auto input = x.contiguous();", "    auto input = x.contiguous() not C++;"
            )
            cases.append(
                Case("cuda: compile error", "cuda", "relu", broken, "compile_error", "NATIVE_COMPILE_ERROR")
            )
    return cases


def conformance_checks(backends: tuple[str, ...], facts: Any, device: str, native_ready: bool) -> list[Check]:
    from ksmith_core.engine import evaluate
    from ksmith_core.loading import resolve_problem, with_backend
    from ksmith_core.model import Candidate, EvalOptions

    checks = []
    if "cuda" in backends and device == "cuda" and not native_ready:
        checks.append(Check("conformance: cuda", "skip", "the native toolchain checks above failed"))
    if "cuda" in backends and device != "cuda":
        checks.append(Check("conformance: cuda", "skip", "CUDA sources need a GPU"))
    options = EvalOptions(device=device, small=True, correctness_trials=3, timing_trials=20)
    for case in conformance_cases(backends, facts, device, native_ready):
        problem = with_backend(resolve_problem(case.problem), case.backend)
        started = time.monotonic()
        try:
            verdict = evaluate(problem, Candidate.from_source(case.source), options)
        except KsmithError as exc:
            checks.append(
                Check(f"conformance: {case.name}", "fail", str(exc), round(time.monotonic() - started, 1))
            )
            continue
        seconds = round(time.monotonic() - started, 1)
        got = verdict.status.value
        reasons = "; ".join(verdict.reasons)[:300]
        passed = got == case.expected and (not case.reason or case.reason in reasons)
        detail = f"{got} (expected {case.expected}{', ' + case.reason if case.reason else ''})"
        if reasons:
            detail += f": {reasons}"
        checks.append(Check(f"conformance: {case.name}", "ok" if passed else "fail", detail, seconds))
    return checks


@click.command()
@click.option(
    "--backend",
    "target",
    default=None,
    metavar="NAME",
    help="A backend (triton, cuda) or a platform (nvidia, metax; or its Triton backend name, maca).",
)
@click.option(
    "--device", type=click.Choice(["cuda", "cpu"]), default=None, help="Where to run the conformance set."
)
@click.option("--no-conformance", is_flag=True, help="Check the toolchain only; evaluate nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
def doctor(target, device, no_conformance, as_json):
    """Check this machine's toolchain for a backend or platform, then run a small conformance set.

    Exit code 0 when nothing failed, 1 when a check failed, 2 for an unknown NAME.
    """
    result = run_checks(target, device, not no_conformance)
    if as_json:
        emit_json(result)
    else:
        out = console()
        facts = result["platform"]
        if facts:
            note = (
                ""
                if facts["verified"]
                else " [yellow](not run on this platform's hardware by ksmith's authors)[/]"
            )
            out.print(
                f"[bold]{facts['vendor']}[/] ({facts['platform']}, Triton backend {facts['triton_backend']}){note}"
            )
        colours = {"ok": "green", "fail": "red", "skip": "yellow"}
        for check in result["checks"]:
            timing = f" ({check['seconds']} s)" if check.get("seconds") is not None else ""
            out.print(f"[{colours[check['status']]}]{check['status']:>4}[/] {check['name']}{timing}", end=" ")
            out.print(check["detail"], markup=False, highlight=False)
    sys.exit(0 if result["ok"] else 1)
