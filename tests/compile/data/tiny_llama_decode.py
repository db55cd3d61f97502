"""A two-layer Llama-style decoder in float16 at a decode step (4 sequences of one token, no KV cache), built
from a config (random weights, no download), KernelBench format: every norm before a group of projections,
with and without the residual add before it."""

import torch
import torch.nn as nn
from transformers import LlamaConfig, LlamaModel

vocab = 128
batch_size = 4
seq_len = 1


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )
        self.model = LlamaModel(config).half()

    def forward(self, input_ids):
        return self.model(input_ids, use_cache=False).last_hidden_state


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len))]


def get_init_inputs():
    return []
