// SPDX-License-Identifier: Apache-2.0
// The Hugging Face config.json of a causal LM of the Qwen2 family (Qwen2/Qwen2.5, Qwen3, Llama).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::models {

/// Which variant of the decoder: selected by config.json's "model_type".
enum class Architecture {
  qwen2,  ///< "qwen2": q/k/v projections with bias (Qwen2, Qwen2.5)
  qwen3,  ///< "qwen3": RMSNorm on each head of q and k, no q/k/v bias, explicit head_dim
  llama,  ///< "llama": no bias (attention_bias / mlp_bias may turn it on), optional llama3 rope scaling
};

/// Llama 3.1-style frequency-dependent RoPE scaling (config.json "rope_scaling" with rope_type "llama3").
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

/// The fields of config.json that define the network. Member defaults are Qwen2.5-0.5B's; from_json fills absent
/// fields with the defaults of transformers' config class for the model_type.
struct ModelConfig {
  Architecture architecture = Architecture::qwen2;
  int64_t vocab_size = 151936;
  int64_t hidden_size = 896;
  int64_t intermediate_size = 4864;
  int64_t num_hidden_layers = 24;
  int64_t num_attention_heads = 14;
  int64_t num_key_value_heads = 2;
  int64_t head_dim = 0;  ///< 0 → hidden_size / num_attention_heads (Qwen3 sets it explicitly)
  int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  std::optional<Llama3RopeScaling> rope_scaling;
  bool tie_word_embeddings = true;
  bool attention_bias = true;  ///< bias on q/k/v (and o for Qwen3/Llama); Qwen2 always has q/k/v bias
  bool mlp_bias = false;
  std::vector<int64_t> eos_token_ids;  ///< "eos_token_id" (a number or a list)
  std::optional<int64_t> bos_token_id;
  torch::ScalarType dtype = torch::kFloat32;  ///< "torch_dtype" (or "dtype"), the dtype the weights are stored in

  /// head_dim, or hidden_size / num_attention_heads when it is 0.
  int64_t head_dimension() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  /// Throws grpo::ConfigError naming the field: non-positive sizes, heads that do not divide, etc.
  void validate() const;

  /// Parses config.json text; `source` names the file in error messages (ParseError / ConfigError name the field).
  /// Unknown fields are ignored; unsupported features (rope_scaling other than llama3, sliding-window attention in
  /// use) are errors, never silently wrong logits.
  static ModelConfig from_json(std::string_view json, std::string_view source = "config.json");
  static ModelConfig from_file(const std::filesystem::path& path);
  /// config.json text that transformers reads back to the same network (architectures, model_type, dtype, sizes).
  std::string to_json() const;
};

/// "qwen2", "qwen3" or "llama".
std::string_view to_string(Architecture architecture);

}  // namespace grpo::models
