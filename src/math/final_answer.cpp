// SPDX-License-Identifier: Apache-2.0
// find_final_answer: the region of a completion that is graded (see final_answer.hpp).
#include "grpo/math/final_answer.hpp"

#include "grpo/core/ascii_text.hpp"
#include "grpo/math/extract.hpp"

#include <algorithm>
#include <cctype>

namespace grpo::math {
namespace {

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

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
    // A heading ("**Final Answer**", "Final answer:") states nothing itself: it is a cue (last_cue_end), not a marker.
    if (s.substr(k + 6, end - k - 6).find_first_not_of(" \t*_:#.") == std::string_view::npos) continue;
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

// Words that retract what came before: a box followed by one of them and then another box is a correction, not two
// final answers ("\\boxed{5}. Wait, that is wrong ... \\boxed{6}").
constexpr std::string_view kCorrectionWords[] = {
    "wait",       "actually",   "mistake",   "mistaken",    "wrong",      "incorrect",  "error",
    "correction", "recheck",    "re-check",  "double-check", "recompute", "recalculate", "reconsider",
    "re-examine", "re-evaluate", "revisit",  "redo",        "hmm",        "oops"};

// The end of the last cue in s[0, limit) after which earlier markers are working, not answers: a "final answer" (a
// heading, "the final answer is") or a correction word; 0 when there is none. One pass over the words.
std::size_t last_cue_end(std::string_view s, std::size_t limit) {
  const std::string_view head = s.substr(0, limit);
  std::size_t cue = 0;
  std::size_t final_end = std::string_view::npos;  // the end of a "final" whose next word may be "answer"
  char word[16];
  for (std::size_t k = 0; k < head.size();) {
    if (!word_char(head[k])) {
      if (head[k] != ' ' && head[k] != '*' && head[k] != '_') final_end = std::string_view::npos;
      ++k;
      continue;
    }
    std::size_t n = 0;
    while (k < head.size() && (word_char(head[k]) || (head[k] == '-' && k + 1 < head.size() && word_char(head[k + 1])))) {
      if (n < sizeof(word)) word[n] = ascii_lower(head[k]);
      ++n;
      ++k;
    }
    if (n > 0 && std::isdigit(static_cast<unsigned char>(word[0]))) {  // a number is no cue
      final_end = std::string_view::npos;
      continue;
    }
    if (n > sizeof(word)) {
      final_end = std::string_view::npos;
      continue;
    }
    const std::string_view w(word, n);
    if (n == 6 && w == "answer" && final_end != std::string_view::npos) cue = k;
    final_end = n == 5 && w == "final" ? k : std::string_view::npos;
    if (n < 3 || n > 12) continue;
    for (const std::string_view correction : kCorrectionWords) {
      if (correction.size() == n && correction[0] == w[0] && w == correction) cue = k;
    }
  }
  return cue;
}

// Whether a piece of text states something: a digit, a math delimiter or a LaTeX command.
bool states_something(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '$' || c == '\\'; });
}

// The last statement of a text with no final-answer marker: its last non-empty line (with the display environment
// it closes, "\\[ … \\]" or "$$ … $$" over several lines), from its last "answer" word when an answer follows that
// word, else the line's last sentence that states something (long one-line completions end "… is 2/3. I hope it is
// correct."). Empty for empty text.
std::string_view last_statement(std::string_view rest) {
  if (rest.empty()) return rest;
  const std::size_t line_start = rest.rfind('\n') == std::string_view::npos ? 0 : rest.rfind('\n') + 1;
  std::string_view line = trim_ascii_space(rest.substr(line_start));
  const auto opens_before = [&](std::string_view opener, std::string_view closer) {
    if (line.size() < closer.size() || line.substr(line.size() - closer.size()) != closer) return false;
    const std::string_view body = line.substr(0, line.size() - closer.size());
    return opener == closer ? std::count(line.begin(), line.end(), '$') % 4 != 0 : body.find(opener) == std::string_view::npos;
  };
  for (const auto& [opener, closer] : {std::pair<std::string_view, std::string_view>{"\\[", "\\]"}, {"$$", "$$"}}) {
    if (!opens_before(opener, closer)) continue;
    const std::size_t end = static_cast<std::size_t>(line.data() - rest.data()) + line.size() - closer.size();
    const std::size_t open = rest.rfind(opener, end - (opener == closer ? 1 : 0));
    if (open != std::string_view::npos && open < end) {
      std::size_t from = rest.rfind('\n', open);
      from = from == std::string_view::npos ? 0 : from + 1;
      line = trim_ascii_space(rest.substr(from, static_cast<std::size_t>(line.data() - rest.data()) + line.size() - from));
    }
    break;
  }
  const std::vector<std::size_t> answers = words_at(line, "answer");
  if (!answers.empty()) {
    const std::string_view after = line.substr(answers.back() + 6);
    if (after.find_first_not_of(" .:*_") != std::string_view::npos) return line.substr(answers.back());
  }
  if (line.find('\n') != std::string_view::npos) return line;  // a display environment is one statement
  std::string_view last;
  for (std::size_t from = 0; from < line.size();) {
    const std::size_t end = sentence_end(line, from);
    const std::string_view sentence = trim_ascii_space(line.substr(from, end - from));
    if (states_something(sentence)) last = sentence;
    from = std::max(end, from + 1);
  }
  return last.empty() ? line : last;
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
      // The tag is the explicit final answer: markers before it are working, markers after it must agree with it,
      // text inside is the answer itself.
      for (AnswerMarker& m : markers_in(s, offset)) {
        if (m.begin >= out.region.end) out.others.push_back(std::move(m));
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
    // Markers before a "final answer" cue or a correction word that precedes the region (or before the region itself
    // when it is a "final answer is" phrase) are working; the rest (boxes ending the completion side by side, a phrase
    // the region contradicts) must agree with it. Markers inside the region are part of it.
    // Only the text from the first marker on is read for a cue: a cue before every marker changes nothing.
    std::size_t cue = out.region.begin;
    if (out.region.source != AnswerSource::final_answer_phrase && !markers.empty()) {
      const std::size_t from = std::min_element(markers.begin(), markers.end(), [](const AnswerMarker& a, const AnswerMarker& b) {
                                 return a.end < b.end;
                               })->end - offset;
      const std::size_t to = out.region.begin - offset;
      const std::size_t found = from < to ? last_cue_end(s.substr(from), to - from) : 0;
      cue = found == 0 ? 0 : offset + from + found;
    }
    for (AnswerMarker& m : markers) {
      const bool inside = m.begin >= out.region.begin && m.end <= out.region.end;
      if (m.end > cue && !inside) out.others.push_back(std::move(m));
    }
    return out;
  }
  const std::string_view line = last_statement(trim_ascii_space(s));
  if (line.empty()) return out;
  const std::size_t begin = static_cast<std::size_t>(line.data() - completion.data());
  out.region = {AnswerSource::last_line, begin, begin + line.size(), std::string(line)};
  return out;
}

}  // namespace grpo::math
