// SPDX-License-Identifier: Apache-2.0
// Conformance against the graders' own test suites (tests/data/conformance, see tests/data/README.md): streams the
// JSONL rows, runs each row under the profile its `config` names, prints a per-category agreement table, and
// requires agreement with Math-Verify's suite within a row or two of the measured figure. Rows where we knowingly differ from upstream are listed in
// docs/math_verifier.md ("Documented divergences"); they are not special-cased here.
#include <support/test_paths.hpp>
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <string>

#include "grpo/math/graders.hpp"
#include "grpo/math/verify.hpp"

namespace gm = grpo::math;

namespace {

std::filesystem::path conformance_dir() { return std::filesystem::path(grpo::testing::test_data_dir()) / "conformance"; }

struct Tally {
  int agree = 0, total = 0;
};

std::string str_or_empty(simdjson::ondemand::value v) {
  if (v.is_null()) return {};
  return std::string(std::string_view(v.get_string()));
}

void print_table(const std::string& title, const std::map<std::string, Tally>& by_category) {
  fmt::print("\n{}\n{:<72} {:>7} {:>7}\n", title, "category", "agree", "total");
  int a = 0, t = 0;
  for (const auto& [cat, tally] : by_category) {
    fmt::print("{:<72} {:>7} {:>7}\n", cat.size() > 72 ? cat.substr(cat.size() - 72) : cat, tally.agree, tally.total);
    a += tally.agree;
    t += tally.total;
  }
  fmt::print("{:<72} {:>7} {:>7}  ({:.1f}%)\n", "TOTAL", a, t, t ? 100.0 * a / t : 0.0);
}

// Rewrites SymPy's str() of an expression as LaTeX our parser reads: f(…) → \operatorname{f}(…) with SymPy's
// function names mapped to ours, multi-letter symbols → \name (theta, pi), oo → \infty; ** is read as ^.
std::string sympy_to_latex(std::string_view s) {
  static const std::map<std::string, std::string> kFunctions = {
      {"Abs", "abs"},     {"Max", "max"},       {"Min", "min"},   {"binomial", "binom"}, {"asin", "arcsin"},
      {"acos", "arccos"}, {"atan", "arctan"},   {"asinh", "arsinh"}, {"acosh", "arcosh"}, {"atanh", "artanh"},
      {"Mod", "mod"},     {"ceiling", "ceiling"}};
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    if (std::isalpha(static_cast<unsigned char>(s[i])) && (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
      std::size_t j = i;
      while (j < s.size() && std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
      const std::string word(s.substr(i, j - i));
      if (j < s.size() && s[j] == '(') {
        auto it = kFunctions.find(word);
        out += "\\operatorname{" + (it == kFunctions.end() ? word : it->second) + "}";
      } else if (word == "oo") {
        out += "\\infty ";
      } else if (word.size() > 1) {
        out += "\\" + word + " ";
      } else {
        out += word;
      }
      i = j;
      continue;
    }
    out += s[i++];
  }
  return out;
}

/// The JSON lines of one conformance file, streamed with simdjson (the stream points into `json` and `parser`, so
/// the three live together). The files are part of the repository: a missing one fails the test.
struct CaseStream {
  simdjson::ondemand::parser parser;
  simdjson::padded_string json;
  simdjson::ondemand::document_stream docs;
};

std::unique_ptr<CaseStream> open_cases(const std::string& file) {
  const auto path = conformance_dir() / file;
  REQUIRE(std::filesystem::exists(path));  // tests/data/conformance is part of the repository
  auto cases = std::make_unique<CaseStream>();
  cases->json = simdjson::padded_string::load(path.string());
  cases->docs = cases->parser.iterate_many(cases->json);
  return cases;
}

}  // namespace

TEST_CASE("conformance: Math-Verify's test suite (math_verify_cases.jsonl)", "[math][conformance]") {
  const auto cases = open_cases("math_verify_cases.jsonl");
  std::map<std::string, Tally> by_category;
  std::vector<std::string> disagreements;
  int row = 0;
  for (auto doc : cases->docs) {
    ++row;
    simdjson::ondemand::object obj = doc.get_object();
    const std::string gold = str_or_empty(obj["gold"]);
    const std::string pred = str_or_empty(obj["pred"]);
    const bool expected = obj["expected"].get_bool();
    const std::string category = str_or_empty(obj["category"]);
    // The row's settings through the library's one reader and mapping (grpo verify --jsonl's too); sympy_expr_eq
    // compares parsed expressions below, with the test harness's numbers.
    simdjson::ondemand::object config = obj["config"].get_object();
    gm::HarnessSettings settings = gm::read_harness_settings(std::string_view(config.raw_json()));
    const std::string harness = settings.harness.value_or("");
    if (harness == "sympy_expr_eq") settings.harness = "compare_strings";
    gm::VerifyOptions o = gm::harness_options(settings);
    o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    gm::Verdict v;
    if (harness == "sympy_expr_eq") {
      // Upstream compares the SymPy objects Rational(1,3) and Float(0.333) directly; the strings render them.
      auto g = gm::parse_plain(gold), p = gm::parse_plain(pred);
      REQUIRE(g);
      REQUIRE(p);
      v = gm::compare(*g, *p, o);
    } else {
      v = gm::verify(gold, pred, o);
    }
    const bool agree = (v == gm::Verdict::equal) == expected;
    auto& tally = by_category[category];
    ++tally.total;
    tally.agree += agree;
    if (!agree) disagreements.push_back(fmt::format("row {} expected={} gold={:.60} pred={:.60}", row, expected, gold, pred));
  }
  print_table("Math-Verify conformance (math_verify_cases.jsonl)", by_category);
  for (const auto& d : disagreements) fmt::print("  disagree: {}\n", d);
  int agree = 0, total = 0;
  for (const auto& [cat, t] : by_category) {
    agree += t.agree;
    total += t.total;
  }
  CHECK(total == 274);
  // 272 measured (99.3%; the two disagreements are printed above and listed in docs/math_verifier.md): any
  // regression fails.
  fmt::print("Math-Verify conformance: {}/{} (floor 272)\n", agree, total);
  REQUIRE(agree >= 272);
}

TEST_CASE("conformance: Math-Verify's test suite through the default grading path (the accuracy reward's)",
          "[math][conformance]") {
  // Every row graded as the accuracy reward grades it (VerifyOptions{}: the final answer, hedges not equal),
  // whatever settings upstream's harness used. The misses are rows whose verdict needs the harness's settings
  // (float_rounding 2-3 for 0.333 against 1/3, strict=false for f(y) against f(x), decimal commas) and the two rows
  // of docs/math_verifier.md's divergences.
  const auto cases = open_cases("math_verify_cases.jsonl");
  int agree = 0, total = 0;
  for (auto doc : cases->docs) {
    simdjson::ondemand::object obj = doc.get_object();
    const std::string gold = str_or_empty(obj["gold"]);
    const std::string pred = str_or_empty(obj["pred"]);
    const bool expected = obj["expected"].get_bool();
    const gm::Grade grade = gm::grade(gold, pred);
    ++total;
    if ((grade.verdict == gm::Verdict::equal) == expected) {
      ++agree;
    } else {
      fmt::print("  default path disagrees: expected={} gold={:.60} pred={:.80} ({})\n", expected, gold,
                 pred.size() > 80 ? pred.substr(pred.size() - 80) : pred, grade.reason);
    }
  }
  CHECK(total == 274);
  // 261 measured (95.3%): any regression fails.
  fmt::print("Math-Verify's suite through the default path: {}/{} (floor 261)\n", agree, total);
  CHECK(agree >= 261);
}

TEST_CASE("conformance: other graders under their profiles (other_graders_cases.jsonl)", "[math][conformance]") {
  const auto cases = open_cases("other_graders_cases.jsonl");
  std::map<std::string, Tally> by_grader;
  for (auto doc : cases->docs) {
    simdjson::ondemand::object obj = doc.get_object();
    const std::string gold = str_or_empty(obj["gold"]);
    const std::string pred = str_or_empty(obj["pred"]);
    const bool expected = obj["expected"].get_bool();
    const std::string grader = str_or_empty(obj["config"]["grader"]);
    gm::Verdict v = gm::Verdict::unknown;
    if (grader == "hendrycks_is_equiv") v = gm::hendrycks_is_equiv(gold, pred);
    else if (grader == "nemo_skills_math_equal") v = gm::nemo_skills_math_equal(gold, pred);
    else if (grader == "open_r1_accuracy_reward") v = gm::verify(gold, pred, gm::open_r1_accuracy());
    else FAIL("unknown grader " << grader);
    auto& t = by_grader[grader];
    ++t.total;
    const bool agree = (v == gm::Verdict::equal) == expected;
    t.agree += agree;
    CHECK((agree || (fmt::print("  disagree: {} gold={} pred={}\n", grader, gold, pred), false)));
  }
  print_table("Other graders (other_graders_cases.jsonl)", by_grader);
}

TEST_CASE("conformance: extraction and normalisation cases (math_extract_cases.jsonl)", "[math][conformance]") {
  const auto cases = open_cases("math_extract_cases.jsonl");
  int checked = 0;
  for (auto doc : cases->docs) {
    simdjson::ondemand::object obj = doc.get_object();
    const std::string input = str_or_empty(obj["input"]);
    simdjson::ondemand::object cfg = obj["config"].get_object();
    const std::string target = str_or_empty(cfg["target"]);
    INFO("input: " << input << " target: " << target);
    if (target == "normalize_latex") {
      const std::string expected = str_or_empty(obj["expected_extraction"]);
      gm::NormalizationOptions n;
      simdjson::ondemand::object nc = cfg["normalization"].get_object();
      n.basic_latex = bool(nc["basic_latex"]);
      n.units = bool(nc["units"]);
      n.malformed_operators = bool(nc["malformed_operators"]);
      n.nits = bool(nc["nits"]);
      const std::string boxed = str_or_empty(nc["boxed"]);
      n.boxed = boxed == "all" ? gm::BoxedMode::all : boxed == "last" ? gm::BoxedMode::last : gm::BoxedMode::none;
      CHECK(gm::normalize_latex(input, n) == expected);
      ++checked;
    } else if (target == "latex") {
      gm::ExtractOptions e;
      e.expr = false;
      e.mode = gm::ExtractionMode::first_match;
      e.string_fallback = false;
      auto bp = cfg["boxed_match_priority"];
      if (!bp.error()) e.boxed_match_priority = static_cast<int>(int64_t(bp));
      auto norm = cfg["normalization"];
      if (!norm.error()) e.normalization.malformed_operators = bool(norm["malformed_operators"]);
      std::vector<std::string> expected;
      for (auto x : obj["expected_extraction"].get_array()) expected.push_back(str_or_empty(x.value()));
      const gm::ParsedAnswer got = gm::parse_answer(input, e);
      REQUIRE(expected.size() <= 1);
      if (expected.empty()) {
        CHECK_FALSE(got.expr);
      } else {
        REQUIRE(got.expr);
        auto want = gm::parse_plain(expected[0]);
        REQUIRE(want);
        CHECK(gm::compare(*want, *got.expr) == gm::Verdict::equal);
      }
      ++checked;
    } else if (target == "string") {
      gm::ExtractOptions e;
      e.latex = e.expr = false;
      for (auto x : cfg["strings"].get_array()) e.choices.push_back(str_or_empty(x.value()));
      e.lowercase_choices = bool(cfg["lowercase"]);
      e.choices_without_anchor = bool(cfg["try_extract_without_anchor"]);
      std::vector<std::string> expected;
      for (auto x : obj["expected_extraction"].get_array()) expected.push_back(str_or_empty(x.value()));
      const gm::ParsedAnswer got = gm::parse_answer(input, e);
      if (expected.empty()) {
        CHECK_FALSE(got.expr);
      } else {
        REQUIRE(expected.size() == 2);  // [parsed, original]
        REQUIRE(got.expr);
        CHECK(got.expr->text == expected[0]);
        CHECK(got.fallback == expected[1]);
      }
      ++checked;
    }
  }
  CHECK(checked == 20);
}

TEST_CASE("conformance: latex2sympy2_extended parser cases (latex2sympy_parse_cases.jsonl)", "[math][conformance]") {
  // A report with regression floors, not a parity target: our tree is smaller than SymPy's (no integrals, sums,
  // limits or derivatives; see docs/math_verifier.md). Rows whose SymPy rendering uses structures (Eq, Interval,
  // Integral, …) are skipped; the rest compare by value with compare().
  const auto cases = open_cases("latex2sympy_parse_cases.jsonl");
  std::map<std::string, Tally> by_category;
  Tally good, bad;
  for (auto doc : cases->docs) {
    simdjson::ondemand::object obj = doc.get_object();
    const std::string latex = str_or_empty(obj["latex"]);
    std::string category = str_or_empty(obj["category"]);
    category = category.substr(0, category.find("::"));
    auto expected_error = obj["expected"];
    if (!expected_error.error()) {
      ++bad.total;
      bad.agree += !gm::parse_latex(latex);
      continue;
    }
    const std::string sympy = str_or_empty(obj["expected_sympy"]);
    const bool plain = std::all_of(sympy.begin(), sympy.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("+-*/() .,_").find(c) != std::string_view::npos;
    });
    if (!plain) continue;
    auto want = gm::parse_plain(sympy_to_latex(sympy));
    auto got = gm::parse_latex(latex);
    const bool agree = want && got && gm::compare(*want, *got) == gm::Verdict::equal;
    ++good.total;
    good.agree += agree;
    auto& t = by_category[category];
    ++t.total;
    t.agree += agree;
  }
  print_table("latex2sympy2_extended parser cases (value agreement, plain SymPy renderings)", by_category);
  fmt::print("must-fail rows rejected: {}/{}\n", bad.agree, bad.total);
  // Floors a few rows below the measured 633/965 and 34/42 (printed above).
  CHECK(good.total == 965);
  CHECK(good.agree >= 628);
  CHECK(bad.total == 42);
  CHECK(bad.agree >= 33);
}
