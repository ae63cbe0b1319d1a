// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/step_scorer.hpp>

#include <grpo/rewards/accuracy_reward.hpp>
#include <grpo/rewards/length_rewards.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace grpo::train {

namespace {

using rewards::Completion;

/// The entry of `set` labelled `label` (RewardSet labels every entry, by default with its reward's name), or the
/// first when `label` is empty. ConfigError for a label that names no entry.
const rewards::RewardSetEntry& judge_entry(const rewards::RewardSet& set, const std::string& label) {
  const auto& entries = set.entries();
  if (label.empty()) return entries.front();
  const auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.label == label; });
  GRPO_CHECK_CONFIG(it != entries.end(), "accuracy_reward '{}' is not a reward of the domain", label);
  return *it;
}

/// Each reward's value per completion, for the completion table.
std::vector<std::vector<std::pair<std::string, std::optional<double>>>> reward_values(
    const rewards::RewardSetScores& scores, std::size_t count) {
  std::vector<std::vector<std::pair<std::string, std::optional<double>>>> out(count);
  for (std::size_t k = 0; k < count; ++k) {
    for (std::size_t r = 0; r < scores.names.size(); ++r) {
      const auto& v = scores.values[r][k];
      out[k].emplace_back(scores.names[r], v ? std::optional<double>(*v) : std::nullopt);
    }
  }
  return out;
}

/// DAPO's soft overlong punishment (ScoreShaping), added to each total and listed with the rewards.
void add_overlong_penalty(StepScores& scores, std::span<const Completion> batch, const ScoreShaping& shaping) {
  const rewards::SoftOverlongReward penalty({.max_completion_len = static_cast<std::size_t>(shaping.max_new_tokens),
                                             .soft_punish_cache = static_cast<std::size_t>(shaping.overlong_buffer)});
  const auto values = penalty.score(batch, {});
  double sum = 0.0;
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const double v = values[b].value_or(0.0f);
    sum += v;
    if (scores.total[b]) scores.total[b] = static_cast<float>(*scores.total[b] + shaping.overlong_factor * v);
    scores.rewards[b].emplace_back("soft_overlong", v);
  }
  scores.metrics.push_back({"rewards/soft_overlong/mean", batch.empty() ? 0.0 : sum / static_cast<double>(batch.size()),
                            MetricReduction::weighted_mean, static_cast<double>(batch.size())});
}

}  // namespace

void add_environment_rewards(StepScores& scores, std::span<const double> returns) {
  GRPO_CHECK(returns.size() == scores.total.size(), "add_environment_rewards: {} returns for {} completions",
             returns.size(), scores.total.size());
  double sum = 0.0;
  for (std::size_t b = 0; b < returns.size(); ++b) {
    sum += returns[b];
    if (scores.total[b]) scores.total[b] = static_cast<float>(static_cast<double>(*scores.total[b]) + returns[b]);
    scores.rewards[b].emplace_back("environment", returns[b]);
  }
  const auto count = static_cast<double>(returns.size());
  scores.metrics.push_back(
      {"rewards/environment/mean", returns.empty() ? 0.0 : sum / count, MetricReduction::weighted_mean, count});
}

double correct_threshold(const rewards::RewardFunction& reward) {
  const auto* accuracy = dynamic_cast<const rewards::AccuracyReward*>(&reward);
  const float w = accuracy ? accuracy->options().step_weight : 0.0f;
  if (w == 0.0f) return 1.0;
  GRPO_CHECK_CONFIG(w < 0.5, "accuracy with step_weight {} cannot tell a right final answer from a wrong one by its "
                    "value alone: give the domain an accuracy_threshold, or keep step_weight below 0.5", w);
  return 1.0 - static_cast<double>(w) - 1e-4;
}

StepScorer::StepScorer(rewards::RewardSet set, bool overlap) : overlap_(overlap) {
  GRPO_CHECK_CONFIG(!set.entries().empty(), "StepScorer: the reward set has no entries");
  const auto& entries = set.entries();
  const auto accuracy =
      std::find_if(entries.begin(), entries.end(), [](const auto& e) { return e.reward->name() == "accuracy"; });
  primary_ = accuracy == entries.end() ? 0 : static_cast<std::size_t>(accuracy - entries.begin());
  primary_threshold_ = static_cast<float>(correct_threshold(*entries[primary_].reward));
  single_.emplace(prepared(std::move(set), nullptr));  // wrapping keeps the entries' order
  if (!prefetched_.empty()) prefetcher_ = std::make_unique<rewards::RewardPrefetcher>(prefetched_, prefetcher_options_);
}

StepScorer::StepScorer(std::vector<ScoringDomain> domains, bool overlap) : overlap_(overlap) {
  GRPO_CHECK_CONFIG(!domains.empty(), "StepScorer: no domains");
  std::vector<rewards::DomainSpec> specs;
  for (ScoringDomain& d : domains) {
    GRPO_CHECK_CONFIG(!d.rewards.entries().empty(), "domains.{}: the reward set has no entries", d.name);
    if (d.tags.empty()) d.tags = {d.name};
    double threshold = 0.0;
    try {
      const auto& judge = judge_entry(d.rewards, d.accuracy_reward);
      threshold = d.accuracy_threshold ? *d.accuracy_threshold : correct_threshold(*judge.reward);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}{}domains.{}.rewards: {}", d.source, d.source.empty() ? "" : ": ", d.name, e.what()));
    }
    // Only this domain's completions are scored ahead (the judge and the sandbox see no other domain's).
    auto mine = [tags = d.tags](const Completion& c) {
      const auto tag = c.row ? c.row->text("tag") : std::nullopt;
      return tag && std::find(tags.begin(), tags.end(), *tag) != tags.end();
    };
    specs.push_back(rewards::DomainSpec{.name = d.name,
                                        .tags = d.tags,
                                        .rewards = prepared(std::move(d.rewards), mine),
                                        .clip = d.clip,
                                        .normalisation = d.normalisation,
                                        .clip_after_normalisation = d.clip_after_normalisation,
                                        .accuracy_reward = d.accuracy_reward,
                                        .accuracy_threshold = threshold});
  }
  domains_.emplace(std::move(specs));
  if (!prefetched_.empty()) prefetcher_ = std::make_unique<rewards::RewardPrefetcher>(prefetched_, prefetcher_options_);
}

StepScores StepScorer::reward_scores(std::span<const Completion> batch) const {
  StepScores out;
  const double completions = static_cast<double>(batch.size());
  if (single_) {
    const auto scores = single_->score(batch);
    out.total = scores.total;
    for (const auto& value : scores.values[primary_]) {
      out.correct.push_back(value && *value >= primary_threshold_);
      out.judged.push_back(value.has_value());
    }
    out.rewards = reward_values(scores, batch.size());
    for (const auto& [name, value] : scores.metrics()) {
      out.metrics.push_back({name, value, MetricReduction::weighted_mean, completions});
    }
    return out;
  }
  const auto scores = domains_->score(batch);
  out.total = scores.total;
  out.correct = scores.correct;
  out.judged = scores.judged;
  out.rewards.resize(batch.size());
  for (std::size_t d = 0; d < scores.per_domain.size(); ++d) {
    const auto& members = scores.members[d];
    auto values = reward_values(scores.per_domain[d], members.size());
    for (std::size_t k = 0; k < members.size(); ++k) out.rewards[members[k]] = std::move(values[k]);
  }
  // Per-domain means weigh by the domain's completions (groups for the zero-std fraction); counts add up.
  for (const auto& [name, value] : scores.metrics()) {
    MetricReduction reduction = MetricReduction::weighted_mean;
    double weight = completions;
    for (const auto& summary : scores.summaries) {
      const std::string prefix = "domains/" + summary.name + "/";
      if (!name.starts_with(prefix)) continue;
      const bool count = name == prefix + "completions" || name == prefix + "groups";
      reduction = count ? MetricReduction::sum : MetricReduction::weighted_mean;
      weight = count ? 1.0
               : name == prefix + "frac_reward_zero_std" ? static_cast<double>(summary.groups)
                                                         : static_cast<double>(summary.completions);
    }
    out.metrics.push_back({name, value, reduction, weight});
  }
  return out;
}

CorrectnessJudge StepScorer::judge(std::size_t domain) const {
  if (single_) {
    GRPO_CHECK(domain == 0, "StepScorer::judge: domain {} of a single reward set", domain);
    return {single_->entries()[primary_].reward, primary_threshold_};
  }
  GRPO_CHECK(domain < domains_->domains().size(), "StepScorer::judge: domain {} of {}", domain,
             domains_->domains().size());
  const auto& spec = domains_->domains()[domain];
  return {judge_entry(spec.rewards, spec.accuracy_reward).reward, spec.accuracy_threshold};
}

StepScores StepScorer::score(std::span<const Completion> batch, const ScoreShaping& shaping) const {
  StepScores out = reward_scores(batch);
  if (shaping.overlong_buffer > 0) add_overlong_penalty(out, batch, shaping);
  return out;
}

ScoringRound StepScorer::round() { return ScoringRound(*this); }

ScoringRound::ScoringRound(StepScorer& scorer) : scorer_(scorer) {
  if (scorer_.prefetcher_) scorer_.prefetcher_->clear();  // the previous round's values
}

void ScoringRound::add(std::span<const Completion> chunk) {
  if (scorer_.prefetcher_) scorer_.prefetcher_->submit(std::vector<Completion>(chunk.begin(), chunk.end()));
}

StepScores ScoringRound::scores(std::span<const Completion> batch, const ScoreShaping& shaping) {
  if (scorer_.prefetcher_) scorer_.prefetcher_->wait();
  return scorer_.score(batch, shaping);
}

std::string StepScorer::headline_reward() const {
  const auto& entries = single_ ? single_->entries() : domains_->domains().front().rewards.entries();
  return entries.front().label;  // RewardSet labels every entry (by default with its reward's name)
}

rewards::RewardSet StepScorer::prepared(rewards::RewardSet set, std::function<bool(const Completion&)> only) {
  if (!overlap_) return set;
  std::vector<std::string> labels;
  for (const auto& entry : set.entries()) {
    if (entry.reward->scope() == rewards::RewardScope::completion) labels.push_back(entry.label);
  }
  auto wrapped = rewards::wrap_for_prefetch(set, labels, {.prefetch_if = std::move(only)});
  if (prefetched_.empty()) prefetcher_options_ = wrapped.prefetcher_options;  // the first set's executor settings
  prefetched_.insert(prefetched_.end(), wrapped.prefetched.begin(), wrapped.prefetched.end());
  return std::move(wrapped.rewards);
}

}  // namespace grpo::train
