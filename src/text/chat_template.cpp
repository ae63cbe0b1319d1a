// SPDX-License-Identifier: Apache-2.0
// The chat formats of include/grpo/text/chat_template.hpp, each following its Jinja template line by line.
#include <grpo/text/chat_template.hpp>

#include <grpo/core/error.hpp>
#include <grpo/text/python_json.hpp>

#include <array>

#include "json_fields.hpp"
#include "unicode.hpp"

namespace grpo::text {
namespace {

constexpr std::string_view kQwen2System = "You are a helpful assistant.";
constexpr std::string_view kQwen25System = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// The tool branch's system turn, the same in Qwen2.5's and Qwen3's templates: "<|im_start|>system\n" + the system
// text + kToolsIntro + "\n" + tojson(tool) per tool + kToolsOutro.
constexpr std::string_view kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

// What from_jinja requires, in the Jinja source, to read a ChatML template as Qwen2.5's tool branch: every text it
// renders for tools, tool calls and tool responses, as Qwen2.5-Instruct's tokenizer_config.json spells it.
constexpr std::array<std::string_view, 10> kQwen25ToolSource = {
    R"("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n)"
    R"(You are provided with function signatures within <tools></tools> XML tags:\n<tools>")",
    "tool | tojson",
    R"("\n</tools>\n\nFor each function call, return a json object with function name and arguments within )"
    R"(<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": )"
    R"(<args-json-object>}\n</tool_call><|im_end|>\n")",
    R"('\n<tool_call>\n{"name": "')",
    R"('", "arguments": ')",
    "tool_call.arguments | tojson",
    R"('}\n</tool_call>')",
    "'<|im_start|>user'",
    R"('\n<tool_response>\n')",
    R"('\n</tool_response>')",
};

/// Python's str.isspace, which Jinja's trim filter (str.strip) uses.
bool is_python_space(char32_t c) { return detail::is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

/// Python's str.strip() (no argument).
std::string_view python_strip(std::string_view text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t next = begin;
    if (!is_python_space(detail::next_code_point(text, next))) break;
    begin = next;
  }
  std::size_t end = text.size();
  while (end > begin) {
    std::size_t previous = end;
    if (!is_python_space(detail::previous_code_point(text, previous))) break;
    end = previous;
  }
  return text.substr(begin, end - begin);
}

std::string_view lstrip_newlines(std::string_view text) {
  while (text.starts_with('\n')) text.remove_prefix(1);
  return text;
}
std::string_view rstrip_newlines(std::string_view text) {
  while (text.ends_with('\n')) text.remove_suffix(1);
  return text;
}

/// Python's text.split(separator)[-1]: what follows the last separator (all of text when there is none).
std::string_view after_last(std::string_view text, std::string_view separator) {
  const auto pos = text.rfind(separator);
  return pos == std::string_view::npos ? text : text.substr(pos + separator.size());
}
/// Python's text.split(separator)[0].
std::string_view before_first(std::string_view text, std::string_view separator) {
  return text.substr(0, text.find(separator));
}

/// `json` (a tool schema or tool-call arguments) as transformers' tojson writes it; ParseError naming `what` unless
/// it is a JSON object.
std::string tojson_object(std::string_view json, std::string_view what) {
  std::string text = python_json_dumps(json, what);
  if (!text.starts_with('{')) ::grpo::detail::throw_formatted<ParseError>("{}: should be a JSON object", what);
  return text;
}

/// Both templates' tool-call block: '<tool_call>\n{"name": "' + name + '", "arguments": ' + arguments|tojson +
/// '}\n</tool_call>'.
std::string hermes_tool_call(const ToolCallRequest& call, std::string_view what) {
  return "<tool_call>\n{\"name\": \"" + call.name + "\", \"arguments\": " + tojson_object(call.arguments_json, what) +
         "}\n</tool_call>";
}

/// The tool branch's system turn; `system_text` is what precedes "# Tools".
void append_tools_system(std::string_view system_text, std::span<const std::string> tools, std::string& out) {
  out += "<|im_start|>system\n";
  out += system_text;
  out += kToolsIntro;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    out += '\n';
    out += tojson_object(tools[i], fmt::format("ChatRenderOptions.tools[{}]", i));
  }
  out += kToolsOutro;
}

/// The tool calls of assistant message `index`, after its content: each call's block, preceded by "\n" unless it is
/// the first and the content is empty. Qwen3 spells it so; Qwen2.5's "<|im_start|>assistant" + ("\n" + content if
/// content) + "\n<tool_call>..." per call is the same text.
void append_tool_calls(const ChatMessage& message, std::size_t index, bool has_content, std::string& out) {
  for (std::size_t k = 0; k < message.tool_calls.size(); ++k) {
    if (k > 0 || has_content) out += '\n';
    const ToolCallRequest& call = message.tool_calls[k];
    out += hermes_tool_call(call, fmt::format("chat message {} tool_calls[{}] ('{}') arguments", index, k, call.name));
  }
}

/// One tool response as both templates write it: "\n<tool_response>\n" + content + "\n</tool_response>".
void append_tool_response_block(std::string_view content, std::string& out) {
  out += "\n<tool_response>\n";
  out += content;
  out += "\n</tool_response>";
}

/// Tool message `index`: consecutive tool messages share one user turn of <tool_response> blocks.
void append_tool_response(std::span<const ChatMessage> messages, std::size_t index, std::string& out) {
  if (index == 0 || messages[index - 1].role != "tool") out += "<|im_start|>user";
  append_tool_response_block(messages[index].content, out);
  if (index + 1 == messages.size() || messages[index + 1].role != "tool") out += "<|im_end|>\n";
}

/// The header of the assistant turn to generate (with Qwen3's empty think block when enable_thinking == false).
void append_generation_prompt(ChatFormat format, const ChatRenderOptions& options, std::string& out) {
  if (format == ChatFormat::llama3) {
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return;
  }
  out += "<|im_start|>assistant\n";
  if (format == ChatFormat::qwen3 && options.enable_thinking == false) out += "<think>\n\n</think>\n\n";
}

[[noreturn]] void throw_unrendered_role(std::size_t index, std::string_view role, std::string_view format) {
  ::grpo::detail::throw_formatted<Error>(
      "chat message {} has role '{}', which the {} template does not render (system, user, assistant, tool)", index,
      role, format);
}

void render_chatml(const ChatTemplateOptions& template_options, std::span<const ChatMessage> messages,
                   const ChatRenderOptions& options, std::string& out) {
  const bool has_system = !messages.empty() && messages[0].role == "system";
  if (!options.tools.empty()) {
    // Qwen2.5's tool branch: the system message, or the default system prompt, leads the tools' system turn.
    const std::string_view system = has_system ? std::string_view(messages[0].content)
                                               : std::string_view(template_options.default_system_prompt);
    append_tools_system(std::string(system) + "\n\n", options.tools, out);
  } else if (!has_system && !template_options.default_system_prompt.empty()) {
    // Qwen2 / Qwen2.5: {% if messages[0]['role'] != 'system' %} default system {% endif %}.
    out += "<|im_start|>system\n";
    out += template_options.default_system_prompt;
    out += "<|im_end|>\n";
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (!template_options.qwen25_tools) {
      out += "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n";
    } else if (message.role == "tool") {
      append_tool_response(messages, i, out);
    } else if (message.role == "assistant" && !message.tool_calls.empty()) {
      out += "<|im_start|>assistant\n" + message.content;
      append_tool_calls(message, i, !message.content.empty(), out);
      out += "<|im_end|>\n";
    } else if (message.role == "user" || message.role == "assistant" || message.role == "system") {
      // The first system message is already in the tool branch's system turn.
      if (i == 0 && has_system && !options.tools.empty()) continue;
      out += "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n";
    } else {
      throw_unrendered_role(i, message.role, "qwen2.5");
    }
  }
  if (options.add_generation_prompt) append_generation_prompt(ChatFormat::chatml, options, out);
}

bool is_tool_response(std::string_view content) {
  return content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
}

void render_qwen3(std::span<const ChatMessage> messages, const ChatRenderOptions& options, std::string& out) {
  const std::size_t n = messages.size();
  const bool has_system = n > 0 && messages[0].role == "system";
  if (!options.tools.empty()) {
    append_tools_system(has_system ? messages[0].content + "\n\n" : std::string(), options.tools, out);
  } else if (has_system) {
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  }
  // The last user message that is not a bare tool response is "the query"; reasoning is kept only after it.
  std::size_t last_query = n == 0 ? 0 : n - 1;
  for (std::size_t k = n; k-- > 0;) {
    if (messages[k].role == "user" && !is_tool_response(messages[k].content)) {
      last_query = k;
      break;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const ChatMessage& message = messages[i];
    if (message.role == "user" || (message.role == "system" && i != 0)) {
      out += "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n";
    } else if (message.role == "assistant") {
      std::string_view content = message.content;
      std::string_view reasoning;
      if (message.reasoning_content) {
        reasoning = *message.reasoning_content;
      } else if (content.find("</think>") != std::string_view::npos) {
        reasoning = lstrip_newlines(after_last(rstrip_newlines(before_first(content, "</think>")), "<think>"));
        content = lstrip_newlines(after_last(content, "</think>"));
      }
      if (i > last_query && (i + 1 == n || !reasoning.empty())) {
        out += "<|im_start|>assistant\n<think>\n";
        out += lstrip_newlines(rstrip_newlines(reasoning));
        out += "\n</think>\n\n";
        out += lstrip_newlines(content);
      } else {
        out += "<|im_start|>assistant\n";
        out += content;
      }
      // The template tests `content` before its lstrip('\n') for the "\n" ahead of the first call.
      append_tool_calls(message, i, !content.empty(), out);
      out += "<|im_end|>\n";
    } else if (message.role == "tool") {
      append_tool_response(messages, i, out);
    } else if (message.role != "system") {
      throw_unrendered_role(i, message.role, "qwen3");
    }
  }
  if (options.add_generation_prompt) append_generation_prompt(ChatFormat::qwen3, options, out);
}

void render_llama3(const ChatTemplateOptions& template_options, std::span<const ChatMessage> messages,
                   const ChatRenderOptions& options, std::string& out) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += template_options.bos_token;
    out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n";
    out += python_strip(messages[i].content);
    out += "<|eot_id|>";
  }
  if (options.add_generation_prompt) append_generation_prompt(ChatFormat::llama3, options, out);
}

/// Qwen2-style default system prompt: the first "<|im_start|>system\n" in the template that is followed by
/// literal text (not a closing quote and a variable) up to "<|im_end|>". Empty when there is none.
std::string find_default_system_prompt(std::string_view source) {
  constexpr std::string_view kHeader = "<|im_start|>system";
  for (std::size_t at = source.find(kHeader); at != std::string_view::npos; at = source.find(kHeader, at + 1)) {
    std::string_view rest = source.substr(at + kHeader.size());
    if (rest.starts_with("\\n")) {
      rest.remove_prefix(2);
    } else if (rest.starts_with('\n')) {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    const auto end = rest.find("<|im_end|>");
    if (end == std::string_view::npos) continue;
    const std::string_view literal = rest.substr(0, end);
    if (literal.empty() || literal.find_first_of("'\"{}") != std::string_view::npos) continue;
    // Undo the Jinja string escapes a prompt can contain.
    std::string prompt;
    for (std::size_t i = 0; i < literal.size(); ++i) {
      if (literal[i] == '\\' && i + 1 < literal.size()) {
        const char escaped = literal[++i];
        prompt += escaped == 'n' ? '\n' : escaped == 't' ? '\t' : escaped;
      } else {
        prompt += literal[i];
      }
    }
    return prompt;
  }
  return {};
}

/// Whether a ChatML template's source has Qwen2.5's tool branch (kQwen25ToolSource) with `default_system_prompt`
/// as its own default ("{{- 'You are Qwen, ...' }}" in Qwen2.5).
bool has_qwen25_tool_branch(std::string_view source, std::string_view default_system_prompt) {
  for (const std::string_view text : kQwen25ToolSource) {
    if (source.find(text) == std::string_view::npos) return false;
  }
  return !default_system_prompt.empty() &&
         source.find("'" + std::string(default_system_prompt) + "'") != std::string_view::npos;
}

ChatTemplateOptions format_options(ChatFormat format, std::string_view default_system_prompt = {},
                                   bool qwen25_tools = false) {
  ChatTemplateOptions options;
  options.format = format;
  options.default_system_prompt = std::string(default_system_prompt);
  options.qwen25_tools = qwen25_tools;
  return options;
}

/// The format's name in error messages.
std::string_view format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml:
      return "chatml";
    case ChatFormat::qwen3:
      return "qwen3";
    case ChatFormat::llama3:
      return "llama3";
  }
  return "chatml";
}

}  // namespace

ChatTemplate::ChatTemplate(ChatTemplateOptions options) : options_(std::move(options)) {}

ChatTemplate ChatTemplate::from_name(std::string_view name) {
  if (name == "chatml") return ChatTemplate(format_options(ChatFormat::chatml));
  if (name == "qwen2") return ChatTemplate(format_options(ChatFormat::chatml, kQwen2System));
  if (name == "qwen2.5") return ChatTemplate(format_options(ChatFormat::chatml, kQwen25System, true));
  if (name == "qwen3") return ChatTemplate(format_options(ChatFormat::qwen3));
  if (name == "llama3") return ChatTemplate(format_options(ChatFormat::llama3));
  ::grpo::detail::throw_formatted<ConfigError>(
      "unknown chat template name '{}' (chatml, qwen2, qwen2.5, qwen3, llama3)", name);
}

ChatTemplate ChatTemplate::from_jinja(std::string_view source, std::string_view bos_token) {
  if (source.find("<|start_header_id|>") != std::string_view::npos) {
    GRPO_CHECK_CONFIG(source.find("Cutting Knowledge Date") == std::string_view::npos,
                      "chat template: Llama 3.1's date header ('Cutting Knowledge Date') is not supported; "
                      "select the plain Llama 3 format with ChatTemplate::from_name(\"llama3\")");
    auto options = format_options(ChatFormat::llama3);
    options.bos_token = std::string(bos_token);
    return ChatTemplate(std::move(options));
  }
  if (source.find("<|im_start|>") != std::string_view::npos) {
    if (source.find("<think>") != std::string_view::npos) return ChatTemplate(format_options(ChatFormat::qwen3));
    const std::string default_system_prompt = find_default_system_prompt(source);
    return ChatTemplate(format_options(ChatFormat::chatml, default_system_prompt,
                                       has_qwen25_tool_branch(source, default_system_prompt)));
  }
  ::grpo::detail::throw_formatted<ConfigError>(
      "chat template not recognised (no <|im_start|> or <|start_header_id|>; supported: ChatML / Qwen2 / Qwen2.5 / "
      "Qwen3 / Llama 3); select a format with ChatTemplate::from_name. Template starts: '{}'",
      source.substr(0, 80));
}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::filesystem::path& tokenizer_config_json) {
  const simdjson::padded_string json = detail::load_json_file(tokenizer_config_json);
  return from_tokenizer_config_json(std::string_view(json.data(), json.size()), tokenizer_config_json.string());
}

ChatTemplate ChatTemplate::from_tokenizer_config_json(std::string_view json_text, std::string_view source) {
  simdjson::padded_string json(json_text);
  simdjson::dom::parser parser;
  const detail::JsonField root = detail::parse_json(parser, json, source);
  std::string bos_token = "<|begin_of_text|>";
  if (const auto bos = root.find("bos_token"); bos && !bos->is_null()) {
    bos_token = std::string(bos->value.is_string() ? bos->string() : bos->at("content").string());
  }
  const detail::JsonField chat_template = root.at("chat_template");
  if (chat_template.value.is_string()) return from_jinja(chat_template.string(), bos_token);
  std::size_t index = 0;
  for (const auto item : chat_template.array()) {
    const detail::JsonField named = chat_template.element(item, index++);
    if (named.at("name").string() == "default") return from_jinja(named.at("template").string(), bos_token);
  }
  chat_template.fail("a template string or a list with a template named 'default'");
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, const ChatRenderOptions& options) const {
  GRPO_CHECK(options.tools.empty() || supports_tools(),
             "ChatRenderOptions.tools: the {} chat format has no tool branch (qwen2.5 and qwen3 render tools)",
             format_name(options_.format));
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    GRPO_CHECK(!message.reasoning_content || options_.format == ChatFormat::qwen3,
               "chat message {} has reasoning_content, which only the qwen3 format renders", i);
    if (message.tool_calls.empty()) continue;
    GRPO_CHECK(supports_tools(),
               "chat message {} has tool_calls, which the {} chat format cannot render (qwen2.5 and qwen3 can)", i,
               format_name(options_.format));
    GRPO_CHECK(message.role == "assistant", "chat message {} has tool_calls but role '{}' (only assistant messages "
               "carry tool calls)", i, message.role);
  }
  std::string out;
  switch (options_.format) {
    case ChatFormat::chatml:
      render_chatml(options_, messages, options, out);
      break;
    case ChatFormat::qwen3:
      render_qwen3(messages, options, out);
      break;
    case ChatFormat::llama3:
      render_llama3(options_, messages, options, out);
      break;
  }
  return out;
}

bool ChatTemplate::supports_tools() const {
  return options_.format == ChatFormat::qwen3 || (options_.format == ChatFormat::chatml && options_.qwen25_tools);
}

std::string ChatTemplate::tool_response_fragment(std::span<const std::string> responses,
                                                 const ChatRenderOptions& options) const {
  GRPO_CHECK(supports_tools(), "tool_response_fragment: the {} chat format has no tool responses (qwen2.5 and qwen3 "
             "have)", format_name(options_.format));
  GRPO_CHECK(!responses.empty(), "tool_response_fragment: no tool responses (one per tool call is needed)");
  // The "\n" that follows the assistant's <|im_end|>, the tool messages' user turn as render() writes it (see
  // append_tool_response), the next assistant header.
  std::string out = "\n<|im_start|>user";
  for (const std::string& response : responses) append_tool_response_block(response, out);
  out += "<|im_end|>\n";
  append_generation_prompt(options_.format, options, out);
  return out;
}

std::string ChatTemplate::tool_call_text(const ToolCallRequest& call) const {
  GRPO_CHECK(supports_tools(), "tool_call_text: the {} chat format has no tool calls (qwen2.5 and qwen3 have)",
             format_name(options_.format));
  return hermes_tool_call(call, fmt::format("tool call '{}' arguments", call.name));
}

std::vector<ChatMessage> messages_in_context(std::span<const ChatMessage> messages, ChatFormat format) {
  std::vector<ChatMessage> out(messages.begin(), messages.end());
  if (format == ChatFormat::qwen3) {
    // Rendering a prefix that ends before the last query must not show reasoning the whole conversation drops.
    std::size_t last_query = out.empty() ? 0 : out.size() - 1;
    for (std::size_t k = out.size(); k-- > 0;) {
      if (out[k].role == "user" && !is_tool_response(out[k].content)) {
        last_query = k;
        break;
      }
    }
    for (std::size_t i = 0; i < last_query; ++i) {
      auto& m = out[i];
      if (m.role != "assistant") continue;
      if (m.reasoning_content) {
        m.reasoning_content.reset();
      } else if (m.content.find("</think>") != std::string::npos) {
        m.content = std::string(lstrip_newlines(after_last(m.content, "</think>")));
      }
    }
    return out;
  }
  for (auto& m : out) {
    if (m.role == "assistant" && m.reasoning_content) {
      m.content = "<think>\n" + *m.reasoning_content + "\n</think>\n\n" + m.content;
      m.reasoning_content.reset();
    }
  }
  return out;
}

std::string end_of_turn(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml:
    case ChatFormat::qwen3:
      return "<|im_end|>";
    case ChatFormat::llama3:
      return "<|eot_id|>";
  }
  return "<|im_end|>";
}

}  // namespace grpo::text
