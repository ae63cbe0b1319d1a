// SPDX-License-Identifier: Apache-2.0
// Reads test cases as JSON lines on stdin and prints, per case, the ids Hugging Face's own (Rust) tokenizer
// gives, as JSON lines. Usage:
//   node reference.mjs <dir with tokenizer.json and tokenizer_config.json> < cases.jsonl > reference.jsonl
// A case is one of
//   {"category": "...", "text": "..."}                    text to encode
//   {"category": "...", "hex": "ff41"}                    raw bytes, possibly invalid UTF-8: decoded to text the
//                                                        way grpo's InvalidUtf8::replace does (WHATWG TextDecoder,
//                                                        maximal subparts become U+FFFD), then encoded
//   {"category": "chat", "messages": [{"role", "content"}...], "add_generation_prompt": bool,
//    "enable_thinking": bool (optional)}                  rendered with tokenizer_config.json's chat_template
//                                                        (@huggingface/jinja) and encoded without special tokens
// plus "add_special_tokens" (default true). Every string the C++ test reads is written as hex of its UTF-8 bytes
// so that the test needs no JSON parser: "bytes", "decoded" (omitted when equal to the input), and
// "decoded_skip_special" (omitted when equal to "decoded"), and for chat "roles" and "contents"; a chat case's rendered text is its "decoded".
// (Read one with: node -e 'console.log(Buffer.from(process.argv[1], "hex").toString())' HEX)
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { createRequire } from "node:module";
import { Template } from "@huggingface/jinja";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("@anush008/tokenizers");

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node reference.mjs <tokenizer dir> < cases.jsonl");
  process.exit(2);
}
const tokenizer = Tokenizer.fromFile(`${dir}/tokenizer.json`);
const config = JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8"));
const hex = (text) => Buffer.from(text, "utf8").toString("hex");
const special = (name) => (typeof config[name] === "object" && config[name] ? config[name].content : config[name]);

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const c = JSON.parse(line);
  const addSpecialTokens = c.add_special_tokens ?? true;
  const out = { category: c.category };
  let text;
  if (c.messages) {
    const context = {
      messages: c.messages,
      add_generation_prompt: c.add_generation_prompt,
      bos_token: special("bos_token") ?? "",
      eos_token: special("eos_token") ?? "",
    };
    if (c.enable_thinking !== undefined) context.enable_thinking = c.enable_thinking;
    text = new Template(config.chat_template).render(context);
    out.add_generation_prompt = c.add_generation_prompt;
    if (c.enable_thinking !== undefined) out.enable_thinking = c.enable_thinking;
    out.roles = c.messages.map((m) => hex(m.role));
    out.contents = c.messages.map((m) => hex(m.content));
    out.add_special_tokens = false;
  } else {
    out.add_special_tokens = addSpecialTokens;
    if (c.hex !== undefined) {
      out.bytes = c.hex;
      text = new TextDecoder("utf-8").decode(Buffer.from(c.hex, "hex"));
    } else {
      text = c.text;
      out.bytes = hex(text);
    }
  }
  const encoding = await tokenizer.encode(text, null, { addSpecialTokens: out.add_special_tokens });
  out.ids = encoding.getIds();
  // Omitted when equal to the input bytes (resp. to "decoded"), which is the common case.
  const decoded = hex(await tokenizer.decode(out.ids, false));
  const decodedSkip = hex(await tokenizer.decode(out.ids, true));
  if (decoded !== out.bytes) out.decoded = decoded;  // for chat: the rendered text (decoding is lossless)
  if (decodedSkip !== decoded) out.decoded_skip_special = decodedSkip;
  console.log(JSON.stringify(out));
}
