// SPDX-License-Identifier: Apache-2.0
// A batch of sampled completions: what the sampler returns and what Policy scores.
#pragma once

#include <torch/torch.h>

#include <cstdint>

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
};

}  // namespace grpo
