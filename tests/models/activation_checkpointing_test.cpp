// SPDX-License-Identifier: Apache-2.0
#include <grpo/models/causal_lm.hpp>
#include <grpo/models/lora.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include <map>
#include <string>

using grpo::models::Architecture;
using grpo::models::CausalLM;

namespace {

grpo::models::ModelConfig config_of(Architecture architecture) {
  auto c = grpo::testing::tiny_model_config({.vocab = 19, .hidden = 12, .intermediate = 20, .layers = 3, .heads = 3});
  c.architecture = architecture;
  c.head_dim = architecture == Architecture::qwen3 ? 6 : 0;
  c.attention_bias = architecture == Architecture::qwen2;
  c.tie_word_embeddings = architecture != Architecture::llama;
  return c;
}

/// Gradients of Σ logits·weights (every parameter that requires grad, by name) with left-padded, ragged rows.
std::map<std::string, torch::Tensor> gradients(CausalLM& model, bool checkpointing) {
  model->set_gradient_checkpointing(checkpointing);
  model->zero_grad();
  const auto ids = torch::tensor({{0, 0, 3, 7, 1, 4}, {2, 5, 6, 1, 8, 9}, {0, 11, 2, 2, 3, 17}}, torch::kInt64);
  const auto mask = torch::tensor({{0, 0, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1}, {0, 1, 1, 1, 1, 1}}, torch::kInt64);
  torch::manual_seed(99);  // the loss weights, and LoRA dropout's draws
  const auto weights = torch::randn({3, 6, model->config().vocab_size}, torch::kFloat64);
  (model->forward(ids, mask) * weights).sum().backward();
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model->named_parameters()) {
    if (p.value().requires_grad()) out.emplace(p.key(), p.value().grad().clone());
  }
  return out;
}

void require_same(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, grad] : a) {
    INFO(name);
    REQUIRE(b.count(name) == 1);
    REQUIRE(grad.abs().sum().item<double>() > 0.0);  // the check sees every parameter
    GRPO_REQUIRE_CLOSE(b.at(name), grad, 1e-12, 1e-13);
  }
}

}  // namespace

TEST_CASE("Activation checkpointing gives the gradients of the plain backward (fp64) for Qwen2, Qwen3, Llama",
          "[models][checkpointing]") {
  for (auto architecture : {Architecture::qwen2, Architecture::qwen3, Architecture::llama}) {
    INFO(grpo::models::to_string(architecture));
    auto model = grpo::testing::random_fp64_model(config_of(architecture), 5);
    const auto plain = gradients(model, false);
    REQUIRE(plain.size() == model->parameters().size());
    require_same(plain, gradients(model, true));
  }
}

TEST_CASE("Activation checkpointing with LoRA: frozen embeddings, and dropout replayed in the recomputation",
          "[models][checkpointing][lora]") {
  auto model = grpo::testing::random_fp64_model(config_of(Architecture::qwen2), 6);
  grpo::models::add_lora(model, {.rank = 2, .alpha = 4, .dropout = 0.3, .target_modules = {"all-linear"}});
  {
    torch::NoGradGuard no_grad;  // B = 0 at start would give A no gradient
    for (auto& p : model->named_parameters()) {
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.5);
    }
  }
  model->train(true);  // dropout on: the recomputation must draw the same masks
  const auto plain = gradients(model, false);
  REQUIRE(plain.size() == 2 * 7 * 3);  // A and B of 7 projections in 3 layers; nothing else trains
  require_same(plain, gradients(model, true));
  // The forward with checkpointing leaves the generator where the plain forward does.
  model->set_gradient_checkpointing(true);
  torch::manual_seed(1);
  model->forward(torch::tensor({{1, 2, 3}}, torch::kInt64)).sum().backward();
  const auto after_checkpointed = torch::rand({1}, torch::kFloat64).item<double>();
  model->set_gradient_checkpointing(false);
  torch::manual_seed(1);
  model->forward(torch::tensor({{1, 2, 3}}, torch::kInt64)).sum().backward();
  CHECK(torch::rand({1}, torch::kFloat64).item<double>() == after_checkpointed);
}

TEST_CASE("Activation checkpointing does not apply without gradients or with a KV cache", "[models][checkpointing]") {
  auto model = grpo::testing::random_fp64_model(config_of(Architecture::qwen3), 8);
  const auto ids = torch::tensor({{1, 2, 3, 4}}, torch::kInt64);
  const auto plain = model->forward(ids).detach();
  model->set_gradient_checkpointing(true);
  {
    torch::NoGradGuard no_grad;
    GRPO_REQUIRE_CLOSE(model->forward(ids), plain, 0, 0);
    grpo::models::KvCache cache;
    GRPO_REQUIRE_CLOSE(model->forward_step(ids, torch::ones_like(ids), cache), plain, 1e-12, 1e-12);
  }
  const auto recorded = model->forward(ids);
  REQUIRE(recorded.requires_grad());
  GRPO_REQUIRE_CLOSE(recorded.detach(), plain, 0, 0);
  // deep_copy keeps the setting.
  CHECK(grpo::models::deep_copy(model)->gradient_checkpointing());
}
