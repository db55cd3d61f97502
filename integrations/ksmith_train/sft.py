"""``ksmith train sft``: LoRA supervised fine-tuning on the kept steps of a ``ksmith dataset`` directory.

TRL's ``SFTTrainer`` on the conversational prompt-completion split, with the loss on the completion only
(the answer: what changed and the SEARCH/REPLACE blocks), never on the prompt. The output directory holds the
LoRA adapter, the tokenizer and ``ksmith-train.json`` (base model, data, steps, the loss of every step), so
``ksmith evolve --proposer llm --llm-model OUT`` can load base + adapter.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ksmith_core.errors import ConfigError
from ksmith_train.dataset import conversational
from ksmith_train.extra import need
from ksmith_train.models import TRAIN_INFO, load_base

STEPS_CHOICES = ("kept", "correct")


def load_sft_data(data: Path, steps: str = "kept", split: str = "train") -> Any:
    """The conversational examples to train on: the kept steps, or every correct step with an answer."""
    datasets = need("datasets", "ksmith train sft")
    datasets.disable_progress_bars()
    if steps not in STEPS_CHOICES:
        raise ConfigError(f"--steps must be one of {', '.join(STEPS_CHOICES)} (got {steps!r})")
    if not (data / "steps" / "dataset_dict.json").is_file():
        if (data / "card.json").is_file():
            raise ConfigError(f"{data} holds no steps (its runs have no evaluation after the seed)")
        raise ConfigError(f"{data} is not a ksmith dataset (no steps/ in it): make one with `ksmith dataset`")
    if steps == "kept":
        if not (data / "conversational" / "dataset_dict.json").is_file():
            raise ConfigError(
                f"{data} has no kept steps to train on (see {data / 'README.md'}); --steps correct trains on "
                "every correct step"
            )
        found = datasets.load_from_disk(str(data / "conversational"))
        if split not in found:
            raise ConfigError(f"{data} has no kept steps in its {split} split")
        return found[split]
    rows = datasets.load_from_disk(str(data / "steps"))
    if split not in rows:
        raise ConfigError(f"{data} has no {split} split")
    chosen = [conversational(row) for row in rows[split] if row["correct"] and row["answer"]]
    if not chosen:
        raise ConfigError(f"{data} has no correct step with an answer in its {split} split")
    return datasets.Dataset.from_list(chosen)


def _held_out(data: Path, steps: str) -> Any:
    """The test split's examples (problems never trained on), or ``None`` when the dataset has none."""
    try:
        return load_sft_data(data, steps, split="test")
    except ConfigError:
        return None


def fitting(examples: Any, tokenizer: Any, max_length: int) -> tuple[Any, int]:
    """The examples whose prompt and answer fit in ``max_length`` tokens, and how many did not.

    A longer one would be truncated from the end, cutting the answer -- the only part that carries loss.
    """

    def length(example: dict[str, Any]) -> int:
        tokens = tokenizer.apply_chat_template(example["prompt"] + example["completion"], tokenize=True)
        return len(tokens["input_ids"] if isinstance(tokens, Mapping) else tokens)

    keep = [i for i, example in enumerate(examples) if length(example) <= max_length]
    return examples.select(keep), len(examples) - len(keep)


def lora_config(rank: int) -> Any:
    peft = need("peft", "ksmith train")
    return peft.LoraConfig(
        r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def device_args() -> dict[str, Any]:
    """bf16 on a GPU that has it; plain float32 on CPU (TRL's configs default to bf16)."""
    torch = need("torch", "ksmith train")
    if torch.cuda.is_available():
        return {"bf16": torch.cuda.is_bf16_supported(), "use_cpu": False}
    return {"bf16": False, "use_cpu": True}


def train_sft(
    model: str | Path,
    data: Path,
    output: Path,
    max_steps: int = 100,
    steps: str = "kept",
    learning_rate: float = 1e-4,
    batch_size: int = 2,
    max_length: int = 4096,
    rank: int = 16,
    seed: int = 0,
) -> dict[str, Any]:
    """Train a LoRA adapter; returns what ``ksmith-train.json`` records."""
    from ksmith_core.clitools import output_dir

    if max_steps < 1 or batch_size < 1 or rank < 1 or max_length < 16:
        raise ConfigError("--max-steps, --batch-size and --rank must be at least 1, --max-length at least 16")
    trl = need("trl", "ksmith train sft")
    train_set = load_sft_data(Path(data), steps)
    held_out = _held_out(Path(data), steps)
    base, tokenizer = load_base(model, "ksmith train sft")
    train_set, too_long = fitting(train_set, tokenizer, max_length)
    if not len(train_set):
        raise ConfigError(f"every example is longer than --max-length {max_length} tokens")
    if held_out is not None:
        held_out, _ = fitting(held_out, tokenizer, max_length)
        held_out = held_out if len(held_out) else None
    output = output_dir(Path(output))
    config = trl.SFTConfig(
        output_dir=str(output),
        max_steps=max_steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        max_length=max_length,
        completion_only_loss=True,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=seed,
        gradient_checkpointing=False,
        **device_args(),
    )
    started = time.time()
    trainer = trl.SFTTrainer(
        model=base,
        args=config,
        train_dataset=train_set,
        eval_dataset=held_out,
        processing_class=tokenizer,
        peft_config=lora_config(rank),
    )
    # The loss on the held-out problems before and after: whether what was learnt carries to new problems.
    eval_before = trainer.evaluate()["eval_loss"] if held_out is not None else None
    trainer.train()
    eval_after = trainer.evaluate()["eval_loss"] if held_out is not None else None
    trainer.save_model(str(output))
    tokenizer.save_pretrained(str(output))
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    info = {
        "kind": "sft",
        "base_model": str(Path(model).expanduser().resolve()),
        "data": str(Path(data).resolve()),
        "steps_used": steps,
        "examples": len(train_set),
        "too_long": too_long,
        "max_steps": max_steps,
        "learning_rate": learning_rate,
        "batch_size": batch_size,
        "max_length": max_length,
        "lora_rank": rank,
        "losses": losses,
        "held_out_examples": len(held_out) if held_out is not None else 0,
        "held_out_loss_before": eval_before,
        "held_out_loss_after": eval_after,
        "seconds": round(time.time() - started, 1),
        "versions": _versions(),
    }
    (output / TRAIN_INFO).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return info


def _versions() -> dict[str, str | None]:
    from ksmith_core.environment import versions

    found: dict[str, str | None] = dict(versions())
    for module in ("transformers", "trl", "peft", "datasets"):
        try:
            found[module] = __import__(module).__version__
        except ImportError:
            found[module] = None
    return found
