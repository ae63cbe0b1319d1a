// SPDX-License-Identifier: Apache-2.0
// Which implementation a log-prob or loss kernel of grpo/logprob runs (token_log_probs, token_entropy,
// linear_token_log_probs, FusedGrpoLoss): the fused CPU kernels (host loops over the tensors' memory) for CPU
// tensors, or the generic path (the same formulas as chunks of LibTorch operations, so any device LibTorch runs on)
// for everything else. resolve_kernel_path is the one place that rule lives.
//
// Tests and benchmarks force a path on the current thread with a scoped guard, e.g. to run the generic path on CPU
// tensors and compare it with the CPU kernels:
//
//   {
//     grpo::ForceKernelPath guard(grpo::KernelPath::generic);
//     auto lp = grpo::token_log_probs(logits, ids).log_probs;  // generic path, although logits are on the CPU
//   }
//
// The path is chosen when a kernel's forward runs and recorded with its autograd node, so its backward takes the
// same path whatever thread runs it and whether or not the guard is still alive.
//
// A whole process can start with another path: GRPO_KERNEL_PATH=generic in the environment (or cpu, automatic) is
// what KernelPath::automatic resolves to on every thread, as if each began under ForceKernelPath, so a program runs
// as on a CPU without the fused and AVX-512 kernels (the suite's restricted-CPU runs, docs/testing.md). An unknown
// value makes the first kernel call throw ConfigError naming the variable.
#pragma once

#include <torch/torch.h>

#include <string_view>

namespace grpo {

enum class KernelPath {
  /// The rule: the CPU kernels for CPU tensors, the generic path for tensors on any other device.
  automatic,
  /// The fused CPU kernels (CPU tensors only).
  cpu,
  /// Chunks of LibTorch operations (any device; on the CPU slower than the fused kernels).
  generic,
};

/// "automatic", "cpu" or "generic".
std::string_view to_string(KernelPath path);

/// Forces `path` for the kernels called on this thread while it lives (KernelPath::automatic restores the rule);
/// the path forced before it is restored when it is destroyed, so guards nest. Not copyable or movable.
class ForceKernelPath {
 public:
  explicit ForceKernelPath(KernelPath path);
  ~ForceKernelPath();
  ForceKernelPath(const ForceKernelPath&) = delete;
  ForceKernelPath& operator=(const ForceKernelPath&) = delete;

 private:
  KernelPath previous_;
};

/// The path a kernel runs for `tensor` (its main input, e.g. the logits): KernelPath::cpu or KernelPath::generic,
/// never automatic. The forced path if any, else cpu when tensor is on the CPU and generic otherwise. Throws
/// grpo::Error naming `what` (the kernel), `name` (the argument) and its device when KernelPath::cpu is forced on a
/// tensor that is not on the CPU.
KernelPath resolve_kernel_path(const torch::Tensor& tensor, std::string_view name, std::string_view what);

}  // namespace grpo
