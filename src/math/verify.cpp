// SPDX-License-Identifier: Apache-2.0
// The verify() pipeline: extraction candidates → parse (first success per Math-Verify's group rules) → compare.
#include <algorithm>
#include <cctype>

#include "grpo/core/error.hpp"
#include "grpo/math/verify.hpp"

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
      for (char& ch : e.text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t')) s.remove_suffix(1);
  return s;
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
  if (!g.expr && trim(g.fallback).empty()) return Verdict::unknown;
  if (!trim(g.fallback).empty() && trim(g.fallback) == trim(p.fallback)) return Verdict::equal;
  if (!g.expr || !p.expr) return Verdict::not_equal;
  return compare(*g.expr, *p.expr, o);
}

Verdict verify(std::string_view gold, std::string_view pred, const VerifyOptions& o) {
  validate(o);
  const ParsedAnswer g = parse_answer(gold, o.gold, o.limits, o.deadline);
  if (std::chrono::steady_clock::now() > o.deadline) return Verdict::timeout;
  if (!g.expr && trim(g.fallback).empty()) return Verdict::unknown;
  const ParsedAnswer p = parse_answer(pred, o.pred, o.limits, o.deadline);
  if (std::chrono::steady_clock::now() > o.deadline) return Verdict::timeout;
  return verify_parsed(g, p, o);
}

std::string wrap_bare_gold(std::string_view gold) {
  if (gold.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::string(gold);  // nothing to read
  for (std::string_view marker : {"$", "\\(", "\\[", "\\boxed", "####"}) {
    if (gold.find(marker) != std::string_view::npos) return std::string(gold);
  }
  return "\\boxed{" + std::string(gold) + "}";
}

VerifyOptions math_verify_defaults() { return VerifyOptions{}; }

VerifyOptions math_verify_test_harness(bool latex, bool expr) {
  VerifyOptions o;
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
  const std::string harness = settings.harness.value_or("parse_verify_defaults");
  GRPO_CHECK_CONFIG(harness == "parse_verify_defaults" || harness == "compare_strings",
                    "harness: '{}' is not parse_verify_defaults or compare_strings{}", harness,
                    harness == "sympy_expr_eq" ? " (sympy_expr_eq compares SymPy objects, not text)" : "");
  VerifyOptions o = harness == "compare_strings" ? math_verify_test_harness(latex, expr) : math_verify_defaults();
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
  VerifyOptions o;
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
