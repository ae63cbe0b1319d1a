// SPDX-License-Identifier: Apache-2.0
// Tiny model configurations for tests that need a real grpo::models::CausalLM.
#pragma once

#include <grpo/models/model_config.hpp>

#include <cstdint>

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

}  // namespace grpo::testing
