// SPDX-License-Identifier: Apache-2.0
// Test helpers for grpo/loss: a seeded random float64 micro-batch with every input GrpoLoss takes.
#pragma once

#include <grpo/loss/grpo_loss.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <limits>

namespace grpo::testing {

/// The tensors of one GrpoLoss micro-batch, kept apart so that tests can re-derive the loss element by element.
struct LossBatch {
  torch::Tensor lp, old, ref, adv, mask, entropy, sampler, truncated;

  LossInputs inputs() const {
    return {.log_probs = lp,
            .old_log_probs = old,
            .ref_log_probs = ref,
            .advantages = adv,
            .mask = mask,
            .entropy = entropy,
            .sampler_log_probs = sampler,
            .truncated = truncated};
  }
};

/// A random float64 batch [B, T] (B ≥ 2) seeded with `seed`: log-probs in (−3.05, −0.05), old and reference
/// log-probs near them, advantages [B] ~ N(0, 1), a ragged mask whose row 1 is empty (an empty completion), entropy
/// in [0, 2), sampler log-probs near the old ones, and row B − 1 truncated. Padded positions of old (−inf) and
/// ref (NaN) hold garbage that must never reach a loss value or gradient.
inline LossBatch random_loss_batch(int64_t B, int64_t T, uint64_t seed) {
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::manual_seed(seed);
  LossBatch b;
  b.lp = -torch::rand({B, T}, f64) * 3.0 - 0.05;
  b.old = b.lp + 0.3 * torch::randn({B, T}, f64);
  b.ref = b.lp + 0.5 * torch::randn({B, T}, f64);
  b.adv = torch::randn({B}, f64);
  auto lengths = torch::randint(1, T + 1, {B});
  b.mask = torch::arange(T).unsqueeze(0) < lengths.unsqueeze(1);
  b.mask[1].fill_(false);
  b.entropy = torch::rand({B, T}, f64) * 2.0;
  b.sampler = b.old + 0.2 * torch::randn({B, T}, f64);
  b.truncated = torch::zeros({B}, torch::kBool);
  b.truncated[B - 1] = true;
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t t = lengths[i].item<int64_t>(); t < T; ++t) {
      b.old[i][t] = -std::numeric_limits<double>::infinity();
      b.ref[i][t] = std::numeric_limits<double>::quiet_NaN();
    }
  }
  return b;
}

}  // namespace grpo::testing
