// SPDX-License-Identifier: Apache-2.0
// The one reader of chat messages in JSON, shared by the data sets (io/dataset.hpp), the SFT reader (train/sft.hpp)
// and the command-line tool: [{"role": ..., "content": ..., "reasoning_content": ...}, ...].
#pragma once

#include <grpo/text/chat_template.hpp>

#include <string_view>
#include <vector>

namespace grpo::text {

/// The messages of a JSON list, in order: each an object with string "role" and "content" and an optional string
/// "reasoning_content" (null = absent); other keys are ignored. An empty list gives no messages (callers decide
/// whether that is an error). Throws grpo::ParseError naming the place in `field`'s terms: "field 'messages' should be
/// a JSON list of messages", "missing field 'messages[1].role'", "field 'messages[0].content' should be a string".
std::vector<ChatMessage> parse_chat_messages(std::string_view json, std::string_view field = "messages");

}  // namespace grpo::text
