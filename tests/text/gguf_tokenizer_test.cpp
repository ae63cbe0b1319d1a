// SPDX-License-Identifier: Apache-2.0
// Tokenizers from GGUF metadata against transformers' GGUF tokenizer (with llama.cpp's pre-tokenizer where the two
// differ): tests/data/gguf/tokenizer_*.gguf and tokenizer_expected.json (tools/gguf-reference/make_fixtures.py).
#include <grpo/core/error.hpp>
#include <grpo/io/gguf.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/text/gguf_tokenizer.hpp>
#include <grpo/text/tokenizer.hpp>
#include <support/test_paths.hpp>

#include "support/gguf_testing.hpp"

#include <catch2/catch.hpp>
#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace grpo;

namespace {

const fs::path kDir = fs::path(grpo::testing::test_data_dir()) / "gguf";

std::vector<int32_t> int_list(simdjson::dom::array array) {
  std::vector<int32_t> out;
  for (const auto value : array) out.push_back(static_cast<int32_t>(int64_t(value)));
  return out;
}

std::string tokenizer_error(const std::string& file, const std::string& from, const std::string& to) {
  return testing::patched_error(kDir / file, from, to,
                                [](const fs::path& path) { text::Tokenizer::from_pretrained(path); });
}

}  // namespace

TEST_CASE("GGUF tokenizers give transformers' ids on a varied corpus, for each pre-tokenizer", "[text][gguf]") {
  simdjson::dom::parser parser;
  const simdjson::padded_string json(io::read_file(kDir / "tokenizer_expected.json"));
  const simdjson::dom::element expected = parser.parse(json);
  std::vector<std::string> texts;
  for (const auto text : expected["texts"].get_array()) texts.emplace_back(std::string_view(text));
  REQUIRE(texts.size() > 250);
  int files = 0;
  for (const auto [name, entry] : expected["files"].get_object()) {
    const std::string file(name);
    INFO(file);
    ++files;
    const text::Tokenizer tokenizer = text::Tokenizer::from_pretrained(kDir / file);
    std::size_t index = 0;
    std::size_t tokens = 0;
    const simdjson::dom::array decoded = entry["decoded"].get_array();
    for (const auto ids : entry["ids"].get_array()) {
      INFO("text " << index << ": " << texts[index]);
      const std::vector<int32_t> want = int_list(ids.get_array());
      CHECK(tokenizer.encode(texts[index]) == want);
      CHECK(tokenizer.decode(want) == std::string_view(decoded.at(index)));
      tokens += want.size();
      ++index;
    }
    CHECK(index == texts.size());
    CHECK(tokens > 10000);
    const text::SpecialTokenIds& special = tokenizer.special_token_ids();
    CHECK(special.bos == int64_t(entry["bos"]));
    CHECK(special.eos == int64_t(entry["eos"]));
    CHECK(special.pad == int64_t(entry["pad"]));
    CHECK(tokenizer.is_special(2));               // <|im_end|>: a control token
    CHECK_FALSE(tokenizer.is_special(tokenizer.vocab_size() - 1));  // </think>: user-defined, matched but not special
    simdjson::dom::array chat;
    if (entry["chat_ids"].get_array().get(chat) == simdjson::SUCCESS) {
      const std::vector<text::ChatMessage> messages{{"user", "What is 2+3?", std::nullopt}};
      CHECK(tokenizer.encode_chat(messages, {.add_generation_prompt = true}) == int_list(chat));
    } else {
      CHECK_THROWS_WITH(tokenizer.chat_template(), Catch::Contains("no chat template"));
    }
  }
  CHECK(files == 4);
}

TEST_CASE("GGUF tokenizer metadata as tokenizer.json and tokenizer_config.json", "[text][gguf]") {
  const io::GgufFile file(kDir / "tokenizer_smollm.gguf");
  const text::HfTokenizerJson json = text::gguf_tokenizer_json(file);
  CHECK_THAT(json.tokenizer, Catch::Contains(R"({"type":"Digits","individual_digits":true})"));
  CHECK_THAT(json.tokenizer_config, Catch::Contains(R"("eos_token":"<|im_end|>")"));
  CHECK_THAT(json.tokenizer_config, Catch::Contains(R"("chat_template":"{% for message in messages %})"));
  // Read back through the text entry point, it is the same tokenizer.
  const text::Tokenizer direct = text::gguf_tokenizer(file);
  const text::Tokenizer from_text = text::Tokenizer::from_json(json.tokenizer, json.tokenizer_config, "smollm");
  const std::string text = "Digits 2024 and\tspaces  7, <|im_start|>";
  CHECK(from_text.encode(text) == direct.encode(text));
  // The bytes the vocabulary has no token for are dropped, as Hugging Face's BPE and llama.cpp drop them.
  CHECK(direct.decode(direct.encode("x\x04y")) == "xy");
  // Llama 3's pre-tokenizer brings ignore_merges and the bos the file asks to add.
  const text::HfTokenizerJson llama = text::gguf_tokenizer_json(io::GgufFile(kDir / "tokenizer_llama-bpe.gguf"));
  CHECK_THAT(llama.tokenizer, Catch::Contains(R"("ignore_merges":true)"));
  CHECK_THAT(llama.tokenizer, Catch::Contains(R"("type":"TemplateProcessing")"));
}

TEST_CASE("GGUF tokenizer errors name the file and the key", "[text][gguf]") {
  // tokenizer.ggml.pre's value: a u64 length 6, then the bytes.
  CHECK_THAT(tokenizer_error("tokenizer_smollm.gguf", std::string("\x06\0\0\0\0\0\0\0smollm", 14),
                             std::string("\x06\0\0\0\0\0\0\0tekken", 14)),
             Catch::Contains("tokenizer.ggml.pre 'tekken' is not a pre-tokenizer this library reproduces (supported: "
                             "gpt2, mpt, olmo, smollm"));
  CHECK_THAT(tokenizer_error("tokenizer_qwen2.gguf", std::string("\x04\0\0\0\0\0\0\0gpt2", 12),
                             std::string("\x04\0\0\0\0\0\0\0bert", 12)),
             Catch::Contains("tokenizer.ggml.model 'bert' is not supported"));
  CHECK_THAT(tokenizer_error("tokenizer_gpt2.gguf", "tokenizer.ggml.merges", "tokenizer.ggml.mergez"),
             Catch::Contains("tokenizer.ggml.merges is missing"));
  // tokenizer.ggml.eos_token_id: type 4 (uint32), then the value.
  const std::string eos_key = "tokenizer.ggml.eos_token_id";
  CHECK_THAT(tokenizer_error("tokenizer_gpt2.gguf", eos_key + std::string("\x04\0\0\0\x02\0\0\0", 8),
                             eos_key + std::string("\x04\0\0\0\x10\x27\0\0", 8)),
             Catch::Contains("tokenizer.ggml.eos_token_id = 10000 is outside the vocabulary of 1202 tokens"));
}
