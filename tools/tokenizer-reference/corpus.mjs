// SPDX-License-Identifier: Apache-2.0
// Writes the tokenizer parity corpus (tests/text/data/corpus.jsonl): 3,348 varied texts in 48 categories, one JSON
// object per line, {"category": ..., "source": ..., "text": ...}. Usage:
//   node corpus.mjs [shared dir] > ../../tests/text/data/corpus.jsonl
// Real text is drawn from files found on a Debian machine (licence texts, package copyright files and READMEs,
// man pages, C / C++ headers, Python, Perl, JavaScript, Go, CMake and shell sources, JSON files, and the
// translated messages of gettext catalogs in Chinese, Japanese, Korean, Arabic, Hebrew, Hindi, Thai, Russian,
// Greek, ...), math prompts and solutions come from the shared datasets (GSM8K, ROLL), and the Unicode edge
// cases (emoji ZWJ sequences, flags, keycaps, tag sequences, combining marks, digit runs of every script,
// whitespace runs, \r\n, special tokens inside text, URLs, JSON, mixed scripts) are generated.
// Deterministic: files are listed in sorted order and every choice comes from one seeded generator, so the same
// machine gives the same corpus. The corpus is committed; rerun this only to change it (then regenerate the ids
// with corpus-ids.mjs, see docs/tokenizer.md). Every text is valid UTF-8 (no lone surrogates).
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { join } from "node:path";

const sharedDir = process.argv[2] ?? new URL("../../../shared", import.meta.url).pathname;

// ---- deterministic choices -----------------------------------------------------------------------------------
let state = 0x2545f491;  // xorshift32
const next = () => {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state;
};
const below = (n) => next() % n;
const pick = (list) => list[below(list.length)];
const chance = (p) => next() / 4294967296 < p;
const between = (lo, hi) => lo + below(hi - lo + 1);
const repeat = (n, f) => Array.from({ length: n }, f).join("");

// ---- output ----------------------------------------------------------------------------------------------------
const seen = new Set();
const counts = {};
const out = [];
const MAX_BYTES = 4000;
function emit(category, source, text) {
  if (!text || seen.has(text) || Buffer.byteLength(text) > MAX_BYTES) return false;
  if (text.includes("\uFFFD")) return false;  // the file was not UTF-8
  // Lone surrogates cannot be encoded as UTF-8; the corpus is valid UTF-8 only.
  if (Buffer.from(text, "utf8").toString("utf8") !== text) throw new Error(`invalid text from ${source}`);
  seen.add(text);
  counts[category] = (counts[category] ?? 0) + 1;
  out.push({ category, source, text });
  return true;
}

// ---- files on this machine -------------------------------------------------------------------------------------
function listFiles(dir, { suffix = "", depth = 1, maxBytes = 400000 } = {}) {
  const found = [];
  const walk = (d, level) => {
    let entries;
    try { entries = readdirSync(d, { withFileTypes: true }); } catch { return; }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      const path = join(d, e.name);
      if (e.isDirectory()) {
        if (level < depth) walk(path, level + 1);
      } else if (e.isFile() && path.endsWith(suffix)) {
        try { if (statSync(path).size <= maxBytes && statSync(path).size > 0) found.push(path); } catch {}
      }
    }
  };
  walk(dir, 1);
  return found;
}
const readText = (path) => {
  const raw = readFileSync(path);
  return (path.endsWith(".gz") ? gunzipSync(raw) : raw).toString("utf8");
};

/// `count` windows of consecutive lines from files of `files`, each 1..maxLines lines, line endings kept as "\n"
/// (some converted to "\r\n" when `crlf`).
function windows(category, files, count, { maxLines = 12, minChars = 8, filter = () => true, crlf = 0 } = {}) {
  if (files.length === 0) return;
  let made = 0;
  for (let attempt = 0; made < count && attempt < count * 20; ++attempt) {
    const path = pick(files);
    let lines;
    try { lines = readText(path).split("\n"); } catch { continue; }
    if (lines.length === 0) continue;
    const start = below(lines.length);
    const length = chance(0.3) ? 1 : between(2, maxLines);
    let text = lines.slice(start, start + length).join("\n");
    if (chance(0.5)) text = text.trimEnd();
    if (text.trim().length < minChars || !filter(text)) continue;
    if (chance(crlf)) text = text.replaceAll("\n", "\r\n");
    if (emit(category, `${path}:${start + 1}`, text)) ++made;
  }
}

// Prose: licence texts, copyright files, READMEs.
const licences = listFiles("/usr/share/common-licenses");
const copyrights = readdirSync("/usr/share/doc").sort().map((d) => `/usr/share/doc/${d}/copyright`).filter(existsSync);
const readmes = listFiles("/usr/share/doc", { depth: 2 }).filter((p) => /\/README(\.md|\.txt)?$/i.test(p));
windows("prose_licence", licences, 140, { maxLines: 8 });
windows("prose_copyright", copyrights, 160, { maxLines: 10 });
windows("prose_readme", readmes, 120, { maxLines: 10 });
windows("prose_crlf", licences.concat(readmes), 40, { maxLines: 6, crlf: 1 });
// Man pages (troff source, with its escapes).
windows("man_page", listFiles("/usr/share/man/man1", { suffix: ".gz" }), 100, { maxLines: 10 });
// Code.
windows("code_c", listFiles("/usr/include", { suffix: ".h", depth: 2 }), 120, { maxLines: 16 });
windows("code_cpp", listFiles("/usr/include/c++/12", { depth: 2 }), 80, { maxLines: 16 });
windows("code_python", listFiles("/usr/lib/python3.11", { suffix: ".py" }), 100, { maxLines: 16 });
windows("code_perl", listFiles("/usr/share/perl/5.36.0", { suffix: ".pm", depth: 2 }), 50, { maxLines: 12 });
windows("code_js", listFiles("/usr/lib/node_modules/npm/lib", { suffix: ".js", depth: 3 }), 60, { maxLines: 14 });
windows("code_go", listFiles("/usr/share/doc/git/contrib", { suffix: ".go", depth: 3 }), 30, { maxLines: 14 });
windows("code_cmake", listFiles("/usr/share/cmake-3.25/Modules", { suffix: ".cmake" }), 50, { maxLines: 12 });
const shellScripts = listFiles("/usr/bin", { maxBytes: 100000 }).filter((p) => {
  const head = readFileSync(p).subarray(0, 12).toString("latin1");
  return head.startsWith("#!/bin/sh") || head.startsWith("#!/bin/bash");
});
windows("code_shell", shellScripts, 50, { maxLines: 12 });
windows("code_json", listFiles("/usr/share/gdal", { suffix: ".json" }), 30, { maxLines: 12 });
windows("markdown", listFiles("/usr/share/doc/nodejs/api", { suffix: ".md" }), 50, { maxLines: 10 });

// Translated messages of gettext catalogs (.mo): real sentences in many scripts.
function moMessages(path) {
  const b = readFileSync(path);
  const little = b.readUInt32LE(0) === 0x950412de;
  const u32 = (at) => (little ? b.readUInt32LE(at) : b.readUInt32BE(at));
  const n = u32(8);
  const table = u32(16);
  const messages = [];
  for (let i = 1; i < n; ++i) {  // entry 0 is the catalog's header
    const length = u32(table + 8 * i);
    const offset = u32(table + 8 * i + 4);
    for (const form of b.subarray(offset, offset + length).toString("utf8").split("\0")) messages.push(form);
  }
  return messages;
}
const languages = [
  ["zh_CN", 170, /[\u4e00-\u9fff]/], ["zh_TW", 70, /[\u4e00-\u9fff]/], ["ja", 170, /[\u3040-\u30ff\u4e00-\u9fff]/],
  ["ko", 140, /[\uac00-\ud7af]/], ["ar", 80, /[\u0600-\u06ff]/], ["fa", 30, /[\u0600-\u06ff]/],
  ["he", 40, /[\u0590-\u05ff]/], ["hi", 40, /[\u0900-\u097f]/], ["th", 40, /[\u0e00-\u0e7f]/],
  ["ru", 50, /[\u0400-\u04ff]/], ["uk", 30, /[\u0400-\u04ff]/], ["el", 40, /[\u0370-\u03ff]/],
  ["vi", 40, /[\u00c0-\u1ef9]/], ["am", 15, /[\u1200-\u137f]/], ["bn", 20, /[\u0980-\u09ff]/],
  ["ta", 20, /[\u0b80-\u0bff]/], ["ka", 15, /[\u10a0-\u10ff]/], ["hy", 15, /[\u0530-\u058f]/],
];
for (const [language, count, script] of languages) {
  const dir = `/usr/share/locale/${language}/LC_MESSAGES`;
  const catalogs = listFiles(dir, { suffix: ".mo", maxBytes: 5000000 });
  if (catalogs.length === 0) continue;
  let made = 0;
  for (let attempt = 0; made < count && attempt < count * 30; ++attempt) {
    const path = pick(catalogs);
    const messages = moMessages(path).filter((m) => script.test(m) && m.length >= 2);
    if (messages.length === 0) continue;
    // Mostly one message, sometimes a few joined as a paragraph.
    const i = below(messages.length);
    const text = chance(0.25) ? messages.slice(i, i + between(2, 5)).join(pick(["\n", " ", "\n\n"])) : messages[i];
    if (emit(`text_${language}`, `${path}#${i}`, text)) ++made;
  }
}

// Math: prompts and worked solutions from the shared datasets.
function jsonl(path) {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
}
const gsm8k = jsonl(join(sharedDir, "datasets/gsm8k_test.jsonl"));
const roll = jsonl(join(sharedDir, "datasets/roll_math_benchmarks.jsonl"));
const deepmath = jsonl(join(sharedDir, "datasets/roll_deepmath_train.jsonl"));
for (let made = 0, attempt = 0; made < 60 && attempt < 600 && gsm8k.length; ++attempt) {
  const i = below(gsm8k.length);
  const text = chance(0.5) ? gsm8k[i].question : `${gsm8k[i].question}\n${gsm8k[i].answer}`;
  if (emit("math_gsm8k", `datasets/gsm8k_test.jsonl:${i + 1}`, text)) ++made;
}
for (let made = 0, attempt = 0; made < 90 && attempt < 900 && roll.length; ++attempt) {
  const i = below(roll.length);
  if (emit("math_latex", `datasets/roll_math_benchmarks.jsonl:${i + 1}`, roll[i].prompt)) ++made;
}
for (let made = 0, attempt = 0; made < 60 && attempt < 600 && deepmath.length; ++attempt) {
  const i = below(deepmath.length);
  if (emit("math_latex", `datasets/roll_deepmath_train.jsonl:${i + 1}`, deepmath[i].prompt)) ++made;
}

// ---- generated edge cases ---------------------------------------------------------------------------------------
const words = ("the of and to in is that for it with as was on be by this are or at from which an have not they you all "
  + "reward policy gradient token model group advantage sample prompt answer loss value clip ratio").split(" ");
const word = () => pick(words);
const sentence = () => {
  const s = repeat(between(3, 12), () => word() + " ").trimEnd();
  return s[0].toUpperCase() + s.slice(1) + pick([".", "!", "?", ";", ":", "...", ""]);
};
const cp = (lo, hi) => String.fromCodePoint(between(lo, hi));

const emoji = ["😀", "😂", "🥲", "🤖", "🚀", "🔥", "✨", "🎉", "🍕", "🐍", "🦀", "☕", "⚡", "❤️", "✔️", "☺️", "🙂",
  "🤔", "💯", "🧠", "📈", "🌍", "🌈", "🐱", "🐶", "🍣", "⭐", "☀️", "❄️", "🎵", "©️", "®️", "™️", "↔️", "🅰️"];
const tones = ["🏻", "🏼", "🏽", "🏾", "🏿"];
const toneable = ["👍", "👋", "🙌", "👏", "🤞", "✌️", "🧑", "👩", "👨", "🙏", "💪"];
const zwj = ["👨‍👩‍👧‍👦", "👩‍💻", "🧑‍🚀", "🏳️‍🌈", "🏳️‍⚧️", "👁️‍🗨️", "❤️‍🔥", "🧔‍♂️", "👩🏽‍🔬", "🫱🏻‍🫲🏿",
  "👨‍❤️‍👨", "🐻‍❄️", "😶‍🌫️", "🧑🏾‍🤝‍🧑🏼", "👩‍👩‍👦", "🐕‍🦺", "🧑‍🍳", "🏃‍♀️‍➡️", "🐦‍🔥", "🍋‍🟩"];
const newer = ["🫨", "🩷", "🪿", "🫎", "🪼", "🫛", "🪭", "🩵", "🫸🏽", "🪯"];  // Unicode 15 / 15.1 emoji
const regional = (code) => [...code].map((c) => String.fromCodePoint(0x1f1e6 + c.charCodeAt(0) - 65)).join("");
const countries = "US JP FR DE CN KR BR IN GB IT ES CA MX RU UA EG NG ZA AU NZ SE NO FI PL TR SA IL AR CL VN TH".split(" ");
const tagFlag = (region) => "🏴" + [...region].map((c) => String.fromCodePoint(0xe0000 + c.charCodeAt(0))).join("")
  + "\u{E007F}";
const keycap = () => pick([..."0123456789#*"]) + "\uFE0F\u20E3";
const oneEmoji = () => {
  switch (below(7)) {
    case 0: return pick(emoji);
    case 1: return pick(toneable) + pick(tones);
    case 2: return pick(zwj);
    case 3: return regional(pick(countries));
    case 4: return chance(0.5) ? tagFlag(pick(["gbeng", "gbsct", "gbwls"])) : keycap();
    case 5: return pick(newer);
    default: return pick(emoji) + (chance(0.5) ? "\uFE0E" : "\uFE0F");
  }
};
for (let i = 0; i < 110; ++i) {
  const parts = [];
  for (let j = between(1, 10); j > 0; --j) {
    parts.push(chance(0.5) ? oneEmoji() : repeat(between(1, 4), oneEmoji));
    if (chance(0.6)) parts.push(pick([" ", "", "\n", " and ", ", "]) + (chance(0.5) ? sentence() : word()));
  }
  emit("emoji", "generated", parts.join(chance(0.5) ? " " : ""));
}
for (let i = 0; i < 10; ++i) emit("emoji", "generated", repeat(between(5, 60), () => regional(pick(countries))));

// Combining marks: stacks on Latin, Greek and Cyrillic letters; decomposed (NFD) text; Indic, Thai, Arabic and
// Hebrew marks; Hangul jamo; marks newer than Unicode 9 (which Hugging Face's NFC leaves alone).
const markRanges = [[0x300, 0x36f], [0x1ab0, 0x1abe], [0x1dc0, 0x1dff], [0x20d0, 0x20f0], [0xfe20, 0xfe2f],
  [0x1ac1, 0x1ace], [0x0898, 0x089f]];
const mark = () => { const [lo, hi] = pick(markRanges); return cp(lo, hi); };
const combiners = [
  () => repeat(between(1, 8), () => pick([..."aeiouxyzAEIOUαβγδЖжЯя"]) + repeat(between(1, 4), mark)),
  () => sentence().normalize("NFD").replace(/[a-z]/g, (c) => (chance(0.2) ? c + mark() : c)),
  () => pick(["Tiếng Việt có dấu", "Ångström café naïve coöperate", "Ελληνικά άλφα ΰ", "Zürich Øresund Łódź",
    "façade jalapeño résumé", "Đà Nẵng Huế", "Ḁḁ Ḿḿ Ẽẽ Ỹỹ"]).normalize(pick(["NFD", "NFC", "NFKD"])),
  () => repeat(between(1, 6), () => cp(0x1100, 0x1112) + cp(0x1161, 0x1175) + (chance(0.5) ? cp(0x11a8, 0x11c2) : "")),
  () => repeat(between(2, 8), () => cp(0x915, 0x939) + pick(["\u094d", "\u093e", "\u093f", "\u0940", "\u0902", ""])),
  () => repeat(between(2, 8), () => cp(0xe01, 0xe2e) + pick(["\u0e34", "\u0e35", "\u0e48", "\u0e49", "\u0e4a", ""])),
  () => repeat(between(2, 8), () => cp(0x628, 0x64a) + pick(["\u064b", "\u064e", "\u064f", "\u0650", "\u0651", ""])),
  () => repeat(between(2, 8), () => cp(0x5d0, 0x5ea) + pick(["\u05b0", "\u05b4", "\u05b7", "\u05bc", "\u05c1", ""])),
  () => "Z" + repeat(between(10, 40), mark) + "algo " + repeat(between(2, 6), () => word() + repeat(between(1, 6), mark) + " "),
  () => repeat(between(3, 20), mark),  // marks with no base
];
for (let i = 0; i < 100; ++i) emit("combining", "generated", pick(combiners)());

// Digits: long runs, separators, every script's digits, numeric letters.
const digitSets = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯", "０１２３４５６７８９",
  "๐๑๒๓๔๕๖๗๘๙", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗", "⁰¹²³⁴⁵⁶⁷⁸⁹", "₀₁₂₃₄₅₆₇₈₉", "ⅠⅡⅢⅣⅤⅥⅦⅧⅨⅩⅪⅫ", "①②③④⑤⑥⑦⑧⑨", "½¼¾⅓⅔⅛"];
const digits = (n, set = "0123456789") => repeat(n, () => pick([...set]));
const numberForms = [
  () => digits(between(1, 400)),
  () => digits(between(1, 30), pick(digitSets)),
  () => `${digits(between(1, 3))}${repeat(between(1, 6), () => "," + digits(3))}.${digits(between(1, 4))}`,
  () => `${pick(["-", "+", ""])}${digits(between(1, 5))}.${digits(between(1, 20))}e${pick(["-", "+", ""])}${digits(2)}`,
  () => `0x${repeat(between(1, 16), () => pick([..."0123456789abcdefABCDEF"]))} 0b${digits(between(1, 32), "01")}`,
  () => `${digits(4)}-${digits(2)}-${digits(2)}T${digits(2)}:${digits(2)}:${digits(2)}.${digits(3)}Z`,
  () => repeat(between(2, 12), () => digits(between(1, 9)) + pick([" ", ",", ".", "/", ":", "-", "", "x", "%"])),
  () => `${word()}${digits(between(1, 8))}${word()}${digits(between(1, 8), pick(digitSets))}`,
  () => `+${digits(2)} (${digits(3)}) ${digits(3)}-${digits(4)}  ${digits(16).replace(/(\d{4})(?=\d)/g, "$1 ")}`,
];
for (let i = 0; i < 90; ++i) emit("digits", "generated", pick(numberForms)());

// Whitespace: runs of every kind between words; leading and trailing; indentation; line endings.
const spaces = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00A0", "\u3000", "\u2003", "\u2009", "\u200B", "\u2028",
  "\u2029", "\u0085", "\v", "\f", "\u180E", "\u202F", "\uFEFF", "\u1680"];
const run = () => repeat(between(1, 12), () => pick(spaces));
const whitespaceForms = [
  () => repeat(between(2, 10), () => word() + run()),
  () => run() + sentence() + run(),
  () => repeat(between(2, 8), () => repeat(between(0, 6), () => pick(["\t", "    ", "  "])) + sentence() + pick(["\n", "\r\n"])),
  () => repeat(between(1, 200), () => pick([" ", "\t", "\n"])),
  () => " ".repeat(between(1, 300)) + word(),
  () => sentence() + "\n".repeat(between(2, 40)) + sentence(),
  () => repeat(between(2, 6), () => sentence() + "\r\n"),
  () => repeat(between(2, 20), () => pick(spaces)) + "x" + repeat(between(2, 20), () => pick(spaces)),
];
for (let i = 0; i < 100; ++i) emit("whitespace", "generated", pick(whitespaceForms)());

// Special tokens of every family inside text (each family's tokens are plain text to the others), whole,
// partial, adjacent, at the edges and next to whitespace.
const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
  "<|vision_start|>", "<|image_pad|>", "<|fim_prefix|>", "<|fim_middle|>", "<|begin_of_text|>", "<|end_of_text|>",
  "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_7|>", "<|python_tag|>"];
const partials = ["<|im_", "<|im_end", "im_end|>", "<|endoftext", "endoftext|>", "<| im_end |>", "<|eot", "< |eot_id|>",
  "<|EOT_ID|>", "<|begin_of", "<think", "think>", "<|", "|>"];
const specialForms = [
  () => repeat(between(1, 6), () => pick(specials) + (chance(0.5) ? sentence() : word()) + pick(["", " ", "\n", "\n\n"])),
  () => `<|im_start|>${pick(["system", "user", "assistant"])}\n${sentence()} ${sentence()}<|im_end|>\n`
    + (chance(0.5) ? "<|im_start|>assistant\n<think>\n" + sentence() + "\n</think>\n\n" + sentence() : ""),
  () => `<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n${sentence()}<|eot_id|>`,
  () => repeat(between(2, 10), () => pick(specials)),
  () => repeat(between(2, 8), () => word() + pick(partials) + pick(["", " "])),
  () => sentence() + pick(specials) + pick(specials) + " " + pick(partials) + pick(specials) + "\n " + word(),
  () => `${pick(specials)}  ${word()}  ${pick(specials)}\t${pick(specials)}\n`,
];
for (let i = 0; i < 110; ++i) emit("special_tokens", "generated", pick(specialForms)());

// URLs, e-mail addresses and paths.
const hosts = ["example.com", "www.example.org", "api.github.com", "例え.jp", "münchen.de", "xn--mnchen-3ya.de",
  "localhost:8080", "127.0.0.1", "[::1]:443", "sub.domain.co.uk", "пример.рф", "مثال.مصر"];
const segment = () => pick([word(), digits(between(1, 6)), "v1", "%E4%BD%A0%E5%A5%BD", "～user", "a_b-c.d", "中文"]);
const urlForms = [
  () => `${pick(["https", "http", "ftp", "ws", "git+ssh"])}://${pick(hosts)}/${repeat(between(0, 5), () => segment() + "/")}`
    + (chance(0.6) ? `?${repeat(between(1, 4), () => `${word()}=${segment()}&`)}` : "")
    + (chance(0.3) ? `#${word()}` : ""),
  () => `${word()}.${word()}+${digits(3)}@${pick(hosts)}`,
  () => `See <${pick(["https", "http"])}://${pick(hosts)}/${segment()}> or [link](https://${pick(hosts)}/${segment()}).`,
  () => `C:\\Users\\${word()}\\AppData\\Local\\${segment()}\\file (${digits(1)}).txt`,
  () => `/usr/${pick(["lib", "share", "include"])}/${segment()}/${segment()}.${pick(["so.6", "h", "py", "gz"])}:${digits(3)}:${digits(2)}`,
  () => `data:text/plain;base64,${repeat(between(8, 80), () => pick([..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"]))}==`,
];
for (let i = 0; i < 60; ++i) emit("url", "generated", pick(urlForms)());

// JSON documents: nested values, escapes, Unicode strings, compact and indented.
const jsonString = () => pick([word(), sentence(), "你好，世界", "line\nbreak\ttab \"quoted\" back\\slash", oneEmoji(),
  "e\u0301", "<|im_end|>", "", " ", "\u00e9\u00e8"]);
const jsonValue = (depth) => {
  const kind = below(depth > 2 ? 4 : 6);
  if (kind === 0) return chance(0.5) ? between(-1000000, 1000000) : Number((next() / 1000.0 - 2e6).toFixed(between(0, 6)));
  if (kind === 1) return jsonString();
  if (kind === 2) return pick([true, false, null]);
  if (kind === 3) return chance(0.5) ? 1e-9 * between(1, 999) : 1.5e300;
  if (kind === 4) return Array.from({ length: between(0, 5) }, () => jsonValue(depth + 1));
  return Object.fromEntries(Array.from({ length: between(1, 5) }, () => [word() + (chance(0.3) ? "_" + word() : ""), jsonValue(depth + 1)]));
};
for (let i = 0; i < 60; ++i) {
  const doc = jsonValue(chance(0.2) ? 4 : 0);
  const text = JSON.stringify(doc, null, pick([undefined, 2, 4, "\t"]));
  emit("json", "generated", chance(0.2) ? JSON.stringify(JSON.stringify(doc)) : text);
}

// Math in Unicode and LaTeX written out.
const mathForms = [
  () => `∑_{i=1}^{${digits(1)}} i² = n(n+1)/2, ∀x∈ℝ: x²≥0, √${digits(2)} ≈ ${digits(1)}.${digits(4)}, ∞ ≠ −∞`,
  () => `𝑓(𝑥) = 𝑥${pick(["²", "³", "ⁿ"])} + ${digits(1)}𝑥 − ${digits(2)}; 𝔸 ⊂ 𝕏, ℵ₀ < 𝔠, ∮ E·dl = −dΦ/dt`,
  () => `$$\\int_{${digits(1)}}^{\\infty} e^{-x^{2}}\\,dx = \\frac{\\sqrt{\\pi}}{2}$$ and \\(\\binom{${digits(2)}}{${digits(1)}}\\)`,
  () => `\\begin{align}\n  a_{n+1} &= ${digits(1)}a_n + ${digits(2)} \\\\\n  \\lim_{n\\to\\infty} \\frac{a_n}{${digits(1)}^n} &= \\boxed{${digits(2)}}\n\\end{align}`,
  () => `<<${digits(2)}*${digits(2)}=${digits(4)}>>${digits(4)} so the answer is #### ${digits(between(1, 6))}`,
];
for (let i = 0; i < 50; ++i) emit("math_unicode", "generated", pick(mathForms)());

// Code written out in languages with no sources on this machine.
const codeForms = [
  () => `fn ${word()}(x: &[u8]) -> Result<Vec<u32>, Error> {\n    let mut v = Vec::with_capacity(${digits(2)});\n    for &b in x { v.push(b as u32 * ${digits(1)}); }\n    Ok(v)\n}`,
  () => `public static int ${word()}(int[] a) {\n\tint s = 0;\n\tfor (int i = 0; i < a.length; i++) s += a[i];\n\treturn s; // ${sentence()}\n}`,
  () => `SELECT ${word()}, COUNT(*) AS n FROM ${word()}s WHERE id > ${digits(3)} AND name LIKE '%${word()}%' GROUP BY 1 ORDER BY n DESC;`,
  () => `<div class="${word()}" data-id="${digits(4)}">\n  <p>${sentence()}</p>\n  <!-- ${sentence()} -->\n</div>`,
  () => `local function ${word()}(t)\n  for k, v in pairs(t) do print(k, v) end\nend -- ${sentence()}`,
  () => `${word()}:\n  image: "registry/${word()}:${digits(1)}.${digits(2)}"\n  env:\n    - KEY=${word()}\n    - PORT=${digits(4)}\n`,
  () => `let ${word()} = [${repeat(between(1, 6), () => digits(between(1, 3)) + ", ")}] |> List.map (fun x -> x * x)`,
  () => `#!/usr/bin/env python3\nimport ${word()}\n\ndef f(x: int) -> int:\n    """${sentence()}"""\n    return x ** ${digits(1)}\n`,
];
for (let i = 0; i < 60; ++i) emit("code_generated", "generated", pick(codeForms)());

// Mixed scripts: fragments of the texts above glued together.
const fragments = out.filter((c) => c.text.length < 300).map((c) => c.text);
for (let i = 0; i < 120; ++i) {
  const text = repeat(between(2, 4), () => {
    const f = pick(fragments);
    const start = below(Math.max(1, f.length - 40));
    return [...f.slice(start, start + between(5, 80))].join("") + pick(["", " ", "\n", " — ", "：", "。"]);
  });
  // Slicing by UTF-16 units may split a surrogate pair: drop lone halves.
  emit("mixed", "generated", text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, ""));
}

// Long texts: repeated characters (merge ties), whole files' worth of prose.
for (const [c, n] of [["a", 1000], ["=", 500], ["-", 301], ["😀", 200], ["中", 600], ["\n", 700], [" ", 999],
  ["ab", 500], ["\r\n", 300], ["'s", 200], ["\t", 400], ["0", 1000], ["é", 500], ["ل", 500]]) {
  emit("long_repeat", "generated", c.repeat(n));
}
windows("long_prose", licences, 12, { maxLines: 40, minChars: 1500 });

// Letters and numbers assigned in Unicode 15.0 - 16.0, which PCRE2 10.42's tables (Unicode 14) lack and
// Hugging Face's Oniguruma has: Todhri, Garay, Tulu-Tigalari, Kawi, Egyptian Hieroglyphs Extended-A, Gurung Khema,
// Kirat Rai, Cyrillic Extended-D, Nag Mundari, Ol Onal, CJK Extensions H and I; Kaktovik, Sunuwar, Myanmar
// Extended-C, Outlined and Segmented digits, ... (see kUnicode16Letters in src/text/tokenizer.cpp).
const newLetters = [[0x1c89, 0x1c8a], [0xa7cb, 0xa7cd], [0x105c0, 0x105f3], [0x10d4a, 0x10d65], [0x11380, 0x11389],
  [0x11bc0, 0x11be0], [0x11f04, 0x11f10], [0x13460, 0x143fa], [0x16100, 0x1611d], [0x16d40, 0x16d6c],
  [0x1e030, 0x1e06d], [0x1e4d0, 0x1e4eb], [0x1e5d0, 0x1e5ed], [0x2ebf0, 0x2ee5d], [0x31350, 0x323af]];
const newNumbers = [[0x10d40, 0x10d49], [0x116d0, 0x116e3], [0x11bf0, 0x11bf9], [0x11f50, 0x11f59],
  [0x16130, 0x16139], [0x16d70, 0x16d79], [0x1ccf0, 0x1ccf9], [0x1d2c0, 0x1d2d3], [0x1e4f0, 0x1e4f9],
  [0x1e5f1, 0x1e5fa]];
for (const [lo, hi] of newLetters) {
  for (let i = 0; i < 2; ++i) {
    emit("unicode_new", "generated", `${word()} ${repeat(between(1, 4), () => cp(lo, hi))}${pick(["", "中文", "abc", " 123", "'s"])} ${word()}`);
  }
}
for (const [lo, hi] of newNumbers) {
  for (let i = 0; i < 2; ++i) {
    emit("unicode_new", "generated", `${word()} ${repeat(between(1, 5), () => cp(lo, hi))} ${digits(2)}${cp(lo, hi)}${digits(2)} ${word()}`);
  }
}

for (const c of out) console.log(JSON.stringify(c));
console.error(`corpus.mjs: ${out.length} texts, ${Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(", ")}`);
