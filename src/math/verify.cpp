// SPDX-License-Identifier: Apache-2.0
// The verify() pipeline: extraction candidates → parse (first success per Math-Verify's group rules) → compare.
#include <algorithm>
#include <cctype>

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

// Prose: a run of three or more letters that is not a LaTeX command ("I think 4", "4 apples").
bool has_prose(std::string_view s) {
  std::size_t run = 0;
  for (std::size_t k = 0; k < s.size(); ++k) {
    const bool letter = std::isalpha(static_cast<unsigned char>(s[k])) != 0;
    if (letter && run == 0 && k > 0 && s[k - 1] == '\\') {
      while (k + 1 < s.size() && std::isalpha(static_cast<unsigned char>(s[k + 1])) != 0) ++k;  // a command name
      continue;
    }
    run = letter ? run + 1 : 0;
    if (run >= 3) return true;
  }
  return false;
}

// The parts of a stated answer joined by "or" / "and" outside braces and $…$ ("4 or 5", "x = 1 \text{ or } x = 2",
// "A and B"); one part when there is no such connective. `joined_by_and`, when given, is set when an "and" joins two.
std::vector<std::string> split_connectives(std::string_view s, bool* joined_by_and = nullptr) {
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
      if (const std::size_t n = connective_at(k)) {
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

// The distinct values a stated answer holds, appended to `values`. Each part between "or" / "and" counts on its own.
// A part without $…$ / \\(…\\) / \\boxed is the answer itself when it is a box, or bare ("x = 4", "\\frac12",
// "3\\sqrt{13}", "4, 5"): read whole, as a bare gold is. Otherwise its extraction candidates count: every LaTeX
// environment and expression ("the answer is 4", "April 4, 2023" holds two); an answer tag or #### line of prose with
// no candidate is then read whole.
// Stops once `values` holds more than `limit` (the verdict is then known: more values than the gold has), which
// keeps a completion of thousands of boxes or alternatives linear.
void add_values(const AnswerMarker& m, const VerifyOptions& o, std::size_t limit, std::vector<Expr>& values) {
  if (values.size() > limit) return;
  if (const std::vector<std::string> parts = split_connectives(m.text); parts.size() > 1) {
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
  const auto read_whole = [&] {
    ExtractOptions whole = eo;
    whole.latex = true;
    whole.boxed_match_priority = 0;
    whole.mode = ExtractionMode::first_match;
    if (ParsedAnswer parsed = parse_answer("\\boxed{" + m.text + "}", whole, o.limits, o.deadline); parsed.expr) {
      add(std::move(*parsed.expr));
    }
  };
  const bool delimited = has_delimiters(m.text);
  const bool prose = has_prose(m.text);
  if (!delimited && (m.source == AnswerSource::boxed || (!prose && m.source != AnswerSource::final_answer_phrase))) {
    read_whole();
    if (added || m.source == AnswerSource::boxed) return;
  }
  eo.expr_without_anchor = true;
  eo.latex_without_anchor = true;
  ParseOptions limits = o.limits;
  limits.malformed_operators = limits.malformed_operators && eo.normalization.malformed_operators;
  for (const AnswerCandidate& c : extract_candidates(m.text, eo)) {
    if (past(o)) return;
    if (auto e = parse_candidate(c, limits, eo.lowercase_choices)) add(std::move(*e));
  }
  if (!added && !delimited && (m.source == AnswerSource::answer_tag || m.source == AnswerSource::gsm8k)) read_whole();
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
  if (gold_set) split_connectives(final_answer.region.text, &conjunction);
  if (gold_set && !conjunction && std::all_of(values.begin(), values.end(), is_relation)) {
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
