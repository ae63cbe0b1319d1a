// SPDX-License-Identifier: Apache-2.0
// The token side of a multi-turn conversation: finding the tool calls in a sampled turn's ids, and the ids of the text
// that answers them. Sampled ids are never decoded and re-encoded into the rollout (BPE is not a bijection: TRL
// #5224); only the reply fragment is encoded, once, exactly as the full chat template renders it, the "\n" after the
// assistant's end-of-turn token and the next assistant header included (verl #6501).
#pragma once

#include <grpo/agent/tool_call_format.hpp>
#include <grpo/text/chat_template.hpp>
#include <grpo/text/tokenizer.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace grpo::agent {

class TurnCodec {
 public:
  virtual ~TurnCodec() = default;
  /// A sampled assistant turn's ids (its end-of-turn token included) as text, for tool-call parsing, rewards and logs.
  virtual std::string turn_text(std::span<const std::int64_t> turn_ids) const = 0;
  /// The tool-call blocks of a turn's text (none: the turn is an answer).
  virtual std::vector<ParsedToolCall> parse_calls(const std::string& turn_text) const = 0;
  /// The ids that follow a turn whose calls got `replies` (one per call, in order), up to and including the header of
  /// the next assistant turn: what generation resumes after. Not empty.
  virtual std::vector<std::int64_t> reply_ids(std::span<const std::string> replies) const = 0;
  /// `reply` cut to at most `max_tokens` tokens of its own, with a note saying it was cut (unchanged when it fits).
  virtual std::string cap_reply(const std::string& reply, std::int64_t max_tokens) const = 0;
};

/// A TurnCodec for a Hugging Face tokenizer and chat template (chatml / Qwen2.5, qwen3): tool calls in the template's
/// format (tool_call_format_for), replies rendered by ChatTemplate::tool_response_fragment with `render` (Qwen3's
/// enable_thinking).
class ChatTurnCodec final : public TurnCodec {
 public:
  /// Throws ConfigError for a chat format without tool support.
  ChatTurnCodec(text::Tokenizer tokenizer, text::ChatTemplate chat_template, text::ChatRenderOptions render = {});

  std::string turn_text(std::span<const std::int64_t> turn_ids) const override;
  std::vector<ParsedToolCall> parse_calls(const std::string& turn_text) const override;
  std::vector<std::int64_t> reply_ids(std::span<const std::string> replies) const override;
  std::string cap_reply(const std::string& reply, std::int64_t max_tokens) const override;

 private:
  text::Tokenizer tokenizer_;
  text::ChatTemplate template_;
  text::ChatRenderOptions render_;
  std::shared_ptr<const ToolCallFormat> calls_;
};

}  // namespace grpo::agent
