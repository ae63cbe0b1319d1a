// SPDX-License-Identifier: Apache-2.0
// Scoring while generating (reward_prefetch.hpp): one realistic step, sequential beside overlapped.
//
// The step: K = 4 chunks of P = 4 prompts, G = 4 completions each (B = 64), sampled with the real grpo::Sampler (KV
// cache, temperature 1, 256 new tokens) from a small random Qwen2-shaped grpo::models::CausalLM built in code (vocab
// 1000, hidden 128, 4 layers, 4 heads / 2 KV heads), then scored by a RewardSet of the code_tests reward (weight 1)
// and a cheap length reward (weight 0.01, not prefetched). The random model's text is not code, so each completion's
// text is replaced by a real Python program that reads stdin (a correct, a wrong, a partly right or a crashing
// solution of "sum the integers", picked by the completion's first sampled token): the sandbox really starts bwrap
// and python3 and runs every one of the row's 3 stdin/stdout tests, as it would for a model's code.
//   sequential: generate chunk 1..K, then rewards.score(batch)
//   overlapped: generate chunk k, prefetcher.submit(chunk k), generate chunk k+1, ...; prefetcher.wait(), then
//               wrapped.rewards.score(batch) (all from the cache)
// Both modes sample with the same seed, so they see the same completions; the program checks that the totals and
// every non-timing metric are identical in every configuration (exit status 1 if not), then prints the wall times,
// their ratio and the ideal ratio (the longer phase plus 1/K of the shorter). reward_threads is the RewardSet's
// executor threads in sequential mode and the prefetcher's threads in overlapped mode; torch_threads is
// at::set_num_threads for the sampler. cpu_s counts this process and its reaped sandbox processes.
// Try OMP_WAIT_POLICY=passive too: LibTorch's OpenMP threads otherwise spin while the sandboxed programs need the
// cores.
//
//   build/benchmarks/bench_overlap                      (skips, with a message, when the sandbox cannot run here)
#include <grpo/models/causal_lm.hpp>
#include <grpo/policy/sampler.hpp>
#include <grpo/rewards/code_tests_reward.hpp>
#include <grpo/rewards/reward_prefetch.hpp>
#include <grpo/rewards/reward_set.hpp>
#include <grpo/sandbox/sandbox.hpp>

#include "support/bench_support.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

namespace {

using namespace grpo;
using Clock = std::chrono::steady_clock;

constexpr int64_t kChunks = 4, kPromptsPerChunk = 4, kGroup = 4, kNewTokens = 256, kPromptTokens = 24;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// CPU seconds used so far by this process (every thread) and its reaped children (the sandboxes).
double cpu_seconds() {
  double total = 0.0;
  for (const int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage usage{};
    ::getrusage(who, &usage);
    total += static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
             static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  }
  return total;
}

models::CausalLM& model() {
  static models::CausalLM instance = [] {
    torch::manual_seed(0);
    models::ModelConfig c;
    c.architecture = models::Architecture::qwen2;
    c.vocab_size = 1000;
    c.hidden_size = 128;
    c.intermediate_size = 512;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 512;
    c.rope_theta = 10000.0;
    c.eos_token_ids = {0};
    models::CausalLM m(c);
    m->eval();
    return m;
  }();
  return instance;
}

/// The code_tests reward, or the reason the sandbox cannot run here.
struct CodeReward {
  rewards::RewardPtr reward;
  std::string unavailable;
};

const CodeReward& code_reward() {
  static const CodeReward instance = [] {
    CodeReward out;
    try {
      rewards::CodeTestsOptions options;
      options.test_time = std::chrono::milliseconds(5000);
      out.reward = std::make_shared<const rewards::CodeTestsReward>(options);
    } catch (const sandbox::SandboxError& error) {
      out.unavailable = error.what();
    }
    return out;
  }();
  return instance;
}

rewards::RewardSet reward_set(std::size_t threads) {
  auto length = rewards::make_reward(
      "length", [](const rewards::Completion& c) { return static_cast<float>(c.token_ids.size()) / kNewTokens; });
  return rewards::RewardSet({{code_reward().reward, 1.0}, {length, 0.01}},
                            {.executor = {.num_threads = threads}});
}

// "Sum the integers on stdin", three tests per prompt.
std::shared_ptr<const rewards::Row> row_of(int64_t prompt) {
  std::string tests = "[";
  for (int t = 0; t < 3; ++t) {
    const int64_t a = prompt * 7 + t, b = 100 * t + 3;
    tests += fmt::format(R"({}{{"input": "{} {}\n", "expected_output": "{}\n"}})", t ? ", " : "", a, b, a + b);
  }
  tests += "]";
  auto row = std::make_shared<rewards::Row>();
  row->set("case_type", std::string("input"));
  row->set("test_cases", tests);
  return row;
}

const std::vector<std::string>& programs() {
  static const std::vector<std::string> list = {
      "```python\nimport sys\nprint(sum(map(int, sys.stdin.read().split())))\n```",       // right
      "```python\na, b = map(int, input().split())\nprint(a - b)\n```",                     // wrong
      "```python\na, b = map(int, input().split())\nprint(a + b if b < 100 else 0)\n```",  // 1 of 3
      "```python\nraise SystemExit(input())\n```",                                          // crashes
  };
  return list;
}

std::vector<std::vector<int64_t>> prompt_ids(int64_t chunk) {
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t p = 0; p < kPromptsPerChunk; ++p) {
    std::vector<int64_t> ids;
    for (int64_t t = 0; t < kPromptTokens; ++t) ids.push_back(1 + (chunk * 131 + p * 31 + t * 7) % 999);
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

/// The completions of one chunk: real token ids and truncated flags, the text replaced by a program.
std::vector<rewards::Completion> completions_of(const Rollout& rollout, int64_t chunk) {
  const auto ids_tensor = rollout.completion_ids.contiguous(), mask_tensor = rollout.completion_mask.contiguous(),
             truncated_tensor = rollout.truncated.contiguous();
  const auto ids = ids_tensor.accessor<int64_t, 2>();
  const auto mask = mask_tensor.accessor<int64_t, 2>();
  const auto truncated = truncated_tensor.accessor<bool, 1>();
  std::vector<rewards::Completion> out;
  for (int64_t i = 0; i < rollout.batch_size(); ++i) {
    const int64_t prompt = chunk * kPromptsPerChunk + i / kGroup;
    rewards::Completion c;
    c.prompt = fmt::format("prompt {}", prompt);
    for (int64_t t = 0; t < ids.size(1); ++t) {
      if (mask[i][t] != 0) c.token_ids.push_back(ids[i][t]);
    }
    c.truncated = truncated[i];
    c.text = programs()[static_cast<std::size_t>(c.token_ids.at(0) % static_cast<int64_t>(programs().size()))];
    c.group = static_cast<std::size_t>(prompt);
    c.row = row_of(prompt);
    out.push_back(std::move(c));
  }
  return out;
}

struct StepResult {
  double seconds = 0.0, generate_seconds = 0.0, wait_seconds = 0.0, score_seconds = 0.0;
  double cpu_seconds = 0.0;  ///< process and sandbox CPU time of the step
  rewards::RewardSetScores scores;
};

StepResult sequential_step(const rewards::RewardSet& set) {
  StepResult r;
  const auto start = Clock::now();
  Sampler sampler({.temperature = 1.0, .max_new_tokens = kNewTokens, .eos_token_ids = {0}, .seed = 7});
  std::vector<rewards::Completion> batch;
  for (int64_t k = 0; k < kChunks; ++k) {
    auto chunk = completions_of(sampler.generate(model(), prompt_ids(k), kGroup), k);
    batch.insert(batch.end(), chunk.begin(), chunk.end());
  }
  r.generate_seconds = seconds_since(start);
  const auto scoring = Clock::now();
  r.scores = set.score(batch);
  r.score_seconds = seconds_since(scoring);
  r.seconds = seconds_since(start);
  return r;
}

StepResult overlapped_step(const rewards::PrefetchWrapped& wrapped, rewards::RewardPrefetcher& prefetcher) {
  StepResult r;
  const auto start = Clock::now();
  prefetcher.clear();  // the start of a step
  Sampler sampler({.temperature = 1.0, .max_new_tokens = kNewTokens, .eos_token_ids = {0}, .seed = 7});
  std::vector<rewards::Completion> batch;
  for (int64_t k = 0; k < kChunks; ++k) {
    auto chunk = completions_of(sampler.generate(model(), prompt_ids(k), kGroup), k);
    batch.insert(batch.end(), chunk.begin(), chunk.end());
    prefetcher.submit(std::move(chunk));  // scored on the prefetcher's threads while chunk k + 1 is sampled
  }
  r.generate_seconds = seconds_since(start);
  const auto waiting = Clock::now();
  prefetcher.wait();
  r.wait_seconds = seconds_since(waiting);
  const auto scoring = Clock::now();
  r.scores = wrapped.rewards.score(batch);
  r.score_seconds = seconds_since(scoring);
  r.seconds = seconds_since(start);
  return r;
}

/// One benchmark configuration.
struct Config {
  bool overlap = false;
  std::size_t reward_threads = 1;
  int torch_threads = 2;
  auto operator<=>(const Config&) const = default;
};

// The fastest iteration of each configuration and its scores, for the summary printed after the run (the Time
// column is the mean over the iterations; the counters and the summary are the fastest one).
std::map<Config, StepResult>& results() {
  static std::map<Config, StepResult> map;
  return map;
}

void BM_step(benchmark::State& state) {
  if (!code_reward().reward) {
    state.SkipWithError(("the sandbox cannot run here: " + code_reward().unavailable).c_str());
    return;
  }
  const Config config{state.range(0) != 0, static_cast<std::size_t>(state.range(1)), static_cast<int>(state.range(2))};
  at::set_num_threads(config.torch_threads);
  torch::NoGradGuard no_grad;
  const rewards::RewardSet set = reward_set(config.reward_threads);
  const rewards::PrefetchWrapped wrapped = rewards::wrap_for_prefetch(set, {"code_tests"});
  rewards::RewardPrefetcher prefetcher(wrapped.prefetched, {.threads = config.reward_threads});
  StepResult best;
  for (auto _ : state) {
    const double cpu_before = cpu_seconds();
    StepResult r = config.overlap ? overlapped_step(wrapped, prefetcher) : sequential_step(set);
    r.cpu_seconds = cpu_seconds() - cpu_before;
    state.SetIterationTime(r.seconds);
    if (best.seconds == 0.0 || r.seconds < best.seconds) best = std::move(r);
  }
  state.counters["generate_s"] = best.generate_seconds;
  state.counters["wait_s"] = best.wait_seconds;
  state.counters["score_s"] = best.score_seconds;
  state.counters["cpu_s"] = best.cpu_seconds;
  state.counters["mean_code_reward"] = best.scores.reward_metrics[0].mean;
  state.counters["completions/s"] = static_cast<double>(kChunks * kPromptsPerChunk * kGroup) / best.seconds;
  results()[config] = std::move(best);
}
BENCHMARK(BM_step)
    ->ArgNames({"overlap", "reward_threads", "torch_threads"})
    ->ArgsProduct({{0, 1}, {1, 2}, {1, 2}})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

/// Totals and every non-timing metric of the two modes must agree exactly.
bool identical(const rewards::RewardSetScores& a, const rewards::RewardSetScores& b) {
  if (a.total != b.total || a.values != b.values) return false;
  const auto ma = a.metrics(), mb = b.metrics();
  for (const auto& [key, value] : ma) {
    if (key.ends_with("seconds")) continue;
    if (!mb.contains(key) || mb.at(key) != value) return false;
  }
  return ma.size() == mb.size();
}

}  // namespace

int main(int argc, char** argv) {
  if (!code_reward().reward) {
    fmt::print("bench_overlap: skipped, the sandbox cannot run here: {}\n", code_reward().unavailable);
    return 0;
  }
  const int status = grpo::bench::run_benchmarks(argc, argv);
  if (status != 0) return status;
  if (results().empty()) return 0;
  bool all_identical = true;
  const rewards::RewardSetScores& reference = results().begin()->second.scores;
  const StepResult* best_sequential = nullptr;
  const StepResult* best_overlapped = nullptr;
  for (const auto& [config, r] : results()) {
    all_identical = all_identical && identical(r.scores, reference);
    const StepResult*& best = config.overlap ? best_overlapped : best_sequential;
    if (best == nullptr || r.seconds < best->seconds) best = &r;
    if (!config.overlap) continue;
    const auto seq = results().find({false, config.reward_threads, config.torch_threads});
    if (seq == results().end()) continue;
    const StepResult& s = seq->second;
    // Ideal overlap: the longer phase, plus the part of the shorter one that cannot overlap (the first chunk's
    // generation, or the last chunk's scoring), with the sequential phase times.
    const double ideal = std::max(s.generate_seconds, s.score_seconds) +
                         std::min(s.generate_seconds, s.score_seconds) / static_cast<double>(kChunks);
    fmt::print("reward_threads={} torch_threads={}: sequential {:.3f} s (generate {:.3f} s + score {:.3f} s; "
               "CPU {:.2f} s), overlapped {:.3f} s (generate {:.3f} s, then wait {:.3f} s + score {:.4f} s; "
               "CPU {:.2f} s): overlapped/sequential = {:.2f} (ideal {:.2f})\n",
               config.reward_threads, config.torch_threads, s.seconds, s.generate_seconds, s.score_seconds,
               s.cpu_seconds, r.seconds, r.generate_seconds, r.wait_seconds, r.score_seconds, r.cpu_seconds,
               r.seconds / s.seconds, ideal / s.seconds);
  }
  if (best_sequential != nullptr && best_overlapped != nullptr) {
    fmt::print("best sequential {:.3f} s, best overlapped {:.3f} s: ratio {:.2f}\n", best_sequential->seconds,
               best_overlapped->seconds, best_overlapped->seconds / best_sequential->seconds);
  }
  fmt::print("scores (values, totals, non-timing metrics) identical in every configuration: {}\n",
             all_identical ? "yes" : "NO");
  return all_identical ? 0 : 1;
}
