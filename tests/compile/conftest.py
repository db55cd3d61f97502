"""A kernel library made by a real, short ksmith run: ``ksmith evolve`` on the Triton interpreter, then
``ksmith export --target library``; shared by the tests of this directory."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if not torch.cuda.is_available():
        return
    # These run the model and the library on CPU tensors through the Triton interpreter, which is only set up
    # (tests/conftest.py) where there is no GPU.
    skip = pytest.mark.skip(reason="CPU-interpreter tests; on a GPU the `gpu` ones and compile_llama.py run")
    for item in items:
        if HERE in Path(str(item.fspath)).parents and "gpu" not in item.keywords:
            item.add_marker(skip)


def ksmith(*args: object, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("ksmith", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-c", "from ksmith_core.cli import main; main()"]
    return subprocess.run(
        [*cmd, *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )


def evolved_library(root: Path, device: str) -> Path:
    """``ROOT/lib/llama_rmsnorm/{kernel.py,problem.py,entry.json}``: a real ``ksmith evolve`` (budget 2) of Llama's
    RMSNorm at the tiny decoder's shapes on ``device``, exported with ``--target library``."""
    run = root / "run"
    proc = ksmith(
        "evolve", DATA / "llama_rmsnorm.py", "--budget", "2", "--device", device, "--run-dir", run, "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["best"]["status"] == "ok"
    lib = root / "lib"
    proc = ksmith("export", run, "--target", "library", "-o", lib)
    assert proc.returncode == 0, proc.stderr
    return lib


@pytest.fixture(scope="session")
def library_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The library on the CPU interpreter, shared by the tests of this directory."""
    return evolved_library(tmp_path_factory.mktemp("library"), "cpu")


@pytest.fixture
def library_copy(library_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the library, for tests that break it."""
    copy = tmp_path / "lib"
    shutil.copytree(library_dir, copy)
    return copy
