// SPDX-License-Identifier: Apache-2.0
// The world a multi-turn rollout acts in. Each trajectory gets its own Environment: reset from its problem, then
// stepped after every assistant turn that made tool calls, answering them (and optionally rewarding the turn or
// ending the episode). ToolEnvironment is the common case: the calls are run by a ToolSet. Environments are named
// in an EnvironmentRegistry, as rewards are in the RewardRegistry, so a run can say `--env calculator`.
//
//   auto factory = [] { return std::make_unique<grpo::agent::ToolEnvironment>(
//                           grpo::agent::ToolSet({grpo::agent::calculator_tool()})); };
//   grpo::agent::MultiTurnGenerator generator(model, codec, factory, options);
#pragma once

#include <grpo/agent/tool.hpp>
#include <grpo/agent/tool_call_format.hpp>
#include <grpo/train/prompt_source.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::agent {

/// The environment's answer to one assistant turn.
struct EnvironmentStep {
  /// One reply per call block of the turn, in order (what the model reads next).
  std::vector<std::string> replies;
  /// How each call went (ok, error, unknown tool, bad arguments, timeout, crashed), for the metrics.
  std::vector<ToolOutcome::Status> statuses;
  /// This turn's reward (0 when the environment gives none): MultiTurnGenerator records it per turn.
  double reward = 0.0;
  /// The episode is over: the trajectory ends after this turn, no reply is appended.
  bool done = false;
};

class Environment {
 public:
  virtual ~Environment() = default;
  /// Starts the episode of `problem` (once per trajectory, before its first turn).
  virtual void reset(const train::Problem& problem) = 0;
  /// Answers an assistant turn that made tool calls: `turn_text` is the turn as decoded text, `calls` its call blocks
  /// (at least one; malformed ones carry their error, which should be the block's reply). Must return one reply per
  /// block. Called from a pool thread; different trajectories' environments are stepped at the same time.
  virtual EnvironmentStep step(std::string_view turn_text, std::span<const ParsedToolCall> calls) = 0;
  /// The tools the prompts announce (Tool::schema_json each: ChatRenderOptions::tools). Default: none.
  virtual std::vector<std::string> tool_schemas() const { return {}; }
};

/// Tool use without state: each call is run by the ToolSet (ToolSet::run: unknown tools, bad arguments, crashes and
/// timeouts become error replies), a malformed block is answered with its error. No reward, never done.
class ToolEnvironment : public Environment {
 public:
  explicit ToolEnvironment(ToolSet tools) : tools_(std::move(tools)) {}
  void reset(const train::Problem& /*problem*/) override {}
  EnvironmentStep step(std::string_view turn_text, std::span<const ParsedToolCall> calls) override;
  std::vector<std::string> tool_schemas() const override { return tools_.schemas(); }
  const ToolSet& tools() const { return tools_; }

 protected:
  ToolSet tools_;
};

/// The tool-disabled control: every call is answered "Error: no tools are available" (status unknown_tool).
class NoToolsEnvironment final : public Environment {
 public:
  void reset(const train::Problem& /*problem*/) override {}
  EnvironmentStep step(std::string_view turn_text, std::span<const ParsedToolCall> calls) override;
};

/// Makes a fresh environment for a trajectory (called on the generator's thread).
using EnvironmentFactory = std::function<std::unique_ptr<Environment>()>;

/// Environment names → factories: the built-ins (see docs/agents.md) and what user code adds.
class EnvironmentRegistry {
 public:
  /// The built-in environments: "calculator" (calculator_tool), "python" (python_tool in the default sandbox, made
  /// when the first python environment is), "tools" (both), "no_tools" (NoToolsEnvironment).
  static EnvironmentRegistry with_builtins();

  /// Throws ConfigError when `name` is taken.
  void add(std::string name, EnvironmentFactory factory);
  /// Throws ConfigError naming the known environments for an unknown name.
  EnvironmentFactory factory(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, EnvironmentFactory, std::less<>> factories_;
};

/// One environment step to take: `environment` answering `calls` of the turn `turn_text`.
struct StepJob {
  std::shared_ptr<Environment> environment;
  std::string turn_text;
  std::vector<ParsedToolCall> calls;
  /// The step is abandoned (its replies become timeout errors, the episode ends) after this long.
  std::chrono::milliseconds timeout{60000};
};

/// What a StepJob gave; timed_out when it was abandoned.
struct StepResult {
  EnvironmentStep step;
  bool timed_out = false;
  double seconds = 0.0;
};

/// Runs the jobs on at most `threads` threads at once (different trajectories' tools run concurrently); a job over
/// its timeout is abandoned (left to finish on its own thread, holding its environment) and the others go on. A step
/// that throws or returns the wrong number of replies is answered with error replies. Output i is job i's.
std::vector<StepResult> run_steps(std::span<const StepJob> jobs, int threads);

}  // namespace grpo::agent
