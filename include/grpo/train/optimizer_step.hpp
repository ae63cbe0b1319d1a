// SPDX-License-Identifier: Apache-2.0
// The end of every optimizer step, shared by GrpoTrainer and SftTrainer: clip the global gradient L2 norm, step.
#pragma once

#include <torch/torch.h>

#include <limits>
#include <vector>

namespace grpo::train {

/// Clips the global L2 norm of `parameters`' gradients to max_grad_norm (0 = no clipping: the norm is only measured),
/// then steps `optimizer`. Returns the norm before clipping (transformers' and TRL's grad_norm).
inline double clip_and_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                            double max_grad_norm) {
  const double norm = torch::nn::utils::clip_grad_norm_(
      parameters, max_grad_norm > 0.0 ? max_grad_norm : std::numeric_limits<double>::infinity());
  optimizer.step();
  return norm;
}

}  // namespace grpo::train
