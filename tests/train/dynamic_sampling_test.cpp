// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/dynamic_sampling.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <random>

using namespace grpo::train;

namespace {

/// A stub policy with known pass rates: prompt i of the data set is answered correctly with probability rate[i];
/// the reward of completion g of prompt i in round r of step s is a pure function of (s, r, i, g), so which rank
/// samples it does not matter.
struct StubPolicy {
  std::vector<double> rate;
  float reward(std::int64_t step, std::int64_t round, std::int64_t prompt, std::int64_t g) const {
    std::mt19937_64 rng(static_cast<std::uint64_t>(((step * 97 + round) * 1009 + prompt) * 31 + g));
    return std::uniform_real_distribution<double>(0, 1)(rng) < rate[static_cast<std::size_t>(prompt) % rate.size()]
               ? 1.0f
               : 0.0f;
  }
  /// The rewards [count, G] of prompts [first, first + count) of a round.
  torch::Tensor rewards(std::int64_t step, std::int64_t round, std::int64_t first, std::int64_t count, std::int64_t G) const {
    torch::Tensor out = torch::empty({count, G}, torch::kFloat32);
    for (std::int64_t i = 0; i < count; ++i)
      for (std::int64_t g = 0; g < G; ++g) out[i][g] = reward(step, round, first + i, g);
    return out;
  }
};

/// One step of dynamic sampling on `world` emulated ranks: each rank computes its shard's flags, the flags are summed
/// (the all-reduce), and every rank's collector decides. Returns the kept (round, prompt) pairs of every rank.
std::vector<std::pair<std::int64_t, std::int64_t>> run_step(const StubPolicy& policy, std::int64_t step, int world,
                                                             DynamicSamplingOptions options, std::int64_t prompts,
                                                             std::int64_t G, bool* trained = nullptr) {
  std::vector<GroupCollector> collectors(static_cast<std::size_t>(world), GroupCollector(options));
  std::vector<std::pair<std::int64_t, std::int64_t>> kept;
  std::int64_t round = 0;
  while (!collectors[0].done()) {
    std::vector<std::uint8_t> global(static_cast<std::size_t>(prompts), 0);
    for (int rank = 0; rank < world; ++rank) {
      const std::int64_t begin = prompts * rank / world, end = prompts * (rank + 1) / world;
      const auto flags = informative_groups(policy.rewards(step, round, round * prompts + begin, end - begin, G));
      for (std::int64_t i = begin; i < end; ++i) global[static_cast<std::size_t>(i)] += flags[static_cast<std::size_t>(i - begin)];
    }
    for (int rank = 0; rank < world; ++rank) {
      const auto keep = collectors[static_cast<std::size_t>(rank)].add_round(global);
      if (rank == 0) {
        for (std::int64_t i = 0; i < prompts; ++i)
          if (keep[static_cast<std::size_t>(i)]) kept.emplace_back(round, i);
      }
    }
    ++round;
  }
  if (trained) *trained = collectors[0].train();
  for (const auto& c : collectors) CHECK(c.metrics() == collectors[0].metrics());  // ranks agree
  return kept;
}

}  // namespace

TEST_CASE("informative_groups: spread means two values and std above 1e-8", "[train][dynamic_sampling]") {
  const float nan = std::nanf("");
  const torch::Tensor rewards = torch::tensor({{1.0f, 1.0f, 1.0f, 1.0f},       // all right
                                               {0.0f, 0.0f, 0.0f, 0.0f},       // all wrong
                                               {1.0f, 0.0f, 0.0f, 0.0f},       // spread
                                               {nan, nan, 1.0f, nan},          // one value
                                               {nan, 0.0f, 1.0f, nan},         // two values with spread
                                               {0.5f, 0.5f, 0.5f, 0.5000001f}}  // spread above 1e-8
                                              );
  CHECK(informative_groups(rewards) == std::vector<std::uint8_t>{0, 0, 1, 0, 1, 1});
  CHECK(informative_groups(torch::zeros({0, 4})).empty());
  CHECK_THROWS_AS(informative_groups(torch::zeros({4})), grpo::Error);
}

TEST_CASE("dynamic sampling on a stub policy: kept groups all have spread, target and cap behave as documented",
          "[train][dynamic_sampling]") {
  // Half the prompts are always wrong or always right (no spread ever), the rest are 50/50.
  const StubPolicy policy{{0.0, 0.5, 1.0, 0.5}};
  const std::int64_t P = 8, G = 4;
  bool trained = false;
  const auto kept = run_step(policy, 1, 1, {.target_groups = P, .max_rounds = 8}, P, G, &trained);
  CHECK(trained);
  REQUIRE(kept.size() == static_cast<std::size_t>(P));
  for (const auto& [round, prompt] : kept) {
    const auto rewards = policy.rewards(1, round, round * P + prompt, 1, G);
    CHECK(informative_groups(rewards)[0] == 1);
    CHECK((round * P + prompt) % 2 == 1);  // only the 50/50 prompts can have spread
  }

  // A cap too low for the target: with `train` the step trains on what it found, with `skip` it does not.
  GroupCollector capped({.target_groups = 6, .max_rounds = 2, .at_cap = DynamicSamplingCap::train});
  CHECK(capped.add_round(std::vector<std::uint8_t>{1, 0, 0, 1}) == std::vector<std::uint8_t>{1, 0, 0, 1});
  CHECK_FALSE(capped.done());
  CHECK(capped.add_round(std::vector<std::uint8_t>{0, 1, 0, 0}) == std::vector<std::uint8_t>{0, 1, 0, 0});
  CHECK(capped.done());
  CHECK(capped.train());
  CHECK(capped.kept() == 3);
  CHECK_THROWS_WITH(capped.add_round(std::vector<std::uint8_t>{1}), Catch::Contains("the step is done"));
  const auto metrics = capped.metrics();
  CHECK(metrics == std::vector<std::pair<std::string, double>>{{"dynamic_sampling/rounds", 2},
                                                               {"dynamic_sampling/kept_groups", 3},
                                                               {"dynamic_sampling/dropped_groups", 5},
                                                               {"dynamic_sampling/frac_zero_std_before", 5.0 / 8.0},
                                                               {"dynamic_sampling/skipped", 0}});
  GroupCollector strict({.target_groups = 6, .max_rounds = 2, .at_cap = DynamicSamplingCap::skip});
  strict.add_round(std::vector<std::uint8_t>{1, 0, 0, 1});
  strict.add_round(std::vector<std::uint8_t>{0, 1, 0, 0});
  CHECK(strict.done());
  CHECK_FALSE(strict.train());
  CHECK(strict.metrics().back().second == 1.0);
  // Nothing informative at all: no step, whatever at_cap says.
  GroupCollector none({.target_groups = 2, .max_rounds = 1});
  none.add_round(std::vector<std::uint8_t>{0, 0});
  CHECK_FALSE(none.train());
  // The target reached mid-round: later informative groups are dropped, in generation order.
  GroupCollector early({.target_groups = 2, .max_rounds = 3});
  CHECK(early.add_round(std::vector<std::uint8_t>{1, 1, 1, 0}) == std::vector<std::uint8_t>{1, 1, 0, 0});
  CHECK(early.done());
  CHECK(early.rounds() == 1);
  CHECK_THROWS_AS(GroupCollector({.target_groups = 0}), grpo::ConfigError);
  CHECK_THROWS_AS(GroupCollector({.max_rounds = 0}), grpo::ConfigError);
  CHECK(parse_dynamic_sampling_cap("skip") == DynamicSamplingCap::skip);
  CHECK_THROWS_WITH(parse_dynamic_sampling_cap("error"), Catch::Contains("unknown dynamic sampling cap behaviour"));
}

TEST_CASE("dynamic sampling: one rank keeps exactly the groups two or three ranks keep together",
          "[train][dynamic_sampling]") {
  const StubPolicy policy{{0.0, 0.3, 0.9, 1.0, 0.6}};
  for (std::int64_t step = 1; step <= 20; ++step) {
    INFO("step " << step);
    const DynamicSamplingOptions options{.target_groups = 7, .max_rounds = 3};
    const auto one = run_step(policy, step, 1, options, 7, 4);
    CHECK(run_step(policy, step, 2, options, 7, 4) == one);
    CHECK(run_step(policy, step, 3, options, 7, 4) == one);
  }
}
