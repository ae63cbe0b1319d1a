// SPDX-License-Identifier: Apache-2.0
// Mixed-precision training's fp32 master weights (Micikevicius et al. 2018, "Mixed Precision Training"; what
// DeepSpeed/FSDP call the fp32 optimizer copy): the model computes in bf16 (or fp16), the optimizer steps fp32
// copies of its trainable parameters, and the parameters are the copies rounded after each step. Updates far below
// a bf16 weight's resolution (lr·update ≈ 1e-6 against a spacing of 2⁻⁸·|w|) accumulate in the master instead of
// being rounded away.
//
//   MasterWeights master(trainable_parameters(model));
//   torch::optim::AdamW optimizer(master.masters(), ...);      // fp32 state
//   optimizer.zero_grad();
//   for (each micro-batch) { loss.backward(); master.accumulate_gradients(); }  // grads summed in fp32
//   clip_and_step(optimizer, master.masters(), max_norm);
//   master.masters_to_parameters();
//
// fp32 and fp64 parameters are their own masters (no copy, accumulate_gradients leaves them alone), so the same code
// trains a full-precision model unchanged.
//
// OptimizerPrecision::compensated is the other way to train a bf16 model: no masters at all, the parameters are
// stepped in place by CompensatedAdamW (compensated_adamw.hpp), 10 bytes per parameter instead of 20. make_adamw
// builds the optimizer each choice needs; GrpoTrainer and SftTrainer call it.
#pragma once

#include <grpo/core/enum_names.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::train {

/// How a half-precision model's trainable parameters are optimised (config key `optimizer_precision`).
enum class OptimizerPrecision {
  /// fp32 master weights, fp32 gradients and fp32 AdamW moments (mixed precision; the default).
  fp32_master,
  /// bf16 parameters stepped in place: bf16 gradients, bf16 moments (stochastically rounded) and a bf16 Kahan
  /// compensation per weight (CompensatedAdamW). Needs bf16 trainable parameters.
  compensated,
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<OptimizerPrecision, 2> kOptimizerPrecisionNames = {{
    {OptimizerPrecision::fp32_master, "fp32_master"},
    {OptimizerPrecision::compensated, "compensated"},
}};
}  // namespace detail

/// "fp32_master" or "compensated".
GRPO_ENUM_NAMES(OptimizerPrecision, detail::kOptimizerPrecisionNames, "optimizer precision", parse_optimizer_precision);

/// The named parameters of `module` that require gradients, in module order (all of them, or a LoRA model's
/// adapters).
std::vector<std::pair<std::string, torch::Tensor>> trainable_parameters(const torch::nn::Module& module);

class MasterWeights {
 public:
  /// `parameters`: the trainable parameters (name, tensor). With fp32_master, half-precision ones get an fp32 master
  /// copy; with compensated, every parameter is its own master (the optimizer keeps the precision). Throws
  /// ConfigError (naming optimizer_precision) for compensated when no parameter is bf16 or one is fp16.
  explicit MasterWeights(std::vector<std::pair<std::string, torch::Tensor>> parameters,
                         OptimizerPrecision precision = OptimizerPrecision::fp32_master);

  /// What the optimizer steps and the gradient is clipped and all-reduced on: the masters (fp32), in the order of
  /// the parameters.
  const std::vector<torch::Tensor>& masters() const { return masters_; }
  /// Whether any parameter has a separate master (a half-precision model trained with fp32_master).
  bool mixed() const { return mixed_; }
  OptimizerPrecision precision() const { return precision_; }

  /// After each backward: adds each half-precision parameter's gradient to its master's (in fp32) and drops the
  /// parameter's, so micro-batches accumulate in fp32. No-op for full-precision parameters.
  void accumulate_gradients();
  /// After the optimizer step: each parameter ← its master, rounded to the parameter's dtype.
  void masters_to_parameters();
  /// Each master ← its parameter, after the parameters were set from elsewhere (a broadcast from rank 0).
  void parameters_to_masters();

  /// The master copies by parameter name (for checkpoints; empty when not mixed: the model holds them).
  std::map<std::string, torch::Tensor> state() const;
  /// Copies `state` (as state() wrote it) into the masters and rounds them into the parameters. Throws grpo::Error
  /// naming a missing tensor or a shape that differs.
  void load_state(const std::map<std::string, torch::Tensor>& state, const std::string& source);

 private:
  std::vector<std::string> names_;
  std::vector<torch::Tensor> parameters_, masters_;
  OptimizerPrecision precision_;
  bool mixed_ = false;
};

/// The AdamW that steps `master`'s masters: torch::optim::AdamW for fp32_master, CompensatedAdamW (its stochastic
/// rounding seeded with `seed`) for compensated.
std::unique_ptr<torch::optim::Optimizer> make_adamw(const MasterWeights& master, torch::optim::AdamWOptions options,
                                                    std::uint64_t seed);

}  // namespace grpo::train
