#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the GGUF fixtures of tests/io/gguf_test.cpp with llama.cpp's own `gguf` package (scripts/requirements.txt):
    .venv/bin/python tools/gguf-reference/make_fixtures.py tests/data/gguf
quants.gguf   one [3, 512] tensor per GGML type the library reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
              Q5_K, Q6_K), plus a 1-d and a 3-d one; metadata of every GGUF value type; alignment 64.
              Quantized tensors are random bytes (every packed bit pattern occurs) with finite fp16 scales (negative,
              subnormal and zero ones among them); float tensors hold random values, -0.0, ±inf and fp16 subnormals.
expected.gguf the same tensors as F32: gguf.quants.dequantize of each, the values the reader must give bit for bit.
Deterministic (a fixed seed), so running it again rewrites the same bytes."""
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

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
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()


if __name__ == "__main__":
    main()
