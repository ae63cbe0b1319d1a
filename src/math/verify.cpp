// SPDX-License-Identifier: Apache-2.0
// The verify() pipeline: extraction candidates → parse (first success per Math-Verify's group rules) → compare.
#include <algorithm>
#include <cctype>
#include <set>

#include "grpo/core/ascii_text.hpp"
#include "grpo/core/error.hpp"
#include "grpo/math/verify.hpp"

#include <fmt/format.h>

namespace grpo::math {
namespace {

void flatten_into(Expr& set, Expr e) {
  if (e.kind == ExprKind::set) {
    for (auto& a : e.args) set.args.push_back(std::move(a));
  } else {
    set.args.push_back(std::move(e));
  }
}

std::optional<Expr> parse_candidate(const AnswerCandidate& c, const ParseOptions& limits, bool lowercase_choices) {
  if (c.choice) {  // a multiple-choice option compares as text
    Expr e;
    e.kind = ExprKind::text;
    e.text = c.parts.empty() ? std::string() : c.parts[0];
    if (lowercase_choices) {
      for (char& ch : e.text) ch = ascii_lower(ch);
    }
    return e;
  }
  auto parse_one = [&](const std::string& s) -> std::optional<Expr> {
    auto e = c.latex ? parse_latex(s, limits) : parse_plain(s, limits);
    if (e || !c.latex) return e;
    // Retry on the text after the last '=' (a = b = c) when there is no list separator.
    if (s.find(',') != std::string::npos || s.find(';') != std::string::npos) return e;
    const auto n = std::count(s.begin(), s.end(), '=');
    if (n < 2) return e;
    return parse_latex(std::string_view(s).substr(s.rfind('=') + 1), limits);
  };
  if (c.parts.size() == 1) return parse_one(c.parts[0]);
  Expr set;
  set.kind = ExprKind::set;
  for (const auto& part : c.parts) {
    auto e = parse_one(part);
    if (!e) return std::nullopt;
    flatten_into(set, std::move(*e));
  }
  return set;
}

void validate(const ExtractOptions& e, std::string_view side) {
  GRPO_CHECK_CONFIG(e.boxed_match_priority >= -1, "VerifyOptions.{}.boxed_match_priority must be >= -1, got {}", side,
                    e.boxed_match_priority);
  GRPO_CHECK_CONFIG(e.max_input_bytes > 0, "VerifyOptions.{}.max_input_bytes must be positive", side);
  GRPO_CHECK_CONFIG(e.max_candidates > 0, "VerifyOptions.{}.max_candidates must be positive", side);
  GRPO_CHECK_CONFIG(e.latex || e.expr || !e.choices.empty(),
                    "VerifyOptions.{}: enable at least one of latex / expr / choices extraction", side);
}

void validate(const VerifyOptions& o) {
  GRPO_CHECK_CONFIG(o.float_rounding >= 0 && o.float_rounding <= 100,
                    "VerifyOptions.float_rounding must be in [0, 100], got {}", o.float_rounding);
  GRPO_CHECK_CONFIG(o.numeric_precision >= 1 && o.numeric_precision <= 1000,
                    "VerifyOptions.numeric_precision must be in [1, 1000], got {}", o.numeric_precision);
  GRPO_CHECK_CONFIG(o.random_points >= 1 && o.random_points <= 64,
                    "VerifyOptions.random_points must be in [1, 64], got {}", o.random_points);
  GRPO_CHECK_CONFIG(o.limits.max_depth >= 1 && o.limits.max_length >= 1 && o.limits.max_nodes >= 1,
                    "VerifyOptions.limits: max_depth, max_length and max_nodes must be positive");
  validate(o.gold, "gold");
  validate(o.pred, "pred");
}


}  // namespace

ParsedAnswer parse_answer(std::string_view text, const ExtractOptions& eo, const ParseOptions& parse,
                          std::chrono::steady_clock::time_point deadline) {
  ParsedAnswer out;
  ParseOptions limits = parse;
  limits.malformed_operators = limits.malformed_operators && eo.normalization.malformed_operators;
  const auto candidates = extract_candidates(text, eo);
  bool have_fallback = false;
  std::size_t k = 0;
  while (k < candidates.size()) {
    const int group = candidates[k].priority;
    for (; k < candidates.size() && candidates[k].priority == group; ++k) {
      const auto& c = candidates[k];
      if (!have_fallback && eo.string_fallback) {
        for (std::size_t q = 0; q < c.parts.size(); ++q) {
          if (q) out.fallback += ',';
          out.fallback += c.parts[q];
        }
        have_fallback = true;
      }
      if (std::chrono::steady_clock::now() > deadline) return out;
      if (auto e = parse_candidate(c, limits, eo.lowercase_choices)) {
        out.expr = std::move(e);
        return out;
      }
      if (eo.mode == ExtractionMode::first_match) return out;
    }
  }
  return out;
}

Verdict verify_parsed(const ParsedAnswer& g, const ParsedAnswer& p, const VerifyOptions& o) {
  validate(o);
  if (!g.expr && trim_ascii_space(g.fallback).empty()) return Verdict::unknown;
  if (!trim_ascii_space(g.fallback).empty() && trim_ascii_space(g.fallback) == trim_ascii_space(p.fallback)) return Verdict::equal;
  if (!g.expr || !p.expr) return Verdict::not_equal;
  return compare(*g.expr, *p.expr, o);
}

namespace {

bool past(const VerifyOptions& o) { return std::chrono::steady_clock::now() > o.deadline; }

bool agree(const Expr& a, const Expr& b, const VerifyOptions& o) {
  return compare(a, b, o) == Verdict::equal || compare(b, a, o) == Verdict::equal;
}

// A math delimiter: an unescaped $ (\\$ is a currency sign), \\(, \\[, or a box.
bool has_delimiters(std::string_view s) {
  for (std::size_t k = s.find('$'); k != std::string_view::npos; k = s.find('$', k + 1)) {
    if (k == 0 || s[k - 1] != '\\') return true;
  }
  for (std::string_view marker : {"\\(", "\\[", "\\boxed", "\\fbox"}) {
    if (s.find(marker) != std::string_view::npos) return true;
  }
  return false;
}

// Prose: a run of three or more letters that is not a LaTeX command or the name argument of one ("I think 4",
// "4 apples"; not "\\begin{pmatrix}", "\\operatorname{lcm}", "\\mathbb{R}").
bool has_prose(std::string_view s) {
  std::size_t run = 0;
  for (std::size_t k = 0; k < s.size(); ++k) {
    const bool letter = std::isalpha(static_cast<unsigned char>(s[k])) != 0;
    if (letter && run == 0 && k > 0 && s[k - 1] == '\\') {
      const std::size_t name = k;
      while (k + 1 < s.size() && std::isalpha(static_cast<unsigned char>(s[k + 1])) != 0) ++k;  // a command name
      const std::string_view command = s.substr(name, k + 1 - name);
      const bool takes_name = command == "begin" || command == "end" || command == "operatorname" ||
                              command == "mathrm" || command == "mathbf" || command == "mathbb" ||
                              command == "mathcal" || command == "mathit" || command == "mathsf";
      if (takes_name && k + 1 < s.size() && s[k + 1] == '{') {
        const std::size_t close = s.find('}', k + 1);
        if (close != std::string_view::npos) k = close;
      }
      continue;
    }
    run = letter ? run + 1 : 0;
    if (run >= 3) return true;
  }
  return false;
}

// A name rather than a value: symbols, words and products, tuples or function applications of them with no number or
// constant ("$ABCDEFGH$", "$n$", "$f(x)$", "$(x, y)$" in "the volume of $ABCDEFGH$ is 120").
bool is_name(const Expr& e) {
  switch (e.kind) {
    case ExprKind::symbol: return e.text != "e";
    case ExprKind::text: return true;
    case ExprKind::mul:  // "ABCDEFGH": e is a letter of the name here
      return std::any_of(e.args.begin(), e.args.end(), is_name) &&
             std::all_of(e.args.begin(), e.args.end(),
                         [](const Expr& a) { return is_name(a) || (a.kind == ExprKind::symbol && a.text == "e"); });
    case ExprKind::tuple:
    case ExprKind::func: return !e.args.empty() && std::all_of(e.args.begin(), e.args.end(), is_name);
    default: return false;
  }
}

// The symbols of an expression.
void symbols_of(const Expr& e, std::set<std::string>& out) {
  if (e.kind == ExprKind::symbol) out.insert(e.text);
  for (const Expr& a : e.args) symbols_of(a, out);
}

// "1 000", "12 345 678.5": a number grouped in thousands by spaces (Math-Verify reads it as one number).
bool space_grouped_number(std::string_view s) {
  std::size_t k = s.starts_with('-') ? 1 : 0;
  const std::size_t lead = k;
  while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
  if (k == lead || k - lead > 3) return false;
  bool grouped = false;
  while (k < s.size() && s[k] == ' ') {
    for (int d = 1; d <= 3; ++d) {
      if (k + d >= s.size() || !std::isdigit(static_cast<unsigned char>(s[k + d]))) return false;
    }
    k += 4;
    grouped = true;
  }
  if (k < s.size() && s[k] == '.') {
    ++k;
    while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
  }
  return grouped && k == s.size();
}

// What a phrase or line states after its anchor: "final answer is X." and "answer: X" give "X" (a '.' ending the
// sentence dropped); text without an anchor is returned as it is.
std::string_view after_answer_anchor(std::string_view s) {
  std::size_t k = 0;
  const auto skip = [&](std::string_view chars) {
    while (k < s.size() && chars.find(s[k]) != std::string_view::npos) ++k;
  };
  if (ascii_iequals_at(s, k, "final")) {
    k += 5;
    skip(" *_");
  }
  if (!ascii_iequals_at(s, k, "answer")) return s;
  k += 6;
  skip(" *_:");
  if (ascii_iequals_at(s, k, "is ")) k += 3;
  else if (k < s.size() && s[k] == '=') ++k;
  skip(" *_:");
  std::string_view rest = trim_ascii_space(s.substr(k));
  if (!rest.empty() && rest.back() == '.') rest = trim_ascii_space(rest.substr(0, rest.size() - 1));
  return rest;
}

bool is_letter(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// Whether text ends with a value: a digit, a closing $ ) ] } or %, or a one-letter token ("x", "A").
bool ends_with_value(std::string_view s) {
  s = trim_ascii_space(s);
  if (s.empty()) return false;
  const char c = s.back();
  if (std::isdigit(static_cast<unsigned char>(c)) || std::string_view("$)]}%").find(c) != std::string_view::npos) {
    return true;
  }
  return is_letter(c) && (s.size() == 1 || !is_letter(s[s.size() - 2]));
}

// Whether text starts with a value, after hedging words ("maybe 5", "perhaps $x = 2$"): a digit, $ \ - ( [ { or a
// one-letter token.
bool starts_with_value(std::string_view s) {
  s = trim_ascii_space(s);
  for (bool skipped = true; skipped;) {
    skipped = false;
    for (std::string_view word : {"either", "maybe", "perhaps", "possibly", "probably", "alternatively", "also",
                                  "even", "just", "else", "it is", "it's", "is"}) {
      if (ascii_iequals_at(s, 0, word) && s.size() > word.size() && !is_letter(s[word.size()])) {
        s = trim_ascii_space(s.substr(word.size()));
        if (!s.empty() && s.front() == ',') s = trim_ascii_space(s.substr(1));
        skipped = true;
      }
    }
  }
  if (s.empty()) return false;
  const char c = s.front();
  if (std::isdigit(static_cast<unsigned char>(c)) || std::string_view("$\\-([{").find(c) != std::string_view::npos) {
    return true;
  }
  return is_letter(c) && (s.size() == 1 || !is_letter(s[1]));
}

// What a math environment ($…$, $$…$$, \\(…\\), \\[…\\]) holds between its delimiters, trimmed; empty for anything else.
std::string_view environment_content(std::string_view env) {
  for (const auto& [open, close] : {std::pair<std::string_view, std::string_view>{"$$", "$$"}, {"\\[", "\\]"},
                                    {"\\(", "\\)"}, {"$", "$"}}) {
    if (env.size() >= open.size() + close.size() && env.starts_with(open) && env.ends_with(close)) {
      return trim_ascii_space(env.substr(open.size(), env.size() - open.size() - close.size()));
    }
  }
  return {};
}

// The parts of a stated answer joined by "or" / "and" outside braces and $…$ ("4 or 5", "x = 1 \text{ or } x = 2",
// "A and B"); one part when there is no such connective. `joined_by_and`, when given, is set when an "and" joins two.
// With `between_values`, only a connective with a value on each side splits ("4 or maybe 5"; not the prose of "move
// the terms to the left side and simplify", for a last line of prose).
std::vector<std::string> split_connectives(std::string_view s, bool* joined_by_and = nullptr, bool between_values = false) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  int depth = 0;
  bool math = false;
  const auto connective_at = [&](std::size_t k) -> std::size_t {  // its length, or 0
    for (std::string_view c : {" or ", " and ", "\\text{ or }", "\\text{or}", "\\text{ and }", "\\text{and}",
                               "\\textrm{ or }", "\\textrm{or}", "\\mathrm{ or }", "\\mathrm{or}"}) {
      if (s.compare(k, c.size(), c) == 0) return c.size();
    }
    return 0;
  };
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (depth == 0 && !math) {
      if (const std::size_t n = connective_at(k);
          n > 0 && (!between_values || (ends_with_value(s.substr(start, k - start)) && starts_with_value(s.substr(k + n))))) {
        if (joined_by_and != nullptr && s.substr(k, n).find("and") != std::string_view::npos) *joined_by_and = true;
        parts.emplace_back(s.substr(start, k - start));
        start = k + n;
        k = start - 1;
        continue;
      }
    }
    const char c = s[k];
    if (c == '\\' && k + 1 < s.size() && (s[k + 1] == '{' || s[k + 1] == '}' || s[k + 1] == '$')) {
      ++k;
    } else if (c == '$') {
      math = !math;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && depth > 0) {
      --depth;
    }
  }
  parts.emplace_back(s.substr(start));
  std::erase_if(parts, [](const std::string& p) { return trim_ascii_space(p).empty(); });
  return parts;
}

// The distinct values a stated answer holds, appended to `values`: what a careful grader reads as offered answers.
//   - Each part between "or" / "and" counts on its own ("4 or 5", "x = 1 \\text{ or } x = 2").
//   - A part with no $…$ / \\(…\\) / \\boxed is the answer itself when it is a box, or bare ("x = 4", "\\frac12",
//     "3\\sqrt{13}", "(-2, 1)", "6 - 5i"): read whole, as a bare gold is, so it is one value however many numbers it holds.
//   - Boxes inside a region (an answer tag, a phrase, a line) are its answer: each box is one value, read whole.
//   - Otherwise each math environment is one value, read whole ("the answer is $(-2, 1)$"), and so is each number in
//     the prose around them ("April 4, 2023" holds two; "$4$, maybe 5" two). An answer tag or #### line of prose with
//     no value is then read whole.
// Stops once `values` holds more than `limit` (the verdict is then known: more values than the gold has), which
// keeps a completion of thousands of boxes or alternatives linear.
void add_values(const AnswerMarker& m, const VerifyOptions& o, std::size_t limit, std::vector<Expr>& values) {
  if (values.size() > limit) return;
  if (const std::vector<std::string> parts = split_connectives(m.text, nullptr, m.source == AnswerSource::last_line);
      parts.size() > 1) {
    for (const std::string& part : parts) {
      if (values.size() > limit) return;
      add_values({m.source, m.begin, m.end, std::string(trim_ascii_space(part))}, o, limit, values);
    }
    return;
  }
  bool added = false;
  const auto add = [&](Expr e) {
    added = true;
    if (values.size() > limit) return;
    for (const Expr& v : values) {
      if (agree(v, e, o)) return;
    }
    values.push_back(std::move(e));
  };
  ExtractOptions eo = o.pred;
  eo.answer_tags = false;
  ParseOptions limits = o.limits;
  limits.malformed_operators = limits.malformed_operators && eo.normalization.malformed_operators;
  const auto read_whole = [&](std::string_view text) {
    ExtractOptions whole = eo;
    whole.latex = true;
    whole.boxed_match_priority = 0;
    whole.mode = ExtractionMode::first_match;
    std::string plain(text);
    if (space_grouped_number(plain)) std::erase(plain, ' ');
    const std::string boxed = "\\boxed{" + plain + "}";
    if (ParsedAnswer parsed = parse_answer(boxed, whole, o.limits, o.deadline); parsed.expr) add(std::move(*parsed.expr));
  };
  std::vector<Expr> found;  // the environments' and the prose's values, before names are set aside
  const auto add_candidates = [&](std::string_view text, const ExtractOptions& targets) {
    for (const AnswerCandidate& c : extract_candidates(text, targets)) {
      if (past(o) || found.size() > limit + 8) return;
      if (auto e = parse_candidate(c, limits, targets.lowercase_choices)) found.push_back(std::move(*e));
    }
  };
  const bool delimited = has_delimiters(m.text);
  const bool prose = has_prose(m.text);
  if (!delimited && (m.source == AnswerSource::boxed || (!prose && m.source != AnswerSource::final_answer_phrase))) {
    read_whole(m.text);
    if (added || m.source == AnswerSource::boxed) return;
  }
  if (m.source == AnswerSource::final_answer_phrase || m.source == AnswerSource::last_line) {
    // "the final answer is 2\\frac{1}{2}", "answer: (-2, 1)": what follows the anchor is the answer itself.
    const std::string_view stated = after_answer_anchor(m.text);
    if (stated.size() < m.text.size() && !stated.empty() && !has_delimiters(stated) && !has_prose(stated)) {
      read_whole(stated);
      if (added) return;
    }
  }
  if (m.source != AnswerSource::boxed) {
    if (const std::vector<BoxedSpan> boxes = boxed_spans(m.text); !boxes.empty()) {
      for (const BoxedSpan& box : boxes) {
        if (values.size() > limit) return;
        add_values({AnswerSource::boxed, m.begin + box.begin, m.begin + box.end,
                    std::string(trim_ascii_space(box.content))}, o, limit, values);
      }
      return;
    }
  }
  // Each environment whole (LaTeX targets only), then the numbers of the prose with the environments blanked out. An
  // environment of alternatives ("$x < -2 \\text{ or } x > 2$") states them as a box would: each on its own.
  std::string latex_text = m.text, prose_text = m.text;
  const auto blank = [](std::string& text, const TextSpan& span) {
    std::fill(text.begin() + static_cast<std::ptrdiff_t>(span.begin), text.begin() + static_cast<std::ptrdiff_t>(span.end), ' ');
  };
  for (const TextSpan& span : environment_spans(m.text)) {
    blank(prose_text, span);
    const std::string_view content = environment_content(std::string_view(m.text).substr(span.begin, span.end - span.begin));
    if (!content.empty() && !has_delimiters(content) && split_connectives(content).size() > 1) {
      blank(latex_text, span);
      add_values({AnswerSource::boxed, m.begin + span.begin, m.begin + span.end, std::string(content)}, o, limit, values);
      added = true;
    }
  }
  ExtractOptions latex = eo;
  latex.latex_without_anchor = true;
  latex.expr = false;
  add_candidates(latex_text, latex);
  ExtractOptions plain = eo;
  plain.latex = false;
  plain.expr_without_anchor = true;
  add_candidates(prose_text, plain);
  // Names are not answers when a value is stated beside them ("the largest $n$ is 34").
  if (std::any_of(found.begin(), found.end(), [](const Expr& e) { return !is_name(e); })) std::erase_if(found, is_name);
  if (found.size() > 1 && m.source == AnswerSource::last_line) {
    // A last line with no anchor is no list of answers: its last value is what it states ("the number is not 10
    // which is 1,000.99"), the candidate Math-Verify takes (by priority, rightmost first). One value is graded, so
    // writing several gains nothing; values joined by "or"/"and" were split above and stay a hedge.
    ExtractOptions both = eo;
    both.latex_without_anchor = both.expr_without_anchor = true;
    if (ParsedAnswer last = parse_answer(m.text, both, o.limits, o.deadline); last.expr) {
      found.clear();
      found.push_back(std::move(*last.expr));
    }
  }
  for (Expr& e : found) add(std::move(e));
  if (!added && !delimited && (m.source == AnswerSource::answer_tag || m.source == AnswerSource::gsm8k)) read_whole(m.text);
}

Grade timed_out(Grade out) {
  out.verdict = Verdict::timeout;
  return out;
}

Grade grade_whole_text(std::string_view gold, std::string_view pred, const VerifyOptions& o) {
  Grade out;
  out.graded = std::string(pred);
  const ParsedAnswer g = parse_answer(gold, o.gold, o.limits, o.deadline);
  if (past(o)) return timed_out(std::move(out));
  out.gold_parsed = g.expr || !trim_ascii_space(g.fallback).empty();
  if (!out.gold_parsed) return out;
  const ParsedAnswer p = parse_answer(pred, o.pred, o.limits, o.deadline);
  if (past(o)) return timed_out(std::move(out));
  out.verdict = verify_parsed(g, p, o);
  return out;
}

}  // namespace

Grade grade(std::string_view gold, std::string_view pred, const VerifyOptions& o) {
  validate(o);
  if (o.grading == Grading::whole_text) return grade_whole_text(gold, pred, o);
  Grade out;
  // A bare gold is read whole; when that finds nothing, as written.
  ParsedAnswer g = parse_answer(wrap_bare_gold(gold), o.gold, o.limits, o.deadline);
  if (!g.expr && trim_ascii_space(g.fallback).empty()) g = parse_answer(gold, o.gold, o.limits, o.deadline);
  if (past(o)) return timed_out(std::move(out));
  out.gold_parsed = g.expr || !trim_ascii_space(g.fallback).empty();
  if (!out.gold_parsed) return out;
  // A gold of relations of one variable (parsed as a set of relations) listing solutions, "x = 2 \\text{ or } x = -2",
  // or joined by "or", "x < -2 \\text{ or } x > 2", is the union of the sets they describe ("x > 1 and x < 3" is not).
  if (o.solved_relation_as_set && g.expr && g.expr->kind == ExprKind::set && !g.expr->args.empty() &&
      std::all_of(g.expr->args.begin(), g.expr->args.end(), is_relation)) {
    std::set<std::string> variables;
    symbols_of(*g.expr, variables);
    bool conjunction = false;
    split_connectives(gold, &conjunction);
    const bool solutions = std::all_of(g.expr->args.begin(), g.expr->args.end(),
                                       [](const Expr& r) { return r.kind == ExprKind::relation && r.rel == Rel::eq; });
    if (variables.size() == 1 && (solutions || !conjunction)) {
      Expr sets;
      sets.kind = ExprKind::set_union;
      for (const Expr& relation : g.expr->args) {
        if (std::optional<Expr> s = solved_relation_set(relation)) sets.args.push_back(std::move(*s));
      }
      if (sets.args.size() == g.expr->args.size()) g.expr = std::move(sets);
    } else if (variables.size() == 1) {  // "x > 1 \\text{ and } x < 3": both hold, (1, 3)
      Expr both = *g.expr;
      both.kind = ExprKind::logical_and;
      if (std::optional<Expr> s = solved_relation_set(both)) g.expr = std::move(*s);
    }
  }

  const FinalAnswer final_answer = find_final_answer(pred, o.final_answer);
  out.source = final_answer.region.source;
  out.graded = final_answer.region.text;
  out.verdict = Verdict::not_equal;
  if (final_answer.region.source == AnswerSource::none) {
    out.reason = "no final answer";
    return out;
  }
  // A gold of k values is matched by at most k stated values; one more already decides the verdict.
  const std::size_t limit =
      g.expr && (g.expr->kind == ExprKind::set || g.expr->kind == ExprKind::tuple || g.expr->kind == ExprKind::set_union)
          ? g.expr->args.size() + 1
          : 2;
  std::vector<Expr> values;
  add_values(final_answer.region, o, limit, values);
  if (values.empty()) {
    if (past(o)) return timed_out(std::move(out));
    // Nothing parses: Math-Verify's string fallback (two equal normalised strings are equal).
    ExtractOptions whole = o.pred;
    whole.answer_tags = false;
    const ParsedAnswer p = parse_answer("\\boxed{" + final_answer.region.text + "}", whole, o.limits, o.deadline);
    if (!trim_ascii_space(g.fallback).empty() && trim_ascii_space(g.fallback) == trim_ascii_space(p.fallback)) out.verdict = Verdict::equal;
    else out.reason = "the final answer does not parse";
    return out;
  }
  const std::size_t stated = values.size();
  for (const AnswerMarker& other : final_answer.others) {
    if (values.size() > limit) break;
    add_values(other, o, limit, values);
  }
  if (past(o)) return timed_out(std::move(out));
  if (values.size() == 1) {
    if (!g.expr) return out;  // a gold that is only a fallback string, a prediction that parses
    out.verdict = compare(*g.expr, values.front(), o);
    return out;
  }
  // Several different values: a hedge, unless the gold is itself several values, or a set that relations joined by
  // "or" describe together (x < 2 or x > 3 against (-∞, 2) ∪ (3, ∞)).
  const bool gold_set = g.expr && (is_set_like(*g.expr) || is_relation(*g.expr));
  bool conjunction = false;  // "x > 1 and x < 3" is no union
  if (gold_set) split_connectives(final_answer.region.text, &conjunction, final_answer.region.source == AnswerSource::last_line);
  // ... relations of one variable: "k = 45 and n = 2" are two assignments, not a solution set.
  std::set<std::string> variables;
  for (const Expr& v : values) symbols_of(v, variables);
  if (gold_set && !conjunction && variables.size() == 1 && std::all_of(values.begin(), values.end(), is_relation)) {
    Expr sets;
    sets.kind = ExprKind::set_union;
    for (const Expr& v : values) {
      std::optional<Expr> s = solved_relation_set(v);
      if (!s) break;
      sets.args.push_back(std::move(*s));
    }
    if (sets.args.size() == values.size()) {
      std::optional<Expr> gold_as_set = is_set_like(*g.expr) ? g.expr : solved_relation_set(*g.expr);
      out.verdict = gold_as_set && compare(*gold_as_set, sets, o) == Verdict::equal ? Verdict::equal : Verdict::not_equal;
      return out;
    }
  }
  if (g.expr && (g.expr->kind == ExprKind::set || g.expr->kind == ExprKind::tuple)) {
    // The stated values in the order they are written: a set for a set gold, a tuple for a tuple gold.
    std::vector<const AnswerMarker*> markers{&final_answer.region};
    for (const AnswerMarker& other : final_answer.others) markers.push_back(&other);
    std::sort(markers.begin(), markers.end(), [](const AnswerMarker* a, const AnswerMarker* b) { return a->begin < b->begin; });
    std::vector<Expr> written;
    for (const AnswerMarker* m : markers) add_values(*m, o, limit, written);
    Expr stated_values;
    stated_values.kind = g.expr->kind;
    for (Expr& v : written) {
      if (stated_values.kind == ExprKind::set) flatten_into(stated_values, std::move(v));
      else stated_values.args.push_back(std::move(v));
    }
    out.verdict = compare(*g.expr, stated_values, o) == Verdict::equal ? Verdict::equal : Verdict::not_equal;
    return out;
  }
  out.reason = stated > 1 ? fmt::format("hedged: the final answer states {} different values", stated)
                          : "hedged: another final answer in the completion disagrees with it";
  return out;
}

Verdict verify(std::string_view gold, std::string_view pred, const VerifyOptions& o) { return grade(gold, pred, o).verdict; }

std::string wrap_bare_gold(std::string_view gold) {
  if (gold.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::string(gold);  // nothing to read
  if (has_delimiters(gold) || gold.find("####") != std::string_view::npos) return std::string(gold);
  return "\\boxed{" + std::string(gold) + "}";
}

VerifyOptions math_verify_defaults() {
  VerifyOptions o;
  o.grading = Grading::whole_text;
  o.strict_equations = false;
  o.solved_relation_as_set = false;
  return o;
}

VerifyOptions math_verify_test_harness(bool latex, bool expr) {
  VerifyOptions o = math_verify_defaults();
  for (ExtractOptions* e : {&o.gold, &o.pred}) {
    e->latex = latex;
    e->expr = expr;
    e->boxed_match_priority = 0;
  }
  return o;
}

VerifyOptions harness_options(const HarnessSettings& settings) {
  bool latex = true, expr = true;
  if (settings.extraction) {
    latex = expr = false;
    for (const std::string& target : *settings.extraction) {
      GRPO_CHECK_CONFIG(target == "latex" || target == "expr", "extraction: '{}' is not a target (latex, expr)",
                        target);
      latex |= target == "latex";
      expr |= target == "expr";
    }
    GRPO_CHECK_CONFIG(latex || expr, "extraction: give at least one target (latex, expr)");
  }
  const std::string harness = settings.harness.value_or("final_answer");
  GRPO_CHECK_CONFIG(harness == "final_answer" || harness == "parse_verify_defaults" || harness == "compare_strings",
                    "harness: '{}' is not final_answer, parse_verify_defaults or compare_strings{}", harness,
                    harness == "sympy_expr_eq" ? " (sympy_expr_eq compares SymPy objects, not text)" : "");
  VerifyOptions o = harness == "compare_strings"         ? math_verify_test_harness(latex, expr)
                    : harness == "parse_verify_defaults" ? math_verify_defaults()
                                                         : VerifyOptions{};
  for (ExtractOptions* e : {&o.gold, &o.pred}) {
    e->latex = latex;
    e->expr = expr;
    if (settings.boxed_match_priority) e->boxed_match_priority = *settings.boxed_match_priority;
  }
  if (settings.float_rounding) o.float_rounding = *settings.float_rounding;
  if (settings.numeric_precision) o.numeric_precision = *settings.numeric_precision;
  if (settings.strict) o.strict = *settings.strict;
  if (settings.allow_set_relation_comp) o.allow_set_relation_comp = *settings.allow_set_relation_comp;
  return o;  // verify() checks the ranges
}

VerifyOptions open_r1_accuracy() {
  VerifyOptions o = math_verify_defaults();
  o.gold.mode = ExtractionMode::first_match;
  o.pred.latex = true;
  o.pred.expr = false;
  o.pred.boxed_match_priority = 0;
  o.pred.latex_without_anchor = false;
  o.pred.normalization.malformed_operators = false;
  o.pred.normalization.nits = false;
  o.pred.normalization.units = true;
  o.pred.mode = ExtractionMode::first_match;
  return o;
}

}  // namespace grpo::math
