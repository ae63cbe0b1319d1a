#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads test cases as JSON lines on stdin and prints, per case, the ids Hugging Face's own (Rust) tokenizer gives,
as JSON lines. Usage:
    python reference.py <dir with tokenizer.json and tokenizer_config.json> < cases.jsonl > reference.jsonl
A case is one of
    {"category": "...", "text": "..."}                  text to encode
    {"category": "...", "hex": "ff41"}                  raw bytes, possibly invalid UTF-8: decoded to text the way
                                                       grpo's InvalidUtf8::replace does (maximal subparts become
                                                       U+FFFD, as WHATWG's TextDecoder), then encoded
    {"category": "chat", "messages": [{"role", "content"}...], "add_generation_prompt": bool,
     "enable_thinking": bool (optional)}                rendered with tokenizer_config.json's chat_template (as
                                                       transformers renders it) and encoded without special tokens
plus "add_special_tokens" (default true). Every string the C++ test reads is written as hex of its UTF-8 bytes so
that the test needs no JSON parser: "bytes", "decoded" (omitted when equal to the input), and "decoded_skip_special"
(omitted when equal to "decoded"), and for chat "roles" and "contents"; a chat case's rendered text is its
"decoded". (Read one with: python3 -c 'import sys; print(bytes.fromhex(sys.argv[1]).decode())' HEX)"""
import json
import sys

from hf_reference import load, render_chat


def hex_of(text):
    return text.encode("utf-8").hex()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python reference.py <tokenizer dir> < cases.jsonl")
    tokenizer, config = load(sys.argv[1])
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        out = {"category": case["category"]}
        if "messages" in case:
            thinking = case.get("enable_thinking")
            text = render_chat(config, case["messages"], case["add_generation_prompt"], thinking)
            out["add_generation_prompt"] = case["add_generation_prompt"]
            if thinking is not None:
                out["enable_thinking"] = thinking
            out["roles"] = [hex_of(m["role"]) for m in case["messages"]]
            out["contents"] = [hex_of(m["content"]) for m in case["messages"]]
            out["add_special_tokens"] = False
        else:
            out["add_special_tokens"] = case.get("add_special_tokens", True)
            if "hex" in case:
                out["bytes"] = case["hex"]
                text = bytes.fromhex(case["hex"]).decode("utf-8", errors="replace")
            else:
                text = case["text"]
                out["bytes"] = hex_of(text)
        out["ids"] = tokenizer.encode(text, add_special_tokens=out["add_special_tokens"]).ids
        # Omitted when equal to the input bytes (resp. to "decoded"), which is the common case.
        decoded = hex_of(tokenizer.decode(out["ids"], skip_special_tokens=False))
        decoded_skip = hex_of(tokenizer.decode(out["ids"], skip_special_tokens=True))
        if decoded != out.get("bytes"):
            out["decoded"] = decoded  # for chat: the rendered text (decoding is lossless)
        if decoded_skip != decoded:
            out["decoded_skip_special"] = decoded_skip
        print(json.dumps(out, ensure_ascii=False, separators=(",", ":")))


if __name__ == "__main__":
    main()
