"""``ksmith train sft``: LoRA SFT with TRL on a real small model, loss on the answer only."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

datasets = pytest.importorskip(
    "datasets"
)  # before sft_data, which needs it: a missing extra skips, not errors

from sft_data import short_data  # noqa: E402
from stored_runs import write_run  # noqa: E402

from ksmith_train.dataset import build_dataset  # noqa: E402


@pytest.mark.slow
def test_sft_on_a_fixed_batch_lowers_the_loss_and_saves_an_adapter(smollm2_dir, sft_adapter):
    out, info = sft_adapter
    losses = info["losses"]
    assert len(losses) == 3 and all(loss > 0 for loss in losses)
    assert losses[-1] < losses[0]
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    recorded = json.loads((out / "ksmith-train.json").read_text())
    assert recorded["held_out_examples"] == 1
    assert recorded["held_out_loss_before"] > 0 and recorded["held_out_loss_after"] > 0
    assert recorded["base_model"] == str(Path(smollm2_dir).resolve()) and recorded["examples"] == 1


@pytest.mark.slow
def test_loss_is_on_the_answer_only(smollm2_dir, tmp_path):
    """What the trainer is given: the prompt tokens carry no loss, the answer's tokens do."""
    trl = pytest.importorskip("trl")
    from ksmith_train.models import load_base
    from ksmith_train.sft import load_sft_data

    data = load_sft_data(short_data(tmp_path / "data"))
    model, tokenizer = load_base(smollm2_dir)
    config = trl.SFTConfig(
        output_dir=str(tmp_path / "o"), completion_only_loss=True, report_to="none", bf16=False, use_cpu=True
    )
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer)
    example = trainer.train_dataset[0]
    # TRL folds the completion mask into the labels: -100 where no loss is taken.
    mask = (
        [int(label != -100) for label in example["labels"]]
        if "labels" in example
        else example["completion_mask"]
    )
    assert 0 < sum(mask) < len(mask) and mask[0] == 0 and mask[-1] == 1
    # Examples that do not fit are dropped, not truncated (truncation would cut the answer).
    from ksmith_train.sft import fitting

    full = len(example["input_ids"])
    assert [len(fitting(data, tokenizer, n)[0]) for n in (full + 20, 16)] == [2, 0]
    answer = tokenizer.decode([t for t, m in zip(example["input_ids"], mask) if m])
    assert "<<<<<<< SEARCH" in answer and "num_warps=4" in answer and "Current kernel" not in answer


@pytest.mark.slow
def test_sft_refuses_a_directory_that_is_not_a_dataset_and_one_without_kept_steps(tmp_path, ksmith_cmd):
    from ksmith_core.errors import ConfigError
    from ksmith_train.sft import load_sft_data

    write_run(tmp_path / "run")
    build_dataset([str(tmp_path / "run")], tmp_path / "data", min_gain=5.0)  # nothing kept
    with pytest.raises(ConfigError, match="no kept steps"):
        load_sft_data(tmp_path / "data")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "card.json").write_text("{}")
    with pytest.raises(ConfigError, match="holds no steps"):
        load_sft_data(tmp_path / "empty")
    correct = load_sft_data(tmp_path / "data", steps="correct")
    assert len(correct) == 4  # every correct child, repairs included
    proc = subprocess.run(
        [
            *ksmith_cmd,
            "train",
            "sft",
            "--model",
            str(tmp_path),
            "--data",
            str(tmp_path),
            "-o",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "not a ksmith dataset" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
