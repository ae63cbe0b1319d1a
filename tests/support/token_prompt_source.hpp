// SPDX-License-Identifier: Apache-2.0
// The common part of the small PromptSources trainer tests write: token prompts over an 8-token vocabulary, a
// completion decoded as its ids' digits ("35" for [3, 5]), token 7 ending a completion, 0 padding, no held-out set.
// Derive and give train_batch (and domain_names for more than one domain).
#pragma once

#include <grpo/train/prompt_source.hpp>

#include <span>
#include <string>
#include <vector>

namespace grpo::testing {

struct TokenPromptSource : train::PromptSource {
  std::vector<train::Problem> held;
  const std::vector<train::Problem>& held_out() const override { return held; }
  std::string decode(std::span<const std::int64_t> ids) const override {
    std::string out;
    for (const auto id : ids) out += std::to_string(id);
    return out;
  }
  std::vector<std::int64_t> eos_token_ids() const override { return {7}; }
  std::int64_t pad_token_id() const override { return 0; }
};

}  // namespace grpo::testing
