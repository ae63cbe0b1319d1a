#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads a directory that the library's models::save_pretrained(ValueModel) wrote with transformers, and checks that
its per-token values on the fixture's inputs are tests/data/value_heads/expected.safetensors' (within 1e-4):
    .venv/bin/python tools/value-head-reference/check_saved.py DIR EXPECTED NAME
Classification layouts load with AutoModelForSequenceClassification / AutoModelForTokenClassification as config.json's
architectures say (the sequence classifier's pooled scores are checked too); TRL's layout loads its causal LM with
AutoModelForCausalLM and applies "v_head.summary.*" from the safetensors as TRL's ValueHead does. Exit 0 when equal."""
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification,
                          AutoModelForTokenClassification)


def main(directory: Path, expected_file: Path, name: str) -> int:
    expected = load_file(expected_file)
    ids, mask = expected["input_ids"], expected["attention_mask"]
    architecture = AutoConfig.from_pretrained(directory).architectures[0]
    with torch.no_grad():
        if architecture.endswith("ForSequenceClassification"):
            model = AutoModelForSequenceClassification.from_pretrained(directory, attn_implementation="eager").eval()
            values = model.score(model.model(input_ids=ids, attention_mask=mask).last_hidden_state).squeeze(-1)
            scores = model(input_ids=ids, attention_mask=mask).logits.squeeze(-1)
        elif architecture.endswith("ForTokenClassification"):
            model = AutoModelForTokenClassification.from_pretrained(directory, attn_implementation="eager").eval()
            values = model(input_ids=ids, attention_mask=mask).logits.squeeze(-1)
            scores = values[torch.arange(ids.shape[0]), mask.sum(1) - 1]
        else:
            model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
            tensors = load_file(directory / "model.safetensors")
            summary = torch.nn.Linear(model.config.hidden_size, 1)
            summary.weight.copy_(tensors["v_head.summary.weight"])
            summary.bias.copy_(tensors["v_head.summary.bias"])
            values = summary(model.model(input_ids=ids, attention_mask=mask).last_hidden_state).squeeze(-1)
            scores = values[torch.arange(ids.shape[0]), mask.sum(1) - 1]
    real = mask.bool()
    value_error = (values - expected[f"{name}.values"])[real].abs().max().item()
    score_error = (scores - expected[f"{name}.scores"]).abs().max().item()
    print(f"{directory}: {architecture}, largest value difference {value_error:.2e}, score {score_error:.2e}")
    return 0 if value_error <= 1e-4 and score_error <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
