// SPDX-License-Identifier: Apache-2.0
// Hand-written scanners for the format, tag-count and reasoning-steps rewards (see format_rewards.hpp).
#include <grpo/core/error.hpp>
#include <grpo/rewards/format_rewards.hpp>
#include "text_scan.hpp"

#include <algorithm>

namespace grpo::rewards {
namespace {

using namespace std::string_view_literals;

// ^<think>.*?</think>\s*<answer>.*?</answer>$ with DOTALL. Because both `.*?` may grow over anything, the text
// matches iff it starts with "<think>", ends with "</answer>" (or "</answer>\n": Python's `$`), and some
// "</think>" after the opening tag is followed by whitespace and then an "<answer>" that ends before the final
// "</answer>" begins.
bool matches_r1_zero(std::string_view text) {
  constexpr auto open = "<think>"sv, close = "</think>"sv, answer = "<answer>"sv, answer_close = "</answer>"sv;
  if (!text.starts_with(open)) return false;
  std::size_t final_close;
  if (text.ends_with(answer_close)) {
    final_close = text.size() - answer_close.size();
  } else if (text.ends_with("</answer>\n"sv)) {
    final_close = text.size() - answer_close.size() - 1;
  } else {
    return false;
  }
  for (std::size_t i = text.find(close, open.size()); i != std::string_view::npos; i = text.find(close, i + 1)) {
    std::size_t j = i + close.size();
    while (j < text.size() && detail::is_python_space(static_cast<unsigned char>(text[j]))) ++j;
    if (text.substr(j).starts_with(answer) && j + answer.size() <= final_close) return true;
    if (j + answer.size() > final_close) return false;  // later "</think>" can only start later
  }
  return false;
}

// ^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$ with DOTALL|MULTILINE, anchored at the start (re.match):
// the text starts with "<think>\n"; the earliest "\n</think>\n<answer>\n" after it is the best choice for the
// first `.*?`; then some "\n</answer>" after that must be followed by the end of the text or a newline.
bool matches_open_r1(std::string_view text) {
  constexpr auto open = "<think>\n"sv, middle = "\n</think>\n<answer>\n"sv, close = "\n</answer>"sv;
  if (!text.starts_with(open)) return false;
  const std::size_t i = text.find(middle, open.size());
  if (i == std::string_view::npos) return false;
  for (std::size_t k = text.find(close, i + middle.size()); k != std::string_view::npos;
       k = text.find(close, k + 1)) {
    const std::size_t after = k + close.size();
    if (after == text.size() || text[after] == '\n') return true;
  }
  return false;
}

std::size_t count_non_overlapping(std::string_view text, std::string_view needle) {
  std::size_t count = 0;
  for (std::size_t at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of `\d+` followed by `terminator` at `at`, or 0 when there is no such match.
std::size_t digits_then(std::string_view text, std::size_t at, char terminator) {
  std::size_t end = at;
  while (end < text.size() && is_digit(text[end])) ++end;
  if (end == at || end >= text.size() || text[end] != terminator) return 0;
  return end + 1 - at;
}

// Length of the first alternative of the reasoning-steps pattern matching at `at`, or 0.
std::size_t step_match(std::string_view text, std::size_t at, StepLineAnchor anchor) {
  const std::string_view rest = text.substr(at);
  switch (rest.front()) {
    case 'S':
      if (rest.starts_with("Step "sv)) {
        if (const std::size_t digits = digits_then(text, at + 5, ':')) return 5 + digits;
      }
      return rest.starts_with("Second,"sv) ? 7 : 0;
    case '\n':
      return rest.size() >= 2 && (rest[1] == '-' || rest[1] == '*') ? 2 : 0;
    case 'F':
      if (rest.starts_with("First,"sv)) return 6;
      return rest.starts_with("Finally,"sv) ? 8 : 0;
    case 'N':
      return rest.starts_with("Next,"sv) ? 5 : 0;
    default:
      break;
  }
  if (is_digit(rest.front())) {
    const bool line_start = at == 0 || (anchor == StepLineAnchor::every_line && text[at - 1] == '\n');
    if (line_start) return digits_then(text, at, '.');
  }
  return 0;
}

}  // namespace

bool matches_format(std::string_view text, FormatStyle style) {
  return style == FormatStyle::r1_zero ? matches_r1_zero(text) : matches_open_r1(text);
}

std::vector<std::optional<float>> FormatReward::score(std::span<const Completion> batch,
                                                      const ScoringContext& /*context*/) const {
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const Completion& completion : batch) {
    values.emplace_back(matches_format(completion.text, options_.style) ? 1.0f : 0.0f);
  }
  return values;
}

float tag_count_score(std::string_view text) {
  float score = 0.0f;
  for (std::string_view tag : {"<think>\n"sv, "\n</think>\n"sv, "\n<answer>\n"sv, "\n</answer>"sv}) {
    if (count_non_overlapping(text, tag) == 1) score += 0.25f;
  }
  return score;
}

std::vector<std::optional<float>> TagCountReward::score(std::span<const Completion> batch,
                                                        const ScoringContext& /*context*/) const {
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const Completion& completion : batch) values.emplace_back(tag_count_score(completion.text));
  return values;
}

std::size_t count_reasoning_steps(std::string_view text, StepLineAnchor anchor) {
  std::size_t count = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    if (const std::size_t length = step_match(text, at, anchor)) {
      ++count;
      at += length;
    } else {
      ++at;
    }
  }
  return count;
}

ReasoningStepsReward::ReasoningStepsReward(ReasoningStepsOptions options) : options_(options) {
  GRPO_CHECK_CONFIG(options_.target_steps > 0.0, "reasoning_steps: target_steps must be > 0, got {}",
                    options_.target_steps);
}

std::vector<std::optional<float>> ReasoningStepsReward::score(std::span<const Completion> batch,
                                                              const ScoringContext& /*context*/) const {
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const Completion& completion : batch) {
    const double steps = static_cast<double>(count_reasoning_steps(completion.text, options_.line_anchor));
    values.emplace_back(static_cast<float>(std::min(1.0, steps / options_.target_steps)));
  }
  return values;
}

}  // namespace grpo::rewards
