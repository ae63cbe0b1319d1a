// SPDX-License-Identifier: Apache-2.0
// A reference causal LM of the Qwen2 family (Qwen2/Qwen2.5, Qwen3, Llama) in LibTorch modules, loading and saving
// Hugging Face checkpoints (config.json + safetensors) with Hugging Face's tensor names.
//
// Shapes: B sequences, T tokens (S = cached + new tokens), H hidden size, V vocabulary, D head dim,
// Hq query heads, Hkv key/value heads.
// Masks: attention_mask [B, T] (or [B, S] with a cache) is 1 for real tokens and 0 for padding; left padding is the
// norm for generation. Positions are counted over real tokens only (cumsum(mask) − 1), as transformers does.
#pragma once

#include <grpo/models/model_config.hpp>

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace grpo::models {

/// Keys and values of every layer for incremental decoding: keys[l], values[l] are [B, Hkv, S, D], views of the
/// first S positions of buffers that grow by doubling; decoding steps write into them in place. Copies of a
/// KvCache share the buffers until one of them appends, which then reallocates its own.
struct KvCache {
  std::vector<torch::Tensor> keys, values;
  /// Number of cached positions S (0 when empty).
  int64_t length() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }
  /// Keeps only the batch rows in `rows` (int64 indices), e.g. to drop finished sequences.
  void select_rows(const torch::Tensor& rows);
};

/// RMSNorm: x / sqrt(mean(x²) + eps) · weight, computed in at least fp32 and cast back (as transformers does).
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t size, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RmsNorm);

/// Grouped-query self-attention with rotary embeddings (and per-head q/k RMSNorm for Qwen3).
struct AttentionImpl : torch::nn::Module {
  explicit AttentionImpl(const ModelConfig& config);
  /// x [B, T, H]; cos/sin [B, T, D]; additive mask [B, 1, T, S]; key/value: the cached [B, Hkv, S − T, D] or
  /// undefined, extended to [B, Hkv, S, D] (see KvCache). Returns [B, T, H].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, torch::Tensor& key, torch::Tensor& value);
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};
  int64_t heads, kv_heads, head_dim;
};
TORCH_MODULE(Attention);

/// SwiGLU MLP: down(silu(gate(x)) · up(x)).
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Mlp);

/// Pre-norm decoder layer: x + attn(norm(x)), then + mlp(norm(x)).
struct DecoderLayerImpl : torch::nn::Module {
  explicit DecoderLayerImpl(const ModelConfig& config);
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(DecoderLayer);

/// The decoder stack ("model." in Hugging Face names): embed_tokens, layers, norm.
struct DecoderImpl : torch::nn::Module {
  explicit DecoderImpl(const ModelConfig& config);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  RmsNorm norm{nullptr};
};
TORCH_MODULE(Decoder);

/// The causal LM. Parameter names (named_parameters()) are exactly the Hugging Face tensor names, e.g.
/// "model.layers.0.self_attn.q_proj.weight"; with tied embeddings there is no "lm_head.weight" parameter.
class CausalLMImpl : public torch::nn::Module {
 public:
  using Cache = KvCache;  ///< what grpo::SupportsKvCache looks for

  explicit CausalLMImpl(ModelConfig config);

  /// Logits [B, T, V] (dtype of the weights) for input_ids [B, T] int64; attention_mask [B, T] (undefined = all 1).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});
  /// Final hidden states [B, T, H] after the last norm (the input of lm_head), for fused log-prob kernels.
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});
  /// The lm_head weight [V, H] (the embedding matrix when tied).
  torch::Tensor lm_head_weight() const;
  /// One decoding step with a KV cache: input_ids [B, T] new tokens; attention_mask [B, S] covers cached and new
  /// tokens (S = cache.length() + T). Appends to the cache; returns logits [B, T, V].
  torch::Tensor forward_step(const torch::Tensor& input_ids, const torch::Tensor& attention_mask, KvCache& cache);
  /// forward_step's logits of the last new position only, [B, V]: what a sampler needs. Skips lm_head for the other
  /// positions (for a 32-token prompt prefill at batch 16 and V = 151936, 140 GFLOP of 141).
  torch::Tensor forward_step_last(const torch::Tensor& input_ids, const torch::Tensor& attention_mask, KvCache& cache);

  const ModelConfig& config() const { return config_; }
  /// Copies tensors with Hugging Face names into the parameters (converting dtype). Throws grpo::Error naming any
  /// missing tensor, or a tensor whose shape differs (with both shapes); with strict, also unexpected names.
  /// "lm_head.weight" is ignored when embeddings are tied; rotary "inv_freq" buffers are always ignored.
  void load_hf_state(const std::map<std::string, torch::Tensor>& tensors, bool strict = true);
  /// Parameters under their Hugging Face names (detached), as saved by save_pretrained.
  std::map<std::string, torch::Tensor> hf_state() const;

 private:
  torch::Tensor run(const torch::Tensor& input_ids, const torch::Tensor& attention_mask, KvCache* cache);

  ModelConfig config_;
  Decoder model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};
  torch::Tensor inv_freq_;  // [D/2] fp64, not a parameter
};
TORCH_MODULE(CausalLM);

/// [head_dim / 2] float64 rotary inverse frequencies 1 / theta^(2i/D), with Llama 3.1's frequency-dependent
/// scaling when the config has rope_scaling: what the model's rotary embedding uses (for code that runs the decoder
/// layers with positions of its own, e.g. packed SFT rows).
torch::Tensor rope_inverse_frequencies(const ModelConfig& config);

/// A deep copy: a new model with the same config and copies of every parameter (same dtype and device).
/// Found by argument-dependent lookup from grpo::Policy::frozen_copy.
CausalLM deep_copy(const CausalLM& model);

/// Loads config.json and the safetensors weights (single or sharded) of a checkpoint directory into a new model in
/// the requested dtype (default: the config's torch_dtype) on the requested device, in eval mode.
CausalLM from_pretrained(const std::filesystem::path& directory, std::optional<torch::ScalarType> dtype = std::nullopt,
                         torch::Device device = torch::kCPU);

/// Writes config.json (torch_dtype = the parameters' dtype) and model.safetensors (sharded above max_shard_bytes)
/// so that transformers' from_pretrained and ours read it back.
void save_pretrained(const CausalLM& model, const std::filesystem::path& directory,
                     int64_t max_shard_bytes = int64_t{5} << 30);

}  // namespace grpo::models
