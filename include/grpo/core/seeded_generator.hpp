// SPDX-License-Identifier: Apache-2.0
// A random generator for one device, seeded: the sampler's noise and the compensated optimizer's stochastic rounding
// draw from these, so a seed gives the same numbers on every run (per device: each device has its own engine).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdint>

namespace grpo {

/// A fresh generator for `device` seeded with `seed`: on the CPU a new mt19937 engine (at::CPUGeneratorImpl), on
/// another device a copy of that device's default generator, reseeded (the global one is left alone).
inline at::Generator seeded_generator(const torch::Device& device, std::uint64_t seed) {
  if (device.is_cpu()) return at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Generator generator = at::globalContext().defaultGenerator(device).clone();
  generator.set_current_seed(seed);
  return generator;
}

}  // namespace grpo
