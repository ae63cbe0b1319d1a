// SPDX-License-Identifier: Apache-2.0
// Extraction and normalisation scanners. Every pass is linear (or linear per candidate) in the input; none uses
// regular expressions. Patterns and priorities follow Math-Verify's parser.py (see docs/math_verifier.md). One file over
// 700 lines: the scanners call each other in Math-Verify's priority order and share its private helpers.
#include "grpo/core/ascii_text.hpp"
#include "grpo/math/extract.hpp"

#include <algorithm>
#include <array>
#include <optional>

namespace grpo::math {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (true) {
    const auto j = s.find(from, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i);
    out += to;
    i = j + from.size();
  }
  out.append(s, i, std::string::npos);
  s = std::move(out);
}

// Replaces the command \name when it is not followed by a letter (so \right does not hit \rightarrow).
void replace_command(std::string& s, std::string_view name, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '\\' && s.compare(i + 1, name.size(), name) == 0 &&
        (i + 1 + name.size() >= s.size() || !is_alpha(s[i + 1 + name.size()]))) {
      out += to;
      i += 1 + name.size();
      continue;
    }
    out += s[i++];
  }
  s = std::move(out);
}

// Index one past the brace matching s[open] == '{'; npos when unclosed.
std::size_t match_brace(std::string_view s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      continue;
    }
    if (s[i] == '{') ++depth;
    else if (s[i] == '}' && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

struct Box {
  std::size_t start, end;  // whole \boxed{...}
  std::string content;
};

std::vector<Box> find_boxes(std::string_view s) {
  std::vector<Box> boxes;
  std::size_t i = 0;
  while (i < s.size()) {
    const auto j = s.find('\\', i);
    if (j == std::string_view::npos) break;
    std::size_t len = 0;
    if (s.compare(j + 1, 5, "boxed") == 0) len = 6;
    else if (s.compare(j + 1, 4, "fbox") == 0) len = 5;
    if (len == 0) {
      i = j + 1;
      continue;
    }
    std::size_t k = j + len;
    while (k < s.size() && s[k] == ' ') ++k;
    if (k >= s.size() || s[k] != '{') {
      i = j + len;
      continue;
    }
    const std::size_t close = match_brace(s, k);
    const std::size_t end = close == std::string_view::npos ? s.size() : close;
    std::string content(close == std::string_view::npos ? s.substr(k + 1) : s.substr(k + 1, close - k - 2));
    boxes.push_back({j, end, std::move(content)});
    i = end > j ? end : j + 1;
    // Nested boxes inside this one are part of its content; continue after it.
  }
  return boxes;
}

std::string unbox(std::string_view s, BoxedMode mode) {
  if (mode == BoxedMode::none) return std::string(s);
  auto boxes = find_boxes(s);
  if (boxes.empty()) return std::string(s);
  std::vector<std::string> picked;
  if (mode == BoxedMode::all) {
    for (auto& b : boxes) {
      if (picked.empty() || picked.back() != b.content) picked.push_back(b.content);
    }
  } else {
    picked.push_back(boxes.back().content);
    for (std::size_t k = boxes.size() - 1; k-- > 0;) {
      const std::string_view gap = s.substr(boxes[k].end, boxes[k + 1].start - boxes[k].end);
      const bool joiner = gap.find(" and ") != std::string_view::npos || gap.find(" or ") != std::string_view::npos ||
                          gap.find(',') != std::string_view::npos || gap.find(';') != std::string_view::npos;
      if (gap.size() < 10 || (gap.size() < 70 && joiner && boxes[k].content != boxes[k + 1].content)) {
        if (picked.back() != boxes[k].content) picked.push_back(boxes[k].content);
      } else {
        break;
      }
    }
    std::reverse(picked.begin(), picked.end());
  }
  std::string out;
  for (std::size_t k = 0; k < picked.size(); ++k) {
    if (k) out += ',';
    out += picked[k];
  }
  return out;
}

// Whole-word replacement of "and"/"or" (optionally after a comma) by ",".
void words_to_commas(std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const bool word_start = i == 0 || !is_alpha(s[i - 1]);
    std::size_t len = 0;
    if (word_start && s.compare(i, 3, "and") == 0) len = 3;
    else if (word_start && s.compare(i, 2, "or") == 0) len = 2;
    if (len && (i + len >= s.size() || !is_alpha(s[i + len])) && (i == 0 || s[i - 1] != '\\')) {
      while (!out.empty() && out.back() == ' ') out.pop_back();
      if (out.empty() || out.back() != ',') out += ',';
      i += len;
      continue;
    }
    out += s[i++];
  }
  s = std::move(out);
}

// Removes \text{...}/\mbox{...} groups whose content (trimmed) is one of the given words, replacing them.
void replace_text_words(std::string& s, std::string_view replacement) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    if (s.compare(i, 6, "\\text{") == 0) {
      const std::size_t close = match_brace(s, i + 5);
      const std::size_t end = close == std::string::npos ? s.size() : close;
      const std::string_view inner = trim_ascii_space(std::string_view(s).substr(i + 6, end > i + 6 ? end - i - 7 : 0));
      if (inner == "and" || inner == "or" || inner == "and also") {
        out += replacement;
        i = end;
        continue;
      }
      if (inner.empty()) {
        i = end;
        continue;
      }
    }
    out += s[i++];
  }
  s = std::move(out);
}

constexpr std::string_view kUnits[] = {
    "integer", "point", "feet", "sue", "digit", "pound", "meal", "edge", "student", "children ticket", "multiple",
    "east", "degree", "mph", "kmph", "ft", "m square", "m east", "sq m", "deg", "mile", "q .", "monkey", "prime",
    "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per", "dm", "lt", "gain", "way", "west",
    "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .", "t", "a", "h", "no change", "men", "soldier", "pie",
    "excess", "st", "inches", "noon", "percent", "by", "gal", "kmh", "c", "acre", "rise", "a . m", "th",
    "π r 2", "sq", "mark", "l", "toy", "coin", "sq . m", "gallon", "° f", "profit", "minw", "yr", "women",
    "hr", "cu cm", "square", "v â € ™", "are", "rupee", "rounds", "cubic", "cc", "mtr", "s", "ohm", "number",
    "kmph", "day", "hour", "minute", "min", "second", "man", "woman", "sec", "cube", "mt", "sq inch", "mp", "∏ cm ³",
    "hectare", "more", "sec", "unit", "cu . m", "cm 2", "rs .", "rs", "kg", "g", "month"};
constexpr std::string_view kUnitsExtra[] = {
    "cm", "km", "m", "mm", "meter", "metre", "centimeter", "kilometer", "inch", "foot", "yard", "liter", "litre",
    "ml", "dollar", "cent", "euro", "year", "week", "hours", "minutes", "seconds", "people", "person", "page",
    "book", "apple", "candy", "candies", "marble", "ticket", "box", "boxe", "bag", "mile", "miles", "kilogram",
    "gram", "ton", "mph"};

bool strip_unit_word(std::string& s) {
  // A trailing word (with optional s/es) from the unit lists, after a digit, '}' or a space.
  std::size_t end = s.size();
  while (end > 0 && s[end - 1] == ' ') --end;
  std::size_t start = end;
  while (start > 0 && is_alpha(s[start - 1])) --start;
  if (start == end || start == 0) return false;
  const char before = s[start - 1];
  if (!(is_digit(before) || before == '}' || before == ' ')) return false;
  std::string word;
  for (std::size_t k = start; k < end; ++k) word += ascii_lower(s[k]);
  auto matches = [&](std::string_view w) {
    if (word == w) return true;
    if (word.size() == w.size() + 1 && word.back() == 's' && word.compare(0, w.size(), w) == 0) return true;
    if (word.size() == w.size() + 2 && word.compare(word.size() - 2, 2, "es") == 0 &&
        word.compare(0, w.size(), w) == 0)
      return true;
    return false;
  };
  bool hit = false;
  for (auto w : kUnits) {
    // One-letter units (3s, 5m) only directly after a digit.
    if ((w.size() > 1 || is_digit(before)) && w.find(' ') == std::string_view::npos && matches(w)) hit = true;
  }
  for (auto w : kUnitsExtra) {
    if (matches(w)) hit = true;
  }
  if (!hit) return false;
  // Keep something in front: the number.
  std::string rest = s.substr(0, start);
  while (!rest.empty() && rest.back() == ' ') rest.pop_back();
  if (rest.empty()) return false;
  s = std::move(rest);
  return true;
}

void strip_units(std::string& s) {
  // A trailing \text{...} or \mbox{...} (optionally ^2) is a unit when something precedes it.
  std::string t(trim_ascii_space(s));
  for (std::string_view cmd : {"\\text{", "\\mbox{"}) {
    const auto pos = t.rfind(cmd);
    if (pos == std::string::npos || pos == 0) continue;
    const std::size_t close = match_brace(t, pos + cmd.size() - 1);
    if (close == std::string::npos) continue;
    const std::size_t end = close;
    std::size_t after = end;
    if (after < t.size() && t[after] == '^') {
      ++after;
      if (after < t.size() && t[after] == '{') after = std::min(match_brace(t, after), t.size());
      else if (after < t.size() && is_digit(t[after])) ++after;
    }
    if (trim_ascii_space(std::string_view(t).substr(after)).empty()) {
      const std::string_view head = trim_ascii_space(std::string_view(t).substr(0, pos));
      if (!head.empty() && head.back() != '{' && head.back() != '(' && head.back() != '=') t = std::string(head);
    }
  }
  for (int round = 0; round < 2; ++round) strip_unit_word(t);
  s = std::move(t);
}

}  // namespace

std::string normalize_latex(std::string_view latex, const NormalizationOptions& o) {
  std::string s = unbox(latex, o.boxed);
  if (o.basic_latex) {
    for (char& c : s) {
      if (c == '\n' || c == '\t' || c == '\r' || c == '\f') c = ' ';
    }
    if (s.find("matrix") == std::string::npos && s.find("array") == std::string::npos) {
      // \\frac → \frac (a doubled backslash before a command); keep a row separator \\ before a non-letter.
      std::string out;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 2 < s.size() && s[i + 1] == '\\' && is_alpha(s[i + 2])) continue;
        out += s[i];
      }
      s = std::move(out);
    }
    // "all real numbers" (as words, or in \text{}) is ℝ.
    if (s.size() <= 48 && (s.find("eal") != std::string::npos || s.find("EAL") != std::string::npos)) {
      std::string words;
      for (const char c : s) words += ascii_lower(c);
      replace_all(words, "\\text{", "");
      replace_all(words, "}", "");
      const std::string_view w = trim_ascii_space(words);
      for (std::string_view reals : {"all real numbers", "all reals", "all real values", "real numbers",
                                     "the set of all real numbers", "the set of real numbers"}) {
        if (w == reals) s = "\\mathbb{R}";
      }
    }
    replace_command(s, "left", "");
    replace_command(s, "right", "");
    replace_command(s, "mleft", "");
    replace_command(s, "mright", "");
    replace_command(s, "displaystyle", "");
    replace_all(s, "\\mathrm{th}", "");
    replace_all(s, "^{\\text{th}}", "");
    for (std::string_view cmd : {"\\textbf{", "\\textit{", "\\textrm{", "\\textnormal{", "\\textsf{", "\\mbox{", "\\hbox{"}) {
      replace_all(s, cmd, "\\text{");
    }
    replace_command(s, "dfrac", "\\frac");
    replace_command(s, "tfrac", "\\frac");
    replace_command(s, "cfrac", "\\frac");
    replace_all(s, "~=", "\\approx");
    {  // "{,}" (also "14 {, }916") is a thousands comma
      std::string out;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '{') {
          std::size_t k = i + 1;
          while (k < s.size() && s[k] == ' ') ++k;
          if (k < s.size() && s[k] == ',') {
            ++k;
            while (k < s.size() && s[k] == ' ') ++k;
            if (k < s.size() && s[k] == '}') {
              while (!out.empty() && out.back() == ' ') out.pop_back();
              out += ',';
              i = k;
              while (i + 1 < s.size() && s[i + 1] == ' ') ++i;
              continue;
            }
          }
        }
        out += s[i];
      }
      s = std::move(out);
    }
    replace_text_words(s, ",");
    // "\!" thin negative space (and the spaces after it): 11,\! 111 is one number.
    {
      std::string out;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '!') {
          ++i;
          while (i + 1 < s.size() && s[i + 1] == ' ') ++i;
          continue;
        }
        out += s[i];
      }
      s = std::move(out);
    }
    // Thousands written with a thin space: 1\,000.
    {
      std::string out;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 5 <= s.size() && s[i + 1] == ',' && !out.empty() && is_digit(out.back()) &&
            is_digit(s[i + 2]) && is_digit(s[i + 3]) && is_digit(s[i + 4]) && (i + 5 == s.size() || !is_digit(s[i + 5]))) {
          ++i;
          continue;
        }
        out += s[i];
      }
      s = std::move(out);
    }
    replace_all(s, "\\$", "");
    s.erase(std::remove(s.begin(), s.end(), '$'), s.end());
    s.erase(std::remove(s.begin(), s.end(), '"'), s.end());
    replace_command(s, "quad", " ");
    replace_command(s, "qquad", " ");
    replace_all(s, "\\qquad", " ");
    replace_all(s, "\\quad", " ");
    {
      std::string out;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\\') {
          out += "\\\\";
          ++i;
        } else if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == ' ') {
          out += ' ';
          ++i;
        } else {
          out += s[i];
        }
      }
      s = std::move(out);
    }
    replace_all(s, ",\\ldots", " ");
    replace_all(s, ",\\dots", " ");
    replace_command(s, "ldots", " ");
    replace_command(s, "dots", " ");
    replace_command(s, "cdots", " ");
    replace_all(s, "infinity", "\\infty");
    replace_all(s, "percentage", "\\%");
    replace_all(s, "percent", "\\%");
    replace_all(s, "pct", "\\%");
    replace_all(s, " sqrt", " \\sqrt");
    words_to_commas(s);
  }
  if (o.units) strip_units(s);
  std::string t(trim_ascii_space(s));
  while (!t.empty() && (t.back() == '.' || t.back() == ' ') && !(t.size() >= 2 && t[t.size() - 2] == '\\')) t.pop_back();
  if (o.nits && t.size() > 1 && t[0] == '.' && is_digit(t[1])) {
    std::string z(1, '0');
    z += t;
    t = std::move(z);
  }
  return t;
}

namespace {

struct Span {
  std::size_t start = 0, end = 0;  // match span in the text
  std::vector<std::string> parts;  // raw (un-normalised) contents
  bool percent = false;            // a percent suffix followed the last part
};

constexpr std::array<std::string_view, 5> kPercent = {"\\%", "%", "percentage", "percent", "pct"};

// Extends end over an optional percent suffix, returning the suffix to append ("\%") or empty.
std::size_t percent_suffix(std::string_view s, std::size_t end, bool& found) {
  std::size_t k = end;
  while (k < s.size() && s[k] == ' ') ++k;
  for (auto p : kPercent) {
    if (s.compare(k, p.size(), p) == 0) {
      found = true;
      return k + p.size();
    }
  }
  found = false;
  return end;
}

// Memoised std::string_view::find for the closers of environments: the searches start at increasing positions,
// so a result stays valid until the search start passes it, and scanning a text costs O(n) overall instead of
// O(n²) (64 KiB of "\\(" without a closing "\\)" would otherwise rescan the tail for every opener).
class CloserIndex {
 public:
  explicit CloserIndex(std::string_view s) : s(s) {}
  std::size_t find(int which, std::string_view pattern, std::size_t from) {
    Memo& m = memo_[static_cast<std::size_t>(which)];
    if (m.valid && from >= m.from && (m.result == std::string_view::npos || from <= m.result)) return m.result;
    m = {true, from, s.find(pattern, from)};
    return m.result;
  }
  std::string_view s;

 private:
  struct Memo {
    bool valid = false;
    std::size_t from = 0, result = 0;
  };
  std::array<Memo, 4> memo_{};
};

// One LaTeX environment starting exactly at pos: $$…$$, \[…\], $…$ (one line), \(…\) (one line).
std::optional<Span> env_at(CloserIndex& index, std::size_t pos) {
  const std::string_view s = index.s;
  if (pos >= s.size()) return std::nullopt;
  auto finish = [&](std::size_t cs, std::size_t ce, std::size_t end) -> std::optional<Span> {
    if (ce <= cs || trim_ascii_space(s.substr(cs, ce - cs)).empty()) return std::nullopt;
    Span sp{pos, end, {std::string(s.substr(cs, ce - cs))}, false};
    sp.end = percent_suffix(s, end, sp.percent);
    return sp;
  };
  if (s.compare(pos, 2, "$$") == 0) {
    const auto close = index.find(0, "$$", pos + 2);
    if (close == std::string_view::npos) return std::nullopt;
    return finish(pos + 2, close, close + 2);
  }
  if (s.compare(pos, 2, "\\[") == 0) {
    const auto close = index.find(1, "\\]", pos + 2);
    if (close == std::string_view::npos) return std::nullopt;
    return finish(pos + 2, close, close + 2);
  }
  if (s.compare(pos, 2, "\\(") == 0) {
    const auto close = index.find(2, "\\)", pos + 2);
    if (close == std::string_view::npos) return std::nullopt;
    const auto nl = index.find(3, "\n", pos);
    if (nl != std::string_view::npos && nl < close) return std::nullopt;
    return finish(pos + 2, close, close + 2);
  }
  if (s[pos] == '-' || s.compare(pos, 5, "\\frac") == 0) {  // a bare -?\frac{digits}{digits}
    std::size_t k = pos + (s[pos] == '-' ? 1 : 0);
    if (s.compare(k, 6, "\\frac{") != 0) return std::nullopt;
    k += 6;
    for (int group = 0; group < 2; ++group) {
      if (group == 1) {
        if (k >= s.size() || s[k] != '{') return std::nullopt;
        ++k;
      }
      const std::size_t d0 = k;
      while (k < s.size() && is_digit(s[k])) ++k;
      if (k == d0 || k >= s.size() || s[k] != '}') return std::nullopt;
      ++k;
    }
    Span sp{pos, k, {std::string(s.substr(pos, k - pos))}, false};
    sp.end = percent_suffix(s, k, sp.percent);
    return sp;
  }
  if (s[pos] == '$') {
    if (pos > 0 && (s[pos - 1] == '\\' || is_digit(s[pos - 1]))) return std::nullopt;
    std::size_t k = pos + 1;
    while (k < s.size() && s[k] != '$' && s[k] != '\n') {
      if (s[k] == '\\' && k + 1 < s.size() && s[k + 1] == '$') ++k;  // \$ inside
      ++k;
    }
    if (k >= s.size() || s[k] != '$') return std::nullopt;
    return finish(pos + 1, k, k + 1);
  }
  return std::nullopt;
}

// env_at plus up to 5 more environments joined by ",", "and", "or".
std::optional<Span> env_chain_at(CloserIndex& index, std::size_t pos) {
  const std::string_view s = index.s;
  auto first = env_at(index, pos);
  if (!first) return std::nullopt;
  Span sp = std::move(*first);
  for (int extra = 0; extra < 5; ++extra) {
    std::size_t k = sp.end;
    bool joined = false;
    while (k < s.size() && s[k] == ' ') ++k;
    if (k < s.size() && s[k] == ',') {
      ++k;
      joined = true;
      while (k < s.size() && s[k] == ' ') ++k;
    }
    if (ascii_iequals_at(s, k, "and ") || ascii_iequals_at(s, k, "or ")) {
      k += s[k] == 'a' || s[k] == 'A' ? 4 : 3;
      joined = true;
      while (k < s.size() && s[k] == ' ') ++k;
    }
    if (!joined) break;
    auto next = env_at(index, k);
    if (!next) break;
    sp.end = next->end;
    sp.percent = next->percent;
    sp.parts.push_back(std::move(next->parts[0]));
  }
  return sp;
}

// The bare environments of s, left to right and not overlapping (Math-Verify's unanchored pattern, finditer).
std::vector<Span> bare_environments(CloserIndex& index) {
  const std::string_view s = index.s;
  std::vector<Span> bare;
  for (std::size_t k = 0; k < s.size();) {
    if (s[k] != '$' && s[k] != '\\' && s[k] != '-') {
      ++k;
      continue;
    }
    if (auto sp = env_chain_at(index, k)) {
      k = sp->end;
      bare.push_back(std::move(*sp));
    } else {
      ++k;
    }
  }
  return bare;
}

bool number_boundary_before(std::string_view s, std::size_t pos) {
  if (pos == 0) return true;
  const char c = s[pos - 1];
  return is_ascii_space(c) || c == '=' || c == '*' || c == '(' || c == ':';
}

// Plain-text number or expression at pos (Math-Verify ExprExtractionConfig); a currency sign may come first.
std::optional<Span> expr_at(std::string_view s, std::size_t pos) {
  std::size_t p = pos;
  if (!number_boundary_before(s, p)) return std::nullopt;
  // currency
  for (std::string_view cur : {"$", "\u20ac", "\u00a3", "\u00a5"}) {
    if (s.compare(p, cur.size(), cur) == 0) {
      p += cur.size();
      break;
    }
  }
  std::size_t q = p;
  if (q < s.size() && s[q] == '-') ++q;
  if (q >= s.size() || !(is_digit(s[q]) || (s[q] == '.' && q + 1 < s.size() && is_digit(s[q + 1])))) return std::nullopt;
  // Number: thousands groups ([ ,]ddd), a decimal part with '.' or ',', or a bare integer.
  std::size_t k = q;
  while (k < s.size() && is_digit(s[k])) ++k;
  std::size_t num_end = k;
  if (k - q >= 1 && k - q <= 3 && s[q] != '0') {
    std::size_t g = k;
    int groups = 0;
    while (g + 3 < s.size() + 0 && (s[g] == ',' || s[g] == ' ') && is_digit(s[g + 1]) && is_digit(s[g + 2]) &&
           is_digit(s[g + 3]) && (g + 4 >= s.size() || !is_digit(s[g + 4]))) {
      g += 4;
      ++groups;
    }
    if (groups > 0) {
      num_end = g;
      if (g + 1 < s.size() && s[g] == '.' && is_digit(s[g + 1])) {
        num_end = g + 1;
        while (num_end < s.size() && is_digit(s[num_end])) ++num_end;
      }
    }
  }
  if (num_end == k && k + 1 < s.size() && (s[k] == '.' || s[k] == ',') && is_digit(s[k + 1])) {
    num_end = k + 1;
    while (num_end < s.size() && is_digit(s[num_end])) ++num_end;
  }
  // Expression: digits, letters and operators up to a terminator; must contain an operator.
  std::size_t e = q;
  int paren = 0;
  bool has_op = false;
  while (e < s.size()) {
    const char c = s[e];
    if (is_digit(c) || is_alpha(c) || c == '.') {
    } else if (c == '+' || c == '-' || c == '*' || c == '/' || c == '^') {
      if (e > q) has_op = true;
    } else if (c == '(') {
      ++paren;
      has_op = true;
    } else if (c == ')') {
      if (paren == 0) break;
      --paren;
    } else {
      break;
    }
    ++e;
  }
  while (e > q && (s[e - 1] == '.' || s[e - 1] == '+' || s[e - 1] == '-' || s[e - 1] == '*' || s[e - 1] == '/' ||
                   s[e - 1] == '^' || s[e - 1] == '('))
    --e;
  Span sp;
  sp.start = pos;
  if (has_op && paren == 0 && e > num_end) {
    // An expression must be followed by a terminator (".", ",", ":", space, ")", "$" or end).
    const bool term_ok = e == s.size() || s[e] == '.' || s[e] == ',' || s[e] == ':' || is_ascii_space(s[e]) ||
                         s[e] == ')' || s[e] == '$';
    // and must not contain letters only as a word (2x is fine; "2and" is not an expression)
    if (term_ok) {
      sp.end = e;
      sp.parts.push_back(std::string(s.substr(q, e - q)));
      if (s[q - (q > p ? 1 : 0)] == '-' && q > p) sp.parts[0] = "-" + sp.parts[0];
      if (q > p) sp.parts[0] = std::string(s.substr(p, e - p));
      return sp;
    }
  }
  sp.parts.push_back(std::string(s.substr(p, num_end - p)));
  sp.end = percent_suffix(s, num_end, sp.percent);
  return sp;
}

struct Match {
  int priority;
  std::size_t start, end;
  bool latex;
  std::vector<std::string> parts;
  BoxedMode boxed;
  bool percent = false;
  bool choice = false;
};

// A multiple-choice option exactly at pos, as a standalone token followed by . , : ) a space or the end.
std::optional<Span> choice_at(std::string_view s, std::size_t pos, const std::vector<std::string>& choices) {
  if (pos > 0 && (is_alpha(s[pos - 1]) || is_digit(s[pos - 1]))) return std::nullopt;
  for (const auto& c : choices) {
    if (c.empty() || s.compare(pos, c.size(), c) != 0) continue;
    const std::size_t e = pos + c.size();
    if (e == s.size() || s[e] == '.' || s[e] == ',' || s[e] == ':' || s[e] == ')' || is_ascii_space(s[e])) {
      return Span{pos, e, {c}, false};
    }
  }
  return std::nullopt;
}

// Finds, at or after from (at most max_gap bytes later, no newline), the first position where finder matches.
template <typename Finder>
std::optional<Span> first_after(std::string_view s, std::size_t from, std::size_t max_gap, Finder&& finder) {
  for (std::size_t k = from; k <= from + max_gap && k < s.size(); ++k) {
    if (auto sp = finder(s, k)) return sp;
    if (s[k] == '\n') break;
  }
  return std::nullopt;
}

template <typename Finder>
void anchored(std::string_view s, bool latex, Finder&& finder, std::vector<Match>& out) {
  // "final answer is X. I hope" (0), "final answer … is X" (50), "answer: … X" (100), "answer … X" (200).
  std::size_t i = 0;
  while (true) {
    std::size_t a = std::string_view::npos;
    for (std::size_t k = i; k + 6 <= s.size(); ++k) {
      if ((s[k] == 'a' || s[k] == 'A') && ascii_iequals_at(s, k, "answer")) {
        a = k;
        break;
      }
    }
    if (a == std::string_view::npos) break;
    i = a + 6;
    const bool final_form = a >= 6 && ascii_iequals_at(s, a - 6, "final ");
    std::size_t k = a + 6;
    if (final_form) {
      // priority 0/50: "... is:? X"
      std::size_t m = k;
      for (std::size_t gap = 0; gap <= 100 && m + 2 <= s.size(); ++gap, ++m) {
        if (s[m] == '\n') break;
        if (ascii_iequals_at(s, m, " is") ) {
          std::size_t x = m + 3;
          if (x < s.size() && s[x] == ':') ++x;
          while (x < s.size() && s[x] == ' ') ++x;
          if (auto sp = finder(s, x)) {
            // "I hope" right after (optionally ".")?
            std::size_t h = sp->end;
            if (h < s.size() && s[h] == '.') ++h;
            while (h < s.size() && s[h] == ' ') ++h;
            const bool hope = gap == 0 && ascii_iequals_at(s, h, "i hope");
            out.push_back({hope ? 0 : 50, a - 6, hope ? h + 6 : sp->end, latex, sp->parts, BoxedMode::all, sp->percent});
            break;
          }
        }
      }
    }
    std::size_t x = k;
    if (x < s.size() && s[x] == ':') {
      if (auto sp = first_after(s, x + 1, 50, finder)) {
        out.push_back({100, a, sp->end, latex, sp->parts, BoxedMode::all, sp->percent});
        continue;
      }
    }
    if (auto sp = first_after(s, x, 50, finder)) out.push_back({200, a, sp->end, latex, sp->parts, BoxedMode::all, sp->percent});
  }
}

}  // namespace

std::vector<AnswerCandidate> extract_candidates(std::string_view text, const ExtractOptions& o) {
  std::string_view s = text;
  if (s.size() > o.max_input_bytes) s = s.substr(s.size() - o.max_input_bytes);
  bool in_answer_span = false;
  if (o.answer_tags) {
    const auto open = s.rfind("<answer>");
    if (open != std::string_view::npos) {
      const auto close = s.find("</answer>", open);
      s = s.substr(open + 8, close == std::string_view::npos ? std::string_view::npos : close - open - 8);
      in_answer_span = true;
    }
  }
  std::vector<Match> matches;
  if (o.latex) {
    CloserIndex index(s);
    auto chain_at = [&index](std::string_view, std::size_t k) { return env_chain_at(index, k); };
    anchored(s, true, chain_at, matches);
    if (o.latex_without_anchor) {
      for (auto& b : bare_environments(index)) {
        matches.push_back({300, b.start, b.end, true, b.parts, BoxedMode::all, b.percent});
      }
    }
    if (o.boxed_match_priority >= 0) {
      // (a) a single environment containing \boxed (with its percent suffix).
      for (std::size_t k = 0; k < s.size();) {
        if (s[k] != '$' && s[k] != '\\') {
          ++k;
          continue;
        }
        auto sp = env_at(index, k);
        if (!sp) {
          ++k;
          continue;
        }
        k = sp->end;
        const std::string& c = sp->parts[0];
        if (s.compare(sp->start, 2, "\\(") == 0 || s[sp->start] == '-' || s.compare(sp->start, 5, "\\frac") == 0) continue;
        if (c.find("\\boxed") != std::string::npos || c.find("\\fbox") != std::string::npos) {
          matches.push_back({o.boxed_match_priority, sp->start, sp->end, true, sp->parts, BoxedMode::all, sp->percent});
        }
      }
      auto boxes = find_boxes(s);
      if (!boxes.empty()) {
        // The catch-all \boxed{.+}: from the first box to the last '}', unboxed with the "last" rule.
        const std::size_t first = boxes.front().start;
        std::size_t last_brace = s.rfind('}');
        std::size_t end = (last_brace == std::string_view::npos || last_brace < first) ? s.size() : last_brace + 1;
        matches.push_back({o.boxed_match_priority, first, end, true,
                           {std::string(s.substr(first, end - first))}, BoxedMode::last});
      }
    }
  }
  if (o.expr) {
    anchored(s, false, expr_at, matches);
    if (o.expr_without_anchor) {
      for (std::size_t k = 0; k < s.size();) {
        const char c = s[k];
        if (!(is_digit(c) || c == '-' || c == '.' || c == '$' || static_cast<unsigned char>(c) >= 0x80)) {
          ++k;
          continue;
        }
        if (auto sp = expr_at(s, k)) {
          matches.push_back({300, sp->start, sp->end, false, sp->parts, BoxedMode::none, sp->percent});
          k = std::max(sp->end, k + 1);
        } else {
          ++k;
        }
      }
    }
  }
  if (!o.choices.empty()) {
    auto at = [&o](std::string_view text, std::size_t k) { return choice_at(text, k, o.choices); };
    const std::size_t first = matches.size();
    anchored(s, false, at, matches);
    for (std::size_t k = first; k < matches.size(); ++k) matches[k].choice = true;
    std::size_t k = 0;
    while (k < s.size() && (is_ascii_space(s[k]) || s[k] == '(')) ++k;
    if (auto sp = at(s, k)) matches.push_back({250, sp->start, sp->end, false, sp->parts, BoxedMode::none, false, true});
    if (o.choices_without_anchor) {
      for (std::size_t q = 1; q < s.size(); ++q) {
        if (!is_ascii_space(s[q - 1])) continue;
        if (auto sp2 = at(s, q)) matches.push_back({300, sp2->start, sp2->end, false, sp2->parts, BoxedMode::none, false, true});
      }
    }
  }
  if (o.gsm8k_anchor) {
    const auto h = s.rfind("####");
    if (h != std::string_view::npos) {
      std::size_t k = h + 4;
      while (k < s.size() && s[k] == ' ') ++k;
      std::size_t e = k;
      while (e < s.size() && s[e] != '\n') ++e;
      const std::string_view ans = trim_ascii_space(s.substr(k, e - k));
      if (!ans.empty()) matches.push_back({0, h, e, false, {std::string(ans)}, BoxedMode::none});
    }
  }
  std::stable_sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.end != b.end) return a.end > b.end;
    return a.start < b.start;
  });
  std::vector<AnswerCandidate> out;
  for (auto& m : matches) {
    if (out.size() >= o.max_candidates) break;
    AnswerCandidate c;
    c.latex = m.latex;
    c.choice = m.choice;
    c.priority = m.priority;
    for (auto& p : m.parts) {
      if (m.latex) {
        NormalizationOptions n = o.normalization;
        if (n.boxed != BoxedMode::none) n.boxed = m.boxed == BoxedMode::last ? BoxedMode::last : n.boxed;
        c.parts.push_back(normalize_latex(p, n));
      } else {
        c.parts.push_back(std::string(trim_ascii_space(p)));
      }
    }
    if (m.percent && !c.parts.empty()) c.parts.back() += m.latex ? "\\%" : "%";
    out.push_back(std::move(c));
  }
  if (out.empty() && in_answer_span && !trim_ascii_space(s).empty()) {
    // The span holds the answer itself ("<answer> 7 </answer>", "<answer>\\frac12</answer>"), with no $…$ or
    // \\boxed{} for the LaTeX patterns to find: read it whole, as a bare gold answer is read (wrap_bare_gold).
    ExtractOptions whole = o;
    whole.answer_tags = false;
    return extract_candidates("\\boxed{" + std::string(trim_ascii_space(s)) + "}", whole);
  }
  return out;
}

std::vector<BoxedSpan> boxed_spans(std::string_view text) {
  std::vector<BoxedSpan> out;
  for (Box& box : find_boxes(text)) out.push_back({box.start, box.end, std::move(box.content)});
  return out;
}

std::vector<TextSpan> environment_spans(std::string_view text) {
  CloserIndex index(text);
  std::vector<TextSpan> out;
  for (const Span& span : bare_environments(index)) out.push_back({span.start, span.end});
  return out;
}

std::vector<std::string> extract_answers(std::string_view text, const ExtractOptions& options) {
  std::vector<std::string> out;
  for (const auto& c : extract_candidates(text, options)) {
    std::string joined;
    for (std::size_t k = 0; k < c.parts.size(); ++k) {
      if (k) joined += ", ";
      joined += c.parts[k];
    }
    if (std::find(out.begin(), out.end(), joined) == out.end()) out.push_back(std::move(joined));
  }
  return out;
}

}  // namespace grpo::math
