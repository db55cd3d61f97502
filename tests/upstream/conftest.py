"""Fixtures of the upstream tests: the real SGLang and LMDeploy wheels, and the ksmith command line.

The wheels come from ``$KSMITH_UPSTREAM_WHEELS`` (what CI sets) or, when it is unset, from PyPI through
``pip download`` into the user cache. Only when neither works are the tests skipped, with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ksmith_upstream.source import PROJECTS, UpstreamError, UpstreamSource, resolve_source


@pytest.fixture(scope="session")
def upstream() -> dict[str, UpstreamSource]:
    sources = {}
    for name, project in PROJECTS.items():
        try:
            sources[name] = resolve_source(project, None)
        except UpstreamError as exc:
            pytest.skip(f"no {name} wheel: {exc}")
    return sources


@pytest.fixture(scope="session")
def ksmith_exe() -> list[str]:
    """The ksmith command line (as tests/conftest.py's ``ksmith_cmd``, for module-scoped fixtures)."""
    exe = shutil.which("ksmith", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-c", "from ksmith_core.cli import main; main()"]


@pytest.fixture(scope="session")
def ksmith_env() -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1"
    return env


def run_ksmith(ksmith_cmd, *args, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ksmith_cmd, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout
    )


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The single line a refused command prints (the test fails if there is more than one)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ksmith: error: "), lines[0]
    return lines[0]


def git_tree(source: UpstreamSource, dest: Path) -> Path:
    """A git repository with the package laid out as in the upstream repository (``python/sglang/...``)."""
    target = dest / source.project.repo_prefix / source.project.name
    shutil.copytree(source.package_dir, target)
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    return dest


def git_apply(repo: Path, patch: Path, check: bool) -> subprocess.CompletedProcess:
    args = ["git", "-C", str(repo), "apply", *(["--check"] if check else []), str(patch.resolve())]
    return subprocess.run(args, capture_output=True, text=True)


PYTHON = sys.executable


RUNNER_CONFTEST = '''
"""Stands in for the upstream package: only the patched kernel module is loaded, from its file."""
import importlib.util
import sys
import types
import unittest

PATCHED = {patched!r}
MODULE = {module!r}


def _package(name):
    if name not in sys.modules:
        mod = types.ModuleType(name)
        mod.__path__ = []
        sys.modules[name] = mod
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(_package(parent), leaf, mod)
    return sys.modules[name]


spec = importlib.util.spec_from_file_location(MODULE, PATCHED)
kernel_module = importlib.util.module_from_spec(spec)
parent, _, leaf = MODULE.rpartition(".")
setattr(_package(parent), leaf, kernel_module)
sys.modules[MODULE] = kernel_module
spec.loader.exec_module(kernel_module)
_package("sglang.test.ci").ci_register = types.SimpleNamespace(register_cuda_ci=lambda **kw: None)
sys.modules["sglang.test.ci.ci_register"] = _package("sglang.test.ci").ci_register
sys.modules["sglang.test.test_utils"] = types.SimpleNamespace(CustomTestCase=unittest.TestCase)
'''


def run_generated_test(test_file: Path, patched: Path, module: str, workdir: Path, cases: int = 3):
    """Run a generated upstream test on CPU under the Triton interpreter, against the patched module only.

    The upstream package is not importable here (it needs CUDA-only dependencies), so a conftest loads the
    patched kernel file alone under its real module name. The test's ``cuda`` device becomes ``cpu`` and its
    sweep is cut to the first ``cases`` cases, which the interpreter runs in seconds.
    """
    import ast

    source = test_file.read_text(encoding="utf-8")
    tree = ast.parse(source)
    end = next(
        n.end_lineno
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "CASES" for t in n.targets)
    )
    lines = source.replace('"cuda"', '"cpu"').replace("'cuda'", "'cpu'").splitlines()
    lines.insert(end, f"CASES = CASES[:{cases}]")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / test_file.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (workdir / "conftest.py").write_text(
        RUNNER_CONFTEST.format(patched=str(patched), module=module), encoding="utf-8"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run(
        [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(workdir), str(workdir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        timeout=600,
    )


def recorded_run(run_dir: Path, problem: Path, candidate: Path, correct: bool) -> Path:
    """A run store holding one candidate and the verdict given here, for the refusal paths of ``patch``.

    The happy paths use real ``ksmith evolve`` runs; these only need a run whose best is (or is not) correct.
    """
    from ksmith_core.model import Candidate, Status, TimingStats, Verdict
    from ksmith_core.store import RunStore

    cand = Candidate.from_source(candidate.read_text(encoding="utf-8"))
    timing = TimingStats(median_ms=2.0, mean_ms=2.0, min_ms=2.0, max_ms=2.0, std_ms=0.0, trials=3)
    verdict = Verdict(
        status=Status.OK if correct else Status.INCORRECT,
        correct=correct,
        runtime=timing,
        reference_eager=TimingStats(median_ms=3.0, mean_ms=3.0, min_ms=3.0, max_ms=3.0, std_ms=0.0, trials=3),
        speedup=1.5 if correct else None,
        device="cpu",
        interpreted=True,
    )
    meta = {"problem": problem.stem, "config": {"proposer": "mutate"}, "seed_id": cand.id}
    store = RunStore.create(run_dir, problem.read_text(encoding="utf-8"), meta, {"versions": {}})
    with store:
        store.record_evaluation(cand, verdict)
    return run_dir
