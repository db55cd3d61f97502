"""The CLI as a user meets it: bad input is one line on stderr and exit 2; listings speak JSON."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TOY = "tests.core.toy:PLUGIN"
REPO = HERE.parents[1]


def ksmith(ksmith_cmd, *args, env_extra=None, cwd=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [*ksmith_cmd, *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def assert_one_line_error(proc, fragment):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "WARNING" not in line]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ksmith: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.fixture
def files(tmp_path):
    ok_candidate = tmp_path / "cand.py"
    ok_candidate.write_text("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    pass\n")
    no_model = tmp_path / "no_model.py"
    no_model.write_text("def get_inputs():\n    return []\n")
    no_inputs = tmp_path / "no_inputs.py"
    no_inputs.write_text("class Model:\n    pass\n")
    syntax = tmp_path / "syntax.py"
    syntax.write_text("class Model(:\n")
    not_candidate = tmp_path / "not_candidate.py"
    not_candidate.write_text("x = 1\n")
    return {
        "cand": ok_candidate,
        "no_model": no_model,
        "no_inputs": no_inputs,
        "syntax": syntax,
        "not_candidate": not_candidate,
    }


def test_help_lists_the_commands(ksmith_cmd):
    proc = ksmith(ksmith_cmd, "--help")
    assert proc.returncode == 0
    for command in ("evolve", "eval", "plugins", "runs", "show", "best", "report", "export", "problems"):
        assert command in proc.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["eval", "missing.py", "{cand}"], "problem file not found"),
        (["eval", "{no_model}", "{cand}"], "defines no class Model"),
        (["eval", "{no_inputs}", "{cand}"], "defines no function get_inputs()"),
        (["eval", "{syntax}", "{cand}"], "syntax error at line 1"),
        (["eval", "{data}/vector_add.py", "{not_candidate}"], "defines no class ModelNew"),
        (["eval", "{data}/vector_add.py", "{syntax}"], "syntax error"),
        (["eval", "{data}/vector_add.py", "{cand}", "--trials", "0"], "--trials must be at least 1"),
        (["eval", "{data}/vector_add.py", "{cand}", "--bogus"], "--bogus"),
        (["evolve", "{data}/vector_add.py", "--proposer", "nope"], "unknown proposer 'nope'"),
        (["evolve", "{data}/vector_add.py", "--budget", "0"], "--budget must be at least 1"),
        (["evolve", "{data}/vector_add.py", "--budget", "many"], "many"),
        (["evolve"], "give a PROBLEM"),
        (["evolve", "no_such_problem_anywhere"], "no problem file and no installed problem named"),
        (["evolve", "--resume", "no-such-run"], "no run 'no-such-run'"),
        (["show", "no-such-run"], "no run 'no-such-run'"),
        (["best", "no-such-run", "-o", "x.py"], "no run"),
        (["export", "no-such-run", "-o", "out"], "no run"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(ksmith_cmd, files, data_dir, tmp_path, args, fragment):
    subs = {k: str(v) for k, v in files.items()} | {"data": str(data_dir)}
    proc = ksmith(
        ksmith_cmd,
        *[a.format(**subs) for a in args],
        env_extra={"KSMITH_RUNS_DIR": str(tmp_path / "r")},
        cwd=tmp_path,
    )
    assert_one_line_error(proc, fragment)


def test_evolve_show_best_runs_export_with_a_plugin_backend(ksmith_cmd, tmp_path):
    from .toy import write_toy_problem

    problem, _seed = write_toy_problem(tmp_path / "p")
    env = {"KSMITH_PLUGIN_MODULES": TOY, "KSMITH_RUNS_DIR": str(tmp_path / "runs")}
    proc = ksmith(
        ksmith_cmd,
        "evolve",
        problem,
        "--proposer",
        "toy",
        "--budget",
        "5",
        "--json",
        "--device",
        "cpu",
        env_extra=env,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # stdout is exactly one JSON document
    assert summary["evaluations"] == 5
    assert summary["best"]["speedup"] > 1.0
    run = summary["run"]

    shown = json.loads(ksmith(ksmith_cmd, "show", run, "--json", env_extra=env).stdout)
    assert shown["evaluations"] == 5 and shown["best"]["id"] == summary["best"]["id"]
    listed = json.loads(ksmith(ksmith_cmd, "runs", "--json", env_extra=env).stdout)
    assert [r["run"] for r in listed] == [run]

    best_file = tmp_path / "best.py"
    proc = ksmith(ksmith_cmd, "best", run, "-o", best_file, env_extra=env)
    assert proc.returncode == 0, proc.stderr
    assert "SPEED = " in best_file.read_text()

    proc = ksmith(
        ksmith_cmd, "export", run, "--target", "library", "-o", tmp_path / "lib", "--json", env_extra=env
    )
    assert proc.returncode == 0, proc.stderr
    entry = json.loads((tmp_path / "lib" / "toy" / "entry.json").read_text())
    assert entry["candidate_id"] == summary["best"]["id"]
    assert entry["verdict"]["status"] == "ok"

    proc = ksmith(ksmith_cmd, "export", run, "--target", "nope", "-o", tmp_path / "x", env_extra=env)
    assert_one_line_error(proc, "unknown exporter 'nope' (registered: ")
    assert "library" in proc.stderr.split("registered: ")[1]

    # Budget raised on resume: the run continues to the new total.
    proc = ksmith(ksmith_cmd, "evolve", "--resume", run, "--budget", "7", "--json", env_extra=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["evaluations"] == 7
