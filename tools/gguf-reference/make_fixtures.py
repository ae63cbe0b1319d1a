#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the GGUF fixtures of tests/io/gguf_test.cpp with llama.cpp's own `gguf` package (scripts/requirements.txt):
    .venv/bin/python tools/gguf-reference/make_fixtures.py tests/data/gguf
quants.gguf   one [3, 512] tensor per GGML type the library reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
              Q5_K, Q6_K), plus a 1-d and a 3-d one; metadata of every GGUF value type; alignment 64.
              Quantized tensors are random bytes (every packed bit pattern occurs) with finite fp16 scales (negative,
              subnormal and zero ones among them); float tensors hold random values, -0.0, ±inf and fp16 subnormals.
expected.gguf the same tensors as F32: gguf.quants.dequantize of each, the values the reader must give bit for bit.
tiny_llama.gguf, tiny_qwen2.gguf
              random tiny decoders written as llama.cpp's convert_hf_to_gguf.py writes them (llama: q and k rows
              permuted, tied embeddings; qwen2: q/k/v biases, an untied output.weight), attention weights in Q8_0,
              feed-forward weights in F16, the rest F32.
tiny_logits.safetensors
              transformers' float32 logits of each on `input_ids` (AutoModelForCausalLM.from_pretrained(dir,
              gguf_file=...), which undoes llama's permutation itself): what the library's GGUF loading must give.
tokenizer_<pre>.gguf (pre = gpt2, smollm, llama-bpe, qwen2)
              a byte-level BPE of 1200 tokens trained on tests/text/data/corpus.jsonl by Hugging Face `tokenizers`,
              as llama.cpp's converter writes it: tokens, merges, token types (3 control tokens, 2 user-defined),
              tokenizer.ggml.pre, special ids; smollm without tokens for bytes 0x04 and 0xF5 (as SmolLM2 lacks 21),
              llama-bpe with add_bos_token, smollm and qwen2 with chat templates.
tokenizer_expected.json
              texts (every 12th corpus line and edge cases) and transformers' ids and decoded text for each file
              (AutoTokenizer.from_pretrained(dir, gguf_file=...)), with the pre-tokenizer llama.cpp applies where
              transformers differs from it (see write_tokenizers); special ids; chat prompts' ids.
Deterministic (fixed seeds), so running it again rewrites the same bytes."""
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

# Byte offsets of each block's fp16 fields (scales, minimums), by type.
HALF_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2],
               Q.Q6_K: [GGML_QUANT_SIZES[Q.Q6_K][1] - 2]}
ROWS, COLUMNS = 3, 512


def random_halves(rng, n):
    """Finite fp16 values: mostly N(0, 0.05), with a zero, a negative subnormal and a large value among them."""
    values = (rng.standard_normal(n) * 0.05).astype(np.float16)
    values[:3] = np.array([0.0, -3.0e-6, 60000.0], dtype=np.float16)[: min(3, n)]
    return values


def quantized(rng, qtype, rows, columns):
    block_elements, block_bytes = GGML_QUANT_SIZES[qtype]
    blocks = rows * columns // block_elements
    data = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    for offset in HALF_FIELDS[qtype]:
        data[:, offset:offset + 2] = random_halves(rng, blocks).view(np.uint8).reshape(blocks, 2)
    return data.reshape(rows, columns // block_elements * block_bytes)


def floats(rng, rows, columns):
    values = (rng.standard_normal((rows, columns)) * 2.0).astype(np.float32)
    values[0, :4] = [-0.0, np.inf, -np.inf, 3.0e-7]
    return values


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_fixtures.py <output dir>")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261128)
    stored, expected = {}, {}
    for qtype in HALF_FIELDS:
        data = quantized(rng, qtype, ROWS, COLUMNS)
        stored[qtype.name] = (data, qtype)
        expected[qtype.name] = dequantize(data, qtype).reshape(ROWS, COLUMNS)
    f32 = floats(rng, ROWS, COLUMNS)
    stored["F32"], expected["F32"] = (f32, None), f32
    f16 = f32.astype(np.float16)
    stored["F16"], expected["F16"] = (f16, None), dequantize(f16.view(np.uint8), Q.F16).reshape(ROWS, COLUMNS)
    bf16 = (f32.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16: any bit pattern is a bf16 value
    stored["BF16"] = (bf16.view(np.uint8), Q.BF16)
    expected["BF16"] = dequantize(bf16.view(np.uint8), Q.BF16).reshape(ROWS, COLUMNS)
    vector = np.arange(32, dtype=np.float32) / 4  # a 1-d tensor, and a 3-d one of Q8_0
    stored["vector"], expected["vector"] = (vector, None), vector
    cube = quantized(rng, Q.Q8_0, 2 * 3, 64)
    stored["cube"] = (cube.reshape(2, 3, -1), Q.Q8_0)
    expected["cube"] = dequantize(cube, Q.Q8_0).reshape(2, 3, 64)

    quants = GGUFWriter(out / "quants.gguf", arch="llama")
    quants.add_custom_alignment(64)
    quants.add_uint8("test.u8", 200)
    quants.add_int8("test.i8", -100)
    quants.add_uint16("test.u16", 60000)
    quants.add_int16("test.i16", -30000)
    quants.add_uint32("test.u32", 4000000000)
    quants.add_int32("test.i32", -2000000000)
    quants.add_uint64("test.u64", 2**63 + 5)
    quants.add_int64("test.i64", -(2**62))
    quants.add_float32("test.f32", 0.1)
    quants.add_float64("test.f64", 0.1)
    quants.add_bool("test.bool", True)
    quants.add_string("test.string", "héllo, GGUF")
    quants.add_array("test.strings", ["a", "", "ünïcode", "<|im_end|>"])
    quants.add_array("test.ints", [1, -2, 3])
    quants.add_key_value("test.nested", [[1, 2], [3]], GGUFValueType.ARRAY)
    for name, (data, qtype) in stored.items():
        quants.add_tensor(name, data, raw_dtype=qtype)
    reference = GGUFWriter(out / "expected.gguf", arch="llama")
    for name, values in expected.items():
        reference.add_tensor(name, np.ascontiguousarray(values, dtype=np.float32))
    for writer in (quants, reference):
        finish(writer)
    corpus, tokens, merges = train_vocabulary()
    write_tiny_models(out, (tokens, merges))
    write_tokenizers(out, corpus, tokens, merges)


def finish(writer):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def llama_permute(weights, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute: each head's rows from [first half, second half] to pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def write_tiny_model(path, arch, rng, tied, bias, vocabulary=None):
    vocab, hidden, layers, heads, kv_heads, ffn = 64, 64, 2, 4, 2, 96
    if vocabulary is not None:
        vocab, hidden = len(vocabulary[0]), 32
    head_dim = hidden // heads
    writer = GGUFWriter(path, arch=arch)
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    if vocabulary is not None:
        add_tokenizer(writer, "smollm", *vocabulary, add_bos=False)
        writer.add_chat_template(CHAT_TEMPLATES["smollm"])
    else:
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)

    def weight(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def add(name, values, qtype=None):
        if qtype == Q.Q8_0:
            writer.add_tensor(name, quantize(values, Q.Q8_0), raw_dtype=Q.Q8_0)
        elif qtype == Q.F16:
            writer.add_tensor(name, values.astype(np.float16))
        else:
            writer.add_tensor(name, values)

    add("token_embd.weight", weight(vocab, hidden, scale=1.0))
    for i in range(layers):
        q, k = weight(heads * head_dim, hidden), weight(kv_heads * head_dim, hidden)
        if arch == "llama":
            q, k = llama_permute(q, heads, heads), llama_permute(k, heads, kv_heads)
        add(f"blk.{i}.attn_norm.weight", 1.0 + weight(hidden, scale=0.1))
        add(f"blk.{i}.attn_q.weight", q, Q.Q8_0)
        add(f"blk.{i}.attn_k.weight", k, Q.Q8_0)
        add(f"blk.{i}.attn_v.weight", weight(kv_heads * head_dim, hidden), Q.Q8_0)
        if bias:
            add(f"blk.{i}.attn_q.bias", weight(heads * head_dim))
            add(f"blk.{i}.attn_k.bias", weight(kv_heads * head_dim))
            add(f"blk.{i}.attn_v.bias", weight(kv_heads * head_dim))
        add(f"blk.{i}.attn_output.weight", weight(hidden, heads * head_dim), Q.Q8_0)
        add(f"blk.{i}.ffn_norm.weight", 1.0 + weight(hidden, scale=0.1))
        add(f"blk.{i}.ffn_gate.weight", weight(ffn, hidden), Q.F16)
        add(f"blk.{i}.ffn_up.weight", weight(ffn, hidden), Q.F16)
        add(f"blk.{i}.ffn_down.weight", weight(hidden, ffn), Q.F16)
    add("output_norm.weight", 1.0 + weight(hidden, scale=0.1))
    if not tied:
        add("output.weight", weight(vocab, hidden))
    finish(writer)


def write_tiny_models(out, vocabulary):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    rng = np.random.default_rng(7)
    write_tiny_model(out / "tiny_llama.gguf", "llama", rng, tied=True, bias=False)
    write_tiny_model(out / "tiny_qwen2.gguf", "qwen2", rng, tied=False, bias=True)
    write_tiny_model(out / "tiny_smollm.gguf", "llama", rng, tied=True, bias=False, vocabulary=vocabulary)
    input_ids = torch.tensor([[1, 17, 33, 5, 60, 2, 41, 8, 23]])
    tensors = {"input_ids": input_ids}
    for name in ("tiny_llama", "tiny_qwen2", "tiny_smollm"):
        model = AutoModelForCausalLM.from_pretrained(str(out), gguf_file=f"{name}.gguf", dtype=torch.float32)
        with torch.no_grad():
            tensors[name] = model(input_ids).logits.contiguous()
    save_file(tensors, str(out / "tiny_logits.safetensors"))


EDGE_TEXTS = [
    "", " ", "  ", "\n\n\n", "a  1 b\t\t2 x", "In 2024, 12345 apples cost $3.50.", "I'LL don't WE'RE", "x\u0004y \u00f5",
    "<|im_start|>user\nhi<|im_end|>", "<think>\nstep\n</think>\n\nanswer", "caf\u00e9 \u0301 na\u00efve",
    "\U0001F600 emoji \u4e2d\u6587", "tab\tand\r\nwindows", "   leading and trailing   ", "9876543210", "x=1;y=22;z=333",
]

# llama.cpp's pre-tokenizer where transformers' GGUF tokenizer (5.24) leaves GPT-2's: "smollm" splits each digit
# first (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_SMOLLM; SmolLM2's own tokenizer.json has the same Digits step), and
# "llama-bpe" sets ignore_merges (LLAMA_VOCAB_PRE_TYPE_LLAMA3; Llama 3's tokenizer.json too).
LLAMA_CPP_OVERRIDES = {"smollm": "digits", "llama-bpe": "ignore_merges"}


def with_llama_cpp_pre_tokenizer(tokenizer, pre):
    """transformers' GGUF tokenizer changed where llama.cpp (LLAMA_CPP_OVERRIDES) tokenizes otherwise."""
    import json as jsonlib

    from tokenizers import pre_tokenizers
    from tokenizers.models import BPE

    override = LLAMA_CPP_OVERRIDES.get(pre)
    if override == "digits":
        tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif override == "ignore_merges":
        model = jsonlib.loads(tokenizer.backend_tokenizer.to_str())["model"]
        tokenizer.backend_tokenizer.model = BPE(
            model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]],
            ignore_merges=True)
    return tokenizer


def train_vocabulary():
    import json as jsonlib
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    corpus = Path(__file__).resolve().parents[2] / "tests" / "text" / "data" / "corpus.jsonl"
    texts = [jsonlib.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").split("\n") if line]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    model = jsonlib.loads(tokenizer.to_str())["model"]
    tokens = [token for token, _ in sorted(model["vocab"].items(), key=lambda item: item[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    return texts, tokens + ["<think>", "</think>"], merges


CHAT_TEMPLATES = {
    "smollm": ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
               "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
               "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
               "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
               "{% endif %}"),
    "qwen2": ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
              "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
              "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
}


def add_tokenizer(writer, pre, tokens, merges, add_bos):
    """The tokenizer.* keys llama.cpp's converter writes for a byte-level BPE."""
    types = [3 if t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>") else 4 if t in ("<think>", "</think>")
             else 1 for t in tokens]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(add_bos)


def write_tokenizers(out, corpus, tokens, merges):
    import json as jsonlib

    from transformers import AutoTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    texts = corpus[::12] + EDGE_TEXTS
    stand_in = bytes_to_unicode()
    expected = {"texts": texts, "files": {}}
    for pre in ("gpt2", "smollm", "llama-bpe", "qwen2"):
        vocab = list(tokens)
        if pre == "smollm":  # no token for these bytes: both implementations drop them from the text
            dropped = {stand_in[0x04], stand_in[0xF5]}
            assert not any(set(m.split(" ")) & dropped for m in merges)
            vocab = [t for t in vocab if t not in dropped]
        name = f"tokenizer_{pre}.gguf"
        writer = GGUFWriter(out / name, arch="llama")
        add_tokenizer(writer, pre, vocab, merges, add_bos=pre == "llama-bpe")
        if pre in CHAT_TEMPLATES:
            writer.add_chat_template(CHAT_TEMPLATES[pre])
        finish(writer)

        hf = AutoTokenizer.from_pretrained(str(out), gguf_file=name)
        as_given = [hf.encode(text) for text in texts]
        hf = with_llama_cpp_pre_tokenizer(hf, pre)
        ids = [hf.encode(text) for text in texts]
        entry = {
            "ids": ids,
            "decoded": [hf.decode(i) for i in ids],
            "differs_from_transformers": sum(a != b for a, b in zip(as_given, ids)),
            "bos": hf.bos_token_id, "eos": hf.eos_token_id, "pad": hf.pad_token_id,
        }
        if pre in CHAT_TEMPLATES:
            messages = [{"role": "user", "content": "What is 2+3?"}]
            entry["chat_ids"] = list(hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                            return_dict=False))
        expected["files"][name] = entry
        print(f"{name}: {len(vocab)} tokens, {entry['differs_from_transformers']} of {len(texts)} texts differ "
              f"from transformers' own GGUF tokenizer")
    (out / "tokenizer_expected.json").write_text(jsonlib.dumps(expected, ensure_ascii=False) + "\n",
                                                  encoding="utf-8")


if __name__ == "__main__":
    main()
