// SPDX-License-Identifier: Apache-2.0
// Reference ids of the parity corpus from Hugging Face's own (Rust) tokenizer. Usage:
//   node corpus-ids.mjs <dir with tokenizer.json> < ../../tests/text/data/corpus.jsonl > ids.txt
// Reads the corpus (JSON lines with a "text", written by corpus.mjs) and prints, for each text in order, its ids
// (encode with add_special_tokens = true, Hugging Face's default) as one line of space-separated integers, the
// smallest form that needs no parser. Where Hugging Face's decode(encode(text)) (without the post-processor's
// tokens, e.g. Llama 3's <|begin_of_text|>) is not the text itself, which happens only when the normalizer
// changes it (Qwen's NFC on decomposed or misordered marks), a tab and the hex of the UTF-8 of that decode follow
// the ids; the test checks decode(encode(x)) == x on every other line.
import { createInterface } from "node:readline";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("@anush008/tokenizers");

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node corpus-ids.mjs <tokenizer dir> < corpus.jsonl > ids.txt");
  process.exit(2);
}
const tokenizer = Tokenizer.fromFile(`${dir}/tokenizer.json`);
for await (const json of createInterface({ input: process.stdin })) {
  const { text } = JSON.parse(json);
  const ids = (await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds();
  const plain = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
  const decoded = await tokenizer.decode(plain, false);
  console.log(decoded === text ? ids.join(" ") : `${ids.join(" ")}\t${Buffer.from(decoded, "utf8").toString("hex")}`);
}
