// SPDX-License-Identifier: Apache-2.0
// A reference causal LM of the Qwen2 family (Qwen2/Qwen2.5, Qwen3, Llama) in LibTorch modules, loading and saving
// Hugging Face checkpoints (config.json + safetensors) with Hugging Face's tensor names.
//
// Shapes: B sequences, T tokens (S = cached + new tokens), H hidden size, V vocabulary, D head dim,
// Hq query heads, Hkv key/value heads.
// Masks: attention_mask [B, T] (or [B, S] with a cache) is 1 for real tokens and 0 for padding; left padding is the
// norm for generation. Positions are counted over real tokens only (cumsum(mask) − 1), as transformers does.
#pragma once

#include <grpo/models/attention.hpp>
#include <grpo/models/model_config.hpp>

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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
  /// Row b keeps the cached positions columns[b][0], …, columns[b][W − 1] (columns [B, W] int64, indices into the S
  /// cached positions), in that order: S becomes W. Keys keep the rotary positions they were cached with.
  void gather_positions(const torch::Tensor& columns);
};

/// How a new model's weights start.
enum class WeightInit {
  /// transformers' _init_weights: linear and embedding weights N(0, 0.02), biases 0, norms 1. The generator is
  /// drawn from exactly as torch::nn::Linear and torch::nn::Embedding's own initialisation did before (then
  /// overwritten), so a seed gives the same model as in earlier versions of this library.
  normal,
  /// Uninitialised memory (norms 1), for weights that are loaded right after (from_pretrained): no time spent
  /// drawing 494 M random numbers that are overwritten (2.7 s for Qwen2.5-0.5B here).
  none,
};

struct LinearImpl;

/// A LoRA configuration (lora.hpp), with the fields and defaults of peft's LoraConfig (and its default targets for
/// Qwen2 and Llama, q_proj and v_proj).
struct LoraOptions {
  int64_t rank = 8;       ///< r
  double alpha = 8.0;     ///< lora_alpha
  double dropout = 0.0;   ///< lora_dropout
  /// Module names or suffixes ("q_proj"), or as the only entry a regular expression or "all-linear" (peft's string
  /// form; lora.hpp, add_lora).
  std::vector<std::string> target_modules = {"q_proj", "v_proj"};
  bool use_rslora = false;                   ///< scaling α / √r instead of α / r
  std::vector<int64_t> layers_to_transform;  ///< decoder layer indexes to adapt (empty = all)

  double scaling() const;
  /// Throws ConfigError naming r, lora_alpha, lora_dropout, target_modules or layers_to_transform.
  void validate() const;
};

/// A LoRA adapter of one Linear (Hu et al. 2021; peft's lora.Linear): y += B·A·dropout(x) · scaling, A [r, in],
/// B [out, r] (Hugging Face names "<module>.lora_A.weight", "<module>.lora_B.weight"). Added by
/// models::add_lora (lora.hpp).
struct LoraAdapter {
  std::shared_ptr<LinearImpl> a, b;
  double scaling = 1.0;  ///< lora_alpha / r (or / √r with rsLoRA)
  double dropout = 0.0;  ///< on the adapter's input, in training mode only
  bool enabled = true;   ///< false: the base layer alone (the reference policy of a LoRA run)
};

/// y = x·Wᵀ + b for x [..., in], weight [out, in], bias [out] (or none), plus its LoRA adapter when it has one.
struct LinearImpl : torch::nn::Module {
  LinearImpl(int64_t in, int64_t out, bool bias, WeightInit init = WeightInit::normal,
             const torch::TensorOptions& options = {});
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
  std::optional<LoraAdapter> lora;
};
TORCH_MODULE(Linear);

/// Token embedding: weight [V, H]; forward(ids [...]) → [..., H].
struct EmbeddingImpl : torch::nn::Module {
  EmbeddingImpl(int64_t count, int64_t dim, WeightInit init = WeightInit::normal,
                const torch::TensorOptions& options = {});
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;
};
TORCH_MODULE(Embedding);

/// RMSNorm: x / sqrt(mean(x²) + eps) · weight, computed in at least fp32 and cast back (as transformers does).
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t size, double eps, const torch::TensorOptions& options = {});
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RmsNorm);

/// Grouped-query self-attention with rotary embeddings (and per-head q/k RMSNorm for Qwen3).
struct AttentionImpl : torch::nn::Module {
  AttentionImpl(const ModelConfig& config, WeightInit init, const torch::TensorOptions& options);
  /// x [B, T, H]; cos/sin [B, T, D]; mask: segments [B, S] int64 (attention.hpp: who sees whom); key/value: the
  /// cached [B, Hkv, S − T, D] or undefined, extended to [B, Hkv, S, D] (see KvCache). Returns [B, T, H].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, torch::Tensor& key, torch::Tensor& value);
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};
  int64_t heads, kv_heads, head_dim;
  AttentionImplementation implementation = AttentionImplementation::blocked;
};
TORCH_MODULE(Attention);

/// SwiGLU MLP: down(silu(gate(x)) · up(x)).
struct MlpImpl : torch::nn::Module {
  MlpImpl(const ModelConfig& config, WeightInit init, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Mlp);

/// Pre-norm decoder layer: x + attn(norm(x)), then + mlp(norm(x)).
struct DecoderLayerImpl : torch::nn::Module {
  DecoderLayerImpl(const ModelConfig& config, WeightInit init, const torch::TensorOptions& options);
  /// h [B, T, H] → [B, T, H]; cos, sin, mask, key, value as AttentionImpl::forward.
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, torch::Tensor& key, torch::Tensor& value);
  /// Its parameters that require gradients (all of them, or only the LoRA adapters after add_lora).
  std::vector<torch::Tensor> trainable_parameters() const;
  /// Whether forward in training mode draws random numbers (LoRA dropout).
  bool draws_random_numbers() const;
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(DecoderLayer);

/// The decoder stack ("model." in Hugging Face names): embed_tokens, layers, norm.
struct DecoderImpl : torch::nn::Module {
  DecoderImpl(const ModelConfig& config, WeightInit init, const torch::TensorOptions& options);
  /// The layers then the final norm: embedded h [B, T, H], rotary cos/sin [B, T, D], segments [B, S]
  /// (AttentionImpl::forward) → [B, T, H]. With a cache each layer appends its keys and values to it. Without one,
  /// while gradients are recorded and gradient_checkpointing is on, each layer keeps only its input for backward
  /// and runs again there (activation checkpointing: the layers' activations are never all alive at once).
  torch::Tensor forward(torch::Tensor h, const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& mask,
                        KvCache* cache = nullptr);
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  RmsNorm norm{nullptr};
  bool gradient_checkpointing = false;
};
TORCH_MODULE(Decoder);

/// The causal LM. Parameter names (named_parameters()) are exactly the Hugging Face tensor names, e.g.
/// "model.layers.0.self_attn.q_proj.weight"; with tied embeddings there is no "lm_head.weight" parameter.
class CausalLMImpl : public torch::nn::Module {
 public:
  using Cache = KvCache;  ///< what grpo::SupportsKvCache looks for

  /// A model of `config` with weights started by `init`, created with `options` (dtype and device; default fp32 CPU).
  explicit CausalLMImpl(ModelConfig config, WeightInit init = WeightInit::normal,
                        const torch::TensorOptions& options = {});

  /// Logits [B, T, V] (dtype of the weights) for input_ids [B, T] int64; attention_mask [B, T] (undefined = all 1).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});
  /// Final hidden states [B, T, H] after the last norm (the input of lm_head), for fused log-prob kernels.
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});
  /// The lm_head weight [V, H] (the embedding matrix when tied).
  torch::Tensor lm_head_weight() const;
  /// Final hidden states [B, N, H] of rows that each hold several sequences one after another (padding-free
  /// batches): input_ids [B, N] int64; position_ids [B, N] int64, each sequence's positions from 0; segments [B, N]
  /// int64, a label per sequence (any two neighbours different, e.g. 1, 2, 3, …; attention.hpp). Each token attends
  /// to the tokens of its own sequence before it, so every sequence gets the hidden states it would get alone.
  torch::Tensor packed_hidden_states(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                     const torch::Tensor& segments);
  /// One decoding step with a KV cache: input_ids [B, T] new tokens; attention_mask [B, S] covers cached and new
  /// tokens (S = cache.length() + T). Appends to the cache; returns logits [B, T, V].
  torch::Tensor forward_step(const torch::Tensor& input_ids, const torch::Tensor& attention_mask, KvCache& cache);
  /// forward_step's logits of the last new position only, [B, V]: what a sampler needs. Skips lm_head for the other
  /// positions (for a 32-token prompt prefill at batch 16 and V = 151936, 140 GFLOP of 141).
  torch::Tensor forward_step_last(const torch::Tensor& input_ids, const torch::Tensor& attention_mask, KvCache& cache);

  const ModelConfig& config() const { return config_; }
  /// Per-decoder-layer activation checkpointing (DecoderImpl::forward) for every forward that records gradients:
  /// activation memory of one layer plus each layer's input instead of all layers' activations, for about one more
  /// forward of compute in backward. Gradients are the same (tests/models: fp64, within rounding).
  void set_gradient_checkpointing(bool on) { model_->gradient_checkpointing = on; }
  bool gradient_checkpointing() const { return model_->gradient_checkpointing; }
  /// How every layer computes attention: blocked (the default: no [T, S] scores kept, attention.hpp) or eager (the
  /// plain composition, for comparisons). Both give the same values and gradients to rounding.
  void set_attention_implementation(AttentionImplementation implementation);
  AttentionImplementation attention_implementation() const;
  /// The LoRA configuration of the adapters add_lora put on this model (none: no adapters).
  const std::optional<LoraOptions>& lora_options() const { return lora_; }
  void set_lora_options(std::optional<LoraOptions> options) { lora_ = std::move(options); }
  /// The decoder stack (embed_tokens, layers, norm), for code that runs it with its own positions and mask.
  DecoderImpl& decoder() { return *model_; }
  /// Copies tensors with Hugging Face names into the base parameters (converting dtype; LoRA adapters are not part
  /// of it: lora.hpp loads them). Throws grpo::Error naming any
  /// missing tensor, or a tensor whose shape differs (with both shapes); with strict, also unexpected names.
  /// "lm_head.weight" is ignored when embeddings are tied; rotary "inv_freq" buffers are always ignored.
  void load_hf_state(const std::map<std::string, torch::Tensor>& tensors, bool strict = true);
  /// Base parameters (no LoRA adapters) under their Hugging Face names (detached), as saved by save_pretrained.
  std::map<std::string, torch::Tensor> hf_state() const;

 private:
  torch::Tensor run(const torch::Tensor& input_ids, const torch::Tensor& attention_mask, KvCache* cache);
  /// Throws grpo::Error unless input_ids is [B, T] int64 within the vocabulary.
  void check_ids(const torch::Tensor& input_ids) const;
  /// Rotary cos and sin [B, T, D] (the model's dtype and device) at positions [B, T].
  std::pair<torch::Tensor, torch::Tensor> rotary_tables(const torch::Tensor& positions) const;

  ModelConfig config_;
  Decoder model_{nullptr};
  Linear lm_head_{nullptr};
  torch::Tensor inv_freq_;  // [D/2] fp64, not a parameter
  std::optional<LoraOptions> lora_;
};
TORCH_MODULE(CausalLM);

/// [head_dim / 2] float64 rotary inverse frequencies 1 / theta^(2i/D), with Llama 3.1's frequency-dependent
/// scaling when the config has rope_scaling: what the model's rotary embedding uses (for code that runs the decoder
/// layers with positions of its own, e.g. packed SFT rows).
torch::Tensor rope_inverse_frequencies(const ModelConfig& config);

/// Whether a parameter name is a LoRA adapter's ("….lora_A.weight", "….lora_B.weight").
bool is_lora_parameter(std::string_view name);

/// A deep copy: a new model with the same config and copies of every base parameter (same dtype and device), the
/// same gradient-checkpointing and attention settings, and no LoRA adapters.
/// Found by argument-dependent lookup from grpo::Policy::frozen_copy.
CausalLM deep_copy(const CausalLM& model);

/// A copy whose frozen base parameters (requires_grad false) are the model's own tensors (the same storage: a write to
/// one is seen by both) and whose trainable ones are copies, with the same config, gradient-checkpointing and attention
/// settings and no LoRA adapters. For a second view of weights that nothing changes: a LoRA run's frozen base under a
/// sampler copy's adapters. Its parameters are Variables of their own (requires_grad is set on each alone). It is
/// first built uninitialised on the model's device: on a GPU that is a transient allocation of the whole model.
CausalLM weight_sharing_copy(const CausalLM& model);

/// Loads config.json and the safetensors weights (single or sharded) of a checkpoint directory into a new model in
/// the requested dtype (default: the config's torch_dtype) on the requested device, in eval mode. A path to a .gguf
/// file loads it with from_gguf (models/gguf_model.hpp; default dtype float32). Parameters are
/// created uninitialised in that dtype and device and filled from the files (no random initialisation, no fp32
/// staging copy).
CausalLM from_pretrained(const std::filesystem::path& directory, std::optional<torch::ScalarType> dtype = std::nullopt,
                         torch::Device device = torch::kCPU);

/// Writes config.json (torch_dtype = the parameters' dtype) and model.safetensors (sharded above max_shard_bytes)
/// so that transformers' from_pretrained and ours read it back.
void save_pretrained(const CausalLM& model, const std::filesystem::path& directory,
                     int64_t max_shard_bytes = int64_t{5} << 30);

}  // namespace grpo::models
