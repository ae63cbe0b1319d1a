// SPDX-License-Identifier: Apache-2.0
// Chat templates: renders system / user / assistant messages into the prompt text a model was trained on.
//
// This is not a Jinja engine. The formats below are written out in C++, each reproducing its model family's
// Jinja template character for character for the messages it supports (checked against the templates rendered
// by Hugging Face's @huggingface/jinja in tests/text/data). from_jinja recognises the family from a template's
// source; anything it does not recognise is a ConfigError rather than a silently different prompt.
//   chatml  Qwen2 / Qwen2.5 / plain ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per message, and
//           "<|im_start|>assistant\n" as generation prompt. When the first message is not a system message,
//           default_system_prompt (if not empty) is rendered as one: Qwen2's "You are a helpful assistant.",
//           Qwen2.5's "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.".
//   qwen3   Qwen3: ChatML plus its reasoning rules. An assistant message after the last user query keeps its
//           reasoning as "<think>\n{reasoning}\n</think>\n\n" (from reasoning_content, or split off a "<think>...
//           </think>" prefix of the content); earlier assistant messages lose it. Consecutive "tool" messages
//           become one user turn of <tool_response> blocks. enable_thinking = false appends an empty think block
//           to the generation prompt.
//   llama3  Llama 3 / 3.1 / 3.2 without the date header: bos_token, then per message
//           "<|start_header_id|>{role}<|end_header_id|>\n\n{content stripped}<|eot_id|>"; generation prompt
//           "<|start_header_id|>assistant<|end_header_id|>\n\n".
// Not supported: tools and tool_calls (the templates' function-calling branches), Llama 3.1's "Cutting Knowledge
// Date" system header, arbitrary Jinja templates.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::text {

struct ChatMessage {
  std::string role;  ///< "system", "user", "assistant" or "tool"
  std::string content;
  /// Qwen3: the assistant's reasoning, rendered inside <think> when the message follows the last user query.
  std::optional<std::string> reasoning_content;
};

enum class ChatFormat { chatml, qwen3, llama3 };

struct ChatTemplateOptions {
  ChatFormat format = ChatFormat::chatml;
  /// chatml: system message rendered when the conversation does not start with one; empty for none.
  std::string default_system_prompt;
  /// llama3: text put before the first message.
  std::string bos_token = "<|begin_of_text|>";
};

struct ChatRenderOptions {
  /// Append the header of an assistant turn, so that generation continues as the assistant.
  bool add_generation_prompt = false;
  /// qwen3: false appends "<think>\n\n</think>\n\n" to the generation prompt (no reasoning); unset or true
  /// leaves the model to think.
  std::optional<bool> enable_thinking;
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateOptions options);

  /// "chatml" (no default system prompt), "qwen2", "qwen2.5", "qwen3", "llama3". ConfigError for other names.
  static ChatTemplate from_name(std::string_view name);
  /// Recognises a Jinja chat template's family (see above) and reads Qwen2-style default system prompts from
  /// it. ConfigError, naming what was found, for templates outside the supported families.
  static ChatTemplate from_jinja(std::string_view source, std::string_view bos_token = "<|begin_of_text|>");
  /// Reads "chat_template" (a string, or a list of {name, template} where "default" is taken) and "bos_token"
  /// from a Hugging Face tokenizer_config.json.
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& tokenizer_config_json);
  /// Same, from tokenizer_config.json's text; `source` names it in error messages.
  static ChatTemplate from_tokenizer_config_json(std::string_view json, std::string_view source);

  /// The prompt text for `messages`. Encode it with EncodeOptions::add_special_tokens = false: it already holds
  /// the special tokens (Llama 3's <|begin_of_text|> included). Throws grpo::Error for a role the format does
  /// not render (qwen3: roles other than system, user, assistant, tool) or reasoning_content outside qwen3.
  std::string render(std::span<const ChatMessage> messages, const ChatRenderOptions& options = {}) const;

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
