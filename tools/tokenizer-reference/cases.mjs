// SPDX-License-Identifier: Apache-2.0
// Prints the parity test cases as JSON lines (input of reference.mjs). Deterministic: the random cases come
// from a fixed-seed generator, so the fixtures only change when this file does.
//   node cases.mjs qwen3 | node cases.mjs llama3 | node cases.mjs gpt2
const family = process.argv[2] ?? "qwen3";
const cases = [];
// Llama 3's post-processor prepends <|begin_of_text|>; most Llama cases leave it out to keep the fixture small.
const text = (category, t, extra = {}) =>
  cases.push({ category, text: t, ...(family === "llama3" ? { add_special_tokens: false } : {}), ...extra });

text("english", "The quick brown fox jumps over the lazy dog.");
text("english", "Hello, world! How are you doing today? I'm fine; thanks.");
text("english", "It's they're we've I'M YOU'LL she'D don't 'S 'sup O'Neill rock'n'roll");
text("english", "GRPO samples G completions per prompt and normalises rewards within each group.");
text("english", "   leading and trailing spaces   ");
text("english", "");
text("english", " ");
text("english", "a");
text("chinese", "你好，世界！今天天气很好。");
text("chinese", "强化学习中的组相对策略优化（GRPO）不需要价值函数。");
text("chinese", "混合English和中文mixed文本123个");
text("cjk", "日本語のテキストです。カタカナとひらがな。");
text("cjk", "한국어 텍스트입니다. 안녕하세요!");
text("scripts", "Привет, мир! Ελληνικά. العربية نص. עברית. हिन्दी पाठ। ภาษาไทย");
text("code", "def f(x):\n    return x ** 2 + 1\n\n\nprint(f(3))\n");
text("code", "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v[0];\n}\n");
text("code", '{"key": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}');
text("code", "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot product");
text("code", "$$\\frac{1}{2} + \\sqrt{x^2 + y^2} = \\boxed{42}$$");
text("code", "https://example.com/path?query=1&b=%20x#frag user@example.org");
text("emoji", "I love it 😀😃😄! 👍🏽 👨‍👩‍👧‍👦 🇺🇸🇯🇵 1️⃣ ❤️ 🏳️‍🌈");
text("emoji", "🤖🤖🤖 robots 🚀");
text("combining", "e\u0301 a\u0300 o\u0308 n\u0303 Ame\u0301lie cafe\u0301");
text("combining", "\u212B \u2126 \u1100\u1161\u11A8 \uFB01 \u00BD x\u0323\u0307 q\u0307\u0323");
text("combining", "\u0915\u094D\u0937 \u0e01\u0e34\u0e4a Z\u0351\u036B\u0343\u036A\u0302\u036B\u033D\u034F\u0334");
text("digits", "1234567890123456789012345678901234567890123456789012345678901234567890");
text("digits", "3.14159265358979 1,234,567.89 -42 +7 0x1F 1e-9 2024-11-22 12:30:45");
text("digits", "٠١٢٣٤٥٦٧٨٩ ０１２３ ²³ ½ Ⅻ 一二三");
text("whitespace", "a  b   c    d     e      f");
text("whitespace", "\t\ttabs\tand  spaces \t mixed\t");
text("whitespace", "line1\nline2\n\nline4\n\n\n\nline8");
text("whitespace", "trailing spaces   \n   leading spaces\n \n  \n");
text("whitespace", "                                                                ");
text("whitespace", "\n\n\n\n\n\n\n\n");
text("whitespace", "nbsp\u00A0here ideographic\u3000space en\u2002em\u2003 thin\u2009 line\u2028para\u2029 nel\u0085x");
text("whitespace", "mongolian\u180Evowel zero\u200Bwidth bom\uFEFFx \u001Cfs\u001Fus \u000Bvt\u000Cff");
text("crlf", "line one\r\nline two\r\n\r\nline four\r\n");
text("crlf", "mixed\r\nendings\nhere\rand\r\r\n  \r\n\tthere");
text("long", "a".repeat(300));
text("long", "ab".repeat(150) + " " + "xyz".repeat(100));
text("long", "Supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis");
text("case", "'ſ 'K 'ſt \u212A 'İ 'ß ΣΑΣ 'S'T'RE'VE'M'LL'D");
if (family === "qwen3") {
  text("special", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  text("special", "text<|endoftext|>more<|endoftext|><|endoftext|>end");
  text("special", "<think>\nreasoning here\n</think>\n\nThe answer is 4.<|im_end|>");
  text("special", "partial <|im_start and <|im_end| and <|endoftext |> and <| im_end|>");
  text("special", "<tool_call>\n{\"name\": \"f\"}\n</tool_call><|vision_start|><|image_pad|><|vision_end|>");
  text("special", "<|im_end|>");
} else if (family === "gpt2") {
  text("special", "document one<|endoftext|>document two<|endoftext|><|endoftext|>");
  text("special", "partial <|endoftext and <|endoftext |> and endoftext|>");
} else {
  text("special", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  text("special", "text<|end_of_text|>more<|eot_id|><|eot_id|>end<|reserved_special_token_5|>");
  text("special", "partial <|begin_of and <|eot_id| and < |eot_id|>");
  text("special", "<|eot_id|>", { add_special_tokens: true });
  text("bos", "Hello world", { add_special_tokens: true });
  text("bos", "", { add_special_tokens: true });
}
for (const h of ["ff", "c3", "41c3", "e4bd", "e4bd41", "eda080", "f4908080", "c0af", "80bfc3a9", "f09f98", "f09f9880ff",
                 "48656c6c6fff776f726c64", "e4bda0e5a5bdfe", "fefeff"]) {
  cases.push({ category: "invalid_utf8", hex: h, ...(family === "llama3" ? { add_special_tokens: false } : {}) });
}

// Random strings over pools that stress the split pattern and the merges; xorshift32 with a fixed seed.
let state = { qwen3: 2463534242, llama3: 88172645, gpt2: 521288629 }[family];
const next = () => {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state;
};
const pools = [
  [..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"],
  [..."0123456789"],
  [" ", " ", "  ", "\t", "\n", "\r\n", "\r", "\u00A0", "\u3000"],
  [..."'.,;:!?()[]{}<>/\\|-_=+*&^%$#@~`\""],
  [..."的一是不了人我在有他这为之大来以个中上们"],
  ["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "✨", "🔥"],
  ["e\u0301", "a\u0308", "\u0301", "\u0327c", "\u00E9", "\u1100\u1161"],
  {
    qwen3: ["<|im_start|>", "<|im_end|>", "<think>", "<|endoftext|>", "<|im_"],
    llama3: ["<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<|eot"],
    gpt2: ["<|endoftext|>", "<|endoftext", "endoftext|>"],
  }[family],
  ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"],
];
for (let i = 0; i < 40; ++i) {
  const length = 1 + (next() % 40);
  let s = "";
  for (let j = 0; j < length; ++j) {
    const pool = pools[next() % pools.length];
    s += pool[next() % pool.length];
  }
  text("random", s);
}
// Chat conversations, rendered by the tokenizer_config.json's own template.
const chat = (messages, add_generation_prompt, extra = {}) => {
  if (family !== "gpt2") cases.push({ category: "chat", messages, add_generation_prompt, ...extra });  // no template
};
const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const assistant = (content) => ({ role: "assistant", content });
chat([user("What is 2+2?")], true);
chat([sys("You are a careful math tutor."), user("Solve x^2 = 4.")], true);
chat([sys("Be brief."), user("Hi"), assistant("Hello!"), user("Bye")], false);
// @huggingface/jinja's strip/lstrip/rstrip ignore their argument (Python's strip('\n') keeps spaces), so
// padding with spaces is only used where the template calls trim.
if (family === "qwen3") chat([user("\n\npadded content\n"), assistant("\n\nanswer\n")], false);
else chat([user("  padded content \n "), assistant("\n answer with spaces  ")], false);
chat([sys("S"), user("你好"), assistant("你好！有什么可以帮你？"), user("讲个笑话")], true);
chat([], true);
if (family === "qwen3") {
  chat([user("What is 2+2?")], true, { enable_thinking: false });
  chat([user("What is 2+2?")], true, { enable_thinking: true });
  chat([user("Q1"), assistant("<think>\nfirst thoughts\n</think>\n\nA1"), user("Q2"),
        assistant("<think>second thoughts</think>A2")], false);
  chat([user("Q1"), assistant("<think>\nold\n</think>\n\nA1"), user("Q2")], true);
  chat([user("Q"), assistant("plain answer without think")], false);
  chat([sys("first"), user("u"), sys("second system later")], true);
  chat([user("call a tool"), assistant("calling"), { role: "tool", content: "result 1" },
        { role: "tool", content: "result 2" }], true);
  chat([user("<tool_response>\nnot a query\n</tool_response>"), assistant("<think>t</think>A")], false);
}
for (const c of cases) console.log(JSON.stringify(c));
