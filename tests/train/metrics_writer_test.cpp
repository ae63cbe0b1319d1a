// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/metrics_writer.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using grpo::train::CompletionRecord;
using grpo::train::CompletionTableWriter;
using grpo::train::MetricsWriter;
using grpo::train::OpenMode;
using grpo::train::Scalars;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("MetricsWriter writes one JSON object per step, non-finite values as null", "[train][metrics]") {
  const fs::path dir = fresh_dir("grpo_metrics_test");
  const fs::path path = dir / "sub" / "metrics.jsonl";  // parent directories are created
  {
    MetricsWriter writer(path);
    writer.write(1, {{"loss", 0.25}, {"reward/mean", -3.0}, {"a\"b", 1e-7}}, 100.5);
    writer.write(2,
                 {{"nan", std::nan("")},
                  {"inf", std::numeric_limits<double>::infinity()},
                  {"-inf", -std::numeric_limits<double>::infinity()}},
                 101.0);
    CHECK_THROWS_AS(writer.write(3, {{"step", 1.0}}), grpo::Error);
    CHECK_THROWS_AS(writer.write(3, {{"wall_time", 1.0}}), grpo::Error);
  }
  REQUIRE(read_lines(path) == std::vector<std::string>{
                                  R"({"step":1,"wall_time":100.5,"loss":0.25,"reward/mean":-3,"a\"b":1e-07})",
                                  R"({"step":2,"wall_time":101,"nan":null,"inf":null,"-inf":null})",
                              });
  {
    MetricsWriter resumed(path);  // append (the default) continues the file
    resumed.write(3, {}, 102.0);
  }
  CHECK(read_lines(path).size() == 3);
  CHECK(read_lines(path)[2] == R"({"step":3,"wall_time":102})");
  {
    MetricsWriter fresh(path, OpenMode::truncate);
    fresh.write(7, {{"x", 0.1}}, 5.0);
  }
  CHECK(read_lines(path) == std::vector<std::string>{R"({"step":7,"wall_time":5,"x":0.1})"});
  fs::remove_all(dir);
}

TEST_CASE("append_scalars takes pairs from any range, with a prefix", "[train][metrics]") {
  Scalars scalars = {{"a", 1.0}};
  const std::map<std::string, double> more = {{"m", 2.0}, {"n", 3.0}};
  grpo::train::append_scalars(scalars, more, "rewards/");
  const std::vector<std::pair<std::string, float>> floats = {{"f", 0.5f}};
  grpo::train::append_scalars(scalars, floats);
  CHECK(scalars == Scalars{{"a", 1.0}, {"rewards/m", 2.0}, {"rewards/n", 3.0}, {"f", 0.5}});
}

TEST_CASE("CompletionTableWriter escapes strings and writes missing rewards as null", "[train][metrics]") {
  const fs::path dir = fresh_dir("grpo_completions_test");
  const fs::path path = dir / "completions.jsonl";
  const std::vector<CompletionRecord> records = {
      {"say \"hi\"\n", "tab\there\x01\\", {{"accuracy", 1.0}, {"format", std::nullopt}}, -0.5},
      {"p", "", {}, std::nan("")},
      {"q", "c", {{"code_tests", 0.5}}, 1.0, "code"},
  };
  {
    CompletionTableWriter writer(path);
    writer.write(4, records);
  }
  CHECK(read_lines(path) ==
        std::vector<std::string>{
            R"({"step":4,"prompt":"say \"hi\"\n","completion":"tab\there\u0001\\","rewards":{"accuracy":1,"format":null},"advantage":-0.5})",
            R"({"step":4,"prompt":"p","completion":"","rewards":{},"advantage":null})",
            R"({"step":4,"prompt":"q","completion":"c","rewards":{"code_tests":0.5},"advantage":1,"domain":"code"})",
        });
  fs::remove_all(dir);
}

TEST_CASE("drop_records_after keeps the records up to a resumed step and every other line", "[train][metrics]") {
  const fs::path dir = fresh_dir("grpo_metrics_drop_test");
  const fs::path path = dir / "metrics.jsonl";
  grpo::train::drop_records_after(path, 3);  // no file yet: nothing happens
  CHECK(!fs::exists(path));
  {
    MetricsWriter writer(path);
    for (std::int64_t step : {0, 1, 2, 3, 10, 4, 12}) writer.write(step, {{"x", static_cast<double>(step)}}, 1.0);
  }
  std::ofstream(path, std::ios::app) << "a line of someone else's\n";
  grpo::train::drop_records_after(path, 3);
  CHECK(read_lines(path) == std::vector<std::string>{
                                R"({"step":0,"wall_time":1,"x":0})", R"({"step":1,"wall_time":1,"x":1})",
                                R"({"step":2,"wall_time":1,"x":2})", R"({"step":3,"wall_time":1,"x":3})",
                                "a line of someone else's"});
  // The resumed run appends after them.
  {
    MetricsWriter resumed(path);
    resumed.write(4, {}, 2.0);
  }
  CHECK(read_lines(path).back() == R"({"step":4,"wall_time":2})");
  fs::remove_all(dir);
}
