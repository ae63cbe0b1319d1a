// SPDX-License-Identifier: Apache-2.0
// The test cases of a dataset row, as the code reward runs them and the dataset checks them on load: which kind
// of test (stdin/stdout, call-based, assert-style, check-based, text) and the cases. The formats (ROLL, rLLM,
// open-r1, LiveCodeBench, HumanEval) are listed in rewards/code_tests_reward.hpp, which runs them.
#pragma once

#include <grpo/io/row.hpp>

#include <optional>
#include <string>
#include <vector>

namespace grpo::io {

enum class TestKind { stdin_stdout, call, assertion, text };

struct CodeTestCase {
  std::string input;            ///< stdin, call arguments (JSON lines), or the assert code
  std::string expected_output;  ///< expected stdout or JSON return value; empty for assertion tests
};

/// The tests of one row.
struct CodeTests {
  TestKind kind = TestKind::stdin_stdout;
  std::vector<CodeTestCase> cases;
  std::string function;     ///< call-based: the function (or Solution method); assertion: the test function
  std::string entry_point;  ///< assertion tests: the program's function passed to `function`
  std::string import_prefix;  ///< check-based tests: code put before the prelude and the program
};

/// The row fields that hold the tests, their case type and the test function (ROLL's names by default).
struct CodeTestFields {
  std::string tests = "test_cases";
  std::string case_type = "case_type";
  std::string function = "test_case_function";
};

/// The tests of a row; nullopt when the row has no (or an empty or unreadable) test list, or a case_type that
/// cannot be run.
std::optional<CodeTests> parse_code_tests(const Row& row, const CodeTestFields& fields = {});

}  // namespace grpo::io
