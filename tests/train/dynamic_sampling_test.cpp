// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/dynamic_sampling.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/loss/recipes.hpp>
#include <support/model_testing.hpp>
#include <support/token_prompt_source.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
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
  // ROLL's filters: std above 0.4 (std of {1, 0, 0, 0} is 0.5, of {0, 1} 0.71, of the last ~5e-8), then a mean band
  // (0.3, 0.9) that the {1, 0, 0, 0} group (mean 0.25) misses.
  CHECK(informative_groups(rewards, {.min_std = 0.4}) == std::vector<std::uint8_t>{0, 0, 1, 0, 1, 0});
  CHECK(informative_groups(rewards, {.min_std = 0.4, .mean_above = 0.3, .mean_below = 0.9}) ==
        std::vector<std::uint8_t>{0, 0, 0, 0, 1, 0});
  CHECK(informative_groups(rewards, {.mean_below = 0.5}) == std::vector<std::uint8_t>{0, 0, 1, 0, 0, 0});
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

TEST_CASE("dynamic sampling per domain: each domain fills its share of the first round, whoever has spread",
          "[train][dynamic_sampling]") {
  // A round of 10 prompts: domain 0 (6 prompts) always has spread, domain 1 (3) once per round, domain 2 (1) never.
  const std::vector<std::size_t> domains = {0, 1, 0, 0, 1, 0, 0, 1, 0, 2};
  auto round = [&](std::int64_t) {
    std::vector<std::uint8_t> spread(domains.size());
    for (std::size_t i = 0; i < domains.size(); ++i) spread[i] = domains[i] == 0 || i == 4;
    return spread;
  };
  // P = 5: quotas 5·6/10 = 3, 5·3/10 = 1.5 → 1 or 2, 5·1/10 = 0.5 → largest remainders (ties to the lower index).
  GroupCollector shared({.target_groups = 5, .max_rounds = 6});
  GroupCollector per_domain({.target_groups = 5, .max_rounds = 6, .per_domain = true});
  const auto first = round(0);
  const auto kept_shared = shared.add_round(first, domains);
  CHECK(shared.done());  // the first five informative groups, all but one from domain 0
  CHECK(shared.kept_by_domain() == std::vector<std::int64_t>{4, 1, 0});
  CHECK(std::count(kept_shared.begin(), kept_shared.end(), 1) == 5);

  per_domain.add_round(first, domains);
  CHECK(per_domain.quota(0) == 3);
  CHECK(per_domain.quota(1) == 2);  // remainders 0.5 and 0.5: the lower index wins
  CHECK(per_domain.quota(2) == 0);
  CHECK(per_domain.kept_by_domain() == std::vector<std::int64_t>{3, 1, 0});
  CHECK(!per_domain.done());
  // The second round fills domain 1's quota and no more; domain 0 takes nothing further.
  const auto second = per_domain.add_round(round(1), domains);
  CHECK(per_domain.kept_by_domain() == std::vector<std::int64_t>{3, 2, 0});
  CHECK(per_domain.done());
  CHECK(per_domain.train());
  for (std::size_t i = 0; i < domains.size(); ++i) {
    if (domains[i] != 1) CHECK(second[i] == 0);
  }
  CHECK(per_domain.generated_by_domain() == std::vector<std::int64_t>{12, 6, 2});
  CHECK_THROWS_AS(per_domain.add_round(round(2), domains), grpo::Error);
  GroupCollector mismatched({.target_groups = 5, .per_domain = true});
  CHECK_THROWS_AS(mismatched.add_round(first, std::vector<std::size_t>{0, 1}), grpo::Error);
}

// ---------------------------------------------------------------------------------------------------------------
// Through GrpoTrainer: the filter metric, and per-domain quotas on a two-domain source.

namespace {

/// Prompts [t] from two domains, alternating "easy" (t in 1..3) and "hard" (t in 4..6), or one domain.
struct TwoDomainTask final : grpo::testing::TokenPromptSource {
  bool two = true;
  std::int64_t drawn = 0;
  std::vector<Problem> train_batch(std::int64_t, std::int64_t count) override {
    std::vector<Problem> out;
    for (std::int64_t i = 0; i < count; ++i, ++drawn) {
      const std::size_t domain = two ? static_cast<std::size_t>(drawn % 2) : 0;
      const std::int64_t t = 1 + 3 * static_cast<std::int64_t>(domain) + drawn % 3;
      out.push_back({.prompt_ids = {t}, .prompt_text = std::to_string(t),
                     .row = std::make_shared<const grpo::rewards::Row>(
                         grpo::rewards::Row{{"t", std::to_string(t)}, {"tag", domain ? "hard" : "easy"}}),
                     .domain = domain});
    }
    return out;
  }
  std::vector<std::string> domain_names() const override {
    return two ? std::vector<std::string>{"easy", "hard"} : std::vector<std::string>{"data"};
  }
};

GrpoTrainerOptions filter_options() {
  GrpoTrainerOptions o{.steps = 3, .prompts_per_step = 4, .group_size = 4, .seed = 3};
  o.sampling.max_new_tokens = 2;
  o.loss = grpo::recipes::grpo();
  o.dynamic_sampling_max_rounds = 12;
  o.learning_rate = 0.0;  // the policy stays put: every step samples from the same distribution
  return o;
}

}  // namespace

TEST_CASE("GrpoTrainer dynamic sampling: the filter metric, and per-domain quotas that keep the mix",
          "[train][dynamic_sampling][trainer]") {
  torch::manual_seed(5);
  const grpo::models::CausalLM model(grpo::testing::tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32}));
  ProcessGroup group{ProcessGroupOptions{}};
  // "accuracy" never varies within a group (0 for all), "noise" does: the total spreads, the correctness never.
  {
    auto accuracy = grpo::rewards::make_reward("accuracy", [](const grpo::rewards::Completion&) { return 0.0; });
    auto noise = grpo::rewards::make_reward("noise", [](const grpo::rewards::Completion& c) {
      return c.text.empty() ? 0.0 : static_cast<double>(c.text[0] % 2);
    });
    StepScorer scorer(grpo::rewards::RewardSet({{accuracy, 1.0}, {noise, 0.5}}));
    std::map<std::string, double> kept;
    for (const std::string metric : {"total", "accuracy", "noise"}) {
      TwoDomainTask task;
      task.two = false;
      auto options = filter_options();
      options.dynamic_sampling_max_rounds = 2;
      options.dynamic_sampling_metric = metric;
      GrpoTrainer trainer(grpo::models::deep_copy(model), task, scorer, group, options);
      kept[metric] = trainer.step(1).by_name.at("dynamic_sampling/kept_groups");
    }
    CHECK(kept.at("total") == 4.0);
    CHECK(kept.at("noise") == 4.0);
    CHECK(kept.at("accuracy") == 0.0);  // DAPO's acc: no group has right and wrong answers
    TwoDomainTask task;
    auto options = filter_options();
    options.dynamic_sampling_metric = "novelty";
    GrpoTrainer trainer(grpo::models::deep_copy(model), task, scorer, group, options);
    CHECK_THROWS_WITH(trainer.step(1), Catch::Contains("dynamic_sampling_metric: 'novelty'") &&
                                           Catch::Contains("labels: accuracy, noise"));
  }
  // Two domains: "easy" rows spread often (the first token's parity), "hard" rows seldom (the first token must be
  // the prompt's). Shared filtering lets easy groups fill the batch; per domain each keeps its 2 of 4.
  auto reward = grpo::rewards::make_reward("accuracy", [](const grpo::rewards::Completion& c) {
    if (c.text.empty()) return 0.0;
    if (c.row->text("tag") == "easy") return static_cast<double>(c.text[0] % 2);
    return c.text.substr(0, 1) == c.row->text("t") ? 1.0 : 0.0;
  });
  StepScorer scorer(grpo::rewards::RewardSet({{reward, 1.0}}));
  for (const bool per_domain : {false, true}) {
    TwoDomainTask task;
    auto options = filter_options();
    options.dynamic_sampling_per_domain = per_domain;
    GrpoTrainer trainer(grpo::models::deep_copy(model), task, scorer, group, options);
    double easy = 0.0, hard = 0.0;
    for (std::int64_t step = 1; step <= 3; ++step) {
      const auto report = trainer.step(step);
      const auto& m = report.by_name;
      INFO("per_domain " << per_domain << " step " << step);
      const double rounds = m.at("dynamic_sampling/rounds");
      // Every generated group is kept or dropped, in its domain (each round draws 2 + 2).
      CHECK(m.at("dynamic_sampling/easy/kept_groups") + m.at("dynamic_sampling/easy/dropped_groups") == 2 * rounds);
      CHECK(m.at("dynamic_sampling/hard/kept_groups") + m.at("dynamic_sampling/hard/dropped_groups") == 2 * rounds);
      easy += m.at("dynamic_sampling/easy/kept_groups");
      hard += m.at("dynamic_sampling/hard/kept_groups");
      if (per_domain) {
        CHECK(m.at("dynamic_sampling/easy/kept_groups") <= 2.0);
        CHECK(m.at("dynamic_sampling/hard/kept_groups") <= 2.0);
      }
    }
    if (per_domain) {
      CHECK(easy == 6.0);
      CHECK(hard == 6.0);
    } else {
      CHECK(easy > hard);  // the filter alone skews the mix towards the domain that spreads
    }
  }
}

TEST_CASE("GrpoTrainer dynamic sampling: each domain's own group filter (ROLL's per-domain query_filter_config)",
          "[train][dynamic_sampling][trainer]") {
  torch::manual_seed(7);
  const grpo::models::CausalLM model(grpo::testing::tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32}));
  ProcessGroup group{ProcessGroupOptions{}};
  // Every reward is 0: no group spreads, so the run's filter (std > 1e-8) drops all of them.
  auto reward = grpo::rewards::make_reward("accuracy", [](const grpo::rewards::Completion&) { return 0.0; });
  StepScorer scorer(grpo::rewards::RewardSet({{reward, 1.0}}));
  const auto kept = [&](std::map<std::string, GroupFilter> filters) {
    TwoDomainTask task;
    auto options = filter_options();
    options.dynamic_sampling_max_rounds = 1;  // one round: a group is kept exactly when it passes its filter
    options.dynamic_sampling_domain_filters = std::move(filters);
    GrpoTrainer trainer(grpo::models::deep_copy(model), task, scorer, group, options);
    const auto report = trainer.step(1);
    return std::pair{report.by_name.at("dynamic_sampling/easy/kept_groups"),
                     report.by_name.at("dynamic_sampling/hard/kept_groups")};
  };
  CHECK(kept({}) == std::pair{0.0, 0.0});
  // hard keeps every group (ROLL's no_filter: std > -1); easy keeps the ones whose mean is inside (-0.5, 0.5).
  CHECK(kept({{"hard", {.min_std = -1.0}}}) == std::pair{0.0, 2.0});
  CHECK(kept({{"hard", {.min_std = -1.0}}, {"easy", {.min_std = -1.0, .mean_above = -0.5, .mean_below = 0.5}}}) ==
        std::pair{2.0, 2.0});
  // ROLL's mean_filter drops mean <= threshold_down: a band that excludes 0 keeps nothing.
  CHECK(kept({{"hard", {.min_std = -1.0, .mean_above = 0.0}}}) == std::pair{0.0, 0.0});
  TwoDomainTask task;
  auto options = filter_options();
  options.dynamic_sampling_domain_filters = {{"medium", {}}};
  CHECK_THROWS_WITH(GrpoTrainer(grpo::models::deep_copy(model), task, scorer, group, options),
                    Catch::Contains("domains.medium.dynamic_sampling_filter: the prompts have no domain 'medium' "
                                    "(domains: easy, hard)"));
  options.dynamic_sampling_domain_filters = {{"easy", {.min_std = std::nan("")}}};
  CHECK_THROWS_WITH(GrpoTrainer(grpo::models::deep_copy(model), task, scorer, group, options),
                    Catch::Contains("domains.easy.dynamic_sampling_filter: min_std must be a finite number, got nan"));
}

TEST_CASE("GrpoTrainer difficulty mask: groups whose mean total is outside (low, high) leave the loss",
          "[train][dynamic_sampling][trainer]") {
  torch::manual_seed(6);
  const grpo::models::CausalLM model(grpo::testing::tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32}));
  ProcessGroup group{ProcessGroupOptions{}};
  auto reward = grpo::rewards::make_reward("accuracy", [](const grpo::rewards::Completion& c) {
    return c.text.empty() ? 0.0 : static_cast<double>(c.text[0] % 2);
  });
  StepScorer scorer(grpo::rewards::RewardSet({{reward, 1.0}}));
  TwoDomainTask task;
  task.two = false;
  auto options = filter_options();
  options.dynamic_sampling_max_rounds = 0;
  options.prompts_per_step = 8;
  options.difficulty_mask = std::pair(0.3, 0.7);  // with G = 4: means 0.5 train; 0, 0.25, 0.75 and 1 do not
  GrpoTrainer trainer(grpo::models::deep_copy(model), task, scorer, group, options);
  trainer.begin_step(1);
  const auto batch = trainer.collect_groups(1);
  const auto adv = trainer.advantages(batch);
  const auto update = trainer.policy_update(batch, adv);
  const auto report = trainer.finish_step(batch, adv, update, 1.0);
  // By hand: each group's mean total, and the completion tokens of the groups inside the band.
  double masked = 0.0, tokens = 0.0;
  const auto lengths = batch.rollout.completion_mask.sum(1);
  for (std::int64_t p = 0; p < 8; ++p) {
    double mean = 0.0;
    for (std::int64_t g = 0; g < 4; ++g) mean += *batch.totals[static_cast<std::size_t>(4 * p + g)] / 4.0;
    if (mean > 0.3 && mean < 0.7) {
      for (std::int64_t g = 0; g < 4; ++g) tokens += lengths[4 * p + g].item<double>();
    } else {
      masked += 1.0;
    }
  }
  CHECK(masked > 0.0);
  CHECK(masked < 8.0);
  CHECK(report.by_name.at("difficulty_mask/masked_groups") == masked);
  CHECK(report.by_name.at("num_tokens") == tokens);
  CHECK(std::isfinite(report.by_name.at("loss")));
}
