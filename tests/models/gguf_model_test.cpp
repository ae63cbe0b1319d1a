// SPDX-License-Identifier: Apache-2.0
// Models from GGUF files against transformers' own GGUF loading: tests/data/gguf (tools/gguf-reference).
#include <grpo/core/error.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/gguf_model.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace fs = std::filesystem;
using namespace grpo;

namespace {

const fs::path kDir = fs::path(GRPO_TEST_DATA_DIR) / "gguf";

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// tiny_llama.gguf with `from` (unique in the file) replaced by `to` (same length), loaded; the error message.
std::string patched_load_error(const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  std::ifstream in(kDir / "tiny_llama.gguf", std::ios::binary);
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::size_t at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(from, at + 1) == std::string::npos);
  std::memcpy(bytes.data() + at, to.data(), to.size());
  const fs::path path = fs::temp_directory_path() / ("grpo_gguf_model_test_" + std::to_string(::getpid()) + ".gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string message;
  try {
    models::from_gguf(path);
  } catch (const ParseError& e) {
    message = e.what();
  }
  fs::remove(path);
  CHECK(message.find(path.string()) != std::string::npos);
  return message;
}

}  // namespace

TEST_CASE("GGUF models give transformers' logits: llama (q/k rows permuted, tied head) and qwen2 (biases, own head)",
          "[models][gguf]") {
  const io::SafetensorsFile reference(kDir / "tiny_logits.safetensors");
  const torch::Tensor ids = reference.tensor("input_ids");
  for (const std::string name : {"tiny_llama", "tiny_qwen2"}) {
    INFO(name);
    const fs::path path = kDir / (name + ".gguf");
    const io::GgufFile file(path);
    const models::ModelConfig config = models::gguf_model_config(file);
    CHECK(config.tie_word_embeddings == (name == "tiny_llama"));
    CHECK(config.attention_bias == (name == "tiny_qwen2"));
    CHECK(config.num_key_value_heads == 2);
    CHECK(config.eos_token_ids == std::vector<int64_t>{2});
    CHECK(config.bos_token_id == 1);
    CHECK(config.rms_norm_eps == static_cast<double>(1e-5f));  // stored as f32
    models::CausalLM model = models::from_gguf(path);
    torch::NoGradGuard no_grad;
    const torch::Tensor logits = model->forward(ids);
    const torch::Tensor want = reference.tensor(name);
    REQUIRE(logits.sizes() == want.sizes());
    CHECK(max_abs_diff(logits, want) < 1e-4);
    // from_pretrained takes a .gguf file too, in any dtype.
    const models::CausalLM bf16 = models::from_pretrained(path, torch::kBFloat16);
    CHECK(bf16->lm_head_weight().scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(bf16->lm_head_weight(), model->lm_head_weight().to(torch::kBFloat16)));
  }
}

TEST_CASE("GGUF model errors name the file and the key or tensor", "[models][gguf]") {
  // general.architecture's value: a u64 length 5, then the bytes.
  CHECK_THAT(patched_load_error(std::string("\x05\0\0\0\0\0\0\0llama", 13), std::string("\x05\0\0\0\0\0\0\0gemma", 13)),
             Catch::Contains("general.architecture 'gemma' is not supported (llama, qwen2, qwen3)"));
  CHECK_THAT(patched_load_error("llama.block_count", "llama.block_cOunt"),
             Catch::Contains("no metadata 'llama.block_count'"));
  CHECK_THAT(patched_load_error("output_norm.weight", "output_norX.weight"),
             Catch::Contains("tensor 'output_norX.weight' has no place in a llama model"));
}
