// SPDX-License-Identifier: Apache-2.0
// A batch of sampled completions: what the sampler returns and what Policy scores.
#pragma once

#include <grpo/core/error.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace grpo {

/// B = P·G sequences (row p·G + g is completion g of prompt p), prompts left-padded to Tp tokens, completions
/// right-padded to Tc tokens.
struct Rollout {
  torch::Tensor prompt_ids;         ///< [B, Tp] int64, left-padded with the pad id
  torch::Tensor prompt_mask;        ///< [B, Tp] int64, 1 = real prompt token
  torch::Tensor completion_ids;     ///< [B, Tc] int64, right-padded with the pad id (valid ids everywhere)
  torch::Tensor completion_mask;    ///< [B, Tc] int64, 1 up to and including the first EOS
  torch::Tensor truncated;          ///< [B] bool, true when the completion hit max_new_tokens without an EOS
  torch::Tensor sampler_log_probs;  ///< [B, Tc] float32 log-probs of the sampled tokens under the sampler (0 at pads)

  int64_t prompt_length() const { return prompt_ids.size(1); }
  int64_t completion_length() const { return completion_ids.size(1); }
  int64_t batch_size() const { return prompt_ids.size(0); }
  /// [B, Tp + Tc] ids and mask of prompt followed by completion: the policy's input.
  torch::Tensor input_ids() const { return torch::cat({prompt_ids, completion_ids}, 1); }
  torch::Tensor attention_mask() const { return torch::cat({prompt_mask, completion_mask}, 1); }
  /// Number of valid completion tokens (the dapo / token-mean normaliser of this batch).
  int64_t num_completion_tokens() const { return completion_mask.sum().item<int64_t>(); }
  /// [B] valid completion length of each row.
  torch::Tensor completion_lengths() const { return completion_mask.sum(1); }
  /// Rows [begin, begin + count) as a Rollout of views (no copy): a micro-batch. Padding widths stay those of the
  /// whole batch. Throws grpo::Error for a range outside [0, B].
  Rollout rows(int64_t begin, int64_t count) const {
    GRPO_CHECK(begin >= 0 && count >= 0 && begin + count <= batch_size(),
               "Rollout::rows: rows [{}, {}) are outside a batch of {}", begin, begin + count, batch_size());
    return {prompt_ids.narrow(0, begin, count),     prompt_mask.narrow(0, begin, count),
            completion_ids.narrow(0, begin, count), completion_mask.narrow(0, begin, count),
            truncated.narrow(0, begin, count),      sampler_log_probs.narrow(0, begin, count)};
  }
  /// The rows `index` ([K] int64 row numbers, in that order) as a new Rollout (copies). Padding widths stay.
  Rollout select(const torch::Tensor& index) const {
    return {prompt_ids.index_select(0, index),     prompt_mask.index_select(0, index),
            completion_ids.index_select(0, index), completion_mask.index_select(0, index),
            truncated.index_select(0, index),      sampler_log_probs.index_select(0, index)};
  }
};

/// The rows of several rollouts, one after another, as one Rollout: prompts left-padded and completions
/// right-padded with `pad_token_id` to the widest part (mask 0, sampler log-prob 0 on the new padding), so each row's
/// tokens and positions are what they were. Empty parts are allowed; throws grpo::Error for no parts.
inline Rollout concat_rollouts(const std::vector<Rollout>& parts, int64_t pad_token_id) {
  GRPO_CHECK(!parts.empty(), "concat_rollouts: no rollouts");
  int64_t tp = 0, tc = 0;
  for (const Rollout& r : parts) {
    tp = std::max(tp, r.prompt_length());
    tc = std::max(tc, r.completion_length());
  }
  std::vector<torch::Tensor> pi, pm, ci, cm, tr, lp;
  for (const Rollout& r : parts) {
    const int64_t left = tp - r.prompt_length(), right = tc - r.completion_length();
    namespace F = torch::nn::functional;
    pi.push_back(F::pad(r.prompt_ids, F::PadFuncOptions({left, 0}).value(static_cast<double>(pad_token_id))));
    pm.push_back(F::pad(r.prompt_mask, F::PadFuncOptions({left, 0})));
    ci.push_back(F::pad(r.completion_ids, F::PadFuncOptions({0, right}).value(static_cast<double>(pad_token_id))));
    cm.push_back(F::pad(r.completion_mask, F::PadFuncOptions({0, right})));
    tr.push_back(r.truncated);
    lp.push_back(F::pad(r.sampler_log_probs, F::PadFuncOptions({0, right})));
  }
  return {torch::cat(pi), torch::cat(pm), torch::cat(ci), torch::cat(cm), torch::cat(tr), torch::cat(lp)};
}

}  // namespace grpo
