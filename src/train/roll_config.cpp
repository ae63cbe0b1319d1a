// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/roll_config.hpp>

#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/train/grpo_trainer.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <regex>
#include <set>
#include <string_view>

namespace grpo::train {

namespace {

/// Why ROLL keys have no counterpart here (by the key's last component, or its first for whole sections).
const std::map<std::string, std::string, std::less<>>& roll_reasons() {
  static const std::map<std::string, std::string, std::less<>> reasons = {
      {"prompt_length", "prompts are not dropped by length here (ROLL drops prompts longer than prompt_length)"},
      {"norm_mean_type", "the advantage estimator (--advantage) decides the baseline and scale"},
      {"norm_std_type", "the advantage estimator (--advantage) decides the baseline and scale"},
      {"difficulty_low_threshold", "without difficulty_mask no group is masked"},
      {"difficulty_high_threshold", "without difficulty_mask no group is masked"},
      {"max_len_mask", "mask truncated completions with a context stage (stages: [{mask_truncated: true}])"},
      {"error_max_len_clip", "no counterpart: mask truncated completions with a context stage"},
      {"difficulty_loss_weight", "no counterpart"},
      {"length_loss_weight", "no counterpart"},
      {"value_clip", "a critic's setting: read with adv_estimator gae"},
      {"lambd", "GAE's λ: read with adv_estimator gae"},
      {"critic_warmup", "a critic's setting: read with adv_estimator gae"},
      {"critic", "of the critic only the optimiser (critic.training_args learning_rate, weight_decay, max_grad_norm) "
                 "is read, with adv_estimator gae; the critic starts from the policy with a new head (another "
                 "checkpoint with a value head: --critic-model)"},
      {"response_filter_config", "ROLL's response filter keeps every response (a stub there)"},
      {"max_new_tokens", "evaluation uses the run's completion limit (response_length)"},
      {"init_kl_coef", "without add_token_level_kl it only turns on ROLL's reference model"},
      {"target_kl", "without add_token_level_kl ROLL's controller steers nothing"},
      {"kl_horizon", "without add_token_level_kl ROLL's controller steers nothing"},
      {"kl_penalty", "without add_token_level_kl no KL enters the reward"},
      {"kl_loss_coef", "without use_kl_loss there is no KL loss term"},
      {"reward_pretrain", "reward models are configured per domain here"},
      {"per_device_train_batch_size", "micro-batching is --micro-batches here"},
      {"gradient_accumulation_steps", "micro-batching is --micro-batches here"},
      {"num_train_epochs", "the run's length is --steps"},
      {"template", "the model's own chat template (tokenizer_config.json) renders prompts"},
      {"preprocessing_num_workers", "infrastructure: not applicable"},
      {"num_return_sequences", "the group size is num_return_sequences_in_group"},
      {"messages", "rows are read by their own `messages` (or `prompt`) field"},
      {"prompt", "rows are read by their own `messages` (or `prompt`) field"},
      {"judge_prompt", "the judge's prompt is the judge reward's prompt_template (docs/rewards.md)"},
  };
  return reasons;
}

/// Whole sections and top-level keys that describe ROLL's cluster rather than the algorithm.
bool roll_infrastructure(std::string_view path) {
  static const std::vector<std::string_view> prefixes = {
      "hydra",        "defaults",          "exp_name",        "logging_dir",       "output_dir",
      "num_gpus_per_node", "track_with",   "tracker_kwargs",  "checkpoint_config", "resume_from_checkpoint",
      "system_envs",  "async_generation_ratio", "generate_opt_level", "is_num_return_sequences_expand",
      "reference",    "critic",            "profiler",        "save_logging_board_dir", "report_to"};
  for (const std::string_view p : prefixes) {
    if (path == p || (path.starts_with(p) && path.size() > p.size() && (path[p.size()] == '.' || path[p.size()] == '['))) {
      return true;
    }
  }
  return path.find("strategy_args") != std::string_view::npos || path.find("device_mapping") != std::string_view::npos ||
         path.find("infer_batch_size") != std::string_view::npos || path.find("model_args") != std::string_view::npos ||
         path.find("worker_cls") != std::string_view::npos || path.find("num_gpus") != std::string_view::npos;
}

/// Every leaf (scalar, null, list) of `node` that nothing read, with its reason.
void list_unread(const io::ConfigNode& node, std::vector<std::string>& out) {
  if (node.is_map()) {
    for (const auto& [key, child] : node.entries()) list_unread(child, out);
    return;
  }
  if (node.was_read()) return;
  const std::string& path = node.path();
  std::string reason = "not a setting this converter maps";
  const std::string last = path.substr(path.find_last_of('.') + 1);
  const auto& reasons = roll_reasons();
  if (const auto it = reasons.find(last); it != reasons.end()) {
    reason = it->second;
  } else if (const auto top = reasons.find(path.substr(0, path.find('.'))); top != reasons.end()) {
    reason = top->second;
  } else if (roll_infrastructure(path)) {
    reason = "infrastructure (ROLL's cluster, workers and strategies): not applicable here";
  }
  out.push_back(fmt::format("{}: {}: {}", node.source(), path, reason));
}

}  // namespace

RollConversion convert_roll_config(const io::ConfigNode& root) {
  RollConversion out;
  // ${key} interpolation (Hydra/OmegaConf) of top-level scalars, as ROLL's configs use it.
  const auto text_of = [&](const io::ConfigNode& node) -> std::string {
    const std::string text = node.text();
    static const std::regex interpolation(R"(^\$\{([A-Za-z0-9_.]+)\}$)");
    std::smatch match;
    if (!std::regex_match(text, match, interpolation)) return text;
    const io::ConfigNode* target = &root;
    std::string rest = match[1];
    for (std::size_t dot; target != nullptr && target->is_map();) {
      dot = rest.find('.');
      target = target->find(rest.substr(0, dot));
      if (dot == std::string::npos) break;
      rest = rest.substr(dot + 1);
    }
    GRPO_CHECK_CONFIG(target != nullptr && target->is_scalar(), "{}: {}: '{}' names no value of the config",
                      node.source(), node.path(), text);
    return target->text();
  };
  const auto at = [&](std::string_view path) -> const io::ConfigNode* {
    const io::ConfigNode* node = &root;
    std::string_view rest = path;
    while (node != nullptr) {
      if (!node->is_map()) return nullptr;
      const auto dot = rest.find('.');
      node = node->find(rest.substr(0, dot));
      if (dot == std::string_view::npos) break;
      rest.remove_prefix(dot + 1);
    }
    return node != nullptr && !node->is_null() ? node : nullptr;
  };
  const auto set = [&](std::string key, std::vector<std::string> values, const io::ConfigNode& from) {
    out.settings.push_back({std::move(key), std::move(values), fmt::format("{} ({})", from.source(), from.path())});
  };
  const auto copy = [&](std::string_view roll, std::string key) {
    if (const auto* node = at(roll)) set(std::move(key), {text_of(*node)}, *node);
  };
  const auto flag = [&](std::string_view roll) {
    const auto* node = at(roll);
    return node != nullptr && node->boolean();
  };

  copy("seed", "seed");
  copy("max_steps", "steps");
  copy("save_steps", "save_every");
  copy("eval_steps", "eval_every");
  copy("logging_steps", "log_every");
  copy("rollout_batch_size", "prompts");
  copy("num_return_sequences_in_group", "group_size");
  copy("ppo_epochs", "mu");
  copy("entropy_loss_coef", "entropy_coef");
  copy("pretrain", "model");
  copy("actor_train.training_args.learning_rate", "lr");
  copy("actor_train.training_args.weight_decay", "weight_decay");
  copy("actor_train.training_args.warmup_steps", "warmup_steps");
  copy("actor_train.training_args.max_grad_norm", "max_grad_norm");
  copy("actor_infer.generating_args.temperature", "temperature");
  copy("actor_infer.generating_args.top_p", "top_p");
  copy("actor_infer.generating_args.top_k", "top_k");
  copy("validation.generating_args.temperature", "eval_temperature");
  copy("validation.generating_args.top_p", "eval_top_p");
  copy("validation.generating_args.top_k", "eval_top_k");
  if (const auto* node = at("validation.data_args.file_name")) set("validation_data", node->texts(), *node);
  if (const auto* node = at("actor_train.training_args.lr_scheduler_type")) {
    const std::string type = text_of(*node);
    if (type == "cosine" || type == "linear" || type == "constant") set("lr_decay", {type}, *node);
    else if (type == "constant_with_warmup") set("lr_decay", {"constant"}, *node);
    else out.unmapped.push_back(fmt::format("{}: {}: '{}' has no counterpart (constant, linear, cosine)",
                                            node->source(), node->path(), type));
  }

  // The completion limit: response_length, else actor_infer's max_new_tokens, else sequence_length − prompt_length.
  const auto* response = at("response_length");
  const auto* generated = at("actor_infer.generating_args.max_new_tokens");
  const auto* sequence = at("sequence_length");
  if (response != nullptr) {
    set("max_new_tokens", {text_of(*response)}, *response);
  } else if (generated != nullptr) {
    set("max_new_tokens", {text_of(*generated)}, *generated);
  } else if (sequence != nullptr) {
    const auto* prompt = at("prompt_length");
    const std::int64_t limit = std::stoll(text_of(*sequence)) - (prompt ? std::stoll(text_of(*prompt)) : 1024);
    set("max_new_tokens", {std::to_string(limit)}, *sequence);
  }
  if (generated != nullptr) generated->mark_read();  // ${response_length} in ROLL's examples: the same value

  // The clip: pg_clip both ways, or pg_clip_low/high with use_pg_clip_range (ROLL actor_worker.py).
  const auto* pg_clip = at("pg_clip");
  const double clip = pg_clip ? std::stod(text_of(*pg_clip)) : 0.2;
  if (flag("use_pg_clip_range")) {
    copy("pg_clip_low", "epsilon");
    copy("pg_clip_high", "epsilon_high");
  } else if (pg_clip != nullptr) {
    set("epsilon", {text_of(*pg_clip)}, *pg_clip);
    set("epsilon_high", {text_of(*pg_clip)}, *pg_clip);
  }
  if (flag("dual_clip_loss")) set("dual_clip", {fmt::format("{}", 1.0 + 2.0 * clip)}, *at("dual_clip_loss"));
  copy("advantage_clip", "advantage_clip");
  if (const auto* node = at("adv_estimator"); node == nullptr || (text_of(*node) != "reinforce" && text_of(*node) != "gae")) {
    copy("whiten_advantages", "whiten_advantages");  // reinforce and gae: below
  }
  if (flag("difficulty_mask")) {  // ROLL's defaults 0.0 and 1.0 (base_config.py)
    const auto* low = at("difficulty_low_threshold");
    const auto* high = at("difficulty_high_threshold");
    set("difficulty_mask", {low ? text_of(*low) : "0.0", high ? text_of(*high) : "1.0"}, *at("difficulty_mask"));
  }
  copy("reward_clip", "reward_clip");

  if (const auto* node = at("adv_estimator")) {
    const std::string estimator = text_of(*node);
    if (estimator == "reinforce") {
      // ROLL's reinforce: the return of the token rewards (γ = ROLL's gamma), whitened when whiten_advantages.
      if (flag("whiten_advantages")) {
        set("advantage", {"reinforce_pp"}, *node);
        copy("gamma", "gamma");
      } else {
        out.unmapped.push_back(fmt::format("{}: {}: reinforce without whiten_advantages (raw returns) has no "
                                           "counterpart; reinforce_pp whitens them",
                                           node->source(), node->path()));
      }
    } else if (estimator == "gae") {
      // PPO with a critic started from the policy (ROLL's critic loads the pretrain weights with a new head), at
      // ROLL's defaults where the config leaves them out: λ 0.95, γ 1, no value clipping (value_clip: ~).
      set("advantage", {"gae"}, *node);
      const auto* lambda = at("lambd");
      set("gae_lambda", {lambda ? text_of(*lambda) : "0.95"}, lambda ? *lambda : *node);
      copy("gamma", "gamma");
      const auto* value_clip = at("value_clip");
      set("value_clip", {value_clip ? text_of(*value_clip) : "0"}, value_clip ? *value_clip : *node);
      copy("critic_warmup", "critic_warmup");
      // GAE's advantages are whitened here as verl always whitens them; ROLL whitens them with whiten_advantages.
      if (const auto* whiten = at("whiten_advantages"); whiten != nullptr && !whiten->boolean()) {
        out.unmapped.push_back(fmt::format("{}: {}: false: GAE's advantages are whitened here (verl's rule), where "
                                           "ROLL would leave them raw",
                                           whiten->source(), whiten->path()));
      }
      copy("critic.training_args.learning_rate", "critic_lr");
      copy("critic.training_args.weight_decay", "critic_weight_decay");
      copy("critic.training_args.max_grad_norm", "critic_max_grad_norm");
    } else {
      try {
        grpo::train::GrpoTrainerOptions probe;
        grpo::train::select_advantage(probe, estimator);
        set("advantage", {estimator}, *node);
      } catch (const grpo::ConfigError&) {
        out.unmapped.push_back(fmt::format("{}: {}: '{}' is not an estimator here", node->source(), node->path(),
                                           estimator));
      }
    }
  }
  if (const auto* node = at("loss_agg_mode")) {
    static const std::map<std::string, std::string, std::less<>> losses = {
        {"token-mean", "dapo"}, {"seq-mean-token-mean", "grpo"}, {"seq-mean-token-sum-norm", "dr_grpo"}};
    const std::string mode = text_of(*node);
    if (const auto it = losses.find(mode); it != losses.end()) set("loss", {it->second}, *node);
    else out.unmapped.push_back(fmt::format("{}: {}: '{}' has no recipe here", node->source(), node->path(), mode));
  }

  // KL: in the reward (add_token_level_kl) with ROLL's controller, or as a loss term (use_kl_loss).
  if (flag("add_token_level_kl")) {
    const auto* coef = at("init_kl_coef");
    set("kl_in_reward_coef", {coef ? text_of(*coef) : "0.2"}, coef ? *coef : *at("add_token_level_kl"));
    if (const auto* target = at("target_kl")) {
      set("kl_in_reward_control", {"adaptive"}, *target);
      set("kl_in_reward_target", {text_of(*target)}, *target);
      copy("kl_horizon", "kl_in_reward_horizon");
    }
    copy("kl_penalty", "kl_in_reward_estimator");
  }
  if (flag("use_kl_loss")) copy("kl_loss_coef", "beta");
  else if (at("use_kl_loss") != nullptr) set("beta", {"0"}, *at("use_kl_loss"));

  // ROLL's per-domain query filters: nullopt for no_filter (or none).
  const auto query_filter = [&](const io::ConfigNode& spec) -> std::optional<RollQueryFilter> {
    const io::ConfigNode* config = spec.find("query_filter_config");
    if (config == nullptr || config->is_null()) return std::nullopt;
    const io::ConfigNode* type = config->find("type");
    const std::string kind = type ? text_of(*type) : "no_filter";  // RewardFilterConfig's default
    const io::ConfigNode* args = config->find("filter_args");
    const auto arg = [&](const char* key) { return args != nullptr && args->is_map() ? args->find(key) : nullptr; };
    RollQueryFilter filter;
    if (kind == "no_filter") {
      if (args != nullptr) args->mark_read();
      return std::nullopt;
    }
    if (kind == "std_filter") {
      if (const auto* threshold = arg("std_threshold")) filter.min_std = text_of(*threshold);
    } else if (kind == "mean_filter") {
      const auto* down = arg("threshold_down");
      filter.mean_above = down ? text_of(*down) : "-1";
      if (const auto* up = arg("threshold_up")) filter.mean_below = text_of(*up);
    } else {
      throw grpo::ConfigError(fmt::format("{}: {}: '{}' is not a ROLL query filter (no_filter, mean_filter, "
                                          "std_filter)",
                                          type->source(), type->path(), kind));
    }
    return filter;
  };

  // Data and domains.
  std::vector<std::string> files;
  if (const auto* node = at("actor_train.data_args.file_name")) {
    for (const std::string& file : node->texts()) files.push_back(file);
  }
  const auto* probs = at("actor_train.data_args.domain_interleave_probs");
  const auto* rewards = at("rewards");
  if (probs != nullptr && probs->is_map() && probs->entries().size() > 1) {
    std::string yaml = "domains:\n";
    bool files_placed = false;
    std::map<std::string, std::optional<RollQueryFilter>> filters;
    const io::ConfigNode* filtered = nullptr;  // a query_filter_config that drops groups
    for (const auto& [name, probability] : probs->entries()) {
      const io::ConfigNode* spec = rewards ? rewards->find(name) : nullptr;
      if (spec == nullptr) continue;
      filters[name] = query_filter(*spec);
      if (filters[name] && filtered == nullptr) filtered = spec->find("query_filter_config");
    }
    if (filtered != nullptr) {  // ROLL filters each domain's groups as they come: per-domain dynamic sampling
      set("dynamic_sampling_per_domain", {"true"}, *filtered);
      set("dynamic_sampling_max_rounds", {std::to_string(kRollFilterRounds)}, *filtered);
    }
    for (const auto& [name, probability] : probs->entries()) {
      const io::ConfigNode* spec = rewards ? rewards->find(name) : nullptr;
      const io::ConfigNode* worker = spec ? spec->find("worker_cls") : nullptr;
      const std::string cls = worker ? worker->text() : "";
      std::string kind, entries;
      if (cls.find("Math") != std::string::npos) {
        kind = "math";
      } else if (cls.find("CodeSandbox") != std::string::npos) {
        kind = "code";
        entries = "[{name: code_tests}]";
      } else if (cls.find("LLMJudge") != std::string::npos) {
        kind = "general";
        const io::ConfigNode* model = spec->find("model_args");
        const io::ConfigNode* path = model ? model->find("model_name_or_path") : nullptr;
        entries = fmt::format("[{{name: judge, backend: http, model: {}}}]",
                              grpo::json_quoted(path ? path->text() : "judge"));
      } else {
        out.unmapped.push_back(fmt::format("{}: {}: domain '{}' ({}) has no built-in reward here; its rows are "
                                           "skipped (unknown_tag: skip)",
                                           probability.source(), probability.path(), name,
                                           cls.empty() ? "no worker_cls" : cls));
        out.unknown_tag = "skip";
        continue;
      }
      std::vector<std::string> tags;
      if (const io::ConfigNode* included = spec->find("tag_included")) tags = included->texts();
      if (tags.empty()) tags = {name};
      std::vector<std::string> quoted_tags, quoted_files;
      for (const auto& t : tags) quoted_tags.push_back(grpo::json_quoted(t));
      for (const auto& f : files) quoted_files.push_back(grpo::json_quoted(f));
      yaml += fmt::format("  {}:\n    kind: {}\n    probability: {}\n    tags: [{}]\n", name, kind,
                          text_of(probability), fmt::join(quoted_tags, ", "));
      if (!files_placed && !files.empty()) {  // every file once: rows go to their tag's domain
        yaml += fmt::format("    data: [{}]\n", fmt::join(quoted_files, ", "));
        files_placed = true;
      }
      if (!entries.empty()) yaml += fmt::format("    rewards: {}\n", entries);
      if (filtered != nullptr) {  // a domain without a filter keeps every group, as ROLL's no_filter
        const RollQueryFilter filter = filters[name].value_or(RollQueryFilter{});
        yaml += fmt::format("    dynamic_sampling_filter: {{min_std: {}", filter.min_std);
        if (filter.mean_above) yaml += fmt::format(", mean_above: {}", *filter.mean_above);
        if (filter.mean_below) yaml += fmt::format(", mean_below: {}", *filter.mean_below);
        yaml += "}\n";
      }
    }
    out.domains_yaml = yaml;
  } else if (!files.empty()) {
    set("data", {files.front()}, *at("actor_train.data_args.file_name"));
    for (std::size_t i = 1; i < files.size(); ++i) {
      out.unmapped.push_back(fmt::format("{}: actor_train.data_args.file_name[{}]: one data set takes one file here "
                                         "(give domains to use several)",
                                         at("actor_train.data_args.file_name")->source(), i));
    }
    if (probs != nullptr) probs->mark_read();
    // One domain: its query filter is the run's.
    const io::ConfigNode* only = nullptr;
    if (probs != nullptr && probs->is_map() && probs->entries().size() == 1 && rewards != nullptr) {
      only = rewards->find(probs->entries().front().first);
    } else if (probs == nullptr && rewards != nullptr && rewards->is_map() && rewards->entries().size() == 1) {
      only = rewards->find(rewards->entries().front().first);
    }
    if (only != nullptr) {
      if (const auto filter = query_filter(*only)) {
        const io::ConfigNode& config = *only->find("query_filter_config");
        set("dynamic_sampling_min_std", {filter->min_std}, config);
        if (filter->mean_above) set("dynamic_sampling_mean_above", {*filter->mean_above}, config);
        if (filter->mean_below) set("dynamic_sampling_mean_below", {*filter->mean_below}, config);
        set("dynamic_sampling_max_rounds", {std::to_string(kRollFilterRounds)}, config);
      }
    }
  }
  if (rewards != nullptr && rewards->is_map()) {  // worker sections of domains the mix does not draw
    for (const auto& [name, spec] : rewards->entries()) {
      if (probs != nullptr && probs->is_map() && probs->contains(name)) continue;
      spec.mark_read();
      out.unmapped.push_back(fmt::format("{}: rewards.{}: not in domain_interleave_probs (ROLL trains no rows of it "
                                         "either)",
                                         spec.source(), name));
    }
  }
  list_unread(root, out.unmapped);
  return out;
}

}  // namespace grpo::train
