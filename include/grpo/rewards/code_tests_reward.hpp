// SPDX-License-Identifier: Apache-2.0
// The code-execution reward: extract the completion's last fenced code block, run it (Python; or C++, compiled in a
// sandbox first) against the row's test cases inside the bubblewrap sandbox (grpo::sandbox, docs/sandbox.md), and
// score the pass rate.
//
// Test cases come from the dataset row (ROLL's code rows, roll/pipeline/rlvr; rLLM/DeepCoder,
// rllm/rewards/code_reward.py; open-r1, src/open_r1/rewards.py):
//  - stdin/stdout: `test_cases: [{"input", "expected_output"}]` (also "stdin"/"expected_stdout", ROLL's HTTP form),
//    `case_type` "", "input", "stdin", "stdin_stdout" or "stdin/stdout";
//  - call-based (LiveCodeBench, ROLL's `test_case_function` = function name): same pairs, each input line a JSON
//    argument, the function's return value compared as JSON (numbers with the float tolerance);
//    `case_type` "call" ("call_based", "call-based"), or a stdin case type with a non-empty `test_case_function`;
//  - assert-style: `case_type` "assert", "unittest" or "pytest"; `test_cases` a list of code strings (or objects
//    with "assert_code"), each run after the program; a test passes when it runs to its end. After the test code,
//    `test_case_function` (when set) is called — with the row's `entry_point` function as its argument when the row
//    names one (HumanEval's check(candidate)) — else every `test_*` function and unittest.TestCase it defines runs.
//    The expected outputs never enter the sandbox, so a program cannot read them;
//  - check-based (ROLL `case_type` "check_based", LeetCode style): `test_cases: [{"assert_code", "entry_point",
//    "import_prefix"}]`; the first line of assert_code is the checker's header (`def check(candidate):`) and each
//    further line one test, run as header + line + `check(<entry_point>)` (entry_point an expression such as
//    `Solution().twoSum`, default `candidate`), after import_prefix + prelude + the program (ROLL's order);
//  - text (ROLL `case_type` "text", IFEval-style): assert code on the response itself, `{response}` standing for the
//    completion's text after its last </think> (no code block). ROLL pastes the text between triple quotes; here it
//    is a string variable, so a response cannot break out of the quotes and rewrite the check.
// Scores: pass rate (ROLL continuous / open-r1 `code`), all-or-nothing (rLLM), or Codeforces-style weighted
// pass/fail + 0.1·rate (open-r1 `cf_code` weighted_sum).
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/io/code_tests.hpp>
#include <grpo/rewards/reward_function.hpp>
#include <grpo/sandbox/sandbox.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::rewards {

enum class CodeScoring {
  pass_rate,       ///< passed / total (ROLL, open-r1 `code`)
  all_or_nothing,  ///< 1 if every selected test passes, else 0 (rLLM DeepCoder, open-r1 `binary_code`)
  weighted,        ///< all-or-nothing + 0.1·passed/total (open-r1 `cf_code` weighted_sum, Codeforces style)
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<CodeScoring, 3> kCodeScoringNames{{
    {CodeScoring::pass_rate, "pass_rate"},
    {CodeScoring::all_or_nothing, "all_or_nothing"},
    {CodeScoring::weighted, "weighted"},
}};
}  // namespace detail

/// "pass_rate", "all_or_nothing" or "weighted".
GRPO_ENUM_NAMES(CodeScoring, detail::kCodeScoringNames, "code scoring");

enum class OutputComparison {
  exact,       ///< byte-for-byte
  whitespace,  ///< per line: leading/trailing whitespace dropped, inner runs of whitespace as one space; blank lines
               ///< at the start and end ignored (open-r1 and ROLL compare stripped lines)
  float_tolerance,  ///< whitespace-separated tokens; numeric tokens equal within the tolerance, others exactly
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<OutputComparison, 3> kOutputComparisonNames{{
    {OutputComparison::exact, "exact"},
    {OutputComparison::whitespace, "whitespace"},
    {OutputComparison::float_tolerance, "float"},
}};
}  // namespace detail

/// "exact", "whitespace" or "float" (float_tolerance).
GRPO_ENUM_NAMES(OutputComparison, detail::kOutputComparisonNames, "output comparison");

using io::CodeTestCase;
using io::CodeTests;
using io::TestKind;

struct CodeTestsOptions {
  /// Fence languages accepted for the code block (case-insensitive); a block with no language is accepted (as Python)
  /// when no block matches. "cpp", "c++", "cxx" and "cc" blocks are compiled with `cxx` and run (stdin/stdout tests
  /// only); every other accepted language is run with `python`.
  std::vector<std::string> languages = {"python", "python3", "py"};
  std::string python = "/usr/bin/python3";
  /// C++: compiled inside a sandbox that may start processes (the compiler driver needs them), once per completion.
  std::string cxx = "/usr/bin/g++";
  std::vector<std::string> cxx_flags = {"-O2", "-std=c++17"};
  std::chrono::milliseconds compile_time{20000};
  /// Code put before the program (e.g. ROLL's and LiveCodeBench's block of standard-library imports).
  std::string prelude;
  CodeScoring scoring = CodeScoring::pass_rate;
  OutputComparison comparison = OutputComparison::whitespace;
  double float_tolerance = 1e-6;  ///< |a − b| ≤ tol·max(1, |b|)
  bool early_exit = false;        ///< stop at the first failing test; the rest count as failed (open-r1 cf_code)
  std::size_t max_tests = 0;      ///< 0 = all; else the N tests with the longest inputs (rLLM: 15)
  /// Per test (the sandbox's wall-clock limit; its CPU limit is the same, rounded up to seconds). rLLM uses 12 s.
  std::chrono::milliseconds test_time{6000};
  std::chrono::milliseconds total_time{0};  ///< all tests of one completion; 0 = none; tests not run fail
  sandbox::SandboxOptions sandbox{};        ///< its limits.wall_time and cpu_seconds are replaced by test_time
  /// The row fields of the tests, their case type and the test function (config keys tests_field,
  /// case_type_field, function_field).
  io::CodeTestFields fields{};
  /// Value for a row without tests (or whose tests do not parse). No value by default.
  std::optional<float> no_tests_value = std::nullopt;
};

/// A fenced code block: its code and its language (the info string's first word, lower-cased; empty when none).
struct CodeBlock {
  std::string code;
  std::string language;
};

/// The last fenced code block (``` or ~~~) of `text` whose info string is one of `languages` (case-insensitive); if
/// none matches, the last block without an info string; nullopt when there is neither. An unclosed final fence runs
/// to the end of the text (a truncated completion's code still counts).
std::optional<CodeBlock> extract_code_block(std::string_view text, const std::vector<std::string>& languages);

/// Whether `actual` output matches `expected` under `comparison` (see OutputComparison).
bool outputs_match(std::string_view actual, std::string_view expected, OutputComparison comparison,
                   double float_tolerance = 1e-6);

/// Whether two JSON texts hold equal values: same structure, strings equal, numbers within the tolerance, integers
/// and floats compared as numbers. Used for call-based return values. False when either is not valid JSON.
bool json_values_match(std::string_view actual, std::string_view expected, double float_tolerance = 1e-6);

/// The score of `passed` of `total` tests under `scoring` (total > 0).
float code_score(std::size_t passed, std::size_t total, CodeScoring scoring);

/// What happened to one completion.
struct CodeTestsOutcome {
  std::optional<float> value;
  std::size_t passed = 0;
  std::size_t total = 0;    ///< selected tests (after max_tests)
  std::size_t run = 0;      ///< tests actually executed (early exit and the total limit run fewer)
  bool code_found = false;
  std::optional<sandbox::RunResult> compile;  ///< the C++ compilation, when there was one
  std::vector<sandbox::RunResult> runs;  ///< one per executed test, for diagnostics
};

/// 1 per test passed, combined by CodeScoring; no code block → 0; row without tests → no_tests_value; the scoring
/// deadline passing mid-way → no value. The constructor builds the sandbox and runs its probe: it throws
/// sandbox::SandboxError when code cannot be run confined here, so a config naming code_tests fails at start-up
/// instead of scoring everything 0. A set-up failure later (bwrap failing to start) propagates from score() as
/// SandboxError: the executor records no value and counts it in frac_error.
class CodeTestsReward final : public RewardFunction {
 public:
  explicit CodeTestsReward(CodeTestsOptions options = {});
  std::string name() const override { return "code_tests"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  /// One completion, with the per-test details.
  CodeTestsOutcome evaluate(const Completion& completion, const ScoringContext& context = {}) const;
  const CodeTestsOptions& options() const { return options_; }

 private:
  CodeTestsOptions options_;
  std::shared_ptr<const sandbox::Sandbox> sandbox_;
  std::shared_ptr<const sandbox::Sandbox> compile_sandbox_;  // only when a C++ language is accepted
};

}  // namespace grpo::rewards
