// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/tensorboard.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <array>
#include <bit>

namespace grpo::train {
namespace {

constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr auto kCrc32cTable = make_crc32c_table();

// Protobuf wire format (https://protobuf.dev/programming-guides/encoding/): each field is a varint key
// (field_number << 3 | wire_type) followed by its value; little-endian fixed-width numbers.
class ProtoEncoder {
 public:
  void varint(std::uint64_t value) {
    while (value >= 0x80) {
      bytes_.push_back(static_cast<char>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    bytes_.push_back(static_cast<char>(value));
  }
  void key(int field, int wire_type) { varint((static_cast<std::uint64_t>(field) << 3) | wire_type); }
  void int64_field(int field, std::int64_t value) {
    key(field, 0);
    varint(static_cast<std::uint64_t>(value));  // int64: two's complement, as protobuf specifies
  }
  void double_field(int field, double value) {
    key(field, 1);
    little_endian(std::bit_cast<std::uint64_t>(value), 8);
  }
  void float_field(int field, float value) {
    key(field, 5);
    little_endian(std::bit_cast<std::uint32_t>(value), 4);
  }
  void bytes_field(int field, std::string_view value) {
    key(field, 2);
    varint(value.size());
    bytes_.append(value);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void little_endian(std::uint64_t value, int width) {
    for (int i = 0; i < width; ++i) bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  }

  std::string bytes_;
};

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "localhost";
  return std::string(name.data());
}

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> data) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::byte b : data) c = kCrc32cTable[(c ^ std::to_integer<std::uint32_t>(b)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::span<const std::byte> data) {
  const std::uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& log_dir, std::optional<std::int64_t> purge_from) {
  std::filesystem::create_directories(log_dir);
  const double now = unix_time_now();
  const std::string name = fmt::format("events.out.tfevents.{}.{}", static_cast<std::int64_t>(now), host_name());
  path_ = log_dir / name;
  // Two writers started in the same second (one per run phase, say) must not interleave records in one file;
  // TensorBoard reads every file whose name contains "tfevents", so a numeric suffix keeps it visible.
  for (int suffix = 1; std::filesystem::exists(path_); ++suffix) path_ = log_dir / fmt::format("{}.{}", name, suffix);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  GRPO_CHECK(out_.good(), "cannot open TensorBoard event file {}", path_.string());
  ProtoEncoder event;
  event.double_field(1, now);
  event.int64_field(2, 0);
  event.bytes_field(3, "brain.Event:2");
  write_record(event.bytes());
  if (purge_from) {
    ProtoEncoder session_log;
    session_log.int64_field(1, 1);  // status = START
    ProtoEncoder start;
    start.double_field(1, now);
    start.int64_field(2, *purge_from);
    start.bytes_field(7, session_log.bytes());
    write_record(start.bytes());
  }
}

void TensorBoardWriter::write(std::int64_t step, const Scalars& scalars, double wall_time) {
  ProtoEncoder summary;
  for (const auto& [tag, value] : scalars) {
    ProtoEncoder summary_value;
    summary_value.bytes_field(1, tag);
    summary_value.float_field(2, static_cast<float>(value));
    summary.bytes_field(1, summary_value.bytes());
  }
  ProtoEncoder event;
  event.double_field(1, wall_time);
  event.int64_field(2, step);
  event.bytes_field(5, summary.bytes());
  write_record(event.bytes());
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::array<char, 8> length{};
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((std::uint64_t{data.size()} >> (8 * i)) & 0xFF);
  const auto write_u32 = [this](std::uint32_t value) {
    for (int i = 0; i < 4; ++i) out_.put(static_cast<char>((value >> (8 * i)) & 0xFF));
  };
  out_.write(length.data(), length.size());
  write_u32(masked_crc32c(as_bytes(std::string_view(length.data(), length.size()))));
  out_.write(data.data(), static_cast<std::streamsize>(data.size()));
  write_u32(masked_crc32c(as_bytes(data)));
  out_.flush();
  GRPO_CHECK(out_.good(), "writing TensorBoard event file {} failed", path_.string());
}

}  // namespace grpo::train
