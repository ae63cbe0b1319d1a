// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/run_config.hpp>

#include <fmt/format.h>

#include <cstdio>

namespace grpo::train {

namespace {

/// parse(node) with the node's file:line and key path in front of its ConfigError.
template <typename Parse>
auto located(const io::ConfigNode& node, Parse&& parse) {
  try {
    return parse(node);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: '{}': {}", node.source(), node.path(), e.what()));
  }
}

}  // namespace

PromptDomain DomainConfig::prompt_domain() const {
  return {.name = name, .kind = kind, .tags = tags, .files = data, .probability = probability, .source = source};
}

ScoringDomain DomainConfig::scoring_domain(rewards::RewardSet rewards) const {
  return {.name = name,
          .tags = tags,
          .rewards = std::move(rewards),
          .clip = clip,
          .normalisation = normalisation,
          .clip_after_normalisation = clip_after_normalisation,
          .accuracy_reward = accuracy_reward,
          .accuracy_threshold = accuracy_threshold,
          .source = rewards_source};
}

std::vector<DomainConfig> read_domains(const io::ConfigNode& section) {
  GRPO_CHECK_CONFIG(section.is_map() && !section.entries().empty(), "{}: '{}' should be a map of domain names to settings",
                    section.source(), section.path());
  std::vector<DomainConfig> out;
  for (const auto& [name, node] : section.entries()) {
    DomainConfig d;
    d.name = name;
    (void)section.find(name);  // marks the entry as read
    GRPO_CHECK_CONFIG(node.is_map(), "{}: '{}' should be a map", node.source(), node.path());
    const std::string default_kind = name == "code" || name == "general" ? name : "math";
    const auto* kind_node = node.find("kind");
    d.kind = kind_node ? located(*kind_node, [](const auto& n) { return io::parse_domain_kind(n.text()); })
                       : io::parse_domain_kind(default_kind);
    if (const auto* tags = node.find("tags")) d.tags = tags->texts();
    if (d.tags.empty()) d.tags = {name};
    if (const auto* data = node.find("data")) {
      for (const std::string& file : data->texts()) d.data.emplace_back(file);
    }
    if (const auto* p = node.find("probability")) {
      d.probability = p->number();
      GRPO_CHECK_CONFIG(std::isfinite(d.probability) && d.probability >= 0.0, "{}: '{}' must be a number >= 0, got {}",
                        p->source(), p->path(), p->text());
    }
    if (const auto* rewards = node.find("rewards")) {
      rewards->mark_read();
      d.rewards_json = io::to_json(*rewards);
      d.rewards_source = rewards->source();
    } else {
      GRPO_CHECK_CONFIG(d.kind != io::DomainKind::general,
                        "{}: domain '{}' (general) needs 'rewards' (e.g. [{{name: judge, base_url: ...}}])", node.source(),
                        name);
      if (d.kind == io::DomainKind::code) d.rewards_json = R"([{"name": "code_tests"}])";
      d.rewards_source = node.source();
    }
    if (const auto* clip = node.find("reward_clip")) {
      if (clip->is_list()) {
        GRPO_CHECK_CONFIG(clip->items().size() == 2, "{}: '{}' should be a number c or a pair [lo, hi]", clip->source(),
                          clip->path());
        d.clip = std::pair{clip->items()[0].number(), clip->items()[1].number()};
      } else {
        d.clip = std::pair{-clip->number(), clip->number()};
      }
      GRPO_CHECK_CONFIG(d.clip->first <= d.clip->second, "{}: '{}' should be c >= 0 or [lo, hi] with lo <= hi, got [{}, {}]",
                        clip->source(), clip->path(), d.clip->first, d.clip->second);
    }
    if (const auto* norm = node.find("reward_normalisation")) {
      d.normalisation = located(*norm, [](const auto& n) { return rewards::parse_domain_normalisation(n.text()); });
    }
    if (const auto* order = node.find("clip_after_normalisation")) d.clip_after_normalisation = order->boolean();
    if (const auto* acc = node.find("accuracy_reward")) d.accuracy_reward = acc->text();
    if (const auto* threshold = node.find("accuracy_threshold")) d.accuracy_threshold = threshold->number();
    if (const auto* filter = node.find("dynamic_sampling_filter")) {
      GRPO_CHECK_CONFIG(filter->is_map(), "{}: '{}' should be a map with min_std, mean_above, mean_below",
                        filter->source(), filter->path());
      GroupFilter& f = d.dynamic_sampling_filter.emplace();
      if (const auto* min_std = filter->find("min_std")) f.min_std = min_std->number();
      if (const auto* above = filter->find("mean_above")) f.mean_above = above->number();
      if (const auto* below = filter->find("mean_below")) f.mean_below = below->number();
      f.validate(fmt::format("{}: '{}'", filter->source(), filter->path()));
    }
    d.source = node.source();
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<ContextStage> read_context_stages(const io::ConfigNode& section) {
  GRPO_CHECK_CONFIG(section.is_list() && !section.items().empty(), "{}: '{}' should be a list of stages",
                    section.source(), section.path());
  std::vector<ContextStage> out;
  for (const io::ConfigNode& node : section.items()) {
    GRPO_CHECK_CONFIG(node.is_map(), "{}: '{}' should be a map", node.source(), node.path());
    ContextStage stage;
    stage.max_new_tokens = node.at("max_new_tokens").integer();
    if (const auto* g = node.find("group_size")) stage.group_size = g->integer();
    if (const auto* lr = node.find("lr")) stage.learning_rate = lr->number();
    if (const auto* mask = node.find("mask_truncated")) stage.mask_truncated = mask->boolean();
    if (const auto* buffer = node.find("overlong_buffer")) stage.overlong_buffer = buffer->integer();
    if (const auto* factor = node.find("overlong_factor")) stage.overlong_factor = factor->number();
    if (const auto* at = node.find("at_step")) stage.at_step = at->integer();
    if (const auto* patience = node.find("patience")) stage.patience = patience->integer();
    if (const auto* when = node.find("when")) {  // "METRIC OP THRESHOLD", e.g. "completions/clipped_ratio >= 0.1"
      char metric[256] = {}, op[3] = {};
      char tail = 0;
      double threshold = 0.0;
      GRPO_CHECK_CONFIG(std::sscanf(when->text().c_str(), "%255s %2s %lf %c", metric, op, &threshold, &tail) == 3,
                        "{}: '{}' should read METRIC OP THRESHOLD (e.g. completions/clipped_ratio >= 0.1), got '{}'",
                        when->source(), when->path(), when->text());
      stage.metric = metric;
      stage.op = op;
      stage.threshold = threshold;
    }
    out.push_back(std::move(stage));
  }
  return out;
}

}  // namespace grpo::train
