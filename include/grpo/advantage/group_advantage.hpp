// SPDX-License-Identifier: Apache-2.0
// Group-relative advantage estimators over a reward matrix [P, G]: GRPO z-score, Dr. GRPO, group mean with batch
// std, RLOO, REINFORCE++-baseline, GPG, pass@k and OPO; and the combination of several reward functions
// (sum-then-normalise, or GDPO's normalise-then-sum). Formulas follow TRL, verl, OpenRLHF and ROLL term for term
// (TRL trl/trainer/grpo_trainer.py, verl verl/trainer/ppo/core_algos.py, OpenRLHF openrlhf/trainer/ppo_utils, ROLL
// roll/utils/functionals.py); where they differ, the difference is an option.
//
// Missing rewards. A reward function may decline to judge a completion (rewards::score returns std::nullopt); the
// caller writes that as NaN in the reward matrix. NaN entries are left out of every statistic (means, stds, batch
// counts) and get advantage exactly 0, as TRL does (nan_to_num after NaN-aware statistics). A matrix where every
// reward is missing gives all-zero advantages, never NaN.
//
// Statistics are computed on the CPU in float64 (Eigen) whatever the input's dtype and device; the results are
// converted back to the input's dtype and device. Advantages carry no gradient.
#pragma once

#include <grpo/advantage/advantage_registry.hpp>
#include <grpo/advantage/masked_whiten.hpp>
#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <Eigen/Core>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo {

/// What a group with exactly one valid reward gets (no baseline can be formed from one sample).
enum class SingletonGroup {
  zero,        ///< advantage 0 and left out of batch whitening. TRL (its nanstd is NaN, then nan_to_num → 0).
  raw_reward,  ///< baseline 0, scale 1: the reward itself, divided by 1 + ε where the estimator divides by σ + ε
               ///< (grpo: (s − 0)/(1 + ε)), enters the estimator's batch step (GPG α, whitening).
               ///< verl grpo/rloo/gpg/opo/reinforce_plus_plus_baseline (μ = 0, σ = 1).
  error,       ///< throw grpo::Error naming the group. verl grpo_passk refuses groups of size 1.
};

/// How K reward functions' matrices [K, P, G] are combined with weights w_k (TRL multi_objective_aggregation).
enum class RewardAggregation {
  sum_then_normalize,  ///< r = nansum_k w_k·R_k, then the estimator on r. TRL default.
  normalize_then_sum,  ///< GDPO: per function group z-score Z_k = (R_k − μ_k)/(σ_k + ε), r = nansum_k w_k·Z_k, then a
                       ///< whole-batch z-score (r − mean)/(std + ε) instead of the estimator. TRL
                       ///< multi_objective_aggregation="normalize_then_sum"; requires estimator grpo.
};

namespace detail {

inline constexpr EnumNames<SingletonGroup, 3> kSingletonGroupNames{{
    {SingletonGroup::zero, "zero"},
    {SingletonGroup::raw_reward, "raw_reward"},
    {SingletonGroup::error, "error"},
}};

inline constexpr EnumNames<RewardAggregation, 2> kRewardAggregationNames{{
    {RewardAggregation::sum_then_normalize, "sum_then_normalize"},
    {RewardAggregation::normalize_then_sum, "normalize_then_sum"},
}};

}  // namespace detail

/// "zero", "raw_reward" or "error".
GRPO_ENUM_NAMES(SingletonGroup, detail::kSingletonGroupNames, "singleton group policy", parse_singleton_group);

/// "sum_then_normalize" or "normalize_then_sum" (TRL's spelling).
GRPO_ENUM_NAMES(RewardAggregation, detail::kRewardAggregationNames, "reward aggregation", parse_reward_aggregation);

/// Options of GroupAdvantage. The defaults reproduce TRL's GRPOTrainer (group z-score, ε = 1e-4, a lone reward
/// gets 0); advantage_preset() gives each published system's settings by name.
struct GroupAdvantageOptions {
  AdvantageEstimator estimator = AdvantageEstimator::grpo;
  /// When not empty, the estimator registered under this name in AdvantageRegistry::global() replaces `estimator`
  /// (see advantage_registry.hpp and select_advantage_estimator).
  std::string estimator_name;
  /// Added to the std before dividing (grpo, group_mean_batch_std, pass_at_k, GDPO). TRL 1e-4, verl 1e-6,
  /// ROLL 1e-6, OpenRLHF 1e-9. Must be > 0, so all-equal groups give 0 rather than 0/0.
  double eps = 1e-4;
  /// What a group with exactly one valid reward gets (also a prompt with G = 1).
  SingletonGroup singleton = SingletonGroup::zero;
  /// Clamp every valid raw reward to [lo, hi] before anything else (per function for [K, P, G] input).
  /// OpenRLHF reward.clip_range (−10, 10), TRL RLOO reward_clip_range. Off by default.
  std::optional<std::pair<double, double>> reward_clip;
  /// Clamp the final advantages to [lo, hi] (ROLL advantage_clip, symmetric there). Off by default.
  std::optional<std::pair<double, double>> advantage_clip;
  /// pass_at_k: divide r_max − r_2nd by (σ + ε) (verl norm_adv_by_std_in_grpo, default true there).
  bool pass_at_k_scale_by_std = true;
  /// reinforce_pp_baseline: variance floor inside verl's masked_whiten rsqrt(var + 1e-8).
  double whiten_eps = 1e-8;
  /// How [K, P, G] input (K reward functions) is combined; a [P, G] input is one function (K = 1).
  RewardAggregation aggregation = RewardAggregation::sum_then_normalize;
  /// Weights w_k of the K reward functions (TRL reward_weights); empty means every w_k = 1.
  std::vector<double> reward_weights;

  /// Throws ConfigError naming the option and its value: eps or whiten_eps not > 0, a clip range with lo > hi or
  /// NaN bounds, a non-finite weight, normalize_then_sum with an estimator other than grpo.
  void validate() const {
    GRPO_CHECK_CONFIG(eps > 0 && std::isfinite(eps), "GroupAdvantageOptions: eps must be > 0 and finite, got {}", eps);
    GRPO_CHECK_CONFIG(whiten_eps > 0 && std::isfinite(whiten_eps),
                      "GroupAdvantageOptions: whiten_eps must be > 0 and finite, got {}", whiten_eps);
    for (const auto& [name, clip] :
         {std::pair{"reward_clip", reward_clip}, std::pair{"advantage_clip", advantage_clip}}) {
      GRPO_CHECK_CONFIG(!clip || clip->first <= clip->second,
                        "GroupAdvantageOptions: {} must be (lo, hi) with lo <= hi, got ({}, {})", name,
                        clip ? clip->first : 0.0, clip ? clip->second : 0.0);
    }
    for (std::size_t k = 0; k < reward_weights.size(); ++k) {
      GRPO_CHECK_CONFIG(std::isfinite(reward_weights[k]),
                        "GroupAdvantageOptions: reward_weights[{}] must be finite, got {}", k, reward_weights[k]);
    }
    if (!estimator_name.empty()) {
      (void)AdvantageRegistry::global().get(estimator_name);
      GRPO_CHECK_CONFIG(aggregation == RewardAggregation::sum_then_normalize,
                        "GroupAdvantageOptions: aggregation normalize_then_sum (GDPO) needs estimator grpo, got the "
                        "registered estimator '{}'",
                        estimator_name);
    }
    GRPO_CHECK_CONFIG(aggregation != RewardAggregation::normalize_then_sum || estimator == AdvantageEstimator::grpo,
                      "GroupAdvantageOptions: aggregation normalize_then_sum (GDPO) defines its own normalisation and "
                      "needs estimator grpo, got estimator {}",
                      to_string(estimator));
  }
};

/// Selects the estimator called `name`: a built-in AdvantageEstimator name (estimator_name cleared) or one registered
/// in AdvantageRegistry::global(). ConfigError listing both kinds for an unknown name.
inline void select_advantage_estimator(GroupAdvantageOptions& options, std::string_view name) {
  if (const auto estimator = detail::find_enum(name, detail::kAdvantageEstimatorNames)) {
    options.estimator = *estimator;
    options.estimator_name.clear();
    return;
  }
  (void)AdvantageRegistry::global().get(name);
  options.estimator_name = std::string(name);
}

/// Result of GroupAdvantage. Tensors have the rewards' dtype and device.
struct AdvantageOutput {
  /// [B] = [P·G], row-major (index p·G + g, the order completions are sampled in). 0 where the reward is missing.
  torch::Tensor advantages;
  /// [P] mean of each group's valid rewards (of the combined reward for [K, P, G] input); 0 for a group with none.
  torch::Tensor group_mean;
  /// [P] Bessel std of each group's valid rewards; 0 for a group with fewer than two.
  torch::Tensor group_std;
  /// [P] int64: how many of the G rewards had a value.
  torch::Tensor group_count;
  /// [P, G] bool: true where the (combined) reward had a value.
  torch::Tensor valid;
  /// Fraction of the P groups with at least two valid rewards and σ ≤ 1e-8 (TRL isclose(σ, 0)): these groups give
  /// no learning signal; a rising value warns of collapse.
  double frac_reward_zero_std = 0.0;
  /// Fraction of valid raw rewards changed by reward_clip (ROLL critic/reward_clip_frac); 0 when off.
  double reward_clip_frac = 0.0;
  /// Fraction of valid advantages changed by advantage_clip; 0 when off.
  double advantage_clip_frac = 0.0;
  /// [B, T] float64: a critic's value targets (GAE's returns, gae.hpp), 0 at masked positions; undefined for every
  /// estimator without a critic.
  torch::Tensor returns;
};

namespace detail {

using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct NanMeanStd {
  double mean = 0.0;
  double std = 0.0;  ///< Bessel (n − 1); 0 when fewer than two values (torch.std would give NaN).
  int64_t count = 0;
};

/// Mean and Bessel std of the non-NaN entries of x (TRL nanmean / nanstd).
inline NanMeanStd nan_mean_std(Eigen::Ref<const Eigen::RowVectorXd> x) {
  NanMeanStd out;
  double sum = 0.0;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    if (!std::isnan(x[i])) {
      sum += x[i];
      ++out.count;
    }
  }
  if (out.count == 0) return out;
  out.mean = sum / static_cast<double>(out.count);
  if (out.count < 2) return out;
  double squares = 0.0;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    if (!std::isnan(x[i])) squares += (x[i] - out.mean) * (x[i] - out.mean);
  }
  out.std = std::sqrt(squares / static_cast<double>(out.count - 1));
  return out;
}

/// The whole matrix as one row, for batch statistics.
inline Eigen::Map<const Eigen::RowVectorXd> flat(const RowMatrixXd& m) { return {m.data(), m.size()}; }

inline RowMatrixXd to_row_matrix(const torch::Tensor& t, int64_t rows, int64_t cols) {
  auto cpu = t.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  return Eigen::Map<const RowMatrixXd>(cpu.data_ptr<double>(), rows, cols);
}

inline torch::Tensor to_tensor(const double* data, std::vector<int64_t> sizes, const torch::TensorOptions& options) {
  return torch::from_blob(const_cast<double*>(data), sizes, torch::kFloat64)
      .to(options, /*non_blocking=*/false, /*copy=*/true);
}

[[noreturn]] inline void throw_singleton(std::string_view what, int64_t group, int64_t size) {
  throw_formatted<Error>(
      "{}: prompt group {} has a single reward with a value (group size G = {}) and singleton = error; "
      "set GroupAdvantageOptions::singleton to zero or raw_reward to accept it",
      what, group, size);
}

/// GDPO's per-function step: (r − μ_p)/(σ_p + eps) per group; singleton groups follow `singleton`. NaN stays NaN.
inline RowMatrixXd group_z_score(const RowMatrixXd& r, double eps, SingletonGroup singleton, std::string_view what) {
  RowMatrixXd z = r;
  for (Eigen::Index p = 0; p < r.rows(); ++p) {
    const NanMeanStd s = nan_mean_std(r.row(p));
    if (s.count == 1) {
      if (singleton == SingletonGroup::error) throw_singleton(what, p, r.cols());
      if (singleton == SingletonGroup::raw_reward) {  // μ = 0, σ = 1: (s − 0)/(1 + ε)
        for (Eigen::Index g = 0; g < r.cols(); ++g) z(p, g) = r(p, g) / (1.0 + eps);
        continue;
      }
    }
    for (Eigen::Index g = 0; g < r.cols(); ++g) {
      if (!std::isnan(r(p, g))) z(p, g) = s.count == 1 ? 0.0 : (r(p, g) - s.mean) / (s.std + eps);
    }
  }
  return z;
}

/// Weighted NaN-aware sum over the K functions; an entry where every function is NaN stays NaN (TRL sets such rows
/// back to NaN after nansum). normalize_then_sum z-scores each function per group first.
inline RowMatrixXd combine_reward_matrices(const std::vector<RowMatrixXd>& per_function,
                                           const std::vector<double>& weights, RewardAggregation aggregation,
                                           double eps, SingletonGroup singleton, std::string_view what) {
  const Eigen::Index rows = per_function.front().rows(), cols = per_function.front().cols();
  RowMatrixXd total = RowMatrixXd::Constant(rows, cols, std::numeric_limits<double>::quiet_NaN());
  for (std::size_t k = 0; k < per_function.size(); ++k) {
    const double w = weights.empty() ? 1.0 : weights[k];
    const RowMatrixXd term = aggregation == RewardAggregation::normalize_then_sum
                                 ? group_z_score(per_function[k], eps, singleton, what)
                                 : per_function[k];
    for (Eigen::Index i = 0; i < term.size(); ++i) {
      if (std::isnan(term.data()[i])) continue;
      double& t = total.data()[i];
      t = (std::isnan(t) ? 0.0 : t) + w * term.data()[i];
    }
  }
  return total;
}

inline void check_reward_tensor(const torch::Tensor& rewards, std::string_view what) {
  GRPO_CHECK(rewards.defined() && (rewards.dim() == 2 || rewards.dim() == 3),
             "{}: rewards must be [P, G] or [K, P, G] (K reward functions), got shape {}", what, shape_str(rewards));
  check_floating(rewards, "rewards", what);
  GRPO_CHECK(rewards.dim() == 2 || rewards.size(0) >= 1, "{}: rewards [K, P, G] has no reward function, shape {}", what,
             shape_str(rewards));
}

/// Splits rewards ([P, G] or [K, P, G]) into K float64 matrices, rejecting ±inf (NaN is "no value").
inline std::vector<RowMatrixXd> reward_matrices(const torch::Tensor& rewards, std::string_view what) {
  const int64_t K = rewards.dim() == 3 ? rewards.size(0) : 1, P = rewards.size(-2), G = rewards.size(-1);
  const RowMatrixXd all = to_row_matrix(rewards.reshape({K, P * G}), K, P * G);
  std::vector<RowMatrixXd> out;
  for (int64_t k = 0; k < K; ++k) {
    out.emplace_back(Eigen::Map<const RowMatrixXd>(all.row(k).data(), P, G));
    for (int64_t i = 0; i < P * G; ++i) {
      GRPO_CHECK(!std::isinf(out.back().data()[i]),
                 "{}: rewards must be finite or NaN (= no value); found {} for function {}, prompt {}, completion {} "
                 "(rewards shape {})",
                 what, out.back().data()[i], k, i / G, i % G, shape_str(rewards));
    }
  }
  return out;
}

}  // namespace detail

/// Combines K reward functions' matrices into one [P, G] reward (TRL _calculate_rewards + multi_objective_aggregation):
///   sum_then_normalize: r = nansum_k w_k·R_k (the reward GroupAdvantage then normalises).
///   normalize_then_sum: r = nansum_k w_k·(R_k − μ_k,p)/(σ_k,p + eps), per-function group z-scores (GDPO's first
///     stage; GroupAdvantage follows it with a whole-batch z-score). Groups where function k has one value follow
///     `singleton`.
/// A completion for which every function gave no value (all NaN) stays NaN. rewards: [K, P, G] floating (NaN = no
/// value); weights: K entries, or empty for all 1. Returns [P, G] in the rewards' dtype and device.
inline torch::Tensor combine_rewards(const torch::Tensor& rewards, const std::vector<double>& weights,
                                     RewardAggregation aggregation, double eps = 1e-4,
                                     SingletonGroup singleton = SingletonGroup::zero) {
  constexpr std::string_view what = "combine_rewards";
  detail::check_dim(rewards, 3, "rewards", what);
  detail::check_reward_tensor(rewards, what);
  GRPO_CHECK(weights.empty() || static_cast<int64_t>(weights.size()) == rewards.size(0),
             "{}: weights has {} entries but rewards has shape {} (K = {})", what, weights.size(), shape_str(rewards),
             rewards.size(0));
  GRPO_CHECK_CONFIG(eps > 0 && std::isfinite(eps), "{}: eps must be > 0 and finite, got {}", what, eps);
  const detail::RowMatrixXd total = detail::combine_reward_matrices(detail::reward_matrices(rewards, what), weights,
                                                                    aggregation, eps, singleton, what);
  return detail::to_tensor(total.data(), {total.rows(), total.cols()}, rewards.options());
}

/// Group-relative advantages: one call turns the reward matrix of a step into per-sequence advantages.
///
/// rewards: [P, G] floating (P prompts, G completions each, NaN = no value), or [K, P, G] for K reward functions,
/// combined by options.aggregation with options.reward_weights. lengths: optional [P, G] completion lengths in tokens
/// (any numeric dtype, ≥ 0); required by opo, and when given, reinforce_pp_baseline whitens token-weighted as verl
/// does (each sequence counts |o_i| times; without lengths every sequence counts once). Other estimators ignore it.
///
/// Steps: reward_clip on the raw rewards → combine functions → per-group estimator (see AdvantageEstimator; groups
/// with one valid reward follow options.singleton) → batch step (GPG α, REINFORCE++ whitening, GDPO batch z-score) →
/// advantage_clip. Missing rewards get 0 throughout.
class GroupAdvantage {
 public:
  explicit GroupAdvantage(GroupAdvantageOptions options = {}) : options_(std::move(options)) { options_.validate(); }

  const GroupAdvantageOptions& options() const { return options_; }

  AdvantageOutput operator()(const torch::Tensor& rewards, const torch::Tensor& lengths = {}) const {
    constexpr std::string_view what = "GroupAdvantage";
    using detail::RowMatrixXd;
    detail::check_reward_tensor(rewards, what);
    const int64_t K = rewards.dim() == 3 ? rewards.size(0) : 1, P = rewards.size(-2), G = rewards.size(-1);
    const auto& weights = options_.reward_weights;
    GRPO_CHECK(weights.empty() || static_cast<int64_t>(weights.size()) == K,
               "{}: reward_weights has {} entries but rewards has shape {} (K = {})", what, weights.size(),
               shape_str(rewards), K);
    const bool opo = options_.estimator == AdvantageEstimator::opo;
    GRPO_CHECK(
        lengths.defined() || !opo,
        "{}: estimator opo needs lengths [P, G] = [{}, {}] (completion lengths) for its length-weighted baseline", what,
        P, G);
    std::optional<RowMatrixXd> length_matrix;
    if (lengths.defined()) {
      GRPO_CHECK(lengths.dim() == 2 && lengths.size(0) == P && lengths.size(1) == G,
                 "{}: lengths has shape {} but rewards has shape {}; lengths must be [P, G] = [{}, {}]", what,
                 shape_str(lengths), shape_str(rewards), P, G);
      length_matrix = detail::to_row_matrix(lengths, P, G);
      for (Eigen::Index i = 0; i < length_matrix->size(); ++i) {
        const double l = length_matrix->data()[i];
        GRPO_CHECK(l >= 0 && std::isfinite(l),
                   "{}: lengths must be finite and >= 0, got {} at prompt {}, completion {}", what, l, i / G, i % G);
      }
    }

    AdvantageOutput out;
    std::vector<RowMatrixXd> per_function = detail::reward_matrices(rewards, what);
    if (options_.reward_clip) {
      const auto [lo, hi] = *options_.reward_clip;
      int64_t clipped = 0, valid = 0;
      for (auto& m : per_function) {
        for (Eigen::Index i = 0; i < m.size(); ++i) {
          double& v = m.data()[i];
          if (std::isnan(v)) continue;
          ++valid;
          if (v < lo || v > hi) ++clipped;
          v = std::clamp(v, lo, hi);
        }
      }
      out.reward_clip_frac = valid ? static_cast<double>(clipped) / static_cast<double>(valid) : 0.0;
    }
    const RowMatrixXd r = (K == 1 && weights.empty() && options_.aggregation == RewardAggregation::sum_then_normalize)
                              ? per_function.front()
                              : detail::combine_reward_matrices(per_function, weights, options_.aggregation,
                                                                options_.eps, options_.singleton, what);

    std::vector<detail::NanMeanStd> groups(P);
    Eigen::VectorXd group_mean(P), group_std(P);
    Eigen::Matrix<int64_t, Eigen::Dynamic, 1> group_count(P);
    int64_t zero_std = 0;
    for (int64_t p = 0; p < P; ++p) {
      groups[p] = detail::nan_mean_std(r.row(p));
      group_mean[p] = groups[p].mean;
      group_std[p] = groups[p].std;
      group_count[p] = groups[p].count;
      if (groups[p].count >= 2 && groups[p].std <= 1e-8) ++zero_std;
    }
    out.frac_reward_zero_std = P ? static_cast<double>(zero_std) / static_cast<double>(P) : 0.0;

    RowMatrixXd adv = options_.aggregation == RewardAggregation::normalize_then_sum ? batch_z_score(r)
                      : options_.estimator_name.empty()                                ? estimate(r, groups, length_matrix, what)
                                                                                       : registered(r, length_matrix, what);
    if (options_.advantage_clip) {
      const auto [lo, hi] = *options_.advantage_clip;
      int64_t clipped = 0, valid = 0;
      for (Eigen::Index i = 0; i < adv.size(); ++i) {
        if (std::isnan(r.data()[i])) continue;
        double& a = adv.data()[i];
        ++valid;
        if (a < lo || a > hi) ++clipped;
        a = std::clamp(a, lo, hi);
      }
      out.advantage_clip_frac = valid ? static_cast<double>(clipped) / static_cast<double>(valid) : 0.0;
    }

    const auto options = rewards.options();
    out.advantages = detail::to_tensor(adv.data(), {P * G}, options);
    out.group_mean = detail::to_tensor(group_mean.data(), {P}, options);
    out.group_std = detail::to_tensor(group_std.data(), {P}, options);
    out.group_count = torch::from_blob(group_count.data(), {P}, torch::kInt64).to(rewards.device(), false, true);
    out.valid = detail::to_tensor(r.data(), {P, G}, torch::kFloat64).isnan().logical_not().to(rewards.device());
    return out;
  }

 private:
  /// GDPO's last stage: (r − mean)/(std + eps) over every valid entry of the batch (Bessel std, as torch .std()).
  detail::RowMatrixXd batch_z_score(const detail::RowMatrixXd& r) const {
    const detail::NanMeanStd batch = detail::nan_mean_std(detail::flat(r));
    detail::RowMatrixXd adv = detail::RowMatrixXd::Zero(r.rows(), r.cols());
    for (Eigen::Index i = 0; i < r.size(); ++i) {
      if (!std::isnan(r.data()[i])) adv.data()[i] = (r.data()[i] - batch.mean) / (batch.std + options_.eps);
    }
    return adv;
  }

  /// The registered estimator estimator_name on r (and the lengths), 0 where r is NaN.
  detail::RowMatrixXd registered(const detail::RowMatrixXd& r, const std::optional<detail::RowMatrixXd>& lengths,
                                 std::string_view what) const {
    const Eigen::Index P = r.rows(), G = r.cols();
    const auto function = AdvantageRegistry::global().get(options_.estimator_name);
    const torch::Tensor rewards = detail::to_tensor(r.data(), {P, G}, torch::kFloat64);
    const torch::Tensor length_tensor =
        lengths ? detail::to_tensor(lengths->data(), {P, G}, torch::kFloat64) : torch::Tensor();
    const torch::Tensor result = function(rewards, length_tensor);
    GRPO_CHECK(result.defined() && result.dim() == 2 && result.size(0) == P && result.size(1) == G,
               "{}: registered estimator '{}' must return advantages [P, G] = [{}, {}], got {}", what,
               options_.estimator_name, P, G, result.defined() ? shape_str(result) : std::string("undefined"));
    detail::RowMatrixXd adv = detail::to_row_matrix(result, P, G);
    for (Eigen::Index i = 0; i < adv.size(); ++i) {
      if (std::isnan(r.data()[i])) adv.data()[i] = 0.0;
    }
    return adv;
  }

  /// The per-group estimator, then its batch step. `in_batch` marks the entries that take part in the batch step:
  /// valid entries of groups with ≥ 2 values, and singletons under raw_reward.
  detail::RowMatrixXd estimate(const detail::RowMatrixXd& r, const std::vector<detail::NanMeanStd>& groups,
                               const std::optional<detail::RowMatrixXd>& lengths, std::string_view what) const {
    using detail::RowMatrixXd;
    const Eigen::Index P = r.rows(), G = r.cols();
    const double eps = options_.eps;
    RowMatrixXd adv = RowMatrixXd::Zero(P, G);
    using BoolMatrix = Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    BoolMatrix in_batch = BoolMatrix::Constant(P, G, false);
    // Batch std of the raw rewards (TRL scale_rewards="batch" uses rewards.std() over the whole batch).
    const double batch_std = options_.estimator == AdvantageEstimator::group_mean_batch_std
                                 ? detail::nan_mean_std(detail::flat(r)).std
                                 : 0.0;

    for (Eigen::Index p = 0; p < P; ++p) {
      const detail::NanMeanStd& s = groups[p];
      if (s.count == 0) continue;
      if (s.count == 1) {
        if (options_.singleton == SingletonGroup::error) detail::throw_singleton(what, p, G);
        if (options_.singleton == SingletonGroup::zero) continue;
        // raw_reward: μ = 0, σ = 1, so (s − 0)/(1 + ε) where the estimator divides by σ + ε (verl grpo).
        const double scale = options_.estimator == AdvantageEstimator::grpo ? 1.0 / (1.0 + eps) : 1.0;
        for (Eigen::Index g = 0; g < G; ++g) {
          if (!std::isnan(r(p, g))) {
            adv(p, g) = r(p, g) * scale;
            in_batch(p, g) = true;
          }
        }
        continue;
      }
      const double n = static_cast<double>(s.count);
      double baseline = s.mean;
      if (options_.estimator == AdvantageEstimator::opo) {
        double weighted = 0.0, total_length = 0.0;
        for (Eigen::Index g = 0; g < G; ++g) {
          if (std::isnan(r(p, g))) continue;
          weighted += (*lengths)(p, g) * r(p, g);
          total_length += (*lengths)(p, g);
        }
        // Every completion empty: equal (zero) lengths, whose length-weighted mean is the plain mean.
        if (total_length > 0) baseline = weighted / total_length;
      }
      Eigen::Index best = -1;
      double second = -std::numeric_limits<double>::infinity();
      if (options_.estimator == AdvantageEstimator::pass_at_k) {
        for (Eigen::Index g = 0; g < G; ++g) {  // first index of the maximum, as torch.topk on distinct values
          if (!std::isnan(r(p, g)) && (best < 0 || r(p, g) > r(p, best))) best = g;
        }
        for (Eigen::Index g = 0; g < G; ++g) {
          if (g != best && !std::isnan(r(p, g))) second = std::max(second, r(p, g));
        }
      }
      for (Eigen::Index g = 0; g < G; ++g) {
        const double x = r(p, g);
        if (std::isnan(x)) continue;
        in_batch(p, g) = true;
        switch (options_.estimator) {
          case AdvantageEstimator::grpo:
            adv(p, g) = (x - s.mean) / (s.std + eps);
            break;
          case AdvantageEstimator::dr_grpo:
          case AdvantageEstimator::reinforce_pp_baseline:
          case AdvantageEstimator::gpg:
          case AdvantageEstimator::opo:
            adv(p, g) = x - baseline;
            break;
          case AdvantageEstimator::group_mean_batch_std:
            adv(p, g) = (x - s.mean) / (batch_std + eps);
            break;
          case AdvantageEstimator::rloo:
            adv(p, g) = n / (n - 1.0) * (x - s.mean);
            break;
          case AdvantageEstimator::pass_at_k:
            adv(p, g) = g != best ? 0.0 : (r(p, best) - second) / (options_.pass_at_k_scale_by_std ? s.std + eps : 1.0);
            break;
        }
      }
    }

    if (options_.estimator == AdvantageEstimator::gpg) {
      // verl: α = B / count_nonzero(scores), over the raw rewards of the whole batch (here: the valid ones).
      int64_t total = 0, nonzero = 0;
      for (Eigen::Index i = 0; i < r.size(); ++i) {
        if (std::isnan(r.data()[i])) continue;
        ++total;
        if (r.data()[i] != 0.0) ++nonzero;
      }
      adv *= static_cast<double>(total) / static_cast<double>(std::max<int64_t>(nonzero, 1));
    } else if (options_.estimator == AdvantageEstimator::reinforce_pp_baseline) {
      // verl masked_whiten over the response tokens of the batch (masked_whiten.hpp): a sequence's advantage is
      // constant over its tokens, so its weight is its length (1 without lengths); entries outside the batch step
      // weigh 0 and keep their value.
      RowMatrixXd weights = RowMatrixXd::Zero(P, G);
      for (Eigen::Index i = 0; i < r.size(); ++i) {
        if (in_batch.data()[i]) weights.data()[i] = lengths ? lengths->data()[i] : 1.0;
      }
      const torch::Tensor whitened = masked_whiten(detail::to_tensor(adv.data(), {P, G}, torch::kFloat64),
                                                   detail::to_tensor(weights.data(), {P, G}, torch::kFloat64),
                                                   options_.whiten_eps);
      const RowMatrixXd result = detail::to_row_matrix(whitened, P, G);
      for (Eigen::Index i = 0; i < r.size(); ++i) {
        if (in_batch.data()[i]) adv.data()[i] = result.data()[i];
      }
    }
    return adv;
  }

  GroupAdvantageOptions options_;
};

/// Names accepted by advantage_preset, in order.
inline constexpr std::array<std::string_view, 10> kAdvantagePresetNames{
    "grpo",      "verl_grpo", "dr_grpo", "group_mean_batch_std", "rloo", "reinforce_pp_baseline", "gpg",
    "pass_at_k", "opo",       "gdpo"};

/// The published recipes by name, each with the settings of the system it comes from:
///   grpo                  TRL GRPOTrainer: group z-score, eps 1e-4, a lone reward gets 0.
///   verl_grpo             verl grpo: eps 1e-6, a lone reward is its own advantage (μ = 0, σ = 1).
///   dr_grpo               TRL scale_rewards="none" (r − μ; a lone reward gets 0).
///   group_mean_batch_std  TRL scale_rewards="batch", eps 1e-4.
///   rloo, reinforce_pp_baseline, gpg, opo   verl's estimators: eps 1e-6, singleton raw_reward.
///   pass_at_k             verl grpo_passk: eps 1e-6, scaled by std, groups of one are an error.
///   gdpo                  TRL multi_objective_aggregation="normalize_then_sum", eps 1e-4.
/// Throws ConfigError naming the unknown name and listing the valid ones.
inline GroupAdvantageOptions advantage_preset(std::string_view name) {
  GroupAdvantageOptions o;
  const auto verl = [&o](AdvantageEstimator estimator, SingletonGroup singleton = SingletonGroup::raw_reward) {
    o.estimator = estimator;
    o.eps = 1e-6;
    o.singleton = singleton;
  };
  if (name == "grpo") {
    // TRL defaults are the option defaults.
  } else if (name == "verl_grpo") {
    verl(AdvantageEstimator::grpo);
  } else if (name == "dr_grpo") {
    o.estimator = AdvantageEstimator::dr_grpo;
  } else if (name == "group_mean_batch_std") {
    o.estimator = AdvantageEstimator::group_mean_batch_std;
  } else if (name == "rloo") {
    verl(AdvantageEstimator::rloo);
  } else if (name == "reinforce_pp_baseline") {
    verl(AdvantageEstimator::reinforce_pp_baseline);
  } else if (name == "gpg") {
    verl(AdvantageEstimator::gpg);
  } else if (name == "pass_at_k") {
    verl(AdvantageEstimator::pass_at_k, SingletonGroup::error);
  } else if (name == "opo") {
    verl(AdvantageEstimator::opo);
  } else if (name == "gdpo") {
    o.aggregation = RewardAggregation::normalize_then_sum;
  } else {
    detail::throw_unknown_name("advantage preset", name, kAdvantagePresetNames);
  }
  return o;
}

}  // namespace grpo
