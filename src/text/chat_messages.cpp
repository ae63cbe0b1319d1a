// SPDX-License-Identifier: Apache-2.0
#include <grpo/text/chat_messages.hpp>

#include <grpo/core/error.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <optional>
#include <string>

namespace grpo::text {

namespace {

[[noreturn]] void fail(const std::string& message) { throw ParseError(message); }

std::optional<std::string> string_member(simdjson::dom::object object, std::string_view key, const std::string& path,
                                         bool required) {
  simdjson::dom::element value;
  if (object.at_key(key).get(value) || (!required && value.is_null())) {
    if (required) fail(fmt::format("missing field '{}.{}'", path, key));
    return std::nullopt;
  }
  std::string_view text;
  if (value.get_string().get(text)) fail(fmt::format("field '{}.{}' should be a string", path, key));
  return std::string(text);
}

}  // namespace

std::vector<ChatMessage> parse_chat_messages(std::string_view json, std::string_view field) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (const auto error = parser.parse(simdjson::padded_string(json)).get(root)) {
    fail(fmt::format("field '{}' is not a JSON list of messages ({})", field, simdjson::error_message(error)));
  }
  simdjson::dom::array list;
  if (root.get_array().get(list)) fail(fmt::format("field '{}' should be a JSON list of messages", field));
  std::vector<ChatMessage> messages;
  for (simdjson::dom::element item : list) {
    const std::string path = fmt::format("{}[{}]", field, messages.size());
    simdjson::dom::object object;
    if (item.get_object().get(object)) fail(fmt::format("field '{}' should be an object", path));
    ChatMessage m;
    m.role = *string_member(object, "role", path, true);
    m.content = *string_member(object, "content", path, true);
    m.reasoning_content = string_member(object, "reasoning_content", path, false);
    messages.push_back(std::move(m));
  }
  return messages;
}

}  // namespace grpo::text
