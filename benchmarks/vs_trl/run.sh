#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# This library's GRPO step beside TRL's GRPOTrainer (no vLLM, CPU), same model, data, group size, completion length,
# sampling and loss settings, in one run:
#   benchmarks/vs_trl/run.sh [OUT_DIR] [GSM8K_JSONL]
# Sets up TRL from PyPI in the project's virtual environment (benchmarks/vs_trl/requirements.txt), fetches
# SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh), converts it with `grpo convert` (both sides load that directory),
# then runs r1_zero and trl_side.py for STEPS optimizer steps in each DTYPES, and prints per-step wall time by phase
# (median over the steps after the first), time per completion token and peak RSS, with the ratios (summarize.py).
# Fairness check: TRL's first batch with a nonzero advantage, its loss, log-probs and gradients are saved
# (trl_side.py --dump-batch) and loss_on_batch recomputes them with this library on the same weights
# (OUT/same_batch_<dtype>.json).
# Needs the project built (scripts/build.sh; $GRPO_BUILD_DIR, default build/). Settings by environment:
# STEPS (6), PROMPTS (2), GROUP (8), MAX_NEW_TOKENS (96), LR (1e-6), DTYPES ("fp32 bf16"), SEED (1), THREADS (nproc).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$root/runs/vs_trl}"
data="${2:-$root/../shared/datasets/gsm8k_train.jsonl}"
build="${GRPO_BUILD_DIR:-$root/build}"
steps="${STEPS:-6}" prompts="${PROMPTS:-2}" group="${GROUP:-8}" tokens="${MAX_NEW_TOKENS:-96}" lr="${LR:-1e-6}"
seed="${SEED:-1}" threads="${THREADS:-$(nproc)}"
[ -f "$data" ] || { echo "vs_trl: no GSM8K file at $data (give its path as the second argument)" >&2; exit 1; }
for tool in "$build/tools/grpo" "$build/examples/r1_zero" "$build/benchmarks/loss_on_batch"; do
  [ -x "$tool" ] || { echo "vs_trl: $tool is missing: build the project first (scripts/build.sh)" >&2; exit 1; }
done
python="$("$root/scripts/python-env.sh")"
"$python" -m pip install --quiet --disable-pip-version-check -r "$root/benchmarks/vs_trl/requirements.txt" >&2
gguf="$("$root/scripts/fetch-smollm2.sh")"
mkdir -p "$out"
[ -f "$out/model/config.json" ] || "$build/tools/grpo" convert --gguf "$gguf" --out "$out/model"
for dtype in ${DTYPES:-fp32 bf16}; do
  echo "vs_trl: $dtype, this library" >&2
  rm -rf "$out/ours_$dtype"
  "$build/examples/r1_zero" --model "$out/model" --data "$data" --steps "$steps" --prompts "$prompts" \
    --group-size "$group" --max-new-tokens "$tokens" --temperature 1 --loss dapo --epsilon 0.2 --epsilon-high 0.2 \
    --beta 0 --rewards accuracy --lr "$lr" --max-grad-norm 1 --dtype "$dtype" --gradient-checkpointing on \
    --held-out 4 --eval-problems 4 --eval-samples 1 --eval-every 0 --save-every 0 --no-tensorboard --log-every 1 \
    --seed "$seed" --threads "$threads" --output-dir "$out/ours_$dtype" >&2
  echo "vs_trl: $dtype, TRL" >&2
  rm -f "$out/trl_$dtype.batch.safetensors"
  "$python" "$root/benchmarks/vs_trl/trl_side.py" "$out/model" "$data" "$out/trl_$dtype" --steps "$steps" \
    --prompts-per-step "$prompts" --group-size "$group" --max-new-tokens "$tokens" --lr "$lr" --dtype "$dtype" \
    --seed "$seed" --threads "$threads" --dump-batch "$out/trl_$dtype.batch.safetensors" 2>"$out/trl_$dtype.log" |
    grep '^{"' > "$out/trl_$dtype.jsonl"
  rm -f "$out/same_batch_$dtype.json"
  if [ -f "$out/trl_$dtype.batch.safetensors" ]; then
    echo "vs_trl: $dtype, this library's loss and gradient on TRL's batch" >&2
    "$build/benchmarks/loss_on_batch" "$out/model" "$out/trl_$dtype.batch.safetensors" "$dtype" \
      > "$out/same_batch_$dtype.json" || echo "vs_trl: $dtype: the two sides disagree on the same batch" >&2
  else
    echo "vs_trl: $dtype: every TRL step had all-zero advantages, so there is no batch to compare losses on" >&2
  fi
done
"$python" "$root/benchmarks/vs_trl/summarize.py" "$out" ${DTYPES:-fp32 bf16}
