// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/train/compensated_adamw.hpp>
#include <grpo/train/master_weights.hpp>

namespace grpo::train {
namespace {

bool half_precision(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> trainable_parameters(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : module.named_parameters()) {
    if (p.value().requires_grad()) out.emplace_back(p.key(), p.value());
  }
  return out;
}

MasterWeights::MasterWeights(std::vector<std::pair<std::string, torch::Tensor>> parameters,
                             OptimizerPrecision precision)
    : precision_(precision) {
  torch::NoGradGuard no_grad;
  if (precision == OptimizerPrecision::compensated) {
    bool any_bf16 = false;
    for (const auto& [name, parameter] : parameters) {
      GRPO_CHECK_CONFIG(parameter.scalar_type() != torch::kHalf,
                        "optimizer_precision compensated: parameter {} is fp16; compensated training is for bf16 "
                        "(use fp32_master for an fp16 model)", name);
      any_bf16 = any_bf16 || parameter.scalar_type() == torch::kBFloat16;
    }
    GRPO_CHECK_CONFIG(any_bf16 || parameters.empty(),
                      "optimizer_precision compensated: no trainable parameter is bf16 (it trains a bf16 model "
                      "without fp32 master weights; LoRA adapters are fp32): use fp32_master");
  }
  for (auto& [name, parameter] : parameters) {
    names_.push_back(name);
    parameters_.push_back(parameter);
    if (precision == OptimizerPrecision::fp32_master && half_precision(parameter)) {
      masters_.push_back(parameter.detach().to(torch::kFloat32).clone().set_requires_grad(true));
      mixed_ = true;
    } else {
      masters_.push_back(parameter);
    }
  }
}

void MasterWeights::accumulate_gradients() {
  if (!mixed_) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto& parameter = parameters_[i];
    if (!half_precision(parameter) || !parameter.grad().defined()) continue;
    auto& master = masters_[i];
    if (master.grad().defined()) {
      master.mutable_grad().add_(parameter.grad());
    } else {
      master.mutable_grad() = parameter.grad().to(torch::kFloat32);
    }
    parameter.mutable_grad() = torch::Tensor();
  }
}

void MasterWeights::masters_to_parameters() {
  if (!mixed_) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (half_precision(parameters_[i])) parameters_[i].copy_(masters_[i]);
  }
}

void MasterWeights::parameters_to_masters() {
  if (!mixed_) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (half_precision(parameters_[i])) masters_[i].copy_(parameters_[i]);
  }
}

std::map<std::string, torch::Tensor> MasterWeights::state() const {
  std::map<std::string, torch::Tensor> out;
  if (!mixed_) return out;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (half_precision(parameters_[i])) out.emplace(names_[i], masters_[i].detach());
  }
  return out;
}

void MasterWeights::load_state(const std::map<std::string, torch::Tensor>& state, const std::string& source) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!half_precision(parameters_[i])) continue;
    const auto it = state.find(names_[i]);
    GRPO_CHECK(it != state.end(), "{}: no fp32 master weight \"{}\"", source, names_[i]);
    GRPO_CHECK(it->second.sizes() == masters_[i].sizes(), "{}: master weight \"{}\" has shape {} but the model's is {}",
               source, names_[i], shape_str(it->second), shape_str(masters_[i]));
    masters_[i].copy_(it->second);
  }
  masters_to_parameters();
}

std::unique_ptr<torch::optim::Optimizer> make_adamw(const MasterWeights& master, torch::optim::AdamWOptions options,
                                                    std::uint64_t seed) {
  if (master.precision() == OptimizerPrecision::compensated) {
    return std::make_unique<CompensatedAdamW>(master.masters(), options, seed);
  }
  return std::make_unique<torch::optim::AdamW>(master.masters(), options);
}

}  // namespace grpo::train
