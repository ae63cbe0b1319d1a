// SPDX-License-Identifier: Apache-2.0
#include <grpo/agent/tool_call_format.hpp>
#include <grpo/core/error.hpp>
#include <grpo/io/json_fields.hpp>

#include <fmt/format.h>

namespace grpo::agent {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

ParsedToolCall parse_block(std::string_view body) {
  std::vector<std::pair<std::string, std::optional<io::JsonValue>>> fields;
  try {
    fields = io::json_object_fields(body, "tool call");
  } catch (const Error& e) {
    return {std::nullopt, fmt::format("Error: the tool call is not valid JSON ({})", e.what())};
  }
  ToolCall call;
  bool named = false;
  call.arguments_json = "{}";
  for (const auto& [key, value] : fields) {
    if (key == "name") {
      const auto* name = value ? std::get_if<std::string>(&*value) : nullptr;
      if (name == nullptr || name->empty()) return {std::nullopt, "Error: the tool call's \"name\" should be a string"};
      call.name = *name;
      named = true;
    } else if (key == "arguments" && value) {
      if (const auto* object = std::get_if<io::JsonText>(&*value); object != nullptr && object->text.front() == '{') {
        call.arguments_json = object->text;
      } else if (const auto* text = std::get_if<std::string>(&*value)) {
        call.arguments_json = *text;  // a JSON object written as a string; ToolArguments checks it
      } else {
        return {std::nullopt, "Error: the tool call's \"arguments\" should be a JSON object"};
      }
    }
  }
  if (!named) return {std::nullopt, "Error: the tool call has no \"name\""};
  return {std::move(call), {}};
}

}  // namespace

std::vector<ParsedToolCall> HermesToolCalls::parse(std::string_view text) const {
  std::vector<ParsedToolCall> out;
  for (std::size_t at = text.find(kOpen); at != std::string_view::npos; at = text.find(kOpen, at)) {
    const std::size_t body = at + kOpen.size(), end = text.find(kClose, body);
    if (end == std::string_view::npos) {
      out.push_back({std::nullopt, "Error: the tool call has no closing </tool_call>"});
      break;
    }
    out.push_back(parse_block(text.substr(body, end - body)));
    at = end + kClose.size();
  }
  return out;
}

std::shared_ptr<const ToolCallFormat> tool_call_format_for(text::ChatFormat format) {
  switch (format) {
    case text::ChatFormat::chatml:
    case text::ChatFormat::qwen3: return std::make_shared<HermesToolCalls>();
    case text::ChatFormat::llama3: break;
  }
  throw ConfigError("tool calls: the llama3 chat format has no tool-call format here (use a Qwen2.5 or Qwen3 template)");
}

}  // namespace grpo::agent
