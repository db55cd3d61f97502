"""The trained adapter back in the loop: the ``llm`` proposer generating in process with transformers."""

from __future__ import annotations

import pytest
from stored_runs import DATA

from ksmith_core.engine import evaluate
from ksmith_core.errors import ConfigError, ProposerError
from ksmith_core.loading import load_candidate, load_problem
from ksmith_core.model import Candidate, EvalOptions, Selection
from ksmith_core.run import Run, RunConfig
from ksmith_core.store import RunStore
from ksmith_llm import plugin as llm_plugin
from ksmith_llm import proposer as core
from ksmith_llm.backends import ServerGenerator, TransformersGenerator


@pytest.fixture(autouse=True)
def _no_ambient_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_a_local_path_with_no_server_selects_the_transformers_backend(tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(
        llm_plugin, "TransformersGenerator", lambda settings: made.append(settings) or "local"
    )
    assert llm_plugin.make_generator("llm", {"model": str(tmp_path)}) == "local"
    assert llm_plugin.make_generator("llm", {"model": "x", "backend": "transformers"}) == "local"
    assert [s.model for s in made] == [str(tmp_path), "x"]
    # A served model name, or a local path with a server named, still goes to the server.
    pytest.importorskip("openai")
    generator = llm_plugin.make_generator(
        "llm", {"model": str(tmp_path), "base_url": "http://127.0.0.1:9/v1"}
    )
    assert isinstance(generator, ServerGenerator)
    with pytest.raises(ProposerError, match="no LLM server given"):
        llm_plugin.make_generator("llm", {"model": "some-served-name"})
    with pytest.raises(ConfigError, match="backend must be one of"):
        llm_plugin.make_generator("llm", {"model": "x", "backend": "ollama"})


def test_the_transformers_backend_refuses_a_path_that_does_not_exist(tmp_path):
    with pytest.raises(ProposerError, match="does not exist"):
        llm_plugin.make_generator("llm", {"model": str(tmp_path / "nope"), "backend": "transformers"})


def real_run(run_dir) -> Run:
    """A real vector-add run on the CPU interpreter with its seed evaluated by the real evaluator."""
    problem = load_problem(DATA / "vector_add.py")
    config = RunConfig(proposer="llm", proposals_per_step=1, eval=EvalOptions(device="cpu"))
    meta = {"problem": problem.name, "problem_sha": problem.sha, "config": config.to_dict()}
    store = RunStore.create(run_dir, problem.source, meta, {"device": {"device": "cpu"}})
    run = Run(load_problem(store.problem_path, name=problem.name), config, store)
    seed = Candidate.from_source(load_candidate(DATA / "vector_add.seed.py").source)
    verdict = evaluate(run.problem, seed, config.eval)
    run.add(seed, verdict)
    return run


@pytest.mark.slow
def test_the_sft_adapter_proposes_in_a_real_run(sft_adapter, tmp_path):
    adapter, info = sft_adapter
    run = real_run(tmp_path / "run")
    options = {"model": str(adapter), "max_tokens": 24, "temperature": 0}
    generator = llm_plugin.make_generator("llm", options)
    assert isinstance(generator, TransformersGenerator)
    assert generator.model.endswith("+out")  # base name + adapter directory name

    selection = Selection(parents=(run.population[0],))
    proposals = core.propose(run, selection, generator, "llm")
    usage = run.state(core.STATE)
    # One generation and, if its answer could not be used, one repair request: a real prompt went in.
    assert usage["requests"] in (1, 2) and usage["prompt_tokens"] > 500 and usage["completion_tokens"] > 0
    dropped = run.take_dropped()
    assert len(proposals) + len(dropped) == 1
    for drop in dropped:
        assert drop["reason"] in core.DROP_REASONS
    for proposal in proposals:  # a usable edit goes to the real evaluator like any other
        verdict = evaluate(run.problem, Candidate.from_proposal(proposal), run.config.eval)
        assert verdict.status.value
    run.store.close()
