// SPDX-License-Identifier: Apache-2.0
// The log-prob and loss kernels of issue 6, each beside its eager LibTorch baseline, in one process:
//   K1 log-probs from logits, forward              eager: log_softmax + gather; ours also on the generic path
//   K2 log-probs from logits, forward + backward   eager: the same through autograd; ours also in place and on the
//                                                  generic path (x_fused: its speed as a multiple of the fused one's)
//   K3 fused linear log-probs, no-grad (old/ref)   eager: mm + log_softmax + gather
//   K4 fused linear log-probs, forward + backward  eager: the same through autograd
//   K5 GRPO loss from log-probs, forward + backward  eager: TRL's dapo formula; also GrpoLoss (x_eager: speed-up)
//   K6 full loss step from hidden states: policy (grad) + reference (no grad) log-probs, loss, backward; ours as
//      linear_token_log_probs + FusedGrpoLoss ("fused") and as FusedGrpoLoss from hidden states ("fused_one_pass")
// Counters: tokens/s; GB/s and the fraction of the one-read bandwidth (measured in this run) for K1, K2; GFLOP/s
// and the fraction of torch::mm's rate on the same shapes (measured in this run) for K3, K4, K6; peak extra
// resident memory beside its analytic bound.
//
// The default run covers the small shapes (name tag "quick", about two minutes on 2 cores); the full grid
// (H ∈ {896, 1536}, V ∈ {32000, 151936}, N ∈ {1024, 4096}) is selected with a filter, e.g.
//   bench_kernels --benchmark_filter='K[12]/.*/V:151936/N:4096'      (eager K2 there needs ~7 GB)
//   bench_kernels --benchmark_filter='K4/.*/H:896/V:151936/N:1024'   (about a minute per row)
#include <grpo/logprob/fused_grpo_loss.hpp>
#include <grpo/logprob/kernel_path.hpp>
#include <grpo/logprob/linear_log_probs.hpp>
#include <grpo/logprob/token_log_probs.hpp>
#include <grpo/loss/recipes.hpp>

#include <support/bench_support.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr double kMiB = 1 << 20;

/// Mean seconds per call of fn over at least 0.2 s and 10 calls: a baseline timed in the same run as the benchmark
/// beside it (whose mean over ~0.2 s Google Benchmark reports).
double mean_seconds_of(const std::function<void()>& fn) {
  int64_t runs = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0.0;
  while (elapsed < 0.2 || runs < 10) {
    fn();
    ++runs;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return elapsed / static_cast<double>(runs);
}

/// One-read memory bandwidth in bytes/s: the best of a few sums over 1 GiB of random floats.
double measured_bandwidth() {
  static const double bandwidth = [] {
    auto x = torch::randn({int64_t{1} << 28});
    return static_cast<double>(x.numel() * 4) / grpo::bench::best_seconds([&] { benchmark::DoNotOptimize(x.sum().data_ptr()); }, 4);
  }();
  return bandwidth;
}

/// torch::mm FLOP rate for the GEMMs of an lm_head forward (and backward) at this shape, best of `repeats`.
double mm_flops_per_second(int64_t n, int64_t h, int64_t v, bool backward) {
  torch::NoGradGuard no_grad;
  auto x = torch::randn({n, h}), w = torch::randn({v, h}) * 0.05;
  double flops = 2.0 * n * h * v;
  std::function<void()> fn = [&] { benchmark::DoNotOptimize(torch::mm(x, w.t()).data_ptr()); };
  if (backward) {
    flops *= 3;  // Z = X·Wᵀ, dX = dZ·W, dW = dZᵀ·X
    fn = [&] {
      auto z = torch::mm(x, w.t());
      benchmark::DoNotOptimize(torch::mm(z, w).data_ptr());
      benchmark::DoNotOptimize(torch::mm(z.t(), x).data_ptr());
    };
  }
  return flops / grpo::bench::best_seconds(fn, n * v > (int64_t{1} << 28) ? 1 : 2);
}

struct Shape {
  int64_t n = 1024, v = 32000, h = 896;
};

/// Runs `step` per iteration with a peak-memory probe; reports tokens/s and peak extra memory (MiB).
void time_steps(benchmark::State& state, int64_t tokens, const std::function<void()>& step,
                const std::function<void()>& between = {}) {
  int64_t peak = 0;
  for (auto _ : state) {
    if (between) {
      state.PauseTiming();
      between();
      state.ResumeTiming();
    }
    grpo::bench::PeakMemory memory;
    step();
    peak = std::max(peak, memory.extra_bytes());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_extra_MiB"] = static_cast<double>(peak) / kMiB;
}

void rate(benchmark::State& state, const char* name, double per_iteration) {
  state.counters[name] = benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- K1, K2: from logits ----------------------------------------------------------------------------------------

enum class Impl { eager, fused, fused_inplace, generic };

void logits_bench(benchmark::State& state, Shape s, Impl impl, bool backward) {
  torch::manual_seed(0);
  auto source = torch::randn({s.n, s.v}) * 3;
  auto ids = torch::randint(0, s.v, {s.n}, torch::kInt64);
  const double logit_bytes = 4.0 * s.n * s.v;
  torch::Tensor logits = impl == Impl::fused_inplace ? torch::empty_like(source) : source;
  if (backward) logits.requires_grad_(true);
  auto run = [&](Impl which) {
    torch::Tensor lp;
    if (which == Impl::eager) {
      lp = torch::log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1);
    } else {
      // The generic path (LibTorch operations over chunks of rows), forced on these CPU logits.
      const grpo::ForceKernelPath force(which == Impl::generic ? grpo::KernelPath::generic : grpo::KernelPath::automatic);
      lp = grpo::token_log_probs(logits, ids, {.overwrite_logits_in_backward = which == Impl::fused_inplace}).log_probs;
    }
    if (backward) {
      lp.sum().backward();
      benchmark::DoNotOptimize(logits.grad().data_ptr());
      logits.mutable_grad() = torch::Tensor();
    }
    benchmark::DoNotOptimize(lp.data_ptr());
  };
  auto step = [&] { run(impl); };
  // The in-place backward destroys the logits: restore them (untimed) before each iteration.
  std::function<void()> restore;
  if (impl == Impl::fused_inplace) restore = [&] {
    torch::NoGradGuard no_grad;
    logits.copy_(source);
  };
  time_steps(state, s.n, step, restore);
  // The fused kernels timed in the same run: fused seconds per iteration as an iteration-invariant rate is
  // fused_time / generic_time.
  if (impl == Impl::generic) rate(state, "x_fused", mean_seconds_of([&] { run(Impl::fused); }));
  // Minimal traffic: forward reads the logits once; backward reads them once more and writes the gradient.
  const double bytes = backward ? 3.0 * logit_bytes : logit_bytes;
  rate(state, "GB/s", bytes / 1e9);
  state.counters["bandwidth_GB/s"] = measured_bandwidth() / 1e9;
  state.counters["bytes_at_bandwidth_s"] = bytes / measured_bandwidth();
  // Analytic extra memory: eager keeps the [N, V] log_softmax (and in backward its gradient and the logits'
  // gradient); ours keeps O(N) in forward and the logits' gradient (none when written in place), and the generic
  // path's chunk temporaries are at most 2 of about 128 MiB each.
  double bound = 0;
  if (impl == Impl::eager) bound = backward ? 3 * logit_bytes : logit_bytes;
  if (impl == Impl::fused && backward) bound = logit_bytes;
  if (impl == Impl::generic) bound = (backward ? logit_bytes : 0.0) + 2 * std::min(logit_bytes, 128.0 * kMiB);
  state.counters["bound_extra_MiB"] = bound / kMiB;
}

// ---- K3, K4, K6: from hidden states -------------------------------------------------------------------------------

struct LinearInputs {
  torch::Tensor hidden, weight, ref_weight, ids;
};

LinearInputs make_linear(Shape s) {
  torch::manual_seed(1);
  LinearInputs in;
  in.hidden = torch::randn({s.n, s.h});
  in.weight = torch::randn({s.v, s.h}) * (1.0 / std::sqrt(static_cast<double>(s.h)));
  in.ref_weight = in.weight + torch::randn({s.v, s.h}) * 1e-3;
  in.ids = torch::randint(0, s.v, {s.n}, torch::kInt64);
  return in;
}

torch::Tensor eager_linear_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& ids) {
  return torch::log_softmax(torch::mm(hidden, weight.t()), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1);
}

void linear_counters(benchmark::State& state, Shape s, double flops_per_iteration, bool backward) {
  const double mm_rate = mm_flops_per_second(s.n, s.h, s.v, backward);
  rate(state, "GFLOP/s", flops_per_iteration / 1e9);
  state.counters["mm_GFLOP/s"] = mm_rate / 1e9;
  // Seconds torch::mm alone needs for this iteration's FLOPs: divide by the measured time for the mm fraction.
  state.counters["flops_at_mm_s"] = flops_per_iteration / mm_rate;
}

/// K3: no-grad log-probs from hidden states (the old / reference pass).
void k3(benchmark::State& state, Shape s, bool fused) {
  auto in = make_linear(s);
  // torch::mm first: it also warms up the BLAS library's buffers, which must not count as our peak memory.
  linear_counters(state, s, 2.0 * s.n * s.h * s.v, false);
  torch::NoGradGuard no_grad;
  time_steps(state, s.n, [&] {
    auto lp = fused ? grpo::linear_token_log_probs(in.hidden, in.weight, in.ids).log_probs
                    : eager_linear_log_probs(in.hidden, in.weight, in.ids);
    benchmark::DoNotOptimize(lp.data_ptr());
  });
  const int64_t chunk = grpo::linear_log_prob_chunk_rows({}, s.v, 4);
  state.counters["bound_extra_MiB"] = (fused ? 4.0 * std::min(chunk, s.n) * s.v : 8.0 * s.n * s.v) / kMiB;
}

/// K4: log-probs from hidden states, forward + backward into hidden and weight.
void k4(benchmark::State& state, Shape s, bool fused) {
  auto in = make_linear(s);
  in.hidden.requires_grad_(true);
  in.weight.requires_grad_(true);
  auto g = torch::randn({s.n});
  // Ours recomputes the logits in backward: 8·N·H·V FLOPs of GEMM against eager's 6·N·H·V.
  linear_counters(state, s, (fused ? 8.0 : 6.0) * s.n * s.h * s.v, true);
  time_steps(state, s.n, [&] {
    auto lp = fused ? grpo::linear_token_log_probs(in.hidden, in.weight, in.ids).log_probs
                    : eager_linear_log_probs(in.hidden, in.weight, in.ids);
    (lp * g).sum().backward();
    benchmark::DoNotOptimize(in.weight.grad().data_ptr());
    in.hidden.mutable_grad() = torch::Tensor();
    in.weight.mutable_grad() = torch::Tensor();
  });
  rate(state, "useful_GFLOP/s", 6.0 * s.n * s.h * s.v / 1e9);
  const int64_t chunk = grpo::linear_log_prob_chunk_rows({}, s.v, 4);
  const double grads = 4.0 * (s.v * s.h + s.n * s.h);
  // eager: logits, log_softmax output, its gradient and the logits' gradient alive together, plus the gradients.
  state.counters["bound_extra_MiB"] = (fused ? 4.0 * std::min(chunk, s.n) * s.v + grads : 16.0 * s.n * s.v + grads) / kMiB;
}

// ---- K5: the loss from log-probs ----------------------------------------------------------------------------------

enum class LossImpl { eager, grpo_loss, fused };

void k5(benchmark::State& state, int64_t tokens, LossImpl impl) {
  const int64_t t = 256, b = tokens / t;
  torch::manual_seed(2);
  auto lp = (torch::randn({b, t}) * 0.1 - 2).requires_grad_(true);
  auto old = lp.detach() + torch::randn({b, t}) * 0.05;
  auto ref = lp.detach() + torch::randn({b, t}) * 0.05;
  auto adv = torch::randn({b});
  auto mask = (torch::rand({b, t}) < 0.9).to(torch::kFloat);
  auto options = grpo::recipes::dapo();
  options.beta = 0.04;
  const grpo::GrpoLoss grpo_loss(options);
  const grpo::FusedGrpoLoss fused(options);
  grpo::LossInputs inputs{.log_probs = lp, .old_log_probs = old, .ref_log_probs = ref, .advantages = adv, .mask = mask};
  const auto normaliser = grpo_loss.local_normaliser(inputs);
  time_steps(state, tokens, [&] {
    torch::Tensor value;
    switch (impl) {
      case LossImpl::eager:
        value = grpo::bench::eager_dapo_loss(lp, old, ref, adv, mask, 0.2, 0.28, 0.04);
        break;
      case LossImpl::grpo_loss:
        value = grpo_loss(inputs, normaliser).loss;
        break;
      case LossImpl::fused:
        value = fused(inputs, normaliser).loss;
        break;
    }
    value.backward();
    benchmark::DoNotOptimize(lp.grad().data_ptr());
    lp.mutable_grad() = torch::Tensor();
  });
  // Minimal traffic: read lp, old, ref, mask (4 B each per token), write the gradient.
  rate(state, "GB/s", 20.0 * tokens / 1e9);
  if (impl != LossImpl::eager) {
    // The speed-up over the eager composition, timed in the same run: eager seconds per iteration as an
    // iteration-invariant rate is eager_time / our_time.
    rate(state, "x_eager", mean_seconds_of([&] {
           grpo::bench::eager_dapo_loss(lp, old, ref, adv, mask, 0.2, 0.28, 0.04).backward();
           lp.mutable_grad() = torch::Tensor();
         }));
  }
}

// ---- K6: hidden states → loss → gradients -------------------------------------------------------------------------

enum class StepImpl { eager, fused, fused_one_pass };

void k6(benchmark::State& state, Shape s, StepImpl impl) {
  const bool fused = impl != StepImpl::eager;
  auto in = make_linear(s);
  in.hidden.requires_grad_(true);
  in.weight.requires_grad_(true);
  const int64_t t = std::min<int64_t>(s.n, 256), b = s.n / t;
  auto ids = in.ids.view({b, t});
  torch::manual_seed(3);
  auto adv = torch::randn({b});
  auto mask = (torch::rand({b, t}) < 0.9).to(torch::kFloat);
  auto options = grpo::recipes::dapo();
  options.beta = 0.04;
  const grpo::GrpoLoss eager_loss(options);
  const grpo::FusedGrpoLoss fused_loss(options);
  // policy 8 (two-step: recompute in backward) or 6 (eager, one pass) ·NHV, reference 2·NHV
  linear_counters(state, s, (impl == StepImpl::fused ? 10.0 : 8.0) * s.n * s.h * s.v, true);
  time_steps(state, s.n, [&] {
    auto h = in.hidden.view({b, t, s.h});
    grpo::LossOutput out;
    if (fused) {
      torch::Tensor ref;
      {
        torch::NoGradGuard no_grad;
        ref = grpo::linear_token_log_probs(h, in.ref_weight, ids).log_probs;
      }
      grpo::LossInputs li{.ref_log_probs = ref, .advantages = adv, .mask = mask};
      const auto normaliser = grpo::local_normaliser(options.loss_type, mask);
      if (impl == StepImpl::fused_one_pass) {
        out = fused_loss(h, in.weight, ids, li, normaliser);
      } else {
        li.log_probs = grpo::linear_token_log_probs(h, in.weight, ids).log_probs;
        out = fused_loss(li, normaliser);
      }
    } else {
      auto lp = eager_linear_log_probs(in.hidden, in.weight, in.ids).view({b, t});
      torch::Tensor ref;
      {
        torch::NoGradGuard no_grad;
        ref = eager_linear_log_probs(in.hidden, in.ref_weight, in.ids).view({b, t});
      }
      grpo::LossInputs li{.log_probs = lp, .ref_log_probs = ref, .advantages = adv, .mask = mask};
      out = eager_loss(li, eager_loss.local_normaliser(li));
    }
    out.loss.backward();
    benchmark::DoNotOptimize(in.weight.grad().data_ptr());
    in.hidden.mutable_grad() = torch::Tensor();
    in.weight.mutable_grad() = torch::Tensor();
  });
  const int64_t chunk = grpo::linear_log_prob_chunk_rows({}, s.v, 4);
  const double grads = 4.0 * (s.v * s.h + s.n * s.h);
  state.counters["bound_extra_MiB"] = (fused ? 4.0 * std::min(chunk, s.n) * s.v + grads : 24.0 * s.n * s.v + grads) / kMiB;
}

std::string shape_name(const char* kernel, const char* impl, Shape s, bool with_h, bool quick) {
  std::string name = std::string(kernel) + "/" + impl;
  if (with_h) name += "/H:" + std::to_string(s.h);
  name += "/V:" + std::to_string(s.v) + "/N:" + std::to_string(s.n);
  if (quick) name += "/quick";
  return name;
}

void register_all() {
  auto configure = [](benchmark::internal::Benchmark* b) {
    b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.2);
  };
  const Shape quick{1024, 32000, 896};
  std::vector<Shape> grid;
  for (int64_t h : {896, 1536})
    for (int64_t v : {32000, 151936})
      for (int64_t n : {1024, 4096}) grid.push_back({n, v, h});
  auto is_quick = [&](Shape s) { return s.n == quick.n && s.v == quick.v && s.h == quick.h; };

  for (const Shape& s : grid) {
    if (s.h != 896) continue;  // K1, K2 do not depend on H
    for (bool backward : {false, true}) {
      const char* kernel = backward ? "K2" : "K1";
      const std::vector<std::pair<const char*, Impl>> impls =
          backward ? std::vector<std::pair<const char*, Impl>>{{"eager", Impl::eager},
                                                                {"fused", Impl::fused},
                                                                {"fused_inplace", Impl::fused_inplace},
                                                                {"generic", Impl::generic}}
                   : std::vector<std::pair<const char*, Impl>>{
                         {"eager", Impl::eager}, {"fused", Impl::fused}, {"generic", Impl::generic}};
      for (const auto& [name, impl] : impls) {
        configure(benchmark::RegisterBenchmark(shape_name(kernel, name, s, false, is_quick(s)).c_str(),
                                               [s, impl = impl, backward](benchmark::State& st) {
                                                 logits_bench(st, s, impl, backward);
                                               }));
      }
    }
  }
  for (const Shape& s : grid) {
    for (bool fused : {false, true}) {
      const char* impl = fused ? "fused" : "eager";
      configure(benchmark::RegisterBenchmark(shape_name("K3", impl, s, true, is_quick(s)).c_str(),
                                             [s, fused](benchmark::State& st) { k3(st, s, fused); }));
      configure(benchmark::RegisterBenchmark(shape_name("K4", impl, s, true, is_quick(s)).c_str(),
                                             [s, fused](benchmark::State& st) { k4(st, s, fused); }));
    }
    for (const auto& [name, impl] : std::vector<std::pair<const char*, StepImpl>>{
             {"eager", StepImpl::eager}, {"fused", StepImpl::fused}, {"fused_one_pass", StepImpl::fused_one_pass}}) {
      configure(benchmark::RegisterBenchmark(shape_name("K6", name, s, true, is_quick(s)).c_str(),
                                             [s, impl = impl](benchmark::State& st) { k6(st, s, impl); }));
    }
  }
  for (int64_t tokens : {1024, 4096, 65536}) {
    for (const auto& [name, impl] : std::vector<std::pair<const char*, LossImpl>>{
             {"eager", LossImpl::eager}, {"grpo_loss", LossImpl::grpo_loss}, {"fused", LossImpl::fused}}) {
      auto* b = benchmark::RegisterBenchmark(
          ("K5/" + std::string(name) + "/N:" + std::to_string(tokens) + "/quick").c_str(),
          [tokens, impl = impl](benchmark::State& st) { k5(st, tokens, impl); });
      b->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.2);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(2);
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("row_kernel_isa", grpo::log_prob_kernel_isa());
  // Without a filter, run the quick shapes only; the full grid is opt-in (see the top of this file).
  std::vector<char*> args(argv, argv + argc);
  std::string quick_filter = "--benchmark_filter=/quick";
  const bool has_filter = std::any_of(args.begin() + 1, args.end(), [](const char* a) {
    return std::string(a).rfind("--benchmark_filter", 0) == 0;
  });
  if (!has_filter) args.push_back(quick_filter.data());
  int count = static_cast<int>(args.size());
  register_all();
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
