// SPDX-License-Identifier: Apache-2.0
// The OpenMP wait policy of a training or decoding program on few cores.
//
// With the default policy, LibTorch's OpenMP threads spin after every parallel operation while OpenBLAS's own
// threads run the next matrix product on the same cores; decoding, a long chain of small operations, pays it on
// every one. Measured on 2 cores (Qwen2.5-0.5B's shape, fp32, bench_decode, two runs each): Sampler::generate 2.9–3.0
// → 10.9–11.4 tokens/s at batch 1 and 19.1–20.6 → 61.0–61.7 at batch 16 with OMP_WAIT_POLICY=PASSIVE; a bf16 GRPO
// update (bench_step, 4 layers) 12–15% faster. OpenMP reads the variable once, when its runtime is loaded, before
// main runs, so setting it from the program needs a fresh start of the program.
#pragma once

#include <cstdlib>

#if defined(__linux__)
#include <unistd.h>
#endif

namespace grpo {

/// If OMP_WAIT_POLICY is not set, sets it to PASSIVE and starts this program again in place (execv of
/// /proc/self/exe with the same argv), so the OpenMP runtime loads with it; returns when the variable is already set
/// (by the user, whose choice stands, e.g. OMP_WAIT_POLICY=ACTIVE, or by that restart) or when the restart is not
/// possible (then the program simply runs with the default policy). Call it first in main, before any thread starts.
/// argv: main's argv (null-terminated). Linux only; elsewhere it does nothing.
inline void use_passive_omp_wait_policy(char** argv) {
#if defined(__linux__)
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (::setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0) != 0) return;
  ::execv("/proc/self/exe", argv);  // returns only on failure: run on with the default policy
#else
  (void)argv;
#endif
}

}  // namespace grpo
