#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The real-model GGUF checks' reference side (tests/models/real_gguf_check.sh runs both commands):

    real_file_reference.py reference MODEL.gguf OUT
        OUT/checksums.json    per tensor: gguf.quants.dequantize's float32 values folded into one integer
                              (sum over i of (bits_i * (i mod 65521 + 1)) mod (2^31 - 1)), and the element count
        OUT/logits.safetensors  input_ids (a chat prompt) and transformers' float32 logits on them
                              (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...))
        OUT/tokens.json       texts (tests/text/data/corpus.jsonl and edge cases) and the ids of transformers' GGUF
                              tokenizer, with the pre-tokenizer llama.cpp gives the file's tokenizer.ggml.pre where the
                              two differ (make_fixtures.with_llama_cpp_pre_tokenizer), and how many texts that changes
    real_file_reference.py converted DIR OUT
        loads the directory `grpo convert` wrote with transformers (AutoModelForCausalLM, AutoTokenizer) and checks its
        logits against OUT/logits.safetensors (1e-4) and its ids against OUT/tokens.json (exact); exit status 1 if not.
"""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import EDGE_TEXTS, with_llama_cpp_pre_tokenizer  # noqa: E402

PRIME = 2**31 - 1
PROMPT = [{"role": "user", "content": "Natalia sold clips to 48 of her friends in April, and then she sold half as "
                                      "many clips in May. How many clips did Natalia sell altogether?"}]


def checksum(values):
    bits = np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    weights = (np.arange(bits.size, dtype=np.uint64) % 65521) + 1
    return int(((bits * weights) % PRIME).sum())


def corpus_texts():
    corpus = Path(__file__).resolve().parents[2] / "tests" / "text" / "data" / "corpus.jsonl"
    lines = corpus.read_text(encoding="utf-8").split("\n")
    return [json.loads(line)["text"] for line in lines if line] + EDGE_TEXTS


def reference(gguf_path, out):
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    reader = GGUFReader(str(gguf_path))
    sums = {t.name: [str(checksum(dequantize(t.data, t.tensor_type))), int(t.n_elements)] for t in reader.tensors}
    (out / "checksums.json").write_text(json.dumps(sums) + "\n")

    pre = str(reader.fields["tokenizer.ggml.pre"].contents())
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    texts = corpus_texts()
    as_given = [tokenizer.encode(text) for text in texts]
    tokenizer = with_llama_cpp_pre_tokenizer(tokenizer, pre)
    ids = [tokenizer.encode(text) for text in texts]
    differs = sum(a != b for a, b in zip(as_given, ids))
    (out / "tokens.json").write_text(json.dumps({"pre": pre, "texts": texts, "ids": ids,
                                                 "differs_from_transformers": differs}, ensure_ascii=False) + "\n")

    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True, return_dict=False)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                 dtype=torch.float32)
    input_ids = torch.tensor([list(prompt)])
    with torch.no_grad():
        logits = model(input_ids).logits.contiguous()
    save_file({"input_ids": input_ids, "logits": logits}, str(out / "logits.safetensors"))
    print(f"reference: {len(sums)} tensors, {len(texts)} texts ({differs} tokenized differently by transformers' "
          f"own GGUF tokenizer, pre-tokenizer '{pre}'), logits {tuple(logits.shape)}")


def converted(directory, out):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    expected = load_file(str(out / "logits.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    with torch.no_grad():
        logits = model(expected["input_ids"]).logits
    error = (logits.double() - expected["logits"].double()).abs().max().item()
    tokens = json.loads((out / "tokens.json").read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    wrong = [i for i, (text, ids) in enumerate(zip(tokens["texts"], tokens["ids"])) if tokenizer.encode(text) != ids]
    chat = list(tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True, return_dict=False))
    chat_ok = chat == expected["input_ids"][0].tolist()
    print(f"converted directory in transformers: logits within {error:.2e} of its GGUF loading, "
          f"{len(tokens['texts']) - len(wrong)}/{len(tokens['texts'])} texts tokenized identically, "
          f"chat prompt {'identical' if chat_ok else 'DIFFERENT'}")
    if error > 1e-4 or wrong or not chat_ok:
        for i in wrong[:5]:
            print(f"  text {i}: {tokens['texts'][i]!r}")
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("reference", "converted"):
        sys.exit("usage: real_file_reference.py reference MODEL.gguf OUT | converted DIR OUT")
    (reference if sys.argv[1] == "reference" else converted)(Path(sys.argv[2]), Path(sys.argv[3]))
