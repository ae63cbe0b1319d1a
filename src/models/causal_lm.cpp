// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/io/atomic_file.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/attention.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/models/gguf_model.hpp>
#include <grpo/models/project.hpp>

#include <cmath>
#include <set>

namespace grpo::models {
namespace {

/// rotate_half(x) = cat(−x[..., D/2:], x[..., :D/2]) (the Hugging Face / GPT-NeoX rotary layout).
torch::Tensor rotate_half(const torch::Tensor& x) {
  auto halves = x.chunk(2, -1);
  return torch::cat({-halves[1], halves[0]}, -1);
}

/// Activation checkpointing of one decoder layer (DecoderImpl::forward): forward runs the layer without recording
/// and keeps only its input; backward runs it again with recording and differentiates that. The layer's trainable
/// parameters are inputs of the function, so their gradients flow through the outer backward like any other
/// (no reentrant backward). A layer that draws random numbers (LoRA dropout in training) replays the generator
/// state of its forward, so the recomputation is the same computation.
class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h,
                                                const torch::Tensor& cos, const torch::Tensor& sin,
                                                const torch::Tensor& mask, DecoderLayerImpl* layer,
                                                torch::TensorList parameters) {
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["parameters"] = static_cast<int64_t>(parameters.size());
    ctx->saved_data["h_requires_grad"] = h.requires_grad();
    torch::Tensor rng_state;
    if (layer->is_training() && layer->draws_random_numbers()) {
      at::Generator generator = at::globalContext().defaultGenerator(h.device());  // the one dropout draws from
      std::lock_guard<std::mutex> lock(generator.mutex());
      rng_state = generator.get_state();
    }
    ctx->save_for_backward({h, cos, sin, mask, rng_state});
    torch::Tensor key, value;
    return {layer->forward(h, cos, sin, mask, key, value)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const auto count = static_cast<size_t>(ctx->saved_data["parameters"].toInt());
    const std::vector<torch::Tensor> parameters = layer->trainable_parameters();
    GRPO_CHECK(parameters.size() == count,
               "activation checkpointing: a layer's trainable parameters changed between forward and backward");
    const bool h_grad = ctx->saved_data["h_requires_grad"].toBool();
    auto h = saved[0].detach().requires_grad_(h_grad);
    torch::Tensor output;
    {
      torch::AutoGradMode record(true);
      std::optional<torch::Tensor> current_rng;
      at::Generator generator = at::globalContext().defaultGenerator(h.device());
      if (saved[4].defined()) {
        std::lock_guard<std::mutex> lock(generator.mutex());
        current_rng = generator.get_state();
        generator.set_state(saved[4]);
      }
      torch::Tensor key, value;
      output = layer->forward(h, saved[1], saved[2], saved[3], key, value);
      if (current_rng) {
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_state(*current_rng);
      }
    }
    std::vector<torch::Tensor> inputs;
    if (h_grad) inputs.push_back(h);
    inputs.insert(inputs.end(), parameters.begin(), parameters.end());
    auto grads = torch::autograd::grad({output}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    torch::autograd::variable_list out{h_grad ? grads[0] : torch::Tensor(), torch::Tensor(), torch::Tensor(),
                                       torch::Tensor(), torch::Tensor()};
    out.insert(out.end(), grads.begin() + (h_grad ? 1 : 0), grads.end());
    return out;
  }
};

/// Whether `t` is the only handle on its data: no other handle, and no other tensor sharing its storage except
/// the base it is a view of (a view keeps its base alive, gradient mode or not).
bool held_only_here(const torch::Tensor& t) {
  if (t.use_count() != 1) return false;
  const auto storage_refs = t.unsafeGetTensorImpl()->storage().use_count();  // Tensor::storage() would add one
  if (!t.is_view()) return storage_refs == 1;
  const at::TensorBase& base = t._base();
  return base.use_count() == 1 && storage_refs == 2;
}

/// Appends `fresh` [B, H, T, D] after the S positions of `cached` and makes `cached` the view of the first S + T
/// positions. `cached` is a view of the first positions of a buffer with room for more (or undefined): the buffer
/// grows by doubling, so a decoding step writes its keys in place at amortised O(1) instead of cat's O(S) copy of
/// the whole cache. The buffer is written in place only when the cache holds the one reference to it (copies of a
/// KvCache never see each other's appends) and no gradient is being recorded (a later in-place write would
/// invalidate the tensors saved for backward); otherwise it is reallocated.
void append_to_cache(torch::Tensor& cached, const torch::Tensor& fresh) {
  if (!cached.defined()) {
    cached = fresh;
    return;
  }
  const int64_t batch = cached.size(0), heads = cached.size(1), length = cached.size(2), dim = cached.size(3);
  const int64_t needed = length + fresh.size(2);
  const bool exclusive = held_only_here(cached) &&
                         !(torch::GradMode::is_enabled() && (cached.requires_grad() || fresh.requires_grad()));
  const bool buffer_layout = cached.storage_offset() == 0 && cached.stride(3) == 1 && cached.stride(2) == dim &&
                             dim > 0 && cached.stride(1) % dim == 0 && cached.stride(0) == heads * cached.stride(1);
  const int64_t capacity = buffer_layout ? cached.stride(1) / dim : length;
  const bool fits = static_cast<int64_t>(cached.storage().nbytes()) >=
                    batch * heads * capacity * dim * static_cast<int64_t>(cached.element_size());
  torch::Tensor buffer;
  if (exclusive && buffer_layout && fits && needed <= capacity) {
    buffer = cached.as_strided({batch, heads, capacity, dim}, cached.strides());
  } else {
    buffer = torch::empty({batch, heads, std::max<int64_t>(needed, 2 * length), dim}, cached.options());
    buffer.narrow(2, 0, length).copy_(cached);
  }
  buffer.narrow(2, length, fresh.size(2)).copy_(fresh);
  cached = buffer.narrow(2, 0, needed);
}

/// Positions of the last T columns of a [B, S] mask: cumsum(mask) − 1, clamped at 0 for padding.
torch::Tensor positions_from_mask(const torch::Tensor& mask, int64_t new_tokens) {
  auto pos = (mask.to(torch::kInt64).cumsum(1) - 1).clamp_min(0);
  return pos.narrow(1, mask.size(1) - new_tokens, new_tokens);
}

}  // namespace

bool is_lora_parameter(std::string_view name) {
  return name.find(".lora_A.") != std::string_view::npos || name.find(".lora_B.") != std::string_view::npos;
}

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias, WeightInit init, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({out, in}, options));
  if (with_bias) bias = register_parameter("bias", torch::empty({out}, options));
  if (init == WeightInit::normal) {  // torch::nn::Linear::reset_parameters' draws (CausalLMImpl overwrites them)
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
    if (with_bias) {
      const double bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;
      torch::nn::init::uniform_(bias, -bound, bound);
    }
  }
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  auto y = project(x, weight, bias);
  if (!lora || !lora->enabled) return y;
  // peft's lora.Linear: the adapter runs in its own dtype (fp32 beside a half-precision base), the sum is formed in
  // the wider of the two and rounded to the base's dtype once.
  auto input = x.to(lora->a->weight.scalar_type());
  if (lora->dropout > 0.0 && is_training()) input = torch::dropout(input, lora->dropout, /*train=*/true);
  auto delta = project(project(input, lora->a->weight), lora->b->weight) * lora->scaling;
  return delta.scalar_type() == y.scalar_type() ? y + delta : (y.to(delta.scalar_type()) + delta).to(y.scalar_type());
}

EmbeddingImpl::EmbeddingImpl(int64_t count, int64_t dim, WeightInit init, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({count, dim}, options));
  if (init == WeightInit::normal) {  // torch::nn::Embedding::reset's draw (CausalLMImpl overwrites it)
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(weight);
  }
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  return torch::embedding(weight, ids);
}

void KvCache::select_rows(const torch::Tensor& rows) {
  if (keys.empty() || !keys[0].defined()) return;
  const auto index = rows.to(keys[0].device());
  for (auto& k : keys) k = k.index_select(0, index);
  for (auto& v : values) v = v.index_select(0, index);
}

void KvCache::gather_positions(const torch::Tensor& columns) {
  if (keys.empty() || !keys[0].defined()) return;
  const auto& k0 = keys[0];
  GRPO_CHECK(columns.dim() == 2 && columns.size(0) == k0.size(0) && columns.scalar_type() == torch::kInt64,
             "KvCache::gather_positions: columns must be [B, W] int64 with B = {}, got {}", k0.size(0),
             shape_str(columns));
  const auto index = columns.to(k0.device());
  auto gather = [&](torch::Tensor& t) {
    t = t.gather(2, index.view({index.size(0), 1, index.size(1), 1}).expand({t.size(0), t.size(1), index.size(1), t.size(3)}));
  };
  for (auto& k : keys) gather(k);
  for (auto& v : values) gather(v);
}

RmsNormImpl::RmsNormImpl(int64_t size, double eps_, const torch::TensorOptions& options) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({size}, options));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  auto h = x.to(at::promote_types(x.scalar_type(), torch::kFloat32));
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * h.to(x.scalar_type());
}

AttentionImpl::AttentionImpl(const ModelConfig& c, WeightInit init, const torch::TensorOptions& options)
    : heads(c.num_attention_heads), kv_heads(c.num_key_value_heads), head_dim(c.head_dimension()) {
  q_proj = register_module("q_proj", Linear(c.hidden_size, heads * head_dim, c.attention_bias, init, options));
  k_proj = register_module("k_proj", Linear(c.hidden_size, kv_heads * head_dim, c.attention_bias, init, options));
  v_proj = register_module("v_proj", Linear(c.hidden_size, kv_heads * head_dim, c.attention_bias, init, options));
  // Qwen2's o_proj has no bias; Qwen3 and Llama give o_proj a bias exactly when attention_bias is set.
  const bool o_bias = c.architecture != Architecture::qwen2 && c.attention_bias;
  o_proj = register_module("o_proj", Linear(heads * head_dim, c.hidden_size, o_bias, init, options));
  if (c.architecture == Architecture::qwen3) {
    q_norm = register_module("q_norm", RmsNorm(head_dim, c.rms_norm_eps, options));
    k_norm = register_module("k_norm", RmsNorm(head_dim, c.rms_norm_eps, options));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const torch::Tensor& mask, torch::Tensor& key, torch::Tensor& value) {
  const int64_t batch = x.size(0), time = x.size(1);
  auto q = q_proj(x).view({batch, time, heads, head_dim});
  auto k = k_proj(x).view({batch, time, kv_heads, head_dim});
  auto v = v_proj(x).view({batch, time, kv_heads, head_dim}).transpose(1, 2);
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.transpose(1, 2);  // [B, Hq, T, D]
  k = k.transpose(1, 2);  // [B, Hkv, T, D]
  auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  q = q * c + rotate_half(q) * s;
  k = k * c + rotate_half(k) * s;
  append_to_cache(key, k);
  append_to_cache(value, v);
  const auto out = models::attention(implementation, q, key, value, mask);  // [B, Hq, T, D]
  return o_proj(out.transpose(1, 2).reshape({batch, time, heads * head_dim}));
}

MlpImpl::MlpImpl(const ModelConfig& c, WeightInit init, const torch::TensorOptions& options) {
  gate_proj = register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias, init, options));
  up_proj = register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias, init, options));
  down_proj = register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, c.mlp_bias, init, options));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, WeightInit init, const torch::TensorOptions& options) {
  self_attn = register_module("self_attn", Attention(c, init, options));
  mlp = register_module("mlp", Mlp(c, init, options));
  input_layernorm = register_module("input_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps, options));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps, options));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& h, const torch::Tensor& cos, const torch::Tensor& sin,
                                        const torch::Tensor& mask, torch::Tensor& key, torch::Tensor& value) {
  auto x = h + self_attn->forward(input_layernorm(h), cos, sin, mask, key, value);
  return x + mlp(post_attention_layernorm(x));
}

std::vector<torch::Tensor> DecoderLayerImpl::trainable_parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

bool DecoderLayerImpl::draws_random_numbers() const {
  for (const auto& module : modules(/*include_self=*/false)) {
    const auto* linear = dynamic_cast<const LinearImpl*>(module.get());
    if (linear != nullptr && linear->lora && linear->lora->enabled && linear->lora->dropout > 0.0) return true;
  }
  return false;
}

DecoderImpl::DecoderImpl(const ModelConfig& c, WeightInit init, const torch::TensorOptions& options) {
  embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size, init, options));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c, init, options));
  norm = register_module("norm", RmsNorm(c.hidden_size, c.rms_norm_eps, options));
}

torch::Tensor DecoderImpl::forward(torch::Tensor h, const torch::Tensor& cos, const torch::Tensor& sin,
                                   const torch::Tensor& mask, KvCache* cache) {
  if (cache && cache->keys.empty()) {
    cache->keys.resize(layers->size());
    cache->values.resize(layers->size());
  }
  const bool checkpoint = gradient_checkpointing && !cache && torch::GradMode::is_enabled();
  for (size_t i = 0; i < layers->size(); ++i) {
    auto* layer = layers[i]->as<DecoderLayerImpl>();
    if (cache) {
      h = layer->forward(h, cos, sin, mask, cache->keys[i], cache->values[i]);
      continue;
    }
    const std::vector<torch::Tensor> trainable = checkpoint ? layer->trainable_parameters() : std::vector<torch::Tensor>{};
    if (checkpoint && (h.requires_grad() || !trainable.empty())) {
      h = CheckpointedLayer::apply(h, cos, sin, mask, layer, torch::TensorList(trainable))[0];
    } else {
      torch::Tensor key, value;  // without a cache: start empty, dropped after the layer
      h = layer->forward(h, cos, sin, mask, key, value);
    }
  }
  return norm(h);
}

CausalLMImpl::CausalLMImpl(ModelConfig config, WeightInit init, const torch::TensorOptions& options)
    : config_(std::move(config)) {
  config_.validate();
  model_ = register_module("model", Decoder(config_, init, options));
  if (!config_.tie_word_embeddings) {
    lm_head_ = register_module("lm_head", Linear(config_.hidden_size, config_.vocab_size, false, init, options));
  }
  inv_freq_ = rope_inverse_frequencies(config_);
  if (init == WeightInit::none) return;
  // transformers' _init_weights: normal(0, 0.02) for linear and embedding weights, zero biases.
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    const auto& name = p.key();
    if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      p.value().zero_();
    } else if (p.value().dim() == 2) {
      p.value().normal_(0.0, 0.02);
    }
  }
}

void CausalLMImpl::set_attention_implementation(AttentionImplementation implementation) {
  for (const auto& layer : *model_->layers) layer->as<DecoderLayerImpl>()->self_attn->implementation = implementation;
}

AttentionImplementation CausalLMImpl::attention_implementation() const {
  const auto& layers = *model_->layers;
  return layers.size() == 0 ? AttentionImplementation::blocked
                            : layers.ptr(0)->as<DecoderLayerImpl>()->self_attn->implementation;
}

torch::Tensor CausalLMImpl::lm_head_weight() const {
  return lm_head_ ? lm_head_->weight : model_->embed_tokens->weight;
}

void CausalLMImpl::check_ids(const torch::Tensor& input_ids) const {
  GRPO_CHECK(input_ids.defined() && input_ids.dim() == 2 && input_ids.scalar_type() == torch::kInt64,
             "CausalLM: input_ids must be [B, T] int64, got {} {}", shape_str(input_ids),
             input_ids.defined() ? c10::toString(input_ids.scalar_type()) : "");
  if (input_ids.numel() > 0) {
    const auto lo = input_ids.min().item<int64_t>(), hi = input_ids.max().item<int64_t>();
    GRPO_CHECK(lo >= 0 && hi < config_.vocab_size, "CausalLM: input_ids must lie in [0, {}), got values in [{}, {}]",
               config_.vocab_size, lo, hi);
  }
}

std::pair<torch::Tensor, torch::Tensor> CausalLMImpl::rotary_tables(const torch::Tensor& positions) const {
  // In at least fp32 then cast (transformers computes them in fp32).
  const auto dtype = model_->embed_tokens->weight.scalar_type();
  const auto device = model_->embed_tokens->weight.device();
  const auto rope_dtype = at::promote_types(dtype, torch::kFloat32);
  auto freqs = positions.to(device, rope_dtype).unsqueeze(-1) * inv_freq_.to(device, rope_dtype).view({1, 1, -1});
  auto emb = torch::cat({freqs, freqs}, -1);  // [B, T, D]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

torch::Tensor CausalLMImpl::packed_hidden_states(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                                 const torch::Tensor& segments) {
  check_ids(input_ids);
  for (const auto& [tensor, name] : {std::pair{&position_ids, "position_ids"}, std::pair{&segments, "segments"}}) {
    GRPO_CHECK(tensor->defined() && tensor->sizes() == input_ids.sizes() && tensor->scalar_type() == torch::kInt64,
               "CausalLM::packed_hidden_states: {} must be int64 of input_ids' shape {}, got {}", name,
               shape_str(input_ids), shape_str(*tensor));
  }
  const auto device = model_->embed_tokens->weight.device();
  const auto [cos, sin] = rotary_tables(position_ids);
  return model_->forward(model_->embed_tokens(input_ids.to(device)), cos, sin, segments.to(device));
}

torch::Tensor CausalLMImpl::run(const torch::Tensor& input_ids, const torch::Tensor& attention_mask, KvCache* cache) {
  check_ids(input_ids);
  const int64_t batch = input_ids.size(0), time = input_ids.size(1);
  const int64_t past = cache ? cache->length() : 0;
  const int64_t total = past + time;
  GRPO_CHECK(!cache || past == 0 || cache->keys[0].size(0) == batch,
             "CausalLM::forward_step: the cache holds {} rows but input_ids has {}", cache->keys[0].size(0), batch);
  auto mask = attention_mask.defined() ? attention_mask : torch::ones({batch, total}, input_ids.options());
  GRPO_CHECK(mask.dim() == 2 && mask.size(0) == batch && mask.size(1) == total,
             "CausalLM: attention_mask must be [B, cached + T] = [{}, {}], got {}", batch, total, shape_str(mask));
  const auto device = model_->embed_tokens->weight.device();
  const auto [cos, sin] = rotary_tables(positions_from_mask(mask.to(device), time));  // the new positions

  return model_->forward(model_->embed_tokens(input_ids.to(device)), cos, sin, attention_segments(mask.to(device)),
                         cache);
}

torch::Tensor CausalLMImpl::hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  return run(input_ids, attention_mask, nullptr);
}

torch::Tensor CausalLMImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  return project(run(input_ids, attention_mask, nullptr), lm_head_weight());
}

torch::Tensor CausalLMImpl::forward_step(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                         KvCache& cache) {
  return project(run(input_ids, attention_mask, &cache), lm_head_weight());
}

torch::Tensor CausalLMImpl::forward_step_last(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                              KvCache& cache) {
  const torch::Tensor hidden = run(input_ids, attention_mask, &cache);  // [B, T, H]
  return project(hidden.narrow(1, hidden.size(1) - 1, 1).contiguous(), lm_head_weight()).squeeze(1);
}

void CausalLMImpl::load_hf_state(const std::map<std::string, torch::Tensor>& tensors, bool strict) {
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& p : named_parameters()) {
    if (is_lora_parameter(p.key())) continue;
    auto it = tensors.find(p.key());
    GRPO_CHECK(it != tensors.end(), "CausalLM: checkpoint has no tensor \"{}\"", p.key());
    GRPO_CHECK(it->second.sizes() == p.value().sizes(), "CausalLM: tensor \"{}\" has shape {} but the model expects {}",
               p.key(), shape_str(it->second), shape_str(p.value()));
    p.value().copy_(it->second);
    used.insert(p.key());
  }
  if (!strict) return;
  for (const auto& [name, t] : tensors) {
    const bool ignorable = (name == "lm_head.weight" && config_.tie_word_embeddings) ||
                           name.find("rotary_emb.inv_freq") != std::string::npos;
    GRPO_CHECK(used.count(name) || ignorable, "CausalLM: checkpoint tensor \"{}\" has no place in a {} model", name,
               to_string(config_.architecture));
  }
}

std::map<std::string, torch::Tensor> CausalLMImpl::hf_state() const {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : named_parameters()) {
    if (!is_lora_parameter(p.key())) out.emplace(p.key(), p.value().detach());
  }
  return out;
}

CausalLM deep_copy(const CausalLM& model) {
  const auto reference = model->lm_head_weight();
  CausalLM copy(model->config(), WeightInit::none, reference.options());
  copy->load_hf_state(model->hf_state());
  copy->set_gradient_checkpointing(model->gradient_checkpointing());
  copy->set_attention_implementation(model->attention_implementation());
  copy->train(model->is_training());
  return copy;
}

CausalLM weight_sharing_copy(const CausalLM& model) {
  const auto reference = model->lm_head_weight();
  // WeightInit::none: uninitialised tensors, released as each parameter takes the model's (on the CPU their pages are
  // never touched; on a GPU they are a transient allocation of the whole model, returned to the caching allocator).
  CausalLM copy(model->config(), WeightInit::none, reference.options());
  torch::NoGradGuard no_grad;
  const auto source = model->named_parameters();
  for (auto& p : copy->named_parameters()) {
    const torch::Tensor* from = source.find(p.key());
    GRPO_CHECK(from != nullptr && from->sizes() == p.value().sizes(),
               "weight_sharing_copy: the model has no parameter \"{}\" of shape {}", p.key(), shape_str(p.value()));
    // A parameter the model trains gets storage of its own: writing the copy must never race with its optimizer.
    p.value().set_data(from->requires_grad() ? from->detach().clone() : *from);
  }
  copy->set_gradient_checkpointing(model->gradient_checkpointing());
  copy->set_attention_implementation(model->attention_implementation());
  copy->train(model->is_training());
  return copy;
}

CausalLM from_pretrained(const std::filesystem::path& directory, std::optional<torch::ScalarType> dtype,
                         torch::Device device) {
  if (directory.extension() == ".gguf" && std::filesystem::is_regular_file(directory)) {
    return from_gguf(directory, dtype, device);
  }
  auto config = ModelConfig::from_file(directory / "config.json");
  const auto target = dtype.value_or(config.dtype);
  auto tensors = io::load_checkpoint_tensors(directory);
  CausalLM model(config, WeightInit::none, torch::TensorOptions().dtype(target).device(device));
  try {
    model->load_hf_state(tensors);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", directory.string(), e.what()));
  }
  model->eval();
  return model;
}

void save_pretrained(const CausalLM& model, const std::filesystem::path& directory, int64_t max_shard_bytes) {
  std::filesystem::create_directories(directory);
  auto config = model->config();
  config.dtype = model->lm_head_weight().scalar_type();
  io::save_checkpoint_tensors(directory, model->hf_state(), max_shard_bytes);
  io::write_file_atomically(directory / "config.json", [&](std::ostream& out) { out << config.to_json(); });
}

torch::Tensor rope_inverse_frequencies(const ModelConfig& c) {
  const int64_t d = c.head_dimension();
  auto inv = 1.0 / torch::pow(c.rope_theta, torch::arange(0, d, 2, torch::kFloat64) / static_cast<double>(d));
  if (c.rope_scaling) {
    const auto& s = *c.rope_scaling;
    const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    auto wavelen = 2 * M_PI / inv;
    auto smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                  (s.high_freq_factor - s.low_freq_factor);
    auto smoothed = (1 - smooth) * inv / s.factor + smooth * inv;
    inv = torch::where(wavelen > low_wavelen, inv / s.factor, torch::where(wavelen < high_wavelen, inv, smoothed));
  }
  return inv;
}

}  // namespace grpo::models
