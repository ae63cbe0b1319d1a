// SPDX-License-Identifier: Apache-2.0
// The KL coefficient β over a run: fixed, or adapted towards a target KL (Ziegler et al. 2019, "Fine-Tuning Language
// Models from Human Preferences" §2.2; the AdaptiveKLController of TRL's PPO, verl's `kl_ctrl.type=adaptive` and
// ROLL's `kl_ctrl`; verl verl/trainer/ppo/core_algos.py AdaptiveKLController):
//
//   e = clip(KL / target − 1, −max_error, max_error)        KL: the measured KL of the step (token mean)
//   β ← β · (1 + e · n_steps / horizon)                     n_steps: sequences in the step (B = P·G)
//
// So β grows while the policy drifts further from the reference than the target and shrinks while it stays closer;
// with horizon H and n sequences per step, β moves by at most a factor (1 ± max_error·n/H) per step. Torch-free.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace grpo::train {

enum class KlControl {
  fixed,     ///< β stays at its initial value (TRL beta, verl kl_loss_coef)
  adaptive,  ///< the rule above
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<KlControl, 2> kKlControlNames{{
    {KlControl::fixed, "fixed"},
    {KlControl::adaptive, "adaptive"},
}};
}  // namespace detail

/// "fixed" or "adaptive".
GRPO_ENUM_NAMES(KlControl, detail::kKlControlNames, "KL controller", parse_kl_control);

/// How a KL coefficient β moves over a run; β itself is owned by what it weighs: GrpoLossOptions::beta for the loss's
/// KL term (GrpoTrainerOptions::kl), KlInRewardOptions::beta for the KL in the reward.
struct KlControlOptions {
  KlControl type = KlControl::fixed;
  double target = 0.1;      ///< adaptive: target KL per token (verl/ROLL default 0.1; TRL PPO's 6 is per sequence)
  double horizon = 10000;   ///< adaptive: sequences over which β may move by the clipped error (verl/ROLL 10000)
  double max_error = 0.2;   ///< adaptive: clip of the proportional error (0.2 in every reference system)

  /// ConfigError naming the field, for a controller starting at `beta`: β negative or not finite; adaptive with β,
  /// target, horizon or max_error ≤ 0 (adaptive control scales β: 0 would stay 0).
  void validate(double beta) const {
    GRPO_CHECK_CONFIG(std::isfinite(beta) && beta >= 0.0, "KL controller: beta must be finite and >= 0, got {}", beta);
    if (type != KlControl::adaptive) return;
    GRPO_CHECK_CONFIG(beta > 0.0, "KL controller: adaptive control needs an initial beta > 0 (it scales beta)");
    GRPO_CHECK_CONFIG(std::isfinite(target) && target > 0.0, "KL controller: target must be > 0, got {}", target);
    GRPO_CHECK_CONFIG(std::isfinite(horizon) && horizon > 0.0, "KL controller: horizon must be > 0, got {}", horizon);
    GRPO_CHECK_CONFIG(std::isfinite(max_error) && max_error > 0.0, "KL controller: max_error must be > 0, got {}",
                      max_error);
  }
};

/// The current β and its update rule. A value type: copy it to snapshot, restore(beta) after loading a checkpoint.
class KlController {
 public:
  /// β starts at `beta` (verl kl_ctrl.kl_coef) and moves as `control` says. ConfigError from control.validate(beta).
  explicit KlController(double beta = 0.0, KlControlOptions control = {}) : options_(control), beta_(beta) {
    options_.validate(beta);
  }

  double beta() const { return beta_; }

  /// After a step that measured `kl` (≥ 0, token mean) over `n_steps` sequences: the rule in the file comment for
  /// adaptive control, no change for fixed. A non-finite `kl` (no reference this step) leaves β unchanged. Returns
  /// the new β. Throws ConfigError for n_steps < 0.
  double update(double kl, std::int64_t n_steps) {
    GRPO_CHECK_CONFIG(n_steps >= 0, "KlController::update: n_steps must be >= 0, got {}", n_steps);
    if (options_.type != KlControl::adaptive || !std::isfinite(kl)) return beta_;
    const double error = std::clamp(kl / options_.target - 1.0, -options_.max_error, options_.max_error);
    beta_ *= 1.0 + error * static_cast<double>(n_steps) / options_.horizon;
    return beta_;
  }

  /// Sets β (from a checkpoint). ConfigError for a negative or non-finite value.
  void restore(double beta) {
    GRPO_CHECK_CONFIG(std::isfinite(beta) && beta >= 0.0, "KlController::restore: beta must be finite and >= 0, got {}",
                      beta);
    beta_ = beta;
  }

  const KlControlOptions& options() const { return options_; }

 private:
  KlControlOptions options_;
  double beta_;
};

}  // namespace grpo::train
