"""``ksmith train grpo``: the reward is the evaluator's verdict on the proposed edit applied to the parent."""

from __future__ import annotations

import pytest
from stored_runs import DATA, SEED

from ksmith_core.loading import load_problem
from ksmith_core.model import EvalOptions, Status
from ksmith_train.grpo import REWARDS, EvaluatorReward, outcome_reward

datasets = pytest.importorskip("datasets")


def test_the_reward_orders_the_outcomes():
    assert outcome_reward(None, None, 1.0) == ("invalid_edit", -1.0)
    assert outcome_reward(Status.REJECTED, None, 1.0) == ("refused", -1.0)
    assert outcome_reward(Status.COMPILE_ERROR, None, 1.0)[1] == REWARDS["broken"] == -0.5
    assert outcome_reward(Status.TIMEOUT, None, 1.0)[1] == -0.5
    assert outcome_reward(Status.INCORRECT, None, 1.0)[1] == -0.25
    assert outcome_reward(Status.OK, 1.0, 1.0) == ("correct", 1.0)
    assert outcome_reward(Status.OK, 2.0, 1.0)[1] == 1.5
    assert outcome_reward(Status.OK, 100.0, 1.0)[1] == 2.0  # capped at 3x the parent
    assert outcome_reward(Status.OK, 0.5, 1.0)[1] == 0.75  # correct but slower still beats any failure


def block(search: str, replace: str) -> list[dict[str, str]]:
    text = f"my change\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"
    return [{"role": "assistant", "content": text}]


@pytest.mark.slow
def test_rewards_come_from_the_real_evaluator_on_the_edited_parent():
    problem = load_problem(DATA / "vector_add.py")
    reward = EvaluatorReward({"vector_add": problem}, EvalOptions(device="cpu"), parallel=2)
    launch = "        _add_kernel[grid](x, y, out, n, BLOCK_SIZE=256, num_warps=4)\n        return out"
    completions = [
        block("BLOCK_SIZE=256, num_warps=4", "BLOCK_SIZE=256, num_warps=8"),  # correct
        block("x + y, mask=mask", "x - y, mask=mask"),  # incorrect
        block(launch, "        return x + y"),  # no Triton launch: refused
        [{"role": "assistant", "content": "I would make it faster."}],  # no edit
        block("this line is not in the kernel", "x"),  # edit does not apply
    ]
    n = len(completions)
    rewards = reward(
        prompts=[[]] * n,
        completions=completions,
        problem=["vector_add"] * n,
        parent_source=[SEED] * n,
        parent_speedup=[1.0] * n,
        mode=["improve"] * n,
    )
    assert rewards[0] > 0.5  # correct: 0.5 + 0.5 * speedup over the parent
    assert rewards[1:] == [-0.25, -1.0, -1.0, -1.0]
    assert reward.outcomes == {"correct": 1, "incorrect": 1, "refused": 1, "invalid_edit": 2}


def grpo_data(directory):
    """A dataset directory whose train split has one short prompt on the real vector-add seed."""
    from sft_data import SHORT

    from ksmith_llm import prompts

    user = "## Current kernel\n```python\n" + SHORT + "```\n\n## Task\nMake ONE targeted change."
    row = {
        "messages": [
            {"role": "system", "content": prompts.SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ],
        "problem": "vector_add",
        "problem_source": (DATA / "vector_add.py").read_text(),
        "parent_id": "p",
        "parent_source": SEED,
        "parent_speedup": 1.0,
        "mode": "improve",
    }
    datasets.DatasetDict({"train": datasets.Dataset.from_list([row])}).save_to_disk(str(directory / "steps"))
    return directory


@pytest.mark.slow
def test_grpo_steps_on_a_real_model_with_evaluator_rewards(smollm2_dir, tmp_path):
    from ksmith_train.grpo import train_grpo

    info = train_grpo(
        smollm2_dir,
        tmp_path / "out",
        data=grpo_data(tmp_path / "data"),
        max_steps=1,
        num_generations=2,
        max_completion_length=16,
        options=EvalOptions(device="cpu"),
    )
    assert len(info["rewards"]) == 1 and info["prompts"] == 1
    assert sum(info["outcomes"].values()) == 2  # both completions of the one step were judged
    assert (tmp_path / "out" / "adapter_config.json").is_file()


@pytest.mark.slow
def test_grpo_prompts_from_problems_are_the_proposers_prompts_for_their_judged_seeds():
    from ksmith_core.loading import seed_path_for
    from ksmith_train.grpo import prompts_from_problems

    rows, problems = prompts_from_problems(["relu"], EvalOptions(device="cpu"))
    assert list(problems) == ["relu"] and len(rows) == 1
    row = rows[0]
    seed = seed_path_for(problems["relu"]).read_text()
    assert row["parent_source"] == seed and row["mode"] == "improve" and row["parent_speedup"] > 0
    user = row["prompt"][1]["content"]
    assert seed.strip("\n") in user and "status: ok" in user and "SEARCH/REPLACE" in user
