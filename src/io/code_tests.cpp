// SPDX-License-Identifier: Apache-2.0
// The test cases of a dataset row (see code_tests.hpp), read with simdjson; no simdjson type leaves this file.
#include <grpo/core/ascii_text.hpp>
#include <grpo/io/code_tests.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <initializer_list>

namespace grpo::io {
namespace {

// A JSON value as test text: strings as they are, anything else as its JSON.
std::string as_text(simdjson::dom::element value) {
  std::string_view text;
  if (!value.get_string().get(text)) return std::string(text);
  return simdjson::minify(value);
}

std::optional<std::string> first_field(simdjson::dom::object object, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    simdjson::dom::element value;
    if (!object.at_key(key).get(value) && !value.is_null()) return as_text(value);
  }
  return std::nullopt;
}

// Test cases from the row's JSON: a list of objects or strings, or an {"inputs": [...], "outputs": [...]} object.
std::vector<CodeTestCase> parse_cases(std::string_view json, bool& strings_only) {
  std::vector<CodeTestCase> cases;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(simdjson::padded_string(json)).get(root)) return cases;
  strings_only = true;
  simdjson::dom::object object;
  if (!root.get_object().get(object)) {
    simdjson::dom::array inputs, outputs;
    if (object["inputs"].get_array().get(inputs) || object["outputs"].get_array().get(outputs)) return cases;
    if (inputs.size() != outputs.size()) return cases;
    auto output = outputs.begin();
    for (auto input : inputs) {
      cases.push_back({as_text(input), as_text(*output)});
      ++output;
    }
    strings_only = false;
    return cases;
  }
  simdjson::dom::array array;
  if (root.get_array().get(array)) return cases;
  for (auto item : array) {
    std::string_view code;
    if (!item.get_string().get(code)) {
      cases.push_back({std::string(code), ""});
      continue;
    }
    simdjson::dom::object test;
    if (item.get_object().get(test)) continue;
    if (auto assertion = first_field(test, {"assert_code", "code", "test"})) {
      cases.push_back({std::move(*assertion), ""});
      continue;
    }
    auto input = first_field(test, {"input", "stdin", "inputs"});
    auto expected = first_field(test, {"expected_output", "expected_stdout", "output", "outputs"});
    if (!input || !expected) continue;
    strings_only = false;
    cases.push_back({std::move(*input), std::move(*expected)});
  }
  return cases;
}

// ROLL's check-based tests (code_sandbox_reward_worker.py run_check_based_tests): the first object's assert_code,
// its first line the checker's header and each further non-empty line one test, each followed by
// check(<entry_point>); nullopt when the JSON holds no such object.
std::optional<CodeTests> check_based_tests(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const simdjson::padded_string padded(json);
  if (parser.parse(padded).get(root)) return std::nullopt;
  simdjson::dom::object first;
  simdjson::dom::array array;
  if (!root.get_array().get(array)) {
    if (array.size() == 0 || array.at(0).get_object().get(first)) return std::nullopt;
  } else if (root.get_object().get(first)) {
    return std::nullopt;
  }
  const std::optional<std::string> assert_code = first_field(first, {"assert_code"});
  if (!assert_code) return std::nullopt;
  std::vector<std::string> lines;
  for (std::string_view line : split_lines(*assert_code)) {
    if (!line.empty()) lines.emplace_back(line);
  }
  if (lines.empty()) return std::nullopt;
  CodeTests tests;
  tests.kind = TestKind::assertion;
  const std::string entry = first_field(first, {"entry_point"}).value_or("candidate");
  tests.import_prefix = first_field(first, {"import_prefix"}).value_or("");
  const std::string call = fmt::format("\ncheck({})\n", entry.empty() ? "candidate" : entry);
  if (lines.size() == 1) tests.cases.push_back({lines[0] + call, ""});
  for (std::size_t i = 1; i < lines.size(); ++i) tests.cases.push_back({lines[0] + "\n" + lines[i] + call, ""});
  return tests;
}

}  // namespace

std::optional<CodeTests> parse_code_tests(const Row& row, const CodeTestFields& fields) {
  CodeTests tests;
  bool strings_only = true;
  const FieldValue* field = row.find(fields.tests);
  if (field == nullptr) return std::nullopt;
  const std::string case_type = ascii_lowercase(trim_ascii_space(row.text(fields.case_type).value_or("")));
  const bool check_based = case_type == "check_based" || case_type == "check-based";
  if (const auto* text = std::get_if<std::string>(field); check_based && text != nullptr) {
    // ROLL's objects; else HumanEval-style code with the row's test_case_function and entry_point (below).
    if (auto tests_of_objects = check_based_tests(trim_ascii_space(*text))) return tests_of_objects;
  }
  if (const auto* list = std::get_if<std::vector<std::string>>(field)) {
    for (const std::string& code : *list) tests.cases.push_back({code, ""});
  } else if (const auto* text = std::get_if<std::string>(field)) {
    const std::string_view json = trim_ascii_space(*text);
    if (json.empty() || (json.front() != '[' && json.front() != '{')) return std::nullopt;
    tests.cases = parse_cases(json, strings_only);
  }
  if (tests.cases.empty()) return std::nullopt;

  tests.function = std::string(trim_ascii_space(row.text(fields.function).value_or("")));
  if (tests.function == "None") tests.function.clear();  // ROLL writes Python's None as text
  tests.entry_point = std::string(trim_ascii_space(row.text("entry_point").value_or("")));
  if (case_type == "assert" || case_type == "unittest" || case_type == "pytest" || check_based ||
      (case_type.empty() && strings_only)) {
    tests.kind = TestKind::assertion;
  } else if (case_type == "text") {
    tests.kind = TestKind::text;
  } else if (case_type == "call" || case_type == "call_based" || case_type == "call-based" || case_type == "function") {
    tests.kind = TestKind::call;
  } else if (case_type.empty() || case_type == "input" || case_type == "stdin" || case_type == "stdin_stdout" ||
             case_type == "stdin/stdout" || case_type == "io") {
    tests.kind = tests.function.empty() ? TestKind::stdin_stdout : TestKind::call;
  } else {
    return std::nullopt;  // a case type we cannot run: no value rather than a wrong 0
  }
  if (tests.kind != TestKind::assertion && tests.kind != TestKind::text && strings_only) return std::nullopt;
  if (tests.kind == TestKind::call && tests.function.empty()) return std::nullopt;
  return tests;
}

}  // namespace grpo::io
