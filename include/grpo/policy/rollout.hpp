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
///
/// A multi-turn rollout (agent/multi_turn_generator.hpp) holds a whole trajectory in the completion: the model's
/// sampled turns and, between them, the tool replies and role headers it reads but did not sample. completion_mask
/// is then the loss mask (1 only on sampled tokens: every loss term, normaliser, KL, entropy and length metric uses
/// it) and completion_attention_mask says which tokens the policy reads (sampled or not).
struct Rollout {
  torch::Tensor prompt_ids;         ///< [B, Tp] int64, left-padded with the pad id
  torch::Tensor prompt_mask;        ///< [B, Tp] int64, 1 = real prompt token
  torch::Tensor completion_ids;     ///< [B, Tc] int64, right-padded with the pad id (valid ids everywhere)
  torch::Tensor completion_mask;    ///< [B, Tc] int64, 1 up to and including the first EOS
  torch::Tensor truncated;          ///< [B] bool, true when the completion hit max_new_tokens without an EOS
  torch::Tensor sampler_log_probs;  ///< [B, Tc] float32 log-probs of the sampled tokens under the sampler (0 at pads)
  /// [B, Tc] int64 or undefined: 1 on every real completion token, sampled or not (a tool reply: 1 here, 0 in
  /// completion_mask). Undefined: completion_mask (every real completion token was sampled).
  torch::Tensor completion_attention_mask;
  /// [B, Tc] int64 or undefined: the assistant turn (0, 1, …) each completion token belongs to, a tool reply counting
  /// to the turn whose calls it answers; −1 on padding. Undefined: one turn.
  torch::Tensor completion_turns;
  /// [B, Tc] float32 or undefined: rewards the generator gives on single completion tokens, 0 elsewhere; a
  /// multi-turn rollout puts each turn's environment reward (agent::TrajectoryInfo::turn_rewards) on that turn's last
  /// sampled token. GrpoTrainer adds each row's sum to its total (train::add_environment_rewards) and gives token-level
  /// estimators each reward at its token. Values outside completion_mask are ignored. Undefined: none.
  torch::Tensor completion_rewards;

  int64_t prompt_length() const { return prompt_ids.size(1); }
  int64_t completion_length() const { return completion_ids.size(1); }
  int64_t batch_size() const { return prompt_ids.size(0); }
  /// [B, Tp + Tc] ids and mask of prompt followed by completion: the policy's input.
  torch::Tensor input_ids() const { return torch::cat({prompt_ids, completion_ids}, 1); }
  torch::Tensor attention_mask() const {
    return torch::cat({prompt_mask, completion_attention_mask.defined() ? completion_attention_mask : completion_mask}, 1);
  }
  /// Number of valid completion tokens (the dapo / token-mean normaliser of this batch).
  int64_t num_completion_tokens() const { return completion_mask.sum().item<int64_t>(); }
  /// [B] valid completion length of each row.
  torch::Tensor completion_lengths() const { return completion_mask.sum(1); }
  /// Rows [begin, begin + count) as a Rollout of views (no copy): a micro-batch. Padding widths stay those of the
  /// whole batch. Throws grpo::Error for a range outside [0, B].
  Rollout rows(int64_t begin, int64_t count) const {
    GRPO_CHECK(begin >= 0 && count >= 0 && begin + count <= batch_size(),
               "Rollout::rows: rows [{}, {}) are outside a batch of {}", begin, begin + count, batch_size());
    return map_rows([&](const torch::Tensor& t) { return t.narrow(0, begin, count); });
  }
  /// The rows `index` ([K] int64 row numbers, in that order) as a new Rollout (copies). Padding widths stay.
  Rollout select(const torch::Tensor& index) const {
    return map_rows([&](const torch::Tensor& t) { return t.index_select(0, index); });
  }
  /// A Rollout of `f` applied to each defined [B, ...] field (undefined optional fields stay undefined).
  template <typename RowMap>
  Rollout map_rows(RowMap&& f) const {
    auto apply = [&](const torch::Tensor& t) { return t.defined() ? f(t) : torch::Tensor(); };
    Rollout out;
    out.prompt_ids = apply(prompt_ids);
    out.prompt_mask = apply(prompt_mask);
    out.completion_ids = apply(completion_ids);
    out.completion_mask = apply(completion_mask);
    out.truncated = apply(truncated);
    out.sampler_log_probs = apply(sampler_log_probs);
    out.completion_attention_mask = apply(completion_attention_mask);
    out.completion_turns = apply(completion_turns);
    out.completion_rewards = apply(completion_rewards);
    return out;
  }
};

/// The rows of several rollouts, one after another, as one Rollout: prompts left-padded and completions
/// right-padded with `pad_token_id` to the widest part (mask 0, sampler log-prob 0, turn −1, reward 0 on the new
/// padding), so each row's tokens and positions are what they were. When some part has completion_attention_mask (or
/// completion_turns, completion_rewards), the others get theirs (completion_mask; turn 0 on real tokens; rewards 0).
/// Empty parts are allowed; throws grpo::Error for no parts.
inline Rollout concat_rollouts(const std::vector<Rollout>& parts, int64_t pad_token_id) {
  GRPO_CHECK(!parts.empty(), "concat_rollouts: no rollouts");
  int64_t tp = 0, tc = 0;
  for (const Rollout& r : parts) {
    tp = std::max(tp, r.prompt_length());
    tc = std::max(tc, r.completion_length());
  }
  bool any_attention = false, any_turns = false, any_rewards = false;
  for (const Rollout& r : parts) {
    any_attention = any_attention || r.completion_attention_mask.defined();
    any_turns = any_turns || r.completion_turns.defined();
    any_rewards = any_rewards || r.completion_rewards.defined();
  }
  std::vector<torch::Tensor> pi, pm, ci, cm, tr, lp, am, tu, rw;
  for (const Rollout& r : parts) {
    const int64_t left = tp - r.prompt_length(), right = tc - r.completion_length();
    namespace F = torch::nn::functional;
    pi.push_back(F::pad(r.prompt_ids, F::PadFuncOptions({left, 0}).value(static_cast<double>(pad_token_id))));
    pm.push_back(F::pad(r.prompt_mask, F::PadFuncOptions({left, 0})));
    ci.push_back(F::pad(r.completion_ids, F::PadFuncOptions({0, right}).value(static_cast<double>(pad_token_id))));
    cm.push_back(F::pad(r.completion_mask, F::PadFuncOptions({0, right})));
    tr.push_back(r.truncated);
    lp.push_back(F::pad(r.sampler_log_probs, F::PadFuncOptions({0, right})));
    if (any_attention) {
      const auto& attention = r.completion_attention_mask.defined() ? r.completion_attention_mask : r.completion_mask;
      am.push_back(F::pad(attention, F::PadFuncOptions({0, right})));
    }
    if (any_turns) {
      const auto turns = r.completion_turns.defined() ? r.completion_turns : r.completion_mask.to(torch::kInt64) - 1;
      tu.push_back(F::pad(turns, F::PadFuncOptions({0, right}).value(-1.0)));
    }
    if (any_rewards) {
      const auto rewards = r.completion_rewards.defined() ? r.completion_rewards.to(torch::kFloat32)
                                                          : torch::zeros(r.completion_ids.sizes(), torch::kFloat32);
      rw.push_back(F::pad(rewards, F::PadFuncOptions({0, right})));
    }
  }
  Rollout out;
  out.prompt_ids = torch::cat(pi);
  out.prompt_mask = torch::cat(pm);
  out.completion_ids = torch::cat(ci);
  out.completion_mask = torch::cat(cm);
  out.truncated = torch::cat(tr);
  out.sampler_log_probs = torch::cat(lp);
  if (any_attention) out.completion_attention_mask = torch::cat(am);
  if (any_turns) out.completion_turns = torch::cat(tu);
  if (any_rewards) out.completion_rewards = torch::cat(rw);
  return out;
}

}  // namespace grpo
