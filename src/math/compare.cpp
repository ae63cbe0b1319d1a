// SPDX-License-Identifier: Apache-2.0
// Equivalence engine: gold-directed comparison rules (after Math-Verify's sympy_expr_eq), exact rationals with
// GMP, ball arithmetic with Arb for constants, and randomised identity testing for expressions with symbols. One
// file over 700 lines: the rules recurse into each other over the same expression tree and numeric back ends.
#include <grpo/math/exact_value.hpp>

#include <acb.h>
#include <arb.h>
#include <gmpxx.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "grpo/math/verify.hpp"

namespace grpo::math {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// Budget: a cooperative step counter with an optional wall-clock deadline (no signals).
struct Budget {
  std::chrono::steady_clock::time_point deadline;
  std::int64_t steps_left = 2'000'000;
  bool timed_out = false;
  bool exhausted = false;
  bool tick() {
    if (timed_out || exhausted) return false;
    if (--steps_left < 0) {
      exhausted = true;
      return false;
    }
    if ((steps_left & 255) == 0 && deadline != std::chrono::steady_clock::time_point::max() &&
        std::chrono::steady_clock::now() > deadline) {
      timed_out = true;
      return false;
    }
    return true;
  }
};

// RAII wrapper over Arb's complex ball.
struct Ball {
  acb_t v;
  Ball() { acb_init(v); }
  ~Ball() { acb_clear(v); }
  Ball(const Ball& o) {
    acb_init(v);
    acb_set(v, o.v);
  }
  Ball& operator=(const Ball& o) {
    if (this != &o) acb_set(v, o.v);
    return *this;
  }
};

bool contains_kind(const Expr& e, ExprKind k) {
  if (e.kind == k) return true;
  return std::any_of(e.args.begin(), e.args.end(), [k](const Expr& a) { return contains_kind(a, k); });
}
bool contains_float(const Expr& e) {
  if (e.kind == ExprKind::number && e.is_float) return true;
  return std::any_of(e.args.begin(), e.args.end(), contains_float);
}
bool contains_infinity(const Expr& e) {
  if (e.kind == ExprKind::constant && e.text == "oo") return true;
  return std::any_of(e.args.begin(), e.args.end(), contains_infinity);
}
bool contains_number_literal(const Expr& e) {
  if (e.kind == ExprKind::number) return true;
  if (e.kind == ExprKind::pow && e.args[1].kind == ExprKind::number && e.args[1].text == "-1") {  // a / b: the -1 is not written
    return contains_number_literal(e.args[0]);
  }
  return std::any_of(e.args.begin(), e.args.end(), contains_number_literal);
}

// Only numbers, +, ·, and powers: a rational number when the exponents are integers.
bool rational_tree(const Expr& e) {
  if (e.kind == ExprKind::number) return true;
  if (e.kind != ExprKind::add && e.kind != ExprKind::mul && e.kind != ExprKind::pow) return false;
  return std::all_of(e.args.begin(), e.args.end(), rational_tree);
}

// Free symbols: symbol names (except e and i, which are constants) and text words.
void free_symbols(const Expr& e, std::set<std::string>& out) {
  if ((e.kind == ExprKind::symbol && e.text != "e" && e.text != "i") || e.kind == ExprKind::text) out.insert(e.text);
  for (const auto& a : e.args) free_symbols(a, out);
}

void rename_symbols(Expr& e, const std::map<std::string, std::string>& m) {
  if (e.kind == ExprKind::symbol || e.kind == ExprKind::text) {
    auto it = m.find(e.text);
    if (it != m.end()) e.text = it->second;
  }
  for (auto& a : e.args) rename_symbols(a, m);
}

// ---------------------------------------------------------------------------------------------------------------
// Exact rationals.
std::optional<mpq_class> parse_number(const std::string& t) {
  const auto slash = t.find('/');
  try {
    if (slash != std::string::npos) {
      mpq_class q(mpz_class(t.substr(0, slash)), mpz_class(t.substr(slash + 1)));
      if (q.get_den() == 0) return std::nullopt;
      q.canonicalize();
      return q;
    }
    std::string mant = t;
    long exp10 = 0;
    const auto e = t.find_first_of("eE");
    if (e != std::string::npos) {
      mant = t.substr(0, e);
      const std::string ex = t.substr(e + 1);
      if (ex.size() > 6) return std::nullopt;
      exp10 = std::stol(ex);
    }
    const auto dot = mant.find('.');
    if (dot != std::string::npos) {
      exp10 -= static_cast<long>(mant.size() - dot - 1);
      mant.erase(dot, 1);
    }
    if (mant.empty()) return std::nullopt;
    if (std::labs(exp10) > 10000) return std::nullopt;
    mpz_class m(mant), p;
    mpz_ui_pow_ui(p.get_mpz_t(), 10, static_cast<unsigned long>(std::labs(exp10)));
    mpq_class q = exp10 >= 0 ? mpq_class(m * p) : mpq_class(m, p);
    q.canonicalize();
    return q;
  } catch (...) {
    return std::nullopt;
  }
}

constexpr std::size_t kMaxExactBits = 1 << 16;

std::optional<mpq_class> exact(const Expr& e, Budget& b);

// A power whose exponent is a non-integer rational (2^{1/3}, \sqrt[3]{2}): its value may be irrational, so exact
// rational arithmetic failing on it says nothing about size.
bool fractional_power(const Expr& e, Budget& b) {
  if (e.kind == ExprKind::pow) {
    if (const auto ex = exact(e.args[1], b); ex && ex->get_den() != 1) return true;
  }
  return std::any_of(e.args.begin(), e.args.end(), [&](const Expr& a) { return fractional_power(a, b); });
}

std::optional<mpq_class> exact(const Expr& e, Budget& b) {
  if (!b.tick()) return std::nullopt;
  switch (e.kind) {
    case ExprKind::number: return parse_number(e.text);
    case ExprKind::add: {
      mpq_class s = 0;
      for (const auto& a : e.args) {
        auto v = exact(a, b);
        if (!v) return std::nullopt;
        s += *v;
      }
      return s;
    }
    case ExprKind::mul: {
      mpq_class s = 1;
      for (const auto& a : e.args) {
        auto v = exact(a, b);
        if (!v) return std::nullopt;
        s *= *v;
        if (mpz_sizeinbase(s.get_num_mpz_t(), 2) + mpz_sizeinbase(s.get_den_mpz_t(), 2) > kMaxExactBits) return std::nullopt;
      }
      return s;
    }
    case ExprKind::pow: {
      auto base = exact(e.args[0], b);
      if (!base) return std::nullopt;
      auto ex = exact(e.args[1], b);
      if (!ex || !mpz_fits_slong_p(ex->get_num_mpz_t())) return std::nullopt;
      if (ex->get_den() != 1) {
        // A rational power p/q is rational exactly when the base's numerator and denominator are perfect q-th
        // powers (8^{2/3} = 4, 27^{-1/3} = 1/3); otherwise it is irrational and left to ball arithmetic. Negative
        // bases follow SymPy's principal branch (complex), so only non-negative ones are taken here.
        if (!mpz_fits_ulong_p(ex->get_den_mpz_t()) || ex->get_den() > 64 || *base < 0) return std::nullopt;
        const unsigned long q = mpz_get_ui(ex->get_den_mpz_t());
        mpz_class num_root, den_root;
        if (mpz_root(num_root.get_mpz_t(), base->get_num_mpz_t(), q) == 0) return std::nullopt;
        if (mpz_root(den_root.get_mpz_t(), base->get_den_mpz_t(), q) == 0) return std::nullopt;
        *base = mpq_class(num_root, den_root);
        *ex = mpq_class(ex->get_num());
      }
      const long n = mpz_get_si(ex->get_num_mpz_t());
      const std::size_t bits = mpz_sizeinbase(base->get_num_mpz_t(), 2) + mpz_sizeinbase(base->get_den_mpz_t(), 2);
      if (std::labs(n) > 100000 || bits * static_cast<std::size_t>(std::labs(n)) > kMaxExactBits) return std::nullopt;
      if (n < 0 && *base == 0) return std::nullopt;
      mpz_class num, den;
      mpz_pow_ui(num.get_mpz_t(), base->get_num_mpz_t(), static_cast<unsigned long>(std::labs(n)));
      mpz_pow_ui(den.get_mpz_t(), base->get_den_mpz_t(), static_cast<unsigned long>(std::labs(n)));
      mpq_class r = n >= 0 ? mpq_class(num, den) : mpq_class(den, num);
      r.canonicalize();
      return r;
    }
    case ExprKind::func: {
      if (e.text == "abs" && e.args.size() == 1) {
        auto v = exact(e.args[0], b);
        if (!v) return std::nullopt;
        return mpq_class(abs(*v));
      }
      if (e.text == "factorial" && e.args.size() == 1) {
        auto v = exact(e.args[0], b);
        if (!v || v->get_den() != 1 || *v < 0 || *v > 2000) return std::nullopt;
        mpz_class f;
        mpz_fac_ui(f.get_mpz_t(), v->get_num().get_ui());
        return mpq_class(f);
      }
      if (e.text == "binom" && e.args.size() == 2) {
        auto n = exact(e.args[0], b), k = exact(e.args[1], b);
        if (!n || !k || n->get_den() != 1 || k->get_den() != 1 || *n < 0 || *n > 100000 || *k < 0) return std::nullopt;
        if (*k > *n) return mpq_class(0);
        mpz_class r;
        mpz_bin_uiui(r.get_mpz_t(), n->get_num().get_ui(), k->get_num().get_ui());
        return mpq_class(r);
      }
      if ((e.text == "gcd" || e.text == "lcm") && e.args.size() >= 2) {
        mpz_class acc;
        for (std::size_t k = 0; k < e.args.size(); ++k) {
          auto v = exact(e.args[k], b);
          if (!v || v->get_den() != 1) return std::nullopt;
          if (k == 0) acc = v->get_num();
          else if (e.text == "gcd") mpz_gcd(acc.get_mpz_t(), acc.get_mpz_t(), v->get_num_mpz_t());
          else mpz_lcm(acc.get_mpz_t(), acc.get_mpz_t(), v->get_num_mpz_t());
        }
        return mpq_class(acc);
      }
      if ((e.text == "max" || e.text == "min") && !e.args.empty()) {
        std::optional<mpq_class> best;
        for (const auto& a : e.args) {
          auto v = exact(a, b);
          if (!v) return std::nullopt;
          if (!best || (e.text == "max" ? *v > *best : *v < *best)) best = v;
        }
        return best;
      }
      if (e.text == "mod" && e.args.size() == 2) {  // a mod b = a - b·floor(a/b), sign of b (SymPy Mod)
        auto a = exact(e.args[0], b), m = exact(e.args[1], b);
        if (!a || !m || *m == 0) return std::nullopt;
        mpq_class q = *a / *m;
        mpz_class f;
        mpz_fdiv_q(f.get_mpz_t(), q.get_num_mpz_t(), q.get_den_mpz_t());
        return mpq_class(*a - *m * mpq_class(f));
      }
      if ((e.text == "floor" || e.text == "ceiling") && e.args.size() == 1) {
        auto v = exact(e.args[0], b);
        if (!v) return std::nullopt;
        mpz_class r;
        if (e.text == "floor") mpz_fdiv_q(r.get_mpz_t(), v->get_num_mpz_t(), v->get_den_mpz_t());
        else mpz_cdiv_q(r.get_mpz_t(), v->get_num_mpz_t(), v->get_den_mpz_t());
        return mpq_class(r);
      }
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Ball evaluation. Symbols take values from `point`; undefined functions f(x) are a fixed pseudo-random function of
// their name and argument values, so f(x) equals f(x) and differs from g(x) or f(y) with high probability.
struct EvalContext {
  slong prec = 128;
  const std::map<std::string, Ball>* point = nullptr;
  Budget* budget = nullptr;
};

std::uint64_t mix(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}
std::uint64_t hash_string(std::string_view s, std::uint64_t seed) {
  std::uint64_t h = seed ^ 0x9e3779b97f4a7c15ULL;
  for (char c : s) h = mix(h ^ static_cast<unsigned char>(c));
  return h;
}

bool eval(const Expr& e, EvalContext& c, Ball& out);

bool eval(const Expr& e, EvalContext& c, Ball& out) {
  if (!c.budget->tick()) return false;
  const slong prec = c.prec;
  switch (e.kind) {
    case ExprKind::number: {
      const auto slash = e.text.find('/');
      if (slash != std::string::npos) {
        arb_t n, d;
        arb_init(n);
        arb_init(d);
        const bool ok = arb_set_str(n, e.text.substr(0, slash).c_str(), prec) == 0 &&
                        arb_set_str(d, e.text.substr(slash + 1).c_str(), prec) == 0;
        if (ok) {
          arb_div(n, n, d, prec);
          acb_set_arb(out.v, n);
        }
        arb_clear(n);
        arb_clear(d);
        return ok;
      }
      arb_t x;
      arb_init(x);
      const bool ok = arb_set_str(x, e.text.c_str(), prec) == 0;
      if (ok) acb_set_arb(out.v, x);
      arb_clear(x);
      return ok;
    }
    case ExprKind::symbol:
    case ExprKind::text: {
      if (e.text == "e") {
        arb_const_e(acb_realref(out.v), prec);
        arb_zero(acb_imagref(out.v));
        return true;
      }
      if (e.text == "i") {
        acb_onei(out.v);
        return true;
      }
      if (!c.point) return false;
      auto it = c.point->find(e.text);
      if (it == c.point->end()) return false;
      acb_set(out.v, it->second.v);
      return true;
    }
    case ExprKind::constant: {
      if (e.text == "pi") {
        acb_const_pi(out.v, prec);
        return true;
      }
      if (e.text == "i") {
        acb_onei(out.v);
        return true;
      }
      return false;  // infinity is compared structurally
    }
    case ExprKind::add: {
      Ball t;
      acb_zero(out.v);
      for (const auto& a : e.args) {
        if (!eval(a, c, t)) return false;
        acb_add(out.v, out.v, t.v, prec);
      }
      return true;
    }
    case ExprKind::mul: {
      Ball t;
      acb_one(out.v);
      for (const auto& a : e.args) {
        if (!eval(a, c, t)) return false;
        acb_mul(out.v, out.v, t.v, prec);
      }
      return acb_is_finite(out.v);
    }
    case ExprKind::pow: {
      Ball base, ex;
      if (!eval(e.args[0], c, base) || !eval(e.args[1], c, ex)) return false;
      if (acb_contains_zero(base.v) && !(arb_is_positive(acb_realref(ex.v)) && acb_is_real(ex.v))) return false;
      // Real odd roots of negative reals (x^(1/3) for x < 0) follow SymPy's principal branch: no special case.
      if (acb_is_int(ex.v) && arf_cmpabs_2exp_si(arb_midref(acb_realref(ex.v)), 30) < 0) {
        fmpz_t n;
        fmpz_init(n);
        arf_get_fmpz(n, arb_midref(acb_realref(ex.v)), ARF_RND_NEAR);
        acb_pow_fmpz(out.v, base.v, n, prec);
        fmpz_clear(n);
      } else {
        acb_pow(out.v, base.v, ex.v, prec);
      }
      return acb_is_finite(out.v);
    }
    case ExprKind::func: {
      const std::string& f = e.text;
      if (f.rfind("undefined:", 0) == 0) {
        std::uint64_t h = hash_string(f, 7);
        Ball a;
        for (const auto& arg : e.args) {
          if (!eval(arg, c, a)) return false;
          const double re = arf_get_d(arb_midref(acb_realref(a.v)), ARF_RND_NEAR);
          const double im = arf_get_d(arb_midref(acb_imagref(a.v)), ARF_RND_NEAR);
          // Quantise so that equal arguments computed along different paths hash alike.
          auto quantise = [](double x) -> std::uint64_t {
            if (std::isfinite(x) && std::fabs(x) < 1e9) return static_cast<std::uint64_t>(std::llround(x * 1e9));
            return std::bit_cast<std::uint64_t>(std::isfinite(x) ? static_cast<double>(static_cast<float>(x)) : 0.0);
          };
          h = mix(h ^ quantise(re));
          h = mix(h ^ quantise(im));
        }
        acb_set_d(out.v, 0.5 + static_cast<double>(h % 1000003) / 1000003.0);
        return true;
      }
      if (f == "factorial" || f == "binom" || f == "gcd" || f == "lcm" || f == "floor" || f == "ceiling" ||
          f == "max" || f == "min" || f == "mod") {
        if (auto q = exact(e, *c.budget)) {
          arb_t n, d;
          arb_init(n);
          arb_init(d);
          arb_set_str(n, q->get_num().get_str().c_str(), prec);
          arb_set_str(d, q->get_den().get_str().c_str(), prec);
          arb_div(n, n, d, prec);
          acb_set_arb(out.v, n);
          arb_clear(n);
          arb_clear(d);
          return true;
        }
        if ((f == "floor" || f == "ceiling") && e.args.size() == 1) {
          Ball a;
          if (!eval(e.args[0], c, a) || !arb_contains_zero(acb_imagref(a.v))) return false;
          if (f == "floor") arb_floor(acb_realref(out.v), acb_realref(a.v), prec);
          else arb_ceil(acb_realref(out.v), acb_realref(a.v), prec);
          arb_zero(acb_imagref(out.v));
          return arb_is_exact(acb_realref(out.v));  // an integer, not a ball straddling one
        }
        if (f == "factorial" && e.args.size() == 1) {
          Ball a;
          if (!eval(e.args[0], c, a)) return false;
          acb_add_ui(a.v, a.v, 1, prec);
          acb_gamma(out.v, a.v, prec);
          return acb_is_finite(out.v);
        }
        return false;
      }
      if (e.args.empty()) return false;
      Ball a;
      if (!eval(e.args[0], c, a)) return false;
      if (f == "sqrt") acb_sqrt(out.v, a.v, prec);
      else if (f == "sin") acb_sin(out.v, a.v, prec);
      else if (f == "cos") acb_cos(out.v, a.v, prec);
      else if (f == "tan") acb_tan(out.v, a.v, prec);
      else if (f == "cot") acb_cot(out.v, a.v, prec);
      else if (f == "sec") acb_sec(out.v, a.v, prec);
      else if (f == "csc") acb_csc(out.v, a.v, prec);
      else if (f == "arcsin") acb_asin(out.v, a.v, prec);
      else if (f == "arccos") acb_acos(out.v, a.v, prec);
      else if (f == "arctan") acb_atan(out.v, a.v, prec);
      else if (f == "sinh") acb_sinh(out.v, a.v, prec);
      else if (f == "cosh") acb_cosh(out.v, a.v, prec);
      else if (f == "tanh") acb_tanh(out.v, a.v, prec);
      else if (f == "coth") acb_coth(out.v, a.v, prec);
      else if (f == "sech") acb_sech(out.v, a.v, prec);
      else if (f == "csch") acb_csch(out.v, a.v, prec);
      else if (f == "arsinh") acb_asinh(out.v, a.v, prec);
      else if (f == "arcosh") acb_acosh(out.v, a.v, prec);
      else if (f == "artanh") acb_atanh(out.v, a.v, prec);
      else if (f == "exp") acb_exp(out.v, a.v, prec);
      else if (f == "sgn" || f == "sign") acb_sgn(out.v, a.v, prec);
      else if (f == "ln" || f == "log") {
        if (acb_contains_zero(a.v)) return false;
        acb_log(out.v, a.v, prec);
        if (e.args.size() == 2) {
          Ball base;
          if (!eval(e.args[1], c, base) || acb_contains_zero(base.v)) return false;
          acb_log(base.v, base.v, prec);
          if (acb_contains_zero(base.v)) return false;
          acb_div(out.v, out.v, base.v, prec);
        }
      } else if (f == "abs") {
        arb_t r;
        arb_init(r);
        acb_abs(r, a.v, prec);
        acb_set_arb(out.v, r);
        arb_clear(r);
      } else {
        return false;
      }
      return acb_is_finite(out.v);
    }
    default: return false;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Numeric comparison of two scalar expressions.
struct Comparator {
  const VerifyOptions& o;
  Budget budget;

  explicit Comparator(const VerifyOptions& opts) : o(opts) { budget.deadline = opts.deadline; }

  Verdict unknown_or_timeout() const { return budget.timed_out ? Verdict::timeout : Verdict::unknown; }

  // |a - b| <= 10^-digits * max(1, |a|, |b|) within the balls' accuracy → equal; clearly larger → not equal.
  static Verdict close(const Ball& a, const Ball& b, double rel_digits, slong prec) {
    Ball d;
    acb_sub(d.v, a.v, b.v, prec);
    arb_t m, sa, sb, tol;
    arb_init(m);
    arb_init(sa);
    arb_init(sb);
    arb_init(tol);
    acb_abs(m, d.v, prec);
    acb_abs(sa, a.v, prec);
    acb_abs(sb, b.v, prec);
    arb_max(sa, sa, sb, prec);
    arb_one(sb);
    arb_max(sa, sa, sb, prec);
    arb_set_d(tol, std::pow(10.0, -rel_digits));
    arb_mul(tol, tol, sa, prec);
    Verdict v = Verdict::unknown;
    if (arb_le(m, tol)) v = Verdict::equal;         // the whole ball is below the tolerance
    else if (arb_gt(m, tol)) v = Verdict::not_equal;  // the whole ball is above it
    else if (mag_cmp_2exp_si(arb_radref(m), -60) < 0) {
      v = arf_cmp(arb_midref(m), arb_midref(tol)) <= 0 ? Verdict::equal : Verdict::not_equal;
    }
    arb_clear(m);
    arb_clear(sa);
    arb_clear(sb);
    arb_clear(tol);
    return v;
  }

  // Rounds the real part to `digits` decimals (half away from zero), as SymPy's Float.round does in practice.
  static bool rounded(const Ball& x, int digits, fmpz_t out, slong prec) {
    if (!arb_contains_zero(acb_imagref(x.v)) || mag_cmp_2exp_si(arb_radref(acb_imagref(x.v)), -40) > 0) {
      if (!arb_is_zero(acb_imagref(x.v))) {
        // allow a tiny imaginary residue
        arb_t im;
        arb_init(im);
        arb_abs(im, acb_imagref(x.v));
        const bool tiny = arf_cmpabs_2exp_si(arb_midref(im), -60) < 0;
        arb_clear(im);
        if (!tiny) return false;
      }
    }
    arb_t t, p;
    arb_init(t);
    arb_init(p);
    arb_set_ui(p, 10);
    arb_pow_ui(p, p, static_cast<ulong>(std::max(0, digits)), prec);
    arb_mul(t, acb_realref(x.v), p, prec);
    arf_t half;
    arf_init(half);
    arf_set_d(half, 0.5);
    arf_t mid;
    arf_init(mid);
    arf_set(mid, arb_midref(t));
    if (arf_sgn(mid) >= 0) arf_add(mid, mid, half, prec, ARF_RND_DOWN);
    else arf_sub(mid, mid, half, prec, ARF_RND_DOWN);
    const bool ok = arf_is_finite(mid) && arf_cmpabs_2exp_si(mid, 4096) < 0;
    if (ok) arf_get_fmpz(out, mid, ARF_RND_DOWN);
    arf_clear(half);
    arf_clear(mid);
    arb_clear(t);
    arb_clear(p);
    return ok;
  }

  Verdict numeric(const Expr& g, const Expr& p) {
    if (contains_infinity(g) || contains_infinity(p)) return Verdict::not_equal;  // structural equality failed
    if (contains_kind(g, ExprKind::matrix) || contains_kind(p, ExprKind::matrix)) return Verdict::not_equal;
    std::set<std::string> syms;
    free_symbols(g, syms);
    free_symbols(p, syms);
    const bool floats = contains_float(g) || contains_float(p);
    if (syms.empty()) {
      if (!floats) {
        auto a = exact(g, budget), b = exact(p, budget);
        if (a && b) return *a == *b ? Verdict::equal : Verdict::not_equal;
      }
      // Rational arithmetic too big to carry out exactly (10^{10^{10}} + 1): balls prove inequality, but equality
      // relative to the size of such values is not evidence.
      const bool too_big_for_exact =
          !floats && rational_tree(g) && rational_tree(p) && !fractional_power(g, budget) && !fractional_power(p, budget);
      Verdict last = Verdict::unknown;
      for (slong prec : {128, 320}) {
        EvalContext c{prec, nullptr, &budget};
        Ball a, b;
        if (!eval(g, c, a) || !eval(p, c, b)) return unknown_or_timeout();
        if (floats) {
          fmpz_t ra, rb;
          fmpz_init(ra);
          fmpz_init(rb);
          const bool ok = rounded(a, o.float_rounding, ra, prec) && rounded(b, o.float_rounding, rb, prec);
          const bool eq = ok && fmpz_equal(ra, rb);
          fmpz_clear(ra);
          fmpz_clear(rb);
          if (ok) return eq ? Verdict::equal : Verdict::not_equal;
          last = close(a, b, o.numeric_precision, prec);
        } else {
          last = close(a, b, static_cast<double>(prec) * 0.3 - 8, prec);
          if (last == Verdict::equal && too_big_for_exact) return unknown_or_timeout();
        }
        if (last != Verdict::unknown) return last;
      }
      return last;
    }
    // Randomised identity testing: the same points for both sides.
    int valid = 0;
    const double digits = floats ? std::max(o.float_rounding + 2, 9) : 25;
    for (int k = 0; k < o.random_points * 3 && valid < o.random_points; ++k) {
      std::map<std::string, Ball> point;
      for (const auto& s : syms) {
        const std::uint64_t h = hash_string(s, 0x51ed + static_cast<std::uint64_t>(k));
        // values in ±[0.3, 2.3], rational with denominator 997; alternate signs across points
        const double mag = 0.3 + static_cast<double>(h % 2000) / 1000.0;
        Ball v;
        acb_set_si(v.v, static_cast<slong>(std::llround(mag * 997)) * ((k % 3 == 2) ? -1 : 1));
        acb_div_ui(v.v, v.v, 997, 128);
        point.emplace(s, v);
      }
      EvalContext c{128, &point, &budget};
      Ball a, b;
      const bool oka = eval(g, c, a), okb = eval(p, c, b);
      if (budget.timed_out || budget.exhausted) return unknown_or_timeout();
      if (!oka || !okb) continue;
      const Verdict v = close(a, b, digits, 128);
      if (v == Verdict::not_equal) return Verdict::not_equal;
      if (v == Verdict::unknown) return Verdict::unknown;
      ++valid;
    }
    return valid >= std::min(3, o.random_points) ? Verdict::equal : unknown_or_timeout();
  }

  // The ratio (a/b) is the same nonzero constant at every point (positive when `positive`): the relations
  // a ⋈ 0 and b ⋈ 0 have the same solutions (used instead of SymPy's solve()).
  Verdict proportional(const Expr& a, const Expr& b, bool positive) {
    std::set<std::string> syms;
    free_symbols(a, syms);
    free_symbols(b, syms);
    std::optional<Ball> ratio;
    int valid = 0;
    for (int k = 0; k < o.random_points * 3 && valid < o.random_points; ++k) {
      std::map<std::string, Ball> point;
      for (const auto& s : syms) {
        const std::uint64_t h = hash_string(s, 0xabc + static_cast<std::uint64_t>(k));
        Ball v;
        acb_set_si(v.v, static_cast<slong>(h % 4000) - 2000);
        acb_div_ui(v.v, v.v, 997, 128);
        point.emplace(s, v);
      }
      EvalContext c{128, &point, &budget};
      Ball x, y;
      if (!eval(a, c, x) || !eval(b, c, y)) {
        if (budget.timed_out || budget.exhausted) return unknown_or_timeout();
        continue;
      }
      if (acb_contains_zero(y.v) || acb_contains_zero(x.v)) continue;
      Ball r;
      acb_div(r.v, x.v, y.v, 128);
      if (positive && !arb_is_positive(acb_realref(r.v))) return Verdict::not_equal;  // a flipped inequality
      if (ratio) {
        if (close(*ratio, r, 20, 128) != Verdict::equal) return Verdict::not_equal;
      } else {
        ratio = r;
      }
      ++valid;
    }
    return valid >= 3 ? Verdict::equal : unknown_or_timeout();
  }

  static Expr difference(const Expr& l, const Expr& r) {
    Expr negr;
    negr.kind = ExprKind::mul;
    Expr m1;
    m1.kind = ExprKind::number;
    m1.text = "-1";
    negr.args = {m1, r};
    Expr d;
    d.kind = ExprKind::add;
    d.args = {l, negr};
    return d;
  }

  static Rel mirror(Rel r) {
    switch (r) {
      case Rel::lt: return Rel::gt;
      case Rel::gt: return Rel::lt;
      case Rel::le: return Rel::ge;
      case Rel::ge: return Rel::le;
      default: return r;
    }
  }

  // A chain of equalities a = b = c compares as a = c (Math-Verify cuts chains to first.lhs = last.rhs).
  static Expr cut_chain(const Expr& e) {
    if (e.kind != ExprKind::logical_and) return e;
    if (!std::all_of(e.args.begin(), e.args.end(), [](const Expr& r) { return r.rel == Rel::eq; })) return e;
    Expr r = e.args.front();
    r.args[1] = e.args.back().args[1];
    return r;
  }

  Verdict relation(const Expr& g0, const Expr& p0) {
    const Expr g = cut_chain(g0), p = cut_chain(p0);
    if (g.kind == ExprKind::logical_and || p.kind == ExprKind::logical_and) {
      if (g.kind != p.kind || g.args.size() != p.args.size()) return Verdict::not_equal;
      bool unknown = false;
      for (std::size_t k = 0; k < g.args.size(); ++k) {
        const Verdict v = relation(g.args[k], p.args[k]);
        if (v == Verdict::not_equal || v == Verdict::timeout) return v;
        unknown |= v == Verdict::unknown;
      }
      return unknown ? Verdict::unknown : Verdict::equal;
    }
    const bool same = g.rel == p.rel, mirrored = g.rel == mirror(p.rel) && !same;
    if (!same && !mirrored) return Verdict::not_equal;
    const Expr& pl = mirrored ? p.args[1] : p.args[0];
    const Expr& pr = mirrored ? p.args[0] : p.args[1];
    const bool structured = is_set_like(g.args[0]) || is_set_like(g.args[1]) || is_set_like(pl) || is_set_like(pr) ||
                            contains_kind(g, ExprKind::matrix) || contains_kind(p, ExprKind::matrix);
    if (structured || g.rel == Rel::in) {
      const Verdict a = compare(g.args[0], pl), b = compare(g.args[1], pr);
      if (a == Verdict::equal && b == Verdict::equal) return Verdict::equal;
      return (a == Verdict::not_equal || b == Verdict::not_equal) ? Verdict::not_equal : Verdict::unknown;
    }
    const Expr dg = difference(g.args[0], g.args[1]);
    const Expr dp = difference(pl, pr);
    if (numeric(dg, dp) == Verdict::equal) return Verdict::equal;
    const bool symmetric = g.rel == Rel::eq || g.rel == Rel::ne;
    return proportional(dg, dp, /*positive=*/!symmetric);
  }

  // An inequality (chain) in one variable as an interval / a relation x = c as a set; nullopt otherwise.
  std::optional<Expr> as_set(const Expr& e) {
    auto is_plain_var = [](const Expr& x) {
      return x.kind == ExprKind::symbol || x.kind == ExprKind::text ||
             (x.kind == ExprKind::func && x.text.rfind("undefined:", 0) == 0);
    };
    // |v| bounded by constants is solved form too: 1 \le |z| \le 2 is [-2, -1] ∪ [1, 2].
    auto is_var = [&](const Expr& x) {
      return is_plain_var(x) || (x.kind == ExprKind::func && x.text == "abs" && x.args.size() == 1 &&
                                 is_plain_var(x.args[0]));
    };
    auto is_const = [](const Expr& x) {
      std::set<std::string> s;
      free_symbols(x, s);
      return s.empty() && !is_set_like(x) && !is_relation(x);
    };
    struct Bound {
      std::optional<Expr> lo, hi;
      bool lo_open = true, hi_open = true;
      std::string var;
      bool absolute = false;  // the variable is |v|
    };
    auto one = [&](const Expr& r, Bound& b) -> bool {
      if (r.kind != ExprKind::relation) return false;
      Rel op = r.rel;
      const Expr* var = nullptr;
      const Expr* val = nullptr;
      if (is_var(r.args[0]) && is_const(r.args[1])) {
        var = &r.args[0];
        val = &r.args[1];
      } else if (is_var(r.args[1]) && is_const(r.args[0])) {
        var = &r.args[1];
        val = &r.args[0];
        op = mirror(op);
      } else {
        return false;
      }
      const std::string name = to_string(*var);
      b.absolute = var->kind == ExprKind::func && var->text == "abs";
      if (!b.var.empty() && b.var != name) return false;
      b.var = name;
      switch (op) {
        case Rel::lt:
        case Rel::le:
          if (b.hi) return false;
          b.hi = *val;
          b.hi_open = op == Rel::lt;
          return true;
        case Rel::gt:
        case Rel::ge:
          if (b.lo) return false;
          b.lo = *val;
          b.lo_open = op == Rel::gt;
          return true;
        case Rel::eq:
          if (b.lo || b.hi) return false;
          b.lo = *val;
          b.hi = *val;
          b.lo_open = b.hi_open = false;
          return true;
        default: return false;
      }
    };
    Bound b;
    if (e.kind == ExprKind::relation) {
      if (e.rel == Rel::in) return e.args[1];
      if (!one(e, b)) return std::nullopt;
    } else if (e.kind == ExprKind::logical_and) {
      for (const auto& r : e.args) {
        if (!one(r, b)) return std::nullopt;
      }
    } else {
      return std::nullopt;
    }
    if (b.absolute) return absolute_value_set(b.lo, b.hi, b.lo_open, b.hi_open);
    if (b.lo && b.hi && !b.lo_open && !b.hi_open && *b.lo == *b.hi) {
      Expr s;
      s.kind = ExprKind::set;
      s.args = {*b.lo};
      return s;
    }
    return interval(b.lo ? *b.lo : negated(infinity()), b.hi ? *b.hi : infinity(), b.lo ? b.lo_open : true,
                    b.hi ? b.hi_open : true);
  }

  static Expr infinity() {
    Expr inf;
    inf.kind = ExprKind::constant;
    inf.text = "oo";
    return inf;
  }
  static Expr negated(Expr x) {  // -1 · x, as the parser writes -x
    Expr minus_one;
    minus_one.text = "-1";
    Expr m;
    m.kind = ExprKind::mul;
    m.args = {std::move(minus_one), std::move(x)};
    return m;
  }
  static Expr interval(Expr lo, Expr hi, bool left_open, bool right_open) {
    Expr iv;
    iv.kind = ExprKind::interval;
    iv.args = {std::move(lo), std::move(hi)};
    iv.left_open = left_open;
    iv.right_open = right_open;
    return iv;
  }

  // The set of v with lo (<, ≤) |v| (<, ≤) hi for constant bounds (either may be absent): [-hi, hi] when lo ≤ 0
  // admits 0, else [-hi, -lo] ∪ [lo, hi]; a bound that is not an exact rational gives nullopt.
  std::optional<Expr> absolute_value_set(const std::optional<Expr>& lo_expr, const std::optional<Expr>& hi_expr,
                                         bool lo_open, bool hi_open) {
    std::optional<mpq_class> lo, hi;
    if (lo_expr && !(lo = exact(*lo_expr, budget))) return std::nullopt;
    if (hi_expr && !(hi = exact(*hi_expr, budget))) return std::nullopt;
    const Expr inf = infinity();
    Expr empty;
    empty.kind = ExprKind::set;
    if (hi && (*hi < 0 || (*hi == 0 && hi_open))) return empty;
    if (lo && hi && (*lo > *hi || (*lo == *hi && (lo_open || hi_open)))) return empty;
    const bool zero_inside = !lo || *lo < 0 || (*lo == 0 && !lo_open);
    if (lo && hi && *lo == *hi) {  // |v| = a
      Expr pair;
      pair.kind = ExprKind::set;
      pair.args = *lo == 0 ? std::vector<Expr>{*lo_expr} : std::vector<Expr>{negated(*lo_expr), *lo_expr};
      return pair;
    }
    if (zero_inside) {
      if (!hi) return interval(negated(inf), inf, true, true);
      return interval(negated(*hi_expr), *hi_expr, hi_open, hi_open);
    }
    Expr both;
    both.kind = ExprKind::set_union;
    both.args = {interval(hi ? negated(*hi_expr) : negated(inf), negated(*lo_expr), hi ? hi_open : true, lo_open),
                 interval(*lo_expr, hi ? *hi_expr : inf, lo_open, hi ? hi_open : true)};
    return both;
  }

  static std::vector<Expr> elements(const Expr& e) {
    if (e.kind == ExprKind::tuple) return e.args;
    if (e.kind != ExprKind::set) return {e};
    std::vector<Expr> out;  // a set has no duplicates (SymPy FiniteSet)
    for (const auto& a : e.args) {
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
    return out;
  }

  Verdict all_pairwise(const std::vector<Expr>& a, const std::vector<Expr>& b) {
    if (a.size() != b.size()) return Verdict::not_equal;
    bool unknown = false;
    for (std::size_t k = 0; k < a.size(); ++k) {
      const Verdict v = compare(a[k], b[k]);
      if (v == Verdict::not_equal || v == Verdict::timeout) return v;
      unknown |= v == Verdict::unknown;
    }
    return unknown ? Verdict::unknown : Verdict::equal;
  }

  // Unordered: every gold element is matched to a distinct equal prediction element (greedy; equality is an
  // equivalence relation, so greedy matching suffices).
  Verdict matching(const std::vector<Expr>& a, const std::vector<Expr>& b) {
    if (a.size() != b.size()) return Verdict::not_equal;
    std::vector<bool> used(b.size(), false);
    bool unknown = false;
    for (const auto& x : a) {
      bool found = false;
      for (std::size_t k = 0; k < b.size() && !found; ++k) {
        if (used[k]) continue;
        const Verdict v = x == b[k] ? Verdict::equal : compare(x, b[k]);
        if (v == Verdict::timeout) return v;
        if (v == Verdict::equal) {
          used[k] = true;
          found = true;
        }
        unknown |= v == Verdict::unknown;
      }
      if (!found) return unknown ? Verdict::unknown : Verdict::not_equal;
    }
    return Verdict::equal;
  }

  // ---- Subsets of the real line: intervals, points, unions and differences in one canonical form --------------
  // Disjoint pieces in increasing order, overlapping and touching pieces merged ([2, 3] ∪ [3, 5] = [2, 5],
  // ℝ ∖ {0} = (-∞, 0) ∪ (0, ∞), {2} ∪ {-2} = {-2, 2}); a point is the closed piece [a, a]. Endpoints are real
  // constants: ordered by their values, equal when compare() says so.
  struct Piece {
    Expr lo, hi;
    double lo_value = 0, hi_value = 0;
    bool lo_open = false, hi_open = false;
  };

  // The value of a real constant (±∞ for the infinities), or nullopt for an expression with symbols or a value that
  // is not real.
  std::optional<double> real_value(const Expr& e) {
    if (e.kind == ExprKind::constant && e.text == "oo") return std::numeric_limits<double>::infinity();
    if (e.kind == ExprKind::mul && e.args.size() == 2 && e.args[0].kind == ExprKind::number && e.args[0].text == "-1" &&
        e.args[1].kind == ExprKind::constant && e.args[1].text == "oo") {
      return -std::numeric_limits<double>::infinity();
    }
    if (contains_infinity(e)) return std::nullopt;
    std::set<std::string> symbols;
    free_symbols(e, symbols);
    if (!symbols.empty() || is_set_like(e) || is_relation(e) || contains_kind(e, ExprKind::matrix)) return std::nullopt;
    if (auto q = exact(e, budget)) return q->get_d();
    EvalContext c{128, nullptr, &budget};
    Ball b;
    if (!eval(e, c, b) || !arb_contains_zero(acb_imagref(b.v)) || !arb_is_finite(acb_realref(b.v))) return std::nullopt;
    return arf_get_d(arb_midref(acb_realref(b.v)), ARF_RND_NEAR);
  }

  // Whether two endpoints are the same number (under the options' float rounding, as any two numbers).
  bool same_point(const Expr& a, double av, const Expr& b, double bv) {
    if (std::isinf(av) || std::isinf(bv)) return av == bv;
    return a == b || compare(a, b) == Verdict::equal;
  }

  // The pieces of a set of real numbers, or nullopt when it is not one (symbols, tuples that are points, matrices).
  // `tuples_are_intervals`: a written (a, b) is the open interval.
  std::optional<std::vector<Piece>> real_pieces(const Expr& e, bool tuples_are_intervals, int depth = 0) {
    if (depth > 32 || !budget.tick()) return std::nullopt;
    std::vector<Piece> out;
    const auto add = [&](const Expr& lo, const Expr& hi, bool lo_open, bool hi_open) {
      const auto lv = real_value(lo), hv = real_value(hi);
      if (!lv || !hv) return false;
      if (*lv > *hv && !same_point(lo, *lv, hi, *hv)) return true;  // empty
      if (same_point(lo, *lv, hi, *hv) && (lo_open || hi_open)) return true;  // empty
      out.push_back({lo, hi, *lv, *hv, lo_open && !std::isinf(*lv), hi_open && !std::isinf(*hv)});
      return true;
    };
    switch (e.kind) {
      case ExprKind::interval:
        if (e.args.size() != 2 || !add(e.args[0], e.args[1], e.left_open, e.right_open)) return std::nullopt;
        break;
      case ExprKind::tuple:
        if (!tuples_are_intervals || !e.maybe_interval || e.args.size() != 2 || !add(e.args[0], e.args[1], true, true)) {
          return std::nullopt;
        }
        break;
      case ExprKind::set: {  // numbers, or solutions listed as equations of one variable ("x = 2, x = -2")
        std::set<std::string> variables;
        free_symbols(e, variables);
        if (variables.size() > 1) return std::nullopt;
        for (const Expr& a : e.args) {
          const bool solution = a.kind == ExprKind::relation && a.rel == Rel::eq;
          if (solution) {
            auto point = as_set(a);
            if (!point || point->kind != ExprKind::set || point->args.size() != 1) return std::nullopt;
            if (!add(point->args[0], point->args[0], false, false)) return std::nullopt;
          } else if (!add(a, a, false, false)) {
            return std::nullopt;
          }
        }
        break;
      }
      case ExprKind::set_union:
        for (const Expr& a : e.args) {
          auto part = real_pieces(a, true, depth + 1);
          if (!part) return std::nullopt;
          out.insert(out.end(), part->begin(), part->end());
        }
        break;
      case ExprKind::set_difference: {
        auto from = real_pieces(e.args[0], true, depth + 1);
        auto removed = real_pieces(e.args[1], false, depth + 1);
        if (!from || !removed) return std::nullopt;
        out = std::move(*from);
        for (const Piece& r : *removed) {
          if (!same_point(r.lo, r.lo_value, r.hi, r.hi_value)) return std::nullopt;  // only points are removed here
          std::vector<Piece> next;
          for (const Piece& q : out) {
            const bool at_lo = same_point(q.lo, q.lo_value, r.lo, r.lo_value);
            const bool at_hi = same_point(q.hi, q.hi_value, r.lo, r.lo_value);
            const bool inside = at_lo ? !q.lo_open
                                : at_hi ? !q.hi_open
                                        : r.lo_value > q.lo_value && r.lo_value < q.hi_value;
            if (!inside) {
              next.push_back(q);
            } else if (at_lo && at_hi) {
              // the piece is the point itself: removed
            } else if (at_lo) {
              next.push_back(q);
              next.back().lo_open = true;
            } else if (at_hi) {
              next.push_back(q);
              next.back().hi_open = true;
            } else {
              next.push_back({q.lo, r.lo, q.lo_value, r.lo_value, q.lo_open, true});
              next.push_back({r.lo, q.hi, r.lo_value, q.hi_value, true, q.hi_open});
            }
          }
          out = std::move(next);
        }
        break;
      }
      case ExprKind::relation:
      case ExprKind::logical_and: {
        auto solved = as_set(e);
        if (!solved || is_relation(*solved)) return std::nullopt;
        return real_pieces(*solved, true, depth + 1);
      }
      default: return std::nullopt;
    }
    // Canonical: sorted by left end (closed before open), overlapping or touching pieces merged.
    std::sort(out.begin(), out.end(), [](const Piece& a, const Piece& b) {
      if (a.lo_value != b.lo_value) return a.lo_value < b.lo_value;
      return !a.lo_open && b.lo_open;
    });
    std::vector<Piece> merged;
    for (Piece& q : out) {
      if (!merged.empty()) {
        Piece& last = merged.back();
        const bool touching = same_point(last.hi, last.hi_value, q.lo, q.lo_value);
        if ((q.lo_value < last.hi_value && !touching) || (touching && (!last.hi_open || !q.lo_open))) {
          const bool same_end = same_point(last.hi, last.hi_value, q.hi, q.hi_value);
          if (same_end) {
            last.hi_open = last.hi_open && q.hi_open;
          } else if (q.hi_value > last.hi_value) {
            last.hi = q.hi;
            last.hi_value = q.hi_value;
            last.hi_open = q.hi_open;
          }
          continue;
        }
      }
      merged.push_back(std::move(q));
    }
    return merged;
  }

  // Both sides as sets of real numbers in canonical form, when both are: equal exactly when the pieces are.
  std::optional<Verdict> real_sets(const Expr& g, const Expr& p) {
    const auto a = real_pieces(g, true), b = real_pieces(p, true);
    if (!a || !b) return std::nullopt;
    if (a->size() != b->size()) return Verdict::not_equal;
    for (std::size_t k = 0; k < a->size(); ++k) {
      const Piece &x = (*a)[k], &y = (*b)[k];
      if (x.lo_open != y.lo_open || x.hi_open != y.hi_open || !same_point(x.lo, x.lo_value, y.lo, y.lo_value) ||
          !same_point(x.hi, x.hi_value, y.hi, y.hi_value)) {
        return Verdict::not_equal;
      }
    }
    return Verdict::equal;
  }

  Verdict sets(const Expr& g, const Expr& p) {
    const auto gk = g.kind, pk = p.kind;
    const auto on_the_line = [](ExprKind k) {
      return k == ExprKind::interval || k == ExprKind::set_union || k == ExprKind::set_difference;
    };
    if (on_the_line(gk) || on_the_line(pk)) {
      if (const auto v = real_sets(g, p)) return *v;
      if (gk == ExprKind::set_difference || pk == ExprKind::set_difference) return unknown_or_timeout();
    }
    auto interval_like = [](const Expr& e) { return e.kind == ExprKind::interval || (e.kind == ExprKind::tuple && e.maybe_interval); };
    if (gk == ExprKind::interval || pk == ExprKind::interval) {
      if (!interval_like(g) || !interval_like(p)) return Verdict::not_equal;
      const bool glo = gk == ExprKind::interval ? g.left_open : true, ghi = gk == ExprKind::interval ? g.right_open : true;
      const bool plo = pk == ExprKind::interval ? p.left_open : true, phi = pk == ExprKind::interval ? p.right_open : true;
      if (glo != plo || ghi != phi) return Verdict::not_equal;
      return all_pairwise(g.args, p.args);
    }
    if (gk == ExprKind::set_union || pk == ExprKind::set_union) {
      if (gk != pk) return Verdict::not_equal;
      const Verdict v = all_pairwise(g.args, p.args);
      return v == Verdict::not_equal ? matching(g.args, p.args) : v;
    }
    if (gk == ExprKind::tuple && pk == ExprKind::tuple) return all_pairwise(g.args, p.args);
    if (gk == ExprKind::tuple && pk == ExprKind::set) return all_pairwise(g.args, elements(p));
    if (gk == ExprKind::tuple || pk == ExprKind::tuple) {
      // a tuple against a scalar is not equal; against a set: unordered
      if (gk != ExprKind::set && pk != ExprKind::set) return Verdict::not_equal;
    }
    return matching(elements(g), elements(p));
  }

  static std::optional<std::string> concatenated_name(const Expr& e) {
    if (e.kind == ExprKind::symbol || e.kind == ExprKind::text) return e.text;
    if (e.kind != ExprKind::mul) return std::nullopt;
    std::string s;
    for (const auto& a : e.args) {
      if (a.kind != ExprKind::symbol && a.kind != ExprKind::text) return std::nullopt;
      s += a.text;
    }
    return s;
  }

  static bool is_assignment(const Expr& e) {
    const Expr* last = nullptr;
    if (e.kind == ExprKind::relation) last = &e;
    if (e.kind == ExprKind::logical_and) {
      if (!std::all_of(e.args.begin(), e.args.end(), [](const Expr& r) { return r.rel == Rel::eq; })) return false;
      last = &e.args.back();
    }
    if (!last || last->rel != Rel::eq) return false;
    // Math-Verify: the left side is built only of symbols (k, (p,q), |AB|, A:B, f(x)); a number makes it an
    // equation to compare as a whole (7 = 11a + c, 2x + z = 1).
    const Expr& lhs = last->args[0];
    if (lhs.kind == ExprKind::func && lhs.text.rfind("undefined:", 0) == 0) return true;
    std::set<std::string> s;
    free_symbols(lhs, s);
    return !s.empty() && !contains_number_literal(lhs);
  }
  // strict_equations: an assignment whose left side names one quantity: a symbol (x, a_1), a product of letters (AB),
  // an undefined function's value (f(2)), |…| or a tuple of those; not a sum (x + y + z = 4 is an equation).
  static bool names_a_quantity(const Expr& e) {
    if (!is_assignment(e)) return false;
    const Expr& lhs = e.kind == ExprKind::relation ? e.args[0] : e.args.back().args[0];
    const auto name = [](const auto& self, const Expr& x) -> bool {
      switch (x.kind) {
        case ExprKind::symbol: return true;
        case ExprKind::func: return x.text.rfind("undefined:", 0) == 0 || x.text == "abs";
        case ExprKind::mul:
        case ExprKind::tuple:
          return std::all_of(x.args.begin(), x.args.end(), [&](const Expr& a) { return self(self, a); });
        default: return false;
      }
    };
    return name(name, lhs);
  }
  static bool is_equation(const Expr& e) {
    if (e.kind == ExprKind::relation) return e.rel == Rel::eq;
    if (e.kind == ExprKind::logical_and) return !e.args.empty() && e.args.back().rel == Rel::eq;
    return false;
  }
  static Expr rhs(const Expr& e) { return e.kind == ExprKind::relation ? e.args[1] : e.args.back().args[1]; }
  // An equation (or chain) with no free symbols whose every side is equal: 2 + 2 = 4, 6 \cdot 7 = 42.
  bool true_statement(const Expr& e) {
    const auto holds = [&](const Expr& r) {
      std::set<std::string> symbols;
      free_symbols(r, symbols);
      return symbols.empty() && r.args.size() == 2 && compare(r.args[0], r.args[1]) == Verdict::equal;
    };
    if (e.kind == ExprKind::relation) return holds(e);
    return std::all_of(e.args.begin(), e.args.end(), holds);
  }

  Verdict compare(const Expr& g0, const Expr& p0) {
    if (!budget.tick()) return unknown_or_timeout();
    const Expr* g = &g0;
    const Expr* p = &p0;
    Expr gtmp, ptmp;
    // A solved relation against a gold set is the set it describes (|x| = 3 is {-3, 3}), not its right side.
    const std::optional<Expr> solved_set =
        o.solved_relation_as_set && is_set_like(*g) && is_relation(*p) ? as_set(*p) : std::nullopt;
    if (is_equation(*p) && !is_relation(*g) && !solved_set) {
      if (o.strict_equations && !names_a_quantity(*p) && !true_statement(*p)) return Verdict::not_equal;
      ptmp = rhs(*p);
      p = &ptmp;
    } else if (is_assignment(*g) && !is_relation(*p)) {
      gtmp = rhs(*g);
      g = &gtmp;
    }
    if (g->kind == ExprKind::relation && g->rel == Rel::in) {
      gtmp = Expr(g->args[1]);
      g = &gtmp;
    }
    if (p->kind == ExprKind::relation && p->rel == Rel::in) {
      ptmp = Expr(p->args[1]);
      p = &ptmp;
    }
    if (is_relation(*g) && is_set_like(*p)) {
      if (auto s = as_set(*g)) {
        gtmp = std::move(*s);
        g = &gtmp;
      }
    } else if (is_set_like(*g) && is_relation(*p) && (o.allow_set_relation_comp || o.solved_relation_as_set)) {
      if (auto s = solved_set ? solved_set : as_set(*p)) {
        ptmp = std::move(*s);
        p = &ptmp;
      }
    }
    if (*g == *p) return Verdict::equal;
    if (is_relation(*g) && is_relation(*p)) return relation(*g, *p);
    if (is_relation(*g) || is_relation(*p)) return Verdict::not_equal;
    if (is_set_like(*g) || is_set_like(*p)) return sets(*g, *p);
    if (g->kind == ExprKind::matrix && p->kind == ExprKind::matrix) {
      if (g->rows != p->rows || g->cols != p->cols) return Verdict::not_equal;
      return all_pairwise(g->args, p->args);
    }
    if (contains_kind(*g, ExprKind::matrix) || contains_kind(*p, ExprKind::matrix)) return matrices(*g, *p);
    const auto gn = concatenated_name(*g), pn = concatenated_name(*p);
    if (gn && pn && (g->kind != ExprKind::mul || p->kind != ExprKind::mul)) {
      if (*gn == *pn) return Verdict::equal;
      if (g->kind != ExprKind::mul && p->kind != ExprKind::mul) return Verdict::not_equal;
    }
    if ((g->kind == ExprKind::text) != (p->kind == ExprKind::text) && (g->kind == ExprKind::text ? !pn : !gn)) {
      return Verdict::not_equal;
    }
    return numeric(*g, *p);
  }

  // Matrix expressions (sums, products, scalar multiples of matrix literals) with constant entries.
  struct MatrixValue {
    int rows = 1, cols = 1;
    bool scalar = true;
    std::vector<Ball> v;
  };

  std::optional<MatrixValue> matrix_eval(const Expr& e, EvalContext& c) {
    if (!budget.tick()) return std::nullopt;
    if (!contains_kind(e, ExprKind::matrix)) {
      MatrixValue m;
      m.v.resize(1);
      if (!eval(e, c, m.v[0])) return std::nullopt;
      return m;
    }
    if (e.kind == ExprKind::matrix) {
      MatrixValue m;
      m.rows = e.rows;
      m.cols = e.cols;
      m.scalar = false;
      m.v.resize(e.args.size());
      for (std::size_t k = 0; k < e.args.size(); ++k) {
        if (!eval(e.args[k], c, m.v[k])) return std::nullopt;
      }
      return m;
    }
    if (e.kind == ExprKind::add) {
      std::optional<MatrixValue> acc;
      for (const auto& a : e.args) {
        auto x = matrix_eval(a, c);
        if (!x) return std::nullopt;
        if (!acc) {
          acc = std::move(x);
          continue;
        }
        if (acc->scalar != x->scalar || acc->rows != x->rows || acc->cols != x->cols) return std::nullopt;
        for (std::size_t k = 0; k < acc->v.size(); ++k) acb_add(acc->v[k].v, acc->v[k].v, x->v[k].v, c.prec);
      }
      return acc;
    }
    if (e.kind == ExprKind::mul) {
      std::optional<MatrixValue> acc;
      for (const auto& a : e.args) {
        auto x = matrix_eval(a, c);
        if (!x) return std::nullopt;
        if (!acc) {
          acc = std::move(x);
          continue;
        }
        if (acc->scalar || x->scalar) {
          const MatrixValue& s = acc->scalar ? *acc : *x;
          MatrixValue r = acc->scalar ? *x : *acc;
          for (auto& b : r.v) acb_mul(b.v, b.v, s.v[0].v, c.prec);
          acc = std::move(r);
          continue;
        }
        if (acc->cols != x->rows) return std::nullopt;
        MatrixValue r;
        r.scalar = false;
        r.rows = acc->rows;
        r.cols = x->cols;
        r.v.resize(static_cast<std::size_t>(r.rows * r.cols));
        Ball t;
        for (int i = 0; i < r.rows; ++i) {
          for (int j = 0; j < r.cols; ++j) {
            Ball& out = r.v[static_cast<std::size_t>(i * r.cols + j)];
            acb_zero(out.v);
            for (int k = 0; k < acc->cols; ++k) {
              acb_mul(t.v, acc->v[static_cast<std::size_t>(i * acc->cols + k)].v,
                      x->v[static_cast<std::size_t>(k * x->cols + j)].v, c.prec);
              acb_add(out.v, out.v, t.v, c.prec);
            }
          }
        }
        acc = std::move(r);
      }
      return acc;
    }
    return std::nullopt;
  }

  Verdict matrices(const Expr& g, const Expr& p) {
    // A matrix is never a scalar, whatever symbols the scalar holds.
    if (contains_kind(g, ExprKind::matrix) != contains_kind(p, ExprKind::matrix) &&
        (g.kind == ExprKind::matrix || p.kind == ExprKind::matrix)) {
      return Verdict::not_equal;
    }
    std::set<std::string> syms;
    free_symbols(g, syms);
    free_symbols(p, syms);
    if (!syms.empty()) return unknown_or_timeout();
    EvalContext c{128, nullptr, &budget};
    auto a = matrix_eval(g, c), b = matrix_eval(p, c);
    if (!a || !b) return unknown_or_timeout();
    if (a->scalar != b->scalar || a->rows != b->rows || a->cols != b->cols) return Verdict::not_equal;
    for (std::size_t k = 0; k < a->v.size(); ++k) {
      const Verdict v = close(a->v[k], b->v[k], 25, 128);
      if (v != Verdict::equal) return v;
    }
    return Verdict::equal;
  }
};

}  // namespace

std::optional<Expr> solved_relation_set(const Expr& relation) {
  const VerifyOptions options;
  return Comparator(options).as_set(relation);
}

Verdict compare(const Expr& gold, const Expr& pred, const VerifyOptions& options) {
  Comparator c(options);
  if (!options.strict) {
    std::set<std::string> gs, ps;
    free_symbols(gold, gs);
    free_symbols(pred, ps);
    if (gs.size() == ps.size() && gs != ps) {
      std::map<std::string, std::string> m;
      auto gi = gs.begin();
      for (const auto& s : ps) m[s] = *gi++;
      Expr renamed = pred;
      rename_symbols(renamed, m);
      return c.compare(gold, renamed);
    }
  }
  return c.compare(gold, pred);
}

std::optional<std::string> exact_value(const Expr& e) {
  Budget budget;
  budget.deadline = std::chrono::steady_clock::time_point::max();
  const auto value = exact(e, budget);
  if (!value) return std::nullopt;
  return value->get_str();
}

}  // namespace grpo::math
