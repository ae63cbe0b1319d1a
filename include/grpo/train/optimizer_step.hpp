// SPDX-License-Identifier: Apache-2.0
// The end of every optimizer step, shared by GrpoTrainer and SftTrainer: clip the global gradient L2 norm, step.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace grpo::train {

/// Elements per chunk when optimizer work on half-precision tensors needs fp32 temporaries (gradient_norm, and
/// CompensatedAdamW's update): 16 MB per fp32 temporary, where a whole embedding's would be 0.5 GB.
inline constexpr std::int64_t kFp32ChunkElements = std::int64_t{1} << 22;

/// The L2 norm of one gradient as a 0-dim tensor: in its dtype when fp32/fp64 (as torch's clip_grad_norm_), in fp32
/// for bf16/fp16, over chunks of kFp32ChunkElements.
inline torch::Tensor gradient_norm(const torch::Tensor& grad) {
  const auto dtype = c10::promoteTypes(grad.scalar_type(), torch::kFloat32);
  if (dtype == grad.scalar_type()) return grad.norm(2);
  const auto flat = grad.reshape(-1);
  std::vector<torch::Tensor> parts;
  for (std::int64_t start = 0; start < flat.numel(); start += kFp32ChunkElements) {
    parts.push_back(flat.narrow(0, start, std::min(kFp32ChunkElements, flat.numel() - start)).to(dtype).norm(2));
  }
  return parts.size() == 1 ? parts.front() : torch::stack(parts).norm(2);
}

/// Clips the global L2 norm of `parameters`' gradients to max_grad_norm (0 = no clipping: the norm is only measured),
/// then steps `optimizer`. Returns the norm before clipping (transformers' and TRL's grad_norm). As
/// torch::nn::utils::clip_grad_norm_ (each gradient's norm, the norm of those, gradients scaled by
/// min(1, max / (norm + 1e-6))), except that the norms of bf16/fp16 gradients are computed in fp32 rather than
/// rounded to their dtype.
inline double clip_and_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                            double max_grad_norm) {
  double total = 0.0;
  {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads, norms;
    auto dtype = torch::kFloat32;
    for (const auto& parameter : parameters) {
      if (!parameter.grad().defined()) continue;
      grads.push_back(parameter.grad());
      norms.push_back(gradient_norm(grads.back()));
      dtype = c10::promoteTypes(dtype, norms.back().scalar_type());
    }
    if (!norms.empty()) {
      for (auto& norm : norms) norm = norm.to(dtype);
      const auto total_norm = norms.size() == 1 ? norms.front() : torch::stack(norms).norm(2);
      if (max_grad_norm > 0.0) {
        const auto coefficient = torch::clamp(max_grad_norm / (total_norm + 1e-6), c10::nullopt, 1.0);
        for (auto& grad : grads) grad.mul_(coefficient.to(grad.device()));
      }
      total = total_norm.item<double>();
    }
  }
  optimizer.step();
  return total;
}

}  // namespace grpo::train
