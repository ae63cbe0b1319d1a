// SPDX-License-Identifier: Apache-2.0
// Tiny model configurations for tests that need a real grpo::models::CausalLM, and copies of a module's parameters to
// compare runs by.
#pragma once

#include <grpo/models/causal_lm.hpp>
#include <grpo/models/model_config.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace grpo::testing {

/// The sizes a test cares about; everything else keeps ModelConfig's defaults.
struct TinyModelSizes {
  int64_t vocab = 16;
  int64_t hidden = 8;
  int64_t intermediate = 16;
  int64_t layers = 1;
  int64_t heads = 2;
  int64_t kv_heads = 1;
  double rope_theta = 10000.0;
};

/// A Qwen2 config of the given sizes (tied embeddings, q/k/v bias), small enough to build in microseconds.
inline models::ModelConfig tiny_model_config(const TinyModelSizes& sizes = {}) {
  models::ModelConfig c;
  c.vocab_size = sizes.vocab;
  c.hidden_size = sizes.hidden;
  c.intermediate_size = sizes.intermediate;
  c.num_hidden_layers = sizes.layers;
  c.num_attention_heads = sizes.heads;
  c.num_key_value_heads = sizes.kv_heads;
  c.rope_theta = sizes.rope_theta;
  return c;
}

/// A model of `config` in fp64 with every parameter random and non-trivial (norm weights in [0.5, 1.5], biases
/// N(0, 0.1), matrices N(0, 0.3)), so that tests see each of them.
inline models::CausalLM random_fp64_model(const models::ModelConfig& config, int seed) {
  torch::manual_seed(seed);
  models::CausalLM model(config, models::WeightInit::none, torch::kFloat64);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    if (p.value().dim() == 1) p.value().uniform_(0.5, 1.5);
    if (p.key().find("bias") != std::string::npos) p.value().normal_(0.0, 0.1);
    if (p.value().dim() == 2) p.value().normal_(0.0, 0.3);
  }
  return model;
}

/// A fresh empty directory under the system temp directory, unique to this process.
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("grpo_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Copies of a module's parameters, in order.
inline std::vector<torch::Tensor> parameters_of(torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters()) out.push_back(p.detach().clone());
  return out;
}

/// Whether two lists of tensors are equal element for element (torch::equal: same shapes and values).
inline bool same_tensors(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace grpo::testing
