"""The whole loop: run -> dataset -> ``ksmith train sft`` -> ``ksmith evolve --proposer llm`` with the adapter.

With a tiny random model (SmolLM2 takes minutes per generation on a CPU, and the engine retries a step that
brought nothing up to eight times), so this shows the plumbing, not the quality of the edits.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from stored_runs import PROBLEM, write_run
from tiny_model import make_tiny_model

from ksmith_core.store import RunStore
from ksmith_llm.proposer import DROP_REASONS
from ksmith_train.dataset import build_dataset

pytest.importorskip("trl")


def ksmith(ksmith_cmd, *args, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    proc = subprocess.run(
        [*ksmith_cmd, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_dataset_sft_then_the_adapter_proposes_in_ksmith_evolve(ksmith_cmd, tmp_path):
    model = make_tiny_model(tmp_path / "tiny")
    write_run(tmp_path / "runs" / "a")
    build_dataset(
        [str(tmp_path / "runs")], tmp_path / "data"
    )  # the command itself: tests/train/test_dataset.py
    proc = ksmith(
        ksmith_cmd, "train", "sft", "--model", model, "--data", tmp_path / "data", "--max-steps", "2",
        "--rank", "4", "-o", tmp_path / "adapter", "--json",
    )  # fmt: skip
    record = json.loads(proc.stdout)
    assert record["examples"] == 1 and len(record["losses"]) == 2

    run = tmp_path / "run"
    proc = ksmith(
        ksmith_cmd, "evolve", PROBLEM, "--proposer", "llm", "--llm-model", tmp_path / "adapter",
        "--llm-option", "max_tokens=16", "--budget", "2", "--device", "cpu", "--run-dir", run, "--json",
    )  # fmt: skip
    summary = json.loads(proc.stdout)
    with RunStore.open(run) as store:
        options = store.meta()["config"]["proposer_options"]
        dropped = store.events("dropped")
        usage = store.events("llm_usage")
    assert options["model"] == str(tmp_path / "adapter")
    # Every generation either became an evaluated candidate or was dropped with the llm proposer's reason.
    assert dropped or usage
    assert all(event["reason"] in DROP_REASONS for event in dropped)
    assert summary["evaluations"] + summary["dropped"]["total"] >= 2
