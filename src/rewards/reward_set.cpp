// SPDX-License-Identifier: Apache-2.0
// RewardSet: weighted reward lists from code or JSON configs (see reward_set.hpp).
#include <grpo/core/error.hpp>
#include <grpo/rewards/reward_set.hpp>

#include "json_config.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

namespace grpo::rewards {

std::map<std::string, double> RewardSetScores::metrics() const {
  std::map<std::string, double> flat;
  for (std::size_t k = 0; k < names.size(); ++k) {
    const RewardMetrics& m = reward_metrics[k];
    const std::string prefix = "rewards/" + names[k] + "/";
    flat[prefix + "mean"] = m.mean;
    flat[prefix + "std"] = m.std;
    flat[prefix + "frac_no_value"] = m.frac_no_value;
    flat[prefix + "frac_over_budget"] = m.frac_over_budget;
    flat[prefix + "frac_error"] = m.frac_error;
    flat[prefix + "seconds"] = m.seconds;
  }
  flat["reward"] = total_metrics.mean;
  flat["reward_std"] = total_metrics.std;
  flat["reward/frac_no_value"] = total_metrics.frac_no_value;
  flat["reward/seconds"] = total_metrics.seconds;
  return flat;
}

std::vector<float> with_nan(std::span<const std::optional<float>> values) {
  std::vector<float> out;
  out.reserve(values.size());
  for (const auto& value : values) out.push_back(value.value_or(std::numeric_limits<float>::quiet_NaN()));
  return out;
}

RewardSet::RewardSet(std::vector<RewardSetEntry> entries, RewardSetOptions options)
    : entries_(std::move(entries)), options_(options), executor_(options.executor) {
  GRPO_CHECK_CONFIG(!entries_.empty(), "RewardSet: needs at least one reward");
  std::set<std::string, std::less<>> labels;
  for (std::size_t k = 0; k < entries_.size(); ++k) {
    RewardSetEntry& entry = entries_[k];
    GRPO_CHECK_CONFIG(entry.reward != nullptr, "RewardSet: rewards[{}] is null", k);
    GRPO_CHECK_CONFIG(std::isfinite(entry.weight), "RewardSet: rewards[{}] ({}) weight must be finite, got {}", k,
                      entry.reward->name(), entry.weight);
    if (entry.label.empty()) entry.label = entry.reward->name();
    GRPO_CHECK_CONFIG(labels.insert(entry.label).second,
                      "RewardSet: two rewards are named '{}'; give one a different \"label\"", entry.label);
  }
  if (options_.truncated_coef) {
    GRPO_CHECK_CONFIG(std::isfinite(*options_.truncated_coef) && *options_.truncated_coef <= 1.0,
                      "RewardSet: truncated_coef must be in [0, 1] (scale) or < 0 (replace), got {}",
                      *options_.truncated_coef);
  }
}

namespace {

RewardSetEntry parse_entry(const std::string& json, const std::string& context, const RewardRegistry& registry) {
  const RewardOptions options = RewardOptions::from_json(json, context);
  RewardSetEntry entry;
  try {
    entry.weight = options.number("weight", 1.0);
    GRPO_CHECK_CONFIG(std::isfinite(entry.weight), "option 'weight' must be finite, got {}", entry.weight);
    entry.label = options.text("label", "");
  } catch (const ConfigError& error) {
    throw ConfigError(fmt::format("{} ({}): {}", context, options.reward_name(), error.what()));
  }
  entry.reward = registry.create(options);
  return entry;
}

RewardExecutorOptions parse_executor(const std::string& json) {
  std::map<std::string, OptionValue, std::less<>> values;
  for (auto& [key, value] : detail::parse_json_object(json, "executor")) values.emplace(key, std::move(value));
  const RewardOptions options("executor", std::move(values), "executor");
  RewardExecutorOptions executor;
  try {
    executor.num_threads = options.count("threads", executor.num_threads);
    executor.budget = std::chrono::milliseconds(options.count("budget_ms", 0));
    executor.fallback = options.choice("fallback", executor.fallback);
    executor.on_error = options.choice("on_error", executor.on_error);
    options.check_all_used();
  } catch (const ConfigError& error) {
    throw ConfigError(fmt::format("reward config: executor: {}", error.what()));
  }
  return executor;
}

}  // namespace

RewardSet RewardSet::from_config(std::string_view json, const RewardRegistry& registry) {
  std::string rewards_json;
  RewardSetOptions options;
  const char first = detail::first_json_char(json);
  if (first == '[') {
    rewards_json = std::string(json);
  } else {
    bool has_rewards = false;
    for (const auto& [key, value] : detail::parse_json_object(json, "reward config")) {
      if (key == "rewards") {
        // An empty array parses as an (empty) list of strings; RewardSet then reports that it needs a reward.
        const auto* text = std::get_if<JsonText>(&value);
        const auto* strings = std::get_if<std::vector<std::string>>(&value);
        GRPO_CHECK_CONFIG((text != nullptr && detail::first_json_char(text->text) == '[') ||
                              (strings != nullptr && strings->empty()),
                          "reward config: \"rewards\" must be an array of reward objects");
        rewards_json = text != nullptr ? text->text : "[]";
        has_rewards = true;
      } else if (key == "executor") {
        const auto* text = std::get_if<JsonText>(&value);
        GRPO_CHECK_CONFIG(text != nullptr && detail::first_json_char(text->text) == '{',
                          "reward config: \"executor\" must be an object");
        options.executor = parse_executor(text->text);
      } else if (key == "truncated_coef") {
        const auto* coef = std::get_if<double>(&value);
        GRPO_CHECK_CONFIG(coef != nullptr, "reward config: \"truncated_coef\" must be a number");
        options.truncated_coef = *coef;
      } else {
        throw ConfigError(fmt::format("reward config: unknown key '{}' (valid keys: rewards, executor, "
                                      "truncated_coef)",
                                      key));
      }
    }
    GRPO_CHECK_CONFIG(has_rewards, "reward config: missing \"rewards\": [{{\"name\": ...}}, ...]");
  }
  std::vector<RewardSetEntry> entries;
  const std::vector<std::string> objects = detail::parse_json_array_of_objects(rewards_json, "rewards");
  for (std::size_t k = 0; k < objects.size(); ++k) {
    entries.push_back(parse_entry(objects[k], fmt::format("rewards[{}]", k), registry));
  }
  return RewardSet(std::move(entries), options);
}

RewardSet RewardSet::from_config(std::string_view json) { return from_config(json, RewardRegistry::with_builtins()); }

RewardSetScores RewardSet::score(std::span<const Completion> batch) const {
  const auto started = std::chrono::steady_clock::now();
  RewardSetScores scores;
  for (const RewardSetEntry& entry : entries_) {
    RewardScores one = executor_.score(entry.reward, batch);
    scores.names.push_back(entry.label);
    scores.weights.push_back(entry.weight);
    scores.values.push_back(std::move(one.values));
    scores.reward_metrics.push_back(one.metrics);
  }
  scores.total.assign(batch.size(), std::nullopt);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    double sum = 0.0;
    bool any = false;
    for (std::size_t k = 0; k < entries_.size(); ++k) {
      if (const auto& value = scores.values[k][i]) {
        sum += entries_[k].weight * static_cast<double>(*value);
        any = true;
      }
    }
    if (any) scores.total[i] = static_cast<float>(sum);
    if (options_.truncated_coef && batch[i].truncated) {
      const double coef = *options_.truncated_coef;
      if (coef < 0.0) {
        scores.total[i] = static_cast<float>(coef);
      } else if (scores.total[i]) {
        scores.total[i] = static_cast<float>(*scores.total[i] * coef);
      }
    }
  }
  scores.total_metrics = summarize(scores.total);
  scores.total_metrics.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return scores;
}

}  // namespace grpo::rewards
