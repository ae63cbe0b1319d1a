// SPDX-License-Identifier: Apache-2.0
// Tool calling in the chat templates: python_json_dumps against Python's json.dumps, and ChatTemplate::render,
// tool_call_text and tool_response_fragment against the Qwen2.5 and Qwen3 Jinja templates
// (tests/text/data/tool_chat_reference.jsonl, written by tools/tokenizer-reference/tool_chat_reference.py).
#include <grpo/core/error.hpp>
#include <grpo/text/chat_template.hpp>
#include <grpo/text/python_json.hpp>
#include <grpo/text/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "reference_fixture.hpp"
#include <support/test_paths.hpp>
#include <support/skip.hpp>

using grpo::text::ChatFormat;
using grpo::text::ChatMessage;
using grpo::text::ChatRenderOptions;
using grpo::text::ChatTemplate;
using grpo::text::python_json_dumps;
using grpo::text::ToolCallRequest;
using Messages = std::vector<ChatMessage>;

namespace {

/// One line of tool_chat_reference.jsonl (see the script's docstring).
struct ToolChatCase {
  std::size_t line = 0;
  std::string name;
  std::string template_name;  // "qwen2.5" or "qwen3"
  ChatRenderOptions render;   // tools and enable_thinking
  Messages messages;
  std::size_t first_user = 0;
  std::string prefix;    // Jinja: messages up to the first user message, with the generation prompt
  std::string rendered;  // Jinja: all messages
  std::vector<int32_t> ids;
  std::string rollout;  // the rollout's text: `rendered`, or the fixture's "rollout" where they differ
  std::vector<int32_t> rollout_ids;

  std::string where() const {
    return fmt::format("tool_chat_reference.jsonl line {}: {} / {}", line, name, template_name);
  }
};

std::vector<int32_t> read_ids(simdjson::dom::array list) {
  std::vector<int32_t> ids;
  for (const simdjson::dom::element id : list) ids.push_back(static_cast<int32_t>(int64_t(id)));
  return ids;
}

std::vector<ToolChatCase> read_tool_chat_cases() {
  const auto path = grpo::text::testing::fixture_path("tool_chat_reference.jsonl");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path.string());
  std::vector<ToolChatCase> cases;
  simdjson::dom::parser parser;
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const simdjson::dom::object object = parser.parse(line);
    ToolChatCase c;
    c.line = number;
    c.name = std::string(std::string_view(object["name"]));
    c.template_name = std::string(std::string_view(object["template"]));
    bool thinking = true;
    if (!object["enable_thinking"].get(thinking)) c.render.enable_thinking = thinking;
    for (const simdjson::dom::element tool : simdjson::dom::array(object["tools"])) {
      c.render.tools.emplace_back(std::string_view(tool));
    }
    for (const simdjson::dom::element item : simdjson::dom::array(object["messages"])) {
      const simdjson::dom::object m = item;
      ChatMessage message{std::string(std::string_view(m["role"])), std::string(std::string_view(m["content"])),
                          std::nullopt};
      std::string_view reasoning;
      if (!m["reasoning_content"].get(reasoning)) message.reasoning_content = std::string(reasoning);
      simdjson::dom::array calls;
      if (!m["tool_calls"].get(calls)) {
        for (const simdjson::dom::element call : calls) {
          message.tool_calls.push_back(
              {std::string(std::string_view(call["name"])), std::string(std::string_view(call["arguments"]))});
        }
      }
      c.messages.push_back(std::move(message));
    }
    c.first_user = static_cast<std::size_t>(int64_t(object["first_user"]));
    c.prefix = std::string(std::string_view(object["prefix"]));
    c.rendered = std::string(std::string_view(object["render"]));
    c.ids = read_ids(object["ids"]);
    std::string_view rollout;
    if (!object["rollout"].get(rollout)) {
      c.rollout = std::string(rollout);
      c.rollout_ids = read_ids(object["rollout_ids"]);
    } else {
      c.rollout = c.rendered;
      c.rollout_ids = c.ids;
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

/// The real Jinja template's file: tests/data/tokenizers/qwen2.5_chat_template.jinja.
std::string qwen25_jinja() {
  std::ifstream in(std::filesystem::path(grpo::testing::test_data_dir()) / "tokenizers" / "qwen2.5_chat_template.jinja");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The chat template a fixture case was rendered with, recognised from the real template's source.
ChatTemplate chat_for(const ToolChatCase& c) {
  if (c.template_name == "qwen2.5") return ChatTemplate::from_jinja(qwen25_jinja());
  return ChatTemplate::from_tokenizer_config(std::filesystem::path(grpo::testing::test_data_dir()) / "tokenizers" / "qwen3" /
                                             "tokenizer_config.json");
}

/// What assistant message i adds between its header (generation prompt included) and its end-of-turn token, i.e.
/// what the model sampled: Qwen3's think block where the template renders one (the message has reasoning, or is the
/// last one; every assistant message of the fixture follows the last user query), unless enable_thinking == false
/// already put an empty one in the generation prompt; then the content and the tool calls, joined as the templates
/// join them.
std::string sampled_text(const ChatTemplate& chat, const Messages& messages, std::size_t i,
                         const ChatRenderOptions& render) {
  const ChatMessage& message = messages[i];
  std::string text;
  const bool has_reasoning = message.reasoning_content && !message.reasoning_content->empty();
  if (chat.options().format == ChatFormat::qwen3 && render.enable_thinking != false &&
      (has_reasoning || i + 1 == messages.size())) {
    text = "<think>\n" + message.reasoning_content.value_or("") + "\n</think>\n\n";
  }
  text += message.content;
  for (std::size_t k = 0; k < message.tool_calls.size(); ++k) {
    if (k > 0 || !message.content.empty()) text += '\n';
    text += chat.tool_call_text(message.tool_calls[k]);
  }
  return text;
}

/// A rollout of the case's conversation in the pieces a multi-turn generator makes it of: the prompt (messages up to
/// the first user message, generation prompt included), then per assistant message what it sampled + end of turn,
/// and the tool_response_fragment of the tool messages that answer it; a final "\n" (the template's, after the last
/// end of turn).
std::vector<std::string> rollout_pieces(const ChatTemplate& chat, const ToolChatCase& c) {
  ChatRenderOptions prompt_options = c.render;
  prompt_options.add_generation_prompt = true;
  std::vector<std::string> pieces{chat.render(std::span(c.messages).first(c.first_user + 1), prompt_options)};
  const std::string end_of_turn = grpo::text::end_of_turn(chat.options().format);
  std::size_t i = c.first_user + 1;
  while (i < c.messages.size()) {
    REQUIRE(c.messages[i].role == "assistant");
    pieces.push_back(sampled_text(chat, c.messages, i, c.render) + end_of_turn);
    std::vector<std::string> responses;
    std::size_t j = i + 1;
    for (; j < c.messages.size() && c.messages[j].role == "tool"; ++j) responses.push_back(c.messages[j].content);
    if (!responses.empty()) pieces.push_back(chat.tool_response_fragment(responses, c.render));
    i = j;
  }
  pieces.emplace_back("\n");
  return pieces;
}

}  // namespace

TEST_CASE("python_json_dumps writes JSON as Python's json.dumps(ensure_ascii=False) does", "[text][chat][tools]") {
  // Each expected text is Python 3.11's json.dumps(json.loads(input), ensure_ascii=False).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"json({"b":1,"a":[true,false,null],"c":{},"d":[]})json",
       R"json({"b": 1, "a": [true, false, null], "c": {}, "d": []})json"},
      {R"json("quote\" backslash\\ slash\/ nl\n cr\r tab\t bs\b ff\f c1\u0001 c1f\u001f del\u007f ls\u2028")json",
       "\"quote\\\" backslash\\\\ slash/ nl\\n cr\\r tab\\t bs\\b ff\\f c1\\u0001 c1f\\u001f del\x7f ls\u2028\""},
      {R"json({"k\u00e9y": "caf\u00e9 \u6771\u4eac \ud83d\ude00 ü 日本"})json", R"json({"kéy": "café 東京 😀 ü 日本"})json"},
      {R"json([[], [{}], {"a": [1, {"b": [2.5, "x", {"c": null}]}]}])json",
       R"json([[], [{}], {"a": [1, {"b": [2.5, "x", {"c": null}]}]}])json"},
      {R"json([1.0, 0.1, 1e-07, 1E-7, 1e+16, 1e16, 1e15, -0.0, 0.0001, 0.00001, 2.5e-3, 1.5E+300, )json"
       R"json(123456789.123456789, 0.30000000000000004, 1e400, -1e400, 1e-400])json",
       R"json([1.0, 0.1, 1e-07, 1e-07, 1e+16, 1e+16, 1000000000000000.0, -0.0, 0.0001, 1e-05, 0.0025, 1.5e+300, )json"
       R"json(123456789.12345679, 0.30000000000000004, Infinity, -Infinity, 0.0])json"},
      {R"json([0, -0, -1, 9007199254740993, 18446744073709551616, -123456789012345678901234567890])json",
       R"json([0, 0, -1, 9007199254740993, 18446744073709551616, -123456789012345678901234567890])json"},
      {R"json({"a": 1, "b": 2, "a": {"x": 3}})json", R"json({"a": {"x": 3}, "b": 2})json"},
      {" \n\t{ \"x\" : [ 1 , 2 ] ,\"y\":\"z\" }\r\n ", R"json({"x": [1, 2], "y": "z"})json"},
      {R"json("s")json", R"json("s")json"},
      {"true", "true"},
      {"null", "null"},
      {"42", "42"},
      {"3.0", "3.0"},
      {"-0", "0"},
      {"1E2", "100.0"},
  };
  for (const auto& [input, expected] : cases) {
    INFO(input);
    CHECK(python_json_dumps(input, "test") == expected);
  }
  // Not JSON (Python's json.loads raises on each too, or, for a lone surrogate, makes a string that is not UTF-8).
  for (const std::string_view bad : {"", "{", R"({"a":1,})", "[1 2]", "[1,]", "01", "1.", ".5", "+1", R"({"a"})", "tru",
                                     "NaN", "[1] x", "1 2", R"("\ud800")", R"("a)", "{} {}"}) {
    INFO(bad);
    CHECK_THROWS_AS(python_json_dumps(bad, "test"), grpo::ParseError);
  }
  CHECK_THROWS_WITH(python_json_dumps("[1,", "tools[2]"), Catch::Contains("tools[2]: invalid JSON"));
  // json.dumps("Sé \"q\"\\\n\x01", ensure_ascii=False)
  CHECK(grpo::text::python_json_string("S\u00e9 \"q\"\\\n\x01") == R"("Sé \"q\"\\\n\u0001")");
}

TEST_CASE("tool chat: ChatTemplate::render matches the Qwen2.5 and Qwen3 Jinja templates", "[text][chat][tools]") {
  const auto cases = read_tool_chat_cases();
  REQUIRE(cases.size() >= 15);
  for (const auto& c : cases) {
    INFO(c.where());
    const ChatTemplate chat = chat_for(c);
    REQUIRE(chat.supports_tools());
    CHECK(chat.render(c.messages, c.render) == c.rendered);
    ChatRenderOptions prompt_options = c.render;
    prompt_options.add_generation_prompt = true;
    CHECK(chat.render(std::span(c.messages).first(c.first_user + 1), prompt_options) == c.prefix);
  }
}

TEST_CASE("tool chat: a rollout made of the prompt, sampled turns and tool_response_fragment is the whole render",
          "[text][chat][tools]") {
  for (const auto& c : read_tool_chat_cases()) {
    INFO(c.where());
    const ChatTemplate chat = chat_for(c);
    std::string joined;
    for (const auto& piece : rollout_pieces(chat, c)) joined += piece;
    CHECK(joined == c.rollout);
    if (c.render.enable_thinking == false) {
      // Qwen3's template drops the empty think block of earlier assistant turns; the rollout keeps them.
      CHECK(c.rollout != c.rendered);
    } else {
      CHECK(c.rollout == c.rendered);
    }
  }
}

TEST_CASE("tool chat: the rollout pieces encoded one by one give the whole render's ids on the real Qwen3 tokenizer",
          "[text][chat][tools][needs-tokenizer]") {
  const grpo::text::Tokenizer* tok = grpo::text::testing::shared_tokenizer("qwen3");
  if (tok == nullptr) GRPO_SKIP(grpo::text::testing::missing_tokenizer("qwen3"));
  for (const auto& c : read_tool_chat_cases()) {
    INFO(c.where());
    const ChatTemplate chat = chat_for(c);
    CHECK(tok->encode(c.rendered, {.add_special_tokens = false}) == c.ids);
    std::vector<int32_t> ids;
    for (const auto& piece : rollout_pieces(chat, c)) {
      const auto piece_ids = tok->encode(piece, {.add_special_tokens = false});
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    }
    CHECK(ids == c.rollout_ids);
  }
}

TEST_CASE("tool chat: the real Qwen2.5 template is chatml with its default system prompt and tool branch",
          "[text][chat][tools]") {
  const auto from_file = ChatTemplate::from_jinja(qwen25_jinja());
  const auto named = ChatTemplate::from_name("qwen2.5");
  CHECK(from_file.options().format == ChatFormat::chatml);
  CHECK(from_file.options().default_system_prompt ==
        "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  CHECK(from_file.options().qwen25_tools);
  CHECK(named.options().default_system_prompt == from_file.options().default_system_prompt);
  CHECK(named.options().qwen25_tools);
  // Qwen2's template and plain ChatML have no tool branch; neither does Llama 3 here.
  CHECK_FALSE(ChatTemplate::from_name("qwen2").supports_tools());
  CHECK_FALSE(ChatTemplate::from_name("chatml").supports_tools());
  CHECK_FALSE(ChatTemplate::from_name("llama3").supports_tools());
  CHECK(ChatTemplate::from_name("qwen3").supports_tools());
  // Without Qwen2.5's tool branch a tool message is one more ChatML role, as Qwen2's template renders it.
  CHECK(ChatTemplate::from_name("qwen2").render(Messages{{"tool", "r", std::nullopt}}) ==
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>tool\nr<|im_end|>\n");
  // Qwen2.5 without tools: tool messages are still <tool_response> blocks of a user turn.
  const Messages answered{{"user", "q", std::nullopt}, {"tool", "r1", std::nullopt}, {"tool", "r2", std::nullopt}};
  CHECK(named.render(answered) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n"
        "</tool_response><|im_end|>\n");
}

TEST_CASE("tool chat: tool_call_text, tool_response_fragment and their errors", "[text][chat][tools]") {
  const auto qwen3 = ChatTemplate::from_name("qwen3");
  const auto qwen25 = ChatTemplate::from_name("qwen2.5");
  const ToolCallRequest call{"calculator", R"({"expression":"2+3","x":1E0})"};
  CHECK(qwen3.tool_call_text(call) ==
        "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2+3\", \"x\": 1.0}}\n</tool_call>");
  CHECK(qwen25.tool_call_text(call) == qwen3.tool_call_text(call));
  const std::vector<std::string> responses{"5", "Error: no such tool"};
  const std::string fragment =
      "\n<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\nError: no such tool\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n";
  CHECK(qwen25.tool_response_fragment(responses) == fragment);
  CHECK(qwen3.tool_response_fragment(responses) == fragment);
  ChatRenderOptions no_thinking;
  no_thinking.enable_thinking = false;
  CHECK(qwen3.tool_response_fragment(responses, no_thinking) == fragment + "<think>\n\n</think>\n\n");
  CHECK(qwen25.tool_response_fragment(responses, no_thinking) == fragment);  // Qwen2.5 has no thinking switch

  using Catch::Contains;
  CHECK_THROWS_AS(ChatTemplate::from_name("llama3").tool_response_fragment(responses), grpo::Error);
  CHECK_THROWS_AS(ChatTemplate::from_name("qwen2").tool_response_fragment(responses), grpo::Error);
  CHECK_THROWS_AS(ChatTemplate::from_name("llama3").tool_call_text(call), grpo::Error);
  CHECK_THROWS_WITH(qwen3.tool_response_fragment({}), Contains("no tool responses"));
  // Invalid JSON names the call or the tool.
  CHECK_THROWS_WITH(qwen3.tool_call_text({"calculator", R"({"expression": )"}),
                    Contains("tool call 'calculator' arguments: invalid JSON"));
  CHECK_THROWS_WITH(qwen3.tool_call_text({"calculator", R"(["2+3"])"}),
                    Contains("tool call 'calculator' arguments: should be a JSON object"));
  Messages messages{{"user", "q", std::nullopt}, {"assistant", "", std::nullopt, {{"search", "{\"query\": }"}}}};
  CHECK_THROWS_WITH(qwen25.render(messages), Contains("chat message 1 tool_calls[0] ('search') arguments"));
  ChatRenderOptions tools;
  tools.tools = {R"({"type": "function", "function": {"name": "calculator"}})", R"({"type": "function",)"};
  CHECK_THROWS_WITH(qwen3.render(Messages{{"user", "q", std::nullopt}}, tools),
                    Contains("ChatRenderOptions.tools[1]: invalid JSON"));
  // Formats without a tool branch refuse tools and tool calls rather than render them differently.
  messages[1].tool_calls[0].arguments_json = "{}";
  CHECK_THROWS_WITH(ChatTemplate::from_name("qwen2").render(messages), Contains("tool_calls"));
  CHECK_THROWS_WITH(ChatTemplate::from_name("llama3").render(Messages{{"user", "q", std::nullopt}}, tools),
                    Contains("no tool branch"));
  CHECK_THROWS_WITH(qwen3.render(Messages{{"user", "q", std::nullopt, {{"search", "{}"}}}}),
                    Contains("only assistant messages"));
  CHECK_THROWS_WITH(qwen25.render(Messages{{"narrator", "x", std::nullopt}}), Contains("narrator"));
}
