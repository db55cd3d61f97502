"""A tiny random causal LM with a locally trained tokenizer: the whole loop through the CLI in seconds.

Its answers are noise; it exists to drive ``ksmith train sft`` and ``ksmith evolve --proposer llm`` end to
end where SmolLM2 would take minutes per generation on a CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def make_tiny_model(out: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    files = sorted(str(p) for p in Path(os.__file__).parent.glob("*.py"))[:12]
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=1024, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train(files, trainer)
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    hf_tokenizer.chat_template = CHATML
    config = Qwen2Config(
        vocab_size=len(hf_tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        eos_token_id=hf_tokenizer.eos_token_id,
        pad_token_id=hf_tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = hf_tokenizer.eos_token_id
    model.generation_config.pad_token_id = hf_tokenizer.pad_token_id
    model.save_pretrained(str(out))
    hf_tokenizer.save_pretrained(str(out))
    return out
