// SPDX-License-Identifier: Apache-2.0
// Times Hugging Face's own (Rust) tokenizer, under node via @anush008/tokenizers, encoding the texts of a corpus
// (JSON lines with a "text", e.g. tests/text/data/corpus.jsonl). Run by benchmarks/bench_tokenizer beside grpo's
// encode on the same texts. Usage:
//   node time-encode.mjs <dir with tokenizer.json> <corpus.jsonl> [repeats = 3]
// After one warm-up pass over all texts, each timed pass encodes every text (add_special_tokens = true):
//   single: one encode() call per text, each awaited before the next (one text at a time, as grpo's encode);
//   batch:  one encodeBatch() call with all texts (the Rust side spreads them over its thread pool).
// Prints one JSON line: the best pass of each in seconds, the input bytes and the token count.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("@anush008/tokenizers");

const [dir, corpus, repeatsArg] = process.argv.slice(2);
if (!dir || !corpus) {
  console.error("usage: node time-encode.mjs <tokenizer dir> <corpus.jsonl> [repeats]");
  process.exit(2);
}
const repeats = Number(repeatsArg ?? 3);
const tokenizer = Tokenizer.fromFile(`${dir}/tokenizer.json`);
const texts = readFileSync(corpus, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).text);
const bytes = texts.reduce((sum, t) => sum + Buffer.byteLength(t, "utf8"), 0);

const single = async () => {
  let tokens = 0;
  for (const text of texts) tokens += (await tokenizer.encode(text, null, { addSpecialTokens: true })).getLength();
  return tokens;
};
const batch = async () => {
  const encodings = await tokenizer.encodeBatch(texts, { addSpecialTokens: true });
  return encodings.reduce((sum, e) => sum + e.getLength(), 0);
};
const best = async (pass) => {
  let seconds = Infinity;
  let tokens = 0;
  for (let i = 0; i < repeats; ++i) {
    const start = process.hrtime.bigint();
    tokens = await pass();
    seconds = Math.min(seconds, Number(process.hrtime.bigint() - start) / 1e9);
  }
  return { seconds, tokens };
};

await single();  // warm-up: page in the tables, fill any caches
await batch();
const s = await best(single);
const b = await best(batch);
console.log(JSON.stringify({ single_seconds: s.seconds, batch_seconds: b.seconds, bytes, tokens: s.tokens,
                             batch_tokens: b.tokens, texts: texts.length }));
