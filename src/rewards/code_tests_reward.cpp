// SPDX-License-Identifier: Apache-2.0
// The code_tests reward (see code_tests_reward.hpp): code extraction, test parsing, output comparison, and the Python
// harnesses that run inside the sandbox.
#include <grpo/core/ascii_text.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/rewards/code_tests_reward.hpp>

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

namespace grpo::rewards {
namespace {

std::vector<std::string_view> tokens(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_ascii_space(text[i])) ++i;
    const std::size_t start = i;
    while (i < text.size() && !is_ascii_space(text[i])) ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

// Lines with trimmed ends and inner whitespace runs as one space; blank lines at both ends dropped.
std::vector<std::string> normalised_lines(std::string_view text) {
  std::vector<std::string> lines;
  for (std::string_view line : split_lines(text)) {
    std::string joined;
    for (std::string_view token : tokens(line)) {
      if (!joined.empty()) joined.push_back(' ');
      joined.append(token);
    }
    lines.push_back(std::move(joined));
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  const auto first = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return !l.empty(); });
  lines.erase(lines.begin(), first);
  return lines;
}

std::optional<double> parse_number(std::string_view token) {
  double value = 0.0;
  const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (error != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return value;
}

bool numbers_close(double actual, double expected, double tolerance) {
  if (!std::isfinite(actual) || !std::isfinite(expected)) return actual == expected;
  return std::fabs(actual - expected) <= tolerance * std::max(1.0, std::fabs(expected));
}

bool json_equal(simdjson::dom::element a, simdjson::dom::element b, double tolerance) {
  using Type = simdjson::dom::element_type;
  const bool a_number = a.is_number(), b_number = b.is_number();
  if (a_number || b_number) {
    if (!(a_number && b_number)) return false;
    if (a.type() == Type::INT64 && b.type() == Type::INT64) return a.get_int64().value() == b.get_int64().value();
    return numbers_close(a.get_double().value(), b.get_double().value(), tolerance);
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::STRING: return a.get_string().value() == b.get_string().value();
    case Type::BOOL: return a.get_bool().value() == b.get_bool().value();
    case Type::NULL_VALUE: return true;
    case Type::ARRAY: {
      const auto x = a.get_array().value(), y = b.get_array().value();
      if (x.size() != y.size()) return false;
      auto it = y.begin();
      for (auto item : x) {
        if (!json_equal(item, *it, tolerance)) return false;
        ++it;
      }
      return true;
    }
    case Type::OBJECT: {
      const auto x = a.get_object().value(), y = b.get_object().value();
      if (x.size() != y.size()) return false;
      for (auto field : x) {
        simdjson::dom::element other;
        if (y.at_key(field.key).get(other) || !json_equal(field.value, other, tolerance)) return false;
      }
      return true;
    }
    default: return false;
  }
}

// Runs inside the sandbox for call-based tests: arguments are read before the program runs (it cannot consume
// them), the program's own prints go to stderr, and the return value alone is written to stdout as JSON.
constexpr const char* kCallHarness = R"PY(import json, sys
def _grpo_call():
    name = sys.argv[2]
    args = [json.loads(line) for line in sys.stdin.read().split('\n') if line.strip()]
    out, sys.stdout = sys.stdout, sys.stderr
    ns = {'__name__': 'solution'}
    exec(compile(open('/box/main.py').read(), '/box/main.py', 'exec'), ns)
    fn = ns.get(name)
    if fn is None and isinstance(ns.get('Solution'), type):
        fn = getattr(ns['Solution'](), name)
    result = fn(*args)
    if isinstance(result, tuple):
        result = list(result)
    sys.stdout = out
    sys.stdout.write(json.dumps(result))
_grpo_call()
)PY";

// Runs inside the sandbox for assertion tests. The line it prints last is a per-run random token read from stdin
// before the program runs, so exiting early with status 0 (sys.exit(0), os._exit(0)) does not pass.
constexpr const char* kAssertHarness = R"PY(import os, sys, types
def _grpo_assert():
    token = sys.stdin.readline().strip()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdin = open(os.devnull)
    function, entry = sys.argv[2], sys.argv[3]
    module = types.ModuleType('solution')
    ns = module.__dict__
    sys.modules['solution'] = module  # tests written 'from solution import f' (KodCode, pytest style) find it
    exec(compile(open('/box/main.py').read(), '/box/main.py', 'exec'), ns)
    exec(compile(open('/box/test.py').read(), '/box/test.py', 'exec'), ns)
    if function:
        f = ns[function]
        f(ns[entry]) if entry else f()
    else:
        import unittest
        for key, value in list(ns.items()):
            if key.startswith('test_') and isinstance(value, types.FunctionType):
                value()
        cases = [v for v in ns.values() if isinstance(v, type) and issubclass(v, unittest.TestCase)
                 and v is not unittest.TestCase]
        if cases:
            suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases)
            if not unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(suite).wasSuccessful():
                sys.exit(1)
    sys.stdout.flush()
    os.write(1, ('\n' + token + '\n').encode())
_grpo_assert()
)PY";

// Runs inside the compile sandbox: the compiler driver with an argv list (no shell), then the binary on stdout.
constexpr const char* kCompileHarness = R"PY(import subprocess, sys
result = subprocess.run(sys.argv[1:] + ['/box/main.cpp', '-o', '/tmp/main'], stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE)
if result.returncode != 0:
    sys.stderr.buffer.write(result.stderr[-8000:])
    sys.exit(1)
sys.stdout.buffer.write(open('/tmp/main', 'rb').read())
)PY";

bool is_cpp(std::string_view language) {
  return language == "cpp" || language == "c++" || language == "cxx" || language == "cc";
}

std::string random_token() {
  thread_local std::mt19937_64 engine{std::random_device{}() ^ (std::uint64_t(std::random_device{}()) << 32)};
  return fmt::format("{:016x}{:016x}", engine(), engine());
}

}  // namespace

std::optional<CodeBlock> extract_code_block(std::string_view text, const std::vector<std::string>& languages) {
  std::vector<CodeBlock> blocks;
  const auto lines = split_lines(text);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    std::size_t indent = 0;
    while (indent < line.size() && indent < 3 && line[indent] == ' ') ++indent;
    line.remove_prefix(indent);
    if (line.size() < 3 || (line[0] != '`' && line[0] != '~')) continue;
    const char fence = line[0];
    std::size_t length = 0;
    while (length < line.size() && line[length] == fence) ++length;
    if (length < 3) continue;
    const std::string_view info_text = trim_ascii_space(line.substr(length));
    CodeBlock block{"", ascii_lowercase(info_text.substr(0, std::min(info_text.find_first_of(" \t{"), info_text.size())))};
    std::size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      std::string_view body = lines[j];
      std::string_view closing = trim_ascii_space(body);
      if (closing.size() >= length && closing.find_first_not_of(fence) == std::string_view::npos) break;
      block.code.append(body);
      block.code.push_back('\n');
    }
    blocks.push_back(std::move(block));
    i = j;  // past the closing fence (or the end)
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    for (const std::string& language : languages) {
      if (it->language == ascii_lowercase(language)) return std::move(*it);
    }
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (it->language.empty()) return std::move(*it);
  }
  return std::nullopt;
}

bool outputs_match(std::string_view actual, std::string_view expected, OutputComparison comparison,
                   double float_tolerance) {
  switch (comparison) {
    case OutputComparison::exact:
      return actual == expected;
    case OutputComparison::whitespace:
      return normalised_lines(actual) == normalised_lines(expected);
    case OutputComparison::float_tolerance: {
      const auto a = tokens(actual), e = tokens(expected);
      if (a.size() != e.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i] == e[i]) continue;
        const auto x = parse_number(a[i]), y = parse_number(e[i]);
        if (!x || !y || !numbers_close(*x, *y, float_tolerance)) return false;
      }
      return true;
    }
  }
  return false;
}

bool json_values_match(std::string_view actual, std::string_view expected, double float_tolerance) {
  simdjson::dom::parser first, second;
  simdjson::dom::element a, b;
  if (first.parse(simdjson::padded_string(actual)).get(a)) return false;
  if (second.parse(simdjson::padded_string(expected)).get(b)) return false;
  return json_equal(a, b, float_tolerance);
}

float code_score(std::size_t passed, std::size_t total, CodeScoring scoring) {
  GRPO_CHECK(total > 0 && passed <= total, "code_score: need 0 <= passed <= total and total > 0, got {} of {}", passed,
             total);
  const float rate = static_cast<float>(passed) / static_cast<float>(total);
  const float all = passed == total ? 1.0f : 0.0f;
  switch (scoring) {
    case CodeScoring::pass_rate: return rate;
    case CodeScoring::all_or_nothing: return all;
    case CodeScoring::weighted: return all + 0.1f * rate;
  }
  return rate;
}

CodeTestsReward::CodeTestsReward(CodeTestsOptions options) : options_(std::move(options)) {
  GRPO_CHECK_CONFIG(options_.test_time.count() > 0, "code_tests: test_time must be > 0 ms, got {} ms",
                    options_.test_time.count());
  GRPO_CHECK_CONFIG(options_.total_time.count() >= 0, "code_tests: total_time must be >= 0 ms");
  GRPO_CHECK_CONFIG(options_.float_tolerance >= 0.0 && std::isfinite(options_.float_tolerance),
                    "code_tests: float_tolerance must be finite and >= 0, got {}", options_.float_tolerance);
  GRPO_CHECK_CONFIG(!options_.python.empty() && options_.python.front() == '/',
                    "code_tests: python must be an absolute path, got '{}'", options_.python);
  options_.sandbox.limits.wall_time = options_.test_time;
  options_.sandbox.limits.cpu_seconds = static_cast<std::size_t>((options_.test_time.count() + 999) / 1000);
  sandbox_ = std::make_shared<const sandbox::Sandbox>(options_.sandbox);
  if (std::any_of(options_.languages.begin(), options_.languages.end(),
                  [](const std::string& language) { return is_cpp(ascii_lowercase(language)); })) {
    GRPO_CHECK_CONFIG(options_.compile_time.count() > 0, "code_tests: compile_time must be > 0 ms");
    GRPO_CHECK_CONFIG(!options_.cxx.empty() && options_.cxx.front() == '/',
                      "code_tests: cxx must be an absolute path, got '{}'", options_.cxx);
    sandbox::SandboxOptions compile = options_.sandbox;
    compile.allow_subprocesses = true;  // g++ runs cc1plus, as and ld
    compile.limits.wall_time = options_.compile_time;
    compile.limits.cpu_seconds = static_cast<std::size_t>((options_.compile_time.count() + 999) / 1000);
    compile.limits.memory_bytes = std::max<std::size_t>(compile.limits.memory_bytes, 2ull << 30);
    compile.limits.max_output_bytes = std::max<std::size_t>(compile.limits.max_output_bytes, 64ull << 20);
    compile.limits.max_file_bytes = std::max<std::size_t>(compile.limits.max_file_bytes, 64ull << 20);
    compile.limits.tmpfs_bytes = std::max<std::size_t>(compile.limits.tmpfs_bytes, 256ull << 20);
    compile_sandbox_ = std::make_shared<const sandbox::Sandbox>(compile);
  }
}

CodeTestsOutcome CodeTestsReward::evaluate(const Completion& completion, const ScoringContext& context) const {
  using Clock = std::chrono::steady_clock;
  CodeTestsOutcome outcome;
  const std::optional<CodeTests> tests =
      completion.row ? io::parse_code_tests(*completion.row, options_.fields) : std::nullopt;
  if (!tests) {
    outcome.value = options_.no_tests_value;
    return outcome;
  }
  std::vector<std::size_t> order(tests->cases.size());
  std::iota(order.begin(), order.end(), 0);
  if (options_.max_tests > 0 && order.size() > options_.max_tests) {
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return tests->cases[a].input.size() > tests->cases[b].input.size();
    });
    order.resize(options_.max_tests);
  }
  outcome.total = order.size();
  // Text tests check the response itself: no program, the response a string variable of the test code.
  const bool text = tests->kind == TestKind::text;
  std::string response_line;
  if (text) {
    const std::string_view all = completion.text;
    const auto think = all.rfind("</think>");
    const std::string_view response = think == std::string_view::npos ? all : all.substr(think + 8);
    response_line = "_grpo_response = " + json_quoted(response) + "\n";
  }
  const std::optional<CodeBlock> block =
      text ? std::optional<CodeBlock>(CodeBlock{}) : extract_code_block(completion.text, options_.languages);
  if (!block) {
    outcome.value = 0.0f;
    return outcome;
  }
  outcome.code_found = !text;
  const bool cpp = is_cpp(block->language) && compile_sandbox_ != nullptr;
  std::string program = options_.prelude.empty() || cpp || text ? block->code : options_.prelude + "\n" + block->code;
  if (!tests->import_prefix.empty() && !cpp) program = tests->import_prefix + "\n" + program;
  if (cpp) {
    // Compiled programs answer stdin/stdout tests only; compile errors and other test kinds fail every test.
    if (tests->kind != TestKind::stdin_stdout) {
      outcome.value = 0.0f;
      return outcome;
    }
    sandbox::RunRequest compile;
    compile.argv = {options_.python, "-I", "-B", "/box/compile.py", options_.cxx};
    compile.argv.insert(compile.argv.end(), options_.cxx_flags.begin(), options_.cxx_flags.end());
    compile.files = {{"/box/compile.py", kCompileHarness}, {"/box/main.cpp", block->code}};
    outcome.compile = compile_sandbox_->run(compile);
    if (!outcome.compile->success() || outcome.compile->stdout_text.empty()) {
      outcome.value = context.expired() ? std::nullopt : std::optional<float>(0.0f);
      return outcome;
    }
    program = std::move(outcome.compile->stdout_text);
    outcome.compile->stdout_text.clear();
  }

  const auto started = Clock::now();
  const auto total_deadline =
      options_.total_time.count() > 0 ? started + options_.total_time : Clock::time_point::max();
  for (std::size_t index : order) {
    if (context.expired()) return outcome;  // no value: the scoring deadline passed mid-way
    const auto now = Clock::now();
    if (now >= total_deadline) break;  // tests not run count as failed
    const auto until = std::min(total_deadline, context.deadline);
    sandbox::SandboxLimits limits = options_.sandbox.limits;
    if (until != Clock::time_point::max()) {
      limits.wall_time = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(until - now),
                                    std::chrono::milliseconds(1), options_.test_time);
    }
    const CodeTestCase& test = tests->cases[index];
    sandbox::RunRequest request;
    request.limits = limits;
    if (!cpp) request.files = {{"/box/main.py", program}};
    std::string token;
    switch (tests->kind) {
      case TestKind::stdin_stdout:
        if (cpp) {
          request.files = {{"/box/main", program, /*executable=*/true}};
          request.argv = {"/box/main"};
        } else {
          request.argv = {options_.python, "-I", "-B", "/box/main.py"};
        }
        request.stdin_data = test.input;
        break;
      case TestKind::call:
        request.argv = {options_.python, "-I", "-B", "/box/harness.py", "call", tests->function};
        request.files.push_back({"/box/harness.py", kCallHarness});
        request.stdin_data = test.input;
        break;
      case TestKind::assertion:
      case TestKind::text: {
        token = random_token();
        request.argv = {options_.python, "-I", "-B", "/box/harness.py", "assert", tests->function, tests->entry_point};
        request.files.push_back({"/box/harness.py", kAssertHarness});
        std::string code = test.input;
        if (text) {
          for (std::size_t at = code.find("{response}"); at != std::string::npos;
               at = code.find("{response}", at + 14)) {
            code.replace(at, 10, "_grpo_response");
          }
          code = response_line + code;
        }
        request.files.push_back({"/box/test.py", std::move(code)});
        request.stdin_data = token + "\n";
        break;
      }
    }
    sandbox::RunResult run = sandbox_->run(request);
    ++outcome.run;
    bool passed = run.success();
    if (passed) {
      switch (tests->kind) {
        case TestKind::stdin_stdout:
          passed = outputs_match(run.stdout_text, test.expected_output, options_.comparison, options_.float_tolerance);
          break;
        case TestKind::call:
          passed = json_values_match(run.stdout_text, test.expected_output, options_.float_tolerance) ||
                   outputs_match(run.stdout_text, test.expected_output, options_.comparison, options_.float_tolerance);
          break;
        case TestKind::assertion:
        case TestKind::text: {
          const std::string tail = "\n" + token + "\n";
          passed = run.stdout_text.size() >= tail.size() &&
                   run.stdout_text.compare(run.stdout_text.size() - tail.size(), tail.size(), tail) == 0;
          break;
        }
      }
    }
    outcome.runs.push_back(std::move(run));
    if (passed) {
      ++outcome.passed;
    } else if (options_.early_exit) {
      break;
    }
  }
  if (context.expired() && outcome.run < outcome.total && !options_.early_exit) return outcome;
  outcome.value = code_score(outcome.passed, outcome.total, options_.scoring);
  return outcome;
}

std::vector<std::optional<float>> CodeTestsReward::score(std::span<const Completion> batch,
                                                         const ScoringContext& context) const {
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const Completion& completion : batch) values.push_back(evaluate(completion, context).value);
  return values;
}

}  // namespace grpo::rewards
