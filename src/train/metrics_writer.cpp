// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/io/atomic_file.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/train/metrics_writer.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <string_view>

namespace grpo::train {
namespace {

std::ofstream open_jsonl(const std::filesystem::path& path, OpenMode mode) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | (mode == OpenMode::append ? std::ios::app : std::ios::trunc));
  GRPO_CHECK(out.good(), "cannot open {} for writing", path.string());
  return out;
}

void append_number(std::string& out, double value) {
  if (std::isfinite(value)) {
    fmt::format_to(std::back_inserter(out), "{}", value);
  } else {
    out += "null";
  }
}

void write_line(std::ofstream& out, const std::string& line, const std::filesystem::path& path) {
  out << line << '\n';
  out.flush();
  GRPO_CHECK(out.good(), "writing {} failed", path.string());
}

}  // namespace

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void drop_records_after(const std::filesystem::path& path, std::int64_t step) {
  if (!std::filesystem::exists(path)) return;
  const std::string text = io::read_file(path);
  constexpr std::string_view kPrefix = "{\"step\":";
  std::string kept;
  kept.reserve(text.size());
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = std::min(text.find('\n', begin), text.size());
    const std::string_view line(text.data() + begin, end - begin);
    std::int64_t record_step = 0;
    const bool record = line.starts_with(kPrefix) &&
                        std::from_chars(line.data() + kPrefix.size(), line.data() + line.size(), record_step).ec ==
                            std::errc();
    if (!record || record_step <= step) {
      kept.append(line);
      kept.push_back('\n');
    }
    begin = end + 1;
  }
  io::write_file_atomically(path, [&](std::ostream& out) { out << kept; });
}

MetricsWriter::MetricsWriter(const std::filesystem::path& path, OpenMode mode)
    : path_(path), out_(open_jsonl(path, mode)) {}

void MetricsWriter::write(std::int64_t step, const Scalars& scalars, double wall_time) {
  std::string line = fmt::format("{{\"step\":{},\"wall_time\":", step);
  append_number(line, wall_time);
  for (const auto& [name, value] : scalars) {
    GRPO_CHECK(name != "step" && name != "wall_time", "MetricsWriter: a scalar may not be named '{}' ({})", name,
               path_.string());
    line.push_back(',');
    append_json_quoted(line, name);
    line.push_back(':');
    append_number(line, value);
  }
  line.push_back('}');
  write_line(out_, line, path_);
}

CompletionTableWriter::CompletionTableWriter(const std::filesystem::path& path, OpenMode mode)
    : path_(path), out_(open_jsonl(path, mode)) {}

void CompletionTableWriter::write(std::int64_t step, std::span<const CompletionRecord> records) {
  for (const CompletionRecord& record : records) {
    std::string line = fmt::format("{{\"step\":{},\"prompt\":", step);
    append_json_quoted(line, record.prompt);
    line += ",\"completion\":";
    append_json_quoted(line, record.completion);
    line += ",\"rewards\":{";
    for (std::size_t i = 0; i < record.rewards.size(); ++i) {
      if (i > 0) line.push_back(',');
      append_json_quoted(line, record.rewards[i].first);
      line.push_back(':');
      append_number(line, record.rewards[i].second.value_or(NAN));
    }
    line += "},\"advantage\":";
    append_number(line, record.advantage);
    if (!record.domain.empty()) {
      line += ",\"domain\":";
      append_json_quoted(line, record.domain);
    }
    line.push_back('}');
    write_line(out_, line, path_);
  }
}

}  // namespace grpo::train
