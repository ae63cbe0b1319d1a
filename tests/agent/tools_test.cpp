// SPDX-License-Identifier: Apache-2.0
// Tools, their arguments, the tool-call format, and environment steps on the pool: every failure becomes a reply the
// model reads, and a tool that hangs delays nothing but itself.
#include <grpo/agent/builtin_tools.hpp>
#include <grpo/agent/environment.hpp>
#include <grpo/agent/tool_call_format.hpp>
#include <grpo/core/error.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using grpo::agent::ParsedToolCall;
using grpo::agent::ToolArguments;
using grpo::agent::ToolCall;
using grpo::agent::ToolOutcome;
using grpo::agent::ToolReply;
using grpo::agent::ToolSet;
using grpo::agent::ToolSpec;
using Status = ToolOutcome::Status;

namespace {

std::shared_ptr<const grpo::agent::Tool> function_tool(std::string name, grpo::agent::FunctionTool::Function f,
                                                       std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  return std::make_shared<grpo::agent::FunctionTool>(ToolSpec{.name = std::move(name), .timeout = timeout},
                                                     std::move(f));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("tool arguments: typed fields, and errors that name the field", "[agent]") {
  const ToolArguments a(R"j({"code": "print(1)", "n": 3, "x": 2.5, "s": "7", "flag": true})j");
  CHECK(a.string("code") == "print(1)");
  CHECK(a.integer("n") == 3);
  CHECK(a.number("x") == 2.5);
  CHECK(a.integer("s") == 7);  // a number written as a string
  CHECK(a.has("flag"));
  CHECK_FALSE(a.has("missing"));
  CHECK_THROWS_WITH(a.string("missing"), Catch::Contains("missing argument 'missing'"));
  CHECK_THROWS_WITH(a.string("n"), Catch::Contains("argument 'n' should be a string"));
  CHECK_THROWS_WITH(a.integer("x"), Catch::Contains("argument 'x' should be an integer"));
  CHECK_THROWS_WITH(a.number("flag"), Catch::Contains("argument 'flag' should be a number"));
  CHECK_THROWS_AS(ToolArguments("[1, 2]"), grpo::agent::ToolArgumentError);
  CHECK_THROWS_AS(ToolArguments("{\"a\": "), grpo::agent::ToolArgumentError);
}

TEST_CASE("tool specs: names, schemas as the chat template's tools entries", "[agent]") {
  CHECK_THROWS_AS(function_tool("bad name", [](const ToolArguments&) { return ToolReply::ok(""); }),
                  grpo::ConfigError);
  CHECK_THROWS_AS(std::make_shared<grpo::agent::FunctionTool>(
                      ToolSpec{.name = "t", .parameters = "[1]"}, [](const ToolArguments&) { return ToolReply::ok(""); }),
                  grpo::ConfigError);
  const auto calculator = grpo::agent::calculator_tool();
  // transformers' tojson (json.dumps: ", " and ": " separators, key order kept, non-ASCII unescaped).
  CHECK(calculator->schema_json().starts_with(
      R"({"type": "function", "function": {"name": "calculator", "description": "Evaluates an arithmetic)"));
  CHECK(calculator->schema_json().ends_with(
      R"("parameters": {"type": "object", "properties": {"expression": {"type": "string", "description": )"
      R"("The expression, e.g. (12 + 7) * 3"}}, "required": ["expression"]}}})"));
  ToolSet set({calculator});
  CHECK_THROWS_AS(set.add(grpo::agent::calculator_tool()), grpo::ConfigError);  // two tools named calculator
  CHECK(set.schemas() == std::vector<std::string>{calculator->schema_json()});
}

TEST_CASE("calculator: the verifier's exact arithmetic", "[agent]") {
  const ToolSet set({grpo::agent::calculator_tool()});
  auto run = [&](const std::string& expression) {
    return set.run({"calculator", R"({"expression": ")" + expression + R"("})"});
  };
  // Values computed by hand (and with Python's fractions.Fraction for the long ones).
  CHECK(run("123456789 * 987654321").reply.text == "121932631112635269");
  CHECK(run("(2^64 + 1) / 3").reply.text == "18446744073709551617/3");  // 2^64 is not LaTeX's 2^6·4
  CHECK(run("2**10 - 10^-3").reply.text == "1023999/1000");
  CHECK(run("3 ^ 2 ^ 2").reply.text == "81");
  CHECK(run("(1/2)^(3)").reply.text == "1/8");
  CHECK(run("1/3 + 1/6").reply.text == "1/2");
  CHECK(run("0.1 + 0.2").reply.text == "3/10");
  CHECK(run("10!").reply.text == "3628800");
  CHECK(run("-7 - 8").reply.text == "-15");
  const auto irrational = run("sqrt(2)");
  CHECK(irrational.reply.error);
  CHECK(irrational.status == Status::error);
  CHECK(irrational.reply.text.find("no exact rational value") != std::string::npos);
  CHECK(run("1/0").reply.error);
  CHECK(run("2 +* (").reply.error);
  const auto missing = set.run({"calculator", R"({"expr": "1+1"})"});
  CHECK(missing.status == Status::bad_arguments);
  CHECK(missing.reply.text.find("missing argument 'expression'") != std::string::npos);
}

TEST_CASE("tool set: unknown tools, crashes and hangs become error replies", "[agent]") {
  const ToolSet set({function_tool("boom", [](const ToolArguments&) -> ToolReply { throw std::runtime_error("kaput"); }),
                     function_tool(
                         "hang",
                         [](const ToolArguments&) {
                           std::this_thread::sleep_for(std::chrono::seconds(3));
                           return ToolReply::ok("late");
                         },
                         std::chrono::milliseconds(100)),
                     function_tool("echo", [](const ToolArguments& a) { return ToolReply::ok(a.string("text")); })});
  const auto unknown = set.run({"nope", "{}"});
  CHECK(unknown.status == Status::unknown_tool);
  CHECK(unknown.reply.text == "Error: unknown tool 'nope' (tools: boom, hang, echo)");
  const auto crashed = set.run({"boom", "{}"});
  CHECK(crashed.status == Status::crashed);
  CHECK(crashed.reply.text == "Error: boom failed: kaput");
  const auto start = std::chrono::steady_clock::now();
  const auto hung = set.run({"hang", "{}"});
  CHECK(seconds_since(start) < 1.0);  // abandoned at its 100 ms timeout, not waited for
  CHECK(hung.status == Status::timeout);
  CHECK(hung.reply.text == "Error: hang timed out after 100 ms");
  CHECK(set.run({"echo", R"({"text": "hi"})"}).reply.text == "hi");
  CHECK(set.run({"echo", "not json"}).status == Status::bad_arguments);
}

TEST_CASE("python tool: runs in the sandbox, failures and limits are error replies", "[agent][sandbox]") {
  const ToolSet set({grpo::agent::python_tool()});
  auto run = [&](const std::string& code) {
    // The code as a JSON string (only quotes and newlines need escaping here).
    std::string escaped;
    for (const char c : code) escaped += c == '\n' ? std::string("\\n") : c == '"' ? std::string("\\\"") : std::string(1, c);
    return set.run({"python", R"({"code": ")" + escaped + R"("})"});
  };
  CHECK(run("print(sum(range(101)))").reply.text == "5050\n");
  CHECK(run("print(2**100)").reply.text == "1267650600228229401496703205376\n");
  const auto failed = run("raise ValueError('bad')");
  CHECK(failed.reply.error);
  CHECK(failed.reply.text.find("exit code 1") != std::string::npos);
  CHECK(failed.reply.text.find("ValueError: bad") != std::string::npos);
  const auto network = run("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)");
  CHECK(network.reply.error);  // no network in the sandbox
  const auto start = std::chrono::steady_clock::now();
  const auto forever = run("while True: pass");
  CHECK(forever.reply.error);  // killed at the sandbox's limit (5 s wall, 5 CPU seconds)
  CHECK(seconds_since(start) < 10.0);
}

TEST_CASE("Hermes tool calls: blocks, parallel calls and malformed ones", "[agent]") {
  const grpo::agent::HermesToolCalls format;
  const auto calls = format.parse(
      "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2+3\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"python\", \"arguments\": \"{\\\"code\\\": \\\"print(1)\\\"}\"}\n</tool_call>"
      "<tool_call>{\"name\": \"noargs\"}</tool_call><|im_end|>");
  REQUIRE(calls.size() == 3);
  REQUIRE(calls[0].call);
  CHECK(calls[0].call->name == "calculator");
  CHECK(ToolArguments(calls[0].call->arguments_json).string("expression") == "2+3");
  REQUIRE(calls[1].call);
  CHECK(ToolArguments(calls[1].call->arguments_json).string("code") == "print(1)");  // arguments as a JSON string
  REQUIRE(calls[2].call);
  CHECK(calls[2].call->arguments_json == "{}");
  CHECK(format.parse("The answer is 5.").empty());
  const auto bad = format.parse("<tool_call>{\"name\": \"calculator\", \"arguments\": {</tool_call>");
  REQUIRE(bad.size() == 1);
  CHECK_FALSE(bad[0].call);
  CHECK(bad[0].error.starts_with("Error: the tool call is not valid JSON"));
  const auto unnamed = format.parse("<tool_call>{\"arguments\": {}}</tool_call>");
  REQUIRE(unnamed.size() == 1);
  CHECK(unnamed[0].error == "Error: the tool call has no \"name\"");
  const auto cut = format.parse("<tool_call>{\"name\": \"calculator\", \"argu");
  REQUIRE(cut.size() == 1);
  CHECK(cut[0].error == "Error: the tool call has no closing </tool_call>");
  CHECK_THROWS_AS(grpo::agent::tool_call_format_for(grpo::text::ChatFormat::llama3), grpo::ConfigError);
}

TEST_CASE("environment steps run concurrently, and one that hangs or throws stalls nothing else", "[agent]") {
  class SlowEnvironment final : public grpo::agent::Environment {
   public:
    SlowEnvironment(int milliseconds, bool throws) : milliseconds_(milliseconds), throws_(throws) {}
    void reset(const grpo::train::Problem&) override {}
    grpo::agent::EnvironmentStep step(std::string_view, std::span<const ParsedToolCall> calls) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds_));
      if (throws_) throw std::runtime_error("environment broke");
      grpo::agent::EnvironmentStep step;
      step.replies.assign(calls.size(), "ok");
      step.statuses.assign(calls.size(), Status::ok);
      step.reward = 0.5;
      return step;
    }

   private:
    int milliseconds_;
    bool throws_;
  };
  const std::vector<ParsedToolCall> two{{ToolCall{"a", "{}"}, {}}, {ToolCall{"b", "{}"}, {}}};
  std::vector<grpo::agent::StepJob> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back({std::make_shared<SlowEnvironment>(300, false), "turn", two, std::chrono::seconds(5)});
  }
  jobs.push_back({std::make_shared<SlowEnvironment>(5000, false), "turn", two, std::chrono::milliseconds(400)});
  jobs.push_back({std::make_shared<SlowEnvironment>(0, true), "turn", two, std::chrono::seconds(5)});
  const auto start = std::chrono::steady_clock::now();
  const auto results = grpo::agent::run_steps(jobs, 4);
  // Four 300 ms steps on four threads with the hanging one abandoned at 400 ms: well under the 1.2 s + 5 s a serial
  // or waiting pool would take.
  CHECK(seconds_since(start) < 1.5);
  for (int i = 0; i < 4; ++i) {
    CHECK_FALSE(results[i].timed_out);
    CHECK(results[i].step.replies == std::vector<std::string>{"ok", "ok"});
    CHECK(results[i].step.reward == 0.5);
  }
  CHECK(results[4].timed_out);
  CHECK(results[4].step.done);
  CHECK((results[4].step.statuses == std::vector<Status>{Status::timeout, Status::timeout}));
  CHECK(results[5].step.replies.front() == "Error: the environment failed: environment broke");
  CHECK(results[5].step.done);
}

TEST_CASE("tool environment: malformed blocks answered with their error, calls by the tool set", "[agent]") {
  grpo::agent::ToolEnvironment environment(ToolSet({grpo::agent::calculator_tool()}));
  const std::vector<ParsedToolCall> calls{{ToolCall{"calculator", R"({"expression": "6*7"})"}, {}},
                                          {std::nullopt, "Error: the tool call has no \"name\""},
                                          {ToolCall{"search", "{}"}, {}}};
  const auto step = environment.step("", calls);
  CHECK(step.replies == std::vector<std::string>{"42", "Error: the tool call has no \"name\"",
                                                 "Error: unknown tool 'search' (tools: calculator)"});
  CHECK((step.statuses == std::vector<Status>{Status::ok, Status::bad_arguments, Status::unknown_tool}));
  CHECK_FALSE(step.done);
  const auto registry = grpo::agent::EnvironmentRegistry::with_builtins();
  CHECK(registry.names() == std::vector<std::string>{"calculator", "no_tools", "python", "tools"});
  CHECK_THROWS_WITH(registry.factory("web"),
                    Catch::Contains("unknown environment 'web' (known: calculator, no_tools, python, tools)"));
  CHECK(registry.factory("calculator")()->tool_schemas().size() == 1);
}
