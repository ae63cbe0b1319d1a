// SPDX-License-Identifier: Apache-2.0
// AdamW for bf16 parameters without fp32 master weights: 10 bytes per trained parameter (bf16 weight, gradient,
// first and second moments, Kahan compensation) instead of mixed precision's 20 (bf16 weight and gradient, fp32
// master, master gradient and two fp32 moments).
//
// Each step computes AdamW's update in fp32 (torch::optim::AdamW's formula: decoupled decay, bias-corrected moments)
// from the stored bf16 state, then stores back:
//   - the weight with Kahan-compensated summation: a bf16 buffer c holds what rounding the weight dropped, and the
//     next update is added to it first: s = c + u, w' = bf16(w + s), c' = bf16(s − (w' − w)). Updates far below the
//     weight's spacing (lr·update ≈ 1e-6 against 2⁻⁸·|w|) accumulate in c until they move w, as an fp32 master would
//     (AnyPrecisionAdamW, pytorch/torchdistx; optimi's Kahan summation).
//   - both moments rounded stochastically to bf16 (Zamirai et al. 2020, "Revisiting BFloat16 Training"): to one of
//     the two neighbouring bf16 values with probabilities that make the result unbiased. Rounding to nearest would
//     freeze the second moment: with β₂ = 0.999 its decay, a relative change of 1e-3, is below half of bf16's relative
//     spacing (2⁻⁹ … 2⁻⁸), so v could only grow.
// The rounding noise is drawn from a generator seeded by (seed, parameter index, step), so a run is deterministic
// and a resumed run continues bit-exactly from the state save() wrote.
//
// fp32 and fp64 parameters (a LoRA model's adapters, norms a user kept in fp32) step exactly as AdamW in their own
// dtype, without compensation. fp16 parameters are refused: the stochastic rounding here is bf16's (the top half of
// an fp32), and fp16's range cannot hold the second moment of small gradients.
//
// The work is done in chunks of at most 2²² elements per parameter, so the fp32 temporaries stay ≈ 100 MB whatever
// the parameter's size (an embedding of 151,936 × 896 would otherwise need 0.5 GB per temporary).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace grpo::train {

/// x (fp32, any shape) rounded stochastically to bf16 with the generator `generator` (on x's device): each element
/// becomes one of the two bf16 values around it, the upper with probability (x − lower) / (upper − lower). Exact
/// bf16 values, ±inf and NaN are kept. Returns a bf16 tensor of x's shape.
torch::Tensor stochastic_round_to_bfloat16(const torch::Tensor& x, at::Generator& generator);

class CompensatedAdamW : public torch::optim::Optimizer {
 public:
  /// `parameters`: bf16 (compensated, stochastically rounded moments), fp32 or fp64 (plain AdamW) tensors; each
  /// group's options are torch::optim::AdamWOptions (lr, betas, eps, weight_decay; amsgrad is refused). `seed` seeds
  /// the stochastic rounding. Throws grpo::ConfigError for an fp16 or integer parameter or amsgrad.
  CompensatedAdamW(std::vector<torch::Tensor> parameters, torch::optim::AdamWOptions options, std::uint64_t seed = 0);

  /// One AdamW step over every parameter with a gradient (gradients in the parameter's dtype). `closure`, when
  /// given, is evaluated first with gradients enabled and its loss returned.
  torch::Tensor step(LossClosure closure = nullptr) override;

  /// Writes / reads each group's options and every parameter's step count, moments and compensation (by position
  /// in the parameter list), and the seed. load() throws grpo::Error when a tensor's shape differs.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  /// A parameter's state (by its position over all groups): its step count, moments (the parameter's dtype) and
  /// compensation (bf16 parameters only; undefined otherwise). Undefined tensors before its first step.
  struct ParameterState {
    std::int64_t step = 0;
    torch::Tensor exp_avg, exp_avg_sq, compensation;
  };
  const std::vector<ParameterState>& parameter_states() const { return states_; }

 private:
  void step_parameter(torch::Tensor& parameter, ParameterState& state, const torch::optim::AdamWOptions& options,
                      std::size_t index);

  std::uint64_t seed_;
  std::vector<ParameterState> states_;
};

}  // namespace grpo::train
