// SPDX-License-Identifier: Apache-2.0
// A decoder from a GGUF file (llama.cpp's format; io/gguf.hpp reads it): the network's shape from the
// `<arch>.*` metadata, the weights renamed from llama.cpp's tensor names to Hugging Face's and dequantized.
//
// Architectures: "llama" (llama.cpp's converter permutes the rows of q and k for its interleaved rotary embedding;
// the permutation is undone here, so the weights are Hugging Face's), "qwen2" and "qwen3" (stored as Hugging Face
// has them). Tied embeddings: a file without `output.weight` ties the LM head to `token_embd.weight`.
#pragma once

#include <grpo/io/gguf.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/models/model_config.hpp>

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace grpo::models {

/// The network of a GGUF file: general.architecture (llama, qwen2, qwen3), sizes from `<arch>.block_count`,
/// `.embedding_length`, `.feed_forward_length`, `.context_length`, `.attention.head_count`, `.head_count_kv`,
/// `.key_length`, `.layer_norm_rms_epsilon`, `.rope.freq_base`; the vocabulary from token_embd's rows; biases and
/// tied embeddings from which tensors exist; bos/eos from `tokenizer.ggml.*_token_id`; dtype float32.
/// grpo::ParseError naming the file and the key for an unknown architecture, a missing key, a rope scaling it cannot
/// reproduce (Llama 3.1's rope_freqs), or sizes ModelConfig::validate refuses.
ModelConfig gguf_model_config(const io::GgufFile& file);

/// The file's weights under Hugging Face's names (model.layers.N.self_attn.q_proj.weight, ...), dequantized to
/// `dtype`, llama's q/k rows un-permuted. grpo::ParseError naming the file and the tensor for a tensor with no place
/// in the model or a missing one.
std::map<std::string, torch::Tensor> gguf_hf_state(const io::GgufFile& file, const ModelConfig& config,
                                                   torch::ScalarType dtype = torch::kFloat32);

/// A model from a GGUF file, in `dtype` (default float32) on `device`, in eval mode.
CausalLM from_gguf(const std::filesystem::path& path, std::optional<torch::ScalarType> dtype = std::nullopt,
                   torch::Device device = torch::kCPU);

/// `grpo convert`: writes the GGUF file's model and tokenizer as a Hugging Face directory that transformers and
/// from_pretrained load: config.json and model.safetensors (save_pretrained, weights in `dtype`), tokenizer.json and
/// tokenizer_config.json with the chat template (text::gguf_tokenizer_json). Creates `directory` when missing and
/// overwrites those files. Throws as from_gguf and gguf_tokenizer_json do, before writing anything.
void convert_gguf(const std::filesystem::path& gguf, const std::filesystem::path& directory,
                  torch::ScalarType dtype = torch::kFloat32);

}  // namespace grpo::models
