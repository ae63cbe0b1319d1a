// SPDX-License-Identifier: Apache-2.0
// Recursive-descent LaTeX parser for answers: a hand-written lexer (no regex) feeding a precedence-climbing
// parser. Grammar and conventions are described in include/grpo/math/expr.hpp and docs/math_verifier.md. One file
// over 700 lines: the grammar's productions are mutually recursive members of one parser.
#include "grpo/core/ascii_text.hpp"
#include "grpo/math/expr.hpp"

#include <gmpxx.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace grpo::math {
namespace {

enum class Tok : std::uint8_t { num, letter, cmd, punct, end };

struct Token {
  Tok kind = Tok::end;
  std::string text;  // number digits, the letter, the command name (no backslash), or the punctuation
  bool space_before = false;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
std::string lowered(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = ascii_lower(c);
  return r;
}

// UTF-8 symbols that answers use in place of LaTeX commands.
struct Utf8Alias {
  std::string_view bytes;
  Tok kind;
  std::string_view text;
};
constexpr std::array<Utf8Alias, 16> kUtf8 = {{
    {"\u2264", Tok::cmd, "le"},     {"\u2265", Tok::cmd, "ge"},    {"\u2260", Tok::cmd, "ne"},
    {"\u00b7", Tok::cmd, "cdot"},   {"\u00d7", Tok::cmd, "times"}, {"\u00f7", Tok::cmd, "div"},
    {"\u221a", Tok::cmd, "sqrt"},   {"\u03c0", Tok::cmd, "pi"},    {"\u221e", Tok::cmd, "infty"},
    {"\u00b0", Tok::cmd, "circ"},   {"\u2212", Tok::punct, "-"},   {"\u2248", Tok::cmd, "approx"},
    {"\u2208", Tok::cmd, "in"},     {"\u222a", Tok::cmd, "cup"},   {"\u00b1", Tok::cmd, "pm"},
    {"\u2229", Tok::cmd, "cap"},
}};

// Returns false on a character the grammar does not know (including invalid UTF-8).
bool lex(std::string_view s, std::vector<Token>& out, std::size_t max_tokens) {
  std::size_t i = 0;
  bool space = false;
  while (i < s.size()) {
    if (out.size() > max_tokens) return false;
    const char c = s[i];
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '~') {
      space = true;
      ++i;
      continue;
    }
    Token t;
    t.space_before = space;
    space = false;
    if (is_digit(c) || (c == '.' && i + 1 < s.size() && is_digit(s[i + 1]))) {
      std::size_t j = i;
      while (j < s.size() && is_digit(s[j])) ++j;
      if (j + 1 < s.size() && s[j] == '.' && is_digit(s[j + 1])) {
        ++j;
        while (j < s.size() && is_digit(s[j])) ++j;
      } else if (j < s.size() && s[j] == '.' && j == i) {
        ++j;
        while (j < s.size() && is_digit(s[j])) ++j;
      } else if (j < s.size() && s[j] == '.' && (s.compare(j + 1, 9, "\\overline") == 0 || s.compare(j + 1, 4, "\\dot") == 0)) {
        ++j;  // "0.\overline{3}": the point belongs to the number (a repeating decimal)
      }
      // Scientific notation 1.5e-3 / 2E10: only when a digit follows the e (2e alone is 2 times e).
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < s.size() && (s[k] == '-' || s[k] == '+')) ++k;
        if (k < s.size() && is_digit(s[k])) {
          while (k < s.size() && is_digit(s[k])) ++k;
          j = k;
        }
      }
      t.kind = Tok::num;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (is_alpha(c)) {
      t.kind = Tok::letter;
      t.text = std::string(1, c);
      ++i;
    } else if (c == '\\') {
      if (i + 1 >= s.size()) return false;
      const char d = s[i + 1];
      if (is_alpha(d)) {
        std::size_t j = i + 1;
        while (j < s.size() && is_alpha(s[j])) ++j;
        const std::string_view name = s.substr(i + 1, j - i - 1);
        // Delimiter sizing carries no meaning: \left( … \right) is ( … ).
        if (name == "left" || name == "right" || name == "mleft" || name == "mright" || name == "bigl" ||
            name == "bigr" || name == "Bigl" || name == "Bigr" || name == "big" || name == "Big" || name == "bigg" ||
            name == "Bigg" || name == "biggl" || name == "biggr" || name == "displaystyle") {
          space = true;
          i = j;
          continue;
        }
        t.kind = Tok::cmd;
        t.text = std::string(name);
        i = j;
      } else if (d == ',' || d == ';' || d == ':' || d == '!' || d == ' ') {
        space = true;
        i += 2;
        continue;
      } else if (d == '\\') {
        t.kind = Tok::punct;
        t.text = "\\\\";
        i += 2;
      } else if (d == '$') {  // a currency sign
        space = true;
        i += 2;
        continue;
      } else {
        t.kind = Tok::cmd;
        t.text = std::string(1, d);  // \{ \} \% \| \(
        i += 2;
      }
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      bool found = false;
      for (const auto& a : kUtf8) {
        if (s.substr(i, a.bytes.size()) == a.bytes) {
          t.kind = a.kind;
          t.text = std::string(a.text);
          i += a.bytes.size();
          found = true;
          break;
        }
      }
      if (!found) return false;
    } else {
      static constexpr std::string_view kPunct = "+-*/^_()[]{},;=<>!|:'&%";
      if (kPunct.find(c) == std::string_view::npos) return false;
      t.kind = Tok::punct;
      t.text = std::string(1, c);
      ++i;
      if (i < s.size()) {  // two-character relations
        const char d = s[i];
        if ((c == '<' || c == '>' || c == '!') && d == '=') {
          t.kind = Tok::cmd;
          t.text = c == '<' ? "le" : c == '>' ? "ge" : "ne";
          ++i;
        } else if (c == '*' && d == '*') {
          t.text = "^";
          ++i;
        }
      }
    }
    out.push_back(std::move(t));
  }
  return true;
}

Expr make(ExprKind k, std::vector<Expr> args = {}, std::string text = {}) {
  Expr e;
  e.kind = k;
  e.args = std::move(args);
  e.text = std::move(text);
  return e;
}
Expr number(std::string text, bool is_float = false) {
  Expr e = make(ExprKind::number, {}, std::move(text));
  e.is_float = is_float;
  return e;
}
Expr neg(Expr a) { return make(ExprKind::mul, {number("-1"), std::move(a)}); }
Expr power(Expr a, Expr b) { return make(ExprKind::pow, {std::move(a), std::move(b)}); }
Expr reciprocal(Expr a) { return power(std::move(a), number("-1")); }

bool is_function_name(std::string_view n) {
  static constexpr std::array<std::string_view, 40> kNames = {
      "sin",  "cos",    "tan",    "cot",    "sec",     "csc",     "arcsin",  "arccos", "arctan", "arccot",
      "arcsec", "arccsc", "sinh", "cosh",   "tanh",    "coth",    "sech",    "csch",   "asin",   "acos",
      "atan", "exp",    "ln",     "log",    "lg",      "arsinh",  "arcosh",  "artanh", "gcd",    "lcm",
      "max",  "min",    "deg",    "det",    "arcsinh", "arccosh", "arctanh", "floor",  "ceil",   "sgn"};
  return std::find(kNames.begin(), kNames.end(), n) != kNames.end();
}

// One spelling per function, the one the evaluator knows (asin → arcsin, arcsinh → arsinh, ceil → ceiling).
std::string canonical_function(std::string_view n) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 14> kAliases = {{
      {"asin", "arcsin"}, {"acos", "arccos"}, {"atan", "arctan"}, {"arcsinh", "arsinh"}, {"arccosh", "arcosh"},
      {"arctanh", "artanh"}, {"asinh", "arsinh"}, {"acosh", "arcosh"}, {"atanh", "artanh"}, {"ceil", "ceiling"},
      {"lg", "log"}, {"Max", "max"}, {"Min", "min"}, {"Abs", "abs"}}};
  for (const auto& [from, to] : kAliases) {
    if (n == from) return std::string(to);
  }
  return lowered(n);
}

bool is_greek(std::string_view n) {
  static constexpr std::array<std::string_view, 40> kGreek = {
      "alpha", "beta",  "gamma", "delta",   "epsilon", "varepsilon", "zeta",  "eta",   "theta", "vartheta",
      "iota",  "kappa", "lambda", "mu",     "nu",      "xi",         "rho",   "sigma", "tau",   "upsilon",
      "phi",   "varphi", "chi",  "psi",     "omega",   "Gamma",      "Delta", "Theta", "Lambda", "Xi",
      "Sigma", "Phi",   "Psi",   "Omega",   "ell",     "varrho",     "varsigma", "Pi", "Upsilon", "aleph"};
  return std::find(kGreek.begin(), kGreek.end(), n) != kGreek.end();
}

class Parser {
 public:
  Parser(std::vector<Token> toks, const ParseOptions& limits) : toks_(std::move(toks)), limits_(limits) {
    toks_.push_back(Token{});
  }

  std::optional<Expr> run() {
    auto e = list(/*closers=*/"");
    if (!ok_ || !e || peek().kind != Tok::end) return std::nullopt;
    return e;
  }

 private:
  std::vector<Token> toks_;
  std::size_t pos_ = 0;
  ParseOptions limits_;
  int depth_ = 0;
  std::size_t nodes_ = 0;
  int abs_depth_ = 0;
  bool ok_ = true;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.limits_.max_depth) p.ok_ = false;
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& peek(std::size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool at_punct(std::string_view p) const { return peek().kind == Tok::punct && peek().text == p; }
  bool at_cmd(std::string_view c) const { return peek().kind == Tok::cmd && peek().text == c; }
  bool accept_punct(std::string_view p) {
    if (!at_punct(p)) return false;
    ++pos_;
    return true;
  }
  bool accept_cmd(std::string_view c) {
    if (!at_cmd(c)) return false;
    ++pos_;
    return true;
  }
  std::optional<Expr> fail() {
    ok_ = false;
    return std::nullopt;
  }
  Expr node(Expr e) {
    if (++nodes_ > limits_.max_nodes) ok_ = false;
    return e;
  }

  bool at_closer(std::string_view closers) const {
    const Token& t = peek();
    if (t.kind == Tok::end) return true;
    if (t.kind == Tok::punct && t.text.size() == 1 && closers.find(t.text[0]) != std::string_view::npos) return true;
    if (t.kind == Tok::cmd && t.text == "}" && closers.find('S') != std::string_view::npos) return true;
    if (t.kind == Tok::cmd && t.text == "end") return true;
    return false;
  }

  // item (',' item)* with ';' separating groups; several items make a set (the caller may take the list
  // instead). When ';' separates groups that themselves hold commas (p=5,q=2;p=7,q=2) each group is a tuple.
  std::optional<Expr> list(std::string_view closers, std::vector<Expr>* items_out = nullptr) {
    DepthGuard g(*this);
    if (!ok_) return std::nullopt;
    std::vector<std::vector<Expr>> groups(1);
    bool semicolons = false;
    while (true) {
      while (accept_punct(",")) {
        if (groups.back().empty()) return fail();  // leading comma
      }
      auto it = relation(closers);
      if (!it) return fail();
      groups.back().push_back(std::move(*it));
      if (accept_punct(",")) {
        while (accept_punct(",")) {
        }
        if (at_closer(closers)) break;  // trailing comma
        continue;
      }
      if (accept_punct(";")) {
        semicolons = true;
        groups.emplace_back();
        if (at_closer(closers)) break;
        continue;
      }
      break;
    }
    if (!groups.empty() && groups.back().empty()) groups.pop_back();
    std::vector<Expr> items;
    if (semicolons && std::any_of(groups.begin(), groups.end(), [](const auto& gr) { return gr.size() > 1; })) {
      for (auto& gr : groups) {
        if (gr.size() == 1) items.push_back(std::move(gr[0]));
        else items.push_back(node(make(ExprKind::tuple, std::move(gr))));
      }
    } else {
      for (auto& gr : groups) {
        for (auto& x : gr) items.push_back(std::move(x));
      }
    }
    if (items.empty()) return fail();
    if (items_out) {
      *items_out = std::move(items);
      return Expr{};
    }
    if (items.size() == 1) return std::move(items[0]);
    return node(make(ExprKind::set, std::move(items)));
  }

  // After \{: a variable (optionally "\in" a named set such as \mathbb{R}) and then |, \mid or :, the start of
  // set-builder notation {x | x > 0}. Looks ahead only.
  bool set_builder_ahead() const {
    if (peek(0).kind != Tok::letter) return false;
    std::size_t k = 1;
    if (peek(k).kind == Tok::cmd && peek(k).text == "in") {
      for (++k; k < 10 && peek(k).kind != Tok::end; ++k) {  // \mathbb{R}, \mathbb R, R
        const Token& t = peek(k);
        if ((t.kind == Tok::punct && (t.text == "|" || t.text == ":")) || (t.kind == Tok::cmd && t.text == "mid")) break;
      }
    }
    const Token& t = peek(k);
    return (t.kind == Tok::punct && (t.text == "|" || t.text == ":")) || (t.kind == Tok::cmd && t.text == "mid");
  }
  // Set-builder notation: the condition, a relation (conditions separated by commas: their conjunction), which the
  // verifier compares as the set it describes when that is an interval or a finite set.
  std::optional<Expr> set_builder() {
    while (!(at_punct("|") || at_punct(":") || at_cmd("mid"))) ++pos_;
    ++pos_;
    std::vector<Expr> conditions;
    if (!list("S", &conditions) || !accept_cmd("}")) return fail();
    if (conditions.size() == 1) return node(std::move(conditions[0]));
    Expr all = make(ExprKind::logical_and);
    for (Expr& c : conditions) {
      if (c.kind == ExprKind::logical_and) {
        for (Expr& r : c.args) all.args.push_back(std::move(r));
      } else if (c.kind == ExprKind::relation) {
        all.args.push_back(std::move(c));
      } else {
        return fail();
      }
    }
    return node(std::move(all));
  }

  static bool only_symbols(const Expr& e) {
    if (e.kind == ExprKind::symbol) return true;
    if (e.kind == ExprKind::mul || e.kind == ExprKind::tuple) {
      return std::all_of(e.args.begin(), e.args.end(), [](const Expr& a) { return only_symbols(a); });
    }
    return false;
  }

  std::optional<Rel> relop() {
    const Token& t = peek();
    if (t.kind == Tok::punct) {
      if (t.text == "=") return Rel::eq;
      if (t.text == "<") return Rel::lt;
      if (t.text == ">") return Rel::gt;
      return std::nullopt;
    }
    if (t.kind != Tok::cmd) return std::nullopt;
    const std::string& n = t.text;
    if (n == "le" || n == "leq" || n == "leqslant" || n == "leqq") return Rel::le;
    if (n == "ge" || n == "geq" || n == "geqslant" || n == "geqq") return Rel::ge;
    if (n == "lt") return Rel::lt;
    if (n == "gt") return Rel::gt;
    if (n == "ne" || n == "neq") return Rel::ne;
    if (n == "in") return Rel::in;
    if (n == "equiv" || n == "coloneqq") return Rel::eq;
    return std::nullopt;
  }

  std::optional<Expr> relation(std::string_view closers) {
    auto first = set_expr(closers);
    if (!first) return fail();
    std::vector<Expr> operands{std::move(*first)};
    std::vector<Rel> ops;
    while (true) {
      if (accept_cmd("approx") || accept_cmd("sim") || accept_cmd("simeq")) {
        auto rhs = set_expr(closers);
        if (!rhs) return fail();
        // Math-Verify: x ≈ 3 means 3 when the left side is only symbols; otherwise the left side stands.
        if (only_symbols(operands.back())) operands.back() = std::move(*rhs);
        continue;
      }
      auto op = relop();
      if (!op) break;
      ++pos_;
      auto rhs = set_expr(closers);
      if (!rhs) return fail();
      ops.push_back(*op);
      operands.push_back(std::move(*rhs));
    }
    if (ops.empty()) return std::move(operands[0]);
    std::vector<Expr> rels;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      Expr r = make(ExprKind::relation, {operands[k], operands[k + 1]});
      r.rel = ops[k];
      rels.push_back(node(std::move(r)));
    }
    if (rels.size() == 1) return std::move(rels[0]);
    return node(make(ExprKind::logical_and, std::move(rels)));
  }

  // Unions and differences, left to right: A \cup B \setminus C is (A ∪ B) ∖ C.
  std::optional<Expr> set_expr(std::string_view closers) {
    auto a = additive(closers);
    if (!a) return fail();
    if (peek().kind != Tok::cmd || (peek().text != "cup" && peek().text != "setminus" && peek().text != "backslash")) {
      return a;
    }
    Expr acc = std::move(*a);
    bool union_here = false;  // acc is a union this loop built (further \cup terms join it)
    while (true) {
      const bool cup = accept_cmd("cup");
      if (!cup && !accept_cmd("setminus") && !accept_cmd("backslash")) break;
      auto b = additive(closers);
      if (!b) return fail();
      if (cup && union_here) {
        acc.args.push_back(std::move(*b));
      } else {
        acc = node(make(cup ? ExprKind::set_union : ExprKind::set_difference, {std::move(acc), std::move(*b)}));
      }
      union_here = cup;
    }
    return acc;
  }

  std::optional<Expr> additive(std::string_view closers) {
    if (!ok_) return std::nullopt;
    std::vector<Expr> terms;
    bool pending_pm = false;
    int sign = 1;
    if (accept_punct("-")) sign = -1;
    else if (accept_punct("+")) sign = 1;
    else if (accept_cmd("pm") || accept_cmd("mp")) pending_pm = true;
    while (true) {
      auto t = term(closers);
      if (!t) return fail();
      Expr v = sign < 0 ? node(neg(std::move(*t))) : std::move(*t);
      if (pending_pm) {
        Expr lhs = terms.empty() ? Expr{} : (terms.size() == 1 ? terms[0] : make(ExprKind::add, terms));
        Expr pm = terms.empty() ? make(ExprKind::plus_minus, {std::move(v)})
                                : make(ExprKind::plus_minus, {std::move(lhs), std::move(v)});
        terms.clear();
        terms.push_back(node(std::move(pm)));
      } else {
        terms.push_back(std::move(v));
      }
      pending_pm = false;
      if (accept_punct("+")) sign = 1;
      else if (accept_punct("-")) sign = -1;
      else if (accept_cmd("pm") || accept_cmd("mp")) { sign = 1; pending_pm = true; }
      else break;
    }
    if (terms.size() == 1) return std::move(terms[0]);
    return node(make(ExprKind::add, std::move(terms)));
  }

  bool starts_primary() const {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::num:
      case Tok::letter: return true;
      case Tok::punct: return t.text == "(" || t.text == "[" || t.text == "{" || (t.text == "|" && abs_depth_ == 0);
      case Tok::cmd: {
        const std::string& n = t.text;
        if (n == "cdot" || n == "times" || n == "div" || n == "cup" || n == "cap" || n == "pm" || n == "mp" ||
            n == "setminus" || n == "backslash" ||
            n == "end" || n == "}" || n == "right" || n == "approx" || n == "%" || n == "circ" || n == "rfloor" ||
            n == "rceil" || n == "rvert" || n == "rangle" || n == "to" || n == "mid" || n == "choose" ||
            n == "urcorner" || n == "lrcorner" || n == "mod" || n == "bmod") {
          return false;
        }
        return !relop_name(n);
      }
      case Tok::end: return false;
    }
    return false;
  }
  static bool relop_name(std::string_view n) {
    return n == "le" || n == "leq" || n == "leqslant" || n == "leqq" || n == "ge" || n == "geq" ||
           n == "geqslant" || n == "geqq" || n == "lt" || n == "gt" || n == "ne" || n == "neq" || n == "in" ||
           n == "equiv" || n == "coloneqq" || n == "sim" || n == "simeq";
  }

  std::optional<Expr> term(std::string_view closers) {
    if (!ok_) return std::nullopt;
    auto first = factor(closers);
    if (!first) return fail();
    std::vector<Expr> factors{std::move(*first)};
    while (ok_) {
      if (accept_punct("*") || accept_cmd("cdot") || accept_cmd("times") || accept_cmd("ast")) {
        auto f = factor(closers);
        if (!f) return fail();
        factors.push_back(std::move(*f));
      } else if (accept_cmd("mod") || accept_cmd("bmod")) {  // a \mod b binds like a product
        auto f = factor(closers);
        if (!f) return fail();
        Expr lhs = factors.size() == 1 ? std::move(factors[0]) : make(ExprKind::mul, std::move(factors));
        factors.clear();
        factors.push_back(node(make(ExprKind::func, {std::move(lhs), std::move(*f)}, "mod")));
      } else if (accept_punct("/") || accept_cmd("div") || accept_punct(":")) {
        auto f = factor(closers);
        if (!f) return fail();
        factors.push_back(node(reciprocal(std::move(*f))));
      } else if (starts_primary() && !at_closer(closers)) {
        auto f = postfix(closers);
        if (!f) return fail();
        factors.push_back(std::move(*f));
      } else {
        break;
      }
    }
    if (factors.size() == 1) return std::move(factors[0]);
    return node(make(ExprKind::mul, std::move(factors)));
  }

  std::optional<Expr> factor(std::string_view closers) {
    if (!ok_) return std::nullopt;
    if (accept_punct("-")) {
      DepthGuard g(*this);  // "- - - x" recurses here
      auto f = factor(closers);
      if (!f) return fail();
      return node(neg(std::move(*f)));
    }
    if (accept_punct("+")) {
      DepthGuard g(*this);
      return factor(closers);
    }
    return postfix(closers);
  }

  // A single-token or braced argument (\frac12, \sqrt3, x^2, \frac{a}{b}).
  std::optional<Expr> arg() {
    if (!ok_) return std::nullopt;
    if (accept_punct("{")) {
      auto e = list("}");
      if (!e || !accept_punct("}")) return fail();
      return e;
    }
    Token& t = toks_[pos_];
    if (t.kind == Tok::num) {
      if (t.text.size() > 1 && is_digit(t.text[0])) {  // \frac12 takes one digit at a time
        if (!limits_.malformed_operators) return fail();
        Expr d = number(t.text.substr(0, 1));
        t.text.erase(0, 1);
        t.space_before = false;
        return node(std::move(d));
      }
      return primary("");
    }
    if (t.kind == Tok::letter || t.kind == Tok::cmd) return primary("");
    return fail();
  }

  // Raw text of a braced group (for \text, \operatorname, subscripts).
  std::optional<std::string> raw_group() {
    if (at_punct("{")) {
      ++pos_;
      std::string out;
      int depth = 1;
      while (peek().kind != Tok::end) {
        const Token& t = peek();
        if (t.kind == Tok::punct && t.text == "{") ++depth;
        if (t.kind == Tok::punct && t.text == "}" && --depth == 0) {
          ++pos_;
          return out;
        }
        if (t.space_before && !out.empty()) out += ' ';
        if (t.kind == Tok::cmd) out += '\\';
        out += t.text;
        ++pos_;
      }
      return std::nullopt;
    }
    const Token& t = peek();
    if (t.kind == Tok::end || t.kind == Tok::punct) return std::nullopt;
    std::string s = t.kind == Tok::cmd ? "\\" + t.text : t.text;
    ++pos_;
    return s;
  }

  std::optional<Expr> postfix(std::string_view closers) {
    if (!ok_) return std::nullopt;
    auto base = primary(closers);
    if (!base) return fail();
    Expr e = std::move(*base);
    while (ok_) {
      if (accept_punct("^")) {
        if (accept_cmd("circ") || accept_cmd("degree")) continue;
        if (at_punct("{") && peek(1).kind == Tok::cmd && (peek(1).text == "circ" || peek(1).text == "degree") &&
            peek(2).kind == Tok::punct && peek(2).text == "}") {
          pos_ += 3;
          continue;
        }
        if (accept_punct("-")) {  // x^-1
          auto ex = arg();
          if (!ex) return fail();
          e = node(power(std::move(e), neg(std::move(*ex))));
          continue;
        }
        std::optional<Expr> ex;
        if (at_punct("(")) {  // x^(1+3), x**(1+3): a malformed but unambiguous exponent
          ++pos_;
          ex = delimited('(');
        } else {
          ex = arg();
        }
        if (!ex) return fail();
        e = node(power(std::move(e), std::move(*ex)));
      } else if (at_punct("_") && e.kind == ExprKind::pow && e.args[0].kind == ExprKind::symbol) {
        e.args[0].text += subscript();  // x^2_i is (x_i)^2
      } else if (accept_punct("!")) {
        e = node(make(ExprKind::func, {std::move(e)}, "factorial"));
      } else if (accept_punct("%") || accept_cmd("%")) {
        e = node(make(ExprKind::mul, {std::move(e), number("1/100")}));
      } else if (accept_cmd("circ") || accept_cmd("degree")) {
      } else {
        break;
      }
    }
    return e;
  }

  std::string subscript() {
    if (!accept_punct("_")) return {};
    auto raw = raw_group();
    if (!raw) {
      ok_ = false;
      return {};
    }
    std::string r;
    for (char c : *raw) {
      if (c != ' ' && c != '{' && c != '}') r += ascii_lower(c);
    }
    return "_" + r;
  }

  std::optional<Expr> delimited(char open) {
    if (!ok_) return std::nullopt;
    std::vector<Expr> items;
    if (!list(")]", &items)) return fail();
    char close = 0;
    if (accept_punct(")")) close = ')';
    else if (accept_punct("]")) close = ']';
    else return fail();
    if (items.size() == 1) {
      if (open == '(' && close == ')') return std::move(items[0]);
      if (open == '[' && close == ']') return std::move(items[0]);
      return fail();
    }
    if (items.size() == 2 && !(open == '(' && close == ')')) {
      Expr iv = make(ExprKind::interval, std::move(items));
      iv.left_open = open == '(';
      iv.right_open = close == ')';
      return node(std::move(iv));
    }
    Expr t = make(ExprKind::tuple, std::move(items));
    t.maybe_interval = t.args.size() == 2 && open == '(';
    return node(std::move(t));
  }

  std::optional<Expr> function_argument(std::string_view closers) {
    if (at_punct("(")) {
      ++pos_;
      std::vector<Expr> items;
      if (!list(")", &items) || !accept_punct(")")) return fail();
      if (items.size() == 1) return std::move(items[0]);
      return node(make(ExprKind::tuple, std::move(items)));
    }
    if (at_punct("{")) return arg();
    // \sin 2x, \sin b \cos a: implicit product of postfix primaries, stopping at the next function.
    auto first = postfix(closers);
    if (!first) return fail();
    std::vector<Expr> f{std::move(*first)};
    while (ok_ && starts_primary() && !at_closer(closers) &&
           !(peek().kind == Tok::cmd && (is_function_name(peek().text) || peek().text == "frac"))) {
      if (at_punct("(")) break;
      auto p = postfix(closers);
      if (!p) return fail();
      f.push_back(std::move(*p));
    }
    if (f.size() == 1) return std::move(f[0]);
    return node(make(ExprKind::mul, std::move(f)));
  }

  std::optional<Expr> matrix_env(const std::string& env) {
    if (env == "array") {  // column spec
      if (!raw_group()) return fail();
    }
    std::vector<std::vector<Expr>> rows(1);
    while (true) {
      if (at_cmd("end")) break;
      auto cell = relation("&\\");
      if (!cell) return fail();
      rows.back().push_back(std::move(*cell));
      if (accept_punct("&")) continue;
      if (accept_punct("\\\\")) {
        if (at_cmd("end")) break;
        rows.emplace_back();
        continue;
      }
      if (at_cmd("end")) break;
      return fail();
    }
    ++pos_;  // \end
    auto name = raw_group();
    if (!name || *name != env) return fail();
    const std::size_t cols = rows[0].size();
    Expr m = make(ExprKind::matrix);
    for (auto& r : rows) {
      if (r.size() != cols) return fail();
      for (auto& c : r) m.args.push_back(std::move(c));
    }
    m.rows = static_cast<int>(rows.size());
    m.cols = static_cast<int>(cols);
    return node(std::move(m));
  }

  static std::optional<Expr> text_node(const std::string& raw) {
    std::string clean;
    for (char c : raw) {
      if (c == ' ' || c == '(' || c == ')' || c == '~') continue;
      if (!is_alpha(c)) return std::nullopt;
      clean += ascii_lower(c);
    }
    if (clean.empty()) return std::nullopt;
    if (clean.size() == 1) return make(ExprKind::symbol, {}, clean);
    return make(ExprKind::text, {}, clean);
  }

  // A repeating decimal: the number token `digits` ("0.1", or "0" with a "." token next) followed by
  // \overline{repetend} (or \dot{…}), as the exact rational it denotes (0.1\overline{6} = 1/6). Consumes the tokens.
  std::optional<Expr> repeating_decimal(const std::string& digits) {
    if (peek(0).kind != Tok::cmd && peek(0).kind != Tok::punct) return std::nullopt;  // the common case: no repetend
    if (digits.find_first_of("eE") != std::string::npos) return std::nullopt;
    const bool dot_token = digits.find('.') == std::string::npos;
    std::size_t k = dot_token ? 1 : 0;
    if (dot_token && !(peek(0).kind == Tok::punct && peek(0).text == "." && !peek(1).space_before)) return std::nullopt;
    if (peek(k).kind != Tok::cmd || (peek(k).text != "overline" && peek(k).text != "dot")) return std::nullopt;
    if (peek(k + 1).kind != Tok::punct || peek(k + 1).text != "{" || peek(k + 2).kind != Tok::num ||
        peek(k + 3).kind != Tok::punct || peek(k + 3).text != "}") {
      return std::nullopt;
    }
    const std::string repetend = peek(k + 2).text;
    if (repetend.find_first_not_of("0123456789") != std::string::npos || repetend.size() > 64) return std::nullopt;
    const std::size_t point = digits.find('.');
    const std::string whole = digits.substr(0, point), fixed = point == std::string::npos ? "" : digits.substr(point + 1);
    // x = whole.fixed(repetend)… = (whole·fixed·repetend − whole·fixed) / (10^|fixed| · (10^|repetend| − 1))
    const mpz_class with_repetend(whole + fixed + repetend, 10);
    const mpz_class without(whole.empty() && fixed.empty() ? "0" : whole + fixed, 10);
    mpq_class value(with_repetend - without, mpz_class(std::string(repetend.size(), '9') + std::string(fixed.size(), '0'), 10));
    value.canonicalize();
    pos_ += k + 4;
    return number(value.get_str());
  }

  std::optional<Expr> primary(std::string_view closers) {
    DepthGuard g(*this);  // every recursive construct (\frac, \sqrt, |x|, \left, functions) passes here
    if (!ok_) return std::nullopt;
    const Token t = peek();
    switch (t.kind) {
      case Tok::end: return fail();
      case Tok::num: {
        ++pos_;
        if (auto repeating = repeating_decimal(t.text)) return node(std::move(*repeating));
        const bool is_float = t.text.find_first_of(".eE") != std::string::npos;
        Expr n = node(number(t.text, is_float));
        if (at_punct("_")) {  // a base: 204_5
          std::string sub = subscript();
          return node(make(ExprKind::text, {}, t.text + sub));
        }
        // Mixed number 2\frac{1}{2} = 5/2 (latex2sympy interpret_as_mixed_fractions); also 2\frac12.
        if (!is_float && at_cmd("frac") && peek(1).kind == Tok::num && peek(1).text.size() == 2 &&
            is_digit(peek(1).text[0]) && is_digit(peek(1).text[1]) && limits_.malformed_operators) {
          Expr frac = make(ExprKind::mul, {number(peek(1).text.substr(0, 1)), reciprocal(number(peek(1).text.substr(1)))});
          pos_ += 2;
          return node(make(ExprKind::add, {std::move(n), std::move(frac)}));
        }
        if (!is_float && at_cmd("frac") && peek(1).kind == Tok::punct && peek(1).text == "{" &&
            peek(2).kind == Tok::num && peek(3).kind == Tok::punct && peek(3).text == "}" &&
            peek(4).kind == Tok::punct && peek(4).text == "{" && peek(5).kind == Tok::num &&
            peek(6).kind == Tok::punct && peek(6).text == "}" && peek(2).text.find('.') == std::string::npos &&
            peek(5).text.find('.') == std::string::npos) {
          Expr frac = make(ExprKind::mul, {number(peek(2).text), reciprocal(number(peek(5).text))});
          pos_ += 7;
          return node(make(ExprKind::add, {std::move(n), std::move(frac)}));
        }
        return n;
      }
      case Tok::letter: {
        ++pos_;
        std::string name = lowered(t.text);
        name += subscript();
        static constexpr std::string_view kFunctionLetters = "fghFGHPQW";
        if (t.text.size() == 1 && kFunctionLetters.find(t.text[0]) != std::string_view::npos && at_punct("(") &&
            !peek().space_before) {
          auto a = function_argument(closers);
          if (!a) return fail();
          std::vector<Expr> args;
          if (a->kind == ExprKind::tuple) args = std::move(a->args);
          else args.push_back(std::move(*a));
          return node(make(ExprKind::func, std::move(args), "undefined:" + name));
        }
        return node(make(ExprKind::symbol, {}, name));
      }
      case Tok::punct: {
        if (t.text == "(" || t.text == "[") {
          ++pos_;
          return delimited(t.text[0]);
        }
        if (t.text == "{") {
          ++pos_;
          auto e = list("}");
          if (!e) return fail();
          if (accept_cmd("choose")) {  // {n \choose k}
            auto k = list("}");
            if (!k || !accept_punct("}")) return fail();
            return node(make(ExprKind::func, {std::move(*e), std::move(*k)}, "binom"));
          }
          if (!accept_punct("}")) return fail();
          return e;
        }
        if (t.text == "|") {
          ++pos_;
          ++abs_depth_;
          auto e = additive("|");
          --abs_depth_;
          if (!e || !accept_punct("|")) return fail();
          return node(make(ExprKind::func, {std::move(*e)}, "abs"));
        }
        return fail();
      }
      case Tok::cmd: break;
    }
    ++pos_;
    const std::string& n = t.text;
    if (n == "frac" || n == "dfrac" || n == "tfrac" || n == "cfrac") {
      auto a = arg();
      if (!a) return fail();
      auto b = arg();
      if (!b) return fail();
      return node(make(ExprKind::mul, {std::move(*a), reciprocal(std::move(*b))}));
    }
    if (n == "sqrt") {
      std::optional<Expr> index;
      if (accept_punct("[")) {
        index = list("]");
        if (!index || !accept_punct("]")) return fail();
      }
      auto a = arg();
      if (!a) return fail();
      if (index) return node(power(std::move(*a), reciprocal(std::move(*index))));
      return node(make(ExprKind::func, {std::move(*a)}, "sqrt"));
    }
    if (n == "{") {
      std::vector<Expr> items;
      if (accept_cmd("}")) return node(make(ExprKind::set));
      if (set_builder_ahead()) return set_builder();
      if (!list("S", &items) || !accept_cmd("}")) return fail();
      return node(make(ExprKind::set, std::move(items)));
    }
    if (n == "left" || n == "bigl" || n == "Bigl" || n == "big" || n == "Big") return primary(closers);
    if (n == "pi") return node(make(ExprKind::constant, {}, "pi"));
    if (n == "infty" || n == "infin") return node(make(ExprKind::constant, {}, "oo"));
    if (n == "emptyset" || n == "varnothing") return node(make(ExprKind::set));
    if (n == "imath") return node(make(ExprKind::constant, {}, "i"));
    if (n == "text" || n == "textbf" || n == "textit" || n == "mathrm" || n == "mbox" || n == "textrm" ||
        n == "mathbf" || n == "mathit" || n == "textnormal" || n == "operatorname" || n == "mathcal" ||
        n == "mathbb" || n == "boldsymbol" || n == "mathsf" || n == "textsf") {
      auto raw = raw_group();
      if (!raw) return fail();
      if (n == "operatorname") {
        std::string fname = canonical_function(*raw);
        auto a = function_argument(closers);
        if (!a) return fail();
        std::vector<Expr> args;
        if (a->kind == ExprKind::tuple) args = std::move(a->args);
        else args.push_back(std::move(*a));
        return node(make(ExprKind::func, std::move(args), fname));
      }
      if (n == "mathbb" && trim_ascii_space(*raw) == "R") {  // the real numbers, (-∞, ∞) as SymPy's Reals
        Expr reals = make(ExprKind::interval, {neg(make(ExprKind::constant, {}, "oo")), make(ExprKind::constant, {}, "oo")});
        reals.left_open = reals.right_open = true;
        return node(std::move(reals));
      }
      ParseOptions inner_limits = limits_;
      inner_limits.max_depth = limits_.max_depth - depth_;
      if (inner_limits.max_depth <= 0) return fail();
      // Each alternative is tried once: retrying a failed inner parse would be exponential in the nesting.
      const bool math_content = n == "mathrm" || n == "mathbf" || n == "boldsymbol" || n == "mathit";
      if (!math_content) {
        if (auto tx = text_node(*raw)) return node(std::move(*tx));
      }
      if (auto inner = parse_latex(*raw, inner_limits)) return node(std::move(*inner));
      if (math_content) {
        if (auto tx = text_node(*raw)) return node(std::move(*tx));
      }
      return fail();
    }
    if (n == "boxed" || n == "fbox" || n == "overline" || n == "bar" || n == "vec" || n == "hat" || n == "widehat" ||
        n == "overrightarrow" || n == "mathring") {
      auto a = arg();
      if (!a) return fail();
      if (n == "boxed" || n == "fbox") return a;
      if (a->kind == ExprKind::symbol) a->text = n + ":" + a->text;
      return a;
    }
    if (n == "binom" || n == "dbinom" || n == "tbinom" || n == "choose") {
      auto a = arg();
      if (!a) return fail();
      auto b = arg();
      if (!b) return fail();
      return node(make(ExprKind::func, {std::move(*a), std::move(*b)}, "binom"));
    }
    if (n == "lfloor" || n == "lceil" || n == "llcorner" || n == "ulcorner") {
      const bool floor = n == "lfloor" || n == "llcorner";
      auto e = additive("");
      if (!e) return fail();
      const bool closed = n == "lfloor" ? accept_cmd("rfloor") : n == "lceil" ? accept_cmd("rceil")
                          : floor        ? accept_cmd("lrcorner")
                                         : accept_cmd("urcorner");
      if (!closed) return fail();
      return node(make(ExprKind::func, {std::move(*e)}, floor ? "floor" : "ceiling"));
    }
    if (n == "exponentialE") return node(make(ExprKind::symbol, {}, "e"));
    if (n == "lvert" || n == "vert" || n == "|") {
      ++abs_depth_;
      auto e = additive("|");
      --abs_depth_;
      if (!e) return fail();
      if (!(accept_cmd("rvert") || accept_cmd("vert") || accept_punct("|") || accept_cmd("|"))) return fail();
      return node(make(ExprKind::func, {std::move(*e)}, "abs"));
    }
    if (n == "begin") {
      auto env = raw_group();
      if (!env) return fail();
      if (*env == "pmatrix" || *env == "bmatrix" || *env == "matrix" || *env == "array" || *env == "Bmatrix" ||
          *env == "smallmatrix") {
        return matrix_env(*env);
      }
      return fail();
    }
    if (is_function_name(n) || n == "arg") {
      std::string fname = n == "lg" ? std::string("lg") : canonical_function(n);
      std::optional<Expr> fpow, base;
      if (accept_punct("^")) {
        if (accept_punct("-")) {
          auto ex = arg();
          if (!ex) return fail();
          fpow = neg(std::move(*ex));
        } else {
          fpow = arg();
          if (!fpow) return fail();
        }
      }
      if (fname == "log" && accept_punct("_")) {
        base = arg();
        if (!base) return fail();
      }
      auto a = function_argument(closers);
      if (!a) return fail();
      std::vector<Expr> args;
      if (a->kind == ExprKind::tuple && (fname == "gcd" || fname == "lcm" || fname == "max" || fname == "min")) {
        args = std::move(a->args);
      } else {
        args.push_back(std::move(*a));
      }
      if (fname == "lg" || (fname == "log" && !base)) {  // latex2sympy2_extended: \log x is log(x, 10)
        fname = "log";
        base = number("10");
      }
      if (base) args.push_back(std::move(*base));
      Expr f = node(make(ExprKind::func, std::move(args), fname));
      if (fpow) {
        // \sin^{-1} is arcsin, \sinh^{-1} is arsinh; \sin^2 x is (sin x)^2
        if (fpow->kind == ExprKind::mul && fpow->args.size() == 2 && fpow->args[1].kind == ExprKind::number &&
            fpow->args[1].text == "1") {
          static constexpr std::array<std::string_view, 6> kTrig = {"sin", "cos", "tan", "sinh", "cosh", "tanh"};
          if (std::find(kTrig.begin(), kTrig.end(), f.text) != kTrig.end()) {
            f.text = (f.text.size() == 3 ? "arc" : "ar") + f.text;
            return f;
          }
        }
        return node(power(std::move(f), std::move(*fpow)));
      }
      return f;
    }
    if (is_greek(n) || n == "i" || n == "e") {
      std::string name = n == "i" ? std::string("i") : lowered(n);
      name += subscript();
      return node(make(ExprKind::symbol, {}, name));
    }
    if (n == "sum" || n == "prod") {
      // \sum_{lower}^{upper} body: an undefined function of its body named by its written limits. No closed form is
      // computed: two sums compare equal when their limits read alike and their bodies agree, and a sum is never
      // mistaken for a number in its limits (k = 0).
      std::string limits = n;
      for (const char* mark : {"_", "^"}) {
        if (!accept_punct(mark)) continue;
        auto raw = raw_group();
        if (!raw) return fail();
        limits += mark;
        for (char c : *raw) {
          if (c != ' ' && c != '{' && c != '}') limits += c;
        }
      }
      auto body = term(closers);
      if (!body) return fail();
      return node(make(ExprKind::func, {std::move(*body)}, "undefined:" + limits));
    }
    if (n == "int" || n == "lim" || n == "iint" || n == "oint") return fail();
    // Unknown command: a symbol named after it (latex2sympy does the same for \zzz).
    std::string name = lowered(n) + subscript();
    return node(make(ExprKind::symbol, {}, name));
  }
};

// a \pm b → {a+b, a-b}, recursively; more than kMaxVariants gives up (returns the input unchanged).
constexpr std::size_t kMaxVariants = 16;

std::vector<Expr> expand_pm(const Expr& e) {
  if (e.kind == ExprKind::plus_minus) {
    std::vector<Expr> out;
    auto bs = expand_pm(e.args.back());
    std::vector<Expr> as = e.args.size() == 2 ? expand_pm(e.args[0]) : std::vector<Expr>{};
    for (const auto& b : bs) {
      if (as.empty()) {
        out.push_back(b);
        out.push_back(neg(b));
      } else {
        for (const auto& a : as) {
          out.push_back(make(ExprKind::add, {a, b}));
          out.push_back(make(ExprKind::add, {a, neg(b)}));
        }
      }
      if (out.size() > kMaxVariants) break;
    }
    return out;
  }
  std::vector<Expr> variants{e};
  for (std::size_t k = 0; k < e.args.size(); ++k) {
    auto child = expand_pm(e.args[k]);
    if (child.size() == 1) {
      for (auto& v : variants) v.args[k] = child[0];
      continue;
    }
    if (e.kind == ExprKind::set) {  // elements of a set: flatten the variants into the set
      continue;
    }
    std::vector<Expr> next;
    for (const auto& v : variants) {
      for (const auto& c : child) {
        Expr w = v;
        w.args[k] = c;
        next.push_back(std::move(w));
        if (next.size() > kMaxVariants) return {e};
      }
    }
    variants = std::move(next);
  }
  if (e.kind == ExprKind::set) {
    Expr s = make(ExprKind::set);
    for (const auto& a : e.args) {
      for (auto& v : expand_pm(a)) s.args.push_back(std::move(v));
    }
    return {s};
  }
  return variants;
}

bool contains_pm(const Expr& e) {
  if (e.kind == ExprKind::plus_minus) return true;
  return std::any_of(e.args.begin(), e.args.end(), contains_pm);
}

// Whole-string thousands-separated number: -?\d{1,3}(,\d{3})+(\.\d+)?
std::optional<std::string> thousands_number(std::string_view s) {
  std::size_t i = 0;
  std::string digits;
  if (i < s.size() && s[i] == '-') digits += s[i++];
  std::size_t lead = 0;
  while (i < s.size() && is_digit(s[i])) {
    digits += s[i++];
    ++lead;
  }
  if (lead < 1 || lead > 3 || s[i - lead] == '0') return std::nullopt;
  int groups = 0;
  while (i < s.size() && s[i] == ',') {
    for (int k = 1; k <= 3; ++k) {
      if (i + k >= s.size() || !is_digit(s[i + k])) return std::nullopt;
      digits += s[i + k];
    }
    i += 4;
    ++groups;
  }
  if (groups == 0) return std::nullopt;
  if (i < s.size() && s[i] == '.') {
    digits += '.';
    ++i;
    std::size_t k = 0;
    while (i < s.size() && is_digit(s[i])) {
      digits += s[i++];
      ++k;
    }
    if (k == 0) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  return digits;
}


}  // namespace

std::optional<Expr> parse_latex(std::string_view latex, const ParseOptions& limits) {
  latex = trim_ascii_space(latex);
  if (latex.empty() || latex.size() > limits.max_length) return std::nullopt;
  if (auto t = thousands_number(latex)) {
    std::string digits;
    for (char c : *t) digits += c;
    Expr n;
    n.kind = ExprKind::number;
    n.text = digits[0] == '-' ? digits.substr(1) : digits;
    n.is_float = digits.find('.') != std::string::npos;
    if (digits[0] == '-') return neg(std::move(n));
    return n;
  }
  // 0,xxx is a decimal comma (latex2sympy), not the set {0, xxx}.
  if (latex.size() > 2 && latex[0] == '0' && latex[1] == ',' &&
      std::all_of(latex.begin() + 2, latex.end(), [](char c) { return is_digit(c); })) {
    Expr n;
    n.kind = ExprKind::number;
    n.text = "0." + std::string(latex.substr(2));
    n.is_float = true;
    return n;
  }
  std::vector<Token> toks;
  if (!lex(latex, toks, limits.max_length)) return std::nullopt;
  Parser p(std::move(toks), limits);
  auto e = p.run();
  if (!e) return std::nullopt;
  if (contains_pm(*e)) {
    auto variants = expand_pm(*e);
    if (variants.size() == 1) return variants[0];
    return make(ExprKind::set, std::move(variants));
  }
  return e;
}

namespace {

// Plain text for the LaTeX parser: "**" is "^", and an exponent written without braces ("2^64", "10^-3", "2 ** 0.5")
// is braced whole ("2^{64}", "10^{-3}"), where LaTeX would take its first digit alone (2^64 = 2^6·4): Math-Verify's
// plain expressions go to sympy's parse_expr with "^" turned into "**", which reads the whole number.
std::string braced_exponents(std::string_view text) {
  auto digit = [](char c) { return is_digit(c) || c == '.'; };
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.substr(i, 2) == "**") {
      out += '^';
      ++i;
    } else {
      out += text[i];
    }
    if (out.back() != '^') continue;
    std::size_t start = i + 1;
    while (start < text.size() && text[start] == ' ') ++start;
    std::size_t end = start;
    if (end < text.size() && (text[end] == '-' || text[end] == '+')) ++end;
    const std::size_t digits = end;
    while (end < text.size() && digit(text[end])) ++end;
    if (end == digits) continue;  // "^(", "^x": the parser's own reading
    out += '{';
    out += text.substr(start, end - start);
    out += '}';
    i = end - 1;
  }
  return out;
}

}  // namespace

std::optional<Expr> parse_plain(std::string_view text, const ParseOptions& limits) {
  text = trim_ascii_space(text);
  if (text.empty() || text.size() > limits.max_length) return std::nullopt;
  // Plain numbers with separators: "1,000.99", "1 000", "1000,99" (a decimal comma), "2,74".
  std::string s;
  bool neg_sign = false;
  std::size_t i = 0;
  if (text[0] == '-') {
    neg_sign = true;
    i = 1;
  }
  bool plain_number = i < text.size();
  for (std::size_t k = i; k < text.size(); ++k) {
    const char c = text[k];
    if (!(is_digit(c) || c == ',' || c == '.' || c == ' ')) plain_number = false;
  }
  if (plain_number) {
    std::string body(text.substr(i));
    std::string t;
    if (auto th = thousands_number(body)) {
      t = *th;
    } else {
      std::string nospace;
      for (char c : body) {
        if (c != ' ') nospace += c;
      }
      if (auto th2 = thousands_number(nospace)) {
        t = *th2;
      } else {
        // one comma or dot between digit runs: decimal separator
        const auto sep = nospace.find_first_of(",.");
        if (sep != std::string::npos && nospace.find_first_of(",.", sep + 1) != std::string::npos) return std::nullopt;
        t = nospace;
        if (sep != std::string::npos) t[sep] = '.';
      }
    }
    if (t.empty() || t == ".") return std::nullopt;
    if (t[0] == '.') t = "0" + t;
    if (t.back() == '.') return std::nullopt;
    Expr n;
    n.kind = ExprKind::number;
    n.text = t;
    n.is_float = t.find('.') != std::string::npos;
    if (neg_sign) return neg(std::move(n));
    return n;
  }
  return parse_latex(braced_exponents(text), limits);
}

namespace {
void render(const Expr& e, std::string& out) {
  static constexpr std::array<std::string_view, 17> kNames = {
      "num", "sym", "text", "const", "add", "mul", "pow", "func", "rel", "and", "set", "tuple", "interval",
      "union", "matrix", "pm", "minus"};
  switch (e.kind) {
    case ExprKind::number:
    case ExprKind::symbol:
    case ExprKind::text:
    case ExprKind::constant: out += e.text; return;
    default: break;
  }
  out += '(';
  out += kNames[static_cast<std::size_t>(e.kind)];
  if (e.kind == ExprKind::func) {
    out += ':';
    out += e.text;
  }
  if (e.kind == ExprKind::relation) {
    static constexpr std::array<std::string_view, 7> kRel = {"=", "!=", "<", "<=", ">", ">=", "in"};
    out += ' ';
    out += kRel[static_cast<std::size_t>(e.rel)];
  }
  if (e.kind == ExprKind::interval) {
    out += e.left_open ? " (" : " [";
    out += e.right_open ? ")" : "]";
  }
  for (const auto& a : e.args) {
    out += ' ';
    render(a, out);
  }
  out += ')';
}
}  // namespace

std::string to_string(const Expr& e) {
  std::string out;
  render(e, out);
  return out;
}

}  // namespace grpo::math
