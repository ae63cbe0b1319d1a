// SPDX-License-Identifier: Apache-2.0
// The GRPO loss given per-token log-probs [B, T]: a plain eager LibTorch composition of TRL's dapo loss (clipped
// surrogate + k3 KL, token mean) beside grpo::GrpoLoss with the same settings (which also computes every metric),
// forward and forward+backward. Counters: tokens/s, GB/s over the five [B, T] fp32 inputs, peak extra memory.
#include <grpo/loss/grpo_loss.hpp>
#include <grpo/loss/recipes.hpp>

#include <support/bench_support.hpp>

#include <torch/torch.h>

#include <algorithm>

namespace {

struct Batch {
  torch::Tensor lp, old, ref, adv, mask;
};

Batch make_batch(int64_t tokens) {
  const int64_t t = 256, b = tokens / t;
  torch::manual_seed(0);
  Batch x;
  x.lp = (torch::randn({b, t}) * 0.1 - 2).requires_grad_(true);
  x.old = x.lp.detach() + torch::randn({b, t}) * 0.05;
  x.ref = x.lp.detach() + torch::randn({b, t}) * 0.05;
  x.adv = torch::randn({b});
  x.mask = (torch::rand({b, t}) < 0.9).to(torch::kFloat);
  return x;
}

void run(benchmark::State& state, bool ours, bool backward) {
  const int64_t tokens = state.range(0);
  auto x = make_batch(tokens);
  auto options = grpo::recipes::dapo();
  options.beta = 0.04;
  grpo::GrpoLoss loss(options);
  grpo::LossInputs inputs{.log_probs = x.lp, .old_log_probs = x.old, .ref_log_probs = x.ref, .advantages = x.adv,
                          .mask = x.mask};
  const auto normaliser = loss.local_normaliser(inputs);
  int64_t peak = 0;
  for (auto _ : state) {
    grpo::bench::PeakMemory memory;
    auto value = ours ? loss(inputs, normaliser).loss : grpo::bench::eager_dapo_loss(x.lp, x.old, x.ref, x.adv, x.mask, 0.2, 0.28, 0.04);
    if (backward) {
      value.backward();
      x.lp.mutable_grad() = torch::Tensor();
    }
    benchmark::DoNotOptimize(value.data_ptr());
    peak = std::max(peak, memory.extra_bytes());
  }
  state.counters["peak_extra_MB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(5.0 * 4.0 * static_cast<double>(tokens) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void args(benchmark::internal::Benchmark* b) { b->Arg(1024)->Arg(4096)->Arg(65536)->Unit(benchmark::kMicrosecond); }

}  // namespace

BENCHMARK_CAPTURE(run, eager_forward, false, false)->Apply(args);
BENCHMARK_CAPTURE(run, grpo_loss_forward, true, false)->Apply(args);
BENCHMARK_CAPTURE(run, eager_forward_backward, false, true)->Apply(args);
BENCHMARK_CAPTURE(run, grpo_loss_forward_backward, true, true)->Apply(args);

int main(int argc, char** argv) { return grpo::bench::run_benchmarks(argc, argv); }
