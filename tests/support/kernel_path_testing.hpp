// SPDX-License-Identifier: Apache-2.0
// Runs a kernel test on both implementations of grpo/logprob (kernel_path.hpp): the CPU kernels and the generic
// (device-independent) path, forced on CPU tensors.
#pragma once

#include <grpo/logprob/kernel_path.hpp>

#include <catch2/catch.hpp>

/// At the top of a TEST_CASE: runs the test case once with KernelPath::cpu and once with KernelPath::generic forced
/// (Catch2 GENERATE), naming the path in the failure messages.
#define GRPO_FOR_EACH_KERNEL_PATH()                                                                    \
  const ::grpo::KernelPath grpo_kernel_path_ = GENERATE(::grpo::KernelPath::cpu, ::grpo::KernelPath::generic); \
  const ::grpo::ForceKernelPath grpo_force_kernel_path_(grpo_kernel_path_);                            \
  INFO("kernel path " << ::grpo::to_string(grpo_kernel_path_))
