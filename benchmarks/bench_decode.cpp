// SPDX-License-Identifier: Apache-2.0
// Decoding speed of the reference model at Qwen2.5-0.5B's shape (random weights) with the KV cache, batch 1, 8 and
// 16, beside the memory-bandwidth bound: every decode step reads all weights once, so
// tokens/s ≤ batch · bandwidth / weight bytes, with the bandwidth measured in the same run (a sum over 1 GiB).
//   decode/B              Sampler::generate of 16 tokens after a 32-token prompt, prefill and sampling included (fp32)
//   decode_steps/B        the 16 single-token forward_step calls alone (prompt prefilled untimed), fp32
//   decode_steps_bf16/B   the same in bf16: the few-rows projection and few-queries attention kernels
//                         (models/cpu_kernels.hpp) where the CPU has AVX512-BF16
//   decode_steps_bf16_libtorch/B  the same bf16 steps on LibTorch's operators (the generic kernel path forced):
//                         the plain baseline of the kernels, in the same run
// The sampler's draw of one token per row (argmax p / E, E ~ Exp(1)) at Qwen2's 151,936-token vocabulary, the
// softmax given, per decode step, beside the bound of reading p once (B·V·4 bytes at the measured bandwidth):
//   race_generator/B      a [B, V] exponential tensor from the generator, then the argmax (the draw before keyed noise)
//   race_keyed/B          keyed_race: Philox per (row key, sample, position, token) fused with the race (the CPU path)
//   race_keyed_tensors/B  the keyed noise in tensor operations, then the argmax (what another device runs)
#include <grpo/logprob/kernel_path.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/policy/keyed_noise.hpp>
#include <grpo/policy/sampler.hpp>

#include <support/bench_support.hpp>

#include <torch/torch.h>

#include <chrono>

namespace {

grpo::models::CausalLM& model() {
  static grpo::models::CausalLM instance = [] {
    torch::manual_seed(0);
    grpo::models::ModelConfig config;  // the defaults are Qwen2.5-0.5B's shape
    grpo::models::CausalLM m(config);
    m->eval();
    return m;
  }();
  return instance;
}

/// model() in bf16 (a copy).
grpo::models::CausalLM& bf16_model() {
  static grpo::models::CausalLM instance = [] {
    auto m = grpo::models::deep_copy(model());
    m->to(torch::kBFloat16);
    return m;
  }();
  return instance;
}

double weight_bytes(const grpo::models::CausalLM& m) {
  double bytes = 0;
  for (const auto& p : m->parameters()) bytes += static_cast<double>(p.numel() * p.element_size());
  return bytes;
}

/// One-read memory bandwidth in bytes/s: the best of a few sums over 1 GiB.
double measured_bandwidth() {
  static const double bandwidth = [] {
    // 1 GiB of random fp32: identical pages (torch::ones) may be deduplicated by the hypervisor and read from cache
    auto x = torch::randn({int64_t{1} << 28});
    double best = 0;
    for (int i = 0; i < 4; ++i) {
      const auto start = std::chrono::steady_clock::now();
      auto s = x.sum();
      benchmark::DoNotOptimize(s.data_ptr());
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, static_cast<double>(x.numel() * 4) / seconds);
    }
    return best;
  }();
  return bandwidth;
}

void decode(benchmark::State& state) {
  const int64_t batch = state.range(0), new_tokens = 16;
  auto& m = model();
  const std::vector<int64_t> prompt(32, 9707);
  grpo::Sampler sampler({.temperature = 1.0, .max_new_tokens = new_tokens, .seed = 1});
  torch::NoGradGuard no_grad;
  for (auto _ : state) {
    auto rollout = sampler.generate(m, {prompt}, batch);
    benchmark::DoNotOptimize(rollout.completion_ids.data_ptr());
  }
  const double tokens = static_cast<double>(batch * new_tokens);
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bound_tokens/s"] = static_cast<double>(batch) * measured_bandwidth() / weight_bytes(m);
  state.counters["weights_GB"] = weight_bytes(m) / 1e9;
  state.counters["bandwidth_GB/s"] = measured_bandwidth() / 1e9;
}

/// Steady-state decoding alone: the 32-token prompt is prefilled untimed, then 16 single-token forward_step calls
/// (no sampling) are timed. This is the figure the bandwidth bound is about: `decode` above includes the prefill,
/// whose 32·B tokens (and their lm_head rows: 0.5 GFLOP per token) make batch 16 compute-bound.
void run_decode_steps(benchmark::State& state, grpo::models::CausalLM& m, grpo::KernelPath path) {
  const grpo::ForceKernelPath force(path);
  const int64_t batch = state.range(0), prompt = 32, new_tokens = 16;
  torch::NoGradGuard no_grad;
  const auto ids = torch::full({batch, prompt + new_tokens}, 9707, torch::kInt64);
  const auto mask = torch::ones({batch, prompt + new_tokens}, torch::kInt64);
  for (auto _ : state) {
    state.PauseTiming();
    grpo::models::KvCache cache;
    m->forward_step(ids.narrow(1, 0, prompt), mask.narrow(1, 0, prompt), cache);
    state.ResumeTiming();
    for (int64_t t = prompt; t < prompt + new_tokens; ++t) {
      auto logits = m->forward_step_last(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), cache);
      benchmark::DoNotOptimize(logits.data_ptr());
    }
  }
  const double tokens = static_cast<double>(batch * new_tokens);
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bound_tokens/s"] = static_cast<double>(batch) * measured_bandwidth() / weight_bytes(m);
  state.counters["bandwidth_GB/s"] = measured_bandwidth() / 1e9;
}

void decode_steps(benchmark::State& state) { run_decode_steps(state, model(), grpo::KernelPath::automatic); }
void decode_steps_bf16(benchmark::State& state) { run_decode_steps(state, bf16_model(), grpo::KernelPath::automatic); }
void decode_steps_bf16_libtorch(benchmark::State& state) {
  run_decode_steps(state, bf16_model(), grpo::KernelPath::generic);
}

enum class Race { generator, keyed, keyed_tensors };

void run_race(benchmark::State& state, Race race) {
  const int64_t batch = state.range(0), vocab = 151936;
  torch::manual_seed(1);
  const auto probs = torch::softmax(torch::randn({batch, vocab}) * 2.0, -1);
  auto generator = grpo::seeded_generator(torch::kCPU, 1);
  std::vector<int64_t> key_values;
  for (int64_t b = 0; b < batch; ++b) key_values.push_back(static_cast<int64_t>(grpo::prompt_noise_key(1, b / 8)));
  const auto keys = torch::tensor(key_values, torch::kInt64), samples = torch::arange(batch).remainder(8);
  int64_t position = 0;
  for (auto _ : state) {
    torch::Tensor token;
    if (race == Race::generator) {
      token = probs.div(torch::empty({batch, vocab}).exponential_(1, generator)).argmax(-1);
    } else if (race == Race::keyed) {
      token = grpo::keyed_race(probs, keys, samples, position);
    } else {
      token = probs.div(grpo::keyed_exponential(keys, samples, position, vocab, torch::kCPU)).argmax(-1);
    }
    ++position;
    benchmark::DoNotOptimize(token.data_ptr());
  }
  state.counters["bound_ms"] = static_cast<double>(batch * vocab * 4) / measured_bandwidth() * 1e3;
}

void race_generator(benchmark::State& state) { run_race(state, Race::generator); }
void race_keyed(benchmark::State& state) { run_race(state, Race::keyed); }
void race_keyed_tensors(benchmark::State& state) { run_race(state, Race::keyed_tensors); }

}  // namespace

BENCHMARK(decode)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
BENCHMARK(decode_steps)->Arg(1)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
BENCHMARK(decode_steps_bf16)->Arg(1)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
BENCHMARK(decode_steps_bf16_libtorch)->Arg(1)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

BENCHMARK(race_generator)->Arg(1)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
BENCHMARK(race_keyed)->Arg(1)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
BENCHMARK(race_keyed_tensors)->Arg(1)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

int main(int argc, char** argv) { return grpo::bench::run_benchmarks(argc, argv); }
