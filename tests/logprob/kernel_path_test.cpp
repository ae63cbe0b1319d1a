// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/logprob/kernel_path.hpp>

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <thread>

TEST_CASE("resolve_kernel_path: CPU kernels for CPU tensors, generic elsewhere, and the forced path",
          "[logprob][generic]") {
  const auto on_cpu = torch::zeros({2, 3});
  const auto elsewhere = torch::empty({2, 3}, torch::TensorOptions().device(torch::kMeta));  // any non-CPU device
  REQUIRE(grpo::resolve_kernel_path(on_cpu, "logits", "test") == grpo::KernelPath::cpu);
  REQUIRE(grpo::resolve_kernel_path(elsewhere, "logits", "test") == grpo::KernelPath::generic);
  {
    const grpo::ForceKernelPath generic(grpo::KernelPath::generic);
    REQUIRE(grpo::resolve_kernel_path(on_cpu, "logits", "test") == grpo::KernelPath::generic);
    REQUIRE(grpo::resolve_kernel_path(elsewhere, "logits", "test") == grpo::KernelPath::generic);
    {
      const grpo::ForceKernelPath cpu(grpo::KernelPath::cpu);  // guards nest
      REQUIRE(grpo::resolve_kernel_path(on_cpu, "logits", "test") == grpo::KernelPath::cpu);
      REQUIRE_THROWS_AS(grpo::resolve_kernel_path(elsewhere, "hidden", "kernel"), grpo::Error);
      REQUIRE_THROWS_WITH(grpo::resolve_kernel_path(elsewhere, "hidden", "kernel"),
                          Catch::Contains("kernel: the CPU kernel path is forced") &&
                              Catch::Contains("hidden is on meta"));
      {
        const grpo::ForceKernelPath rule(grpo::KernelPath::automatic);
        REQUIRE(grpo::resolve_kernel_path(on_cpu, "logits", "test") == grpo::KernelPath::cpu);
        REQUIRE(grpo::resolve_kernel_path(elsewhere, "logits", "test") == grpo::KernelPath::generic);
      }
      REQUIRE_THROWS(grpo::resolve_kernel_path(elsewhere, "hidden", "kernel"));  // cpu again
    }
    REQUIRE(grpo::resolve_kernel_path(on_cpu, "logits", "test") == grpo::KernelPath::generic);  // generic again
    // The guard is per thread: another thread follows the rule.
    grpo::KernelPath other = grpo::KernelPath::generic;
    std::thread([&] { other = grpo::resolve_kernel_path(on_cpu, "logits", "test"); }).join();
    REQUIRE(other == grpo::KernelPath::cpu);
  }
  REQUIRE(grpo::resolve_kernel_path(on_cpu, "logits", "test") == grpo::KernelPath::cpu);  // the rule again
  REQUIRE(grpo::to_string(grpo::KernelPath::generic) == "generic");
}
