// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/tensorboard.hpp>
#include <grpo/train/trainer_callbacks.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// An independent reader of TFRecord framing and of the protobuf wire format, enough for tensorflow.Event.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ == data_.size(); }
  std::uint64_t fixed(int width) {
    REQUIRE(pos_ + width <= data_.size());
    std::uint64_t value = 0;
    for (int i = 0; i < width; ++i) value |= std::uint64_t(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    pos_ += width;
    return value;
  }
  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(pos_ < data_.size());
      REQUIRE(shift < 64);
      const auto byte = static_cast<unsigned char>(data_[pos_++]);
      value |= std::uint64_t(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
  }
  std::string_view take(std::size_t n) {
    REQUIRE(pos_ + n <= data_.size());
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
};

struct DecodedEvent {
  double wall_time = 0.0;
  std::int64_t step = -1;
  std::string file_version;
  int session_status = -1;  ///< SessionLog.status when the event holds one
  std::vector<std::pair<std::string, float>> values;
};

std::uint32_t mask(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::vector<DecodedEvent> decode_event_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string file = buffer.str();
  Reader records(file);
  std::vector<DecodedEvent> events;
  while (!records.done()) {
    const std::string_view length_bytes = records.take(8);
    const std::uint64_t length = Reader(length_bytes).fixed(8);
    CHECK(records.fixed(4) == mask(grpo::train::crc32c(bytes_of(length_bytes))));
    const std::string_view data = records.take(length);
    CHECK(records.fixed(4) == mask(grpo::train::crc32c(bytes_of(data))));

    DecodedEvent event;
    Reader fields(data);
    while (!fields.done()) {
      const std::uint64_t key = fields.varint();
      const auto field = key >> 3;
      const auto wire = key & 7;
      if (field == 1 && wire == 1) {
        const std::uint64_t bits = fields.fixed(8);
        std::memcpy(&event.wall_time, &bits, 8);
      } else if (field == 2 && wire == 0) {
        event.step = static_cast<std::int64_t>(fields.varint());
      } else if (field == 3 && wire == 2) {
        event.file_version = std::string(fields.take(fields.varint()));
      } else if (field == 5 && wire == 2) {
        Reader summary(fields.take(fields.varint()));
        while (!summary.done()) {
          REQUIRE(summary.varint() == ((1 << 3) | 2));  // repeated Value value = 1
          Reader value(summary.take(summary.varint()));
          std::string tag;
          float simple_value = std::nanf("");
          while (!value.done()) {
            const std::uint64_t value_key = value.varint();
            if (value_key == ((1 << 3) | 2)) {
              tag = std::string(value.take(value.varint()));
            } else {
              REQUIRE(value_key == ((2 << 3) | 5));
              const auto bits = static_cast<std::uint32_t>(value.fixed(4));
              std::memcpy(&simple_value, &bits, 4);
            }
          }
          event.values.emplace_back(tag, simple_value);
        }
      } else if (field == 7 && wire == 2) {
        Reader session_log(fields.take(fields.varint()));
        REQUIRE(session_log.varint() == ((1 << 3) | 0));  // SessionStatus status = 1
        event.session_status = static_cast<int>(session_log.varint());
        REQUIRE(session_log.done());
      } else {
        FAIL("unexpected Event field " << field << " wire type " << wire);
      }
    }
    events.push_back(event);
  }
  return events;
}

}  // namespace

TEST_CASE("crc32c matches the published check values", "[train][tensorboard]") {
  CHECK(grpo::train::crc32c(bytes_of("123456789")) == 0xE3069283u);
  const std::string zeros(32, '\0');
  CHECK(grpo::train::crc32c(bytes_of(zeros)) == 0x8A9136AAu);
  const std::string ones(32, '\xFF');  // RFC 3720 B.4
  CHECK(grpo::train::crc32c(bytes_of(ones)) == 0x62A8AB43u);
  CHECK(grpo::train::crc32c(bytes_of("")) == 0u);
  // (0xE3069283 >> 15) = 0x1C60D, (0xE3069283 << 17) mod 2^32 = 0x25060000, or = 0x2507C60D;
  // + 0xA282EAD8 = 0xC78AB0E5 (mod 2^32).
  CHECK(grpo::train::masked_crc32c(bytes_of("123456789")) == 0xC78AB0E5u);
}

TEST_CASE("TensorBoardWriter: TFRecord-framed Events with file_version then scalar summaries", "[train][tensorboard]") {
  const fs::path dir = fs::temp_directory_path() / ("grpo_tensorboard_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::path path;
  {
    grpo::train::TensorBoardWriter writer(dir / "run");
    path = writer.path();
    writer.write(1, {{"loss", 0.25}, {"rewards/accuracy/mean", -1.5}}, 1700000000.5);
    writer.write(300, {{"kl", std::numeric_limits<double>::infinity()}, {"lr", 1e-6}}, 1700000001.0);
    writer.write(2, {}, 1700000002.0);
  }
  CHECK(path.parent_path() == dir / "run");
  CHECK(path.filename().string().starts_with("events.out.tfevents."));
  const std::vector<DecodedEvent> events = decode_event_file(path);
  REQUIRE(events.size() == 4);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].wall_time > 1.6e9);
  CHECK(events[0].values.empty());

  CHECK(events[1].step == 1);
  CHECK(events[1].wall_time == 1700000000.5);
  CHECK(events[1].file_version.empty());
  REQUIRE(events[1].values.size() == 2);
  CHECK(events[1].values[0] == std::pair<std::string, float>{"loss", 0.25f});
  CHECK(events[1].values[1] == std::pair<std::string, float>{"rewards/accuracy/mean", -1.5f});

  CHECK(events[2].step == 300);  // a two-byte varint (0xAC 0x02)
  REQUIRE(events[2].values.size() == 2);
  CHECK(std::isinf(events[2].values[0].second));
  CHECK(events[2].values[1].second == 1e-6f);

  CHECK(events[3].step == 2);
  CHECK(events[3].values.empty());

  // Writers opened in the same second get files of their own.
  grpo::train::TensorBoardWriter first(dir / "pair");
  grpo::train::TensorBoardWriter second(dir / "pair");
  CHECK(first.path() != second.path());
  CHECK(decode_event_file(first.path()).size() == 1);
  CHECK(decode_event_file(second.path()).size() == 1);
  fs::remove_all(dir);
}

TEST_CASE("TensorBoardWriter: a resumed run's file starts with a SessionLog START at its first step",
          "[train][tensorboard]") {
  // TensorBoard purges earlier events at steps >= S on a START at step S (PyTorch's SummaryWriter(purge_step=S)).
  const fs::path dir = fs::temp_directory_path() / ("grpo_tensorboard_purge_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::path path;
  {
    grpo::train::TensorBoardWriter writer(dir, 301);
    path = writer.path();
    writer.write(301, {{"loss", 1.0}}, 1700000000.0);
  }
  const std::vector<DecodedEvent> events = decode_event_file(path);
  REQUIRE(events.size() == 3);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].session_status == -1);
  CHECK(events[1].step == 301);
  CHECK(events[1].session_status == 1);  // START
  CHECK(events[1].file_version.empty());
  CHECK(events[1].values.empty());
  CHECK(events[2].step == 301);
  CHECK(events[2].session_status == -1);

  // MetricsLog: a resumed run purges from its first step, a fresh one from step 0 (it truncates metrics.jsonl too).
  const auto start_step = [&](grpo::train::OpenMode mode, std::int64_t first_step) {
    const fs::path run = dir / (mode == grpo::train::OpenMode::append ? "resumed" : "fresh");
    { grpo::train::MetricsLog log(run / "metrics.jsonl", run / "tb", mode, first_step); }
    REQUIRE(std::distance(fs::directory_iterator(run / "tb"), fs::directory_iterator()) == 1);
    const auto file = fs::directory_iterator(run / "tb")->path();
    const auto written = decode_event_file(file);
    REQUIRE(written.size() == 2);
    CHECK(written[1].session_status == 1);
    return written[1].step;
  };
  CHECK(start_step(grpo::train::OpenMode::append, 41) == 41);
  CHECK(start_step(grpo::train::OpenMode::truncate, 41) == 0);
  fs::remove_all(dir);
}
