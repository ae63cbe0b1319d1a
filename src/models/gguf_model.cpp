// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/models/gguf_model.hpp>

#include <grpo/io/atomic_file.hpp>
#include <grpo/text/gguf_tokenizer.hpp>

#include <fmt/format.h>

#include <array>
#include <string_view>
#include <utility>

namespace grpo::models {
namespace {

[[noreturn]] void fail(const io::GgufFile& file, const std::string& what) {
  throw ParseError(fmt::format("{}: {}", file.path().string(), what));
}

std::int64_t required_int(const io::GgufFile& file, const std::string& key) {
  const io::GgufValue* value = file.find(key);
  if (value == nullptr) fail(file, fmt::format("no metadata '{}'", key));
  try {
    return value->as_int(key);
  } catch (const Error& e) {
    fail(file, e.what());
  }
}

std::optional<std::int64_t> optional_int(const io::GgufFile& file, const std::string& key) {
  if (file.find(key) == nullptr) return std::nullopt;
  return required_int(file, key);
}

std::optional<double> optional_double(const io::GgufFile& file, const std::string& key) {
  const io::GgufValue* value = file.find(key);
  if (value == nullptr) return std::nullopt;
  try {
    return value->as_double(key);
  } catch (const Error& e) {
    fail(file, e.what());
  }
}

// llama.cpp's block tensor names (after "blk.N.") and Hugging Face's (after "model.layers.N.").
constexpr std::array<std::pair<std::string_view, std::string_view>, 11> kBlockNames{{
    {"attn_norm", "input_layernorm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
}};

// Hugging Face's name of a llama.cpp tensor, or nullopt.
std::optional<std::string> hf_name(std::string_view name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  if (!name.starts_with("blk.")) return std::nullopt;
  const std::size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view layer = name.substr(4, dot - 4);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  const std::string_view rest = name.substr(dot + 1);
  const std::size_t last = rest.rfind('.');
  if (last == std::string_view::npos) return std::nullopt;
  const std::string_view part = rest.substr(0, last), kind = rest.substr(last + 1);
  if (kind != "weight" && kind != "bias") return std::nullopt;
  for (const auto& [gguf, hf] : kBlockNames) {
    if (part == gguf) return fmt::format("model.layers.{}.{}.{}", layer, hf, kind);
  }
  return std::nullopt;
}

// Undoes llama.cpp's LlamaModel.permute (convert_hf_to_gguf.py): rows of each head were reordered from
// [first half, second half] to interleaved pairs, w.reshape(n, 2, d/2, ...).swapaxes(1, 2).
torch::Tensor unpermute_rows(const torch::Tensor& w, std::int64_t heads) {
  const std::int64_t rows = w.size(0);
  std::vector<std::int64_t> shape = {heads, rows / heads / 2, 2};
  for (std::int64_t d = 1; d < w.dim(); ++d) shape.push_back(w.size(d));
  return w.reshape(shape).transpose(1, 2).reshape(w.sizes()).contiguous();
}

}  // namespace

ModelConfig gguf_model_config(const io::GgufFile& file) {
  const std::string arch = [&] {
    const io::GgufValue* value = file.find("general.architecture");
    if (value == nullptr) fail(file, "no metadata 'general.architecture'");
    try {
      return value->as_string("general.architecture");
    } catch (const Error& e) {
      fail(file, e.what());
    }
  }();
  ModelConfig c;
  if (arch == "llama") {
    c.architecture = Architecture::llama;
  } else if (arch == "qwen2") {
    c.architecture = Architecture::qwen2;
  } else if (arch == "qwen3") {
    c.architecture = Architecture::qwen3;
  } else {
    fail(file, fmt::format("general.architecture '{}' is not supported (llama, qwen2, qwen3)", arch));
  }
  const auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", arch, suffix); };
  c.num_hidden_layers = required_int(file, key("block_count"));
  c.hidden_size = required_int(file, key("embedding_length"));
  c.intermediate_size = required_int(file, key("feed_forward_length"));
  c.max_position_embeddings = optional_int(file, key("context_length")).value_or(c.max_position_embeddings);
  c.num_attention_heads = required_int(file, key("attention.head_count"));
  c.num_key_value_heads = optional_int(file, key("attention.head_count_kv")).value_or(c.num_attention_heads);
  if (c.num_attention_heads <= 0) fail(file, fmt::format("{} must be > 0", key("attention.head_count")));
  const std::int64_t head_dim = optional_int(file, key("attention.key_length")).value_or(0);
  if (head_dim > 0 && head_dim != c.hidden_size / c.num_attention_heads) c.head_dim = head_dim;
  if (c.architecture == Architecture::qwen3 && head_dim > 0) c.head_dim = head_dim;
  c.rms_norm_eps = optional_double(file, key("attention.layer_norm_rms_epsilon")).value_or(1e-6);
  c.rope_theta = optional_double(file, key("rope.freq_base")).value_or(10000.0);
  if (const io::GgufValue* scaling = file.find(key("rope.scaling.type"))) {
    const std::string& type = scaling->as_string(key("rope.scaling.type"));
    if (type != "none") fail(file, fmt::format("{} '{}' is not supported", key("rope.scaling.type"), type));
  }
  if (file.find_tensor("rope_freqs.weight") != nullptr) {
    fail(file, "tensor 'rope_freqs.weight' (Llama 3.1's rope scaling factors) is not supported");
  }
  c.rope_scaling.reset();
  const io::GgufTensorInfo* embedding = file.find_tensor("token_embd.weight");
  if (embedding == nullptr || embedding->shape.size() != 2) fail(file, "no 2-d tensor 'token_embd.weight'");
  c.vocab_size = embedding->shape[0];
  c.tie_word_embeddings = file.find_tensor("output.weight") == nullptr;
  c.attention_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr || c.architecture == Architecture::qwen2;
  c.mlp_bias = file.find_tensor("blk.0.ffn_up.bias") != nullptr;
  c.eos_token_ids.clear();
  if (const auto eos = optional_int(file, "tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(*eos);
  c.bos_token_id = optional_int(file, "tokenizer.ggml.bos_token_id");
  c.dtype = torch::kFloat32;
  try {
    c.validate();
  } catch (const Error& e) {
    fail(file, e.what());
  }
  return c;
}

std::map<std::string, torch::Tensor> gguf_hf_state(const io::GgufFile& file, const ModelConfig& config,
                                                   torch::ScalarType dtype) {
  std::map<std::string, torch::Tensor> out;
  for (const io::GgufTensorInfo& info : file.tensors()) {
    const auto name = hf_name(info.name);
    if (!name) fail(file, fmt::format("tensor '{}' has no place in a {} model", info.name, to_string(config.architecture)));
    torch::Tensor t = file.tensor(info.name, torch::kFloat32);
    if (config.architecture == Architecture::llama) {
      if (name->ends_with("q_proj.weight") || name->ends_with("q_proj.bias")) {
        t = unpermute_rows(t, config.num_attention_heads);
      } else if (name->ends_with("k_proj.weight") || name->ends_with("k_proj.bias")) {
        t = unpermute_rows(t, config.num_key_value_heads);
      }
    }
    out.emplace(*name, t.to(dtype));
  }
  return out;
}

namespace {

/// The model of an opened GGUF file (from_gguf's work, shared with convert_gguf so the file is read once).
CausalLM model_of(const io::GgufFile& file, std::optional<torch::ScalarType> dtype, torch::Device device) {
  const std::filesystem::path& path = file.path();
  const ModelConfig config = gguf_model_config(file);
  const torch::ScalarType target = dtype.value_or(torch::kFloat32);
  const auto tensors = gguf_hf_state(file, config, target);
  CausalLM model(config, WeightInit::none, torch::TensorOptions().dtype(target).device(device));
  try {
    model->load_hf_state(tensors);
  } catch (const Error& e) {
    throw ParseError(fmt::format("{}: {}", path.string(), e.what()));
  }
  model->eval();
  return model;
}

}  // namespace

CausalLM from_gguf(const std::filesystem::path& path, std::optional<torch::ScalarType> dtype, torch::Device device) {
  return model_of(io::GgufFile(path), dtype, device);
}

void convert_gguf(const std::filesystem::path& gguf, const std::filesystem::path& directory, torch::ScalarType dtype) {
  const io::GgufFile file(gguf);
  // The tokenizer first: a file without one is refused before anything is written.
  const text::HfTokenizerJson tokenizer = text::gguf_tokenizer_json(file);
  const CausalLM model = model_of(file, dtype, torch::kCPU);
  std::filesystem::create_directories(directory);
  save_pretrained(model, directory);
  io::write_file_atomically(directory / "tokenizer.json", [&](std::ostream& out) { out << tokenizer.tokenizer; });
  io::write_file_atomically(directory / "tokenizer_config.json",
                            [&](std::ostream& out) { out << tokenizer.tokenizer_config; });
}

}  // namespace grpo::models
