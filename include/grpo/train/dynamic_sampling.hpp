// SPDX-License-Identifier: Apache-2.0
// DAPO's dynamic sampling (Yu et al. 2025, §3.2; verl `algorithm.filter_groups`): a group whose rewards have no
// spread (every completion right, or every one wrong) gets advantage 0 everywhere and adds nothing to the gradient,
// only to the normaliser. Drop such groups and keep generating rounds of prompts until the step holds P informative
// groups, up to a cap on rounds.
//
// At the cap (verl raises an error there), DynamicSamplingCap says what happens:
//   train  train on the informative groups collected so far (fewer than P; the normaliser counts only them), or skip
//          the step when there are none;
//   skip   skip the optimizer step unless P informative groups were collected.
// Groups are kept in generation order (round, then prompt), the first P informative ones; later informative groups
// of the last round are dropped too (verl keeps the first train_batch_size as well). The collector sees the flags
// of the whole round, so data-parallel ranks that all-reduce their shards' flags keep the same groups, and one rank
// keeps exactly what two ranks keep together.
//
// Per domain (ROLL runs one dynamic-sampling scheduler per domain): each domain has its own quota, its share of the
// first round's prompts scaled to P (largest remainders), and its informative groups fill only that quota, so the
// trained batch keeps the mix; without it, the domain whose groups most often have spread takes over the batch.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::train {

enum class DynamicSamplingCap { train, skip };

namespace detail {
inline constexpr ::grpo::detail::EnumNames<DynamicSamplingCap, 2> kDynamicSamplingCapNames{{
    {DynamicSamplingCap::train, "train"},
    {DynamicSamplingCap::skip, "skip"},
}};
}  // namespace detail

/// "train" or "skip".
GRPO_ENUM_NAMES(DynamicSamplingCap, detail::kDynamicSamplingCapNames, "dynamic sampling cap behaviour",
                parse_dynamic_sampling_cap);

struct DynamicSamplingOptions {
  std::int64_t target_groups = 1;  ///< P: informative groups one step trains on
  std::int64_t max_rounds = 4;     ///< generation rounds per step, ≥ 1 (verl max_num_gen_batches)
  DynamicSamplingCap at_cap = DynamicSamplingCap::train;
  bool per_domain = false;         ///< per-domain quotas (see the file comment)

  void validate() const {
    GRPO_CHECK_CONFIG(target_groups >= 1, "dynamic sampling: target_groups must be >= 1, got {}", target_groups);
    GRPO_CHECK_CONFIG(max_rounds >= 1, "dynamic sampling: max_rounds must be >= 1, got {}", max_rounds);
  }
};

/// Which groups dynamic sampling keeps. DAPO: a Bessel std above 1e-8 (the threshold GroupAdvantage uses for
/// frac_reward_zero_std). ROLL's query_filter_config (roll/distributed/scheduler/user_defined_rollout_loop.py): its
/// std_filter drops a group whose std is ≤ std_threshold, its mean_filter one whose mean is ≤ threshold_down or ≥
/// threshold_up; here both can apply at once.
struct GroupFilter {
  double min_std = 1e-8;                    ///< keep only std > min_std
  std::optional<double> mean_above;         ///< keep only mean > this (ROLL threshold_down)
  std::optional<double> mean_below;         ///< keep only mean < this (ROLL threshold_up)

  /// Throws ConfigError "<where>: min_std must be a finite number, got …" (`where` names the setting in the
  /// caller's terms: "dynamic_sampling", "domains.code.dynamic_sampling_filter").
  void validate(std::string_view where) const {
    GRPO_CHECK_CONFIG(std::isfinite(min_std), "{}: min_std must be a finite number, got {}", where, min_std);
  }
};

/// [P] for rewards [P, G] (float, NaN = no value): 1 where the group passes `filter` (at least two values, a Bessel
/// standard deviation above filter.min_std and the mean inside the band), else 0.
inline std::vector<std::uint8_t> informative_groups(const torch::Tensor& rewards, const GroupFilter& filter = {}) {
  GRPO_CHECK(rewards.defined() && rewards.dim() == 2, "informative_groups: rewards must be [P, G], got {}",
             shape_str(rewards));
  const torch::Tensor r = rewards.to(torch::kCPU, torch::kFloat64).contiguous();
  const auto values = r.accessor<double, 2>();
  std::vector<std::uint8_t> out(static_cast<std::size_t>(r.size(0)), 0);
  for (int64_t p = 0; p < r.size(0); ++p) {
    double sum = 0.0;
    int64_t count = 0;
    for (int64_t g = 0; g < r.size(1); ++g) {
      if (!std::isnan(values[p][g])) {
        sum += values[p][g];
        ++count;
      }
    }
    if (count < 2) continue;
    const double mean = sum / static_cast<double>(count);
    double squares = 0.0;
    for (int64_t g = 0; g < r.size(1); ++g) {
      if (!std::isnan(values[p][g])) squares += (values[p][g] - mean) * (values[p][g] - mean);
    }
    out[static_cast<std::size_t>(p)] = std::sqrt(squares / static_cast<double>(count - 1)) > filter.min_std &&
                                       (!filter.mean_above || mean > *filter.mean_above) &&
                                       (!filter.mean_below || mean < *filter.mean_below);
  }
  return out;
}

/// Collects the informative groups of one step over generation rounds.
class GroupCollector {
 public:
  explicit GroupCollector(DynamicSamplingOptions options) : options_(options) { options_.validate(); }

  /// Records one round's groups (`informative` flags of all its groups, in generation order; `domains` their domain
  /// indices, or empty for one domain) and returns which of them are kept: informative ones, in order, until
  /// target_groups are kept (per domain: until the group's domain has its quota). Throws grpo::Error when called
  /// after done(), or for `domains` of another length than `informative`.
  std::vector<std::uint8_t> add_round(std::span<const std::uint8_t> informative,
                                      std::span<const std::size_t> domains = {}) {
    GRPO_CHECK(!done(), "GroupCollector::add_round: the step is done ({} rounds, {} of {} groups kept)", rounds_,
               kept_, options_.target_groups);
    GRPO_CHECK(domains.empty() || domains.size() == informative.size(),
               "GroupCollector::add_round: {} domains for {} groups", domains.size(), informative.size());
    const auto domain_of = [&](std::size_t i) { return domains.empty() ? std::size_t{0} : domains[i]; };
    for (std::size_t i = 0; i < informative.size(); ++i) {
      if (domain_of(i) >= kept_by_domain_.size()) {
        kept_by_domain_.resize(domain_of(i) + 1, 0);
        generated_by_domain_.resize(domain_of(i) + 1, 0);
      }
    }
    if (rounds_ == 0) set_quotas(informative.size(), domain_of);
    ++rounds_;
    std::vector<std::uint8_t> keep(informative.size(), 0);
    for (std::size_t i = 0; i < informative.size(); ++i) {
      const std::size_t d = domain_of(i);
      ++generated_;
      ++generated_by_domain_[d];
      const bool room = options_.per_domain ? kept_by_domain_[d] < quota(d) : kept_ < options_.target_groups;
      if (!informative[i]) {
        ++zero_spread_;
      } else if (room) {
        keep[i] = 1;
        ++kept_;
        ++kept_by_domain_[d];
      }
    }
    return keep;
  }

  /// The target (every domain's quota) is reached or the rounds are used up.
  bool done() const {
    if (rounds_ >= options_.max_rounds) return true;
    if (!options_.per_domain) return kept_ >= options_.target_groups;
    if (rounds_ == 0) return false;
    for (std::size_t d = 0; d < quotas_.size(); ++d) {
      if (kept_by_domain_[d] < quotas_[d]) return false;
    }
    return true;
  }
  /// Per domain: domain d's quota (0 for a domain the first round did not draw).
  std::int64_t quota(std::size_t d) const { return d < quotas_.size() ? quotas_[d] : 0; }
  /// Groups kept and generated so far, by domain index.
  const std::vector<std::int64_t>& kept_by_domain() const { return kept_by_domain_; }
  const std::vector<std::int64_t>& generated_by_domain() const { return generated_by_domain_; }
  /// Whether the step trains (see the file comment): some groups kept, and the target reached unless at_cap is train.
  bool train() const {
    return kept_ > 0 && (kept_ >= options_.target_groups || options_.at_cap == DynamicSamplingCap::train);
  }

  std::int64_t rounds() const { return rounds_; }
  std::int64_t kept() const { return kept_; }
  std::int64_t generated() const { return generated_; }

  /// dynamic_sampling/{rounds, kept_groups, dropped_groups, frac_zero_std_before, skipped}: rounds used, groups
  /// trained on, groups generated and not trained on, the fraction of generated groups without spread (before the
  /// filter), and 1 when the step does not train.
  std::vector<std::pair<std::string, double>> metrics() const {
    return {{"dynamic_sampling/rounds", static_cast<double>(rounds_)},
            {"dynamic_sampling/kept_groups", static_cast<double>(kept_)},
            {"dynamic_sampling/dropped_groups", static_cast<double>(generated_ - kept_)},
            {"dynamic_sampling/frac_zero_std_before",
             generated_ ? static_cast<double>(zero_spread_) / static_cast<double>(generated_) : 0.0},
            {"dynamic_sampling/skipped", train() ? 0.0 : 1.0}};
  }

  const DynamicSamplingOptions& options() const { return options_; }

 private:
  /// Quotas from the first round: domain d gets target_groups · (its groups / all groups), rounded by largest
  /// remainder (ties to the lower index) so that they sum to target_groups.
  template <typename DomainOf>
  void set_quotas(std::size_t groups, const DomainOf& domain_of) {
    if (!options_.per_domain || groups == 0) return;
    std::vector<double> share(kept_by_domain_.size(), 0.0);
    for (std::size_t i = 0; i < groups; ++i) share[domain_of(i)] += 1.0;
    quotas_.assign(share.size(), 0);
    std::vector<std::pair<double, std::size_t>> remainders;
    std::int64_t assigned = 0;
    for (std::size_t d = 0; d < share.size(); ++d) {
      const double exact = static_cast<double>(options_.target_groups) * share[d] / static_cast<double>(groups);
      quotas_[d] = static_cast<std::int64_t>(std::floor(exact));
      assigned += quotas_[d];
      remainders.emplace_back(-(exact - std::floor(exact)), d);
    }
    std::sort(remainders.begin(), remainders.end());
    for (std::size_t k = 0; assigned < options_.target_groups && k < remainders.size(); ++k, ++assigned) {
      ++quotas_[remainders[k].second];
    }
  }

  DynamicSamplingOptions options_;
  std::int64_t rounds_ = 0, kept_ = 0, generated_ = 0, zero_spread_ = 0;
  std::vector<std::int64_t> quotas_, kept_by_domain_, generated_by_domain_;
};

}  // namespace grpo::train
