"""Where ray is not installed: ksmith works, and ``--executor ray`` is one line saying what to install.

"Not installed" is simulated in a subprocess with ``sys.modules["ray"] = None`` (``import ray`` then fails as
it does without the package), so these tests run whether or not ray is installed here, and start no cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.core.toy import write_toy_problem
from tests.on_ray.cluster import REPO

MISSING = "ksmith: error: the ray executor needs the 'ray' package: pip install 'kernel-smith[ray]'"
NO_RAY = "import sys; sys.modules['ray'] = None; "


def python(code: str, *args: str, tmp_path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "KSMITH_PLUGIN_MODULES": "tests.core.toy:PLUGIN",
        "KSMITH_RUNS_DIR": str(tmp_path / "runs"),
    }
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )


def ksmith_without_ray(*args: str, tmp_path) -> subprocess.CompletedProcess:
    return python(NO_RAY + "from ksmith_core.cli import main; main()", *args, tmp_path=tmp_path)


def test_the_plugin_loads_without_importing_ray(tmp_path):
    code = (
        "import sys, json\n"
        "from ksmith_core.plugins import plugin_infos\n"
        "info = {i.name: i.to_dict() for i in plugin_infos()}['ray']\n"
        "print(json.dumps({'info': info, 'ray_imported': 'ray' in sys.modules}))\n"
    )
    proc = python(code, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["info"]["status"] == "ok" and out["info"]["registered"] == {"executors": ["ray"]}
    assert out["ray_imported"] is False


def test_ksmith_works_where_ray_is_missing(tmp_path):
    proc = ksmith_without_ray("plugins", "--json", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = {p["name"]: p for p in json.loads(proc.stdout)}
    assert listed["ray"]["status"] == "ok"


@pytest.mark.parametrize("command", ["evolve", "bench"])
def test_executor_ray_without_ray_is_one_line_and_exit_2(command, tmp_path):
    problem, _ = write_toy_problem(tmp_path / "problems")
    args = [command, str(problem), "--executor", "ray", "--budget", "3"]
    if command == "evolve":
        args += ["--run-dir", str(tmp_path / "run")]
    else:
        args += ["-o", str(tmp_path / "bench")]
    proc = ksmith_without_ray(*args, tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [MISSING]
    assert not (tmp_path / "run").exists()  # refused before any work


def test_the_executor_itself_raises_the_same_error(tmp_path):
    code = (
        NO_RAY + "from ksmith_ray.executor import RayNotInstalled, run_on_ray\n"
        "from ksmith_core.errors import PluginError\n"
        "try:\n"
        "    run_on_ray([object()], 1, {})\n"
        "except RayNotInstalled as exc:\n"
        "    assert isinstance(exc, PluginError)\n"
        "    print(exc)\n"
    )
    proc = python(code, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == MISSING.removeprefix("ksmith: error: ")
