// SPDX-License-Identifier: Apache-2.0
// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Qwen2 / Qwen2.5 / Qwen3, Llama 3, GPT-2).
//
// The pipeline is Hugging Face `tokenizers`' own, step for step, so ids are identical to its Rust tokenizer:
//   1. added tokens (special and not) are matched first, leftmost-longest, on the raw text (lstrip / rstrip /
//      single_word honoured); the text between them goes on;
//   2. normalizer (NFC / NFD / NFKC / NFKD or a Sequence of them; Qwen uses NFC; combining marks newer than
//      Unicode 9.0 are left alone, as Hugging Face's tables do), then added tokens marked `normalized: true` are
//      matched on the normalized text;
//   3. pre-tokenizer: the Split regex (PCRE2 with UTF + UCP, JIT-compiled; \p{L} and \p{N} extended to the
//      Unicode 16 letters and numbers Hugging Face's Oniguruma knows), Digits (a split on \p{N}, each digit alone or
//      in runs: SmolLM2) and ByteLevel (GPT-2's byte to printable-character mapping, optionally with GPT-2's own
//      split regex and a prefix space);
//   4. BPE: each piece starts as single bytes and the pair with the lowest merge rank is merged until none is
//      left (a binary heap over the pairs: O(n log n) per piece, not a quadratic rescan); `ignore_merges`
//      (Llama 3) emits a piece that is itself in the vocabulary directly;
//   5. post-processor: ByteLevel (ids unchanged) and TemplateProcessing (e.g. Llama 3's leading
//      <|begin_of_text|>), applied when EncodeOptions::add_special_tokens is set.
// Decoding maps ids back to bytes (the ByteLevel decoder) and replaces invalid UTF-8 by U+FFFD, as
// `String::from_utf8_lossy` does. Not supported (ConfigError when loading): non-BPE models, BPE with dropout,
// byte_fallback or subword prefixes/suffixes, other normalizers, pre-tokenizers and post-processors.
//
// Ids are int32 (every vocabulary in scope is below 2^31). A Tokenizer is immutable after loading: encode and
// decode are const and safe to call from several threads; copies share the loaded tables. Each thread keeps the
// BPE results of the pieces it has seen for the tokenizer it used last (Hugging Face's word cache), across calls.
// docs/tokenizer.md has the parity tests, the deliberate differences and throughput figures.
#pragma once

#include <grpo/text/chat_template.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::text {

/// What encode does with bytes that are not valid UTF-8.
enum class InvalidUtf8 {
  /// Each maximal invalid subpart becomes U+FFFD, as Python's bytes.decode(errors="replace"), Rust's
  /// from_utf8_lossy and WHATWG's TextDecoder do; the text is then encoded as that decoded string would be.
  replace,
  /// Throw grpo::Error naming the byte offset of the first invalid sequence.
  error,
};

struct EncodeOptions {
  /// Apply the post-processor's template (Hugging Face's add_special_tokens=True): Llama 3 prepends
  /// <|begin_of_text|>; Qwen and GPT-2 add nothing. Turn off for text that already carries them (chat templates).
  bool add_special_tokens = true;
  /// Encode special tokens that appear in the text as plain text instead of as their ids (Hugging Face's
  /// encode_special_tokens / split_special_tokens). Use it for untrusted content such as user messages.
  /// Non-special added tokens (e.g. Qwen3's <think>) are still matched.
  bool split_special_tokens = false;
  InvalidUtf8 invalid_utf8 = InvalidUtf8::replace;
};

struct DecodeOptions {
  /// Drop special added tokens (<|im_end|>, <|endoftext|>, ...) from the text, as Hugging Face's decode does.
  bool skip_special_tokens = false;
  /// Drop ids that name no token instead of throwing, as Hugging Face's Rust tokenizer does. For model output: a
  /// checkpoint's embedding is often padded past the tokenizer's vocabulary (Qwen's 151936 rows for about 151.7k tokens), and
  /// a sampler can draw those ids.
  bool skip_unknown_ids = false;
};

/// One entry of tokenizer.json's "added_tokens".
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;  ///< matched only when not inside a word (letters, digits, '_' on neither side)
  bool lstrip = false;       ///< swallows the whitespace before it
  bool rstrip = false;       ///< swallows the whitespace after it
  bool normalized = false;   ///< matched on the normalized text instead of the raw text
};

/// Ids of the special tokens named in tokenizer_config.json (bos_token, eos_token, pad_token), when set there.
/// eos is where generation stops: Qwen3 instruct's <|im_end|>, Llama 3.1's <|eot_id|>.
struct SpecialTokenIds {
  std::optional<int32_t> bos;
  std::optional<int32_t> eos;
  std::optional<int32_t> pad;
};

class Tokenizer {
 public:
  /// Reads a Hugging Face model directory: dir/tokenizer.json, and from dir/tokenizer_config.json (optional) the
  /// chat template and the bos / eos / pad tokens. A chat template outside the supported families is not an
  /// error here; chat_template() reports it when asked. A path to a .gguf file reads the tokenizer its
  /// `tokenizer.*` metadata describes (text/gguf_tokenizer.hpp).
  static Tokenizer from_pretrained(const std::filesystem::path& dir);
  /// A tokenizer.json and a tokenizer_config.json given as text, as from_pretrained reads them from a directory;
  /// `source` names them in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                             std::string_view source);
  /// Reads a tokenizer.json file. Throws grpo::ParseError (names the file and field) for malformed JSON and
  /// grpo::ConfigError (names the component and its type) for tokenizers outside the supported set above.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  /// Same, from the JSON text itself; `source` names it in error messages.
  static Tokenizer from_json(std::string_view json, std::string_view source = "<tokenizer.json>");

  /// Token ids of `text` ([n] int32). Throws grpo::Error only for invalid UTF-8 under InvalidUtf8::error.
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  /// encode() for each text, spread over `num_threads` threads (0: the hardware's concurrency, at most one
  /// thread per text). Output i is exactly encode(texts[i], options).
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts, const EncodeOptions& options = {},
                                                 int num_threads = 0) const;

  /// Text of `ids`: the bytes of every token concatenated, invalid UTF-8 (a multi-byte character cut between
  /// tokens) replaced by U+FFFD. Throws grpo::Error naming the first id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
  /// The raw bytes of `ids`, without UTF-8 repair: concatenating the bytes of consecutive slices gives the
  /// bytes of the whole, so streaming decoders can hold back an incomplete character.
  std::string decode_bytes(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
  std::vector<std::string> decode_batch(std::span<const std::vector<int32_t>> ids,
                                        const DecodeOptions& options = {}) const;

  /// Id of a token given in its vocabulary spelling (byte-level form, e.g. "Ġthe", or an added token's content).
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// Vocabulary spelling of `id`; throws grpo::Error for an id outside [0, vocab_size()) or a hole in the ids.
  const std::string& id_to_token(int32_t id) const;
  /// One past the largest id, added tokens included (Qwen3: 151669; the model's embedding may be larger).
  int32_t vocab_size() const;
  /// Added tokens in tokenizer.json order.
  const std::vector<AddedToken>& added_tokens() const;
  /// True for ids of special added tokens.
  bool is_special(int32_t id) const;

  /// Special token ids from tokenizer_config.json (all unset unless loaded with from_pretrained).
  const SpecialTokenIds& special_token_ids() const;
  /// The chat template of tokenizer_config.json. Throws ConfigError when there was none (or it was not
  /// recognised, naming why): use ChatTemplate::from_name then.
  const ChatTemplate& chat_template() const;
  /// Prompt ids of a conversation: chat_template().render(messages, options) encoded with add_special_tokens =
  /// false (the rendered text already holds them), as Hugging Face's apply_chat_template(tokenize=True). Special
  /// tokens written inside message contents are matched too, as there. [n] int32.
  std::vector<int32_t> encode_chat(std::span<const ChatMessage> messages, const ChatRenderOptions& options = {}) const;

  /// The loaded tables (src/text/tokenizer.cpp); public only so that the loader's helpers can name it.
  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace grpo::text
