// SPDX-License-Identifier: Apache-2.0
// GGML tensor types, as GGUF files store weights: the plain float types and the block-quantized ones of the common
// llama.cpp files (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q4_K, Q5_K, Q6_K of Q4_K_M / Q5_K_M files).
// A quantized row is a sequence of blocks of `block_elements` values stored in `block_bytes` bytes: fp16 scales
// (and minimums) and packed integers. Dequantization follows ggml-quants.c (dequantize_row_*) and the `gguf` Python
// package's quants.py operation by operation, each product and difference rounded to fp32 as there, so that the values
// are bit-identical to `gguf.quants.dequantize` (tests/io/gguf_test.cpp checks every type against it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace grpo::io {

/// The type ids of ggml.h (enum ggml_type) that this library reads.
enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  bf16 = 30,
};

/// How a type is laid out: `block_elements` values in `block_bytes` bytes (1 value for the float types).
struct GgmlTypeLayout {
  GgmlType type;
  std::string_view name;  ///< as ggml spells it: "F32", "Q4_K", ...
  std::int64_t block_elements;
  std::int64_t block_bytes;
};

/// The layout of the type with ggml id `id`, or nullopt for an id this library does not read.
std::optional<GgmlTypeLayout> ggml_type_layout(std::uint32_t id);

/// ggml's name of any type id it defines ("IQ2_XXS" for 16, ...), for error messages; "<id> (unknown to ggml)" for an
/// id ggml does not define.
std::string ggml_type_name(std::uint32_t id);

/// The names of the types this library reads, for error messages ("F32, F16, BF16, Q4_0, ...").
std::string supported_ggml_types();

/// Dequantizes `count` values of type `type` from `data` (count / block_elements blocks; count must be a multiple of
/// block_elements) into `out` (count floats). NaN and infinity in fp16/bf16 scales are carried as ggml carries them.
void dequantize_ggml(GgmlType type, const std::uint8_t* data, std::int64_t count, float* out);

}  // namespace grpo::io
