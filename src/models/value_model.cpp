// SPDX-License-Identifier: Apache-2.0
#include <grpo/models/value_model.hpp>

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/io/atomic_file.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/io/safetensors.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <string_view>
#include <utility>

namespace grpo::models {
namespace {

constexpr std::string_view kScoreWeight = "score.weight", kScoreBias = "score.bias";
constexpr std::string_view kTrlWeight = "v_head.summary.weight", kTrlBias = "v_head.summary.bias";

bool classification(ScalarHeadLayout layout) { return layout != ScalarHeadLayout::trl_value_head; }
bool has_bias(ScalarHeadLayout layout) { return layout != ScalarHeadLayout::sequence_classification; }

/// The backbone's configuration: a classification layout's has no lm_head (tied embeddings: the checkpoint has none,
/// and a value model never computes logits).
ModelConfig backbone_config(ModelConfig config, ScalarHeadLayout layout) {
  if (classification(layout)) config.tie_word_embeddings = true;
  return config;
}

std::string_view class_prefix(Architecture architecture) {
  switch (architecture) {
    case Architecture::qwen2: return "Qwen2";
    case Architecture::qwen3: return "Qwen3";
    case Architecture::llama: return "Llama";
  }
  return "Llama";
}

/// config.json's pad_token_id (nullopt when absent or null).
std::optional<int64_t> read_pad_token_id(const std::filesystem::path& file) {
  simdjson::dom::parser parser;
  const simdjson::padded_string text(io::read_file(file));
  simdjson::dom::element root;
  if (parser.parse(text).get(root)) return std::nullopt;  // ModelConfig::from_file has reported a malformed file
  int64_t id = 0;
  if (root["pad_token_id"].get_int64().get(id)) return std::nullopt;
  return id;
}

}  // namespace

ValueModelImpl::ValueModelImpl(CausalLM backbone, ScalarHeadLayout layout, std::optional<ModelConfig> config)
    : config_(config.value_or(backbone->config())), backbone_(register_module("backbone", std::move(backbone))),
      layout_(layout) {
  const auto options = backbone_->lm_head_weight().options();
  const int64_t hidden = backbone_->config().hidden_size;
  torch::NoGradGuard no_grad;
  weight_ = register_parameter("head_weight", torch::empty({1, hidden}, options).normal_(0.0, 0.02));
  if (has_bias(layout_)) bias_ = register_parameter("head_bias", torch::zeros({1}, options));
}

torch::Tensor ValueModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  const torch::Tensor hidden = backbone_->hidden_states(input_ids, attention_mask);  // [B, T, H]
  torch::Tensor values = torch::matmul(hidden, weight_.t()).squeeze(-1);
  if (bias_.defined()) values = values + bias_;
  return values;
}

torch::Tensor ValueModelImpl::sequence_scores(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  const torch::Tensor values = forward(input_ids, attention_mask);
  if (!attention_mask.defined()) return values.select(1, values.size(1) - 1);
  const torch::Tensor real = (attention_mask != 0).to(torch::kLong);
  GRPO_CHECK((real.sum(1) > 0).all().item<bool>(),
             "ValueModel::sequence_scores: a row of attention_mask {} has no real token", shape_str(attention_mask));
  // The rightmost real position (with left or right padding), as transformers pools a sequence classifier.
  const torch::Tensor positions = torch::arange(real.size(1), real.options()).unsqueeze(0);
  const torch::Tensor last = (positions * real).argmax(1, /*keepdim=*/true).to(values.device());
  return values.gather(1, last).squeeze(1);
}

std::map<std::string, torch::Tensor> ValueModelImpl::hf_state() const {
  std::map<std::string, torch::Tensor> out = backbone_->hf_state();
  if (classification(layout_)) out.erase("lm_head.weight");
  const bool trl = layout_ == ScalarHeadLayout::trl_value_head;
  out.emplace(std::string(trl ? kTrlWeight : kScoreWeight), weight_.detach());
  if (bias_.defined()) out.emplace(std::string(trl ? kTrlBias : kScoreBias), bias_.detach());
  return out;
}

ValueModel value_model_from_policy(const CausalLM& policy, ScalarHeadLayout layout) {
  const auto reference = policy->lm_head_weight();
  CausalLM backbone(backbone_config(policy->config(), layout), WeightInit::none, reference.options());
  auto tensors = policy->hf_state();
  if (classification(layout)) tensors.erase("lm_head.weight");
  backbone->load_hf_state(tensors);
  backbone->set_gradient_checkpointing(policy->gradient_checkpointing());
  backbone->set_attention_implementation(policy->attention_implementation());
  return ValueModel(std::move(backbone), layout, policy->config());
}

ValueModel value_model_from_pretrained(const std::filesystem::path& directory, std::optional<torch::ScalarType> dtype,
                                       torch::Device device) {
  const ModelConfig config = ModelConfig::from_file(directory / "config.json");
  auto tensors = io::load_checkpoint_tensors(directory);
  const auto take = [&](std::string_view name) {
    const auto it = tensors.find(std::string(name));
    if (it == tensors.end()) return torch::Tensor();
    torch::Tensor t = it->second;
    tensors.erase(it);
    return t;
  };
  ScalarHeadLayout layout;
  torch::Tensor weight = take(kScoreWeight), bias;
  std::string_view weight_name = kScoreWeight;
  if (weight.defined()) {
    bias = take(kScoreBias);
    layout = bias.defined() ? ScalarHeadLayout::token_classification : ScalarHeadLayout::sequence_classification;
  } else {
    weight = take(kTrlWeight);
    bias = take(kTrlBias);
    weight_name = kTrlWeight;
    layout = ScalarHeadLayout::trl_value_head;
    GRPO_CHECK(weight.defined(),
               "{}: no scalar head: the checkpoint has neither \"{}\" (transformers' …ForSequenceClassification or "
               "…ForTokenClassification) nor \"{}\" (TRL's value head); a causal LM's checkpoint needs a head: "
               "value_model_from_policy starts a new one",
               directory.string(), kScoreWeight, kTrlWeight);
    GRPO_CHECK(bias.defined(), "{}: \"{}\" without \"{}\"", directory.string(), kTrlWeight, kTrlBias);
  }
  GRPO_CHECK(weight.dim() == 2 && weight.size(0) == 1,
             "{}: \"{}\" has shape {}: a value head has one output (num_labels 1), [1, hidden_size]", directory.string(),
             weight_name, shape_str(weight));
  GRPO_CHECK(weight.size(1) == config.hidden_size, "{}: \"{}\" has shape {} but hidden_size is {} (config.json)",
             directory.string(), weight_name, shape_str(weight), config.hidden_size);
  GRPO_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == 1), "{}: the head's bias has shape {}, not [1]",
             directory.string(), bias.defined() ? shape_str(bias) : "");
  const auto options = torch::TensorOptions().dtype(dtype.value_or(config.dtype)).device(device);
  CausalLM backbone(backbone_config(config, layout), WeightInit::none, options);
  try {
    backbone->load_hf_state(tensors);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", directory.string(), e.what()));
  }
  ValueModel model(std::move(backbone), layout, config);
  model->set_pad_token_id(read_pad_token_id(directory / "config.json"));
  {
    torch::NoGradGuard no_grad;
    model->head_weight().copy_(weight);
    if (bias.defined()) model->head_bias().copy_(bias);
  }
  model->eval();
  return model;
}

void save_pretrained(const ValueModel& model, const std::filesystem::path& directory) {
  std::filesystem::create_directories(directory);
  ModelConfig config = model->config();
  config.dtype = model->head_weight().scalar_type();
  std::string json = config.to_json();
  if (classification(model->layout())) {
    const std::string causal = fmt::format("{}ForCausalLM", class_prefix(config.architecture));
    const std::string head =
        fmt::format("{}For{}Classification", class_prefix(config.architecture),
                    model->layout() == ScalarHeadLayout::sequence_classification ? "Sequence" : "Token");
    const auto at = json.find(causal);
    GRPO_CHECK(at != std::string::npos && json.rfind("{\n", 0) == 0,
               "save_pretrained: unexpected config.json layout for {}", causal);
    json.replace(at, causal.size(), head);
    json.insert(2, "  \"id2label\": {\"0\": \"LABEL_0\"},\n  \"label2id\": {\"LABEL_0\": 0},\n");
  }
  if (const auto pad = model->pad_token_id()) json.insert(2, fmt::format("  \"pad_token_id\": {},\n", *pad));
  io::save_checkpoint_tensors(directory, model->hf_state());
  io::write_file_atomically(directory / "config.json", [&](std::ostream& out) { out << json; });
}

}  // namespace grpo::models
