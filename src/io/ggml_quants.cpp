// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/ggml_quants.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace grpo::io {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF data is little-endian");

constexpr std::int64_t kQK = 256;  // values per K-quant super-block (QK_K)

constexpr std::array<GgmlTypeLayout, 11> kLayouts{{
    {GgmlType::f32, "F32", 1, 4},
    {GgmlType::f16, "F16", 1, 2},
    {GgmlType::bf16, "BF16", 1, 2},
    {GgmlType::q4_0, "Q4_0", 32, 2 + 16},
    {GgmlType::q4_1, "Q4_1", 32, 2 + 2 + 16},
    {GgmlType::q5_0, "Q5_0", 32, 2 + 4 + 16},
    {GgmlType::q5_1, "Q5_1", 32, 2 + 2 + 4 + 16},
    {GgmlType::q8_0, "Q8_0", 32, 2 + 32},
    {GgmlType::q4_k, "Q4_K", kQK, 2 + 2 + 12 + kQK / 2},
    {GgmlType::q5_k, "Q5_K", kQK, 2 + 2 + 12 + kQK / 8 + kQK / 2},
    {GgmlType::q6_k, "Q6_K", kQK, kQK / 2 + kQK / 4 + kQK / 16 + 2},
}};

// ggml.h's names by id (gaps: ids ggml removed).
constexpr std::array<std::string_view, 42> kAllNames{
    "F32",  "F16",    "Q4_0",   "Q4_1",    "",      "",      "Q5_0",   "Q5_1",   "Q8_0",  "Q8_1",  "Q2_K",
    "Q3_K", "Q4_K",   "Q5_K",   "Q6_K",    "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
    "IQ2_S", "IQ4_XS", "I8",    "I16",     "I32",   "I64",   "F64",    "IQ1_M",  "BF16",  "",      "",
    "",     "TQ1_0",  "TQ2_0",  "",        "",      "",      "MXFP4",  "NVFP4",  "Q1_0"};

// One fp32 operation, rounded to fp32: computed in double (exact for a product of two floats; a sum rounded from
// double is the correctly rounded float sum), so no compiler contraction into a fused multiply-add can change it.
inline float mul(float a, float b) { return static_cast<float>(static_cast<double>(a) * static_cast<double>(b)); }
inline float add(float a, float b) { return static_cast<float>(static_cast<double>(a) + static_cast<double>(b)); }
inline float sub(float a, float b) { return static_cast<float>(static_cast<double>(a) - static_cast<double>(b)); }

std::uint16_t load_u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }

std::uint32_t load_u32(const std::uint8_t* p) {
  std::uint32_t value = 0;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

// IEEE half to float, exactly (subnormals included; NaN payloads kept, as numpy's astype(float32)).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  const std::uint32_t bits =
      exponent == 31 ? sign | 0x7F800000u | (mantissa << 13) : sign | ((exponent + 112) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

float load_half(const std::uint8_t* p) { return half_to_float(load_u16(p)); }

// Q4_K and Q5_K: the 6-bit scale and minimum of sub-block j from the 12 packed bytes (ggml get_scale_min_k4).
void scale_min_k4(int j, const std::uint8_t* q, std::uint8_t& scale, std::uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<std::uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: value i of a 32-value block: the low nibbles of the 16 bytes are values 0..15, the high
// nibbles 16..31; Q5's fifth bit i is bit i of the 32-bit qh.
int nibble(const std::uint8_t* qs, int i) { return i < 16 ? qs[i] & 0x0F : qs[i - 16] >> 4; }

void dequantize_block(GgmlType type, const std::uint8_t* b, float* out) {
  switch (type) {
    case GgmlType::q4_0: {
      const float d = load_half(b);
      for (int i = 0; i < 32; ++i) out[i] = mul(d, static_cast<float>(nibble(b + 2, i) - 8));
      return;
    }
    case GgmlType::q4_1: {
      const float d = load_half(b), m = load_half(b + 2);
      for (int i = 0; i < 32; ++i) out[i] = add(mul(d, static_cast<float>(nibble(b + 4, i))), m);
      return;
    }
    case GgmlType::q5_0: {
      const float d = load_half(b);
      const std::uint32_t qh = load_u32(b + 2);
      for (int i = 0; i < 32; ++i) {
        const int q = nibble(b + 6, i) | static_cast<int>(((qh >> i) & 1u) << 4);
        out[i] = mul(d, static_cast<float>(q - 16));
      }
      return;
    }
    case GgmlType::q5_1: {
      const float d = load_half(b), m = load_half(b + 2);
      const std::uint32_t qh = load_u32(b + 4);
      for (int i = 0; i < 32; ++i) {
        const int q = nibble(b + 8, i) | static_cast<int>(((qh >> i) & 1u) << 4);
        out[i] = add(mul(d, static_cast<float>(q)), m);
      }
      return;
    }
    case GgmlType::q8_0: {
      const float d = load_half(b);
      for (int i = 0; i < 32; ++i) out[i] = mul(static_cast<float>(static_cast<std::int8_t>(b[2 + i])), d);
      return;
    }
    case GgmlType::q4_k:
    case GgmlType::q5_k: {
      // 8 sub-blocks of 32: value = (d·scale_j)·q − dmin·min_j; 4-bit q from qs (32-byte chunk c holds sub-blocks 2c
      // in its low nibbles and 2c+1 in its high ones), Q5_K's fifth bit j of qh[i] for value i of sub-block j.
      const bool five = type == GgmlType::q5_k;
      const float d = load_half(b), dmin = load_half(b + 2);
      const std::uint8_t* scales = b + 4;
      const std::uint8_t* qh = b + 16;
      const std::uint8_t* qs = five ? b + 16 + kQK / 8 : b + 16;
      for (int j = 0; j < 8; ++j) {
        std::uint8_t scale = 0, min = 0;
        scale_min_k4(j, scales, scale, min);
        const float dj = mul(d, static_cast<float>(scale)), mj = mul(dmin, static_cast<float>(min));
        const std::uint8_t* chunk = qs + 32 * (j / 2);
        for (int i = 0; i < 32; ++i) {
          int q = (j % 2 == 0) ? chunk[i] & 0x0F : chunk[i] >> 4;
          if (five) q |= ((qh[i] >> j) & 1) << 4;
          out[32 * j + i] = sub(mul(dj, static_cast<float>(q)), mj);
        }
      }
      return;
    }
    case GgmlType::q6_k: {
      // Two halves of 128 values; in half h, value r takes 4 low bits from ql[64h + r % 64] (nibble r / 64) and 2 high
      // bits from qh[32h + r % 32] (bit pair r / 32); value = (d·scale[p / 16])·(q − 32).
      const std::uint8_t* ql = b;
      const std::uint8_t* qh = b + kQK / 2;
      const std::uint8_t* scales = b + kQK / 2 + kQK / 4;
      const float d = load_half(b + kQK / 2 + kQK / 4 + kQK / 16);
      for (int p = 0; p < kQK; ++p) {
        const int h = p / 128, r = p % 128;
        const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
        const float ds = mul(d, static_cast<float>(static_cast<std::int8_t>(scales[p / 16])));
        out[p] = mul(ds, static_cast<float>((low | (high << 4)) - 32));
      }
      return;
    }
    case GgmlType::f32:
      std::memcpy(out, b, sizeof(float));
      return;
    case GgmlType::f16:
      out[0] = load_half(b);
      return;
    case GgmlType::bf16:
      out[0] = std::bit_cast<float>(static_cast<std::uint32_t>(load_u16(b)) << 16);
      return;
  }
  throw Error(fmt::format("dequantize_ggml: type {} is not supported", static_cast<std::uint32_t>(type)));
}

}  // namespace

std::optional<GgmlTypeLayout> ggml_type_layout(std::uint32_t id) {
  for (const GgmlTypeLayout& layout : kLayouts) {
    if (static_cast<std::uint32_t>(layout.type) == id) return layout;
  }
  return std::nullopt;
}

std::string ggml_type_name(std::uint32_t id) {
  if (id < kAllNames.size() && !kAllNames[id].empty()) return std::string(kAllNames[id]);
  return fmt::format("{} (unknown to ggml)", id);
}

std::string supported_ggml_types() {
  std::string out;
  for (const GgmlTypeLayout& layout : kLayouts) out += (out.empty() ? "" : ", ") + std::string(layout.name);
  return out;
}

void dequantize_ggml(GgmlType type, const std::uint8_t* data, std::int64_t count, float* out) {
  const auto layout = ggml_type_layout(static_cast<std::uint32_t>(type));
  GRPO_CHECK(layout.has_value(), "dequantize_ggml: type {} is not supported", static_cast<std::uint32_t>(type));
  GRPO_CHECK(count >= 0 && count % layout->block_elements == 0,
             "dequantize_ggml: {} values of {} are not whole blocks of {}", count, layout->name, layout->block_elements);
  if (type == GgmlType::f32) {
    std::memcpy(out, data, static_cast<std::size_t>(count) * sizeof(float));
    return;
  }
  const std::int64_t blocks = count / layout->block_elements;
  for (std::int64_t i = 0; i < blocks; ++i) {
    dequantize_block(type, data + i * layout->block_bytes, out + i * layout->block_elements);
  }
}

}  // namespace grpo::io
