// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/seeded_generator.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/train/compensated_adamw.hpp>
#include <grpo/train/optimizer_step.hpp>

#include <cmath>
#include <string>

#include <grpo/core/mix64.hpp>

namespace grpo::train {
namespace {

const torch::optim::AdamWOptions& adamw_options(const torch::optim::OptimizerParamGroup& group) {
  const auto* options = dynamic_cast<const torch::optim::AdamWOptions*>(&group.options());
  GRPO_CHECK(options != nullptr, "CompensatedAdamW: a parameter group's options are not torch::optim::AdamWOptions");
  return *options;
}

void check_options(const torch::optim::AdamWOptions& options) {
  GRPO_CHECK_CONFIG(!options.amsgrad(), "CompensatedAdamW: amsgrad is not supported");
  GRPO_CHECK_CONFIG(options.lr() >= 0.0 && options.eps() >= 0.0 && options.weight_decay() >= 0.0,
                    "CompensatedAdamW: lr, eps and weight_decay must be >= 0 (got {}, {}, {})", options.lr(),
                    options.eps(), options.weight_decay());
  const auto [beta1, beta2] = options.betas();
  GRPO_CHECK_CONFIG(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0,
                    "CompensatedAdamW: betas must be in [0, 1) (got {}, {})", beta1, beta2);
}

}  // namespace

torch::Tensor stochastic_round_to_bfloat16(const torch::Tensor& x, at::Generator& generator) {
  GRPO_CHECK(x.scalar_type() == torch::kFloat32, "stochastic_round_to_bfloat16: x must be float32, got {}",
             c10::toString(x.scalar_type()));
  // bf16 is the top 16 bits of an fp32. Adding a uniform 16-bit integer to the bits and truncating the low half
  // moves the magnitude up to the next bf16 value with probability (distance to the lower one) / spacing (the sign
  // bit is untouched: the bits of a float are sign and magnitude). The carry cannot pass an exponent of all ones
  // (inf and NaN have their low 16 bits cleared by the truncation, and the noise is < 2¹⁶).
  const auto contiguous = x.contiguous();
  const auto noise =
      torch::randint(0, std::int64_t{1} << 16, contiguous.sizes(), generator, contiguous.options().dtype(torch::kInt32));
  const auto finite = torch::isfinite(contiguous);
  auto bits = torch::where(finite, contiguous.view(torch::kInt32) + noise, contiguous.view(torch::kInt32));
  return torch::bitwise_and(bits, std::int64_t{-65536}).view(torch::kFloat32).to(torch::kBFloat16);
}

CompensatedAdamW::CompensatedAdamW(std::vector<torch::Tensor> parameters, torch::optim::AdamWOptions options,
                                   std::uint64_t seed)
    : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(std::move(parameters))},
                              std::make_unique<torch::optim::AdamWOptions>(options)),
      seed_(seed) {
  check_options(options);
  std::size_t index = 0;
  for (const auto& group : param_groups_) {
    for (const auto& parameter : group.params()) {
      const auto dtype = parameter.scalar_type();
      GRPO_CHECK_CONFIG(dtype == torch::kBFloat16 || dtype == torch::kFloat32 || dtype == torch::kDouble,
                        "CompensatedAdamW: parameter {} is {}; it steps bf16 parameters (fp32 and fp64 ones as plain "
                        "AdamW). Train an fp16 model through fp32 master weights",
                        index, c10::toString(dtype));
      ++index;
    }
  }
  states_.resize(index);
}

torch::Tensor CompensatedAdamW::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  torch::NoGradGuard no_grad;
  std::size_t index = 0;
  for (auto& group : param_groups_) {
    const auto& options = adamw_options(group);
    check_options(options);
    for (auto& parameter : group.params()) {
      if (index >= states_.size()) states_.resize(index + 1);  // a group added after construction
      if (parameter.grad().defined()) step_parameter(parameter, states_[index], options, index);
      ++index;
    }
  }
  return loss;
}

void CompensatedAdamW::step_parameter(torch::Tensor& parameter, ParameterState& state,
                                      const torch::optim::AdamWOptions& options, std::size_t index) {
  const auto grad = parameter.grad();
  GRPO_CHECK(grad.sizes() == parameter.sizes(), "CompensatedAdamW: parameter {} has shape {} but its gradient {}",
             index, shape_str(parameter), shape_str(grad));
  const bool compensated = parameter.scalar_type() == torch::kBFloat16;
  if (state.step == 0) {
    state.exp_avg = torch::zeros_like(parameter, torch::MemoryFormat::Contiguous);
    state.exp_avg_sq = torch::zeros_like(parameter, torch::MemoryFormat::Contiguous);
    if (compensated) state.compensation = torch::zeros_like(parameter, torch::MemoryFormat::Contiguous);
  }
  state.step += 1;
  const auto [beta1, beta2] = options.betas();
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(state.step));
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(state.step)));
  const double step_size = options.lr() / bias_correction1;
  const double decay = options.lr() * options.weight_decay();
  const auto compute = compensated ? torch::kFloat32 : parameter.scalar_type();

  // The update is written into the parameter's own storage, chunk by chunk (a non-contiguous parameter through a
  // contiguous copy written back at the end).
  auto weight = parameter.is_contiguous() ? parameter.view(-1) : parameter.contiguous().view(-1);
  const auto flat_grad = grad.contiguous().view(-1);
  auto exp_avg = state.exp_avg.view(-1), exp_avg_sq = state.exp_avg_sq.view(-1);
  at::Generator generator;
  if (compensated) {
    SplitMix64 mix{seed_ ^ (static_cast<std::uint64_t>(index) * 0xD1B54A32D192ED03ull) ^
                   (static_cast<std::uint64_t>(state.step) * 0x9E3779B97F4A7C15ull)};
    generator = seeded_generator(parameter.device(), mix.next());
  }
  const std::int64_t n = weight.numel();
  for (std::int64_t start = 0; start < n; start += kFp32ChunkElements) {
    const std::int64_t length = std::min(kFp32ChunkElements, n - start);
    auto w = weight.narrow(0, start, length);
    auto m_stored = exp_avg.narrow(0, start, length), v_stored = exp_avg_sq.narrow(0, start, length);
    const auto g = flat_grad.narrow(0, start, length).to(compute);
    const auto m = m_stored.to(compute).mul_(beta1).add_(g, 1.0 - beta1);
    const auto v = v_stored.to(compute).mul_(beta2).addcmul_(g, g, 1.0 - beta2);
    // u = −lr·λ·w − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)
    auto update = m.div(v.sqrt().div_(bias_correction2_sqrt).add_(options.eps())).mul_(-step_size);
    if (!compensated) {
      if (decay != 0.0) w.mul_(1.0 - decay);
      w.add_(update);
      m_stored.copy_(m);
      v_stored.copy_(v);
      continue;
    }
    m_stored.copy_(stochastic_round_to_bfloat16(m, generator));
    v_stored.copy_(stochastic_round_to_bfloat16(v, generator));
    const auto w32 = w.to(torch::kFloat32);
    if (decay != 0.0) update.add_(w32, -decay);
    auto c = state.compensation.view(-1).narrow(0, start, length);
    auto sum = c.to(torch::kFloat32).add_(update);  // s = c + u
    const auto rounded = w32.add(sum).to(torch::kBFloat16);
    c.copy_(sum.sub_(rounded.to(torch::kFloat32).sub_(w32)));  // c' = s − (w' − w), rounded to bf16
    w.copy_(rounded);
  }
  if (!parameter.is_contiguous()) parameter.copy_(weight.view(parameter.sizes()));
}

void CompensatedAdamW::save(torch::serialize::OutputArchive& archive) const {
  archive.write("seed", torch::tensor(static_cast<std::int64_t>(seed_)));
  for (std::size_t g = 0; g < param_groups_.size(); ++g) {
    torch::serialize::OutputArchive options_archive(archive.compilation_unit());
    adamw_options(param_groups_[g]).serialize(options_archive);
    archive.write("group_options_" + std::to_string(g), options_archive);
  }
  for (std::size_t i = 0; i < states_.size(); ++i) {
    const auto& state = states_[i];
    const std::string key = std::to_string(i);
    archive.write("step_" + key, torch::tensor(state.step));
    if (state.step == 0) continue;
    archive.write("exp_avg_" + key, state.exp_avg, /*is_buffer=*/true);
    archive.write("exp_avg_sq_" + key, state.exp_avg_sq, /*is_buffer=*/true);
    if (state.compensation.defined()) archive.write("compensation_" + key, state.compensation, /*is_buffer=*/true);
  }
}

void CompensatedAdamW::load(torch::serialize::InputArchive& archive) {
  torch::Tensor seed;
  archive.read("seed", seed);
  seed_ = static_cast<std::uint64_t>(seed.item<std::int64_t>());
  for (std::size_t g = 0; g < param_groups_.size(); ++g) {
    torch::serialize::InputArchive options_archive;
    GRPO_CHECK(archive.try_read("group_options_" + std::to_string(g), options_archive),
               "CompensatedAdamW::load: the saved optimizer has no options for parameter group {}", g);
    auto* options = dynamic_cast<torch::optim::AdamWOptions*>(&param_groups_[g].options());
    GRPO_CHECK(options != nullptr, "CompensatedAdamW::load: group {}'s options are not AdamWOptions", g);
    options->serialize(options_archive);
  }
  std::size_t index = 0;
  for (auto& group : param_groups_) {
    for (auto& parameter : group.params()) {
      if (index >= states_.size()) states_.resize(index + 1);
      auto& state = states_[index];
      const std::string key = std::to_string(index++);
      torch::Tensor step;
      GRPO_CHECK(archive.try_read("step_" + key, step),
                 "CompensatedAdamW::load: the saved optimizer has no state for parameter {} (it had fewer)", key);
      state = ParameterState{};
      state.step = step.item<std::int64_t>();
      if (state.step == 0) continue;
      auto read = [&](const std::string& name, torch::Tensor& out) {
        GRPO_CHECK(archive.try_read(name + "_" + key, out, /*is_buffer=*/true),
                   "CompensatedAdamW::load: parameter {} has no saved {}", key, name);
        GRPO_CHECK(out.sizes() == parameter.sizes(),
                   "CompensatedAdamW::load: saved {} of parameter {} has shape {} but the parameter is {}", name, key,
                   shape_str(out), shape_str(parameter));
        out = out.to(parameter.device(), parameter.scalar_type()).contiguous();
      };
      read("exp_avg", state.exp_avg);
      read("exp_avg_sq", state.exp_avg_sq);
      if (parameter.scalar_type() == torch::kBFloat16) read("compensation", state.compensation);
    }
  }
}

}  // namespace grpo::train
