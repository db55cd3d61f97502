"""Every command, walked with bad input: one line on stderr, exit code 2, never a traceback.

Each row is a command line and a fragment of the one error line it must print. A new command (or a new
option that takes a path) gets covered by adding rows: missing, empty, unreadable, syntax error, raising,
and the wrong kind of path (a directory where a file is expected, a file where a directory is).
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
from pathlib import Path

import pytest

from .test_cli import TOY, assert_one_line_error, ksmith

DATA = Path(__file__).resolve().parents[1] / "data"

VECTOR_ADD_WITH = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {model}

    def forward(self, a, b):
        return a + b


def get_inputs():
    {inputs}
    return [torch.randn(64), torch.randn(64)]


def get_init_inputs():
    {init}
    return []
"""


def _problem(path: Path, model: str = "pass", inputs: str = "pass", init: str = "pass") -> Path:
    path.write_text(VECTOR_ADD_WITH.format(model=model, inputs=inputs, init=init))
    return path


@pytest.fixture(scope="module")
def places(tmp_path_factory, ksmith_cmd_module):
    root = tmp_path_factory.mktemp("bad-input")
    (root / "empty.py").write_text("")
    (root / "binary.py").write_bytes(b"\xff\xfe\x00 not text")
    (root / "syntax.py").write_text("class Model(:\n")
    (root / "adir").mkdir()
    (root / "emptydir").mkdir()
    (root / "afile.txt").write_text("a file\n")
    _problem(root / "raise_inputs.py", inputs="raise ValueError('no inputs today')")
    _problem(root / "raise_init.py", init="raise KeyError('init')")
    _problem(root / "raise_model.py", model="raise RuntimeError('broken model')")
    # A finished run to point output options at (the toy backend: no Triton, a second).
    toy = root / "toy.py"
    from .toy import PROBLEM, SEED

    toy.write_text(PROBLEM)
    (root / "toy.seed.py").write_text(SEED)
    env = {"KSMITH_PLUGIN_MODULES": TOY}
    proc = ksmith(
        ksmith_cmd_module, "evolve", toy, "--proposer", "toy", "--budget", "2", "--device", "cpu",
        "--run-dir", root / "run", env_extra=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return {
        "tmp": root,
        "missing": root / "missing.py",
        "empty": root / "empty.py",
        "binary": root / "binary.py",
        "syntax": root / "syntax.py",
        "adir": root / "adir",
        "emptydir": root / "emptydir",
        "afile": root / "afile.txt",
        "raise_inputs": root / "raise_inputs.py",
        "raise_init": root / "raise_init.py",
        "raise_model": root / "raise_model.py",
        "problem": DATA / "vector_add.py",
        "cand": DATA / "vector_add.seed.py",
        "run": root / "run",
        "relu_cuda": Path(__file__).resolve().parents[2]
        / "plugins/ksmith_problems/problems/elementwise/relu.cuda.seed.py",
    }


@pytest.fixture(scope="module")
def ksmith_cmd_module():
    import shutil
    import sys

    exe = shutil.which("ksmith", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-c", "from ksmith_core.cli import main; main()"]


ROWS = [
    # eval: the problem, then the candidate
    (["eval", "{missing}", "{cand}"], "problem file not found"),
    (["eval", "{empty}", "{cand}"], "defines no class Model"),
    (["eval", "{binary}", "{cand}"], "cannot read problem file"),
    (["eval", "{syntax}", "{cand}"], "syntax error at line 1"),
    (["eval", "{adir}", "{cand}"], "is not a file"),
    (["eval", "{raise_inputs}", "{cand}"], "get_inputs() raised ValueError: no inputs today"),
    (["eval", "{raise_init}", "{cand}"], "get_init_inputs() raised KeyError"),
    (["eval", "{raise_model}", "{cand}"], "Model() raised RuntimeError: broken model"),
    (["eval", "{problem}", "{missing}"], "candidate file not found"),
    (["eval", "{problem}", "{empty}"], "defines no class ModelNew"),
    (["eval", "{problem}", "{binary}"], "cannot read candidate file"),
    (["eval", "{problem}", "{adir}"], "is a directory"),
    (["eval", "{problem}", "{cand}", "--backend", "nope"], "unknown backend 'nope' (registered: "),
    # a CUDA candidate where there is no GPU: the cuda backend says what it needs
    (
        ["eval", "relu", "{relu_cuda}", "--backend", "cuda", "--device", "cpu"],
        "compiles CUDA sources, which need a GPU",
    ),
    # evolve
    (["evolve", "{missing}"], "problem file not found"),
    (["evolve", "{syntax}"], "syntax error"),
    (["evolve", "{problem}", "--seed", "{missing}"], "candidate file not found"),
    (["evolve", "{problem}", "--seed", "{empty}"], "defines no class ModelNew"),
    (["evolve", "{problem}", "--run-dir", "{afile}"], "is a file"),
    (["evolve", "{problem}", "--run-dir", "{tmp}"], "exists and is not empty"),
    (["evolve", "{problem}", "--run-dir", "{run}"], "already holds a run"),
    (["evolve", "{raise_inputs}", "--seed", "{cand}"], "get_inputs() raised ValueError"),
    (["evolve", "--resume", "{emptydir}"], "no run"),
    (["evolve", "{problem}", "--backend", "nope"], "unknown backend 'nope'"),
    # seed: the output path is checked before any work
    (["seed", "{missing}", "--from", "inductor", "-o", "{tmp}/s.py"], "problem file not found"),
    (["seed", "{problem}", "--from", "nope", "-o", "{tmp}/s.py"], "unknown seed method 'nope'"),
    (["seed", "{problem}", "--from", "inductor", "-o", "{adir}"], "is a directory"),
    (["seed", "{problem}", "--from", "inductor", "-o", "{afile}/s.py"], "is a file, not a directory"),
    # bench
    (["bench", "{missing}"], "no such problem file or directory"),
    (["bench", "{emptydir}"], "no problem files found"),
    (["bench", "{problem}", "-o", "{afile}"], "is a file"),
    (["bench", "{problem}", "--candidates", "{afile}"], "is a file"),
    (["bench", "{problem}", "--executor", "nope"], "unknown executor 'nope'"),
    (["bench", "{problem}", "--reserve", "8"], "use it with --evolve"),
    (["bench", "{problem}", "--evolve", "--reserve", "-1"], "-1 is not in the range"),
    (["bench", "{problem}", "--seed-from", "nope"], "unknown seed method 'nope'"),
    (["bench", "{problem}", "--backend", "nope"], "unknown backend 'nope'"),
    # doctor: a name that is neither a backend nor a platform
    (["doctor", "--backend", "nope"], "neither a backend"),
    # best, export, report, show: a run, and where to write
    (["best", "{run}", "-o", "{adir}"], "is a directory"),
    (["best", "{run}", "-o", "{afile}/best.py"], "is a file, not a directory"),
    (["best", "{emptydir}", "-o", "{tmp}/best.py"], "no run"),
    (["export", "{run}", "-o", "{afile}"], "is a file; give a directory"),
    (["export", "{run}", "-o", "{afile}/lib"], "is a file, not a directory"),
    (["export", "{missing}", "-o", "{tmp}/lib"], "no run"),
    (["report", "{run}", "-o", "{adir}"], "is a directory"),
    (["report", "{run}", "-o", "{afile}/r.html"], "is a file, not a directory"),
    (["report", "{emptydir}"], "no run"),
    (["show", "{emptydir}"], "no run"),
    (["show", "{afile}"], "no run"),
    # the integrations: dataset, train, harvest, compile-report, import, patch
    (["dataset", "{missing}", "-o", "{tmp}/data"], "no run"),
    (["dataset", "{run}", "-o", "{afile}"], "is a file"),
    (
        ["train", "sft", "--model", "{missing}", "--data", "{emptydir}", "-o", "{tmp}/sft"],
        "is not a ksmith dataset",
    ),
    (["train", "grpo", "--model", "{missing}", "--problems", "{missing}", "-o", "{tmp}/grpo"], "not found"),
    (["harvest", "{missing}", "-o", "{tmp}/h"], "no such model file"),
    (["harvest", "{syntax}", "-o", "{tmp}/h"], "SyntaxError"),
    (["compile-report", "{missing}", "--library", "{emptydir}"], "no such model file"),
    (["compile-report", "{syntax}", "--library", "{emptydir}"], "SyntaxError"),
    (["import", "sglang", "nope", "--source", "{missing}", "-o", "{tmp}/i"], "does not exist"),
    (["import", "nope", "x", "-o", "{tmp}/i"], "is not one of 'sglang', 'lmdeploy'"),
    (["patch", "sglang", "{emptydir}", "-o", "{tmp}/p"], "no run"),
    (["patch", "sglang", "{run}", "-o", "{afile}"], "is a file"),
    # runs, rm
    (["runs", "--root", "{afile}"], "is a file"),
    (["rm"], "name the runs to remove"),
    (["rm", "{emptydir}"], "no run"),
    (["rm", "--older-than", "yesterday"], "--older-than takes a date"),
]


# Commands that may say first that an extra is missing (the quick start installs no `train` extra): still one
# line and exit code 2, naming the package and the extra instead of the bad path.
NEEDS_EXTRA = {"dataset": ("datasets", "train"), "train": ("trl", "train")}


@pytest.mark.parametrize("args, fragment", ROWS, ids=[" ".join(a[:3]) for a, _ in ROWS])
def test_bad_input(ksmith_cmd_module, places, args, fragment):
    subs = {k: str(v) for k, v in places.items()}
    proc = ksmith(
        ksmith_cmd_module,
        *[a.format(**subs) for a in args],
        env_extra={"KSMITH_PLUGIN_MODULES": TOY, "KSMITH_RUNS_DIR": str(places["tmp"] / "runs")},
        cwd=places["tmp"],
    )
    module, extra = NEEDS_EXTRA.get(args[0], (None, None))
    if module is not None and importlib.util.find_spec(module) is None and fragment not in proc.stderr:
        fragment = f"needs the '{module}' package: pip install 'kernel-smith[{extra}]'"
    assert_one_line_error(proc, fragment)
    assert (places["run"] / "run.sqlite").is_file()  # nothing stored is ever lost to bad input


def test_every_command_has_a_row(ksmith_cmd_module):
    from ksmith_core.cli import build

    covered = {args[0] for args, _ in ROWS}
    without_paths = {"plugins", "problems"}  # they take no path or name
    assert set(build().commands) - without_paths <= covered


def test_bench_gives_a_problem_that_raises_a_row_and_goes_on(ksmith_cmd_module, places, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("raise_inputs", "vector_add"):
        source = places["raise_inputs"] if name == "raise_inputs" else places["problem"]
        (suite / f"{name}.py").write_text(Path(source).read_text())
        (suite / f"{name}.seed.py").write_text(places["cand"].read_text())
    (suite / "broken.py").write_text("x = (\n")
    proc = ksmith(ksmith_cmd_module, "bench", suite, "-o", tmp_path / "out", "--json", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    rows = {r["problem"]: r for r in result["rows"]}
    assert rows["raise_inputs"]["status"] == "setup_failed"
    assert "get_inputs() raised ValueError: no inputs today" in rows["raise_inputs"]["reasons"][0]
    assert rows["broken"]["status"] == "load_failed" and "syntax error" in rows["broken"]["reasons"][0]
    assert rows["vector_add"]["status"] == "ok"
    assert result["summary"]["not_evaluated"] == {"load_failed": 1, "setup_failed": 1}


def test_rm_removes_named_and_old_runs_but_never_one_being_written(ksmith_cmd_module, places, tmp_path):
    import shutil

    root = tmp_path / "runs"
    for name in ("a", "b", "c"):
        shutil.copytree(places["run"], root / name)
    env = {"KSMITH_RUNS_DIR": str(root)}
    proc = ksmith(ksmith_cmd_module, "rm", "a", env_extra=env)
    assert proc.returncode == 0 and not (root / "a").exists() and (root / "b").exists(), proc.stderr

    lock = os.open(root / "b" / "run.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)  # as a running `ksmith evolve` holds it
    try:
        proc = ksmith(ksmith_cmd_module, "rm", "--older-than", "2999-01-01", env_extra=env)
    finally:
        os.close(lock)
    assert proc.returncode == 0, proc.stderr
    assert (root / "b").exists() and "is being written (its lock is held); not removed" in proc.stderr
    assert not (root / "c").exists()  # started before 2999: removed

    proc = ksmith(ksmith_cmd_module, "rm", "--older-than", "2000-01-01", "--dry-run", env_extra=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "no run matched"
