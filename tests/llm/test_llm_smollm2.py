"""Against a real model: SmolLM2-135M-Instruct served by llama.cpp on 127.0.0.1.

A 135M model writes poor kernels, so these tests assert the path -- request, usage, parse, validation, repair,
candidate, verdict, record -- and accept either outcome of each generation: a valid candidate, or a
rejection with its reason. Nothing here depends on what the model is able to write.
"""

from __future__ import annotations

import pytest
from llm_helpers import DATA, seed_candidate, vector_add_run

from ksmith_core.capabilities import Backend, Proposer
from ksmith_core.errors import ProposerError
from ksmith_core.loading import check_candidate_source, load_problem
from ksmith_core.model import Candidate, Selection, Status, Verdict
from ksmith_core.registry import lookup, registry
from ksmith_llm.backends import ServerGenerator, Settings
from ksmith_llm.proposer import DROP_REASONS, read_answer

# Short answers keep a step to seconds on two CPU cores; the answers are judged, not admired.
OPTIONS = {"max_tokens": 200, "temperature": 0.7, "concurrency": 2, "timeout": 120, "retries": 1}

LAUNCH = "        _add_kernel[grid](x, y, out, n, BLOCK_SIZE=256, num_warps=4)"
WIDER = "        _add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024, num_warps=8)"
ECHO_BLOCK = f"<<<<<<< SEARCH\n{LAUNCH}\n=======\n{WIDER}\n>>>>>>> REPLACE"


def test_the_server_answers_a_chat_with_usage(smollm2_server):
    generator = ServerGenerator(
        Settings.from_options({"base_url": smollm2_server, **OPTIONS, "temperature": 0})
    )
    assert generator.model  # discovered from /v1/models
    echo = f"Copy the following text exactly, with no other words:\n\n{ECHO_BLOCK}"
    completion = generator.chat([{"role": "user", "content": echo}])
    assert completion.text.strip()
    assert completion.prompt_tokens > 20 and completion.completion_tokens > 0
    reading = read_answer(completion.text, seed_candidate().source, fixing=False)
    if reading.source is not None:  # the model copied the block: the edit must have landed
        assert WIDER in reading.source
        check_candidate_source(reading.source)
    else:
        assert reading.failures


def test_proposals_from_a_real_model_are_valid_or_rejected_with_reasons(tmp_path, smollm2_server):
    run = vector_add_run(
        tmp_path / "run", proposer="llm", proposals_per_step=2,
        proposer_options={"base_url": smollm2_server, **OPTIONS},
    )  # fmt: skip
    seed = seed_candidate()
    parent, _ = run.add(seed, Verdict(status=Status.OK, correct=True, speedup=1.0, interpreted=True))
    selection = Selection(parents=(parent,), inspirations=(parent,))
    proposals = lookup(Proposer, run.config.proposer).propose(run, selection)

    state = run.state("llm")
    assert 2 <= state["requests"] <= 4  # two generations, each with at most one repair
    assert state["prompt_tokens"] > 500 and state["completion_tokens"] > 0
    assert len(proposals) + state.get("rejected", 0) == 2
    assert sum(run.dropped_counts().values()) == state.get("rejected", 0)
    for dropped in run.take_dropped():
        assert dropped["reason"] in DROP_REASONS and dropped["detail"].strip()
    for proposal in proposals:
        check_candidate_source(proposal.source)
        assert Candidate.from_proposal(proposal).id != seed.id
        assert proposal.parent_ids == (seed.id,)
        assert proposal.edit_kind in ("llm-diff", "llm-rewrite") and proposal.edit
        assert proposal.meta["prompt_tokens"] > 0 and proposal.meta["model"]


def test_seed_from_llm_gives_a_module_or_a_clear_error(smollm2_server):
    from ksmith_llm.plugin import seed_from_llm

    problem = load_problem(DATA / "vector_add.py")
    try:
        proposal = seed_from_llm(problem, {"base_url": smollm2_server, **OPTIONS, "max_tokens": 384})
    except ProposerError as exc:
        assert str(exc).startswith("the LLM gave no usable first kernel for vector_add: ")
        assert "\n" not in str(exc)
    else:
        check_candidate_source(proposal.source)
        assert proposal.edit_kind == "llm-seed" and proposal.meta["completion_tokens"] > 0


@pytest.mark.slow
def test_engine_with_a_real_model_and_triton_records_every_step(tmp_path, smollm2_server):
    if "triton" not in registry().names(Backend):
        pytest.skip("the triton backend plugin (ksmith_triton) is not installed or failed to load")
    from ksmith_core.engine import Engine
    from ksmith_core.run import RunConfig
    from ksmith_core.store import RunStore

    # The hint asks the model to copy a known edit: when it does, a real candidate reaches the evaluator;
    # when it does not, the rejections are what is checked. Either way the path is exercised.
    hint = f"Answer with exactly these lines and nothing else:\n\nLarger blocks.\n{ECHO_BLOCK}"
    config = RunConfig(
        proposer="llm", budget=3, proposals_per_step=1, select="greedy", islands=1, revalidate_best=False,
        proposer_options={"base_url": smollm2_server, **OPTIONS, "temperature": 0, "hints": hint},
    )  # fmt: skip
    run_dir = tmp_path / "run"
    engine = Engine.start(load_problem(DATA / "vector_add.py"), seed_candidate(), config, run_dir)
    try:
        result = engine.evolve(seed_candidate())
        state = dict(engine.run.state("llm"))
    finally:
        engine.close()

    assert result.stop_reason in ("budget", "exhausted")
    assert state["requests"] >= 1 and state["completion_tokens"] > 0
    with RunStore.open(run_dir) as store:
        evaluated = list(store.evaluations())
        usage = store.events("llm_usage")
        dropped = store.dropped()
    made_by_llm = [(c, v) for _, c, v in evaluated if c.proposer == "llm"]
    # Every step either produced a candidate the evaluator judged, or a rejection the proposer counted.
    assert made_by_llm or state.get("rejected", 0) > 0
    # Every rejection is in the run store with its reason.
    rejected = sum(n for reason, n in dropped["by_reason"].items() if reason in DROP_REASONS)
    assert rejected == state.get("rejected", 0)
    for candidate, verdict in made_by_llm:
        assert verdict.status in set(Status)
        assert candidate.meta["completion_tokens"] > 0
        if not verdict.accepted:
            assert verdict.reasons or verdict.feedback
    assert len(usage) == len(made_by_llm)
