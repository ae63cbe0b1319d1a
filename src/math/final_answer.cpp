// SPDX-License-Identifier: Apache-2.0
// find_final_answer: the region of a completion that is graded (see final_answer.hpp).
#include "grpo/math/final_answer.hpp"

#include "grpo/core/ascii_text.hpp"
#include "grpo/math/extract.hpp"

#include <algorithm>
#include <cctype>

namespace grpo::math {
namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// Positions of the whole word `word` (lower-case) in s, case-insensitively.
std::vector<std::size_t> words_at(std::string_view s, std::string_view word) {
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k + word.size() <= s.size(); ++k) {
    if (!ascii_iequals_at(s, k, word)) continue;
    if (k > 0 && word_char(s[k - 1])) continue;
    if (k + word.size() < s.size() && word_char(s[k + word.size()])) continue;
    out.push_back(k);
  }
  return out;
}

// End of the sentence that starts at `from`: the first ". " / ".\n" not inside $…$ or braces, a newline, or the end.
std::size_t sentence_end(std::string_view s, std::size_t from) {
  int depth = 0;
  bool math = false;
  for (std::size_t k = from; k < s.size(); ++k) {
    const char c = s[k];
    if (c == '\\' && k + 1 < s.size()) {
      ++k;
      continue;
    }
    if (c == '$') math = !math;
    else if (c == '{') ++depth;
    else if (c == '}' && depth > 0) --depth;
    else if (c == '\n' && depth == 0) return k;
    else if (c == '.' && !math && depth == 0 && (k + 1 == s.size() || s[k + 1] == ' ' || s[k + 1] == '\n')) {
      return k + 1;
    }
  }
  return s.size();
}

// The markers of `s` (a view into the completion at `offset`): boxes, "final answer" phrases and #### lines.
std::vector<AnswerMarker> markers_in(std::string_view s, std::size_t offset) {
  std::vector<AnswerMarker> out;
  for (BoxedSpan& box : boxed_spans(s)) {
    out.push_back({AnswerSource::boxed, offset + box.begin, offset + box.end, std::string(trim_ascii_space(box.content))});
  }
  for (const std::size_t at : words_at(s, "final")) {
    std::size_t k = at + 5;
    while (k < s.size() && s[k] == ' ') ++k;
    if (!ascii_iequals_at(s, k, "answer")) continue;
    const std::size_t end = sentence_end(s, k + 6);
    // A phrase that holds a box is that box's marker already.
    const auto boxed = std::find_if(out.begin(), out.end(), [&](const AnswerMarker& m) {
      return m.source == AnswerSource::boxed && m.begin >= offset + at && m.end <= offset + end;
    });
    if (boxed != out.end()) continue;
    out.push_back({AnswerSource::final_answer_phrase, offset + at, offset + end, std::string(trim_ascii_space(s.substr(at, end - at)))});
  }
  for (std::size_t at = s.find("####"); at != std::string_view::npos; at = s.find("####", at + 4)) {
    std::size_t end = s.find('\n', at);
    if (end == std::string_view::npos) end = s.size();
    const std::string_view text = trim_ascii_space(s.substr(at + 4, end - at - 4));
    if (!text.empty()) out.push_back({AnswerSource::gsm8k, offset + at, offset + end, std::string(text)});
    at = end > at + 4 ? end - 4 : at;
  }
  std::sort(out.begin(), out.end(), [](const AnswerMarker& a, const AnswerMarker& b) { return a.begin < b.begin; });
  return out;
}

}  // namespace

FinalAnswer find_final_answer(std::string_view completion, const FinalAnswerOptions& options) {
  FinalAnswer out;
  std::size_t offset = 0;
  std::string_view s = completion;
  if (s.size() > options.max_input_bytes) {
    offset = s.size() - options.max_input_bytes;
    s = s.substr(offset);
  }
  // Reasoning: everything up to the last </think>, and everything after an unclosed <think>.
  if (options.think_tags) {
    if (const auto close = s.rfind("</think>"); close != std::string_view::npos) {
      offset += close + 8;
      s = s.substr(close + 8);
    }
    if (const auto open = s.find("<think>"); open != std::string_view::npos) s = s.substr(0, open);
  }
  if (options.answer_tags) {
    if (const auto open = s.rfind("<answer>"); open != std::string_view::npos) {
      const auto close = s.find("</answer>", open);
      const std::size_t end = close == std::string_view::npos ? s.size() : close;
      out.region = {AnswerSource::answer_tag, offset + open, offset + (close == std::string_view::npos ? end : end + 9),
                    std::string(trim_ascii_space(s.substr(open + 8, end - open - 8)))};
      // Markers outside the span (before or after it) must agree with it; text inside is the answer itself.
      for (AnswerMarker& m : markers_in(s, offset)) {
        if (m.end <= out.region.begin || m.begin >= out.region.end) out.others.push_back(std::move(m));
      }
      return out;
    }
  }
  std::vector<AnswerMarker> markers = markers_in(s, offset);
  if (!markers.empty()) {
    const auto last = std::max_element(markers.begin(), markers.end(),
                                       [](const AnswerMarker& a, const AnswerMarker& b) { return a.end < b.end; });
    out.region = std::move(*last);
    markers.erase(last);
    out.others = std::move(markers);
    return out;
  }
  // The last non-empty line, from its last "answer" word.
  std::string_view rest = trim_ascii_space(s);
  if (rest.empty()) return out;
  const std::size_t line_start = rest.rfind('\n') == std::string_view::npos ? 0 : rest.rfind('\n') + 1;
  std::string_view line = trim_ascii_space(rest.substr(line_start));
  const std::vector<std::size_t> answers = words_at(line, "answer");
  if (!answers.empty()) line = line.substr(answers.back());
  const std::size_t begin = static_cast<std::size_t>(line.data() - completion.data());
  out.region = {AnswerSource::last_line, begin, begin + line.size(), std::string(line)};
  return out;
}

}  // namespace grpo::math
