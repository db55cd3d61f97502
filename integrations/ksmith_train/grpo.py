"""``ksmith train grpo``: GRPO with TRL, rewarded by ksmith's own evaluator.

Each prompt is the ``llm`` proposer's prompt for improving a parent kernel: the seed of each ``--problems``
entry (evaluated first, so the prompt carries its verdict and feedback), or the parents of a ``--data``
dataset's training steps. For every completion the reward reads the answer with the proposer's own reader,
applies the edit to the parent and has the evaluator judge the result -- the same evaluation service as
``ksmith evolve`` (the executor, one isolated child process per candidate) -- and scores the verdict:

==========================================  =============================================
outcome                                      reward
==========================================  =============================================
no usable edit (no block, SEARCH not found)  -1.0
refused by the evaluator's checks (a hack)   -1.0
compile error, runtime error, crash, timeout -0.5
incorrect (does not match the reference)     -0.25
correct                                      0.5 + 0.5 * min(speedup over parent, 3.0)
==========================================  =============================================

(Dr.Kernel's ``0.5 * correct + 0.5 * min(speedup, 3)``, with the speedup taken over the parent, and negative
rewards that order the failures.)
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ksmith_core.errors import ConfigError
from ksmith_core.model import Candidate, EvalOptions, Problem, Scored, Status
from ksmith_train.extra import need
from ksmith_train.models import TRAIN_INFO, load_base

REWARDS = {
    "invalid_edit": -1.0,
    "refused": -1.0,
    "broken": -0.5,
    "incorrect": -0.25,
}
MAX_SPEEDUP = 3.0


def outcome_reward(
    status: Status | None, speedup: float | None, parent_speedup: float | None
) -> tuple[str, float]:
    """``(outcome, reward)`` of one verdict (``status`` ``None`` when the answer held no usable edit)."""
    if status is None:
        return "invalid_edit", REWARDS["invalid_edit"]
    if status is Status.REJECTED:
        return "refused", REWARDS["refused"]
    if status is Status.INCORRECT:
        return "incorrect", REWARDS["incorrect"]
    if status is not Status.OK:
        return "broken", REWARDS["broken"]
    over_parent = (speedup / parent_speedup) if speedup and parent_speedup else 1.0
    return "correct", 0.5 + 0.5 * min(max(over_parent, 0.0), MAX_SPEEDUP)


class EvaluatorReward:
    """The reward function TRL calls: ``f(prompts, completions, **columns) -> list[float]``.

    The dataset columns it reads: ``problem`` (a key of ``problems``), ``parent_source``, ``parent_speedup``
    and ``mode``. Every outcome is counted in ``self.outcomes``.
    """

    __name__ = "evaluator_reward"

    def __init__(
        self,
        problems: dict[str, Problem],
        options: EvalOptions,
        parallel: int = 1,
        executor: str | None = None,
    ) -> None:
        self.problems = problems
        self.options = options
        self.parallel = parallel
        self.executor = executor
        self.outcomes: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        problem: list[str],
        parent_source: list[str],
        parent_speedup: list[float | None],
        mode: list[str],
        **_: Any,
    ) -> list[float]:
        from ksmith_core.capabilities import EvalJob
        from ksmith_core.engine import evaluate_all
        from ksmith_llm.proposer import read_answer

        rewards: list[float | None] = [None] * len(completions)
        jobs, where = [], []
        for i, completion in enumerate(completions):
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            reading = read_answer(text, parent_source[i], mode[i] == "fix")
            if reading.source is None:
                rewards[i] = self._count(*outcome_reward(None, None, None))
                continue
            candidate = Candidate.from_source(reading.source, edit=reading.summary, proposer="grpo")
            jobs.append(EvalJob(self.problems[problem[i]], candidate, self.options))
            where.append(i)
        verdicts = evaluate_all(jobs, self.parallel, self.executor)
        for i, verdict in zip(where, verdicts):
            rewards[i] = self._count(*outcome_reward(verdict.status, verdict.speedup, parent_speedup[i]))
        return [float(r) for r in rewards]

    def _count(self, outcome: str, reward: float) -> float:
        with self.lock:
            self.outcomes[outcome] += 1
        return reward


def prompts_from_problems(
    specs: Sequence[str], options: EvalOptions
) -> tuple[list[dict], dict[str, Problem]]:
    """One row per problem: the proposer's prompt for improving its shipped seed, judged first."""
    from ksmith_core.capabilities import EvalJob
    from ksmith_core.engine import evaluate_all
    from ksmith_core.environment import device_facts
    from ksmith_core.feedback import feedback_for
    from ksmith_core.loading import load_candidate, resolve_problem, seed_path_for
    from ksmith_train.steps import messages_for

    problems = {}
    seeds = []
    for spec in specs:
        problem = resolve_problem(spec)
        path = seed_path_for(problem)
        if path is None:
            raise ConfigError(f"problem {problem.name} ships no seed kernel to improve")
        problems[problem.name] = problem
        seeds.append((problem, load_candidate(path)))
    verdicts = evaluate_all([EvalJob(p, seed, options) for p, seed in seeds])
    hardware = dict(device_facts(options.device))
    rows = []
    for (problem, seed), verdict in zip(seeds, verdicts):
        parent = Scored(seed, verdict, feedback_for(seed, verdict))
        rows.append(
            {
                "prompt": messages_for(problem, parent, parent, hardware, options.device),
                "problem": problem.name,
                "parent_source": seed.source,
                "parent_speedup": verdict.speedup,
                "mode": "improve" if verdict.accepted else "fix",
            }
        )
    return rows, problems


def prompts_from_data(data: Path, workdir: Path) -> tuple[list[dict], dict[str, Problem]]:
    """One row per distinct parent of the training split of a ``ksmith dataset`` directory."""
    from ksmith_core.loading import load_problem

    datasets = need("datasets", "ksmith train grpo")
    if not (data / "steps" / "dataset_dict.json").is_file():
        raise ConfigError(f"{data} is not a ksmith dataset (no steps/ in it): make one with `ksmith dataset`")
    steps = datasets.load_from_disk(str(data / "steps"))
    if "train" not in steps:
        raise ConfigError(f"{data} has no train split")
    rows, problems, seen = [], {}, set()
    for row in steps["train"]:
        key = (row["problem"], row["parent_id"])
        if key in seen:
            continue
        seen.add(key)
        if row["problem"] not in problems:
            path = workdir / f"{row['problem']}.py"
            path.write_text(row["problem_source"], encoding="utf-8")
            problems[row["problem"]] = load_problem(path, name=row["problem"])
        rows.append(
            {
                "prompt": row["messages"],
                "problem": row["problem"],
                "parent_source": row["parent_source"],
                "parent_speedup": row["parent_speedup"],
                "mode": row["mode"],
            }
        )
    return rows, problems


def train_grpo(
    model: str | Path,
    output: Path,
    problems: Sequence[str] = (),
    data: Path | None = None,
    max_steps: int = 50,
    num_generations: int = 4,
    max_completion_length: int = 1024,
    learning_rate: float = 1e-5,
    rank: int = 16,
    options: EvalOptions | None = None,
    parallel: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """GRPO with a LoRA adapter; returns what ``ksmith-train.json`` records."""
    from ksmith_core.clitools import output_dir
    from ksmith_train.sft import _versions, device_args, lora_config

    if bool(problems) == (data is not None):
        raise ConfigError("give --problems or --data (one of them)")
    if max_steps < 1 or num_generations < 2 or max_completion_length < 1:
        raise ConfigError("--max-steps and --max-completion-length must be at least 1, --num-generations 2")
    trl = need("trl", "ksmith train grpo")
    datasets = need("datasets", "ksmith train grpo")
    datasets.disable_progress_bars()
    options = options or EvalOptions()
    with tempfile.TemporaryDirectory(prefix="ksmith-grpo-") as workdir:
        if data is not None:
            rows, known = prompts_from_data(Path(data), Path(workdir))
        else:
            rows, known = prompts_from_problems(problems, options)
        if not rows:
            raise ConfigError("no prompt to train on")
        base, tokenizer = load_base(model, "ksmith train grpo")
        output = output_dir(Path(output))
        reward = EvaluatorReward(known, options, parallel=parallel)
        config = trl.GRPOConfig(
            output_dir=str(output),
            max_steps=max_steps,
            per_device_train_batch_size=num_generations,
            num_generations=num_generations,
            max_completion_length=max_completion_length,
            learning_rate=learning_rate,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_vllm=False,
            seed=seed,
            gradient_checkpointing=False,
            **device_args(),
        )
        started = time.time()
        trainer = trl.GRPOTrainer(
            model=base,
            reward_funcs=reward,
            args=config,
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=lora_config(rank),
        )
        trainer.train()
    trainer.save_model(str(output))
    tokenizer.save_pretrained(str(output))
    info = {
        "kind": "grpo",
        "base_model": str(Path(model).expanduser().resolve()),
        "prompts": len(rows),
        "problems": sorted(known),
        "max_steps": max_steps,
        "num_generations": num_generations,
        "max_completion_length": max_completion_length,
        "learning_rate": learning_rate,
        "lora_rank": rank,
        "device": options.device,
        "rewards": [entry["reward"] for entry in trainer.state.log_history if "reward" in entry],
        "outcomes": dict(reward.outcomes),
        "seconds": round(time.time() - started, 1),
        "versions": _versions(),
    }
    (output / TRAIN_INFO).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return info
