"""Unusable answers end up in the run store, counted by reason: the run explains why it found nothing.

The scripted server plays a model that never writes a usable edit -- the run of the bug report: many chat
requests, one evaluation (the seed, judged by the real Triton backend), stopped as exhausted. Every dropped
generation must be a ``dropped`` event with its reason, and the summary must say so.
"""

from __future__ import annotations

import pytest
from llm_helpers import DATA, seed_candidate

from ksmith_core.capabilities import Backend
from ksmith_core.engine import MAX_BARREN_STEPS, Engine
from ksmith_core.loading import load_problem
from ksmith_core.registry import registry
from ksmith_core.run import RunConfig
from ksmith_core.store import RunStore

JUNK = "The kernel looks fine to me."
MISQUOTED = (
    "Change the mask.\n<<<<<<< SEARCH\n    mask = offsets <= n_elements - 1\n=======\n"
    "    mask = offsets < n\n>>>>>>> REPLACE"
)
BROKEN = "A new module.\n```python\nclass ModelNew(:\n    pass\n```\n"


def unchanged() -> str:
    return f"The same kernel.\n```python\n{seed_candidate().source}```\n"


@pytest.fixture
def triton_backend():
    if "triton" not in registry().names(Backend):
        pytest.skip("the triton backend plugin (ksmith_triton) is not installed or failed to load")


def test_junk_answers_are_counted_by_reason_in_the_run_store(tmp_path, scripted_server, triton_backend):
    # Eight steps of one generation each, every answer failing twice (the first try and its repair).
    answers = [JUNK] * 4 + [MISQUOTED] * 2 + [BROKEN, unchanged()]
    scripted_server.script = [answer for answer in answers for _ in range(2)]
    config = RunConfig(
        proposer="llm", budget=10, proposals_per_step=1, select="greedy", islands=1, revalidate_best=False,
        proposer_options={"base_url": scripted_server.url, "concurrency": 1, "retries": 1, "backoff": 0.01},
    )  # fmt: skip
    run_dir = tmp_path / "run"
    engine = Engine.start(load_problem(DATA / "vector_add.py"), seed_candidate(), config, run_dir)
    try:
        result = engine.evolve(seed_candidate())
    finally:
        engine.close()

    assert len(scripted_server.requests) == 2 * MAX_BARREN_STEPS
    assert result.stop_reason == "exhausted" and result.evaluations == 1
    expected = {"no_edit_block": 4, "edit_not_applied": 2, "no_change": 1, "syntax_error": 1}
    with RunStore.open(run_dir) as store:
        events = store.events("dropped")
        summary = store.summary()
    assert summary["dropped"]["by_reason"] == expected
    assert all(e["by"] == "proposer" and e["proposer"] == "llm" and e["evaluations"] == 1 for e in events)
    latest = summary["dropped"]["latest"]
    assert "no SEARCH/REPLACE block" in latest["no_edit_block"]
    assert "its SEARCH text is not in the kernel" in latest["edit_not_applied"]
    assert "syntax error at line 1" in latest["syntax_error"]
    assert "exactly as it was" in latest["no_change"]
    assert summary["stop_explanation"] == (
        "stopped: exhausted (no new candidate in 8 steps in a row) -- "
        "8 dropped: 4 no edit block, 2 edit not applied, 1 no change, 1 syntax error"
    )
    assert summary["where_to_look"][0] == "no candidate beat the seed: none was evaluated after it"

    # A resumed run starts from the stored counts.
    resumed = Engine.resume(run_dir)
    try:
        assert resumed.run.dropped_counts() == expected
    finally:
        resumed.close()
