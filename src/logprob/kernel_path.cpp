// SPDX-License-Identifier: Apache-2.0
// The kernel-path rule and its thread-local override (kernel_path.hpp).
#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>
#include <grpo/logprob/kernel_path.hpp>

#include <cstdlib>

namespace grpo {
namespace {

constexpr detail::EnumNames<KernelPath, 3> kKernelPathNames{{
    {KernelPath::automatic, "automatic"},
    {KernelPath::cpu, "cpu"},
    {KernelPath::generic, "generic"},
}};
static_assert(detail::names_are_unique(kKernelPathNames));

// The process's default: $GRPO_KERNEL_PATH (automatic, cpu or generic), read once; automatic when unset.
KernelPath environment_path() {
  static const KernelPath path = [] {
    const char* value = std::getenv("GRPO_KERNEL_PATH");
    if (value == nullptr || *value == '\0') return KernelPath::automatic;
    try {
      return detail::parse_enum(value, kKernelPathNames, "kernel path");
    } catch (const ConfigError& e) {
      detail::throw_formatted<ConfigError>("GRPO_KERNEL_PATH: {}", e.what());
    }
  }();
  return path;
}

thread_local KernelPath forced_path = KernelPath::automatic;

}  // namespace

std::string_view to_string(KernelPath path) { return detail::enum_name(path, kKernelPathNames); }

ForceKernelPath::ForceKernelPath(KernelPath path) : previous_(forced_path) { forced_path = path; }

ForceKernelPath::~ForceKernelPath() { forced_path = previous_; }

KernelPath resolve_kernel_path(const torch::Tensor& tensor, std::string_view name, std::string_view what) {
  const bool on_cpu = tensor.device().is_cpu();
  switch (forced_path == KernelPath::automatic ? environment_path() : forced_path) {
    case KernelPath::automatic:
      break;
    case KernelPath::cpu:
      GRPO_CHECK(on_cpu,
                 "{}: the CPU kernel path is forced (ForceKernelPath(KernelPath::cpu)) but {} is on {}; the CPU "
                 "kernels read CPU tensors only",
                 what, name, tensor.device().str());
      return KernelPath::cpu;
    case KernelPath::generic:
      return KernelPath::generic;
  }
  return on_cpu ? KernelPath::cpu : KernelPath::generic;
}

}  // namespace grpo
