// SPDX-License-Identifier: Apache-2.0
// Reward options, the registry, and the factories of the built-in rewards (see registry.hpp, docs/rewards.md).
#include <grpo/core/error.hpp>
#include <grpo/rewards/accuracy_reward.hpp>
#include <grpo/rewards/code_tests_reward.hpp>
#include <grpo/rewards/format_rewards.hpp>
#include <grpo/rewards/judge_reward.hpp>
#include <grpo/rewards/length_rewards.hpp>
#include <grpo/rewards/math_steps.hpp>
#include <grpo/rewards/registry.hpp>
#include <grpo/rewards/repetition_reward.hpp>
#include <grpo/rewards/reward_model_reward.hpp>
#include <grpo/rewards/tag_router.hpp>

#include "json_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <utility>

namespace grpo::rewards {
namespace {

std::string describe(const OptionValue& value) {
  struct Describe {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(double d) const { return fmt::format("{}", d); }
    std::string operator()(const std::string& s) const { return fmt::format("\"{}\"", s); }
    std::string operator()(const std::vector<std::string>& list) const {
      return fmt::format("[\"{}\"]", fmt::join(list, "\", \""));
    }
    std::string operator()(const JsonText& json) const { return json.text.substr(0, 80); }
  };
  return std::visit(Describe{}, value);
}

template <typename ValueType>
const ValueType& expect(const OptionValue& value, std::string_view key, std::string_view type_name) {
  const auto* typed = std::get_if<ValueType>(&value);
  GRPO_CHECK_CONFIG(typed != nullptr, "option '{}' must be {}, got {}", key, type_name, describe(value));
  return *typed;
}

}  // namespace

RewardOptions::RewardOptions(std::string reward_name, std::map<std::string, OptionValue, std::less<>> values,
                             std::string context)
    : reward_name_(std::move(reward_name)), values_(std::move(values)), context_(std::move(context)) {}

RewardOptions RewardOptions::from_json(std::string_view json_object, std::string context) {
  std::map<std::string, OptionValue, std::less<>> values;
  for (auto& [key, value] : detail::parse_json_object(json_object, context)) values.emplace(key, std::move(value));
  auto name = values.find("name");
  GRPO_CHECK_CONFIG(name != values.end(), "{}: missing the reward's \"name\"", context);
  const auto* name_text = std::get_if<std::string>(&name->second);
  GRPO_CHECK_CONFIG(name_text != nullptr, "{}: \"name\" must be a string, got {}", context, describe(name->second));
  std::string reward_name = *name_text;
  values.erase(name);
  return RewardOptions(std::move(reward_name), std::move(values), std::move(context));
}

const OptionValue* RewardOptions::lookup(std::string_view key) const {
  used_[std::string(key)] = true;
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

void RewardOptions::mark_used(std::string_view key) const { used_[std::string(key)] = true; }

double RewardOptions::number(std::string_view key, double fallback) const {
  return optional_number(key).value_or(fallback);
}

std::optional<double> RewardOptions::optional_number(std::string_view key) const {
  const OptionValue* value = lookup(key);
  if (value == nullptr) return std::nullopt;
  return expect<double>(*value, key, "a number");
}

std::size_t RewardOptions::count(std::string_view key, std::size_t fallback) const {
  const OptionValue* value = lookup(key);
  if (value == nullptr) return fallback;
  const double number = expect<double>(*value, key, "a non-negative integer");
  GRPO_CHECK_CONFIG(number >= 0.0 && number <= 9007199254740992.0 && std::floor(number) == number,
                    "option '{}' must be a non-negative integer, got {}", key, number);
  return static_cast<std::size_t>(number);
}

bool RewardOptions::flag(std::string_view key, bool fallback) const {
  const OptionValue* value = lookup(key);
  return value == nullptr ? fallback : expect<bool>(*value, key, "true or false");
}

std::string RewardOptions::text(std::string_view key, std::string fallback) const {
  const OptionValue* value = lookup(key);
  return value == nullptr ? fallback : expect<std::string>(*value, key, "a string");
}

std::string RewardOptions::choice(std::string_view key, std::string fallback,
                                  std::initializer_list<std::string_view> allowed) const {
  std::string chosen = text(key, std::move(fallback));
  for (std::string_view name : allowed) {
    if (name == chosen) return chosen;
  }
  throw_not_one_of(key, chosen, ::grpo::detail::joined_names(allowed));
}

void RewardOptions::throw_not_one_of(std::string_view key, std::string_view got, const std::string& valid) {
  throw ConfigError(fmt::format("option '{}' must be one of {}, got \"{}\"", key, valid, got));
}

std::vector<std::string> RewardOptions::text_list(std::string_view key, std::vector<std::string> fallback) const {
  const OptionValue* value = lookup(key);
  if (value == nullptr) return fallback;
  if (const auto* single = std::get_if<std::string>(value)) return {*single};
  return expect<std::vector<std::string>>(*value, key, "a string or a list of strings");
}

std::optional<std::string> RewardOptions::object(std::string_view key) const {
  const OptionValue* value = lookup(key);
  if (value == nullptr) return std::nullopt;
  const std::string& json = expect<JsonText>(*value, key, "a JSON object").text;
  GRPO_CHECK_CONFIG(detail::first_json_char(json) == '{', "option '{}' must be a JSON object, got {}", key,
                    json.substr(0, 80));
  return json;
}

void RewardOptions::check_all_used() const {
  for (const auto& [key, value] : values_) {
    if (used_.count(key) != 0) continue;
    std::vector<std::string_view> known;
    for (const auto& [name, read] : used_) known.push_back(name);
    if (known.empty()) throw ConfigError(fmt::format("unknown option '{}' (this reward takes no options)", key));
    throw ConfigError(fmt::format("unknown option '{}' (valid options: {})", key, fmt::join(known, ", ")));
  }
}

void RewardRegistry::add(std::string name, RewardFactory factory) {
  GRPO_CHECK_CONFIG(!name.empty(), "RewardRegistry::add: the reward name must not be empty");
  GRPO_CHECK_CONFIG(factory != nullptr, "RewardRegistry::add: the factory for '{}' is null", name);
  GRPO_CHECK_CONFIG(!contains(name), "RewardRegistry::add: a reward named '{}' is already registered", name);
  factories_.emplace(std::move(name), std::move(factory));
}

std::vector<std::string> RewardRegistry::names() const {
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories_) names.push_back(name);
  return names;
}

RewardPtr RewardRegistry::create(const RewardOptions& options) const {
  auto it = factories_.find(options.reward_name());
  GRPO_CHECK_CONFIG(it != factories_.end(), "{}: unknown reward '{}'; valid names: {}", options.context(),
                    options.reward_name(), fmt::join(names(), ", "));
  try {
    RewardPtr reward = it->second(options, *this);
    GRPO_CHECK_CONFIG(reward != nullptr, "the factory returned null");
    options.check_all_used();
    return reward;
  } catch (const ConfigError& error) {
    throw ConfigError(fmt::format("{} ({}): {}", options.context(), options.reward_name(), error.what()));
  }
}

RewardPtr RewardRegistry::create(std::string_view json_object) const {
  return create(RewardOptions::from_json(json_object));
}

namespace {

std::optional<float> optional_float(const RewardOptions& options, std::string_view key) {
  const auto value = options.optional_number(key);
  return value ? std::optional<float>(static_cast<float>(*value)) : std::nullopt;
}

AccuracyOptions accuracy_options(const RewardOptions& options) {
  AccuracyOptions accuracy;
  accuracy.gold_fields = options.text_list("gold_fields", accuracy.gold_fields);
  accuracy.answer_tags = options.flag("answer_tags", accuracy.answer_tags);
  return accuracy;
}

RewardPtr make_accuracy(const RewardOptions& options, const RewardRegistry&) {
  AccuracyOptions accuracy = accuracy_options(options);
  accuracy.no_gold_value = optional_float(options, "no_gold_value");
  accuracy.step_weight = static_cast<float>(options.number("step_weight", accuracy.step_weight));
  accuracy.steps_field = options.text("steps_field", accuracy.steps_field);
  return std::make_shared<AccuracyReward>(std::move(accuracy));
}

RewardPtr make_math_steps(const RewardOptions& options, const RewardRegistry&) {
  MathStepsOptions steps;
  steps.steps_field = options.text("steps_field", steps.steps_field);
  steps.credit.max_candidates = options.count("max_candidates", steps.credit.max_candidates);
  steps.credit.numbers = options.flag("numbers", steps.credit.numbers);
  return std::make_shared<MathStepsReward>(std::move(steps));
}

RewardPtr make_format(const RewardOptions& options, const RewardRegistry&) {
  FormatOptions format;
  format.style = options.choice("style", format.style);
  return std::make_shared<FormatReward>(format);
}

RewardPtr make_tag_count(const RewardOptions&, const RewardRegistry&) { return std::make_shared<TagCountReward>(); }

RewardPtr make_reasoning_steps(const RewardOptions& options, const RewardRegistry&) {
  ReasoningStepsOptions steps;
  steps.line_anchor = options.choice("line_anchor", steps.line_anchor);
  steps.target_steps = options.number("target_steps", steps.target_steps);
  return std::make_shared<ReasoningStepsReward>(steps);
}

RewardPtr make_cosine(const RewardOptions& options, const RewardRegistry&) {
  CosineOptions cosine;
  cosine.max_len = options.number("max_len", cosine.max_len);
  cosine.min_value_wrong = options.number("min_value_wrong", cosine.min_value_wrong);
  cosine.max_value_wrong = options.number("max_value_wrong", cosine.max_value_wrong);
  cosine.min_value_correct = options.number("min_value_correct", cosine.min_value_correct);
  cosine.max_value_correct = options.number("max_value_correct", cosine.max_value_correct);
  cosine.unit = options.choice("unit", cosine.unit);
  cosine.clamp_progress = options.flag("clamp_progress", cosine.clamp_progress);
  cosine.unjudgeable_value = optional_float(options, "unjudgeable_value");
  cosine.accuracy = accuracy_options(options);
  return std::make_shared<CosineReward>(std::move(cosine));
}

RewardPtr make_length(const RewardOptions& options, const RewardRegistry&) {
  LengthOptions length;
  length.unit = options.choice("unit", length.unit);
  length.unjudgeable_as_correct = options.flag("unjudgeable_as_correct", length.unjudgeable_as_correct);
  length.accuracy = accuracy_options(options);
  return std::make_shared<LengthReward>(std::move(length));
}

RewardPtr make_repetition(const RewardOptions& options, const RewardRegistry&) {
  RepetitionOptions repetition;
  repetition.ngram_size = options.count("ngram_size", repetition.ngram_size);
  repetition.max_penalty = options.number("max_penalty", repetition.max_penalty);
  repetition.unit = options.choice("unit", repetition.unit);
  return std::make_shared<RepetitionReward>(repetition);
}

RewardPtr make_soft_overlong(const RewardOptions& options, const RewardRegistry&) {
  SoftOverlongOptions overlong;
  overlong.max_completion_len = options.count("max_completion_len", overlong.max_completion_len);
  overlong.soft_punish_cache = options.count("soft_punish_cache", overlong.soft_punish_cache);
  overlong.unit = options.choice("unit", overlong.unit);
  return std::make_shared<SoftOverlongReward>(overlong);
}

RewardPtr make_stop_properly(const RewardOptions& options, const RewardRegistry&) {
  StopProperlyOptions stop;
  stop.penalty = options.number("penalty", stop.penalty);
  return std::make_shared<StopProperlyReward>(stop);
}

RewardPtr make_route(const RewardOptions& options, const RewardRegistry& registry) {
  TagRouterOptions router;
  router.tag_field = options.text("field", router.tag_field);
  if (const auto fallback = options.object("default")) {
    router.fallback = registry.create(RewardOptions::from_json(*fallback, "default"));
  }
  const auto routes_json = options.object("routes");
  GRPO_CHECK_CONFIG(routes_json.has_value(), "option 'routes' is required: {{\"<tag>\": {{\"name\": ...}}, ...}}");
  std::map<std::string, RewardPtr, std::less<>> routes;
  for (const auto& [tag, value] : detail::parse_json_object(*routes_json, "routes")) {
    const std::string context = fmt::format("routes.{}", tag);
    const auto* json = std::get_if<JsonText>(&value);
    GRPO_CHECK_CONFIG(json != nullptr && detail::first_json_char(json->text) == '{',
                      "{} must be a reward object {{\"name\": ...}}, got {}", context, describe(value));
    routes.emplace(tag, registry.create(RewardOptions::from_json(json->text, context)));
  }
  return std::make_shared<TagRouter>("route", std::move(routes), std::move(router));
}

std::chrono::milliseconds milliseconds(const RewardOptions& options, std::string_view key,
                                       std::chrono::milliseconds fallback) {
  return std::chrono::milliseconds(options.count(key, static_cast<std::size_t>(fallback.count())));
}

RewardPtr make_code_tests(const RewardOptions& options, const RewardRegistry&) {
  CodeTestsOptions code;
  code.languages = options.text_list("languages", code.languages);
  code.python = options.text("python", code.python);
  code.prelude = options.text("prelude", code.prelude);
  code.cxx = options.text("cxx", code.cxx);
  code.cxx_flags = options.text_list("cxx_flags", code.cxx_flags);
  code.compile_time = milliseconds(options, "compile_time_ms", code.compile_time);
  code.scoring = options.choice("scoring", code.scoring);
  code.comparison = options.choice("comparison", code.comparison);
  code.float_tolerance = options.number("float_tolerance", code.float_tolerance);
  code.early_exit = options.flag("early_exit", code.early_exit);
  code.max_tests = options.count("max_tests", code.max_tests);
  code.test_time = milliseconds(options, "test_time_ms", code.test_time);
  code.total_time = milliseconds(options, "total_time_ms", code.total_time);
  code.fields.tests = options.text("tests_field", code.fields.tests);
  code.fields.case_type = options.text("case_type_field", code.fields.case_type);
  code.fields.function = options.text("function_field", code.fields.function);
  code.no_tests_value = optional_float(options, "no_tests_value");
  sandbox::SandboxLimits& limits = code.sandbox.limits;
  limits.memory_bytes = options.count("memory_mb", limits.memory_bytes >> 20) << 20;
  limits.max_output_bytes = options.count("max_output_bytes", limits.max_output_bytes);
  limits.max_processes = options.count("max_processes", limits.max_processes);
  code.sandbox.allow_subprocesses = options.flag("allow_subprocesses", code.sandbox.allow_subprocesses);
  code.sandbox.bwrap_path = options.text("bwrap", code.sandbox.bwrap_path);
  return std::make_shared<CodeTestsReward>(std::move(code));
}

RewardPtr make_judge(const RewardOptions& options, const RewardRegistry&) {
  JudgeOptions judge;
  judge.system_prompt = options.text("system_prompt", judge.system_prompt);
  judge.prompt_template = options.text("prompt_template", judge.prompt_template);
  judge.messages_field = options.text("messages_field", judge.messages_field);
  judge.question_fields = options.text_list("question_fields", judge.question_fields);
  judge.reference_fields = options.text_list("reference_fields", judge.reference_fields);
  judge.criteria_field = options.text("criteria_field", judge.criteria_field);
  judge.default_criteria = options.text("default_criteria", judge.default_criteria);
  judge.strip_thinking = options.flag("strip_thinking", judge.strip_thinking);
  judge.max_response_bytes = options.count("max_response_bytes", judge.max_response_bytes);
  JudgeBackendPtr backend;
  if (options.choice("backend", "http", {"http", "local"}) == "http") {
    HttpJudgeOptions http;
    http.base_url = options.text("base_url", http.base_url);
    http.base_url_env = options.text("base_url_env", http.base_url_env);
    http.api_key_env = options.text("api_key_env", http.api_key_env);
    http.model = options.text("model", http.model);
    http.temperature = options.number("temperature", http.temperature);
    http.max_tokens = static_cast<std::int64_t>(options.count("max_tokens", static_cast<std::size_t>(http.max_tokens)));
    http.timeout = milliseconds(options, "timeout_ms", http.timeout);
    http.connect_timeout = milliseconds(options, "connect_timeout_ms", http.connect_timeout);
    http.max_retries = options.count("max_retries", http.max_retries);
    http.initial_backoff = milliseconds(options, "initial_backoff_ms", http.initial_backoff);
    http.backoff_multiplier = options.number("backoff_multiplier", http.backoff_multiplier);
    http.max_backoff = milliseconds(options, "max_backoff_ms", http.max_backoff);
    http.max_concurrency = options.count("max_concurrency", http.max_concurrency);
    backend = std::make_shared<HttpJudgeBackend>(std::move(http));
  } else {
    LocalJudgeOptions local;
    const std::string directory = options.text("model_dir", "");
    GRPO_CHECK_CONFIG(!directory.empty(), "option 'model_dir' is required with \"backend\": \"local\"");
    local.max_new_tokens =
        static_cast<std::int64_t>(options.count("max_new_tokens", static_cast<std::size_t>(local.max_new_tokens)));
    local.batch_size = options.count("batch_size", local.batch_size);
    local.use_chat_template = options.flag("use_chat_template", local.use_chat_template);
    backend = local_judge_from_pretrained(directory, local);
  }
  return std::make_shared<JudgeReward>(std::move(judge), std::move(backend));
}

RewardPtr make_reward_model(const RewardOptions& options, const RewardRegistry&) {
  const std::string directory = options.text("model_dir", "");
  GRPO_CHECK_CONFIG(!directory.empty(), "option 'model_dir' is required: a reward model's checkpoint directory (a "
                    "scalar head and its tokenizer: `grpo train-rm` writes one)");
  RewardModelOptions rm;
  rm.batch_size = static_cast<std::int64_t>(options.count("batch_size", static_cast<std::size_t>(rm.batch_size)));
  rm.max_length = static_cast<std::int64_t>(options.count("max_length", static_cast<std::size_t>(rm.max_length)));
  rm.completion_suffix = options.text("completion_suffix", rm.completion_suffix);
  rm.step_separator = options.text("step_separator", rm.step_separator);
  rm.step_aggregation = options.choice("step_aggregation", rm.step_aggregation);
  rm.shift = options.number("shift", rm.shift);
  rm.scale = options.number("scale", rm.scale);
  rm.sigmoid = options.flag("sigmoid", rm.sigmoid);
  RewardModelPlacement placement;
  placement.dtype = options.choice("dtype", placement.dtype, {"float32", "bfloat16", "float16"});
  placement.device = options.text("device", placement.device);
  return reward_model_from_pretrained(directory, std::move(rm), placement);
}

}  // namespace

RewardRegistry RewardRegistry::with_builtins() {
  RewardRegistry registry;
  registry.add("accuracy", make_accuracy);
  registry.add("format", make_format);
  registry.add("tag_count", make_tag_count);
  registry.add("reasoning_steps", make_reasoning_steps);
  registry.add("cosine", make_cosine);
  registry.add("length", make_length);
  registry.add("math_steps", make_math_steps);
  registry.add("repetition", make_repetition);
  registry.add("soft_overlong", make_soft_overlong);
  registry.add("stop_properly", make_stop_properly);
  registry.add("route", make_route);
  registry.add("code_tests", make_code_tests);
  registry.add("judge", make_judge);
  registry.add("reward_model", make_reward_model);
  return registry;
}

}  // namespace grpo::rewards
