// SPDX-License-Identifier: Apache-2.0
// The tokenizer and chat template a GGUF file describes in its `tokenizer.*` metadata (llama.cpp's keys), written out
// as the tokenizer.json and tokenizer_config.json of a Hugging Face directory, so that one loader (Tokenizer) reads
// both and `grpo convert` writes exactly what the library itself uses.
//
// What is read (llama.cpp's src/llama-vocab.cpp defines the meaning of each key):
//   tokenizer.ggml.model        must be "gpt2" (byte-level BPE); sentencepiece ("llama") and others are refused;
//   tokenizer.ggml.tokens       the vocabulary, id = position; a token spelled outside GPT-2's byte alphabet is
//                               re-spelled byte by byte, as transformers' GGUF loader does;
//   tokenizer.ggml.merges       "left right" strings, rank = position;
//   tokenizer.ggml.token_type   3 (control) become special added tokens, 4 (user-defined, e.g. <think>) plain added
//                               tokens; both are matched whole in the text, as llama.cpp and transformers do;
//   tokenizer.ggml.pre          the pre-tokenizer, by llama.cpp's name:
//                                 gpt2, mpt, olmo                      GPT-2's split regex (ByteLevel use_regex);
//                                 smollm, starcoder, refact, codeshell, command-r, exaone
//                                                                      each digit alone, then GPT-2's regex;
//                                 llama3, llama-v3, llama-bpe          Llama 3's regex, ignore_merges;
//                                 qwen2, stablelm2, deepseek-r1-qwen   Qwen2's regex (no NFC: llama.cpp has none);
//                               others are refused, naming the value;
//   tokenizer.ggml.{bos,eos,padding,unknown}_token_id, add_bos_token / add_eos_token (a post-processor that adds
//                               them), tokenizer.chat_template.
// Where transformers' own GGUF tokenizer (integrations/gguf/gguf_tokenizer_mapping.py, 5.24) differs from llama.cpp
// this follows llama.cpp, which defines the format and which the models' own tokenizer.json agree with: it ignores
// "smollm"'s digit split and Llama 3's ignore_merges. docs/policy.md lists the two.
#pragma once

#include <grpo/io/gguf.hpp>
#include <grpo/text/tokenizer.hpp>

#include <string>

namespace grpo::text {

/// The two JSON files of a Hugging Face tokenizer, as text.
struct HfTokenizerJson {
  std::string tokenizer;         ///< tokenizer.json
  std::string tokenizer_config;  ///< tokenizer_config.json: bos/eos/pad/unk tokens, add_bos/eos_token, chat_template
};

/// tokenizer.json and tokenizer_config.json equivalent to `file`'s tokenizer metadata (see above). Throws
/// grpo::ParseError naming the file and key for a missing or malformed key (merges that name no token, a special
/// token id outside the vocabulary) and grpo::ConfigError for a tokenizer model or pre-tokenizer outside the set above.
HfTokenizerJson gguf_tokenizer_json(const io::GgufFile& file);

/// The Tokenizer of `file`: Tokenizer::from_json on gguf_tokenizer_json(file), with its special ids and chat template.
Tokenizer gguf_tokenizer(const io::GgufFile& file);

}  // namespace grpo::text
