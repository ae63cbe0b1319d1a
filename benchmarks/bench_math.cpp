// SPDX-License-Identifier: Apache-2.0
// Throughput of the math-answer verifier (grpo::math::verify, end to end: extraction, normalisation, parsing,
// comparison), one thread, on two workloads read from tests/data:
//   conformance  the 274 gold/pred pairs of Math-Verify's own suite (conformance/math_verify_cases.jsonl), each under
//                its row's harness settings (the settings tests/math/conformance_test.cpp uses);
//   math500      MATH-500 gold answers (datasets/roll_math_benchmarks.jsonl, tag MATH-500; gold given as \boxed{…})
//                boxed at the end of a 1-2 KB synthetic <think> completion, one correct and one perturbed-wrong
//                completion per row, graded as the accuracy reward grades (VerifyOptions{}: the final answer, hedge
//                checks) and as open-r1 does (open_r1_accuracy(): Math-Verify's extraction over the whole text).
//                Target: ≥ 30k checks/s on one core. Also open-r1's with the gold parsed once per row (parse_answer
//                + verify_parsed).
//   equivalence  the 234 hand-written hard pairs of equivalence_cases.jsonl (solution sets, radicals, fractions,
//                units, products and logarithms, rearranged equations, tuples, "or" relations, real sets, repeating
//                decimals; equal and not-equal), graded as the accuracy reward grades. Target: ≥ 35k checks/s.
// Counters: checks/s; equal, the fraction of checks returning Verdict::equal (≈ 0.5 expected for math500); agree,
// the fraction matching the expected label (the conformance row's, or correct/perturbed for math500). Skips with
// an error when tests/data is absent.
#include <benchmark/benchmark.h>
#include <simdjson.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "grpo/math/verify.hpp"

namespace gm = grpo::math;

namespace {

// The repository's tests/data (its README.md says where each file comes from).
std::filesystem::path test_data_dir() { return GRPO_TEST_DATA_DIR; }

struct Check {
  std::string gold, pred;
  gm::VerifyOptions options;
  bool expected = true;
};

std::string string_or_empty(simdjson::ondemand::value v) {
  if (v.is_null()) return {};
  return std::string(std::string_view(v.get_string()));
}

// The rows of a gold/pred/expected JSONL file, each with the options `options_of(row)` gives (default options when
// none is given).
std::vector<Check> load_checks(const std::filesystem::path& path,
                               const std::function<gm::VerifyOptions(simdjson::ondemand::object&)>& options_of = {}) {
  simdjson::ondemand::parser parser;
  const simdjson::padded_string json = simdjson::padded_string::load(path.string());
  std::vector<Check> checks;
  simdjson::ondemand::document_stream docs = parser.iterate_many(json);
  for (auto doc : docs) {
    simdjson::ondemand::object row = doc.get_object();
    Check c;
    c.gold = string_or_empty(row["gold"]);
    c.pred = string_or_empty(row["pred"]);
    c.expected = row["expected"].get_bool();
    if (options_of) c.options = options_of(row);
    checks.push_back(std::move(c));
  }
  return checks;
}

// Math-Verify's suite with each row's harness: compare_strings → math_verify_test_harness(latex, expr) with the
// row's rounding/strictness; parse_verify_defaults and the 4 sympy_expr_eq rows (whose strings are plain renderings
// of SymPy objects) → math_verify_defaults().
gm::VerifyOptions conformance_options(simdjson::ondemand::object& row) {
  simdjson::ondemand::object cfg = row["config"].get_object();
  if (string_or_empty(cfg["harness"]) != "compare_strings") return gm::math_verify_defaults();
  bool latex = false, expr = false;
  for (auto target : cfg["extraction"].get_array()) {
    const std::string_view t = target.get_string();
    latex |= t == "latex";
    expr |= t == "expr";
  }
  gm::VerifyOptions options = gm::math_verify_test_harness(latex, expr);
  options.float_rounding = static_cast<int>(int64_t(cfg["float_rounding"]));
  options.numeric_precision = static_cast<int>(int64_t(cfg["numeric_precision"]));
  options.strict = bool(cfg["strict"]);
  options.allow_set_relation_comp = bool(cfg["allow_set_relation_comp"]);
  return options;
}

// A wrong answer that stays well-formed: the first digit changed (2/3 → 3/3, .0000672 → .1000672; the last digit
// would vanish under float rounding or sit in a stripped unit like cm^2), or "+1" appended when there is no digit
// (\pi → \pi+1).
std::string perturb(std::string answer) {
  for (char& c : answer) {
    if (c >= '0' && c <= '9') {
      c = c == '9' ? '7' : static_cast<char>(c + 1);
      return answer;
    }
  }
  return answer + "+1";
}

// A 1-2 KB reasoning trace in the style of an R1 completion: sentences with inline LaTeX (so the extractor's
// environment scanners have work to do), varied per row by a small LCG, then the boxed final answer.
std::string completion(std::size_t row, const std::string& answer) {
  static constexpr std::string_view kSentences[] = {
      "Let me denote the unknown by $x$ and set up the equation from the statement. ",
      "Substituting $x = {a}$ gives $2x + {b} = {c}$, which does not satisfy the second condition. ",
      "Wait, I should double-check the constraint: we need $x^2 - {a}x + {b} \\geq 0$ for all real $x$. ",
      "By the quadratic formula, $x = \\frac{-b \\pm \\sqrt{b^2-4ac}}{2a}$, so the discriminant matters here. ",
      "Multiplying both sides by ${a}$ we get ${c} = {a} \\cdot {b} + r$ with $0 \\le r < {a}$. ",
      "Hmm, that seems off. Let me recompute: ${a} + {b} = {c}$, and ${c} - {a} = {b}$, so it checks out. ",
      "The area of the triangle is $\\frac{1}{2} \\cdot {a} \\cdot {b} = \\frac{{c}}{2}$ square units. ",
      "Using $\\sin^2\\theta + \\cos^2\\theta = 1$ we can eliminate $\\theta$ from the system. ",
      "So the probability is $\\frac{{a}}{{c}}$, since there are ${c}$ equally likely outcomes. ",
      "Alternatively, count the complement: $\\binom{{c}}{2} - {b}$ pairs fail the condition. ",
      "Now consider the case $n \\equiv {a} \\pmod{{b}}$ separately. ",
      "This gives $f({a}) = {c}$, consistent with the earlier computation. ",
  };
  std::uint64_t state = 0x9E3779B97F4A7C15ull * (row + 1);
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<unsigned>(state >> 33);
  };
  const std::size_t target = 1000 + next() % 900;
  std::string out = "<think>\nOkay, let's work through this problem step by step.\n";
  while (out.size() < target) {
    const std::string_view s = kSentences[next() % std::size(kSentences)];
    const unsigned a = 2 + next() % 40, b = 1 + next() % 90, c = a + b;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '{' && i + 2 < s.size() && s[i + 2] == '}' && (s[i + 1] == 'a' || s[i + 1] == 'b' || s[i + 1] == 'c')) {
        out += std::to_string(s[i + 1] == 'a' ? a : s[i + 1] == 'b' ? b : c);
        i += 2;
      } else {
        out += s[i];
      }
    }
    if (next() % 4 == 0) out += "\n\n";
  }
  out += "\n</think>\n\nPutting the pieces together, the computation above is complete.\n\nThe final answer is \\boxed{";
  out += answer;
  out += "}";
  return out;
}

std::vector<Check> load_math500(const std::filesystem::path& path, const gm::VerifyOptions& options) {
  simdjson::ondemand::parser parser;
  const simdjson::padded_string json = simdjson::padded_string::load(path.string());
  std::vector<Check> checks;
  std::size_t row = 0;
  simdjson::ondemand::document_stream docs = parser.iterate_many(json);
  for (auto doc : docs) {
    simdjson::ondemand::object obj = doc.get_object();
    if (string_or_empty(obj["tag"]) != "MATH-500") continue;
    // Delimited as open-r1 passes a dataset solution: a bare ground truth such as `3\sqrt{13}` would reach only the
    // plain-text extractor (Math-Verify semantics) and be read as `3`.
    const std::string answer = string_or_empty(obj["ground_truth"]);
    const std::string gold = "\\boxed{" + answer + "}";
    checks.push_back({gold, completion(row, answer), options, true});
    checks.push_back({gold, completion(row, perturb(answer)), options, false});
    ++row;
  }
  return checks;
}

// One check is verify(gold, pred) end to end. With reuse_gold, consecutive checks sharing a gold string form a
// group (as a GRPO group shares its prompt's answer): the gold is extracted and parsed once per group with
// parse_answer, and each completion goes through parse_answer + verify_parsed.
void run(benchmark::State& state, const std::vector<Check>& checks, const std::string& source, bool reuse_gold) {
  if (checks.empty()) {
    state.SkipWithError(("no data: " + source + " not found (tests/data is missing)").c_str());
    return;
  }
  std::size_t equal = 0, agree = 0;
  for (auto _ : state) {
    equal = agree = 0;
    const std::string* group_gold = nullptr;
    gm::ParsedAnswer gold;
    for (const Check& c : checks) {
      gm::VerifyOptions options = c.options;  // a reward function gives every check its own deadline
      options.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      gm::Verdict verdict;
      if (reuse_gold) {
        if (group_gold == nullptr || *group_gold != c.gold) {
          gold = gm::parse_answer(c.gold, options.gold, options.limits, options.deadline);
          group_gold = &c.gold;
        }
        verdict = gm::verify_parsed(gold, gm::parse_answer(c.pred, options.pred, options.limits, options.deadline),
                                    options);
      } else {
        verdict = gm::verify(c.gold, c.pred, options);
      }
      const bool is_equal = verdict == gm::Verdict::equal;
      equal += is_equal;
      agree += is_equal == c.expected;
    }
  }
  const auto n = static_cast<double>(checks.size());
  state.counters["checks/s"] = benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["equal"] = static_cast<double>(equal) / n;
  state.counters["agree"] = static_cast<double>(agree) / n;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const auto conformance_path = test_data_dir() / "conformance" / "math_verify_cases.jsonl";
  const auto math500_path = test_data_dir() / "datasets" / "roll_math_benchmarks.jsonl";
  const std::vector<Check> conformance =
      std::filesystem::exists(conformance_path) ? load_checks(conformance_path, conformance_options)
                                                : std::vector<Check>{};
  const bool have_math500 = std::filesystem::exists(math500_path);
  const std::vector<Check> math500_reward =
      have_math500 ? load_math500(math500_path, gm::VerifyOptions{}) : std::vector<Check>{};
  const std::vector<Check> math500 =
      have_math500 ? load_math500(math500_path, gm::open_r1_accuracy()) : std::vector<Check>{};
  const auto equivalence_path = test_data_dir() / "equivalence_cases.jsonl";
  const std::vector<Check> equivalence =
      std::filesystem::exists(equivalence_path) ? load_checks(equivalence_path) : std::vector<Check>{};
  benchmark::RegisterBenchmark("verify/conformance_pairs",
                               [&](benchmark::State& s) { run(s, conformance, conformance_path.string(), false); })
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("verify/math500_completions_final_answer",
                               [&](benchmark::State& s) { run(s, math500_reward, math500_path.string(), false); })
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("verify/math500_completions_open_r1",
                               [&](benchmark::State& s) { run(s, math500, math500_path.string(), false); })
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("verify/equivalence_pairs_final_answer",
                               [&](benchmark::State& s) { run(s, equivalence, equivalence_path.string(), false); })
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("verify_parsed/math500_completions_open_r1_gold_once",
                               [&](benchmark::State& s) { run(s, math500, math500_path.string(), true); })
      ->Unit(benchmark::kMillisecond);
  benchmark::AddCustomContext("threads", "1 (verify is single-threaded; run one process per core to scale)");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
