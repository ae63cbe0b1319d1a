// SPDX-License-Identifier: Apache-2.0
// How a model family writes tool calls in its assistant turns, and how they are read back out of the sampled text.
// Reading only: the sampled ids themselves are kept as they are (token-in/token-out), the text is decoded to find
// the calls. Qwen2.5, Qwen3 and the Hermes models write
//   <tool_call>
//   {"name": "calculator", "arguments": {"expression": "12*7"}}
//   </tool_call>
// one block per call (parallel calls: several blocks in one turn). Another family is another ToolCallFormat.
#pragma once

#include <grpo/agent/tool.hpp>
#include <grpo/text/chat_template.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::agent {

/// One call block of a turn: the call, or why the block could not be read (bad JSON, no name, a block that the
/// token budget cut off), which the model is told as the block's reply.
struct ParsedToolCall {
  std::optional<ToolCall> call;
  std::string error;
};

class ToolCallFormat {
 public:
  virtual ~ToolCallFormat() = default;
  /// The call blocks of one sampled assistant turn's text, in order (none: the turn is an answer).
  virtual std::vector<ParsedToolCall> parse(std::string_view turn_text) const = 0;
};

/// <tool_call>{"name": …, "arguments": {…}}</tool_call> blocks (Qwen2.5, Qwen3, Hermes). "arguments" may be an
/// object or a string holding one (some fine-tunes write that); missing arguments are {}. A "<tool_call>" without its
/// "</tool_call>" is a malformed block.
class HermesToolCalls final : public ToolCallFormat {
 public:
  std::vector<ParsedToolCall> parse(std::string_view turn_text) const override;
};

/// The tool-call format of a chat format: HermesToolCalls for chatml (Qwen2.5) and qwen3. ConfigError for formats
/// whose chat template renders no tools (llama3).
std::shared_ptr<const ToolCallFormat> tool_call_format_for(text::ChatFormat format);

}  // namespace grpo::agent
