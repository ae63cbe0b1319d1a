// SPDX-License-Identifier: Apache-2.0
#include <grpo/agent/builtin_tools.hpp>
#include <grpo/agent/environment.hpp>
#include <grpo/agent/run_with_deadline.hpp>
#include <grpo/core/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

namespace grpo::agent {

EnvironmentStep ToolEnvironment::step(std::string_view /*turn_text*/, std::span<const ParsedToolCall> calls) {
  EnvironmentStep out;
  for (const ParsedToolCall& parsed : calls) {
    if (!parsed.call) {
      out.replies.push_back(parsed.error);
      out.statuses.push_back(ToolOutcome::Status::bad_arguments);
      continue;
    }
    ToolOutcome outcome = tools_.run(*parsed.call);
    out.replies.push_back(std::move(outcome.reply.text));
    out.statuses.push_back(outcome.status);
  }
  return out;
}

EnvironmentStep NoToolsEnvironment::step(std::string_view /*turn_text*/, std::span<const ParsedToolCall> calls) {
  EnvironmentStep step;
  step.replies.assign(calls.size(), "Error: no tools are available");
  step.statuses.assign(calls.size(), ToolOutcome::Status::unknown_tool);
  return step;
}

EnvironmentRegistry EnvironmentRegistry::with_builtins() {
  EnvironmentRegistry registry;
  registry.add("calculator", [] { return std::make_unique<ToolEnvironment>(ToolSet({calculator_tool()})); });
  // One sandbox for every trajectory (Sandbox::run is thread-safe), made when the first python environment is.
  auto sandbox = std::make_shared<std::shared_ptr<const Tool>>();
  auto python = [sandbox] {
    if (!*sandbox) *sandbox = python_tool();
    return *sandbox;
  };
  registry.add("python", [python] { return std::make_unique<ToolEnvironment>(ToolSet({python()})); });
  registry.add("tools", [python] { return std::make_unique<ToolEnvironment>(ToolSet({calculator_tool(), python()})); });
  registry.add("no_tools", [] { return std::make_unique<NoToolsEnvironment>(); });
  return registry;
}

void EnvironmentRegistry::add(std::string name, EnvironmentFactory factory) {
  GRPO_CHECK_CONFIG(factory != nullptr, "environment '{}': no factory", name);
  GRPO_CHECK_CONFIG(!factories_.contains(name), "environment '{}' is registered twice", name);
  factories_.emplace(std::move(name), std::move(factory));
}

EnvironmentFactory EnvironmentRegistry::factory(std::string_view name) const {
  const auto found = factories_.find(name);
  GRPO_CHECK_CONFIG(found != factories_.end(), "unknown environment '{}' (known: {})", name,
                    fmt::join(names(), ", "));
  return found->second;
}

std::vector<std::string> EnvironmentRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, factory] : factories_) out.push_back(name);
  return out;
}

namespace {

// Replies for every call of `job` saying `why` (a step that failed as a whole), the episode over.
EnvironmentStep failed_step(const StepJob& job, const std::string& why, ToolOutcome::Status status) {
  EnvironmentStep step;
  step.replies.assign(job.calls.size(), why);
  step.statuses.assign(job.calls.size(), status);
  step.done = true;
  return step;
}

StepResult run_one(const StepJob& job) {
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  // A step that hangs is abandoned at its timeout (run_with_deadline: its thread keeps the environment alive).
  try {
    std::optional<EnvironmentStep> done = run_with_deadline(
        [environment = job.environment, text = job.turn_text, calls = job.calls] { return environment->step(text, calls); },
        job.timeout);
    if (!done) {
      return {failed_step(job, fmt::format("Error: the tools timed out after {} ms", job.timeout.count()),
                          ToolOutcome::Status::timeout),
              true, seconds()};
    }
    EnvironmentStep step = std::move(*done);
    if (step.replies.size() != job.calls.size() || step.statuses.size() != job.calls.size()) {
      return {failed_step(job,
                          fmt::format("Error: the environment gave {} replies for {} calls", step.replies.size(),
                                      job.calls.size()),
                          ToolOutcome::Status::crashed),
              false, seconds()};
    }
    return {std::move(step), false, seconds()};
  } catch (const std::exception& e) {
    return {failed_step(job, fmt::format("Error: the environment failed: {}", e.what()), ToolOutcome::Status::crashed),
            false, seconds()};
  }
}

}  // namespace

std::vector<StepResult> run_steps(std::span<const StepJob> jobs, int threads) {
  GRPO_CHECK_CONFIG(threads >= 1, "tool threads must be >= 1, got {}", threads);
  std::vector<StepResult> out(jobs.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) out[i] = run_one(jobs[i]);
  };
  const auto count = std::min<std::size_t>(static_cast<std::size_t>(threads), jobs.size());
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
  return out;
}

}  // namespace grpo::agent
