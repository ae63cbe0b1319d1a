#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The learning tests cannot pass without learning: each runs again with GRPO_TEST_ZERO_LR=1 (its training runs get
# --lr 0, so the policy never changes) and must then fail, at its learning threshold.
# Usage: check_learning_controls.sh <test_examples executable>
set -euo pipefail
tests="$1"
fail() { echo "check_learning_controls: $*" >&2; exit 1; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

# Catch2 test specs (a comma separates specs, so names with one end in '*') and the threshold check that must fail.
check() {
  local spec="$1" threshold="$2" status=0
  GRPO_TEST_ZERO_LR=1 "$tests" "$spec" --warn NoTests >"$out" 2>&1 || status=$?
  [ "$status" -ne 0 ] || { cat "$out"; fail "'$spec' passed with the learning rate at 0"; }
  grep -qF "$threshold" "$out" || { cat "$out"; fail "'$spec' failed, but not at its learning threshold ($threshold)"; }
  echo "check_learning_controls: '$spec' fails with --lr 0 at $threshold"
}
check "r1_zero tiny task: GRPO lifts held-out accuracy*" "CHECK( after >= 0.7 )"
check "r1_zero tiny task: ReMax (each prompt's greedy completion as the baseline) lifts held-out accuracy" "CHECK( after >= 0.65 )"
check "r1_zero tiny task: PPO with a critic (GAE) lifts held-out accuracy*" "CHECK( after >= 0.9 )"
check "r1_zero tiny task: pipelined rollouts one step off (decoupled correction) lift held-out accuracy" "CHECK( after >= 0.7 )"
check "r1_zero tiny task: a reward model trained on the run's own completions (--rm-refresh-every) lifts held-out accuracy as the only reward" "CHECK( after >= 0.45 )"
check "r1_zero --dtype bf16 (fp32 master weights) learns the tiny task as fp32 does" "CHECK( metrics.at(160).at(\"eval/mean_accuracy\") >= 0.7 )"
check "r1_zero --dtype bf16 --optimizer-precision compensated learns the tiny task without fp32 master weights" "CHECK( metrics.at(160).at(\"eval/mean_accuracy\") >= 0.7 )"
check "r1_zero --lora-r trains adapters only and learns the tiny task*" "CHECK( metrics.at(200).at(\"eval/mean_accuracy\") >= 0.55 )"
check "r1_zero on two ranks learns the tiny task" "CHECK( metrics.at(160).at(\"eval/mean_accuracy\") >= 0.7 )"
check "sft example: cold-start SFT lowers the held-out NLL*" "CHECK( after < 0.6 * unigram )"
check "r1_zero --task tiny_lookup: GRPO learns to use the tool*" "CHECK( after >= 0.9 )"
