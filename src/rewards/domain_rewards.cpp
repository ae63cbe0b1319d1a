// SPDX-License-Identifier: Apache-2.0
// Per-domain reward sets (see domain_rewards.hpp).
#include <grpo/core/error.hpp>
#include <grpo/rewards/domain_rewards.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

namespace grpo::rewards {

namespace {

/// Mean and Bessel std over the finite values present (get(i) returns a std::optional of float or double) (std 0 with fewer than two), and how many there were.
struct FiniteStats {
  std::size_t count = 0;
  double mean = 0.0;
  double std = 0.0;
};

template <typename GetType>
FiniteStats finite_stats(std::size_t n, GetType get) {
  FiniteStats s;
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = get(i);
    if (v && std::isfinite(*v)) {
      sum += static_cast<double>(*v);
      ++s.count;
    }
  }
  if (s.count == 0) return s;
  s.mean = sum / static_cast<double>(s.count);
  if (s.count < 2) return s;
  double squares = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = get(i);
    if (v && std::isfinite(*v)) squares += (static_cast<double>(*v) - s.mean) * (static_cast<double>(*v) - s.mean);
  }
  s.std = std::sqrt(squares / static_cast<double>(s.count - 1));
  return s;
}

/// The configured domains and their tags, for error messages: "math (math, gsm8k), code (code)".
std::string configured_tags(const std::vector<DomainSpec>& domains) {
  std::string out;
  for (const DomainSpec& d : domains) {
    out += (out.empty() ? "" : ", ") + d.name + " (" + grpo::detail::joined_names(d.tags) + ")";
  }
  return out;
}

/// The labels of a reward set, for error messages: "accuracy, format".
std::string labels_of(const RewardSet& rewards) {
  std::vector<std::string> labels;
  for (const RewardSetEntry& entry : rewards.entries()) labels.push_back(entry.label);
  return grpo::detail::joined_names(labels);
}

/// A domain's RewardSetScores when it had no completions: labels and weights, no values, zero metrics.
RewardSetScores empty_scores(const RewardSet& rewards) {
  RewardSetScores scores;
  for (const RewardSetEntry& entry : rewards.entries()) {
    scores.names.push_back(entry.label);
    scores.weights.push_back(entry.weight);
    scores.values.emplace_back();
    scores.reward_metrics.emplace_back();
  }
  return scores;
}

}  // namespace

std::map<std::string, double> DomainScores::metrics() const {
  std::map<std::string, double> flat;
  for (std::size_t d = 0; d < summaries.size(); ++d) {
    const Summary& s = summaries[d];
    const std::string prefix = "domains/" + s.name + "/";
    flat[prefix + "reward/mean"] = s.reward_mean;
    flat[prefix + "reward/std"] = s.reward_std;
    flat[prefix + "reward/clip_frac"] = s.clip_frac;
    flat[prefix + "accuracy"] = s.accuracy;
    flat[prefix + "frac_reward_zero_std"] = s.frac_reward_zero_std;
    flat[prefix + "completion_length"] = s.mean_length;
    flat[prefix + "completions"] = static_cast<double>(s.completions);
    flat[prefix + "groups"] = static_cast<double>(s.groups);
    if (d < per_domain.size()) {
      // The per-reward entries of the domain's own metrics, under the domain's prefix.
      for (const auto& [key, value] : per_domain[d].metrics()) {
        if (key.rfind("rewards/", 0) == 0) flat[prefix + key] = value;
      }
    }
  }
  const FiniteStats overall = finite_stats(total.size(), [this](std::size_t i) { return total[i]; });
  flat["reward"] = overall.mean;
  flat["reward_std"] = overall.std;
  flat["reward/frac_no_value"] =
      total.empty() ? 0.0 : static_cast<double>(total.size() - overall.count) / static_cast<double>(total.size());
  return flat;
}

DomainRewards::DomainRewards(std::vector<DomainSpec> domains, std::string tag_field)
    : domains_(std::move(domains)), tag_field_(std::move(tag_field)) {
  GRPO_CHECK_CONFIG(!domains_.empty(), "DomainRewards: needs at least one domain");
  GRPO_CHECK_CONFIG(!tag_field_.empty(), "DomainRewards: the tag field name must not be empty");
  std::set<std::string, std::less<>> names;
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    DomainSpec& spec = domains_[d];
    GRPO_CHECK_CONFIG(!spec.name.empty(), "DomainRewards: domains[{}] has an empty name", d);
    GRPO_CHECK_CONFIG(names.insert(spec.name).second, "DomainRewards: two domains are named '{}'", spec.name);
    if (spec.tags.empty()) spec.tags = {spec.name};
    for (const std::string& tag : spec.tags) {
      const auto [it, inserted] = tag_to_domain_.emplace(tag, d);
      GRPO_CHECK_CONFIG(inserted || it->second == d, "DomainRewards: tag '{}' is claimed by domains '{}' and '{}'",
                        tag, domains_[it->second].name, spec.name);
    }
    if (spec.clip) {
      const auto [lo, hi] = *spec.clip;
      GRPO_CHECK_CONFIG(lo <= hi, "DomainRewards: domain '{}': clip [{}, {}] needs lo <= hi", spec.name, lo, hi);
    }
    GRPO_CHECK_CONFIG(std::isfinite(spec.accuracy_threshold),
                      "DomainRewards: domain '{}': accuracy_threshold must be finite, got {}", spec.name,
                      spec.accuracy_threshold);
    const auto& entries = spec.rewards.entries();
    std::size_t index = 0;
    if (!spec.accuracy_reward.empty()) {
      const auto it = std::find_if(entries.begin(), entries.end(),
                                   [&](const RewardSetEntry& e) { return e.label == spec.accuracy_reward; });
      GRPO_CHECK_CONFIG(it != entries.end(),
                        "DomainRewards: domain '{}': accuracy_reward '{}' is not a reward of its set (labels: {})",
                        spec.name, spec.accuracy_reward, labels_of(spec.rewards));
      index = static_cast<std::size_t>(it - entries.begin());
    }
    accuracy_index_.push_back(index);
  }
}

std::optional<std::size_t> DomainRewards::domain_of_tag(std::string_view tag) const {
  const auto it = tag_to_domain_.find(tag);
  if (it == tag_to_domain_.end()) return std::nullopt;
  return it->second;
}

DomainScores DomainRewards::score(std::span<const Completion> batch) const {
  const std::size_t B = batch.size(), D = domains_.size();
  DomainScores out;
  out.domain.resize(B);
  out.members.resize(D);
  std::map<std::size_t, std::size_t> domain_of_group;  // Completion::group → domain
  for (std::size_t i = 0; i < B; ++i) {
    const Completion& c = batch[i];
    std::optional<std::size_t> d = c.domain;  // decided by the caller (the prompt source's routing)
    std::string tag;
    if (d) {
      GRPO_CHECK(*d < D, "DomainRewards: completion {} (prompt {}) is in domain {}, but there are {} domains", i,
                 c.group, *d, D);
      tag = domains_[*d].name;
    } else {
      const std::optional<std::string> text = c.row ? c.row->text(tag_field_) : std::nullopt;
      GRPO_CHECK(text.has_value(),
                 "DomainRewards: completion {} (prompt {}) has {} field '{}'; configured domains and tags: {}", i,
                 c.group, c.row ? "no string or number" : "no row, so no", tag_field_, configured_tags(domains_));
      tag = *text;
      d = domain_of_tag(tag);
      GRPO_CHECK(d.has_value(), "DomainRewards: completion {} (prompt {}) has {} '{}', which no domain serves; "
                 "configured domains and tags: {}",
                 i, c.group, tag_field_, tag, configured_tags(domains_));
    }
    const auto [it, inserted] = domain_of_group.emplace(c.group, *d);
    GRPO_CHECK(inserted || it->second == *d,
               "DomainRewards: prompt {} has completions in domains '{}' and '{}' (completion {}: '{}'); the "
               "completions of one prompt share its row, so one domain",
               c.group, domains_[it->second].name, domains_[*d].name, i, tag);
    out.domain[i] = *d;
    out.members[*d].push_back(i);
  }

  out.total.assign(B, std::nullopt);
  out.correct.assign(B, 0);
  out.judged.assign(B, 0);
  out.per_domain.reserve(D);
  out.summaries.reserve(D);
  for (std::size_t d = 0; d < D; ++d) {
    const DomainSpec& spec = domains_[d];
    const std::vector<std::size_t>& members = out.members[d];
    const std::size_t n = members.size();
    DomainScores::Summary summary;
    summary.name = spec.name;
    summary.completions = n;
    if (n == 0) {
      out.per_domain.push_back(empty_scores(spec.rewards));
      out.summaries.push_back(std::move(summary));
      continue;
    }

    // One call per domain. A contiguous run (a batch sorted by domain, or one domain) is passed as a subspan.
    RewardSetScores scores;
    if (members.back() - members.front() + 1 == n) {
      scores = spec.rewards.score(batch.subspan(members.front(), n));
    } else {
      std::vector<Completion> subset;
      subset.reserve(n);
      for (const std::size_t i : members) subset.push_back(batch[i]);
      scores = spec.rewards.score(subset);
    }

    // raw → clip → normalise (or normalise → clip), in double; NaN totals become "no value".
    std::vector<std::optional<double>> values(n);
    for (std::size_t k = 0; k < n; ++k) {
      if (scores.total[k] && !std::isnan(*scores.total[k])) values[k] = static_cast<double>(*scores.total[k]);
    }
    std::size_t present = 0, clipped = 0;
    const auto apply_clip = [&] {
      if (!spec.clip) return;
      const auto [lo, hi] = *spec.clip;
      for (auto& v : values) {
        if (!v) continue;
        ++present;
        if (*v < lo || *v > hi) ++clipped;
        *v = std::clamp(*v, lo, hi);
      }
    };
    const auto apply_normalisation = [&] {
      if (spec.normalisation == DomainNormalisation::none) return;
      const FiniteStats s = finite_stats(n, [&values](std::size_t k) { return values[k]; });
      if (s.count == 0) return;
      const double scale =
          spec.normalisation == DomainNormalisation::mean_std ? 1.0 / (s.std + kDomainNormalisationEps) : 1.0;
      const double mean = s.mean;
      for (auto& v : values) {
        if (v) *v = (*v - mean) * scale;
      }
    };
    if (spec.clip_after_normalisation) {
      apply_normalisation();
      apply_clip();
    } else {
      apply_clip();
      apply_normalisation();
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (values[k]) out.total[members[k]] = static_cast<float>(*values[k]);
    }
    summary.clip_frac = present ? static_cast<double>(clipped) / static_cast<double>(present) : 0.0;

    // Summary.
    const FiniteStats raw = finite_stats(n, [&scores](std::size_t k) { return scores.total[k]; });
    summary.reward_mean = raw.mean;
    summary.reward_std = raw.std;
    const std::vector<std::optional<float>>& accuracy_values = scores.values[accuracy_index_[d]];
    std::size_t correct = 0;
    double length = 0.0;
    for (std::size_t k = 0; k < n; ++k) {
      const auto& a = accuracy_values[k];
      out.judged[members[k]] = a.has_value();
      if (a && static_cast<double>(*a) >= spec.accuracy_threshold) {
        ++correct;
        out.correct[members[k]] = 1;
      }
      const Completion& c = batch[members[k]];
      length += static_cast<double>(c.token_ids.empty() ? c.text.size() : c.token_ids.size());
    }
    summary.accuracy = static_cast<double>(correct) / static_cast<double>(n);
    summary.mean_length = length / static_cast<double>(n);

    // frac_reward_zero_std exactly as GroupAdvantage: per group, NaN-free values as double, count >= 2 and Bessel
    // std <= 1e-8; the denominator is every group of the domain.
    std::map<std::size_t, std::vector<std::optional<float>>> groups;
    for (const std::size_t i : members) groups[batch[i].group].push_back(out.total[i]);
    std::size_t zero_std = 0;
    for (const auto& [group, finals] : groups) {
      const FiniteStats s = finite_stats(finals.size(), [&finals](std::size_t k) { return finals[k]; });
      if (s.count >= 2 && s.std <= 1e-8) ++zero_std;
    }
    summary.groups = groups.size();
    summary.frac_reward_zero_std = static_cast<double>(zero_std) / static_cast<double>(groups.size());

    out.per_domain.push_back(std::move(scores));
    out.summaries.push_back(std::move(summary));
  }
  return out;
}

}  // namespace grpo::rewards
