// SPDX-License-Identifier: Apache-2.0
// Per-token log-probs from logits [N, V]: the eager LibTorch way (log_softmax + gather) beside grpo's chunked kernel,
// forward and forward+backward. Counters: tokens/s, GB/s (one read of the logits per forward), peak extra memory.
#include <grpo/logprob/token_log_probs.hpp>

#include <support/bench_support.hpp>

#include <torch/torch.h>

namespace {

constexpr int64_t kVocab = 151936;

enum class Impl { eager, chunked };

void run(benchmark::State& state, Impl impl, bool backward, bool entropy) {
  const int64_t tokens = state.range(0);
  torch::manual_seed(0);
  auto logits = torch::randn({tokens, kVocab});
  auto ids = torch::randint(0, kVocab, {tokens}, torch::kInt64);
  if (backward) logits.requires_grad_(true);
  int64_t peak = 0;
  for (auto _ : state) {
    grpo::bench::PeakMemory memory;
    torch::Tensor lp, h;
    if (impl == Impl::eager) {
      auto log_p = torch::log_softmax(logits, -1);
      lp = log_p.gather(-1, ids.unsqueeze(-1)).squeeze(-1);
      if (entropy) h = -(log_p.exp() * log_p).sum(-1);
    } else {
      auto out = grpo::token_log_probs(logits, ids, {.with_entropy = entropy});
      lp = out.log_probs;
      h = out.entropy;
    }
    if (backward) {
      auto total = entropy ? lp.sum() + h.sum() : lp.sum();
      total.backward();
      benchmark::DoNotOptimize(logits.grad().data_ptr());
      logits.mutable_grad() = torch::Tensor();
    }
    benchmark::DoNotOptimize(lp.data_ptr());
    peak = std::max(peak, memory.extra_bytes());
  }
  const double bytes = static_cast<double>(tokens) * kVocab * 4.0;
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_extra_MB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["logits_MB"] = bytes / (1 << 20);
}

void args(benchmark::internal::Benchmark* b) {
  b->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
}

}  // namespace

BENCHMARK_CAPTURE(run, eager_forward, Impl::eager, false, false)->Apply(args);
BENCHMARK_CAPTURE(run, chunked_forward, Impl::chunked, false, false)->Apply(args);
BENCHMARK_CAPTURE(run, eager_forward_entropy, Impl::eager, false, true)->Apply(args);
BENCHMARK_CAPTURE(run, chunked_forward_entropy, Impl::chunked, false, true)->Apply(args);
BENCHMARK_CAPTURE(run, eager_forward_backward, Impl::eager, true, false)->Apply(args);
BENCHMARK_CAPTURE(run, chunked_forward_backward, Impl::chunked, true, false)->Apply(args);

int main(int argc, char** argv) { return grpo::bench::run_benchmarks(argc, argv); }
