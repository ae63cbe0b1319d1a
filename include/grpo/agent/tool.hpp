// SPDX-License-Identifier: Apache-2.0
// Tools a policy can call during a multi-turn rollout: a name, a JSON-schema of its arguments, a description, and
// call(arguments) → reply text or error. The schema reaches the prompt through the chat template's `tools` variable;
// the model's calls come back as text::ToolCallRequest (name + arguments JSON) parsed from what it sampled.
//
//   class WeatherTool final : public grpo::agent::Tool {
//    public:
//     WeatherTool() : Tool({.name = "weather", .description = "Today's weather in a city.",
//                           .parameters = R"({"type": "object", "properties": {"city": {"type": "string"}},
//                                            "required": ["city"]})"}) {}
//     grpo::agent::ToolReply call(const grpo::agent::ToolArguments& args) const override {
//       return grpo::agent::ToolReply::ok("sunny in " + args.string("city"));
//     }
//   };
#pragma once

#include <grpo/io/json_fields.hpp>
#include <grpo/text/chat_template.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::agent {

/// One call the model made: the tool's name and its arguments as a JSON object's text.
using ToolCall = text::ToolCallRequest;

/// What a call returns to the model: the reply text, or an error message (the model reads either; errors count in the
/// rollout's metrics).
struct ToolReply {
  std::string text;
  bool error = false;

  static ToolReply ok(std::string text) { return {std::move(text), false}; }
  static ToolReply failure(std::string message) { return {std::move(message), true}; }
};

/// A tool's arguments: the JSON object the model wrote, read field by field. Reading a field that is missing or of
/// another type throws ToolArgumentError, which the caller turns into an error reply naming the field.
class ToolArguments {
 public:
  /// Parses `json`; throws ToolArgumentError when it is not a JSON object.
  explicit ToolArguments(std::string_view json);

  bool has(std::string_view field) const;
  /// The string field `field`.
  std::string string(std::string_view field) const;
  /// The number field `field` (a JSON number, or a string holding one).
  double number(std::string_view field) const;
  /// The integer field `field` (a JSON number without a fraction, or a string holding one).
  std::int64_t integer(std::string_view field) const;
  /// The arguments' JSON text as the model wrote it.
  const std::string& json() const { return json_; }

 private:
  const std::optional<io::JsonValue>& field(std::string_view name, std::string_view expected) const;

  std::string json_;
  std::vector<std::pair<std::string, std::optional<io::JsonValue>>> fields_;
};

/// Bad arguments: the message says which field and what was expected, for the model to read.
class ToolArgumentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ToolSpec {
  /// [A-Za-z0-9_-]+, unique within a ToolSet.
  std::string name;
  std::string description;
  /// A JSON-schema object for the arguments ({"type": "object", "properties": …, "required": …}).
  std::string parameters = R"({"type": "object", "properties": {}})";
  /// A call that takes longer is abandoned and answered with a timeout error (the call's thread finishes on its own;
  /// tools that can stop themselves, as the sandboxed python does, should).
  std::chrono::milliseconds timeout{10000};
};

class Tool {
 public:
  /// Throws ConfigError for an empty or malformed name or a parameters text that is not a JSON object.
  explicit Tool(ToolSpec spec);
  virtual ~Tool() = default;

  /// Runs one call. Bad arguments: throw ToolArgumentError (or return ToolReply::failure); any other exception is
  /// turned into an error reply too, so a crashing tool never stops a rollout. Called from pool threads: must be
  /// thread-safe.
  virtual ToolReply call(const ToolArguments& arguments) const = 0;

  const ToolSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }
  /// {"type": "function", "function": {"name": …, "description": …, "parameters": …}}: the entry of the chat
  /// template's `tools` list (the OpenAI / Hugging Face form).
  std::string schema_json() const;

 private:
  ToolSpec spec_;
};

/// A tool from a function: FunctionTool({.name = "echo", ...}, [](const ToolArguments& a) { ... }).
class FunctionTool final : public Tool {
 public:
  using Function = std::function<ToolReply(const ToolArguments&)>;
  FunctionTool(ToolSpec spec, Function function) : Tool(std::move(spec)), function_(std::move(function)) {}
  ToolReply call(const ToolArguments& arguments) const override { return function_(arguments); }

 private:
  Function function_;
};

/// What running one call gave, with how it went (for the metrics).
struct ToolOutcome {
  ToolReply reply;
  enum class Status { ok, error, unknown_tool, bad_arguments, timeout, crashed } status = Status::ok;
  double seconds = 0.0;
};

/// The tools offered in an episode, by name.
class ToolSet {
 public:
  ToolSet() = default;
  /// Throws ConfigError for two tools with one name.
  explicit ToolSet(std::vector<std::shared_ptr<const Tool>> tools);

  void add(std::shared_ptr<const Tool> tool);
  const Tool* find(std::string_view name) const;
  bool empty() const { return tools_.empty(); }
  const std::vector<std::shared_ptr<const Tool>>& tools() const { return tools_; }
  /// Every tool's schema_json(), in order: ChatRenderOptions::tools.
  std::vector<std::string> schemas() const;

  /// Runs `call`: an unknown name, bad arguments, a thrown exception and a call over its tool's timeout each become an
  /// error reply the model reads (naming the tool and what went wrong); never throws. A call that times out is left to
  /// finish on its own thread, holding its tool alive, while this returns.
  ToolOutcome run(const ToolCall& call) const;

 private:
  std::vector<std::shared_ptr<const Tool>> tools_;
};

}  // namespace grpo::agent
