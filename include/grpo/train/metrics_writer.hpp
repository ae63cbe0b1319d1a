// SPDX-License-Identifier: Apache-2.0
// JSON-lines sinks for a training run: one metrics object per step, and a table of sampled completions with their
// rewards and advantages (what TRL logs as its "completions" table). Both flush every line, so a crash loses at
// most the line being written, and both append by default so a resumed run continues the same file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::train {

/// Named scalars of one step, in the order they are logged.
using Scalars = std::vector<std::pair<std::string, double>>;

/// Appends every (name, value) pair of `range` — LossMetrics::items(), RewardScores::metrics(), a std::map — to
/// `out`, each name prefixed by `prefix` ("train/" + "loss").
template <typename RangeType>
void append_scalars(Scalars& out, const RangeType& range, std::string_view prefix = {}) {
  for (const auto& [name, value] : range) out.emplace_back(std::string(prefix) + std::string(name), double(value));
}

enum class OpenMode {
  append,    ///< keep what the file holds (a resumed run continues it)
  truncate,  ///< start an empty file
};

/// For a resumed run: rewrites the JSON-lines file `path` (atomically) without the records of steps after `step`,
/// which the run is about to write again; a record is a line starting {"step":N, as MetricsWriter and
/// CompletionTableWriter write them, and other lines are kept. No file: nothing to do. Throws grpo::Error naming the
/// file when it cannot be read or written.
void drop_records_after(const std::filesystem::path& path, std::int64_t step);

/// Seconds since the Unix epoch, as a double (the wall_time of TensorBoard events and of the JSONL sinks).
double unix_time_now();

/// Writes one JSON object per line: {"step": 3, "wall_time": 1700000000.25, "<name>": value, ...}. Non-finite values
/// (NaN, ±inf) are written as null, since JSON has no literal for them; numbers use the shortest text that reads
/// back to the same double.
class MetricsWriter {
 public:
  /// Opens (creating parent directories) `path`. Throws grpo::Error naming the file when it cannot be opened.
  explicit MetricsWriter(const std::filesystem::path& path, OpenMode mode = OpenMode::append);

  /// One line for `step`. Throws grpo::Error for a scalar named "step" or "wall_time" (the line's own keys).
  void write(std::int64_t step, const Scalars& scalars, double wall_time = unix_time_now());

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

/// One sampled completion as the completion table records it.
struct CompletionRecord {
  std::string prompt;
  std::string completion;
  std::vector<std::pair<std::string, std::optional<double>>> rewards;  ///< per reward; nullopt = no value
  double advantage = 0.0;
  std::string domain;  ///< the prompt's domain in a multi-domain run; written only when not empty
};

/// Writes one JSON object per completion: {"step": 3, "prompt": "...", "completion": "...",
/// "rewards": {"accuracy": 1, "format": null}, "advantage": 0.5[, "domain": "math"]}; strings are JSON-escaped,
/// missing or non-finite values are null.
class CompletionTableWriter {
 public:
  explicit CompletionTableWriter(const std::filesystem::path& path, OpenMode mode = OpenMode::append);

  void write(std::int64_t step, std::span<const CompletionRecord> records);

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace grpo::train
