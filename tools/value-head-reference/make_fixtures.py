#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the scalar-head fixtures of tests/models/value_model_test.cpp with transformers (scripts/requirements.txt):
    .venv/bin/python tools/value-head-reference/make_fixtures.py tests/data/value_heads
qwen2_sequence_classification/
              a random tiny Qwen2ForSequenceClassification (num_labels 1, pad_token_id 0): "model.*" and
              "score.weight" [1, H], no bias, no lm_head.
llama_token_classification/
              a random tiny LlamaForTokenClassification (num_labels 1): "score.weight" [1, H] and "score.bias" [1].
qwen3_trl_value_head/
              a random tiny Qwen3ForCausalLM saved by transformers, with TRL's value head added to its safetensors as
              AutoModelForCausalLMWithValueHead saves it: "v_head.summary.weight" [1, H], "v_head.summary.bias" [1]
              beside the causal LM's own tensors (lm_head included).
expected.safetensors
              input_ids [3, 7] (right-padded with 0) and attention_mask, and for each directory <name>: the per-token
              values <name>.values [3, 7] (the head on every final hidden state, transformers' float32) and the
              sequence scores <name>.scores [3] (the head at each row's last real token: for the sequence classifier,
              what transformers' forward pools, at the rightmost token that is not pad_token_id).
Deterministic (fixed seeds), so running it again rewrites the same bytes."""
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import (LlamaConfig, LlamaForTokenClassification, Qwen2Config, Qwen2ForSequenceClassification,
                          Qwen3Config, Qwen3ForCausalLM)

TINY = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=500000.0,
            tie_word_embeddings=False, pad_token_id=0, num_labels=1)


def randomise(model, seed):
    """Every parameter drawn from N(0, 0.3²) (norms around 1), so no value is an initialiser's constant."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator) * 0.3
            p.copy_(1.0 + noise if name.endswith("norm.weight") else noise)
    return model.eval()


def main(out: Path):
    out.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(7)
    input_ids = torch.randint(1, 64, (3, 7), generator=generator)
    attention_mask = torch.ones(3, 7, dtype=torch.long)
    attention_mask[1, 5:] = 0
    attention_mask[2, 3:] = 0
    input_ids = input_ids * attention_mask  # pads are id 0
    last = attention_mask.sum(1) - 1
    expected = {"input_ids": input_ids, "attention_mask": attention_mask}

    seq = randomise(Qwen2ForSequenceClassification(Qwen2Config(**TINY, attn_implementation="eager")), 1)
    seq.save_pretrained(out / "qwen2_sequence_classification")
    with torch.no_grad():
        hidden = seq.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        expected["qwen2_sequence_classification.values"] = seq.score(hidden).squeeze(-1).contiguous()
        expected["qwen2_sequence_classification.scores"] = seq(input_ids=input_ids,
                                                               attention_mask=attention_mask).logits.squeeze(-1)

    tok = randomise(LlamaForTokenClassification(LlamaConfig(**TINY, attn_implementation="eager")), 2)
    tok.save_pretrained(out / "llama_token_classification")
    with torch.no_grad():
        values = tok(input_ids=input_ids, attention_mask=attention_mask).logits.squeeze(-1).contiguous()
    expected["llama_token_classification.values"] = values
    expected["llama_token_classification.scores"] = values[torch.arange(3), last].contiguous()

    config = {k: v for k, v in TINY.items() if k != "num_labels"}
    lm = randomise(Qwen3ForCausalLM(Qwen3Config(**config, head_dim=8, attn_implementation="eager")), 3)
    directory = out / "qwen3_trl_value_head"
    lm.save_pretrained(directory)
    # TRL's ValueHead: summary = nn.Linear(hidden_size, 1), on the last hidden states (after the final norm).
    summary = torch.nn.Linear(16, 1)
    with torch.no_grad():
        summary.weight.copy_(torch.randn(1, 16, generator=generator))
        summary.bias.copy_(torch.randn(1, generator=generator))
        hidden = lm.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        values = summary(hidden).squeeze(-1).contiguous()
    tensors = load_file(directory / "model.safetensors")
    tensors["v_head.summary.weight"] = summary.weight.detach().clone()
    tensors["v_head.summary.bias"] = summary.bias.detach().clone()
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    expected["qwen3_trl_value_head.values"] = values
    expected["qwen3_trl_value_head.scores"] = values[torch.arange(3), last].contiguous()

    save_file({k: v.contiguous() for k, v in expected.items()}, out / "expected.safetensors")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
