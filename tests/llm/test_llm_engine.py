"""The whole path with the engine: request, parse, candidate, verdict, record in a real run store.

With the scripted server the answers are known, so the verdicts are too: a correct edit is ``ok`` and a
wrong rewrite is ``incorrect`` under the real Triton evaluator. A throwaway backend plugin (it judges nothing)
exercises the recording path on its own, where the Triton backend is not installed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from llm_helpers import DATA, free_port, seed_candidate

from ksmith_core import hookimpl, plugins
from ksmith_core.capabilities import Backend
from ksmith_core.engine import Engine
from ksmith_core.loading import load_problem
from ksmith_core.model import Status, Verdict
from ksmith_core.registry import registry
from ksmith_core.run import RunConfig
from ksmith_core.store import RunStore

LAUNCH = "        _add_kernel[grid](x, y, out, n, BLOCK_SIZE=256, num_warps=4)"
WIDER = "        _add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024, num_warps=8)"
GOOD = f"Bigger blocks, more warps.\n<<<<<<< SEARCH\n{LAUNCH}\n=======\n{WIDER}\n>>>>>>> REPLACE\n"
FAKE_KEY = "sk-ksmith-test-8d2e4f6a1c3b"


def wrong_rewrite() -> str:
    wrong = seed_candidate().source.replace("x + y, mask=mask", "x - y, mask=mask")
    return f"Subtract instead.\n```python\n{wrong}```\n"


def key_probe_rewrite() -> str:
    """A correct kernel that fails if the API key is visible to the candidate's process."""
    probe = seed_candidate().source.replace("import torch\n", "import os\n\nimport torch\n", 1)
    probe = probe.replace(
        "        out = torch.empty_like(x)\n",
        "        if any('sk-ksmith-test' in value for value in os.environ.values()):\n"
        "            raise RuntimeError('the API key is visible to the candidate')\n"
        "        out = torch.empty_like(x)\n",
    )
    return f"Probe the environment.\n```python\n{probe}```\n"


def requires_triton() -> None:
    if "triton" not in registry().names(Backend):
        pytest.skip("the triton backend plugin (ksmith_triton) is not installed or failed to load")


def assert_no_key_in(run_dir: Path) -> None:
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"


def llm_candidates(run_dir: Path) -> list:
    with RunStore.open(run_dir) as store:
        return [(c, v) for _, c, v in store.evaluations() if c.proposer == "llm"]


def usage_events(run_dir: Path) -> list:
    with RunStore.open(run_dir) as store:
        return store.events("llm_usage")


class RecordOnlyBackend:
    """Judges nothing: every candidate is "ok" at 1.0x. Only for the recording path."""

    @hookimpl
    def ksmith_register_backends(self, register):
        register(Backend("record-only", self.evaluate, "test backend that judges nothing"))

    def evaluate(self, problem, candidate, options):
        return Verdict(status=Status.OK, correct=True, speedup=1.0, interpreted=True)


@pytest.fixture
def record_only_problem(tmp_path):
    pm = plugins.get_plugin_manager()
    pm.register(RecordOnlyBackend(), name="record-only-test")
    path = tmp_path / "vector_add_record_only.py"
    path.write_text((DATA / "vector_add.py").read_text() + '\nKSMITH_BACKEND = "record-only"\n')
    try:
        yield load_problem(path)
    finally:
        pm.unregister(name="record-only-test")


def evolve(problem, run_dir: Path, url: str, budget: int = 3, **options):
    config = RunConfig(
        proposer="llm", budget=budget, proposals_per_step=1, select="greedy", islands=1, revalidate_best=False,
        proposer_options={"base_url": url, "concurrency": 1, "retries": 1, "backoff": 0.01, **options},
    )  # fmt: skip
    engine = Engine.start(problem, seed_candidate(), config, run_dir)
    try:
        result = engine.evolve(seed_candidate())
        return result, dict(engine.run.state("llm"))
    finally:
        engine.close()


def test_engine_records_llm_candidates_and_usage(tmp_path, scripted_server, record_only_problem, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    scripted_server.script = [GOOD, wrong_rewrite()]
    run_dir = tmp_path / "run"
    result, state = evolve(record_only_problem, run_dir, scripted_server.url)
    assert result.evaluations == 3
    recorded = llm_candidates(run_dir)
    assert [c.edit_kind for c, _ in recorded] == ["llm-diff", "llm-rewrite"]
    assert all(c.meta["prompt_tokens"] == 100 and c.meta["model"] == "scripted-model" for c, _ in recorded)
    events = usage_events(run_dir)
    assert [e["run_requests"] for e in events] == [1, 2]
    assert state["prompt_tokens"] == 200 and state["completion_tokens"] == 40
    assert_no_key_in(run_dir)

    # Resuming rebuilds the token totals from what the candidates recorded.
    engine = Engine.resume(run_dir)
    try:
        assert engine.run.state("llm")["prompt_tokens"] == 200
    finally:
        engine.close()


def test_engine_with_triton_gives_real_verdicts(tmp_path, scripted_server, monkeypatch):
    requires_triton()
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    scripted_server.script = [GOOD, wrong_rewrite(), key_probe_rewrite()]
    run_dir = tmp_path / "run"
    result, _ = evolve(load_problem(DATA / "vector_add.py"), run_dir, scripted_server.url, budget=4)
    assert result.evaluations == 4
    verdicts = {c.edit: v for c, v in llm_candidates(run_dir)}
    assert verdicts["Bigger blocks, more warps."].status is Status.OK, verdicts["Bigger blocks, more warps."]
    assert verdicts["Subtract instead."].status is Status.INCORRECT, verdicts["Subtract instead."]
    # The key was in the driver's environment; the candidate's process must not see it.
    assert verdicts["Probe the environment."].status is Status.OK, verdicts["Probe the environment."].reasons
    assert_no_key_in(run_dir)


def test_cli_reports_an_unreachable_server_in_one_line(tmp_path, ksmith_cmd, runs_root):
    requires_triton()
    url = f"http://127.0.0.1:{free_port()}/v1"
    command = [*ksmith_cmd, "evolve", str(DATA / "vector_add.py"), "--proposer", "llm", "--llm-base-url", url,
               "--budget", "3", "--run-dir", str(tmp_path / "run")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("ksmith: error:")]
    assert lines == [f"ksmith: error: cannot reach the LLM server at {url}: " + lines[0].split(": ", 3)[-1]]
    assert "Traceback" not in result.stderr
