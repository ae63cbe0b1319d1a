#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reference ids of the parity corpus from Hugging Face's own (Rust) tokenizer. Usage:
    python corpus_ids.py <dir with tokenizer.json> < ../../tests/text/data/corpus.jsonl > ids.txt
Reads the corpus (JSON lines with a "text", written by corpus.mjs) and prints, for each text in order, its ids
(encode with add_special_tokens = true, Hugging Face's default) as one line of space-separated integers, the smallest
form that needs no parser. Where Hugging Face's decode(encode(text)) (without the post-processor's tokens, e.g.
Llama 3's <|begin_of_text|>) is not the text itself, which happens only when the normalizer changes it (Qwen's NFC
on decomposed or misordered marks), a tab and the hex of the UTF-8 of that decode follow the ids; the test checks
decode(encode(x)) == x on every other line."""
import sys

from tokenizers import Tokenizer

from hf_reference import read_corpus


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python corpus_ids.py <tokenizer dir> < corpus.jsonl > ids.txt")
    tokenizer = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
    for text in read_corpus(sys.stdin):
        ids = " ".join(map(str, tokenizer.encode(text, add_special_tokens=True).ids))
        decoded = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False).ids, skip_special_tokens=False)
        print(ids if decoded == text else f"{ids}\t{decoded.encode('utf-8').hex()}")


if __name__ == "__main__":
    main()
