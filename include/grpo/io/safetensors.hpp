// SPDX-License-Identifier: Apache-2.0
// Hugging Face safetensors files: read (single file or a sharded checkpoint directory) and write (atomically).
//
// Format: 8-byte little-endian header length N, N bytes of JSON {"__metadata__": {str: str}, "<name>": {"dtype":
// "F32", "shape": [...], "data_offsets": [begin, end]}, ...}, then the data buffer; offsets are relative to the
// buffer, tensors are C-contiguous, and together cover the buffer exactly with no overlap.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::io {

/// One tensor's entry in a safetensors header.
struct SafetensorsEntry {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0;  ///< byte offset into the data buffer
  int64_t end = 0;
};

/// An open safetensors file: the parsed, validated header, and the data (read lazily per tensor).
/// Throws grpo::ParseError naming the file and the field at fault for a truncated file, bad JSON, an unknown dtype,
/// offsets that do not match the shape, or tensors that overlap or leave holes in the buffer.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  /// Entries in file order (sorted by offset).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(std::string_view name) const;
  /// The entry for name; throws grpo::Error naming the file and the missing tensor.
  const SafetensorsEntry& entry(std::string_view name) const;
  /// Reads one tensor into a new CPU tensor of the stored dtype and shape.
  torch::Tensor tensor(std::string_view name) const;
  /// Reads every tensor.
  std::map<std::string, torch::Tensor> tensors() const;

 private:
  std::filesystem::path path_;
  int64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// Writes tensors (any device, contiguous or not; stored as their dtype) to path atomically: to "path.tmp", then
/// rename. Tensor names must be unique and non-empty. Writes entries sorted by name, header padded to 8 bytes.
void save_safetensors(const std::filesystem::path& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads the tensors of a checkpoint directory: model.safetensors.index.json (sharded; every listed shard) if present,
/// else model.safetensors. Throws grpo::Error naming the directory and what is missing.
std::map<std::string, torch::Tensor> load_checkpoint_tensors(const std::filesystem::path& directory);

/// Writes a checkpoint directory the way transformers does: one model.safetensors when the total size is at most
/// max_shard_bytes, else shards "model-0000i-of-0000n.safetensors" plus model.safetensors.index.json
/// ({"metadata": {"total_size": bytes}, "weight_map": {name: shard}}). Metadata {"format": "pt"} is added.
void save_checkpoint_tensors(const std::filesystem::path& directory, const std::map<std::string, torch::Tensor>& tensors,
                             int64_t max_shard_bytes = int64_t{5} << 30);

/// The safetensors dtype string ("F32", "BF16", ...) of a torch dtype; throws grpo::Error for unsupported dtypes.
std::string_view safetensors_dtype_name(torch::ScalarType dtype);

}  // namespace grpo::io
