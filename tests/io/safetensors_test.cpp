// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/safetensors.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("grpo_io_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// Writes a safetensors file by hand: little-endian u64 header length, header, data bytes.
void write_raw(const fs::path& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
}

template <typename T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return out;
}

}  // namespace

TEST_CASE("SafetensorsFile reads a file written by hand", "[io]") {
  auto dir = temp_dir("hand");
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string data = bytes_of<float>({1.5f, -2.0f});
  data.append(bytes_of<int64_t>({7}));
  write_raw(dir / "x.safetensors", header, data);
  grpo::io::SafetensorsFile file(dir / "x.safetensors");
  REQUIRE(file.metadata().at("format") == "pt");
  REQUIRE(file.entries().size() == 2);
  REQUIRE(file.entries()[0].name == "a");  // sorted by offset
  auto a = file.tensor("a");
  REQUIRE(a.scalar_type() == torch::kFloat32);
  REQUIRE(a.sizes() == torch::IntArrayRef({2}));
  REQUIRE(a[0].item<float>() == 1.5f);
  REQUIRE(a[1].item<float>() == -2.0f);
  auto b = file.tensor("b");
  REQUIRE(b.dim() == 0);
  REQUIRE(b.item<int64_t>() == 7);
  REQUIRE_THROWS_WITH(file.tensor("c"), Catch::Contains(std::string(R"(no tensor named "c")")));
  fs::remove_all(dir);
}

TEST_CASE("save_safetensors round-trips every dtype and writes a header padded to 8 bytes", "[io]") {
  auto dir = temp_dir("roundtrip");
  torch::manual_seed(5);
  std::map<std::string, torch::Tensor> tensors{
      {"f32", torch::randn({3, 4})},
      {"f64", torch::randn({2}, torch::kFloat64)},
      {"bf16", torch::randn({5}).to(torch::kBFloat16)},
      {"f16", torch::randn({2, 2}).to(torch::kFloat16)},
      {"i64", torch::arange(6, torch::kInt64).view({2, 3})},
      {"i32", torch::arange(3, torch::kInt32)},
      {"u8", torch::arange(4, torch::kUInt8)},
      {"flag", torch::tensor({true, false})},
      {"empty", torch::zeros({0, 7})},
      {"scalar", torch::tensor(2.5)},
      {"strided", torch::randn({4, 6}).t()},  // non-contiguous input is stored contiguous
      {"name with \"quotes\"", torch::ones({1})},
  };
  grpo::io::save_safetensors(dir / "m.safetensors", tensors, {{"format", "pt"}, {"note", "a\nb"}});
  REQUIRE_FALSE(fs::exists(dir / "m.safetensors.tmp"));

  std::ifstream raw(dir / "m.safetensors", std::ios::binary);
  uint64_t n = 0;
  raw.read(reinterpret_cast<char*>(&n), 8);
  REQUIRE(n % 8 == 0);

  grpo::io::SafetensorsFile file(dir / "m.safetensors");
  REQUIRE(file.metadata().at("note") == "a\nb");
  for (const auto& [name, t] : tensors) {
    INFO(name);
    auto back = file.tensor(name);
    REQUIRE(back.scalar_type() == t.scalar_type());
    REQUIRE(back.sizes() == t.sizes());
    REQUIRE(torch::equal(back, t));
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint directories round-trip as one file or as shards with an index", "[io]") {
  auto dir = temp_dir("shards");
  std::map<std::string, torch::Tensor> tensors;
  for (int i = 0; i < 5; ++i) tensors.emplace("layer." + std::to_string(i), torch::full({16}, float(i)));
  grpo::io::save_checkpoint_tensors(dir, tensors, /*max_shard_bytes=*/128);  // 64 bytes each → 3 shards
  REQUIRE(fs::exists(dir / "model.safetensors.index.json"));
  REQUIRE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  auto back = grpo::io::load_checkpoint_tensors(dir);
  REQUIRE(back.size() == 5);
  for (const auto& [name, t] : tensors) REQUIRE(torch::equal(back.at(name), t));

  grpo::io::save_checkpoint_tensors(dir, tensors);  // now small enough for one file; the index must go
  REQUIRE_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  REQUIRE(grpo::io::load_checkpoint_tensors(dir).size() == 5);
  REQUIRE_THROWS_WITH(grpo::io::load_checkpoint_tensors(dir / "missing"),
                      Catch::Contains("neither model.safetensors nor model.safetensors.index.json"));
  fs::remove_all(dir);
}

TEST_CASE("SafetensorsFile rejects malformed files naming the file and the field", "[io][errors]") {
  auto dir = temp_dir("bad");
  auto path = dir / "bad.safetensors";
  auto expect_error = [&](const std::string& header, const std::string& data, const std::string& message) {
    write_raw(path, header, data);
    INFO(header);
    REQUIRE_THROWS_AS(grpo::io::SafetensorsFile(path), grpo::ParseError);
    REQUIRE_THROWS_WITH(grpo::io::SafetensorsFile(path), Catch::Contains(path.string()) && Catch::Contains(message));
  };
  const std::string eight(8, '\0');
  expect_error("{", "", "not a JSON object");
  expect_error("[1]", "", "not a JSON object");
  expect_error(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x", "unsupported dtype \"F8_E4M3\"");
  expect_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight, "needs 12");
  expect_error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", eight, "non-negative");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight, "previous tensor ends at 0");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight, "cover 4 bytes but the data buffer holds 8");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
               eight, "must not overlap");
  expect_error(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "abcd", "missing string field \"dtype\"");
  expect_error(R"({"__metadata__":{"k":1}})", "", "\"__metadata__\".\"k\" must be a string");

  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  REQUIRE_THROWS_WITH(grpo::io::SafetensorsFile(path), Catch::Contains("shorter than the 8-byte header length"));
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = 1000;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  REQUIRE_THROWS_WITH(grpo::io::SafetensorsFile(path), Catch::Contains("header length 1000 exceeds the file"));
  REQUIRE_THROWS_WITH(grpo::io::SafetensorsFile(dir / "nope.safetensors"), Catch::Contains("cannot open file"));
  fs::remove_all(dir);
}
