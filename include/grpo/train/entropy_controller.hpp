// SPDX-License-Identifier: Apache-2.0
// The entropy-bonus coefficient over a run: fixed, or adapted towards a target entropy (He et al. 2025, "Skywork
// Open Reasoner 1", adaptive entropy control; TRL GRPOConfig use_adaptive_entropy, huggingface/trl f2cd577
// trl/trainer/grpo_trainer.py _compute_loss):
//
//   applied = c        if the entropy measured at the previous optimizer step H_prev ≤ target, else 0
//   after each optimizer step, with H the token mean of the entropy over that step's loss tokens (times the
//   top-entropy mask when it is on), summed over micro-batches and ranks:
//   c ← min(c + delta, max)  if H ≤ target,   c ← max(c − delta, min)  otherwise;   H_prev ← H
//
// Before the first measurement H_prev = +inf, so the first step applies no bonus (as TRL). Torch-free.
#pragma once

#include <grpo/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace grpo::train {

/// The adaptive rule's settings. Defaults are TRL's (entropy_target 0.2, entropy_coef_delta 0.005,
/// entropy_coef_min 0, entropy_coef_max 1).
struct AdaptiveEntropyOptions {
  double target = 0.2;   ///< target token-mean entropy (nats)
  double delta = 0.005;  ///< step of the coefficient per optimizer step
  double min = 0.0;      ///< lower bound of the coefficient
  double max = 1.0;      ///< upper bound of the coefficient

  /// ConfigError naming the config key: non-finite values, entropy_coef_delta < 0, entropy_coef_min < 0 or
  /// entropy_coef_min > entropy_coef_max.
  void validate() const {
    GRPO_CHECK_CONFIG(std::isfinite(target), "entropy_target must be finite, got {}", target);
    GRPO_CHECK_CONFIG(std::isfinite(delta) && delta >= 0.0, "entropy_coef_delta must be finite and >= 0, got {}",
                      delta);
    GRPO_CHECK_CONFIG(std::isfinite(min) && std::isfinite(max) && min >= 0.0 && min <= max,
                      "entropy_coef_min ({}) and entropy_coef_max ({}) must satisfy 0 <= min <= max", min, max);
  }
};

/// The current coefficient and its update rule. A value type; restore() after loading a checkpoint.
class EntropyController {
 public:
  /// coef: the starting coefficient (TRL entropy_coef; the loss options' entropy_coef). adaptive unset: the
  /// coefficient stays coef and is always applied (TRL's static bonus). ConfigError for a non-finite coef, invalid
  /// adaptive options, or (adaptive) coef outside [min, max].
  explicit EntropyController(double coef = 0.0, std::optional<AdaptiveEntropyOptions> adaptive = std::nullopt)
      : adaptive_(adaptive), coef_(coef) {
    GRPO_CHECK_CONFIG(std::isfinite(coef), "entropy_coef must be finite, got {}", coef);
    if (!adaptive_) return;
    adaptive_->validate();
    GRPO_CHECK_CONFIG(coef >= adaptive_->min && coef <= adaptive_->max,
                      "entropy_coef ({}) must lie in [entropy_coef_min, entropy_coef_max] = [{}, {}] with adaptive "
                      "entropy control",
                      coef, adaptive_->min, adaptive_->max);
  }

  /// The coefficient to use in the loss of the coming optimizer step (file comment).
  double applied() const { return !adaptive_ || last_entropy_ <= adaptive_->target ? coef_ : 0.0; }
  /// The coefficient itself (logged as entropy_coef, like TRL).
  double coef() const { return coef_; }
  /// The entropy measured at the last update (+inf before the first).
  double last_entropy() const { return last_entropy_; }
  bool adaptive() const { return adaptive_.has_value(); }

  /// After an optimizer step: entropy_sum = Σ H over its loss tokens (times the top-entropy mask when it is on) and
  /// tokens = their count, both summed over micro-batches and ranks. With no token (nothing measured) nothing
  /// changes; so does fixed control.
  void update(double entropy_sum, double tokens) {
    if (!adaptive_ || !(tokens > 0.0) || !std::isfinite(entropy_sum)) return;
    const double entropy = entropy_sum / tokens;
    coef_ = entropy <= adaptive_->target ? std::min(coef_ + adaptive_->delta, adaptive_->max)
                                         : std::max(coef_ - adaptive_->delta, adaptive_->min);
    last_entropy_ = entropy;
  }

  /// Sets the state a checkpoint saved (coef and last_entropy; last_entropy may be +inf). ConfigError for a
  /// non-finite coefficient.
  void restore(double coef, double last_entropy) {
    GRPO_CHECK_CONFIG(std::isfinite(coef), "EntropyController::restore: entropy_coef must be finite, got {}", coef);
    coef_ = coef;
    last_entropy_ = last_entropy;
  }

 private:
  std::optional<AdaptiveEntropyOptions> adaptive_;
  double coef_;
  double last_entropy_ = std::numeric_limits<double>::infinity();
};

}  // namespace grpo::train
