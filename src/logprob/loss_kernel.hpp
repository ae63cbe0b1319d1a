// SPDX-License-Identifier: Apache-2.0
// Private: the running sums of FusedGrpoLoss's token loop, and its vectorised float kernel for token-level
// importance weights (loss_kernel.cpp). The scalar loop for float64 inputs and GSPO's sequence-level weight is in
// fused_grpo_loss.cpp; both compute the same quantities (fused_grpo_loss.cpp LossKernel::rows is the definition).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace grpo::detail {

/// Running sums of one range of rows (combined after the parallel loop). loss, policy, kl and ent are weighted by
/// each row's coefficient (1/N, or 1/(|o|·N) for sequence means); kl_tokens, ent_tokens, ppo_kl, the clip counts,
/// count and the ratio statistics are plain sums over valid tokens.
struct LossPartial {
  double loss = 0, policy = 0, kl = 0, ent = 0, kl_tokens = 0, ent_tokens = 0, ppo_kl = 0;
  double low = 0, high = 0, region = 0, pg = 0, count = 0;
  double r_min = std::numeric_limits<double>::infinity(), r_max = -std::numeric_limits<double>::infinity(), r_sum = 0;
  void add(const LossPartial& o) {
    loss += o.loss, policy += o.policy, kl += o.kl, ent += o.ent, kl_tokens += o.kl_tokens;
    ent_tokens += o.ent_tokens, ppo_kl += o.ppo_kl, low += o.low, high += o.high, region += o.region, pg += o.pg;
    count += o.count, r_min = std::min(r_min, o.r_min), r_max = std::max(r_max, o.r_max), r_sum += o.r_sum;
  }
};

/// The KL estimators the fused loss accepts (kl/kl_penalty.hpp), or none without reference log-probs.
enum class FusedKl { none, k1, abs, k2, k3, low_var_kl };

/// Inputs of token_loss_rows_float: [B, T] contiguous float arrays (old, ref, ent may be null: old = lp), the float
/// 0/1 mask, advantages [B] or [B, T], the gradient output [B, T], and the options as numbers.
struct TokenLossArgs {
  const float *lp = nullptr, *old = nullptr, *ref = nullptr, *ent = nullptr, *adv = nullptr, *valid = nullptr;
  float* grad = nullptr;
  bool adv_per_token = false;
  int64_t time = 0;
  bool cispo = false;         ///< CISPO (TRL) instead of the PPO clip
  double log_w_low = 0.0, log_w_high = 0.0;  ///< bounds on log w, overflow guard included
  double ratio_low = 0.8, ratio_high = 1.2;  ///< PPO clip range [1 − ε_low, 1 + ε_high]
  double cispo_cap = 5.0;                    ///< CISPO's absolute cap ε_high on w
  FusedKl kl = FusedKl::none;
  double beta = 0.0;
  double divisor = 1.0;       ///< the normaliser N
  bool seq_mean = false;      ///< average each row's tokens first: coefficient 1/(|o|·N)
  bool seq_mean_eps = false;  ///< ... with |o| + 1e-8 (verl)
};

/// Rows [begin, end) at token level, float arithmetic on 16-lane vectors (AVX-512, AVX2 or SSE2 at run time):
/// writes grad for every token of the rows and returns the sums.
LossPartial token_loss_rows_float(const TokenLossArgs& args, int64_t begin, int64_t end);

}  // namespace grpo::detail
