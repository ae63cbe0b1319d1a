// SPDX-License-Identifier: Apache-2.0
// The differences between LibTorch 1.13 (Debian 12's libtorch-dev) and 2.x (the torch wheel) that grpo's sources
// see, in one place; everything else is written to the API both share. The build-level difference (2.x ships fmt's
// headers, used header-only) is in cmake/TorchPackage.cmake.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace grpo::compat {

/// The class c10d's ProcessGroupGloo and ProcessGroupNCCL derive from: c10d::ProcessGroup in 1.13, c10d::Backend in
/// 2.x (where ProcessGroup became a front that dispatches to per-device backends). Both declare the collectives
/// grpo uses (broadcast, allreduce, barrier over std::vector<at::Tensor>& with *Options, returning a Work) with the
/// same signatures, so src/train/distributed.cpp holds its backend through this alias and never goes through the
/// 2.x front.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

/// Ends a backend's work and frees its communicators before it is destroyed (2.x: Backend::shutdown, which
/// ProcessGroupNCCL wants called first, else it warns at exit and may leak them; 1.13 has no such call: nothing).
inline void shutdown(CollectiveBackend& backend) {
#if TORCH_VERSION_MAJOR >= 2
  backend.shutdown();
#else
  (void)backend;
#endif
}

}  // namespace grpo::compat
