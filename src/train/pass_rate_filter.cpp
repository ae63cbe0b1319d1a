// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/train/pass_rate_filter.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <cmath>
#include <limits>

namespace grpo::train {
namespace {

constexpr std::int64_t kForever = std::numeric_limits<std::int64_t>::max();

}  // namespace

PassRateFilter::PassRateFilter(PassRateFilterOptions options) : options_(options) {
  GRPO_CHECK_CONFIG(options_.window >= 1, "PassRateFilter: window must be >= 1, got {}", options_.window);
  GRPO_CHECK_CONFIG(options_.retire_steps >= 0, "PassRateFilter: retire_steps must be >= 0, got {}",
                    options_.retire_steps);
}

void PassRateFilter::observe(std::string_view prompt, double pass_rate, std::int64_t step) {
  GRPO_CHECK_CONFIG(std::isnan(pass_rate) || (pass_rate >= 0.0 && pass_rate <= 1.0),
                    "PassRateFilter::observe: pass rate of '{}' must be in [0, 1], got {}", prompt, pass_rate);
  auto it = prompts_.find(prompt);
  if (it == prompts_.end()) it = prompts_.emplace(std::string(prompt), PromptState{}).first;
  PromptState& state = it->second;
  if (state.retired_until >= 0 && step >= state.retired_until) state = PromptState{};  // back from retirement
  const int kind = pass_rate == 0.0 && options_.retire_unsolved ? 0 : pass_rate == 1.0 && options_.retire_solved ? 1 : -1;
  if (kind < 0) {
    state.streak_kind = -1;
    state.streak = 0;
    return;
  }
  state.streak = kind == state.streak_kind ? state.streak + 1 : 1;
  state.streak_kind = kind;
  if (state.streak >= options_.window) {
    state.retired_until = options_.retire_steps == 0 ? kForever : step + 1 + options_.retire_steps;
  }
}

bool PassRateFilter::is_retired(std::string_view prompt, std::int64_t step) const {
  const auto it = prompts_.find(prompt);
  return it != prompts_.end() && it->second.retired_until >= 0 && step < it->second.retired_until;
}

std::size_t PassRateFilter::retired_count(std::int64_t step) const {
  std::size_t count = 0;
  for (const auto& [prompt, state] : prompts_) count += state.retired_until >= 0 && step < state.retired_until;
  return count;
}

std::string PassRateFilter::save() const {
  // {"prompts": [[id, streak_kind, streak, retired_until], ...]}; INT64_MAX as -2 (exact in a double-free reader).
  std::string out = "{\"prompts\": [";
  bool first = true;
  for (const auto& [prompt, state] : prompts_) {
    out += first ? "\n  [" : ",\n  [";
    first = false;
    append_json_quoted(out, prompt);
    fmt::format_to(std::back_inserter(out), ", {}, {}, {}]", state.streak_kind, state.streak,
                   state.retired_until == kForever ? -2 : state.retired_until);
  }
  out += first ? "]}\n" : "\n]}\n";
  return out;
}

void PassRateFilter::load(std::string_view json, std::string_view source) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (const auto error = parser.parse(simdjson::padded_string(json)).get(root)) {
    throw ParseError(fmt::format("{}: invalid JSON ({})", source, simdjson::error_message(error)));
  }
  simdjson::dom::array entries;
  if (root["prompts"].get_array().get(entries)) {
    throw ParseError(fmt::format("{}: field 'prompts' should be a list", source));
  }
  std::map<std::string, PromptState, std::less<>> prompts;
  std::size_t index = 0;
  for (simdjson::dom::element entry : entries) {
    simdjson::dom::array fields;
    std::string_view id;
    std::int64_t kind = 0, streak = 0, until = 0;
    if (entry.get_array().get(fields) || fields.size() != 4 || fields.at(0).get_string().get(id) ||
        fields.at(1).get_int64().get(kind) || fields.at(2).get_int64().get(streak) ||
        fields.at(3).get_int64().get(until) || kind < -1 || kind > 1 || streak < 0 || until < -2) {
      throw ParseError(fmt::format("{}: prompts[{}] should be [id, streak kind -1..1, streak >= 0, retired until]",
                                   source, index));
    }
    prompts[std::string(id)] = PromptState{static_cast<int>(kind), streak, until == -2 ? kForever : until};
    ++index;
  }
  prompts_ = std::move(prompts);
}

}  // namespace grpo::train
