// SPDX-License-Identifier: Apache-2.0
#include <grpo/agent/turn_codec.hpp>
#include <grpo/core/error.hpp>

namespace grpo::agent {

ChatTurnCodec::ChatTurnCodec(text::Tokenizer tokenizer, text::ChatTemplate chat_template, text::ChatRenderOptions render)
    : tokenizer_(std::move(tokenizer)),
      template_(std::move(chat_template)),
      render_(std::move(render)),
      calls_(tool_call_format_for(template_.options().format)) {
  render_.add_generation_prompt = false;
  GRPO_CHECK_CONFIG(template_.supports_tools(),
                    "multi-turn tool rollouts: this chat template renders no tools (Qwen2.5 and Qwen3 templates do)");
}

std::string ChatTurnCodec::turn_text(std::span<const std::int64_t> turn_ids) const {
  const std::vector<std::int32_t> ids(turn_ids.begin(), turn_ids.end());
  return tokenizer_.decode(ids, {.skip_special_tokens = false, .skip_unknown_ids = true});
}

std::vector<ParsedToolCall> ChatTurnCodec::parse_calls(const std::string& turn_text) const {
  return calls_->parse(turn_text);
}

std::vector<std::int64_t> ChatTurnCodec::reply_ids(std::span<const std::string> replies) const {
  const auto ids = tokenizer_.encode(template_.tool_response_fragment(replies, render_), {.add_special_tokens = false});
  return {ids.begin(), ids.end()};
}

std::string ChatTurnCodec::cap_reply(const std::string& reply, std::int64_t max_tokens) const {
  GRPO_CHECK_CONFIG(max_tokens >= 1, "max tool reply tokens must be >= 1, got {}", max_tokens);
  const auto ids = tokenizer_.encode(reply, {.add_special_tokens = false, .split_special_tokens = true});
  if (static_cast<std::int64_t>(ids.size()) <= max_tokens) return reply;
  const std::span<const std::int32_t> kept(ids.data(), static_cast<std::size_t>(max_tokens));
  return tokenizer_.decode(kept) + "\n[output truncated]";
}

}  // namespace grpo::agent
