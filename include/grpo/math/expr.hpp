// SPDX-License-Identifier: Apache-2.0
#pragma once
// The verifier's expression tree and its LaTeX parser.
//
// The tree is deliberately small (see docs/math_verifier.md): it mirrors the subset of SymPy objects that
// latex2sympy2_extended builds for answers (numbers, symbols, +, *, ^, functions, relations, sets, tuples,
// intervals, matrices). Subtraction is Add(a, Mul(-1, b)) and division Mul(a, Pow(b, -1)), as in SymPy, so that
// comparison code sees one canonical shape. Numbers stay exact: the literal text is kept and evaluated with
// GMP rationals; `is_float` records that the literal had a decimal point (Math-Verify rounds floats).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::math {

enum class ExprKind : std::uint8_t {
  number,     // text = "123", "1.25" or "p/q" (exact); is_float = written with a decimal point / exponent
  symbol,     // text = lower-cased name, subscript appended as "_sub" (x_1, a_37); "e" is Euler's number
  text,       // \text{...} words, lower-cased, spaces removed
  constant,   // text = "pi" | "i" | "oo" (infinity)
  add,        // args: terms
  mul,        // args: factors
  pow,        // args: base, exponent
  func,       // text = function name (sin, sqrt, log, abs, factorial, binom, ... or an undefined f), args
  relation,   // rel, args: lhs, rhs
  logical_and,// args: relations (a chain a < b < c becomes And(a < b, b < c))
  set,        // args: elements (unordered)
  tuple,      // args: elements (ordered); maybe_interval when written (a, b)
  interval,   // args: lo, hi; left_open, right_open
  set_union,  // args: sets / intervals
  matrix,     // args row-major; rows, cols
  plus_minus, // args: a, b for a \pm b (a may be absent: args = {b}); expanded to a set after parsing
  set_difference,  // args: a, b for a \setminus b
};

enum class Rel : std::uint8_t { eq, ne, lt, le, gt, ge, in };

struct Expr {
  ExprKind kind = ExprKind::number;
  std::string text;
  std::vector<Expr> args;
  Rel rel = Rel::eq;
  bool is_float = false;
  bool maybe_interval = false;
  bool left_open = false, right_open = false;
  int rows = 0, cols = 0;

  friend bool operator==(const Expr&, const Expr&) = default;
};

// A relation or a chain of them (a < b < c).
inline bool is_relation(const Expr& e) { return e.kind == ExprKind::relation || e.kind == ExprKind::logical_and; }
// A set, tuple, interval, or a union or difference of them.
inline bool is_set_like(const Expr& e) {
  return e.kind == ExprKind::set || e.kind == ExprKind::tuple || e.kind == ExprKind::interval ||
         e.kind == ExprKind::set_union || e.kind == ExprKind::set_difference;
}

// Parser options. The limits keep adversarial answers cheap; exceeding one makes parse_latex return nullopt.
struct ParseOptions {
  std::size_t max_length = 4096;  // bytes of the (normalised) answer
  int max_depth = 100;            // nesting: each brace/paren group, macro argument and unary sign counts 1
  std::size_t max_nodes = 4000;   // tree nodes created
  // Accept malformed operators: \frac12, \frac3{a}, \sqrt3 (Math-Verify's malformed_operators normalisation).
  // Off, a multi-digit number cannot be split into single-digit arguments, so "\frac12" is rejected.
  bool malformed_operators = true;
};

// Parses one normalised LaTeX answer (see normalize_latex) into a tree, or nullopt when it is not a valid
// expression under the grammar of docs/math_verifier.md. Never throws for bad input. Conventions follow
// latex2sympy2_extended as used by Math-Verify: symbols are lower-cased, `(a,b)` is a tuple that may also be an
// open interval, `[a,b]` and `{...}` are sets/intervals, a top-level comma list is a set, `a \pm b` becomes the
// set {a+b, a-b}, `\mathbb{R}` is the interval (-\infty, \infty), `A \setminus B` a set difference, a repeating
// decimal `0.1\overline{6}` the exact rational 1/6, `x \in S` is a relation, `x \approx y` keeps y when x is a bare symbol (else x), `N\%` is
// N/100, degrees (`^\circ`) are dropped, an integer followed by `\frac{p}{q}` is a mixed number, and a whole
// string shaped like 1,234,567.89 is one number.
std::optional<Expr> parse_latex(std::string_view latex, const ParseOptions& limits = {});

// Parses a plain-text expression (Math-Verify's ExprExtractionConfig: `2/3`, `1,000.99`, `3**2`, `12%`). `^` and `**`
// are powers, and an exponent without parentheses is the whole number after it (`2^64` = 2⁶⁴, `10^-3`), as sympy's
// parse_expr reads it; the rest is read as parse_latex reads it.
std::optional<Expr> parse_plain(std::string_view text, const ParseOptions& limits = {});

// A compact S-expression rendering for tests and error messages, e.g. "(add 1 (mul -1 x))".
std::string to_string(const Expr& e);

}  // namespace grpo::math
