"""``ksmith dataset``: stored runs become step rows, filtered by timing noise, split by problem."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from stored_runs import HARDWARE, PROBLEM, SEED, write_run

from ksmith_core.errors import CandidateError
from ksmith_core.feedback import feedback_for
from ksmith_core.loading import check_candidate_source, load_problem
from ksmith_core.model import Scored, Selection, source_id
from ksmith_llm import prompts
from ksmith_llm.proposer import read_answer
from ksmith_train.dataset import build_dataset, split_problems
from ksmith_train.steps import answer_for, read_run

datasets = pytest.importorskip("datasets")


def mutations(source: str, rng: random.Random) -> str:
    """A few random line edits: changes, insertions, deletions and duplicated lines."""
    lines = source.rstrip("\n").split("\n")
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines))
        what = rng.choice(["change", "insert", "delete", "duplicate", "blank"])
        if what == "change":
            lines[i] = lines[i] + "  # tuned"
        elif what == "insert":
            lines.insert(i, "    pass  # inserted")
        elif what == "delete" and len(lines) > 5:
            del lines[i]
        elif what == "duplicate":
            lines.insert(i, lines[i])
        else:
            lines.insert(i, "")
    return "\n".join(lines) + "\n"


def parses(source: str) -> bool:
    try:
        check_candidate_source(source)
    except CandidateError:
        return False
    return True


def test_every_change_is_written_as_an_answer_the_proposer_reads_back_as_the_child():
    rng = random.Random(0)
    forms = []
    for _ in range(200):
        child = mutations(SEED, rng)
        if source_id(child) == source_id(SEED) or not parses(child):
            continue
        answer = answer_for(SEED, child, "one change", fixing=False)
        assert answer is not None
        text, form = answer
        forms.append(form)
        reading = read_answer(text, SEED, False)
        assert reading.source is not None and source_id(reading.source) == source_id(child), text
    # Small changes are written as SEARCH/REPLACE blocks, as the prompt asks.
    assert forms.count("blocks") > len(forms) // 2


def test_a_one_line_change_is_one_small_block():
    child = SEED.replace("num_warps=4", "num_warps=8")
    text, form = answer_for(SEED, child, "num_warps 4 -> 8", fixing=False)
    assert form == "blocks"
    assert text.splitlines()[0] == "num_warps 4 -> 8"
    assert text.count("<<<<<<< SEARCH") == 1 and "class ModelNew" not in text


def test_each_step_gets_its_filter_and_the_prompt_the_llm_proposer_would_build(tmp_path):
    made = write_run(tmp_path / "run")
    steps = read_run(tmp_path / "run")
    by_child = {row["child_id"]: row for row in steps.rows}
    assert steps.evaluations == 7 and len(steps.rows) == 6  # the seed is no step

    expected = {
        "bigger": "kept",
        "warps": "within_noise",
        "hack": "refused",
        "broken": "incorrect",
        "repaired": "broken_parent",
        "stages": "failed_revalidation",
    }
    assert {role: by_child[made[role].id]["filter"] for role in expected} == expected
    hack = by_child[made["hack"].id]
    assert hack["refused"] and not hack["correct"] and hack["reasons"][0].startswith("NO_TRITON_LAUNCH")
    bigger = by_child[made["bigger"].id]
    assert bigger["gain"] == pytest.approx(0.5) and bigger["noise"] == pytest.approx(0.02)
    stages = by_child[made["stages"].id]
    assert stages["revalidated"] is True and stages["revalidated_gain"] == pytest.approx(0.0)

    # The repair step's prompt is the proposer's fix prompt, with the broken parent's own feedback.
    problem = load_problem(PROBLEM, name="vector_add")
    seed = Scored(made["seed"], _verdict(tmp_path, made["seed"]), "")
    seed = Scored(seed.candidate, seed.verdict, feedback_for(seed.candidate, seed.verdict))
    big = Scored(made["bigger"], _verdict(tmp_path, made["bigger"]), "")
    big = Scored(big.candidate, big.verdict, feedback_for(big.candidate, big.verdict, seed))
    broken_verdict = _verdict(tmp_path, made["broken"])
    broken = Scored(made["broken"], broken_verdict, feedback_for(made["broken"], broken_verdict, big))
    want = prompts.improve_messages(
        problem, Selection(parents=(broken,), mode="fix"), broken, big, HARDWARE, "cuda"
    )
    repaired = by_child[made["repaired"].id]
    assert repaired["messages"] == want
    assert "the edit broke a working parent" in repaired["messages"][1]["content"]
    assert repaired["mode"] == "fix"


def test_a_step_shows_the_inspirations_its_proposer_was_shown(tmp_path):
    from dataclasses import replace

    from ksmith_core.model import freeze
    from ksmith_core.store import RunStore

    made = write_run(tmp_path / "first")
    # The same run, with the last step proposed from a selection that showed the 'warps' kernel.
    run = tmp_path / "run"
    with RunStore.open(tmp_path / "first") as old:
        meta, manifest, evaluations = old.meta(), old.manifest(), list(old.evaluations())
        problem_text = old.problem_path.read_text()
    store = RunStore.create(run, problem_text, meta, manifest)
    with store:
        for _, candidate, verdict in evaluations:
            if candidate.id == made["stages"].id:
                inspired = {"inspiration_ids": [made["warps"].id], "selection_mode": "improve"}
                candidate = replace(candidate, meta=freeze(inspired))
            store.record_evaluation(candidate, verdict)
    rows = {row["child_id"]: row for row in read_run(run).rows}
    stages = rows[made["stages"].id]
    assert stages["inspiration_ids"] == [made["warps"].id]
    prompt = stages["messages"][1]["content"]
    assert "### Another kernel of this run" in prompt and made["warps"].source in prompt
    assert rows[made["bigger"].id]["inspiration_ids"] == []


def _verdict(tmp_path: Path, candidate):
    from ksmith_core.store import RunStore

    with RunStore.open(tmp_path / "run") as store:
        return store.get(candidate.id)[1]


def test_the_saved_datasets_hold_kept_steps_for_sft_and_every_step_with_labels(tmp_path):
    made = write_run(tmp_path / "runs" / "a")
    write_run(tmp_path / "runs" / "b", name="vector_add_copy")
    card = build_dataset([str(tmp_path / "runs")], tmp_path / "out", test_fraction=0.5)

    assert card["steps"] == 12 and card["kept"] == 2 and card["refused"] == 2
    assert sum(card["filters"].values()) == card["steps"]
    splits = {name: entry["split"] for name, entry in card["problems"].items()}
    assert sorted(splits.values()) == ["test", "train"]

    conv = datasets.load_from_disk(str(tmp_path / "out" / "conversational"))
    plain = datasets.load_from_disk(str(tmp_path / "out" / "prompt_completion"))
    steps = datasets.load_from_disk(str(tmp_path / "out" / "steps"))
    for split, data in conv.items():
        assert {row["problem"] for row in data} == {p for p, s in splits.items() if s == split}
        row = data[0]
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["completion"][0]["role"] == "assistant"
        assert row["child_id"] == made["bigger"].id
        assert isinstance(plain[split][0]["prompt"], str) and plain[split][0]["completion"].startswith(
            "BLOCK"
        )
    assert sum(len(d) for d in steps.values()) == 12
    refused = [row for d in steps.values() for row in d if row["filter"] == "refused"]
    assert len(refused) == 2 and all(row["reasons"] for row in refused)
    lines = (tmp_path / "out" / "steps.jsonl").read_text().splitlines()
    assert len(lines) == 12 and json.loads(lines[0])["split"] in ("train", "test")
    text = (tmp_path / "out" / "README.md").read_text()
    assert "| refused | 2 |" in text and "vector_add_copy" in text


def test_a_step_made_by_two_runs_is_kept_once(tmp_path):
    write_run(tmp_path / "runs" / "a")
    write_run(tmp_path / "runs" / "b")
    card = build_dataset([str(tmp_path / "runs")], tmp_path / "out")
    assert card["steps"] == 12 and card["kept"] == 1 and card["filters"]["duplicate"] == 6


def test_min_gain_raises_the_bar_above_the_noise(tmp_path):
    write_run(tmp_path / "run")
    card = build_dataset([str(tmp_path / "run")], tmp_path / "out", min_gain=0.6)
    assert card["kept"] == 0 and card["filters"]["below_min_gain"] == 2


def test_a_directory_without_runs_is_refused(tmp_path):
    from ksmith_core.errors import ConfigError
    from ksmith_train.dataset import run_paths

    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no run"):
        run_paths([str(tmp_path / "empty")])


def test_split_keeps_each_problem_in_one_split_and_one_problem_in_train():
    assert split_problems(["a"], 0.5) == {"a": "train"}
    split = split_problems([f"p{i}" for i in range(10)] * 2, 0.2)
    assert len(split) == 10 and list(split.values()).count("test") == 2
    assert split == split_problems([f"p{i}" for i in reversed(range(10))], 0.2)


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(tmp_path, ksmith_cmd):
    write_run(tmp_path / "run")
    for args, message in (
        (["dataset", str(tmp_path / "nope"), "-o", str(tmp_path / "o")], "no run"),
        (["dataset", str(tmp_path / "run"), "-o", str(tmp_path / "o"), "--test-fraction", "1"], "[0, 1)"),
    ):
        proc = subprocess.run([*ksmith_cmd, *args], capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_without_the_train_extra_the_command_names_it(tmp_path):
    write_run(tmp_path / "run")
    code = "import sys; sys.modules['datasets'] = None; from ksmith_core.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "dataset", str(tmp_path / "run"), "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "pip install 'kernel-smith[train]'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_real_run_becomes_a_dataset_and_an_export(tmp_path, ksmith_cmd):
    run = tmp_path / "run"
    proc = subprocess.run(
        [*ksmith_cmd, "evolve", str(PROBLEM), "--budget", "4", "--device", "cpu", "--run-dir", str(run)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(
        [*ksmith_cmd, "dataset", str(run), "-o", str(tmp_path / "data"), "--json"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    card = json.loads(proc.stdout)
    assert card["steps"] == 3 and card["interpreted_steps"] == 3
    assert card["runs"][0]["evaluations"] == 4
    rows = [json.loads(line) for line in (tmp_path / "data" / "steps.jsonl").read_text().splitlines()]
    for row in rows:
        reading = read_answer(row["answer"], row["parent_source"], row["mode"] == "fix")
        assert source_id(reading.source) == source_id(row["child_source"])
        assert row["messages"][1]["content"].count(row["parent_source"].strip("\n")) == 1

    proc = subprocess.run(
        [*ksmith_cmd, "export", str(run), "--target", "dataset", "-o", str(tmp_path / "export")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "export" / "card.json").read_text())["steps"] == 3
