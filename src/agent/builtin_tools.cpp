// SPDX-License-Identifier: Apache-2.0
#include <grpo/agent/builtin_tools.hpp>
#include <grpo/math/exact_value.hpp>

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace grpo::agent {
namespace {

class CalculatorTool final : public Tool {
 public:
  CalculatorTool()
      : Tool({.name = "calculator",
              .description = "Evaluates an arithmetic expression exactly (+ - * / ^, parentheses, abs, factorial, "
                             "binom, gcd, lcm, min, max, mod, floor, ceiling) and returns the result.",
              .parameters = R"({"type": "object", "properties": {"expression": {"type": "string", "description": )"
                            R"("The expression, e.g. (12 + 7) * 3"}}, "required": ["expression"]})",
              .timeout = std::chrono::milliseconds(2000)}) {}

  ToolReply call(const ToolArguments& arguments) const override {
    const std::string expression = arguments.string("expression");
    const auto parsed = math::parse_plain(expression);
    if (!parsed) return ToolReply::failure(fmt::format("Error: cannot read the expression '{}'", expression));
    const auto value = math::exact_value(*parsed);
    if (!value) return ToolReply::failure(fmt::format("Error: '{}' has no exact rational value", expression));
    return ToolReply::ok(*value);
  }
};

class PythonTool final : public Tool {
 public:
  PythonTool(std::shared_ptr<const sandbox::Sandbox> sandbox, sandbox::SandboxLimits limits)
      : Tool({.name = "python",
              .description = "Runs a Python 3 program and returns what it prints. No network, no files; print "
                             "what you need to see.",
              .parameters = R"({"type": "object", "properties": {"code": {"type": "string", "description": )"
                            R"("The program"}}, "required": ["code"]})",
              // The sandbox's own limit stops the program; the tool's timeout is a margin above it.
              .timeout = limits.wall_time + std::chrono::milliseconds(2000)}),
        sandbox_(sandbox ? std::move(sandbox) : std::make_shared<const sandbox::Sandbox>()),
        limits_(limits) {}

  ToolReply call(const ToolArguments& arguments) const override {
    sandbox::RunRequest request;
    request.argv = {"/usr/bin/python3", "-I", "-B", "/box/main.py"};
    request.files = {{"/box/main.py", arguments.string("code"), false}};
    request.limits = limits_;
    const sandbox::RunResult result = sandbox_->run(request);
    if (result.success()) {
      return ToolReply::ok(result.stderr_text.empty() ? result.stdout_text
                                                      : result.stdout_text + "\n[stderr]\n" + result.stderr_text);
    }
    std::string status = result.status == sandbox::RunStatus::exited
                             ? fmt::format("exit code {}", result.exit_code)
                             : result.status == sandbox::RunStatus::signaled ? fmt::format("signal {}", result.signal)
                                                                            : sandbox::to_string(result.status);
    return ToolReply::failure(fmt::format("Error: the program failed ({})\n{}{}", status, result.stdout_text,
                                          result.stderr_text));
  }

 private:
  std::shared_ptr<const sandbox::Sandbox> sandbox_;
  sandbox::SandboxLimits limits_;
};

}  // namespace

std::shared_ptr<const Tool> calculator_tool() { return std::make_shared<CalculatorTool>(); }

std::shared_ptr<const Tool> python_tool(std::shared_ptr<const sandbox::Sandbox> sandbox, sandbox::SandboxLimits limits) {
  return std::make_shared<PythonTool>(std::move(sandbox), limits);
}

}  // namespace grpo::agent
