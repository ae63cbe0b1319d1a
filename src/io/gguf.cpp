// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/gguf.hpp>

#include <fmt/format.h>

#include <bit>
#include <fstream>
#include <limits>
#include <set>

namespace grpo::io {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF files are read as little-endian");

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;                    // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;              // arrays of arrays nested deeper than this are refused

// GGUF metadata value types (gguf.h enum gguf_type).
enum ValueType : std::uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12,
};

// The smallest number of bytes a value of `type` takes (an array's header, a string's length).
std::int64_t min_value_bytes(std::uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: case kString: return 8;
    case kArray: return 12;
    default: return 1;
  }
}

// Reads the header sequentially, checking every length against what is left of the file.
class Cursor {
 public:
  Cursor(const std::filesystem::path& path, std::ifstream& in, std::int64_t size) : path_(path), in_(in), size_(size) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw ParseError(fmt::format("{}: {}: {}", path_.string(), field, what));
  }
  std::int64_t position() const { return position_; }
  std::int64_t left() const { return size_ - position_; }

  void read(void* out, std::int64_t count, const std::string& field) {
    if (count > left()) {
      fail(field, fmt::format("the file ends after {} bytes, {} short of the {} bytes at offset {} (truncated?)", size_,
                              count - left(), count, position_));
    }
    in_.read(static_cast<char*>(out), count);
    if (in_.gcount() != count) fail(field, fmt::format("read error at offset {}", position_));
    position_ += count;
  }
  template <typename T>
  T scalar(const std::string& field) {
    T value{};
    read(&value, sizeof(T), field);
    return value;
  }
  // A count of items each at least `item_bytes` long, checked against the rest of the file before any allocation.
  std::int64_t count(const std::string& field, std::int64_t item_bytes, std::string_view what) {
    const auto n = scalar<std::uint64_t>(field);
    if (n > static_cast<std::uint64_t>(left()) / static_cast<std::uint64_t>(item_bytes)) {
      fail(field, fmt::format("{} {} of at least {} bytes each cannot fit in the {} bytes left of the file", n, what,
                              item_bytes, left()));
    }
    return static_cast<std::int64_t>(n);
  }
  std::string string(const std::string& field) {
    const std::int64_t n = count(field, 1, "string bytes");
    std::string out(static_cast<std::size_t>(n), '\0');
    read(out.data(), n, field);
    return out;
  }

 private:
  const std::filesystem::path& path_;
  std::ifstream& in_;
  std::int64_t size_;
  std::int64_t position_ = 0;
};

GgufValue read_value(Cursor& cursor, std::uint32_t type, const std::string& field, int depth) {
  GgufValue out;
  out.type = type;
  switch (type) {
    case kU8: out.value = std::uint64_t{cursor.scalar<std::uint8_t>(field)}; break;
    case kI8: out.value = std::int64_t{cursor.scalar<std::int8_t>(field)}; break;
    case kU16: out.value = std::uint64_t{cursor.scalar<std::uint16_t>(field)}; break;
    case kI16: out.value = std::int64_t{cursor.scalar<std::int16_t>(field)}; break;
    case kU32: out.value = std::uint64_t{cursor.scalar<std::uint32_t>(field)}; break;
    case kI32: out.value = std::int64_t{cursor.scalar<std::int32_t>(field)}; break;
    case kU64: out.value = cursor.scalar<std::uint64_t>(field); break;
    case kI64: out.value = cursor.scalar<std::int64_t>(field); break;
    case kF32: out.value = double{cursor.scalar<float>(field)}; break;
    case kF64: out.value = cursor.scalar<double>(field); break;
    case kBool: {
      const auto byte = cursor.scalar<std::uint8_t>(field);
      if (byte > 1) cursor.fail(field, fmt::format("a bool must be 0 or 1, got {}", byte));
      out.value = byte == 1;
      break;
    }
    case kString: out.value = cursor.string(field); break;
    case kArray: {
      if (depth >= kMaxArrayDepth) cursor.fail(field, fmt::format("arrays nested deeper than {}", kMaxArrayDepth));
      const auto element_type = cursor.scalar<std::uint32_t>(field);
      if (element_type > kF64) cursor.fail(field, fmt::format("unknown array element type {}", element_type));
      const std::int64_t n = cursor.count(field, min_value_bytes(element_type), "array elements");
      std::vector<GgufValue> elements;
      elements.reserve(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) elements.push_back(read_value(cursor, element_type, field, depth + 1));
      out.value = std::move(elements);
      break;
    }
    default:
      cursor.fail(field, fmt::format("unknown value type {} (GGUF defines 0 to 12)", type));
  }
  return out;
}

std::string_view value_type_name(std::uint32_t type) {
  constexpr std::string_view kNames[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                         "bool", "string", "array", "u64", "i64", "f64"};
  return type <= kF64 ? kNames[type] : "unknown";
}

[[noreturn]] void wrong_type(const GgufValue& value, std::string_view key, std::string_view wanted) {
  throw Error(fmt::format("GGUF metadata '{}' is {}, not {}", key, value_type_name(value.type), wanted));
}

}  // namespace

const std::string& GgufValue::as_string(std::string_view key) const {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  wrong_type(*this, key, "a string");
}

std::int64_t GgufValue::as_int(std::string_view key) const {
  if (const auto* i = std::get_if<std::int64_t>(&value)) return *i;
  if (const auto* u = std::get_if<std::uint64_t>(&value)) {
    GRPO_CHECK(*u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
               "GGUF metadata '{}' = {} is out of range", key, *u);
    return static_cast<std::int64_t>(*u);
  }
  wrong_type(*this, key, "an integer");
}

double GgufValue::as_double(std::string_view key) const {
  if (const auto* d = std::get_if<double>(&value)) return *d;
  if (std::holds_alternative<std::int64_t>(value) || std::holds_alternative<std::uint64_t>(value)) {
    return static_cast<double>(as_int(key));
  }
  wrong_type(*this, key, "a number");
}

bool GgufValue::as_bool(std::string_view key) const {
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  wrong_type(*this, key, "a bool");
}

const std::vector<GgufValue>& GgufValue::as_array(std::string_view key) const {
  if (const auto* a = std::get_if<std::vector<GgufValue>>(&value)) return *a;
  wrong_type(*this, key, "an array");
}

std::vector<std::string> GgufValue::as_strings(std::string_view key) const {
  std::vector<std::string> out;
  for (const GgufValue& element : as_array(key)) out.push_back(element.as_string(key));
  return out;
}

std::vector<std::int64_t> GgufValue::as_ints(std::string_view key) const {
  std::vector<std::int64_t> out;
  for (const GgufValue& element : as_array(key)) out.push_back(element.as_int(key));
  return out;
}

std::vector<double> GgufValue::as_doubles(std::string_view key) const {
  std::vector<double> out;
  for (const GgufValue& element : as_array(key)) out.push_back(element.as_double(key));
  return out;
}

std::int64_t GgufTensorInfo::elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

GgufFile::GgufFile(const std::filesystem::path& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ParseError(fmt::format("{}: cannot open", path.string()));
  std::error_code error;
  const auto size = static_cast<std::int64_t>(std::filesystem::file_size(path, error));
  if (error) throw ParseError(fmt::format("{}: cannot read its size: {}", path.string(), error.message()));
  Cursor cursor(path_, in, size);

  const auto magic = cursor.scalar<std::uint32_t>("magic");
  if (magic != kMagic) cursor.fail("magic", fmt::format("not a GGUF file (magic 0x{:08x}, want \"GGUF\")", magic));
  version_ = cursor.scalar<std::uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    cursor.fail("version", fmt::format("version {} is not supported (2 and 3 are{})", version_,
                                       version_ > 0xFFFF ? "; a big-endian file?" : ""));
  }
  // The smallest tensor info: an empty name (8), n_dims (4), one dimension (8), type (4), offset (8).
  const std::int64_t tensor_count = cursor.count("tensor count", 32, "tensor infos");
  const std::int64_t metadata_count = cursor.count("metadata count", 13, "metadata entries");

  for (std::int64_t i = 0; i < metadata_count; ++i) {
    std::string key = cursor.string(fmt::format("metadata entry {} key", i));
    const auto type = cursor.scalar<std::uint32_t>(fmt::format("metadata '{}' type", key));
    GgufValue value = read_value(cursor, type, fmt::format("metadata '{}'", key), 0);
    if (metadata_.count(key) != 0) cursor.fail(fmt::format("metadata '{}'", key), "the key appears twice");
    metadata_.emplace(std::move(key), std::move(value));
  }
  if (const GgufValue* alignment = find("general.alignment")) {
    const std::int64_t a = alignment->type == kU32 ? alignment->as_int("general.alignment") : 0;
    if (a <= 0 || !std::has_single_bit(static_cast<std::uint64_t>(a))) {
      cursor.fail("metadata 'general.alignment'", "must be a u32 power of two");
    }
    alignment_ = a;
  }

  std::set<std::string, std::less<>> names;
  std::vector<std::uint64_t> relative_offsets;
  for (std::int64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo info{};
    info.name = cursor.string(fmt::format("tensor info {} name", i));
    const std::string field = fmt::format("tensor '{}'", info.name);
    if (!names.insert(info.name).second) cursor.fail(field, "the name appears twice");
    const auto n_dims = cursor.scalar<std::uint32_t>(field + " n_dims");
    if (n_dims < 1 || n_dims > kMaxDims) cursor.fail(field, fmt::format("n_dims {} is not in 1..{}", n_dims, kMaxDims));
    std::vector<std::int64_t> ne(n_dims);
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto extent = cursor.scalar<std::uint64_t>(field + " dimensions");
      if (extent == 0 || extent > static_cast<std::uint64_t>(size) * 2 ||
          elements > static_cast<std::uint64_t>(size) * 2 / extent) {
        cursor.fail(field, fmt::format("dimension {} = {} is empty or larger than the file could hold", d, extent));
      }
      elements *= extent;
      ne[d] = static_cast<std::int64_t>(extent);
    }
    info.shape.assign(ne.rbegin(), ne.rend());
    const auto type = cursor.scalar<std::uint32_t>(field + " type");
    const auto layout = ggml_type_layout(type);
    if (!layout) {
      cursor.fail(field, fmt::format("tensor type {} is not supported (supported: {})", ggml_type_name(type),
                                     supported_ggml_types()));
    }
    info.layout = *layout;
    if (ne[0] % layout->block_elements != 0) {
      cursor.fail(field, fmt::format("its first dimension {} is not whole {} blocks of {}", ne[0], layout->name,
                                     layout->block_elements));
    }
    info.bytes = static_cast<std::int64_t>(elements) / layout->block_elements * layout->block_bytes;
    const auto offset = cursor.scalar<std::uint64_t>(field + " offset");
    if (offset % static_cast<std::uint64_t>(alignment_) != 0) {
      cursor.fail(field, fmt::format("offset {} is not a multiple of the alignment {}", offset, alignment_));
    }
    relative_offsets.push_back(offset);
    tensors_.push_back(std::move(info));
  }
  const std::int64_t data_start = (cursor.position() + alignment_ - 1) / alignment_ * alignment_;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensorInfo& info = tensors_[i];
    if (relative_offsets[i] > static_cast<std::uint64_t>(size) ||
        data_start + static_cast<std::int64_t>(relative_offsets[i]) > size - info.bytes) {
      throw ParseError(fmt::format("{}: tensor '{}': its {} bytes at data offset {} end beyond the file's {} bytes "
                                   "(truncated?)",
                                   path.string(), info.name, info.bytes, relative_offsets[i], size));
    }
    info.offset = data_start + static_cast<std::int64_t>(relative_offsets[i]);
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::at(std::string_view key) const {
  if (const GgufValue* value = find(key)) return *value;
  throw ParseError(fmt::format("{}: no metadata '{}'", path_.string(), key));
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const GgufTensorInfo& info : tensors_) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

torch::Tensor GgufFile::tensor(std::string_view name, torch::ScalarType dtype) const {
  const GgufTensorInfo* info = find_tensor(name);
  GRPO_CHECK(info != nullptr, "{}: no tensor '{}'", path_.string(), name);
  GRPO_CHECK(c10::isFloatingType(dtype), "GgufFile::tensor: dtype must be floating, got {}", c10::toString(dtype));
  std::ifstream in(path_, std::ios::binary);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(info->bytes));
  in.seekg(info->offset);
  in.read(reinterpret_cast<char*>(bytes.data()), info->bytes);
  if (in.gcount() != info->bytes) {
    throw ParseError(fmt::format("{}: tensor '{}': the file changed since it was opened (short read)",
                                 path_.string(), info->name));
  }
  torch::Tensor out = torch::empty(info->shape, torch::kFloat32);
  dequantize_ggml(info->layout.type, bytes.data(), info->elements(), out.data_ptr<float>());
  return dtype == torch::kFloat32 ? out : out.to(dtype);
}

}  // namespace grpo::io
