// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/text/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "reference_fixture.hpp"
#include "support/tokenizer_testing.hpp"
#include <support/skip.hpp>

using grpo::text::DecodeOptions;
using grpo::text::EncodeOptions;
using grpo::text::InvalidUtf8;
using grpo::text::Tokenizer;
using Ids = std::vector<int32_t>;
using grpo::testing::byte_spelling;

namespace {

/// GPT-2's byte-to-character table written out from its definition: printable Latin-1 bytes (! .. ~, ¡ .. ¬,
/// ® .. ÿ) are themselves; the remaining bytes, in increasing order, become U+0100, U+0101, ...
struct TinyOptions {
  std::string normalizer = "null";
  std::string pre_tokenizer = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  std::string post_processor = "null";
  bool ignore_merges = false;
};

/// A tokenizer.json small enough to check by hand. Ids 0..255 are the bytes themselves (id = byte value);
/// merges, in rank order:
///   0: h e -> he (256)   1: l l -> ll (257)   2: he ll -> hell (258)   3: Ġ w -> Ġw (259)
///   4: hell o -> hello (260)   5: e l -> el (261)
/// Added tokens: <|end|> (262, special), <x> (263, not special, lstrip + rstrip), <|bos|> (264, special, matched
/// after normalization), ab (265, single_word).
std::string tiny_tokenizer_json(const TinyOptions& options = {}) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) vocab += grpo::json_quoted(byte_spelling(b)) + fmt::format(": {}, ", b);
  vocab += R"("he": 256, "ll": 257, "hell": 258, "Ġw": 259, "hello": 260, "el": 261)";
  return fmt::format(R"({{
  "version": "1.0",
  "added_tokens": [
    {{"id": 262, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}},
    {{"id": 263, "content": "<x>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": false}},
    {{"id": 264, "content": "<|bos|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": true}},
    {{"id": 265, "content": "ab", "single_word": true, "lstrip": false, "rstrip": false, "normalized": false, "special": false}}
  ],
  "normalizer": {},
  "pre_tokenizer": {},
  "post_processor": {},
  "decoder": {{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}},
  "model": {{"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
    "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": {},
    "vocab": {{{}}},
    "merges": [["h", "e"], "l l", ["he", "ll"], ["Ġ", "w"], ["hell", "o"], ["e", "l"]]}}
}})",
                     options.normalizer, options.pre_tokenizer, options.post_processor, options.ignore_merges, vocab);
}

Ids bytes_of(std::string_view text) {
  Ids ids;
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string hex(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

}  // namespace

TEST_CASE("tiny tokenizer: merges by rank, leftmost first", "[text][tokenizer]") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer_json());
  // h e l l o: (h,e) rank 0 -> he; (l,l) rank 1 -> ll; (he,ll) rank 2 -> hell; (hell,o) rank 4 -> hello.
  CHECK(tok.encode("hello") == Ids{260});
  // Two occurrences in one piece both merge: [hello, hello].
  CHECK(tok.encode("hellohello") == Ids{260, 260});
  // e l l: the leftmost pair (e,l) has rank 5, (l,l) rank 1 wins: [e, ll] = [101, 257].
  CHECK(tok.encode("ell") == Ids{101, 257});
  // l l l: (l,l) at positions 0 and 1 have the same rank; the leftmost merges: [ll, l].
  CHECK(tok.encode("lll") == Ids{257, 108});
  // GPT-2 split: "hello" | " world". " world" = Ġ w o r l d: (Ġ,w) rank 3 -> [Ġw, o, r, l, d].
  CHECK(tok.encode("hello world") == Ids{260, 259, 'o', 'r', 'l', 'd'});
  // "he's": "he" | "'s" (contraction alternative); "he" merges, "'s" has no merge.
  CHECK(tok.encode("he's") == Ids{256, '\'', 's'});
  CHECK(tok.encode("").empty());
  // Multi-byte characters are byte sequences: é = C3 A9.
  CHECK(tok.encode("\xC3\xA9") == Ids{0xC3, 0xA9});
  CHECK(tok.vocab_size() == 266);
  CHECK(tok.token_to_id("Ġw") == 259);
  CHECK(tok.token_to_id("<|end|>") == 262);
  CHECK_FALSE(tok.token_to_id("nope").has_value());
  CHECK(tok.id_to_token(32) == "Ġ");  // space (0x20) is the 33rd non-printable byte: U+0100 + 32
  CHECK(tok.id_to_token(260) == "hello");
}

TEST_CASE("tiny tokenizer: GPT-2 split pattern pieces", "[text][tokenizer]") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer_json());
  // "a  b": "a" | " " (\s+(?!\S) leaves the last space to the word) | " b".
  CHECK(tok.encode("a  b") == Ids{'a', ' ', ' ', 'b'});
  // Digits and punctuation are separate pieces with an optional leading space; no merges apply.
  CHECK(tok.encode("x 12!?") == bytes_of("x 12!?"));
}

TEST_CASE("tiny tokenizer: added tokens are matched before splitting", "[text][tokenizer]") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer_json());
  // "hello<|end|>hello" -> hello, <|end|>, hello.
  CHECK(tok.encode("hello<|end|>hello") == Ids{260, 262, 260});
  // A token marked normalized is matched too when there is no normalizer (GPT-2's <|endoftext|> is such a one).
  CHECK(tok.encode("hello<|bos|>") == Ids{260, 264});
  // single_word: "ab" is a token only with no word character (Rust regex \w: letters, marks, digits, '_') on
  // either side. Kept: at the start and after a space. Skipped: after 'c', before '_', after 'é'. The gaps split as
  // GPT-2 does (" cab", " ab", "_", " ") and have no merges, so they stay bytes.
  CHECK(tok.encode("ab cab ab_ ab") == Ids{265, ' ', 'c', 'a', 'b', ' ', 'a', 'b', '_', ' ', 265});
  CHECK(tok.encode(std::string("\xC3\xA9") + "ab") == Ids{0xC3, 0xA9, 'a', 'b'});
  // Partial special tokens are plain text.
  CHECK(tok.encode("<|end") == bytes_of("<|end"));
  // <x> has lstrip and rstrip: it swallows the spaces around it, so "hello" keeps no Ġ before "hello".
  CHECK(tok.encode("hello  <x>  hello") == Ids{260, 263, 260});
  // split_special_tokens: <|end|> is text, the non-special <x> is still a token.
  EncodeOptions split;
  split.split_special_tokens = true;
  CHECK(tok.encode("<|end|><x>", split) == Ids{'<', '|', 'e', 'n', 'd', '|', '>', 263});
  CHECK(tok.is_special(262));
  CHECK_FALSE(tok.is_special(263));
  CHECK_FALSE(tok.is_special(260));
  REQUIRE(tok.added_tokens().size() == 4);
  CHECK(tok.added_tokens()[1].content == "<x>");
  CHECK(tok.added_tokens()[1].lstrip);
}

TEST_CASE("tiny tokenizer: NFC normalizer, Split pre-tokenizer, ignore_merges and BOS template", "[text][tokenizer]") {
  TinyOptions options;
  options.normalizer = R"({"type": "Sequence", "normalizers": [{"type": "NFC"}]})";
  options.pre_tokenizer = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}| ?\\p{L}+|\\s+|."}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  options.post_processor = R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [264], "tokens": ["<|bos|>"]}}})";
  const auto tok = Tokenizer::from_json(tiny_tokenizer_json(options));
  // e + U+0301 (combining acute) composes to U+00E9 = C3 A9 under NFC.
  CHECK(tok.encode("e\xCC\x81") == Ids{264, 0xC3, 0xA9});
  EncodeOptions no_bos;
  no_bos.add_special_tokens = false;
  // \p{N}{1,3} groups digits by three: "12345" -> "123" | "45".
  CHECK(tok.encode("12345", no_bos) == bytes_of("12345"));
  // Split "ell" is one piece; without ignore_merges it merges to [e, ll].
  CHECK(tok.encode("ell", no_bos) == Ids{101, 257});

  options.ignore_merges = true;
  const auto direct = Tokenizer::from_json(tiny_tokenizer_json(options));
  // "el" is in the vocabulary: ignore_merges emits it whole (id 261) ...
  CHECK(direct.encode("el", no_bos) == Ids{261});
  // ... while "ell" is not, so the merges run as before.
  CHECK(direct.encode("ell", no_bos) == Ids{101, 257});
}

TEST_CASE("tiny tokenizer: decode", "[text][tokenizer]") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer_json());
  CHECK(tok.decode(Ids{260, 259, 'o', 'r', 'l', 'd'}) == "hello world");
  CHECK(tok.decode(Ids{260, 262, 263}) == "hello<|end|><x>");
  DecodeOptions skip;
  skip.skip_special_tokens = true;
  // Only special tokens are skipped; <x> is an added token but not special.
  CHECK(tok.decode(Ids{260, 262, 263}, skip) == "hello<x>");
  // A character cut between tokens: C3 alone is invalid and becomes U+FFFD in decode, stays raw in decode_bytes.
  CHECK(tok.decode(Ids{0xC3}) == "\xEF\xBF\xBD");
  CHECK(tok.decode_bytes(Ids{0xC3}) == "\xC3");
  CHECK(tok.decode(Ids{0xC3, 0xA9}) == "\xC3\xA9");
  CHECK_THROWS_AS(tok.decode(Ids{266}), grpo::Error);
  CHECK_THROWS_AS(tok.decode(Ids{-1}), grpo::Error);
  // Model output may hold ids past the vocabulary (a padded embedding): dropped on request, as Hugging Face does.
  CHECK(tok.decode(Ids{260, 266, 259, -1, 'o', 'r', 'l', 'd'}, {.skip_unknown_ids = true}) == "hello world");
  CHECK_THROWS_WITH(tok.id_to_token(1000), Catch::Contains("1000"));
  const std::vector<Ids> batch{{260}, {259}};
  CHECK(tok.decode_batch(batch) == std::vector<std::string>{"hello", " w"});
}

TEST_CASE("tiny tokenizer: invalid UTF-8 is replaced or rejected, never a crash", "[text][tokenizer]") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer_json());
  // U+FFFD is EF BF BD. "h\xFFe": FF -> U+FFFD; "\xE4\xBD" (a 3-byte lead cut short) is one maximal subpart.
  CHECK(tok.encode(std::string("h\xFF") + "e") == Ids{'h', 0xEF, 0xBF, 0xBD, 'e'});
  CHECK(tok.encode("\xE4\xBD") == Ids{0xEF, 0xBF, 0xBD});
  // C0 AF (overlong '/') is two invalid bytes: two replacements.
  CHECK(tok.encode("\xC0\xAF") == Ids{0xEF, 0xBF, 0xBD, 0xEF, 0xBF, 0xBD});
  EncodeOptions strict;
  strict.invalid_utf8 = InvalidUtf8::error;
  CHECK_THROWS_WITH(tok.encode("ok\xED\xA0\x80", strict), Catch::Contains("byte 2"));
  CHECK(tok.encode("ok", strict) == Ids{'o', 'k'});
}

TEST_CASE("tiny tokenizer: unsupported or malformed files are clear errors", "[text][tokenizer]") {
  CHECK_THROWS_AS(Tokenizer::from_json("{not json"), grpo::ParseError);
  CHECK_THROWS_WITH(Tokenizer::from_json(R"({"model": {"type": "BPE"}})"), Catch::Contains("model.vocab"));
  TinyOptions options;
  options.normalizer = R"({"type": "Lowercase"})";
  CHECK_THROWS_WITH(Tokenizer::from_json(tiny_tokenizer_json(options)), Catch::Contains("Lowercase"));
  options = {};
  options.pre_tokenizer = R"({"type": "Whitespace"})";
  CHECK_THROWS_AS(Tokenizer::from_json(tiny_tokenizer_json(options)), grpo::ConfigError);
  options = {};
  options.pre_tokenizer = R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})";
  CHECK_THROWS_WITH(Tokenizer::from_json(tiny_tokenizer_json(options)), Catch::Contains("(unclosed"));
  CHECK_THROWS_AS(Tokenizer::from_file("/nonexistent/tokenizer.json"), grpo::ParseError);
}

TEST_CASE("tiny tokenizer: encode_batch equals encode", "[text][tokenizer]") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer_json());
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) texts.push_back(fmt::format("hello world {} <|end|> ell{}", i, std::string(i % 7, 'l')));
  for (const int threads : {0, 1, 3}) {
    const auto batch = tok.encode_batch(texts, {}, threads);
    REQUIRE(batch.size() == texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) CHECK(batch[i] == tok.encode(texts[i]));
  }
  CHECK(tok.encode_batch(std::vector<std::string>{}).empty());
  EncodeOptions strict;
  strict.invalid_utf8 = InvalidUtf8::error;
  texts[17] = "\xFF";
  CHECK_THROWS_AS(tok.encode_batch(texts, strict, 2), grpo::Error);
}

TEST_CASE("tiny tokenizer: the per-thread piece cache belongs to one tokenizer", "[text][tokenizer]") {
  // encode keeps BPE results per thread across calls; a second tokenizer with other merges must not see them.
  const auto with_hello = Tokenizer::from_json(tiny_tokenizer_json());
  std::string json = tiny_tokenizer_json();
  const std::string merge = R"(, ["hell", "o"])";
  json.erase(json.find(merge), merge.size());
  const auto without_hello = Tokenizer::from_json(json);
  for (int round = 0; round < 2; ++round) {
    CHECK(with_hello.encode("hello") == Ids{260});
    // Without merge 4 (hell o) "hello" stops at [hell, o] = [258, 111].
    CHECK(without_hello.encode("hello") == Ids{258, 'o'});
    const std::vector<std::string> texts(5, "hello");
    CHECK(without_hello.encode_batch(texts, {}, 2) == std::vector<Ids>(5, Ids{258, 'o'}));
    CHECK(with_hello.encode_batch(texts, {}, 2) == std::vector<Ids>(5, Ids{260}));
  }
}

TEST_CASE("from_pretrained: special token ids and chat template from tokenizer_config.json", "[text][tokenizer]") {
  const auto dir = std::filesystem::temp_directory_path() / "grpo_tokenizer_test_pretrained";
  std::filesystem::create_directories(dir);
  const auto write = [&](const char* name, const std::string& text) { std::ofstream(dir / name) << text; };
  write("tokenizer.json", tiny_tokenizer_json());
  write("tokenizer_config.json", R"({"bos_token": {"content": "<|bos|>"}, "eos_token": "<|end|>", "pad_token": null,
      "model_max_length": 1000000000000000019884624838656,
      "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}...{% endfor %}"})");
  const auto tok = Tokenizer::from_pretrained(dir);
  CHECK(tok.special_token_ids().bos == 264);
  CHECK(tok.special_token_ids().eos == 262);
  CHECK_FALSE(tok.special_token_ids().pad.has_value());
  // A ChatML template without a literal default system prompt: plain chatml.
  const std::vector<grpo::text::ChatMessage> messages{{"user", "hello", std::nullopt}};
  // "<|im_start|>user\nhello<|im_end|>\n": no added token matches, so bytes except "hello" (merged to 260).
  Ids expected = bytes_of("<|im_start|>user\n");
  expected.push_back(260);
  for (const int32_t id : bytes_of("<|im_end|>\n")) expected.push_back(id);
  CHECK(tok.encode_chat(messages) == expected);

  write("tokenizer_config.json", R"({"eos_token": "<|end|>"})");
  CHECK_THROWS_WITH(Tokenizer::from_pretrained(dir).chat_template(), Catch::Contains("has no chat_template"));
  write("tokenizer_config.json", R"({"chat_template": "[INST] {{ m }}"})");
  CHECK_THROWS_WITH(Tokenizer::from_pretrained(dir).chat_template(), Catch::Contains("not recognised"));
  write("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  CHECK_THROWS_WITH(Tokenizer::from_pretrained(dir), Catch::Contains("<|nope|>"));
  std::filesystem::remove_all(dir);
  CHECK_THROWS_WITH(Tokenizer::from_json(tiny_tokenizer_json()).chat_template(), Catch::Contains("from_pretrained"));
}

namespace {

void check_reference(std::string_view name, std::string_view fixture) {
  const Tokenizer* tok = grpo::text::testing::shared_tokenizer(name);
  if (tok == nullptr) GRPO_SKIP(grpo::text::testing::missing_tokenizer(name));
  const auto cases = grpo::text::testing::read_reference_cases(grpo::text::testing::fixture_path(fixture));
  REQUIRE(cases.size() > 50);
  std::size_t checked = 0;
  for (const auto& c : cases) {
    if (c.is_chat) continue;
    INFO(fmt::format("{} line {} ({}): bytes {}", fixture, c.line, c.category, hex(c.bytes)));
    EncodeOptions options;
    options.add_special_tokens = c.add_special_tokens;
    CHECK(tok->encode(c.bytes, options) == c.ids);
    CHECK(tok->decode(c.ids) == c.decoded);
    DecodeOptions skip;
    skip.skip_special_tokens = true;
    CHECK(tok->decode(c.ids, skip) == c.decoded_skip_special);
    ++checked;
  }
  CHECK(checked > 50);
}

}  // namespace

TEST_CASE("Qwen3 tokenizer.json: ids identical to Hugging Face tokenizers", "[text][tokenizer][needs-tokenizer]") {
  check_reference("qwen3", "qwen3_reference.jsonl");
  if (const Tokenizer* tok = grpo::text::testing::shared_tokenizer("qwen3")) {
    // Qwen3's tokenizer_config.json: eos <|im_end|> (151645), pad <|endoftext|> (151643), no bos.
    CHECK(tok->special_token_ids().eos == 151645);
    CHECK(tok->special_token_ids().pad == 151643);
    CHECK_FALSE(tok->special_token_ids().bos.has_value());
    CHECK(tok->chat_template().options().format == grpo::text::ChatFormat::qwen3);
    CHECK(tok->vocab_size() == 151669);
  }
}

TEST_CASE("Llama 3 tokenizer.json: ids identical to Hugging Face tokenizers", "[text][tokenizer][needs-tokenizer]") {
  check_reference("llama3", "llama3_reference.jsonl");
  if (const Tokenizer* tok = grpo::text::testing::shared_tokenizer("llama3")) {
    // Llama 3.1's tokenizer_config.json: bos <|begin_of_text|> (128000), eos <|eot_id|> (128009).
    CHECK(tok->special_token_ids().bos == 128000);
    CHECK(tok->special_token_ids().eos == 128009);
    CHECK(tok->chat_template().options().format == grpo::text::ChatFormat::llama3);
  }
}

TEST_CASE("GPT-2 vocabulary: ids identical to Hugging Face tokenizers", "[text][tokenizer][needs-tokenizer]") {
  // ByteLevel with GPT-2's own split pattern (use_regex), no normalizer, <|endoftext|> as the one added token.
  check_reference("gpt2", "gpt2_reference.jsonl");
  if (const Tokenizer* tok = grpo::text::testing::shared_tokenizer("gpt2")) {
    CHECK(tok->vocab_size() == 50257);
    CHECK(tok->special_token_ids().eos == 50256);
  }
}

namespace {

/// The parity corpus: tests/text/data/corpus.jsonl (3,348 texts in 48 categories, written by
/// tools/tokenizer-reference/corpus.mjs from files of a Debian machine, the shared math datasets and generated
/// Unicode edge cases) and
/// corpus_ids_<name>.txt, the ids Hugging Face's Rust tokenizer gives, written by
/// tools/tokenizer-reference/corpus_ids.py (PyPI's tokenizers; docs/tokenizer.md has the commands to regenerate).
/// Every text: encode(text) == Hugging Face's ids, and decode(encode(text, add_special_tokens = false)) == text
/// (or, where Qwen's NFC normalizer changes the text, == Hugging Face's decode of its ids). No text is excepted:
/// the letters and numbers newer than PCRE2's Unicode 14 tables (category unicode_new) are handled in
/// src/text/tokenizer.cpp (kUnicode16Letters).
void check_corpus(std::string_view name) {
  const Tokenizer* tok = grpo::text::testing::shared_tokenizer(name);
  if (tok == nullptr) GRPO_SKIP(grpo::text::testing::missing_tokenizer(name));
  using grpo::text::testing::fixture_path;
  const auto cases = grpo::text::testing::read_corpus(fixture_path("corpus.jsonl"),
                                                      fixture_path(fmt::format("corpus_ids_{}.txt", name)));
  REQUIRE(cases.size() >= 2000);
  EncodeOptions plain;
  plain.add_special_tokens = false;
  std::size_t normalized = 0;
  for (const auto& c : cases) {
    INFO(fmt::format("corpus.jsonl line {} ({}, from {}): {}", c.line, c.category, c.source, hex(c.text)));
    CHECK(tok->encode(c.text) == c.ids);
    CHECK(tok->decode(tok->encode(c.text, plain)) == c.decoded);
    normalized += c.decoded != c.text ? 1 : 0;
  }
  // Only Qwen normalizes (NFC): the texts it changes are non-NFC text of the corpus (decomposed accents,
  // misordered Arabic marks, ...); GPT-2 and Llama 3 give every text back unchanged.
  if (name != "qwen3") CHECK(normalized == 0);
}

}  // namespace

TEST_CASE("Qwen3 tokenizer.json: parity corpus identical to Hugging Face", "[text][tokenizer][needs-tokenizer]") {
  check_corpus("qwen3");
}

TEST_CASE("Llama 3 tokenizer.json: parity corpus identical to Hugging Face", "[text][tokenizer][needs-tokenizer]") {
  check_corpus("llama3");
}

TEST_CASE("GPT-2 vocabulary: parity corpus identical to Hugging Face", "[text][tokenizer][needs-tokenizer]") {
  check_corpus("gpt2");
}
