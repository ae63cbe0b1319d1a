// SPDX-License-Identifier: Apache-2.0
// Chat templates: renders system / user / assistant / tool messages into the prompt text a model was trained on.
//
// This is not a Jinja engine. The formats below are written out in C++, each reproducing its model family's
// Jinja template character for character for the messages it supports (checked against the templates rendered
// by Jinja in tests/text/data). from_jinja recognises the family from a template's source; anything it does not
// recognise is a ConfigError rather than a silently different prompt.
//   chatml  Qwen2 / Qwen2.5 / plain ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per message, and
//           "<|im_start|>assistant\n" as generation prompt. When the first message is not a system message,
//           default_system_prompt (if not empty) is rendered as one: Qwen2's "You are a helpful assistant.",
//           Qwen2.5's "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.".
//           With qwen25_tools (the "qwen2.5" name, and from_jinja on Qwen2.5's template), Qwen2.5's function
//           calling: see "Tools" below. Without it (plain ChatML, Qwen2) a "tool" message is rendered like any other
//           role, and tools or tool_calls are an error: those templates have no tool branch.
//   qwen3   Qwen3: ChatML plus its reasoning rules. An assistant message after the last user query keeps its
//           reasoning as "<think>\n{reasoning}\n</think>\n\n" (from reasoning_content, or split off a "<think>...
//           </think>" prefix of the content); earlier assistant messages lose it. enable_thinking = false appends
//           an empty think block to the generation prompt. Tools: see below.
//   llama3  Llama 3 / 3.1 / 3.2 without the date header: bos_token, then per message
//           "<|start_header_id|>{role}<|end_header_id|>\n\n{content stripped}<|eot_id|>"; generation prompt
//           "<|start_header_id|>assistant<|end_header_id|>\n\n". No tools.
// Tools (Qwen2.5 and Qwen3, the Hermes format):
//   - ChatRenderOptions::tools (each tool's JSON schema) makes the system turn "<|im_start|>system\n{system}# Tools
//     ... <tools>\n{tool 1}\n{tool 2}...\n</tools>\n\n... </tool_call><|im_end|>\n", each tool written as transformers'
//     tojson writes it (python_json_dumps). {system}: Qwen2.5, the system message's content (else the default system
//     prompt) followed by "\n\n"; Qwen3, the system message's content and "\n\n", or nothing.
//   - An assistant message's tool_calls follow its content, each as tool_call_text(call), preceded by "\n" unless
//     it is the first and the content is empty.
//   - Consecutive "tool" messages become one user turn: "<|im_start|>user" + "\n<tool_response>\n{content}\n
//     </tool_response>" per message + "<|im_end|>\n".
//   - Tool-call arguments are rendered as a JSON object through tojson (transformers' form, where arguments is a
//     dict), never as a raw string (Qwen3's `arguments is string` branch).
// Not supported: Llama 3's tool calling, Llama 3.1's "Cutting Knowledge Date" system header, arbitrary Jinja
// templates, Qwen-family templates whose tool branch differs from Qwen2.5's (from_jinja then leaves qwen25_tools off).
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::text {

/// One tool call inside an assistant message.
struct ToolCallRequest {
  std::string name;
  /// The arguments as a JSON object's text, e.g. {"expression": "2+3"}; rendered re-serialised by python_json_dumps.
  std::string arguments_json;
};

struct ChatMessage {
  std::string role;  ///< "system", "user", "assistant" or "tool"
  std::string content;
  /// Qwen3: the assistant's reasoning, rendered inside <think> when the message follows the last user query.
  std::optional<std::string> reasoning_content;
  /// Assistant messages: the tools it calls, rendered after the content (empty: none). Qwen2.5 and Qwen3 only.
  /// (The "= {}" keeps aggregate initialisers that stop before it free of -Wmissing-field-initializers.)
  std::vector<ToolCallRequest> tool_calls = {};
};

enum class ChatFormat { chatml, qwen3, llama3 };

struct ChatTemplateOptions {
  ChatFormat format = ChatFormat::chatml;
  /// chatml: system message rendered when the conversation does not start with one; empty for none.
  std::string default_system_prompt;
  /// llama3: text put before the first message.
  std::string bos_token = "<|begin_of_text|>";
  /// chatml: the template has Qwen2.5's tool branch (tools in the system turn, tool_calls, "tool" messages as
  /// <tool_response> blocks of a user turn, other roles rejected). Set by from_name("qwen2.5") and by from_jinja
  /// for Qwen2.5's template.
  bool qwen25_tools = false;
};

struct ChatRenderOptions {
  /// Append the header of an assistant turn, so that generation continues as the assistant.
  bool add_generation_prompt = false;
  /// qwen3: false appends "<think>\n\n</think>\n\n" to the generation prompt (no reasoning); unset or true
  /// leaves the model to think.
  std::optional<bool> enable_thinking;
  /// The tools' JSON schemas as JSON text, e.g. {"type": "function", "function": {"name": ..., "description": ...,
  /// "parameters": {...}}}: the template's `tools`, rendered in the system turn (empty: no tools).
  std::vector<std::string> tools = {};
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateOptions options);

  /// "chatml" (no default system prompt), "qwen2", "qwen2.5" (with its tool branch), "qwen3", "llama3". ConfigError
  /// for other names.
  static ChatTemplate from_name(std::string_view name);
  /// Recognises a Jinja chat template's family (see above) and reads Qwen2-style default system prompts from
  /// it; a ChatML template with Qwen2.5's tool branch (its tool texts, and the default system prompt repeated in the
  /// tool branch) gets qwen25_tools. ConfigError, naming what was found, for templates outside the supported families.
  static ChatTemplate from_jinja(std::string_view source, std::string_view bos_token = "<|begin_of_text|>");
  /// Reads "chat_template" (a string, or a list of {name, template} where "default" is taken) and "bos_token"
  /// from a Hugging Face tokenizer_config.json.
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& tokenizer_config_json);
  /// Same, from tokenizer_config.json's text; `source` names it in error messages.
  static ChatTemplate from_tokenizer_config_json(std::string_view json, std::string_view source);

  /// The prompt text for `messages`, with options.tools in the system turn. Encode it with
  /// EncodeOptions::add_special_tokens = false: it already holds the special tokens (Llama 3's <|begin_of_text|>
  /// included). Throws grpo::Error for a role the format does not render (qwen3 and Qwen2.5: roles other than
  /// system, user, assistant, tool), reasoning_content outside qwen3, tools or tool_calls where the format has no
  /// tool branch (supports_tools() false), and grpo::ParseError, naming the tool or the call, for a tool schema or
  /// arguments that are not a JSON object.
  std::string render(std::span<const ChatMessage> messages, const ChatRenderOptions& options = {}) const;

  /// Whether the format renders tools, tool_calls and tool responses: qwen3, and chatml with qwen25_tools.
  bool supports_tools() const;

  /// The text the template renders between the end-of-turn token that closes an assistant message with tool calls
  /// ("<|im_end|>") and the content of the next assistant message, when the calls are answered by the tool messages
  /// `responses` (in order, one <tool_response> block each, all in one user turn):
  /// "\n<|im_start|>user\n<tool_response>\n{r}\n</tool_response>...<|im_end|>\n<|im_start|>assistant\n", plus Qwen3's
  /// "<think>\n\n</think>\n\n" when options.enable_thinking == false, as the generation prompt has it.
  /// A rollout built from pieces, render(messages up to the first user message, with the generation prompt), then per
  /// assistant message its text (what the whole render shows between "<|im_start|>assistant\n" and "<|im_end|>":
  /// content, tool calls) + "<|im_end|>" and this fragment when tool messages answer it, and a final "\n", is exactly
  /// render() of the whole conversation. One exception, Qwen3's: with enable_thinking == false its template drops the
  /// empty think block of every assistant message but the last, while the rollout has one in each turn's prompt.
  /// Throws grpo::Error when !supports_tools() and for no responses.
  std::string tool_response_fragment(std::span<const std::string> responses,
                                     const ChatRenderOptions& options = {}) const;

  /// The text of one tool call as the model family writes it inside an assistant message (Hermes / Qwen format):
  /// "<tool_call>\n{\"name\": \"NAME\", \"arguments\": ARGS}\n</tool_call>", ARGS re-serialised as transformers' tojson
  /// does (python_json_dumps). Throws grpo::Error when !supports_tools(), grpo::ParseError naming the call when
  /// arguments_json is not a JSON object.
  std::string tool_call_text(const ToolCallRequest& call) const;

  const ChatTemplateOptions& options() const { return options_; }

 private:
  ChatTemplateOptions options_;
};

/// The messages as `format` renders them inside the whole conversation, so that rendering a prefix of them gives a
/// prefix of the whole text (what an SFT target mask needs). qwen3 (Qwen3's Jinja template): an assistant message
/// before the last user query loses its reasoning (reasoning_content, or a "<think>…</think>" prefix of the
/// content). The other formats cannot render reasoning_content: it is folded into the content as
/// "<think>\n…\n</think>\n\n" (DeepSeek-R1's distilled form).
std::vector<ChatMessage> messages_in_context(std::span<const ChatMessage> messages, ChatFormat format);

/// The text that ends a turn in `format`: "<|im_end|>" (chatml, qwen3) or "<|eot_id|>" (llama3).
std::string end_of_turn(ChatFormat format);

}  // namespace grpo::text
