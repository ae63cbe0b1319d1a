#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Times Hugging Face's own (Rust) tokenizer, PyPI's `tokenizers`, encoding the texts of a corpus (JSON lines with a
"text", e.g. tests/text/data/corpus.jsonl). Run by benchmarks/bench_tokenizer beside grpo's encode on the same texts.
Usage:
    python time_encode.py <dir with tokenizer.json> <corpus.jsonl> [repeats = 3]
After one warm-up pass over all texts, each timed pass encodes every text (add_special_tokens = true):
    single: one encode() call per text (one text at a time, as grpo's encode);
    batch:  one encode_batch() call with all texts (the Rust side spreads them over its thread pool).
Prints one JSON line: the best pass of each in seconds, the input bytes and the token count."""
import json
import sys
import time

from tokenizers import Tokenizer

from hf_reference import read_corpus


def best(run, repeats):
    """(fewest seconds of `repeats` calls of run(), the token count it returned)."""
    seconds, tokens = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = run()
        seconds = min(seconds, time.perf_counter() - start)
    return seconds, tokens


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python time_encode.py <tokenizer dir> <corpus.jsonl> [repeats]")
    tokenizer = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
    texts = read_corpus(sys.argv[2])
    repeats = int(sys.argv[3]) if len(sys.argv) == 4 else 3

    def single():
        return sum(len(tokenizer.encode(text, add_special_tokens=True).ids) for text in texts)

    def batch():
        return sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=True))

    single(), batch()  # warm-up: page in the tables, fill any caches
    single_seconds, tokens = best(single, repeats)
    batch_seconds, batch_tokens = best(batch, repeats)
    print(json.dumps({"single_seconds": single_seconds, "batch_seconds": batch_seconds,
                      "bytes": sum(len(t.encode("utf-8")) for t in texts), "tokens": tokens,
                      "batch_tokens": batch_tokens, "texts": len(texts)}))


if __name__ == "__main__":
    main()
