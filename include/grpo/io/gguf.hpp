// SPDX-License-Identifier: Apache-2.0
// GGUF files (llama.cpp's model format, versions 2 and 3): metadata, tensor infos and tensor data, dequantized.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; the metadata as (string key, u32
// value type, value); the tensor infos as (string name, u32 n_dims, u64 ne[n_dims] with ne[0] the fastest-varying
// dimension, u32 ggml type, u64 offset); padding to `general.alignment` (default 32); the data, each tensor at its
// offset from the data's start (a multiple of the alignment). A string is a u64 length and its bytes; an array a u32
// element type, a u64 count and the elements.
//
// Every length, count and offset is checked against the file's size before anything is allocated or read, so a
// damaged or hostile file is a grpo::ParseError naming the file and the field (metadata key, tensor name), never a
// crash or a huge allocation.
#pragma once

#include <grpo/io/ggml_quants.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace grpo::io {

/// A metadata value. Integers of every width are held as std::int64_t or std::uint64_t (by signedness), floats as
/// double, arrays as a vector of values; `type` keeps the stored GGUF type id (0 u8 ... 12 f64).
struct GgufValue {
  std::uint32_t type = 0;
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, std::vector<GgufValue>> value;

  /// The value as a string; grpo::Error naming `key` when it is not one.
  const std::string& as_string(std::string_view key) const;
  /// An integer (any width or signedness) as std::int64_t; grpo::Error naming `key` otherwise or when out of range.
  std::int64_t as_int(std::string_view key) const;
  /// A float or an integer as double; grpo::Error naming `key` otherwise.
  double as_double(std::string_view key) const;
  bool as_bool(std::string_view key) const;
  /// An array's elements; grpo::Error naming `key` when it is not an array.
  const std::vector<GgufValue>& as_array(std::string_view key) const;
  /// An array of strings / integers / numbers (each element converted as above).
  std::vector<std::string> as_strings(std::string_view key) const;
  std::vector<std::int64_t> as_ints(std::string_view key) const;
  std::vector<double> as_doubles(std::string_view key) const;
};

/// One tensor's info: its ggml dimensions reversed into PyTorch's order (`shape`, slowest first: a ggml [in, out]
/// matrix is a PyTorch [out, in] one), its type and where its bytes are.
struct GgufTensorInfo {
  std::string name;
  std::vector<std::int64_t> shape;
  GgmlTypeLayout layout;
  std::int64_t offset = 0;  ///< absolute byte offset in the file
  std::int64_t bytes = 0;
  std::int64_t elements() const;
};

/// An open GGUF file: the parsed, validated header; tensor data is read per tensor.
/// Throws grpo::ParseError naming the file and the field at fault for a wrong magic or version, a truncated header or
/// data, a length or count larger than the file, an unknown value or tensor type, a tensor whose first dimension is
/// not whole blocks, a misaligned or out-of-file tensor, or two tensors or keys with one name.
class GgufFile {
 public:
  explicit GgufFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::int64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  /// The value of `key`, or nullptr.
  const GgufValue* find(std::string_view key) const;
  /// The value of `key`; grpo::ParseError naming the file and the missing key.
  const GgufValue& at(std::string_view key) const;
  /// Tensor infos in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  /// Reads and dequantizes one tensor into a new CPU tensor of `dtype` (floating) and the info's shape: every value
  /// exactly as ggml dequantizes it to fp32, then converted. grpo::Error naming the file and a missing tensor.
  torch::Tensor tensor(std::string_view name, torch::ScalarType dtype = torch::kFloat32) const;

 private:
  std::filesystem::path path_;
  std::uint32_t version_ = 0;
  std::int64_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace grpo::io
