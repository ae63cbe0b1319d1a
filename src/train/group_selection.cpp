// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/group_selection.hpp>

#include <grpo/rewards/reward_set.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace grpo::train {
namespace {

/// [B] float64: the metric of each completion (GroupSelectionOptions::metric), NaN where a completion has none.
torch::Tensor metric_values(const StepScores& scores, const std::string& metric) {
  const std::size_t n = scores.total.size();
  std::vector<double> values(n, std::numeric_limits<double>::quiet_NaN());
  if (metric == "total") {
    for (std::size_t b = 0; b < n; ++b) {
      if (scores.total[b]) values[b] = *scores.total[b];
    }
  } else if (metric == "accuracy" || metric == "acc") {
    for (std::size_t b = 0; b < n; ++b) {
      if (scores.judged[b]) values[b] = scores.correct[b];
    }
  } else {
    bool found = n == 0;
    for (std::size_t b = 0; b < n; ++b) {
      for (const auto& [label, value] : scores.rewards[b]) {
        if (label != metric) continue;
        found = true;
        if (value) values[b] = *value;
      }
    }
    if (!found) {
      std::vector<std::string> labels;
      for (const auto& [label, value] : scores.rewards.front()) labels.push_back(label);
      throw ConfigError(fmt::format("dynamic_sampling_metric: '{}' is neither total, accuracy (acc) nor a reward's "
                                    "label (labels: {})",
                                    metric, fmt::join(labels, ", ")));
    }
  }
  return torch::tensor(values, torch::kFloat64);
}

}  // namespace

GroupSelection::GroupSelection(GroupSelectionOptions options, std::vector<std::string> domain_names)
    : options_(std::move(options)) {
  for (const auto& [name, filter] : options_.domain_filters) {
    GRPO_CHECK_CONFIG(std::find(domain_names.begin(), domain_names.end(), name) != domain_names.end(),
                      "domains.{}.dynamic_sampling_filter: the prompts have no domain '{}' (domains: {})", name, name,
                      fmt::join(domain_names, ", "));
  }
  for (const std::string& name : domain_names) {
    const auto own = options_.domain_filters.find(name);
    filters_.push_back(own != options_.domain_filters.end() ? own->second : options_.filter);
  }
}

std::vector<std::uint8_t> GroupSelection::informative(const StepScores& scores, std::span<const Problem> problems,
                                                      std::int64_t group_size) const {
  const auto groups = static_cast<std::int64_t>(problems.size());
  const torch::Tensor values = metric_values(scores, options_.metric).view({groups, group_size});
  // One pass of informative_groups per domain present (few), each keeping the groups of its domain.
  std::vector<std::uint8_t> out(problems.size(), 0);
  std::vector<std::size_t> present;
  for (const Problem& p : problems) present.push_back(p.domain);
  std::sort(present.begin(), present.end());
  present.erase(std::unique(present.begin(), present.end()), present.end());
  for (const std::size_t d : present) {
    GRPO_CHECK(d < filters_.size(), "a prompt's domain index {} is outside the prompt source's {} domains", d,
               filters_.size());
    const std::vector<std::uint8_t> passed = informative_groups(values, filters_[d]);
    for (std::size_t p = 0; p < problems.size(); ++p) {
      if (problems[p].domain == d) out[p] = passed[p];
    }
  }
  return out;
}

torch::Tensor GroupSelection::in_loss(std::span<const std::optional<float>> totals, std::int64_t group_size) const {
  if (!options_.difficulty_mask || totals.empty()) return {};
  const auto rows = static_cast<std::int64_t>(totals.size());
  const torch::Tensor values = torch::tensor(rewards::with_nan(totals)).to(torch::kFloat64);
  const torch::Tensor grouped = values.view({rows / group_size, group_size});
  const torch::Tensor valid = grouped.isfinite();
  const torch::Tensor mean = grouped.nan_to_num(0.0).sum(1) / valid.sum(1).clamp_min(1);
  return (mean > options_.difficulty_mask->first) & (mean < options_.difficulty_mask->second);
}

}  // namespace grpo::train
