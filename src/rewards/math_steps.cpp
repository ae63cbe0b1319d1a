// SPDX-License-Identifier: Apache-2.0
// Step-wise math credit (see math_steps.hpp): a hand-written linear scanner finds the candidates, the math verifier
// links them to the reference steps, and a maximum bipartite matching (Kuhn's augmenting paths, edges verified
// lazily) counts the steps found.
#include <grpo/core/ascii_text.hpp>
#include <grpo/core/error.hpp>
#include <grpo/math/verify.hpp>
#include <grpo/rewards/math_steps.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <unordered_set>
#include <utility>

namespace grpo::rewards {
namespace {

using Clock = std::chrono::steady_clock;

// How far a closing math delimiter is looked for: a longer span is a run of prose between two stray dollars.
constexpr std::size_t kMaxSpanBytes = 4096;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }


// Drops surrounding whitespace, trailing punctuation and math delimiters ("$12$." → "12", "\(x\)" → "x").
std::string_view clean(std::string_view s) {
  for (;;) {
    const std::string_view before = trim_ascii_space(s);
    s = before;
    while (!s.empty() && (s.back() == '.' || s.back() == ',' || s.back() == ';' || s.back() == ':' || s.back() == '?')) {
      s.remove_suffix(1);
    }
    s = trim_ascii_space(s);
    if (s.ends_with("\\)") || s.ends_with("\\]") || s.ends_with("\\\\")) {
      s.remove_suffix(2);
    } else if (s.ends_with('$') && !s.ends_with("\\$")) {
      s.remove_suffix(1);
    }
    s = trim_ascii_space(s);
    if (s.starts_with("\\(") || s.starts_with("\\[")) {
      s.remove_prefix(2);
    } else if (s.starts_with('$')) {
      s.remove_prefix(1);
    }
    if (s.size() == before.size()) return s;
  }
}

// A thousands group at j: ',' then exactly three digits ("1,000", not the list "1,2" or "1,0000").
bool thousands_group(std::string_view text, std::size_t j) {
  return j + 3 < text.size() && text[j] == ',' && is_digit(text[j + 1]) &&
         is_digit(text[j + 2]) && is_digit(text[j + 3]) && (j + 4 == text.size() || !is_digit(text[j + 4]));
}

// '=' as an equation sign: not part of <=, >=, !=, ==, =>, =<.
bool is_equals(std::string_view text, std::size_t i) {
  if (text[i] != '=') return false;
  if (i > 0 && (text[i - 1] == '<' || text[i - 1] == '>' || text[i - 1] == '!' || text[i - 1] == '=')) return false;
  if (i + 1 < text.size() && (text[i + 1] == '=' || text[i + 1] == '>' || text[i + 1] == '<')) return false;
  return true;
}

// LaTeX commands that end an expression: relations, implications, spacing, text and a following boxed answer.
bool ends_expression(std::string_view command) {
  static constexpr std::array<std::string_view, 22> kStops = {
      "quad", "qquad", "implies", "Rightarrow", "Longrightarrow", "iff",       "le",      "ge",
      "leq",  "geq",   "neq",     "ne",         "approx",         "equiv",     "text",    "mbox",
      "textbf", "to",  "therefore", "because",  "boxed",          "fbox"};
  return std::find(kStops.begin(), kStops.end(), command) != kStops.end();
}

// The right-hand side that starts at `start` (just after an '='), up to the end of its expression; `end` receives
// where reading stopped. Empty when there is none or it is longer than `max_bytes`.
std::string_view read_rhs(std::string_view text, std::size_t start, bool in_math, std::size_t max_bytes,
                          std::size_t& end) {
  std::size_t j = start;
  while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
  const std::size_t begin = j;
  int depth = 0;
  for (; j < text.size(); ++j) {
    if (j - begin > max_bytes) {
      end = j;
      return {};
    }
    const char c = text[j];
    if (c == '(' || c == '[' || c == '{') {
      ++depth;
      continue;
    }
    if (c == ')' || c == ']' || c == '}') {
      if (depth == 0) break;  // the end of an enclosing group
      --depth;
      continue;
    }
    if (c == '\\') {
      std::size_t k = j + 1;
      while (k < text.size() && is_alpha(text[k])) ++k;
      if (k == j + 1) {
        if (k < text.size() && text[k] == '\\') break;         // "\\": a LaTeX line break
        if (k < text.size() && (text[k] == '(' || text[k] == '[' || text[k] == ')' || text[k] == ']')) break;
        ++j;  // an escaped character such as "\{" or "\,"
        continue;
      }
      if (ends_expression(text.substr(j + 1, k - j - 1))) break;
      j = k - 1;
      continue;
    }
    if (c == '\n' && !in_math) break;
    if (c == '$' || c == '&' || c == '<' || c == '>' || c == '=') break;
    if (depth > 0) continue;
    if (c == ';' || c == '?' || c == ':') break;
    if (c == ',') {
      // "1,000": a thousands separator followed by exactly three digits continues the number.
      if (!(j > begin && is_digit(text[j - 1]) && thousands_group(text, j))) break;
      continue;
    }
    if (c == '.' && (j + 1 == text.size() || !is_digit(text[j + 1]))) break;  // a sentence end, not "0.5"
    if (!in_math && is_ascii_space(c)) {
      // An English word (two or more letters, not a command) ends a right-hand side written in prose.
      std::size_t k = j + 1;
      while (k < text.size() && is_alpha(text[k])) ++k;
      if (k - j - 1 >= 2 && (k == text.size() || text[k] != '(')) break;
    }
  }
  end = j;
  return clean(text.substr(begin, j - begin));
}

// A candidate and where it ends in the reasoning (later = more recent).
struct Candidate {
  std::string_view text;
  std::size_t end = 0;
};

class CandidateScanner {
 public:
  CandidateScanner(std::string_view text, const StepCreditOptions& options) : text_(text), options_(options) {}

  std::vector<Candidate> scan() && {
    std::size_t i = 0;
    while (i < text_.size()) i = step(i);
    return std::move(found_);
  }

 private:
  void add(std::string_view candidate, std::size_t end) {
    candidate = clean(candidate);
    if (!candidate.empty() && candidate.size() <= options_.max_candidate_bytes) found_.push_back({candidate, end});
  }

  // A math span's content: each right-hand side when it holds an '=', else the whole content.
  void add_math(std::size_t begin, std::size_t end) {
    const std::string_view content = text_.substr(begin, end - begin);
    bool has_equals = false;
    for (std::size_t k = 0; k < content.size(); ++k) {
      if (!is_equals(content, k)) continue;
      has_equals = true;
      std::size_t stop = 0;
      const std::string_view rhs = read_rhs(content, k + 1, /*in_math=*/true, options_.max_candidate_bytes, stop);
      if (!rhs.empty()) add(rhs, begin + stop);
    }
    if (!has_equals) add(content, end);
  }

  // The position of `closer` after `from`, within kMaxSpanBytes; npos when absent.
  std::size_t find_closer(std::string_view closer, std::size_t from) const {
    const std::string_view window = text_.substr(from, kMaxSpanBytes);
    for (std::size_t at = window.find(closer); at != std::string_view::npos; at = window.find(closer, at + 1)) {
      if (at > 0 && window[at - 1] == '\\' && closer == "$") continue;  // "\$" is a dollar sign
      return from + at;
    }
    return std::string_view::npos;
  }

  // Scans one construct at i; returns where to continue.
  std::size_t step(std::size_t i) {
    const std::string_view rest = text_.substr(i);
    if (rest.starts_with("$$") || rest.starts_with("\\[") || rest.starts_with("\\(")) {
      const std::string_view closer = rest.starts_with("$$") ? "$$" : rest.starts_with("\\[") ? "\\]" : "\\)";
      const std::size_t close = find_closer(closer, i + 2);
      if (close == std::string_view::npos) return i + 2;
      add_math(i + 2, close);
      return close + 2;
    }
    if (rest.front() == '$' && (i == 0 || text_[i - 1] != '\\')) {
      const std::size_t close = find_closer("$", i + 1);
      if (close == std::string_view::npos) return i + 1;
      add_math(i + 1, close);
      return close + 1;
    }
    if (rest.starts_with("\\boxed{") || rest.starts_with("\\fbox{")) {
      const std::size_t open = i + rest.find('{');
      int depth = 0;
      const std::size_t limit = std::min(text_.size(), open + kMaxSpanBytes);
      for (std::size_t k = open; k < limit; ++k) {
        if (text_[k] == '{') ++depth;
        if (text_[k] == '}' && --depth == 0) {
          add_math(open + 1, k);
          return k + 1;
        }
      }
      return open + 1;
    }
    if (is_equals(text_, i)) {
      std::size_t stop = i + 1;
      const std::string_view rhs = read_rhs(text_, i + 1, /*in_math=*/false, options_.max_candidate_bytes, stop);
      if (rhs.empty()) return i + 1;
      add(rhs, stop);
      return std::max(stop, i + 1);  // numbers inside the right-hand side are not candidates of their own
    }
    if (options_.numbers && (is_digit(rest.front()) || (rest.front() == '-' && rest.size() > 1 && is_digit(rest[1])))) {
      return number(i);
    }
    return i + 1;
  }

  // A standalone number at i: -12, 0.5, 3/4, 1,000. Digits inside words or LaTeX arguments ("x2", "2x", "\frac{1}{2}",
  // "10^3") are not standalone.
  std::size_t number(std::size_t i) {
    const char before = i == 0 ? ' ' : text_[i - 1];
    std::size_t j = i + (text_[i] == '-' ? 1 : 0);
    const auto digits = [&] {
      while (j < text_.size() && is_digit(text_[j])) ++j;
    };
    digits();
    while (thousands_group(text_, j)) j += 4;
    if (j + 1 < text_.size() && text_[j] == '.' && is_digit(text_[j + 1])) {
      ++j;
      digits();
    }
    if (j + 1 < text_.size() && text_[j] == '/' && is_digit(text_[j + 1])) {
      ++j;
      digits();
    }
    const char after = j < text_.size() ? text_[j] : ' ';
    const bool glued_before = is_alpha(before) || is_digit(before) || before == '_' || before == '^' ||
                              before == '{' || before == '}' || before == '\\' || before == '.';
    const bool glued_after = is_alpha(after) || after == '_' || after == '^' || after == '\\' || after == '{';
    if (!glued_before && !glued_after) add(text_.substr(i, j - i), j);
    return j;
  }

  std::string_view text_;
  const StepCreditOptions& options_;
  std::vector<Candidate> found_;
};

// The most recent distinct candidates of `reasoning`, most recent first.
std::vector<std::string_view> candidate_views(std::string_view reasoning, const StepCreditOptions& options) {
  if (reasoning.size() > options.max_scan_bytes) {
    // Start at a line boundary inside the window when there is one, so a math span is not entered half-way.
    std::size_t cut = reasoning.size() - options.max_scan_bytes;
    const std::size_t line = reasoning.find('\n', cut);
    if (line != std::string_view::npos) cut = line + 1;
    reasoning.remove_prefix(cut);
  }
  std::vector<Candidate> all = CandidateScanner(reasoning, options).scan();
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) { return a.end > b.end; });
  std::vector<std::string_view> out;
  std::unordered_set<std::string_view> seen;
  for (const Candidate& candidate : all) {
    if (out.size() == options.max_candidates) break;
    if (seen.insert(candidate.text).second) out.push_back(candidate.text);
  }
  return out;
}

// Whether `text` holds an English word: a whitespace-separated token of three or more letters that is not a function
// name written without its backslash ("sin", "log", ...).
bool has_prose(std::string_view text) {
  static constexpr std::array<std::string_view, 14> kFunctions = {"sin", "cos", "tan", "cot", "sec", "csc", "log",
                                                                  "exp", "max", "min", "gcd", "lcm", "mod", "sqrt"};
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_ascii_space(text[i])) ++i;
    std::size_t end = i;
    while (end < text.size() && !is_ascii_space(text[end])) ++end;
    std::string_view token = text.substr(i, end - i);
    while (!token.empty() && (token.back() == ',' || token.back() == '.' || token.back() == ';' ||
                              token.back() == ':' || token.back() == '?' || token.back() == '!')) {
      token.remove_suffix(1);
    }
    if (token.size() >= 3 && std::all_of(token.begin(), token.end(), is_alpha) &&
        std::find(kFunctions.begin(), kFunctions.end(), token) == kFunctions.end()) {
      return true;
    }
    i = end;
  }
  return false;
}

// How both sides are read: a bare expression is read whole as \boxed{...} (math::wrap_bare_gold), LaTeX and plain
// expressions, boxed first.
math::ExtractOptions extraction() {
  math::ExtractOptions options;
  options.boxed_match_priority = 0;
  return options;
}

}  // namespace

void StepCreditOptions::validate() const {
  GRPO_CHECK_CONFIG(max_candidates > 0, "StepCreditOptions: max_candidates must be positive");
  GRPO_CHECK_CONFIG(max_scan_bytes > 0, "StepCreditOptions: max_scan_bytes must be positive");
  GRPO_CHECK_CONFIG(max_candidate_bytes > 0, "StepCreditOptions: max_candidate_bytes must be positive");
  GRPO_CHECK_CONFIG(float_rounding >= 0 && float_rounding <= 100,
                    "StepCreditOptions: float_rounding must be in [0, 100], got {}", float_rounding);
}

std::string_view step_reasoning(std::string_view completion) {
  if (const std::size_t think_end = completion.find("</think>"); think_end != std::string_view::npos) {
    return completion.substr(0, think_end);
  }
  if (const std::size_t answer = completion.rfind("<answer>"); answer != std::string_view::npos) {
    return completion.substr(0, answer);
  }
  return completion;
}

std::string step_result(std::string_view step) {
  const std::string_view cleaned = clean(step);
  for (std::size_t k = cleaned.size(); k-- > 0;) {
    if (!is_equals(cleaned, k)) continue;
    std::size_t stop = 0;
    return std::string(read_rhs(cleaned, k + 1, /*in_math=*/false, std::string_view::npos, stop));
  }
  return std::string(cleaned);
}

std::vector<std::string> step_candidates(std::string_view reasoning, const StepCreditOptions& options) {
  options.validate();
  std::vector<std::string> out;
  for (std::string_view candidate : candidate_views(reasoning, options)) out.emplace_back(candidate);
  return out;
}

StepMatch match_steps(std::string_view reasoning, std::span<const std::string> steps,
                      const StepCreditOptions& options, Clock::time_point deadline) {
  options.validate();
  StepMatch match;
  const math::ExtractOptions extract = extraction();
  math::VerifyOptions verify;
  verify.float_rounding = options.float_rounding;
  verify.deadline = deadline;

  // Reference results; blank steps are not counted.
  std::vector<math::ParsedAnswer> gold;
  for (const std::string& step : steps) {
    const std::string result = step_result(step);
    if (result.empty()) continue;
    ++match.steps;
    if (Clock::now() >= deadline) {
      match.complete = false;
      return match;
    }
    // Prose ("Therefore the answer is 5") is read by its last candidate, as a reasoning would be; an expression whole.
    std::string_view read = result;
    std::vector<std::string_view> last;
    if (has_prose(result)) last = candidate_views(result, options);
    if (!last.empty()) read = last.front();
    gold.push_back(math::parse_answer(math::wrap_bare_gold(read), extract, verify.limits, deadline));
  }
  if (gold.empty() || reasoning.empty()) return match;

  const std::vector<std::string_view> candidates = candidate_views(reasoning, options);
  match.candidates = candidates.size();
  if (candidates.empty()) return match;

  // Candidates are parsed when first compared; edges are verified once and remembered (-1 = not yet known).
  std::vector<std::optional<math::ParsedAnswer>> parsed(candidates.size());
  std::vector<std::int8_t> edges(gold.size() * candidates.size(), -1);
  const auto linked = [&](std::size_t s, std::size_t c) {
    std::int8_t& edge = edges[s * candidates.size() + c];
    if (edge >= 0) return edge == 1;
    edge = 0;
    if (Clock::now() >= deadline) {
      match.complete = false;
      return false;
    }
    if (!parsed[c]) parsed[c] = math::parse_answer(math::wrap_bare_gold(candidates[c]), extract, verify.limits, deadline);
    const math::Verdict verdict = math::verify_parsed(gold[s], *parsed[c], verify);
    if (verdict == math::Verdict::timeout) match.complete = false;
    edge = verdict == math::Verdict::equal ? 1 : 0;
    return edge == 1;
  };

  // Kuhn's algorithm: for each step, an augmenting path over candidates not yet visited in this round.
  std::vector<std::ptrdiff_t> step_of(candidates.size(), -1);
  std::vector<char> visited(candidates.size());
  const auto augment = [&](auto& self, std::size_t s) -> bool {
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      if (visited[c] || !linked(s, c)) continue;
      visited[c] = 1;
      if (step_of[c] < 0 || self(self, static_cast<std::size_t>(step_of[c]))) {
        step_of[c] = static_cast<std::ptrdiff_t>(s);
        return true;
      }
    }
    return false;
  };
  for (std::size_t s = 0; s < gold.size(); ++s) {
    std::fill(visited.begin(), visited.end(), 0);
    if (augment(augment, s)) ++match.matched;
  }
  return match;
}

float step_credit(std::string_view reasoning, std::span<const std::string> steps, const StepCreditOptions& options,
                  Clock::time_point deadline) {
  return match_steps(reasoning, steps, options, deadline).credit();
}

const std::vector<std::string>* reference_steps(const Row& row, std::string_view field) {
  const auto* steps = std::get_if<std::vector<std::string>>(row.find(field));
  return steps != nullptr && !steps->empty() ? steps : nullptr;
}

MathStepsReward::MathStepsReward(MathStepsOptions options) : options_(std::move(options)) {
  GRPO_CHECK_CONFIG(!options_.steps_field.empty(), "math_steps: steps_field must not be empty");
  options_.credit.validate();
}

std::vector<std::optional<float>> MathStepsReward::score(std::span<const Completion> batch,
                                                         const ScoringContext& context) const {
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const Completion& completion : batch) {
    const std::vector<std::string>* steps =
        completion.row ? reference_steps(*completion.row, options_.steps_field) : nullptr;
    if (steps == nullptr) {
      values.emplace_back(std::nullopt);
      continue;
    }
    const StepMatch match = match_steps(step_reasoning(completion.text), *steps, options_.credit, context.deadline);
    values.push_back(match.complete && match.steps > 0 ? std::optional<float>(match.credit()) : std::nullopt);
  }
  return values;
}

}  // namespace grpo::rewards
