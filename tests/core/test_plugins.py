"""The plugin manager: entry points, broken plugins, selection by environment, the example plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ksmith_core import hookimpl, plugins

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "ksmith-hello"
BUILTINS = {
    "basics",
    "triton",
    "mutate",
    "llm",
    "mapelites",
    "problems",
    "inductor",
    "bench",
    "report",
    "platforms",
    "native",
}


def run_plugins_json(ksmith_cmd, env_extra=None, pythonpath=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [*ksmith_cmd, "plugins", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return {p["name"]: p for p in json.loads(proc.stdout)}


def test_builtins_load_through_entry_points(ksmith_cmd):
    listed = run_plugins_json(ksmith_cmd)
    assert BUILTINS <= set(listed)
    for name in BUILTINS:
        assert listed[name]["distribution"] == "kernel-smith"
        assert listed[name]["status"] == "ok", listed[name]["error"]
        assert listed[name]["hooks"], f"{name} implements no hook"


def test_loading_every_plugin_imports_no_torch():
    """Every command loads every plugin: a plugin module importing torch, Triton or Inductor at the top makes
    each ``ksmith`` command seconds slower (``torch._dynamo`` and Inductor's template heuristics most), so the
    built-ins import them where they are used."""
    probe = (
        "import sys\n"
        "from ksmith_core.cli import build\n"
        "from ksmith_core.plugins import get_plugin_manager\n"
        "get_plugin_manager(); build()\n"
        "print(' '.join(m for m in ('torch', 'triton', 'torch._dynamo', 'torch._inductor') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"imported while loading the plugins: {proc.stdout.strip()}"


def test_load_and_disable_by_environment(ksmith_cmd):
    only = run_plugins_json(ksmith_cmd, {"KSMITH_LOAD_PLUGINS": "basics,mutate"})
    assert set(only) == {"basics", "mutate"}
    none = run_plugins_json(ksmith_cmd, {"KSMITH_LOAD_PLUGINS": ""})
    assert none == {}
    without = run_plugins_json(ksmith_cmd, {"KSMITH_DISABLE_PLUGINS": "llm"})
    assert "llm" not in without and "basics" in without


def test_a_broken_plugin_is_reported_and_skipped(ksmith_cmd, tmp_path):
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('this plugin is broken on purpose')\n")
    (tmp_path / "typo_plugin.py").write_text(
        "from ksmith_core import hookimpl\n\n@hookimpl\ndef ksmith_propse(run):\n    return None\n"
    )
    listed = run_plugins_json(
        ksmith_cmd, {"KSMITH_PLUGIN_MODULES": "broken_plugin,typo_plugin"}, pythonpath=tmp_path
    )
    assert listed["broken_plugin"]["status"] == "error"
    assert "broken on purpose" in listed["broken_plugin"]["error"]
    assert listed["typo_plugin"]["status"] == "error"
    assert "unknown hook 'ksmith_propse'" in listed["typo_plugin"]["error"]
    assert listed["basics"]["status"] == "ok"  # everything else still works


def test_the_example_third_party_plugin_installs_and_is_listed(ksmith_cmd, tmp_path):
    target = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(EXAMPLE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    listed = run_plugins_json(ksmith_cmd, pythonpath=target)
    hello = listed["hello"]
    assert hello["status"] == "ok"
    assert hello["distribution"] == "ksmith-hello" and hello["version"] == "0.2.0"
    assert hello["hooks"] == ["ksmith_register_exporters", "ksmith_register_proposers"]
    assert hello["registered"] == {"exporters": ["hello-json"], "proposers": ["hello-warps"]}


def test_throwaway_plugin_registered_in_code():
    from ksmith_core import Proposer
    from ksmith_core.registry import registry

    class Throwaway:
        @hookimpl
        def ksmith_register_proposers(self, register):
            register(Proposer("throwaway", lambda run, selection: [], "a test proposer"))

    pm = plugins.get_plugin_manager()
    pm.register(Throwaway(), name="throwaway")
    try:
        assert "throwaway" in registry().names(Proposer)
        info = {i.name: i for i in plugins.plugin_infos()}["throwaway"]
        assert info.hooks == ["ksmith_register_proposers"]
        assert info.registered == {"proposers": ["throwaway"]}
    finally:
        pm.unregister(name="throwaway")
    assert "throwaway" not in registry().names(Proposer)


def test_unknown_names_list_what_is_registered():
    from ksmith_core import Backend, Proposer
    from ksmith_core.errors import PluginError
    from ksmith_core.registry import lookup

    with pytest.raises(PluginError, match=r"unknown proposer 'nope' \(registered: llm, mutate, vllm\)"):
        lookup(Proposer, "nope")
    with pytest.raises(PluginError, match=r"unknown backend 'cobol' \(registered: cuda, triton\)"):
        lookup(Backend, "cobol")


def test_selecting_plugins_by_a_name_nothing_has_warns(ksmith_cmd):
    env = {**os.environ, "KSMITH_LOAD_PLUGINS": "basics,mutat"}
    proc = subprocess.run(
        [*ksmith_cmd, "plugins", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0
    assert {p["name"] for p in json.loads(proc.stdout)} == {"basics"}
    warning = [line for line in proc.stderr.splitlines() if "KSMITH_LOAD_PLUGINS" in line]
    assert len(warning) == 1 and "mutat" in warning[0] and "mutate" in warning[0], proc.stderr
