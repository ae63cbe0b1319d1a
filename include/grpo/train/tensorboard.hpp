// SPDX-License-Identifier: Apache-2.0
// A TensorBoard event-file writer for scalars, written by hand (no protobuf or TensorFlow library).
//
// File layout (TensorFlow's TFRecord framing), per record:
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// where masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with c = CRC-32C (Castagnoli) of x.
// Each record's data is a tensorflow.Event protobuf: wall_time (double, field 1), step (int64, field 2), and either
// file_version (string, field 3; "brain.Event:2" in the first record), summary (field 5) =
// Summary { repeated Value value = 1 { string tag = 1; float simple_value = 2; } }, or session_log (field 7) =
// SessionLog { status = 1 (START = 1) }.
//
// A resumed run re-runs the steps after its checkpoint. TensorBoard (event_accumulator's purge_orphaned_data, on by
// default) drops every event of earlier files at a step >= S when it reads a SessionLog START at step S in a
// "brain.Event:2" file, so a writer opened with `purge_from = S` hides the first attempt's records of the re-run
// steps: the same mechanism as PyTorch's SummaryWriter(purge_step=S).
#pragma once

#include <grpo/train/metrics_writer.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>

namespace grpo::train {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF) of `data`:
/// the checksum TFRecord uses. crc32c("123456789") = 0xE3069283.
std::uint32_t crc32c(std::span<const std::byte> data);

/// TFRecord's masked CRC: ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32) with c = crc32c(data).
std::uint32_t masked_crc32c(std::span<const std::byte> data);

/// Appends scalar summaries to "<log_dir>/events.out.tfevents.<unix seconds>.<hostname>", the name TensorBoard
/// scans for (".1", ".2", ... appended when a file of that name exists, so two writers never share a file). Every write is flushed, so TensorBoard sees steps as they happen and a crash loses at most one event.
class TensorBoardWriter {
 public:
  /// Creates log_dir when missing and a new event file in it, starting with the file_version record and, with
  /// `purge_from`, a SessionLog START at that step (see above). Throws grpo::Error naming the file when it cannot be
  /// created.
  explicit TensorBoardWriter(const std::filesystem::path& log_dir, std::optional<std::int64_t> purge_from = {});

  /// One Event for `step` holding one simple_value per scalar (converted to float, as TensorBoard stores them;
  /// NaN and ±inf pass through as IEEE values, which TensorBoard displays).
  void write(std::int64_t step, const Scalars& scalars, double wall_time = unix_time_now());

  /// The event file being written.
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace grpo::train
