// SPDX-License-Identifier: Apache-2.0
// A collected StepBatch, and a prompt source's TrainerState, as bytes and back: what a dedicated rollout rank sends
// its trainer rank over c10d (rollout_ranks.hpp). The bytes hold every field exactly (tensors with their dtype and
// shape, texts as bytes, so invalid UTF-8 survives), so a batch decoded on the trainer trains as the batch the
// rollout rank collected. Completions that share their problem's dataset row share it again after decoding.
// The format is this build's own: both ends run the same grpo. Machines of one run must agree on endianness.
#pragma once

#include <grpo/train/checkpoint.hpp>
#include <grpo/train/grpo_trainer.hpp>

#include <string>
#include <string_view>

namespace grpo::train {

/// Every field of `batch` as bytes (tensors are copied to the CPU first).
std::string encode_step_batch(const StepBatch& batch);
/// The batch encode_step_batch wrote (tensors on the CPU). Throws grpo::ParseError naming what is wrong (not a
/// batch, cut short, a bad dtype or size, trailing bytes) for anything else.
StepBatch decode_step_batch(std::string_view bytes);

/// A TrainerState as bytes and back (decode throws grpo::ParseError as above).
std::string encode_trainer_state(const TrainerState& state);
TrainerState decode_trainer_state(std::string_view bytes);

}  // namespace grpo::train
