// SPDX-License-Identifier: Apache-2.0
// Throughput of the code_tests reward: 1,000 small Python completions, one stdin/stdout test each, each run in its
// own bubblewrap sandbox (bwrap + seccomp + a fresh python3), scored on the reward executor's threads. Reports
// completions/s. Beside it, the bare cost of one sandboxed /usr/bin/true (the floor of any sandboxed run).
//
//   build/benchmarks/bench_sandbox --benchmark_filter=code_tests
#include <grpo/rewards/code_tests_reward.hpp>
#include <grpo/rewards/executor.hpp>
#include <grpo/sandbox/sandbox.hpp>

#include "support/bench_support.hpp"

#include <fmt/format.h>

#include <memory>
#include <vector>

namespace {

using namespace grpo;

constexpr int kCompletions = 1000;

// Half right, half wrong: "double the number", answered with *2 or +2.
std::vector<rewards::Completion> completions() {
  std::vector<rewards::Completion> batch;
  for (int i = 0; i < kCompletions; ++i) {
    auto row = std::make_shared<rewards::Row>();
    row->set("case_type", std::string("input"));
    row->set("test_cases", fmt::format(R"([{{"input": "{}\n", "expected_output": "{}\n"}}])", i, 2 * i));
    rewards::Completion c;
    c.text = fmt::format("```python\nn = int(input())\nprint(n {} 2)\n```", i % 2 == 0 ? "*" : "+");
    c.group = static_cast<std::size_t>(i);
    c.row = std::move(row);
    batch.push_back(std::move(c));
  }
  return batch;
}

void BM_code_tests(benchmark::State& state) {
  const auto batch = completions();
  rewards::CodeTestsOptions options;
  options.test_time = std::chrono::milliseconds(5000);
  const auto reward = std::make_shared<const rewards::CodeTestsReward>(options);
  rewards::RewardExecutor executor({.num_threads = static_cast<std::size_t>(state.range(0))});
  double mean = 0.0;
  for (auto _ : state) {
    const auto scores = executor.score(reward, batch);
    mean = scores.metrics.mean;
  }
  state.counters["completions/s"] =
      benchmark::Counter(static_cast<double>(kCompletions), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["mean_reward"] = mean;  // 0.5 when every run behaved
}
BENCHMARK(BM_code_tests)->Arg(1)->Arg(2)->Arg(4)->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);

void BM_sandbox_true(benchmark::State& state) {
  const sandbox::Sandbox box;
  sandbox::RunRequest request;
  request.argv = {"/usr/bin/true"};
  for (auto _ : state) benchmark::DoNotOptimize(box.run(request));
  state.counters["runs/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_sandbox_true)->Iterations(200)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_sandbox_python(benchmark::State& state) {
  const sandbox::Sandbox box;
  sandbox::RunRequest request;
  request.argv = {"/usr/bin/python3", "-I", "-B", "-c", "pass"};
  for (auto _ : state) benchmark::DoNotOptimize(box.run(request));
  state.counters["runs/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_sandbox_python)->Iterations(100)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return grpo::bench::run_benchmarks(argc, argv); }
