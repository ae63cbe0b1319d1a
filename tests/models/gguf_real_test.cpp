// SPDX-License-Identifier: Apache-2.0
// The GGUF checks on a real pretrained model (SmolLM2-135M-Instruct, Q4_1 with Q8_0 and F32 tensors), against the
// reference that tools/gguf-reference/real_file_reference.py writes. Hidden from the default run: the driver
// tests/models/real_gguf_check.sh (ctest's models/real SmolLM2 GGUF) fetches the file (scripts/fetch-smollm2.sh), writes the
// reference and runs this case with GRPO_REAL_GGUF (the file) and GRPO_REAL_GGUF_REFERENCE (the reference's
// directory); the directory `grpo convert` would write goes to GRPO_REAL_GGUF_CONVERTED, for transformers to load.
#include <grpo/core/error.hpp>
#include <grpo/io/gguf.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/gguf_model.hpp>
#include <grpo/text/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <simdjson.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace grpo;

namespace {

fs::path required_env(const char* name) {
  const char* value = std::getenv(name);
  INFO(name << " must be set: run tests/models/real_gguf_check.sh");
  REQUIRE(value != nullptr);
  return value;
}

/// real_file_reference.py's checksum: sum over i of (bits_i * (i mod 65521 + 1)) mod (2^31 - 1), exactly.
int64_t checksum(const torch::Tensor& values) {
  constexpr int64_t kPrime = (int64_t{1} << 31) - 1;
  const torch::Tensor bits = values.contiguous().view(torch::kInt32).reshape(-1).to(torch::kInt64).bitwise_and(int64_t{0xFFFFFFFF});
  const torch::Tensor weights = torch::arange(bits.numel(), torch::kInt64).remainder(65521) + 1;
  return (bits * weights).remainder(kPrime).sum().item<int64_t>();
}

}  // namespace

TEST_CASE("a real GGUF model: every tensor bit for bit, transformers' logits, tokenizer ids, grpo convert",
          "[.real_gguf]") {
  const fs::path gguf = required_env("GRPO_REAL_GGUF");
  const fs::path reference = required_env("GRPO_REAL_GGUF_REFERENCE");
  const io::GgufFile file(gguf);
  simdjson::dom::parser parser;

  SECTION("every tensor dequantizes as gguf.quants.dequantize") {
    const simdjson::padded_string json(io::read_file(reference / "checksums.json"));
    const simdjson::dom::object sums = parser.parse(json).get_object();
    std::size_t checked = 0;
    for (const io::GgufTensorInfo& info : file.tensors()) {
      INFO(info.name);
      const simdjson::dom::array want = sums[info.name].get_array();
      const torch::Tensor values = file.tensor(info.name, torch::kFloat32);
      CHECK(values.numel() == int64_t(want.at(1)));
      CHECK(std::to_string(checksum(values)) == std::string_view(want.at(0)));
      ++checked;
    }
    CHECK(checked == sums.size());
  }

  SECTION("the model's logits are transformers' on a chat prompt") {
    const io::SafetensorsFile expected(reference / "logits.safetensors");
    const torch::Tensor ids = expected.tensor("input_ids");
    models::CausalLM model = models::from_gguf(gguf);
    torch::NoGradGuard no_grad;
    const torch::Tensor logits = model->forward(ids);
    const torch::Tensor want_logits = expected.tensor("logits").to(torch::kFloat64);
    const double error = (logits.to(torch::kFloat64) - want_logits).abs().max().item<double>();
    const double scale = want_logits.abs().max().item<double>();
    INFO("max |logit difference| " << error << ", largest |logit| " << scale);
    // 30 fp32 layers summed in another order by another BLAS: the difference grows with the logits' scale. Measured
    // 6.2e-5 on LibTorch 2.11 and 1.2e-4 on Debian's 1.13 with OpenBLAS, for a largest |logit| of 38 (about 30 ulps
    // of it); 1e-5 of the largest logit leaves a factor of 3 over the worst.
    CHECK(error < 1e-5 * scale);
    // The same prompt through the file's own tokenizer and chat template.
    const text::Tokenizer tokenizer = text::Tokenizer::from_pretrained(gguf);
    const std::vector<text::ChatMessage> chat{
        {"user",
         "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
         "clips did Natalia sell altogether?",
         std::nullopt}};
    const std::vector<int32_t> prompt = tokenizer.encode_chat(chat, {.add_generation_prompt = true});
    const torch::Tensor want = ids[0];
    CHECK(torch::equal(torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), torch::kInt64), want));
  }

  SECTION("the tokenizer gives transformers' ids on the corpus") {
    const simdjson::padded_string json(io::read_file(reference / "tokens.json"));
    const simdjson::dom::element tokens = parser.parse(json);
    const text::Tokenizer tokenizer = text::Tokenizer::from_pretrained(gguf);
    std::vector<std::string> texts;
    for (const auto text : tokens["texts"].get_array()) texts.emplace_back(std::string_view(text));
    std::size_t index = 0, wrong = 0;
    for (const auto ids : tokens["ids"].get_array()) {
      std::vector<int32_t> want;
      for (const auto id : ids.get_array()) want.push_back(static_cast<int32_t>(int64_t(id)));
      if (tokenizer.encode(texts[index]) != want) {
        ++wrong;
        UNSCOPED_INFO("text " << index << ": " << texts[index]);
      }
      ++index;
    }
    CHECK(index > 3000);
    CHECK(wrong == 0);
  }

  SECTION("grpo convert writes a directory that loads to the same model and tokenizer") {
    const char* target = std::getenv("GRPO_REAL_GGUF_CONVERTED");
    const fs::path dir = target ? fs::path(target) : fs::temp_directory_path() / "grpo_real_gguf_converted";
    models::convert_gguf(gguf, dir);
    const io::SafetensorsFile expected(reference / "logits.safetensors");
    const torch::Tensor ids = expected.tensor("input_ids");
    models::CausalLM from_file = models::from_gguf(gguf);
    models::CausalLM from_dir = models::from_pretrained(dir);
    torch::NoGradGuard no_grad;
    CHECK(torch::equal(from_dir->forward(ids), from_file->forward(ids)));
    const text::Tokenizer tokenizer = text::Tokenizer::from_pretrained(dir);
    CHECK(tokenizer.special_token_ids().eos == 2);
    if (!target) fs::remove_all(dir);
  }
}
