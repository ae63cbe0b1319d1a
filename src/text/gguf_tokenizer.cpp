// SPDX-License-Identifier: Apache-2.0
#include <grpo/text/gguf_tokenizer.hpp>

#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>

#include "unicode.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <span>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace grpo::text {
namespace {

// The ByteLevel steps of Hugging Face's tokenizer.json: with GPT-2's split regex, and after a Split of its own.
constexpr std::string_view kByteLevelWithRegex =
    R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
constexpr std::string_view kByteLevelWithoutRegex =
    R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false})";
// The split regexes of Llama 3's and Qwen2's tokenizer.json, which llama.cpp's LLAMA3 and QWEN2 pre-tokenizers
// reproduce (src/llama-vocab.cpp).
constexpr std::string_view kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// llama.cpp's tokenizer.ggml.pre names, by the pre-tokenizer they select.
constexpr std::array<std::string_view, 3> kGpt2Names = {"gpt2", "mpt", "olmo"};
constexpr std::array<std::string_view, 6> kDigitNames = {"smollm",    "starcoder", "refact",
                                                                  "codeshell", "command-r", "exaone"};
constexpr std::array<std::string_view, 3> kLlama3Names = {"llama3", "llama-v3", "llama-bpe"};
constexpr std::array<std::string_view, 3> kQwen2Names = {"qwen2", "stablelm2", "deepseek-r1-qwen"};

constexpr int kControlToken = 3;      // llama_token_type LLAMA_TOKEN_TYPE_CONTROL
constexpr int kUserDefinedToken = 4;  // LLAMA_TOKEN_TYPE_USER_DEFINED

struct PreTokenizer {
  std::string json;
  bool ignore_merges = false;
};

std::string split_then_byte_level(std::string_view regex) {
  std::string out = R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":)";
  append_json_quoted(out, regex);
  out += R"(},"behavior":"Isolated","invert":false},)";
  out += kByteLevelWithoutRegex;
  out += "]}";
  return out;
}

PreTokenizer pre_tokenizer(const io::GgufFile& file) {
  const io::GgufValue* value = file.find("tokenizer.ggml.pre");
  const std::string name = value ? value->as_string("tokenizer.ggml.pre") : std::string("(missing)");
  const auto named = [&](std::span<const std::string_view> names) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  if (named(kGpt2Names)) return {std::string(kByteLevelWithRegex), false};
  if (named(kDigitNames)) {
    return {fmt::format(R"({{"type":"Sequence","pretokenizers":[{{"type":"Digits","individual_digits":true}},{}]}})",
                        kByteLevelWithRegex),
            false};
  }
  if (named(kLlama3Names)) return {split_then_byte_level(kLlama3Split), true};
  if (named(kQwen2Names)) return {split_then_byte_level(kQwen2Split), false};
  const auto list = [](std::span<const std::string_view> names) { return fmt::format("{}", fmt::join(names, ", ")); };
  ::grpo::detail::throw_formatted<ConfigError>(
      "{}: tokenizer.ggml.pre '{}' is not a pre-tokenizer this library reproduces (supported: {}, {}, {}, {})",
      file.path().string(), name, list(kGpt2Names), list(kDigitNames), list(kLlama3Names), list(kQwen2Names));
}

/// `token` in GPT-2's byte alphabet: unchanged when every character already is a byte stand-in, otherwise each of
/// its UTF-8 bytes replaced by its stand-in (transformers' byte_level_tokenizer does the same).
std::string byte_level_spelling(const std::string& token, const std::array<char32_t, 256>& table, bool& respelled) {
  respelled = false;
  if (detail::find_invalid_utf8(token) == std::string_view::npos) {
    bool all_stand_ins = true;
    for (std::size_t pos = 0; pos < token.size() && all_stand_ins;) {
      all_stand_ins = detail::char_to_byte(detail::next_code_point(token, pos)) >= 0;
    }
    if (all_stand_ins) return token;
  }
  respelled = true;
  std::string out;
  for (const char c : token) detail::append_utf8(out, table[static_cast<unsigned char>(c)]);
  return out;
}

std::optional<int64_t> token_id(const io::GgufFile& file, std::string_view key, std::size_t vocab_size) {
  const io::GgufValue* value = file.find(key);
  if (value == nullptr) return std::nullopt;
  const int64_t id = value->as_int(key);
  if (id < 0 || static_cast<std::size_t>(id) >= vocab_size) {
    ::grpo::detail::throw_formatted<ParseError>("{}: {} = {} is outside the vocabulary of {} tokens",
                                                file.path().string(), key, id, vocab_size);
  }
  return id;
}

bool flag(const io::GgufFile& file, std::string_view key) {
  const io::GgufValue* value = file.find(key);
  return value != nullptr && value->as_bool(key);
}

void append_added_token(std::string& out, int64_t id, std::string_view content, bool special) {
  out += fmt::format(R"({{"id":{},"content":)", id);
  append_json_quoted(out, content);
  out += fmt::format(R"(,"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":{}}})",
                     special ? "true" : "false");
}

/// Hugging Face's TemplateProcessing that adds bos and/or eos around each sequence.
std::string template_processing(const std::vector<std::string>& tokens, std::optional<int64_t> bos,
                                std::optional<int64_t> eos) {
  const auto special = [&](int64_t id) {
    return fmt::format(R"({{"SpecialToken":{{"id":{},"type_id":0}}}})", json_quoted(tokens[static_cast<std::size_t>(id)]));
  };
  const auto sequence = [&](std::string_view name, int type_id) {
    std::string pieces;
    if (bos) pieces += special(*bos) + ",";
    pieces += fmt::format(R"({{"Sequence":{{"id":"{}","type_id":{}}}}})", name, type_id);
    if (eos) {
      pieces += ",";
      pieces += special(*eos);
    }
    return pieces;
  };
  std::vector<int64_t> ids;
  for (const auto id : {bos, eos}) {
    if (id && std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  }
  std::string specials;
  for (const int64_t id : ids) {
    const std::string token = json_quoted(tokens[static_cast<std::size_t>(id)]);
    if (!specials.empty()) specials += ",";
    specials += fmt::format(R"({}:{{"id":{},"ids":[{}],"tokens":[{}]}})", token, token, id, token);
  }
  return fmt::format(R"({{"type":"TemplateProcessing","single":[{}],"pair":[{},{}],"special_tokens":{{{}}}}})",
                     sequence("A", 0), sequence("A", 0), sequence("B", 1), specials);
}

}  // namespace

HfTokenizerJson gguf_tokenizer_json(const io::GgufFile& file) {
  const std::string path = file.path().string();
  const auto required = [&](std::string_view key) -> const io::GgufValue& {
    const io::GgufValue* value = file.find(key);
    if (value == nullptr) {
      ::grpo::detail::throw_formatted<ParseError>("{}: {} is missing: the file carries no tokenizer", path, key);
    }
    return *value;
  };
  const std::string& model = required("tokenizer.ggml.model").as_string("tokenizer.ggml.model");
  GRPO_CHECK_CONFIG(model == "gpt2",
                    "{}: tokenizer.ggml.model '{}' is not supported: only byte-level BPE ('gpt2', as Llama 3, Qwen and "
                    "SmolLM files use) is",
                    path, model);
  const PreTokenizer pre = pre_tokenizer(file);
  const std::vector<std::string> tokens = required("tokenizer.ggml.tokens").as_strings("tokenizer.ggml.tokens");
  const std::vector<std::string> merges = required("tokenizer.ggml.merges").as_strings("tokenizer.ggml.merges");
  std::vector<int64_t> types(tokens.size(), 1);
  if (const io::GgufValue* value = file.find("tokenizer.ggml.token_type")) {
    types = value->as_ints("tokenizer.ggml.token_type");
    if (types.size() != tokens.size()) {
      ::grpo::detail::throw_formatted<ParseError>("{}: tokenizer.ggml.token_type has {} entries for {} tokens", path,
                                                  types.size(), tokens.size());
    }
  }

  // The vocabulary, in the byte alphabet; a spelling that occurs twice keeps its last id, as a Python dict would.
  const auto table = detail::byte_to_char_table();
  std::vector<std::string> spellings(tokens.size());
  std::vector<char> respelled(tokens.size(), 0);
  std::unordered_map<std::string_view, std::size_t> last_id;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    bool changed = false;
    spellings[i] = byte_level_spelling(tokens[i], table, changed);
    respelled[i] = changed;
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) last_id[spellings[i]] = i;

  std::string json = R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[)";
  bool first = true;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const bool control = types[i] == kControlToken, user_defined = types[i] == kUserDefinedToken;
    // A control token outside the byte alphabet is a llama.cpp mislabel that transformers skips too.
    if (!(control || user_defined) || respelled[i] || last_id[spellings[i]] != i) continue;
    if (!first) json += ",";
    first = false;
    append_added_token(json, static_cast<int64_t>(i), tokens[i], control);
  }
  json += R"(],"normalizer":null,"pre_tokenizer":)";
  json += pre.json;

  const std::size_t vocab_size = tokens.size();
  const auto bos = token_id(file, "tokenizer.ggml.bos_token_id", vocab_size);
  const auto eos = token_id(file, "tokenizer.ggml.eos_token_id", vocab_size);
  const auto pad = token_id(file, "tokenizer.ggml.padding_token_id", vocab_size);
  const auto unk = token_id(file, "tokenizer.ggml.unknown_token_id", vocab_size);
  const bool add_bos = flag(file, "tokenizer.ggml.add_bos_token");
  const bool add_eos = flag(file, "tokenizer.ggml.add_eos_token");
  for (const auto& [wanted, id, name] : {std::tuple{add_bos, bos, "bos"}, std::tuple{add_eos, eos, "eos"}}) {
    if (wanted && !id) {
      ::grpo::detail::throw_formatted<ParseError>(
          "{}: tokenizer.ggml.add_{}_token is set but tokenizer.ggml.{}_token_id is missing", path, name, name);
    }
  }
  json += R"(,"post_processor":)";
  json += (add_bos || add_eos) ? template_processing(tokens, add_bos ? bos : std::nullopt, add_eos ? eos : std::nullopt)
                               : std::string(R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true})");
  json += R"(,"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})";
  json += fmt::format(
      R"(,"model":{{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":{},"vocab":{{)",
      pre.ignore_merges ? "true" : "false");
  first = true;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (last_id[spellings[i]] != i) continue;
    if (!first) json += ",";
    first = false;
    append_json_quoted(json, spellings[i]);
    json += fmt::format(":{}", i);
  }
  json += R"(},"merges":[)";
  for (std::size_t i = 0; i < merges.size(); ++i) {
    if (i != 0) json += ",";
    append_json_quoted(json, merges[i]);
  }
  json += "]}}";

  // tokenizer_config.json: the special tokens by content, as transformers' GGUF loader names them.
  std::string config = R"({"tokenizer_class":"PreTrainedTokenizerFast","clean_up_tokenization_spaces":false)";
  const auto special = [&](std::string_view key, std::optional<int64_t> id) {
    config += fmt::format(R"(,"{}":)", key);
    if (id) {
      append_json_quoted(config, tokens[static_cast<std::size_t>(*id)]);
    } else {
      config += "null";
    }
  };
  special("bos_token", bos);
  special("eos_token", eos);
  special("pad_token", pad);
  special("unk_token", unk);
  config += fmt::format(R"(,"add_bos_token":{},"add_eos_token":{})", add_bos, add_eos);
  if (const io::GgufValue* chat = file.find("tokenizer.chat_template")) {
    config += R"(,"chat_template":)";
    append_json_quoted(config, chat->as_string("tokenizer.chat_template"));
  }
  config += "}";
  return {std::move(json), std::move(config)};
}

Tokenizer gguf_tokenizer(const io::GgufFile& file) {
  const HfTokenizerJson files = gguf_tokenizer_json(file);
  return Tokenizer::from_json(files.tokenizer, files.tokenizer_config, file.path().string());
}

}  // namespace grpo::text
