// SPDX-License-Identifier: Apache-2.0
// Models from GGUF files against transformers' own GGUF loading: tests/data/gguf (tools/gguf-reference).
#include <grpo/core/error.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/gguf_model.hpp>
#include <grpo/text/tokenizer.hpp>
#include <support/test_paths.hpp>

#include "support/gguf_testing.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace grpo;

namespace {

const fs::path kDir = fs::path(grpo::testing::test_data_dir()) / "gguf";

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// tiny_llama.gguf with `from` replaced by `to` (same length), loaded: the error message.
std::string patched_load_error(const std::string& from, const std::string& to) {
  return testing::patched_error(kDir / "tiny_llama.gguf", from, to, [](const fs::path& path) { models::from_gguf(path); });
}

}  // namespace

TEST_CASE("GGUF models give transformers' logits: llama (q/k rows permuted, tied head), qwen2 (biases, own head), and "
          "a llama with a tokenizer",
          "[models][gguf]") {
  const io::SafetensorsFile reference(kDir / "tiny_logits.safetensors");
  const torch::Tensor ids = reference.tensor("input_ids");
  for (const std::string name : {"tiny_llama", "tiny_qwen2", "tiny_smollm"}) {
    INFO(name);
    const fs::path path = kDir / (name + ".gguf");
    const io::GgufFile file(path);
    const models::ModelConfig config = models::gguf_model_config(file);
    CHECK(config.tie_word_embeddings == (name != "tiny_qwen2"));
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

TEST_CASE("grpo convert writes a Hugging Face directory that loads as the GGUF file does", "[models][gguf]") {
  const fs::path gguf = kDir / "tiny_smollm.gguf";
  const fs::path dir = fs::temp_directory_path() / ("grpo_convert_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  models::convert_gguf(gguf, dir);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    CHECK(fs::exists(dir / file));
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::tensor({{1, 17, 33, 5, 1100, 2, 41}}, torch::kInt64);
  models::CausalLM from_file = models::from_gguf(gguf);
  models::CausalLM from_dir = models::from_pretrained(dir);
  CHECK(from_dir->config().tie_word_embeddings);
  CHECK(torch::equal(from_dir->forward(ids), from_file->forward(ids)));

  const text::Tokenizer file_tokenizer = text::Tokenizer::from_pretrained(gguf);
  const text::Tokenizer dir_tokenizer = text::Tokenizer::from_pretrained(dir);
  for (const std::string text : {"In 2024, 12345 apples <think>cost</think> $3.50.", "<|im_start|>user\nhi"}) {
    CHECK(dir_tokenizer.encode(text) == file_tokenizer.encode(text));
  }
  CHECK(dir_tokenizer.special_token_ids().eos == 2);
  CHECK(dir_tokenizer.special_token_ids().bos == 1);
  CHECK(dir_tokenizer.special_token_ids().pad == 0);
  const std::vector<text::ChatMessage> chat{{"user", "What is 2+3?", std::nullopt}};
  CHECK(dir_tokenizer.chat_template().render(chat, {.add_generation_prompt = true}) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n");

  // bf16 weights on request; a GGUF file without a tokenizer is refused before anything is written.
  models::convert_gguf(gguf, dir / "bf16", torch::kBFloat16);
  CHECK(models::from_pretrained(dir / "bf16")->lm_head_weight().scalar_type() == torch::kBFloat16);
  CHECK_THROWS_WITH(models::convert_gguf(kDir / "tiny_llama.gguf", dir / "none"),
                    Catch::Contains("tiny_llama.gguf: tokenizer.ggml.model is missing"));
  CHECK_FALSE(fs::exists(dir / "none"));
  fs::remove_all(dir);
}
