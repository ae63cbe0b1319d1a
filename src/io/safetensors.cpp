// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/io/atomic_file.hpp>
#include <grpo/io/safetensors.hpp>

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <set>
#include <tuple>

#include <fmt/ranges.h>

namespace grpo::io {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;  // the limit Hugging Face's reader enforces

struct DtypeName {
  std::string_view name;
  torch::ScalarType dtype;
};
constexpr std::array<DtypeName, 10> kDtypes{{
    {"F64", torch::kFloat64},
    {"F32", torch::kFloat32},
    {"F16", torch::kFloat16},
    {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},
    {"I32", torch::kInt32},
    {"I16", torch::kInt16},
    {"I8", torch::kInt8},
    {"U8", torch::kUInt8},
    {"BOOL", torch::kBool},
}};

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw ParseError(fmt::format("{}: {}", path.string(), what));
}

std::string read_bytes(std::ifstream& in, const std::filesystem::path& path, int64_t offset, int64_t count) {
  std::string bytes(static_cast<size_t>(count), '\0');
  in.seekg(offset);
  in.read(bytes.data(), count);
  if (in.gcount() != count) fail(path, fmt::format("truncated: wanted {} bytes at offset {}", count, offset));
  return bytes;
}

SafetensorsEntry parse_entry(const std::filesystem::path& path, std::string_view name, simdjson::dom::element value) {
  SafetensorsEntry entry;
  entry.name = std::string(name);
  simdjson::dom::object object;
  if (value.get_object().get(object)) fail(path, fmt::format("tensor \"{}\": entry is not a JSON object", name));
  std::string_view dtype;
  if (object["dtype"].get_string().get(dtype)) fail(path, fmt::format("tensor \"{}\": missing string field \"dtype\"", name));
  auto known = std::find_if(kDtypes.begin(), kDtypes.end(), [&](const DtypeName& d) { return d.name == dtype; });
  if (known == kDtypes.end()) fail(path, fmt::format("tensor \"{}\": unsupported dtype \"{}\"", name, dtype));
  entry.dtype = known->dtype;
  simdjson::dom::array shape;
  if (object["shape"].get_array().get(shape)) fail(path, fmt::format("tensor \"{}\": missing array field \"shape\"", name));
  int64_t numel = 1;
  for (auto dim : shape) {
    int64_t d = 0;
    if (dim.get_int64().get(d) || d < 0) fail(path, fmt::format("tensor \"{}\": shape must hold non-negative integers", name));
    entry.shape.push_back(d);
    numel *= d;
  }
  simdjson::dom::array offsets;
  if (object["data_offsets"].get_array().get(offsets) || offsets.size() != 2) {
    fail(path, fmt::format("tensor \"{}\": \"data_offsets\" must be [begin, end]", name));
  }
  if (offsets.at(0).get_int64().get(entry.begin) || offsets.at(1).get_int64().get(entry.end) || entry.begin < 0 ||
      entry.end < entry.begin) {
    fail(path, fmt::format("tensor \"{}\": \"data_offsets\" must be non-negative integers with begin <= end", name));
  }
  const int64_t expected = numel * static_cast<int64_t>(c10::elementSize(entry.dtype));
  if (entry.end - entry.begin != expected) {
    fail(path, fmt::format("tensor \"{}\": data_offsets [{}, {}] hold {} bytes but {} {} needs {}", name, entry.begin,
                           entry.end, entry.end - entry.begin, dtype, fmt::join(entry.shape, "x"), expected));
  }
  return entry;
}

}  // namespace

std::string_view safetensors_dtype_name(torch::ScalarType dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  throw Error(fmt::format("safetensors: dtype {} is not supported", c10::toString(dtype)));
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file");
  in.seekg(0, std::ios::end);
  const int64_t file_size = in.tellg();
  if (file_size < 8) fail(path, fmt::format("truncated: {} bytes, shorter than the 8-byte header length", file_size));
  uint64_t header_size = 0;
  std::memcpy(&header_size, read_bytes(in, path, 0, 8).data(), 8);
  if (header_size > static_cast<uint64_t>(std::min(kMaxHeaderBytes, file_size - 8))) {
    fail(path, fmt::format("header length {} exceeds the file ({} bytes) or the 100 MiB limit", header_size, file_size));
  }
  data_start_ = 8 + static_cast<int64_t>(header_size);
  const int64_t data_size = file_size - data_start_;
  simdjson::padded_string header(read_bytes(in, path, 8, static_cast<int64_t>(header_size)));
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  if (auto error = parser.parse(header).get_object().get(root)) {
    fail(path, fmt::format("header is not a JSON object: {}", simdjson::error_message(error)));
  }
  std::set<std::string, std::less<>> seen;
  for (auto field : root) {
    if (field.key == "__metadata__") {
      simdjson::dom::object meta;
      if (field.value.get_object().get(meta)) fail(path, "\"__metadata__\" must be an object of strings");
      for (auto m : meta) {
        std::string_view text;
        if (m.value.get_string().get(text)) fail(path, fmt::format("\"__metadata__\".\"{}\" must be a string", m.key));
        metadata_.emplace(std::string(m.key), std::string(text));
      }
      continue;
    }
    if (!seen.emplace(field.key).second) fail(path, fmt::format("tensor \"{}\" appears twice", field.key));
    entries_.push_back(parse_entry(path, field.key, field.value));
  }
  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  int64_t cursor = 0;
  for (const auto& e : entries_) {
    if (e.begin != cursor) {
      fail(path, fmt::format("tensor \"{}\" starts at byte {} of the data buffer but the previous tensor ends at {} "
                             "(tensors must not overlap or leave holes)", e.name, e.begin, cursor));
    }
    cursor = e.end;
  }
  if (cursor != data_size) {
    fail(path, fmt::format("tensors cover {} bytes but the data buffer holds {}", cursor, data_size));
  }
}

bool SafetensorsFile::contains(std::string_view name) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e.name == name; });
}

const SafetensorsEntry& SafetensorsFile::entry(std::string_view name) const {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.name == name; });
  GRPO_CHECK(it != entries_.end(), "{}: no tensor named \"{}\"", path_.string(), name);
  return *it;
}

torch::Tensor SafetensorsFile::tensor(std::string_view name) const {
  const auto& e = entry(name);
  auto out = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  std::ifstream in(path_, std::ios::binary);
  if (!in) fail(path_, "cannot open file");
  in.seekg(data_start_ + e.begin);
  in.read(static_cast<char*>(out.data_ptr()), e.end - e.begin);
  if (in.gcount() != e.end - e.begin) fail(path_, fmt::format("truncated while reading tensor \"{}\"", name));
  return out;
}

std::map<std::string, torch::Tensor> SafetensorsFile::tensors() const {
  std::map<std::string, torch::Tensor> out;
  for (const auto& e : entries_) out.emplace(e.name, tensor(e.name));
  return out;
}

void save_safetensors(const std::filesystem::path& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> data;
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ",";
      first = false;
      append_json_quoted(header, key);
      header += ":";
      append_json_quoted(header, value);
    }
    header += "}";
  }
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    GRPO_CHECK(!name.empty() && name != "__metadata__", "save_safetensors({}): invalid tensor name \"{}\"",
               path.string(), name);
    GRPO_CHECK(t.defined(), "save_safetensors({}): tensor \"{}\" is undefined", path.string(), name);
    auto cpu = t.detach().to(torch::kCPU).contiguous();
    const int64_t bytes = cpu.numel() * static_cast<int64_t>(cpu.element_size());
    if (header.size() > 1) header += ",";
    append_json_quoted(header, name);
    header += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          safetensors_dtype_name(cpu.scalar_type()), fmt::join(cpu.sizes(), ","), offset,
                          offset + bytes);
    offset += bytes;
    data.push_back(std::move(cpu));
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  write_file_atomically(path, [&](std::ostream& out) {
    const uint64_t header_size = header.size();
    out.write(reinterpret_cast<const char*>(&header_size), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& t : data) {
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
  });
}

std::map<std::string, torch::Tensor> load_checkpoint_tensors(const std::filesystem::path& directory) {
  const auto index_path = directory / "model.safetensors.index.json";
  std::map<std::string, torch::Tensor> out;
  if (std::filesystem::exists(index_path)) {
    simdjson::dom::parser parser;
    simdjson::dom::object weight_map;
    simdjson::padded_string json;
    if (simdjson::padded_string::load(index_path.string()).get(json)) fail(index_path, "cannot read file");
    if (parser.parse(json)["weight_map"].get_object().get(weight_map)) {
      fail(index_path, "missing object field \"weight_map\"");
    }
    std::map<std::string, std::vector<std::string>> by_shard;
    for (auto field : weight_map) {
      std::string_view shard;
      if (field.value.get_string().get(shard)) fail(index_path, fmt::format("weight_map.\"{}\" must be a string", field.key));
      by_shard[std::string(shard)].emplace_back(field.key);
    }
    for (const auto& [shard, names] : by_shard) {
      SafetensorsFile file(directory / shard);
      for (const auto& name : names) out.emplace(name, file.tensor(name));
    }
    return out;
  }
  const auto single = directory / "model.safetensors";
  GRPO_CHECK(std::filesystem::exists(single), "{}: neither model.safetensors nor model.safetensors.index.json exists",
             directory.string());
  return SafetensorsFile(single).tensors();
}

void save_checkpoint_tensors(const std::filesystem::path& directory, const std::map<std::string, torch::Tensor>& tensors,
                             int64_t max_shard_bytes) {
  GRPO_CHECK(max_shard_bytes > 0, "save_checkpoint_tensors: max_shard_bytes must be > 0, got {}", max_shard_bytes);
  std::filesystem::create_directories(directory);
  std::vector<std::map<std::string, torch::Tensor>> shards(1);
  int64_t shard_bytes = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace(name, t);
    shard_bytes += bytes;
    total += bytes;
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  const auto index_path = directory / "model.safetensors.index.json";
  if (shards.size() == 1) {
    std::filesystem::remove(index_path);  // a stale index would take precedence when loading
    save_safetensors(directory / "model.safetensors", shards[0], metadata);
    return;
  }
  std::filesystem::remove(directory / "model.safetensors");
  std::string index = fmt::format("{{\"metadata\":{{\"total_size\":{}}},\"weight_map\":{{", total);
  bool first = true;
  for (size_t i = 0; i < shards.size(); ++i) {
    const auto file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    save_safetensors(directory / file, shards[i], metadata);
    for (const auto& [name, t] : shards[i]) {
      if (!first) index += ",";
      first = false;
      append_json_quoted(index, name);
      index += ":";
      append_json_quoted(index, file);
    }
  }
  index += "}}\n";
  write_file_atomically(index_path, [&](std::ostream& out) { out << index; });
}

}  // namespace grpo::io
