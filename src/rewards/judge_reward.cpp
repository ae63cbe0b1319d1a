// SPDX-License-Identifier: Apache-2.0
// The judge reward: prompt template, verdict parser, and the reward itself (see judge_reward.hpp). The backends are
// in judge_http_backend.cpp (libcurl) and judge_local_backend.cpp (LibTorch).
#include <grpo/rewards/judge_reward.hpp>
#include <grpo/text/chat_messages.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

namespace grpo::rewards {
namespace {

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

char lower_char(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), lower_char);
  return out;
}

// A non-negative decimal number at text[i...]; advances i past it.
std::optional<double> read_number(std::string_view text, std::size_t& i) {
  const std::size_t start = i;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  if (i == start) return std::nullopt;
  double value = 0.0;
  const auto [end, error] = std::from_chars(text.data() + start, text.data() + i, value);
  if (error != std::errc() || end != text.data() + i) return std::nullopt;
  return value;
}

void skip(std::string_view text, std::size_t& i, std::string_view chars) {
  while (i < text.size() && chars.find(text[i]) != std::string_view::npos) ++i;
}

// "score" followed by separators, a number and optionally "/ N", at the last place where that reads.
std::optional<float> score_verdict(std::string_view text) {
  std::size_t pos = text.rfind("score");
  while (pos != std::string_view::npos) {
    const bool word_start = pos == 0 || !is_word_char(text[pos - 1]);
    std::size_t i = pos + 5;
    skip(text, i, " \t*:=_");
    if (word_start) {
      if (const auto x = read_number(text, i)) {
        skip(text, i, " \t*");
        double out_of = 10.0;
        if (i < text.size() && text[i] == '/') {
          ++i;
          skip(text, i, " \t*");
          const auto denominator = read_number(text, i);
          out_of = denominator.value_or(0.0);
        }
        if (out_of > 0.0 && *x >= 0.0 && *x <= out_of) return static_cast<float>(*x / out_of);
      }
    }
    if (pos == 0) break;
    pos = text.rfind("score", pos - 1);
  }
  return std::nullopt;
}

// The last (or first) standalone "yes" / "no" word of `text`.
std::optional<float> yes_no_verdict(std::string_view text, bool first = false) {
  std::optional<float> verdict;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && !is_word_char(text[i])) ++i;
    const std::size_t start = i;
    while (i < text.size() && is_word_char(text[i])) ++i;
    const std::string_view word = text.substr(start, i - start);
    if (word == "yes") verdict = 1.0f;
    if (word == "no") verdict = 0.0f;
    if (first && verdict) break;
  }
  return verdict;
}

std::string_view after_thinking(std::string_view text) {
  const std::size_t end = text.rfind("</think>");
  return end == std::string_view::npos ? text : text.substr(end + 8);
}

}  // namespace

std::optional<float> parse_verdict(std::string_view judge_text) {
  const std::string text = lower(after_thinking(judge_text));
  if (const auto score = score_verdict(text)) return score;
  // Prefer the first yes/no after the last "verdict"; else the last one of the whole reply.
  const std::size_t verdict = text.rfind("verdict");
  if (verdict != std::string::npos) {
    if (const auto value = yes_no_verdict(std::string_view(text).substr(verdict + 7), /*first=*/true)) return value;
  }
  return yes_no_verdict(text);
}

std::string fill_judge_template(std::string_view prompt_template, std::string_view question, std::string_view reference,
                                std::string_view response, std::string_view criteria) {
  const std::pair<std::string_view, std::string_view> fields[] = {
      {"{question}", question}, {"{reference}", reference}, {"{response}", response}, {"{criteria}", criteria}};
  std::string out;
  out.reserve(prompt_template.size() + question.size() + reference.size() + response.size() + criteria.size());
  std::size_t i = 0;
  while (i < prompt_template.size()) {
    bool replaced = false;
    if (prompt_template[i] == '{') {
      for (const auto& [key, value] : fields) {
        if (prompt_template.compare(i, key.size(), key) == 0) {
          out.append(value);
          i += key.size();
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out.push_back(prompt_template[i++]);
  }
  return out;
}

JudgeReward::JudgeReward(JudgeOptions options, JudgeBackendPtr backend)
    : options_(std::move(options)), backend_(std::move(backend)) {
  GRPO_CHECK_CONFIG(backend_ != nullptr, "JudgeReward: the backend is null");
  GRPO_CHECK_CONFIG(options_.prompt_template.find("{response}") != std::string::npos,
                    "JudgeReward: prompt_template must contain {{response}}");
}

namespace {
/// The content of the last user message of the chat in `field` of `row` (a JSON string or list), or nullopt (no row,
/// no such field, no user message, or text that is not a chat list).
std::optional<std::string> last_user_turn(const Row* row, const std::string& field) {
  if (row == nullptr || field.empty()) return std::nullopt;
  const std::optional<std::string> json = row->text(field);
  if (!json) return std::nullopt;
  std::vector<text::ChatMessage> messages;
  try {
    messages = text::parse_chat_messages(*json, field);
  } catch (const ParseError&) {
    return std::nullopt;
  }
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    if (it->role == "user") return it->content;
  }
  return std::nullopt;
}
}  // namespace

JudgeRequest JudgeReward::request_for(const Completion& completion) const {
  const Row* row = completion.row.get();
  const auto first_text = [row](const std::vector<std::string>& fields) -> std::optional<std::string> {
    if (row == nullptr) return std::nullopt;
    for (const std::string& field : fields) {
      const FieldValue* value = row->find(field);
      if (value == nullptr) continue;
      if (const auto* list = std::get_if<std::vector<std::string>>(value)) {
        if (!list->empty()) return fmt::format("{}", fmt::join(*list, " | "));
        continue;
      }
      if (auto text = row->text(field); text && !text->empty()) return text;
    }
    return std::nullopt;
  };
  std::optional<std::string> question = last_user_turn(row, options_.messages_field);
  if (!question) question = first_text(options_.question_fields);
  if (!question) question = completion.prompt;
  const std::string reference = first_text(options_.reference_fields).value_or("(no reference answer)");
  const std::string criteria = first_text({options_.criteria_field}).value_or(options_.default_criteria);
  std::string_view response = options_.strip_thinking ? after_thinking(completion.text) : completion.text;
  std::string cut;
  if (options_.max_response_bytes > 0 && response.size() > options_.max_response_bytes) {
    std::size_t n = options_.max_response_bytes;
    while (n > 0 && (static_cast<unsigned char>(response[n]) & 0xC0) == 0x80) --n;  // whole UTF-8 characters
    cut = std::string(response.substr(0, n)) + "\n[... response cut ...]";
    response = cut;
  }
  return JudgeRequest{options_.system_prompt,
                      fill_judge_template(options_.prompt_template, *question, reference, response, criteria)};
}

std::vector<std::optional<float>> JudgeReward::score(std::span<const Completion> batch,
                                                     const ScoringContext& context) const {
  std::vector<JudgeRequest> requests;
  requests.reserve(batch.size());
  for (const Completion& completion : batch) requests.push_back(request_for(completion));
  const std::vector<std::optional<std::string>> replies = backend_->complete(requests, context);
  GRPO_CHECK(replies.size() == requests.size(), "judge: the backend returned {} replies for {} requests",
             replies.size(), requests.size());
  requests_ += batch.size();
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const auto& reply : replies) {
    if (!reply) {
      ++failed_;
      values.emplace_back(std::nullopt);
      continue;
    }
    const std::optional<float> verdict = parse_verdict(*reply);
    if (!verdict) ++unparseable_;
    values.push_back(verdict);
  }
  return values;
}

JudgeStats JudgeReward::stats() const { return JudgeStats{requests_.load(), unparseable_.load(), failed_.load()}; }

}  // namespace grpo::rewards
