// SPDX-License-Identifier: Apache-2.0
// Completion text of a rollout: what rewards read.
#pragma once

#include <grpo/policy/rollout.hpp>
#include <grpo/text/tokenizer.hpp>

#include <string>
#include <vector>

namespace grpo {

/// The sampled completion tokens of each row (those completion_mask marks: up to and including the first EOS; in a
/// multi-turn rollout every turn's, the tool replies between them left out), as ids.
inline std::vector<std::vector<int32_t>> completion_token_ids(const Rollout& rollout) {
  auto ids = rollout.completion_ids.to(torch::kCPU).contiguous();
  auto mask = rollout.completion_mask.to(torch::kCPU).contiguous();
  auto id = ids.accessor<int64_t, 2>();
  auto valid = mask.accessor<int64_t, 2>();
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(ids.size(0)));
  for (int64_t b = 0; b < ids.size(0); ++b) {
    for (int64_t t = 0; t < ids.size(1); ++t) {
      if (valid[b][t] != 0) out[b].push_back(static_cast<int32_t>(id[b][t]));
    }
  }
  return out;
}

/// Decoded completion of each row [B]: its valid tokens through tokenizer.decode (special tokens such as the EOS
/// dropped by default, as rewards expect, and ids past the tokenizer's vocabulary, which a padded embedding can
/// sample, dropped instead of throwing).
inline std::vector<std::string> decode_completions(const Rollout& rollout, const text::Tokenizer& tokenizer,
                                                   text::DecodeOptions options = {.skip_special_tokens = true,
                                                                                  .skip_unknown_ids = true}) {
  return tokenizer.decode_batch(completion_token_ids(rollout), options);
}

}  // namespace grpo
