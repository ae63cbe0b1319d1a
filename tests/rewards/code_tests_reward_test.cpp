// SPDX-License-Identifier: Apache-2.0
// The code_tests reward: extraction, comparison, test parsing, scoring modes, and programs that are correct, wrong,
// crashing, slow, partial, or hostile (each hostile one contained and scored 0).
#include <grpo/rewards/code_tests_reward.hpp>
#include <grpo/rewards/executor.hpp>
#include <grpo/rewards/registry.hpp>

#include "rewards/reward_testing.hpp"
#include "sandbox/sandbox_testing.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

using namespace grpo::rewards;
using grpo::rewards::testing::completion;

namespace {

CodeTestsOptions fast_code_options(CodeScoring scoring = CodeScoring::pass_rate) {
  CodeTestsOptions options;
  options.scoring = scoring;
  options.test_time = std::chrono::milliseconds(1000);
  options.sandbox = grpo::sandbox::testing::fast_options();
  return options;
}

const CodeTestsReward& shared_reward() {
  static const CodeTestsReward reward(fast_code_options());
  return reward;
}

std::string fenced(const std::string& code) { return "Here is my solution.\n```python\n" + code + "```\n"; }

// Three stdin/stdout tests of "print the sum of two integers", with inputs of lengths 4, 6 and 12.
std::shared_ptr<const Row> sum_row() {
  return std::make_shared<Row>(Row::from_json(
      R"({"case_type": "input", "test_case_function": "", "test_cases": "[{\"input\": \"1 2\\n\", \"expected_output\": \"3\\n\"}, {\"input\": \"10 20\\n\", \"expected_output\": \"30\"}, {\"input\": \"123456 7890\\n\", \"expected_output\": \"131346\\n\"}]"})"));
}

float value_of(const CodeTestsReward& reward, const std::string& text, std::shared_ptr<const Row> row) {
  const auto outcome = reward.evaluate(completion(text, std::move(row)));
  REQUIRE(outcome.value.has_value());
  return *outcome.value;
}

}  // namespace

TEST_CASE("extract_code_block takes the last block of the language, else the last bare block", "[rewards][code]") {
  const std::vector<std::string> python = {"python", "py"};
  const auto code = [&](std::string_view text) -> std::optional<std::string> {
    auto block = extract_code_block(text, python);
    return block ? std::optional<std::string>(block->code) : std::nullopt;
  };
  CHECK(code("```python\na = 1\n```\ntext\n```Python\nb = 2\n```\n") == "b = 2\n");
  CHECK(code("```python\na = 1\n```\n```cpp\nint x;\n```\n") == "a = 1\n");
  CHECK(code("```\nbare\n```\n") == "bare\n");
  CHECK(code("~~~py\nx\n~~~") == "x\n");
  CHECK(code("```python\nunclosed = 1\n") == "unclosed = 1\n");
  CHECK(code("no code here") == std::nullopt);
  CHECK(code("```cpp\nint x;\n```") == std::nullopt);
  CHECK(code("````python\n```\ninside\n````\n") == "```\ninside\n");  // longer fence
  const auto cpp = extract_code_block("```python\na\n```\n```C++ {.numberLines}\nint x;\n```", {"c++"});
  REQUIRE(cpp);
  CHECK(cpp->language == "c++");
  CHECK(cpp->code == "int x;\n");
}

TEST_CASE("outputs_match: exact, whitespace-normalised and float tolerance", "[rewards][code]") {
  CHECK(outputs_match("3\n", "3\n", OutputComparison::exact));
  CHECK_FALSE(outputs_match("3", "3\n", OutputComparison::exact));
  CHECK(outputs_match("  1   2 \r\n3\n\n\n", "1 2\n3", OutputComparison::whitespace));
  CHECK_FALSE(outputs_match("1 2\n3", "1\n2 3", OutputComparison::whitespace));  // line structure matters
  CHECK_FALSE(outputs_match("12", "1 2", OutputComparison::whitespace));
  // 0.3333333 vs 1/3: |diff| = 3.3e-8 <= 1e-6·max(1, 0.33); 1000000.5 vs 1000000: 0.5 > 1e-6·1e6 = 1.
  CHECK(outputs_match("0.3333333 yes", "0.333333333333\nyes", OutputComparison::float_tolerance));
  CHECK(outputs_match("1000000.5", "1000000", OutputComparison::float_tolerance));
  CHECK_FALSE(outputs_match("1000002", "1000000", OutputComparison::float_tolerance));  // 2 > 1
  CHECK_FALSE(outputs_match("0.5", "0.6", OutputComparison::float_tolerance));
  CHECK_FALSE(outputs_match("YES", "yes", OutputComparison::float_tolerance));
  CHECK_FALSE(outputs_match("1 2", "1", OutputComparison::float_tolerance));
}

TEST_CASE("json_values_match compares structure, with tolerance on numbers", "[rewards][code]") {
  CHECK(json_values_match("[1, 2.0000000001, \"a\"]", "[1,2,\"a\"]"));
  CHECK(json_values_match("{\"b\": [true], \"a\": null}", "{\"a\": null, \"b\": [true]}"));
  CHECK_FALSE(json_values_match("[1, 2]", "[2, 1]"));
  CHECK_FALSE(json_values_match("\"1\"", "1"));
  CHECK_FALSE(json_values_match("10000000000000001", "10000000000000000"));  // integers exactly
  CHECK_FALSE(json_values_match("not json", "1"));
}

TEST_CASE("parse_code_tests reads ROLL, list and LiveCodeBench forms", "[rewards][code]") {
  const auto stdin_tests = parse_code_tests(*sum_row());
  REQUIRE(stdin_tests);
  CHECK(stdin_tests->kind == TestKind::stdin_stdout);
  REQUIRE(stdin_tests->cases.size() == 3);
  CHECK(stdin_tests->cases[1].input == "10 20\n");
  CHECK(stdin_tests->cases[1].expected_output == "30");

  const auto roll_http = parse_code_tests(Row::from_json(
      R"({"case_type": "", "test_cases": [{"stdin": "x", "expected_stdout": "y"}]})"));
  REQUIRE(roll_http);
  CHECK(roll_http->kind == TestKind::stdin_stdout);
  CHECK(roll_http->cases[0].expected_output == "y");

  const auto asserts = parse_code_tests(Row::from_json(
      R"({"case_type": "unittest", "test_case_function": "", "test_cases": ["assert f(1) == 2", {"assert_code": "assert f(2) == 3"}]})"));
  REQUIRE(asserts);
  CHECK(asserts->kind == TestKind::assertion);
  REQUIRE(asserts->cases.size() == 2);
  CHECK(asserts->cases[1].input == "assert f(2) == 3");

  const auto call = parse_code_tests(Row::from_json(
      R"({"case_type": "input", "test_case_function": "add", "test_cases": {"inputs": ["1\n2"], "outputs": [3]}})"));
  REQUIRE(call);
  CHECK(call->kind == TestKind::call);
  CHECK(call->function == "add");
  CHECK(call->cases[0].expected_output == "3");

  // Every spelling of the two pair kinds in the wild (ROLL, DeepCoder, LiveCodeBench).
  for (const char* type : {"", "input", "stdin", "stdin_stdout", "stdin/stdout", "io"}) {
    INFO("case_type '" << type << "'");
    const auto tests = parse_code_tests(Row::from_json(
        fmt::format(R"({{"case_type": "{}", "test_cases": [{{"input": "1", "expected_output": "1"}}]}})", type)));
    REQUIRE(tests);
    CHECK(tests->kind == TestKind::stdin_stdout);
  }
  for (const char* type : {"call", "call_based", "call-based", "function"}) {
    INFO("case_type '" << type << "'");
    const auto tests = parse_code_tests(Row::from_json(fmt::format(
        R"({{"case_type": "{}", "test_case_function": "f", "test_cases": [{{"input": "1", "expected_output": "1"}}]}})",
        type)));
    REQUIRE(tests);
    CHECK(tests->kind == TestKind::call);
  }

  CHECK_FALSE(parse_code_tests(Row::from_json(R"({"case_type": "", "test_cases": ""})")));  // a math row
  CHECK_FALSE(parse_code_tests(Row::from_json(R"({"test_cases": "[]"})")));
  CHECK_FALSE(parse_code_tests(Row::from_json(R"({"case_type": "scratch", "test_cases": [{"input": "", "output": ""}]})")));
}

TEST_CASE("code_score: pass rate, all-or-nothing, weighted", "[rewards][code]") {
  CHECK(code_score(2, 4, CodeScoring::pass_rate) == Approx(0.5));
  CHECK(code_score(2, 4, CodeScoring::all_or_nothing) == 0.0f);
  CHECK(code_score(2, 4, CodeScoring::weighted) == Approx(0.05));  // 0 + 0.1·0.5
  CHECK(code_score(4, 4, CodeScoring::weighted) == Approx(1.1));   // 1 + 0.1·1
  CHECK_THROWS(code_score(1, 0, CodeScoring::pass_rate));
}

TEST_CASE("stdin/stdout programs: correct, wrong, crashing, timing out, partial, in every scoring mode",
          "[rewards][code]") {
  const auto row = sum_row();
  const std::string correct = fenced("a, b = map(int, input().split())\nprint(a + b)\n");
  const std::string wrong = fenced("a, b = map(int, input().split())\nprint(a - b)\n");
  const std::string crashing = fenced("raise RuntimeError('boom')\n");
  const std::string slow = fenced("while True: pass\n");
  // Right only for inputs below 100 (tests 1 and 2 of 3).
  const std::string partial = fenced("a, b = map(int, input().split())\nprint(a + b if a < 100 else 0)\n");

  const CodeTestsReward& rate = shared_reward();
  CHECK(value_of(rate, correct, row) == Approx(1.0));
  CHECK(value_of(rate, wrong, row) == 0.0f);
  CHECK(value_of(rate, crashing, row) == 0.0f);
  CHECK(value_of(rate, partial, row) == Approx(2.0 / 3.0));
  CHECK(value_of(rate, "no code block at all", row) == 0.0f);

  const CodeTestsReward all(fast_code_options(CodeScoring::all_or_nothing));
  CHECK(value_of(all, correct, row) == 1.0f);
  CHECK(value_of(all, partial, row) == 0.0f);

  const CodeTestsReward weighted(fast_code_options(CodeScoring::weighted));
  CHECK(value_of(weighted, correct, row) == Approx(1.1));
  CHECK(value_of(weighted, partial, row) == Approx(0.1 * 2.0 / 3.0));
  CHECK(value_of(weighted, wrong, row) == 0.0f);

  // A timing-out program: one test is enough to see it fail at the per-test limit.
  auto one_test = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "input", "test_cases": [{"input": "1 2", "expected_output": "3"}]})"));
  const auto outcome = rate.evaluate(completion(slow, one_test));
  REQUIRE(outcome.value);
  CHECK(*outcome.value == 0.0f);
  REQUIRE(outcome.runs.size() == 1);
  CHECK(outcome.runs[0].status == grpo::sandbox::RunStatus::timeout);
}

TEST_CASE("assert-style tests: asserts, test functions, unittest classes, check(candidate), early-exit hacks",
          "[rewards][code]") {
  auto asserts = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "unittest", "test_case_function": "", "test_cases": ["assert inc(1) == 2", "assert inc(-1) == 0", "def test_big():\n    assert inc(10**6) == 10**6 + 1"]})"));
  const CodeTestsReward& reward = shared_reward();
  CHECK(value_of(reward, fenced("def inc(x):\n    return x + 1\n"), asserts) == Approx(1.0));
  // Wrong for negatives: fails test 2 only.
  CHECK(value_of(reward, fenced("def inc(x):\n    return abs(x) + 1\n"), asserts) == Approx(2.0 / 3.0));
  // Leaving before the tests run never passes: sys.exit(0) at import, os._exit(0), or exiting from the function.
  CHECK(value_of(reward, fenced("import sys\nsys.exit(0)\n"), asserts) == 0.0f);
  CHECK(value_of(reward, fenced("import os\nos._exit(0)\n"), asserts) == 0.0f);
  CHECK(value_of(reward, fenced("import os\ndef inc(x):\n    os._exit(0)\n"), asserts) == 0.0f);
  // A solution's main guard does not run (its input() would read nothing).
  CHECK(value_of(reward, fenced("def inc(x):\n    return x + 1\nif __name__ == '__main__':\n    print(inc(int(input())))\n"),
                 asserts) == Approx(1.0));

  auto unittest_class = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "unittest", "test_cases": ["import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(inc(1), 2)\n    def test_b(self):\n        self.assertEqual(inc(5), 6)\n"]})"));
  CHECK(value_of(reward, fenced("def inc(x):\n    return x + 1\n"), unittest_class) == 1.0f);
  CHECK(value_of(reward, fenced("def inc(x):\n    return 2\n"), unittest_class) == 0.0f);

  auto check_candidate = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "check_based", "test_case_function": "check", "entry_point": "inc", "test_cases": ["def check(candidate):\n    assert candidate(3) == 4\n"]})"));
  CHECK(value_of(reward, fenced("def inc(x):\n    return x + 1\n"), check_candidate) == 1.0f);
  CHECK(value_of(reward, fenced("def inc(x):\n    return x\n"), check_candidate) == 0.0f);
}

TEST_CASE("ROLL check-based rows: import_prefix, one test per assert line, check(Solution().method)",
          "[rewards][code]") {
  // As ROLL's KodCode/LeetCode rows: the checker's header, then one assert per line; the entry point an expression.
  auto leetcode = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "check_based", "test_case_function": "None", "test_cases": "[{\"assert_code\": \"def )"
      R"(check(candidate):\\n    assert candidate([2, 7, 11, 15], 9) == [0, 1]\\n    assert candidate([3, 2, 4], 6) )"
      R"(== [1, 2]\\n\\n    assert candidate([3, 3], 6) == [0, 1]\\n\", \"entry_point\": )"
      R"(\"Solution().twoSum\", \"import_prefix\": \"from typing import List\\n\"}]"})"));
  const auto tests = parse_code_tests(*leetcode);
  REQUIRE(tests.has_value());
  CHECK(tests->kind == TestKind::assertion);
  REQUIRE(tests->cases.size() == 3);  // the blank line is not a test
  CHECK(tests->cases[0].input ==
        "def check(candidate):\n    assert candidate([2, 7, 11, 15], 9) == [0, 1]\ncheck(Solution().twoSum)\n");
  CHECK(tests->import_prefix == "from typing import List\n");
  const std::string solution =
      "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
      "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
      "                return [seen[target - x], i]\n            seen[x] = i\n";
  const CodeTestsReward& reward = shared_reward();  // no prelude: List comes from import_prefix alone
  CHECK(value_of(reward, fenced(solution), leetcode) == 1.0f);
  // Right only when the pair is at the front: two tests of three.
  CHECK(value_of(reward, fenced("class Solution:\n    def twoSum(self, nums: List[int], target: int):\n"
                                "        return [0, 1]\n"),
                 leetcode) == Approx(2.0 / 3.0));
  CHECK(value_of(reward, fenced("class Solution:\n    def twoSum(self, nums, target):\n        return []\n"),
                 leetcode) == 0.0f);
}

TEST_CASE("ROLL pytest rows (KodCode): every test_ function of a case must pass", "[rewards][code]") {
  auto kodcode = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "pytest", "test_case_function": "None", "test_cases": "[{\"assert_code\": \"from solution )"
      R"(import *\\n\\ndef test_add():\\n    assert add(1, 2) == 3\\n\\ndef test_negative():\\n    assert )"
      R"(add(-1, 1) == 0\\n\"}, {\"assert_code\": \"def test_zero():\\n    assert add(0, 0) == 0\\n\"}]"})"));
  const CodeTestsReward& reward = shared_reward();
  CHECK(value_of(reward, fenced("def add(a, b):\n    return a + b\n"), kodcode) == 1.0f);
  // Wrong for negatives: the first case fails as a whole, the second passes.
  CHECK(value_of(reward, fenced("def add(a, b):\n    return abs(a) + b\n"), kodcode) == Approx(0.5));
  CHECK(value_of(reward, fenced("def add(a, b):\n    return 1\n"), kodcode) == 0.0f);
}

TEST_CASE("ROLL text rows: IFEval-style asserts on the response, which cannot break out of its string",
          "[rewards][code]") {
  auto ifeval = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "text", "test_cases": "[{\"assert_code\": \"assert len({response}.split()) <= 5\"}, )"
      R"({\"assert_code\": \"assert {response}.strip().endswith('!')\"}]"})"));
  const auto tests = parse_code_tests(*ifeval);
  REQUIRE(tests.has_value());
  CHECK(tests->kind == TestKind::text);
  const CodeTestsReward& reward = shared_reward();
  CHECK(value_of(reward, "<think>Be short and loud, with many many words here.</think>Hello there, world!", ifeval) ==
        1.0f);  // the reasoning is not the response
  CHECK(value_of(reward, "Hello there, my dear old world!", ifeval) == Approx(0.5));
  CHECK(value_of(reward, "Hello there", ifeval) == Approx(0.5));
  // Quotes and code in the response stay text. Pasted between triple quotes (ROLL), this response turns both checks
  // into checks of 'a!' and passes them; as text it is 7 words not ending in '!'.
  CHECK(value_of(reward, "a''' + '!' if True else '''b", ifeval) == 0.0f);
  CHECK(value_of(reward, "x\"\"\"; import os; os._exit(0); \"\"\"", ifeval) == Approx(0.5));
}

TEST_CASE("call-based tests: functions and Solution methods, JSON return values with tolerance", "[rewards][code]") {
  auto row = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "input", "test_case_function": "half", "test_cases": [{"input": "3", "expected_output": "1.5"}, {"input": "[1, 2]", "expected_output": "[0.5, 1.0]"}]})"));
  const CodeTestsReward& reward = shared_reward();
  const std::string function = fenced(
      "def half(x):\n    print('debug output is ignored')\n"
      "    return [v / 2 for v in x] if isinstance(x, list) else x / 2 + 1e-9\n");
  CHECK(value_of(reward, function, row) == 1.0f);
  const std::string method = fenced(
      "class Solution:\n    def half(self, x):\n        return [v / 2 for v in x] if isinstance(x, list) else 0\n");
  CHECK(value_of(reward, method, row) == Approx(0.5));
  CHECK(value_of(reward, fenced("def other(x):\n    return x\n"), row) == 0.0f);
}

TEST_CASE("early exit, top-N tests by input length, and the total time limit", "[rewards][code]") {
  const auto row = sum_row();
  CodeTestsOptions options = fast_code_options();
  options.early_exit = true;
  const CodeTestsReward early(options);
  // Wrong on the first test: stops there; the other two count as failed.
  const auto wrong_first = early.evaluate(completion(fenced("print(30 if input() != '1 2' else 0)\n"), row));
  CHECK(wrong_first.run == 1);
  CHECK(*wrong_first.value == 0.0f);

  options = fast_code_options();
  options.max_tests = 1;  // only the longest input ("123456 7890")
  const CodeTestsReward top(options);
  const auto only_long = top.evaluate(completion(fenced("input()\nprint(131346)\n"), row));
  CHECK(only_long.total == 1);
  CHECK(*only_long.value == 1.0f);

  options = fast_code_options();
  options.total_time = std::chrono::milliseconds(700);  // each test sleeps 0.5 s: the third never starts
  const CodeTestsReward budgeted(options);
  const auto slow = budgeted.evaluate(
      completion(fenced("import time\ntime.sleep(0.5)\na, b = map(int, input().split())\nprint(a + b)\n"), row));
  CHECK(slow.run < 3);
  REQUIRE(slow.value);
  CHECK(*slow.value < 1.0f);
}

TEST_CASE("rows without tests give no value, and so does a passed scoring deadline", "[rewards][code]") {
  const CodeTestsReward& reward = shared_reward();
  CHECK(reward.evaluate(completion(fenced("print(1)\n"), nullptr)).value == std::nullopt);
  auto math_row = std::make_shared<Row>(Row::from_json(R"({"ground_truth": "1", "case_type": "", "test_cases": ""})"));
  CHECK(reward.evaluate(completion(fenced("print(1)\n"), math_row)).value == std::nullopt);
  ScoringContext expired;
  expired.deadline = std::chrono::steady_clock::now();
  CHECK(reward.evaluate(completion(fenced("print(1)\n"), sum_row()), expired).value == std::nullopt);
}

TEST_CASE("hostile programs are contained and score 0", "[rewards][code][escape]") {
  const CodeTestsReward& reward = shared_reward();
  const auto host_dir = std::filesystem::temp_directory_path() / grpo::sandbox::testing::unique_marker("grpo-code-");
  std::filesystem::create_directories(host_dir);
  std::ofstream(host_dir / "answer.txt") << "3\n";
  // Each program prints "3" only if its attack worked: the expected output of the single test is "3".
  auto row = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "input", "test_cases": [{"input": "1 2", "expected_output": "3"}]})"));
  const std::vector<std::pair<std::string, std::string>> attacks = {
      {"network", "import socket\ns = socket.create_connection(('127.0.0.1', 80), timeout=0.5)\nprint(3)\n"},
      {"write outside tmp", "open('" + (host_dir / "w").string() + "', 'w').write('x')\nprint(3)\n"},
      {"read planted file", "print(open('" + (host_dir / "answer.txt").string() + "').read())\n"},
      {"fork bomb", "import os\nwhile True: os.fork()\n"},
      {"memory bomb", "x = bytearray(1 << 34)\nprint(3)\n"},
      {"infinite loop", "while True: pass\n"},
      {"huge output", "while True: print('3' * 10000)\n"},
      {"kill the parent", "import os\nos.kill(os.getppid(), 9)\nos.kill(-1, 9)\n"},
  };
  for (const auto& [name, program] : attacks) {
    INFO(name);
    CHECK(value_of(reward, fenced(program), row) == 0.0f);
  }
  CHECK_FALSE(std::filesystem::exists(host_dir / "w"));
  std::filesystem::remove_all(host_dir);
}

TEST_CASE("no process survives a scoring call, even with subprocesses allowed", "[rewards][code][escape]") {
  CodeTestsOptions options = fast_code_options();
  options.sandbox.allow_subprocesses = true;
  const CodeTestsReward reward(options);
  const std::string marker = grpo::sandbox::testing::unique_marker("grpo-survivor-");
  auto row = std::make_shared<Row>(Row::from_json(
      R"({"case_type": "input", "test_cases": [{"input": "1 2", "expected_output": "3"}]})"));
  const std::string program = fenced(
      "import os, subprocess\n"
      "subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(60)', '" + marker + "'])\n"
      "if os.fork() == 0:\n"
      "    os.setsid()\n"
      "    os.execv('/usr/bin/python3', ['python3', '-c', 'import time; time.sleep(60)', '" + marker + "'])\n"
      "print(3)\n");
  CHECK(value_of(reward, program, row) == 1.0f);  // it did solve the task; what it left behind is gone
  CHECK(grpo::sandbox::testing::processes_with_marker(marker) == 0);
}

TEST_CASE("code_tests from a config, on the executor's threads", "[rewards][code]") {
  const auto registry = RewardRegistry::with_builtins();
  const RewardPtr reward = registry.create(
      R"({"name": "code_tests", "scoring": "weighted", "comparison": "float", "test_time_ms": 1000, "memory_mb": 256})");
  CHECK(reward->name() == "code_tests");
  CHECK_THROWS_WITH(registry.create(R"({"name": "code_tests", "scorin": "weighted"})"),
                    Catch::Contains("unknown option 'scorin'"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "code_tests", "scoring": "best"})"), Catch::Contains("scoring"));

  RewardExecutor executor({.num_threads = 2});
  const auto row = sum_row();
  std::vector<Completion> batch = {completion(fenced("a, b = map(int, input().split())\nprint(a + b)\n"), row),
                                   completion(fenced("print(0)\n"), row), completion("no code", row),
                                   completion(fenced("print(1)\n"), nullptr)};
  const auto scores = executor.score(reward, batch);
  REQUIRE(scores.values.size() == 4);
  CHECK(*scores.values[0] == Approx(1.1));
  CHECK(*scores.values[1] == 0.0f);
  CHECK(*scores.values[2] == 0.0f);
  CHECK(scores.values[3] == std::nullopt);
}

TEST_CASE("code_tests refuses to start without a working sandbox", "[rewards][code]") {
  CodeTestsOptions options = fast_code_options();
  options.sandbox.bwrap_path = "/nonexistent/bwrap";
  CHECK_THROWS_AS(CodeTestsReward(options), grpo::sandbox::SandboxError);
}

TEST_CASE("C++ programs are compiled in the sandbox and run against stdin/stdout tests", "[rewards][code][cpp]") {
  CodeTestsOptions options = fast_code_options();
  options.languages = {"cpp", "python"};
  options.compile_time = std::chrono::milliseconds(20000);
  const CodeTestsReward reward(options);
  const auto row = sum_row();
  const auto cpp = [](const std::string& code) { return "```cpp\n" + code + "```\n"; };
  const auto correct = reward.evaluate(completion(
      cpp("#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << \"\\n\"; }\n"), row));
  REQUIRE(correct.value);
  CHECK(*correct.value == 1.0f);
  REQUIRE(correct.compile);
  CHECK(correct.compile->success());
  // Right only below 100: 2 of 3.
  CHECK(value_of(reward,
                 cpp("#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << (a < 100 ? a + b : 0); }\n"),
                 row) == Approx(2.0 / 3.0));
  const auto broken = reward.evaluate(completion(cpp("int main() { return undefined_name; }\n"), row));
  CHECK(*broken.value == 0.0f);
  CHECK(broken.compile->stderr_text.find("undefined_name") != std::string::npos);
  // A compiled fork bomb is refused by the seccomp filter like a Python one.
  CHECK(value_of(reward, cpp("#include <unistd.h>\nint main() { while (fork() >= 0) {} return 1; }\n"), row) == 0.0f);
  // Python still works beside it.
  CHECK(value_of(reward, fenced("a, b = map(int, input().split())\nprint(a + b)\n"), row) == 1.0f);
}
