// SPDX-License-Identifier: Apache-2.0
// The GGUF reader against llama.cpp's own `gguf` package: tests/data/gguf (tools/gguf-reference/make_fixtures.py).
#include <grpo/core/error.hpp>
#include <grpo/io/gguf.hpp>
#include <support/test_paths.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

namespace fs = std::filesystem;
using grpo::io::GgufFile;

namespace {

const fs::path kDir = fs::path(grpo::testing::test_data_dir()) / "gguf";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Where `text` (a key or tensor name, unique in the fixture) ends in `bytes`.
std::size_t after(const std::string& bytes, const std::string& text) {
  const std::size_t at = bytes.find(text);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(text, at + 1) == std::string::npos);
  return at + text.size();
}

template <typename T>
void put(std::string& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// `bytes` written to a file of its own, opened; returns the error message (empty when it opened).
std::string open_error(const std::string& bytes) {
  const fs::path path = fs::temp_directory_path() / ("grpo_gguf_test_" + std::to_string(::getpid()) + ".gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string message;
  try {
    GgufFile file(path);
  } catch (const grpo::ParseError& e) {
    message = e.what();
  }
  fs::remove(path);
  INFO(message);
  if (!message.empty()) CHECK(message.find(path.string()) != std::string::npos);  // every error names the file
  return message;
}

// Bit patterns of fp32 values (so -0.0 differs from 0.0 and each inf is compared as bits).
torch::Tensor bits(const torch::Tensor& t) { return t.contiguous().view(torch::kInt32); }

}  // namespace

TEST_CASE("GGUF metadata of every value type, tensor infos in PyTorch's order, the file's alignment", "[io][gguf]") {
  const GgufFile file(kDir / "quants.gguf");
  CHECK(file.version() == 3);
  CHECK(file.alignment() == 64);
  CHECK(file.at("general.architecture").as_string("a") == "llama");
  CHECK(file.at("test.u8").as_int("k") == 200);
  CHECK(file.at("test.i8").as_int("k") == -100);
  CHECK(file.at("test.u16").as_int("k") == 60000);
  CHECK(file.at("test.i16").as_int("k") == -30000);
  CHECK(file.at("test.u32").as_int("k") == 4000000000);
  CHECK(file.at("test.i32").as_int("k") == -2000000000);
  CHECK(std::get<std::uint64_t>(file.at("test.u64").value) == (std::uint64_t{1} << 63) + 5);
  CHECK_THROWS_WITH(file.at("test.u64").as_int("test.u64"), Catch::Contains("'test.u64'") && Catch::Contains("range"));
  CHECK(file.at("test.i64").as_int("k") == -(std::int64_t{1} << 62));
  CHECK(file.at("test.f32").as_double("k") == static_cast<double>(0.1f));
  CHECK(file.at("test.f64").as_double("k") == 0.1);
  CHECK(file.at("test.bool").as_bool("k"));
  CHECK(file.at("test.string").as_string("k") == "h\xc3\xa9llo, GGUF");
  CHECK(file.at("test.strings").as_strings("k") ==
        std::vector<std::string>{"a", "", "\xc3\xbcn\xc3\xaf" "code", "<|im_end|>"});
  CHECK(file.at("test.ints").as_ints("k") == std::vector<std::int64_t>{1, -2, 3});
  const auto& nested = file.at("test.nested").as_array("k");
  REQUIRE(nested.size() == 2);
  CHECK(nested[0].as_ints("k") == std::vector<std::int64_t>{1, 2});
  CHECK(nested[1].as_ints("k") == std::vector<std::int64_t>{3});
  CHECK_THROWS_WITH(file.at("test.string").as_int("test.string"),
                    Catch::Contains("'test.string' is string, not an integer"));
  CHECK_THROWS_WITH(file.at("no.such.key"), Catch::Contains("quants.gguf: no metadata 'no.such.key'"));

  REQUIRE(file.tensors().size() == 13);
  for (const auto& info : file.tensors()) {
    INFO(info.name);
    CHECK(info.offset % 64 == 0);
  }
  CHECK(file.find_tensor("Q4_K")->shape == std::vector<std::int64_t>{3, 512});  // ggml ne = [512, 3]
  CHECK(file.find_tensor("Q4_K")->bytes == 3 * 2 * 144);
  CHECK(file.find_tensor("vector")->shape == std::vector<std::int64_t>{32});
  CHECK(file.find_tensor("cube")->shape == std::vector<std::int64_t>{2, 3, 64});
  CHECK(file.find_tensor("nothing") == nullptr);
  CHECK_THROWS_WITH(file.tensor("nothing"), Catch::Contains("no tensor 'nothing'"));
}

TEST_CASE("every GGML type dequantizes bit for bit as gguf.quants.dequantize, to any floating dtype", "[io][gguf]") {
  const GgufFile quants(kDir / "quants.gguf");
  const GgufFile expected(kDir / "expected.gguf");
  REQUIRE(expected.tensors().size() == quants.tensors().size());
  for (const auto& info : quants.tensors()) {
    INFO(info.name << " (" << info.layout.name << ")");
    const torch::Tensor got = quants.tensor(info.name);
    const torch::Tensor want = expected.tensor(info.name);
    CHECK(expected.find_tensor(info.name)->layout.type == grpo::io::GgmlType::f32);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(got.dtype() == torch::kFloat32);
    CHECK(torch::equal(bits(got), bits(want)));
    CHECK(torch::equal(quants.tensor(info.name, torch::kBFloat16), got.to(torch::kBFloat16)));
    CHECK(torch::equal(quants.tensor(info.name, torch::kFloat64), got.to(torch::kFloat64)));
  }
  // Independently of the fixture's reference: the 1-d F32 tensor is 0, 0.25, ..., 7.75.
  CHECK(torch::equal(quants.tensor("vector"), torch::arange(32, torch::kFloat32) / 4));
  CHECK_THROWS_WITH(quants.tensor("vector", torch::kInt32), Catch::Contains("dtype must be floating"));
}

TEST_CASE("GGML dequantization of hand-made blocks: Q8_0 and Q4_0 by hand", "[io][gguf]") {
  // Q8_0: fp16 scale 0.5 (0x3800), then 32 int8 values -16..15.
  std::uint8_t q8[34] = {0x00, 0x38};
  for (int i = 0; i < 32; ++i) q8[2 + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(i - 16));
  float out[32];
  grpo::io::dequantize_ggml(grpo::io::GgmlType::q8_0, q8, 32, out);
  for (int i = 0; i < 32; ++i) CHECK(out[i] == 0.5f * static_cast<float>(i - 16));
  // Q4_0: fp16 scale -2 (0xC000); byte i holds value i in its low nibble and value i + 16 in its high one.
  std::uint8_t q4[18] = {0x00, 0xC0};
  for (int i = 0; i < 16; ++i) q4[2 + i] = static_cast<std::uint8_t>(i | ((15 - i) << 4));
  grpo::io::dequantize_ggml(grpo::io::GgmlType::q4_0, q4, 32, out);
  for (int i = 0; i < 16; ++i) {
    CHECK(out[i] == -2.0f * static_cast<float>(i - 8));
    CHECK(out[i + 16] == -2.0f * static_cast<float>(15 - i - 8));
  }
  CHECK_THROWS_WITH(grpo::io::dequantize_ggml(grpo::io::GgmlType::q4_0, q4, 31, out),
                    Catch::Contains("not whole blocks of 32"));
}

TEST_CASE("bad GGUF files are errors naming the file and the field, before any large allocation", "[io][gguf]") {
  const std::string good = read_bytes(kDir / "quants.gguf");
  REQUIRE(open_error(good).empty());
  const auto patched = [&](const std::function<void(std::string&)>& change) {
    std::string bytes = good;
    change(bytes);
    return open_error(bytes);
  };
  CHECK_THAT(patched([](std::string& b) { b[0] = 'X'; }), Catch::Contains("magic") && Catch::Contains("not a GGUF"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint32_t>(b, 4, 1); }),
             Catch::Contains("version 1 is not supported"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint32_t>(b, 4, 0x03000000); }), Catch::Contains("big-endian"));
  CHECK_THAT(open_error(good.substr(0, 10)), Catch::Contains("tensor count") && Catch::Contains("truncated"));
  CHECK_THAT(open_error(good.substr(0, 300)), Catch::Contains("tensor count") && Catch::Contains("cannot fit"));
  CHECK_THAT(open_error(good.substr(0, after(good, "Q4_K"))),
             Catch::Contains("tensor 'Q4_K' n_dims") && Catch::Contains("truncated"));
  CHECK_THAT(open_error(good.substr(0, good.size() - 100)),
             Catch::Contains("tensor 'cube'") && Catch::Contains("beyond the file"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint64_t>(b, 8, std::uint64_t{1} << 60); }),
             Catch::Contains("tensor count") && Catch::Contains("cannot fit"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint64_t>(b, 16, std::uint64_t{1} << 60); }),
             Catch::Contains("metadata count") && Catch::Contains("cannot fit"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint64_t>(b, 24, std::uint64_t{1} << 60); }),
             Catch::Contains("metadata entry 0 key") && Catch::Contains("cannot fit"));
  // test.strings: key, then u32 type 9 (array), u32 element type 8 (string), u64 count.
  CHECK_THAT(patched([](std::string& b) { put<std::uint64_t>(b, after(b, "test.strings") + 8, std::uint64_t{1} << 62); }),
             Catch::Contains("metadata 'test.strings'") && Catch::Contains("cannot fit"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint32_t>(b, after(b, "test.bool"), 13); }),
             Catch::Contains("metadata 'test.bool'") && Catch::Contains("unknown value type 13"));
  CHECK_THAT(patched([](std::string& b) { b[after(b, "test.bool") + 4] = 7; }),
             Catch::Contains("metadata 'test.bool'") && Catch::Contains("bool must be 0 or 1"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint32_t>(b, after(b, "general.alignment") + 4, 48); }),
             Catch::Contains("general.alignment") && Catch::Contains("power of two"));
  // Tensor info of "Q4_0": name, u32 n_dims (2), u64 ne[2], u32 type, u64 offset.
  CHECK_THAT(patched([](std::string& b) { put<std::uint32_t>(b, after(b, "Q4_0"), 5); }),
             Catch::Contains("tensor 'Q4_0'") && Catch::Contains("n_dims 5"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint64_t>(b, after(b, "Q4_0") + 4, std::uint64_t{1} << 50); }),
             Catch::Contains("tensor 'Q4_0'") && Catch::Contains("larger than the file"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint64_t>(b, after(b, "Q4_0") + 4, 500); }),
             Catch::Contains("tensor 'Q4_0'") && Catch::Contains("not whole Q4_0 blocks of 32"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint32_t>(b, after(b, "Q4_0") + 20, 16); }),
             Catch::Contains("tensor 'Q4_0'") && Catch::Contains("IQ2_XXS is not supported") &&
                 Catch::Contains("Q4_K"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint32_t>(b, after(b, "Q4_0") + 20, 99); }),
             Catch::Contains("tensor type 99 (unknown to ggml) is not supported"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint64_t>(b, after(b, "Q4_0") + 24, 32); }),
             Catch::Contains("tensor 'Q4_0'") && Catch::Contains("not a multiple of the alignment 64"));
  CHECK_THAT(patched([](std::string& b) { put<std::uint64_t>(b, after(b, "cube") + 32, std::uint64_t{1} << 40); }),
             Catch::Contains("tensor 'cube'") && Catch::Contains("beyond the file"));
  CHECK_THAT(patched([](std::string& b) { std::memcpy(b.data() + after(b, "Q4_1") - 4, "Q4_0", 4); }),
             Catch::Contains("tensor 'Q4_0'") && Catch::Contains("appears twice"));
}
