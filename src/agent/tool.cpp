// SPDX-License-Identifier: Apache-2.0
#include <grpo/agent/run_with_deadline.hpp>
#include <grpo/agent/tool.hpp>
#include <grpo/core/error.hpp>
#include <grpo/text/python_json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

namespace grpo::agent {
namespace {

bool valid_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::optional<double> parse_double(std::string_view text) {
  double value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

}  // namespace

ToolArguments::ToolArguments(std::string_view json) : json_(json) {
  try {
    fields_ = io::json_object_fields(json, "arguments");
  } catch (const Error& e) {
    throw ToolArgumentError(fmt::format("the arguments must be a JSON object: {}", e.what()));
  }
}

bool ToolArguments::has(std::string_view name) const {
  return std::any_of(fields_.begin(), fields_.end(), [&](const auto& f) { return f.first == name && f.second; });
}

const std::optional<io::JsonValue>& ToolArguments::field(std::string_view name, std::string_view expected) const {
  for (const auto& [key, value] : fields_) {
    if (key == name && value) return value;
  }
  throw ToolArgumentError(fmt::format("missing argument '{}' ({})", name, expected));
}

std::string ToolArguments::string(std::string_view name) const {
  const auto& value = field(name, "a string");
  if (const auto* s = std::get_if<std::string>(&*value)) return *s;
  throw ToolArgumentError(fmt::format("argument '{}' should be a string", name));
}

double ToolArguments::number(std::string_view name) const {
  const auto& value = field(name, "a number");
  if (const auto* d = std::get_if<double>(&*value)) return *d;
  if (const auto* s = std::get_if<std::string>(&*value)) {
    if (const auto parsed = parse_double(*s)) return *parsed;
  }
  throw ToolArgumentError(fmt::format("argument '{}' should be a number", name));
}

std::int64_t ToolArguments::integer(std::string_view name) const {
  double value = 0;
  try {
    value = number(name);
  } catch (const ToolArgumentError&) {
    throw ToolArgumentError(fmt::format("argument '{}' should be an integer", name));
  }
  if (!std::isfinite(value) || value != std::floor(value) || std::fabs(value) > 9.0e15) {
    throw ToolArgumentError(fmt::format("argument '{}' should be an integer", name));
  }
  return static_cast<std::int64_t>(value);
}

Tool::Tool(ToolSpec spec) : spec_(std::move(spec)) {
  GRPO_CHECK_CONFIG(valid_name(spec_.name), "tool name '{}' must be letters, digits, '_' or '-'", spec_.name);
  GRPO_CHECK_CONFIG(spec_.timeout.count() > 0, "tool '{}': timeout must be > 0 ms", spec_.name);
  try {
    io::json_object_fields(spec_.parameters, "parameters");
  } catch (const Error& e) {
    throw ConfigError(fmt::format("tool '{}': parameters must be a JSON-schema object: {}", spec_.name, e.what()));
  }
}

std::string Tool::schema_json() const {
  // The JSON strings are escaped by the one JSON writer the chat templates use.
  return fmt::format(R"({{"type": "function", "function": {{"name": {}, "description": {}, "parameters": {}}}}})",
                     text::python_json_string(spec_.name), text::python_json_string(spec_.description),
                     text::python_json_dumps(spec_.parameters, fmt::format("tool '{}' parameters", spec_.name)));
}

ToolSet::ToolSet(std::vector<std::shared_ptr<const Tool>> tools) {
  for (auto& tool : tools) add(std::move(tool));
}

void ToolSet::add(std::shared_ptr<const Tool> tool) {
  GRPO_CHECK_CONFIG(tool != nullptr, "ToolSet: a null tool");
  GRPO_CHECK_CONFIG(find(tool->name()) == nullptr, "two tools are named '{}'", tool->name());
  tools_.push_back(std::move(tool));
}

const Tool* ToolSet::find(std::string_view name) const {
  for (const auto& tool : tools_) {
    if (tool->name() == name) return tool.get();
  }
  return nullptr;
}

std::vector<std::string> ToolSet::schemas() const {
  std::vector<std::string> out;
  for (const auto& tool : tools_) out.push_back(tool->schema_json());
  return out;
}

ToolOutcome ToolSet::run(const ToolCall& call) const {
  using Status = ToolOutcome::Status;
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&](ToolReply reply, Status status) {
    return ToolOutcome{std::move(reply), status,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  };
  std::shared_ptr<const Tool> tool;
  for (const auto& t : tools_) {
    if (t->name() == call.name) tool = t;
  }
  if (!tool) {
    std::string names;
    for (const auto& t : tools_) names += (names.empty() ? "" : ", ") + t->name();
    return finish(ToolReply::failure(fmt::format("Error: unknown tool '{}' (tools: {})", call.name,
                                                 names.empty() ? "none" : names)),
                  Status::unknown_tool);
  }
  // A call that hangs is abandoned at its timeout (run_with_deadline: its thread keeps `tool` alive); the state it
  // writes is its own.
  struct Result {
    ToolReply reply;
    Status status = Status::ok;
  };
  std::optional<Result> result = run_with_deadline(
      [tool, arguments = call.arguments_json]() -> Result {
        try {
          ToolReply reply = tool->call(ToolArguments(arguments));
          return {reply, reply.error ? Status::error : Status::ok};
        } catch (const ToolArgumentError& e) {
          return {ToolReply::failure(fmt::format("Error: {}: {}", tool->name(), e.what())), Status::bad_arguments};
        } catch (const std::exception& e) {
          return {ToolReply::failure(fmt::format("Error: {} failed: {}", tool->name(), e.what())), Status::crashed};
        } catch (...) {
          return {ToolReply::failure(fmt::format("Error: {} failed", tool->name())), Status::crashed};
        }
      },
      tool->spec().timeout);
  if (!result) {
    return finish(ToolReply::failure(fmt::format("Error: {} timed out after {} ms", tool->name(),
                                                 tool->spec().timeout.count())),
                  Status::timeout);
  }
  return finish(std::move(result->reply), result->status);
}

}  // namespace grpo::agent
