// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the benchmark programs: peak-memory measurement, best-of-N timing, thread set-up, list flags.
#pragma once

#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace grpo::bench {

/// The shortest of `repeats` timed calls of fn, in seconds.
inline double best_seconds(const std::function<void()>& fn, int repeats) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

/// The entries of a comma-separated flag value ("a,b,c"; empty entries kept).
inline std::vector<std::string> split_commas(const std::string& value) {
  std::vector<std::string> out;
  for (size_t begin = 0, end; begin <= value.size(); begin = end + 1) {
    end = value.find(',', begin);
    if (end == std::string::npos) end = value.size();
    out.push_back(value.substr(begin, end - begin));
  }
  return out;
}

/// Reads a "VmXXX:   1234 kB" line of /proc/self/status, in bytes (0 when unavailable).
inline int64_t proc_status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

/// Peak resident memory added since construction: resets the kernel's high-water mark (VmHWM) through
/// /proc/self/clear_refs and reports VmHWM − VmRSS at the start. Large tensors are mmap'ed by glibc and returned
/// on free, so this measures the temporaries a kernel allocates on top of its inputs.
class PeakMemory {
 public:
  PeakMemory() {
    std::ofstream("/proc/self/clear_refs") << "5";
    base_ = proc_status_bytes("VmRSS");
  }
  int64_t extra_bytes() const { return proc_status_bytes("VmHWM") - base_; }

 private:
  int64_t base_ = 0;
};

/// TRL's _compute_loss for loss_type dapo (clipped surrogate + β·k3 KL, token mean), written the plain eager way: the
/// baseline of the loss benchmarks. lp, old, ref, mask [B, T]; adv [B].
inline torch::Tensor eager_dapo_loss(const torch::Tensor& lp, const torch::Tensor& old, const torch::Tensor& ref,
                                     const torch::Tensor& adv, const torch::Tensor& mask, double eps_low,
                                     double eps_high, double beta) {
  auto ratio = torch::exp(lp - old);
  auto a = adv.unsqueeze(1);
  auto per_token = -torch::min(ratio * a, torch::clamp(ratio, 1 - eps_low, 1 + eps_high) * a);
  auto delta = ref - lp;
  per_token = per_token + beta * (torch::exp(delta) - delta - 1);
  return (per_token * mask).sum() / mask.sum().clamp_min(1);
}

/// LibTorch sizes its pool to the physical cores (1 on a 2-vCPU VM); benchmarks use every hardware thread.
inline void use_all_hardware_threads() {
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
}

/// The main() of every benchmark program: all hardware threads, then Google Benchmark's usual flags.
inline int run_benchmarks(int argc, char** argv) {
  use_all_hardware_threads();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace grpo::bench
