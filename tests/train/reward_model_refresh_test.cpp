// SPDX-License-Identifier: Apache-2.0
// RewardModelRefresh on a tiny reward model of the tiny task: the pairs of each step, the accuracy on them before it learns them, the buffer's cap, a refresh equal to train_reward_model on the
// buffer the test rebuilds itself, and a copy restored from its checkpoint file going on alike.
#include <grpo/core/error.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/rewards/reward_model_reward.hpp>
#include <grpo/text/tokenizer.hpp>
#include <grpo/train/reward_model_refresh.hpp>
#include <grpo/train/tiny_task.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

using grpo::train::PreferencePair;

namespace {

std::map<std::string, double> by_name(const std::vector<grpo::train::MetricValue>& values) {
  std::map<std::string, double> out;
  for (const auto& v : values) out[v.name] = v.value;
  return out;
}

bool same_pairs(const std::vector<PreferencePair>& a, const std::vector<PreferencePair>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const PreferencePair& x, const PreferencePair& y) {
    return x.prompt == y.prompt && x.chosen == y.chosen && x.rejected == y.rejected;
  });
}

}  // namespace

TEST_CASE("RewardModelRefresh: pairs every step's completions, measures the reward model on them before it learns "
          "them, trains on its newest pairs every N steps, and a copy restored from its checkpoint goes on alike",
          "[train][reward_model]") {
  const auto tokenizer = grpo::text::Tokenizer::from_json(grpo::train::TinyTask::tokenizer_json(), "tiny");
  const grpo::train::TinyTask task(5, 32);
  const auto new_model = [](std::uint64_t seed) {
    torch::manual_seed(static_cast<std::int64_t>(seed));
    return grpo::models::value_model_from_policy(grpo::train::tiny_task_model(seed),
                                                 grpo::models::ScalarHeadLayout::sequence_classification);
  };
  const grpo::train::RewardModelRefreshOptions options{
      .every_steps = 2, .pairs_per_prompt = 2, .buffer_pairs = 7,
      .training = {.epochs = 2, .batch_size = 3, .learning_rate = 1e-2, .seed = 9}};
  const grpo::rewards::RewardModelOptions reading{.completion_suffix = " </answer>"};
  // Step s's batch: four held-out problems (by s), each with four answers of which the first counts as right, but
  // the last problem's are all wrong (it gives no pair). Answer d's total is d.
  const auto batch_of = [&](std::int64_t step) {
    grpo::train::StepBatch batch;
    batch.step = step;
    for (std::size_t g = 0; g < 4; ++g) {
      const auto& problem = task.held_out().at(static_cast<std::size_t>(step) * 4 + g);
      for (std::int64_t d = 0; d < 4; ++d) {
        grpo::rewards::Completion c;
        c.prompt = problem.prompt_text;
        c.text = "<think> </think> <answer> " + std::to_string(d);
        c.group = g;
        batch.completions.push_back(c);
        batch.correct.push_back(g < 3 && d == 0);
        batch.totals.push_back(static_cast<float>(d));
      }
    }
    return batch;
  };
  auto model = new_model(1);
  auto reward = std::make_shared<grpo::rewards::RewardModelReward>(model, tokenizer, reading);
  grpo::train::RewardModelRefresh refresh(reward, options);

  // What the refresh should hold and do, rebuilt here from graded_preference_pairs and train_reward_model.
  const auto expected_pairs = [&](const grpo::train::StepBatch& batch) {
    auto pairs = grpo::train::graded_preference_pairs(batch.completions, batch.correct, 2, 9 + batch.step);
    for (auto& p : pairs) {
      p.chosen += " </answer>";
      p.rejected += " </answer>";
    }
    return pairs;
  };
  auto shadow = new_model(1);  // the same weights, trained by the test
  std::vector<PreferencePair> all;

  const auto step1 = batch_of(1);
  const auto fresh1 = expected_pairs(step1);
  REQUIRE(fresh1.size() == 6);  // problems 0-2: min(2, 1 right × 3 wrong) pairs each
  const double before1 = grpo::train::evaluate_reward_model(shadow, tokenizer, fresh1, 3, reading.max_length).accuracy;
  const auto weights0 = grpo::testing::parameters_of(*model);
  const auto m1 = by_name(refresh.observe(step1));
  CHECK(m1.at("reward_model/policy_pairs") == 6);
  CHECK(m1.at("reward_model/policy_pair_accuracy") == Approx(before1));
  CHECK(m1.at("reward_model/buffer_pairs") == 6);
  // Totals 0, 1, 2, 3 with the 0 right: mean 1.5, spread 5, right 0 and wrong 2 apart from it by 1.5 and 0.5, so
  // 2.25 + 3 · 0.25 = 3 of 5 explained; the all-wrong group explains 0. (3 · 0.6 + 0) / 4 groups.
  CHECK(m1.at("reward_model/correct_share") == Approx(0.45));
  CHECK(m1.count("reward_model/refresh_loss") == 0);  // step 1: no refresh yet
  CHECK(grpo::testing::same_tensors(grpo::testing::parameters_of(*model), weights0));
  all.insert(all.end(), fresh1.begin(), fresh1.end());
  CHECK(same_pairs({refresh.buffer().begin(), refresh.buffer().end()}, all));

  // Step 2 refreshes: on the newest 7 of the 12 pairs, with the seed moved by the step.
  const auto step2 = batch_of(2);
  const auto fresh2 = expected_pairs(step2);
  const double before2 = grpo::train::evaluate_reward_model(shadow, tokenizer, fresh2, 3, reading.max_length).accuracy;
  all.insert(all.end(), fresh2.begin(), fresh2.end());
  const std::vector<PreferencePair> newest(all.end() - 7, all.end());
  auto training = options.training;
  training.seed = 9 + 2;
  training.max_length = reading.max_length;
  const auto epochs = grpo::train::train_reward_model(shadow, tokenizer, newest, training);
  const auto m2 = by_name(refresh.observe(step2));
  CHECK(m2.at("reward_model/policy_pair_accuracy") == Approx(before2));
  CHECK(m2.at("reward_model/buffer_pairs") == 7);
  CHECK(same_pairs({refresh.buffer().begin(), refresh.buffer().end()}, newest));
  CHECK(m2.at("reward_model/refresh_loss") == Approx(epochs.back().loss));
  CHECK(m2.at("reward_model/refresh_accuracy") == Approx(epochs.back().accuracy));
  CHECK(m2.count("timing_s/reward_model_refresh") == 1);
  CHECK_FALSE(grpo::testing::same_tensors(grpo::testing::parameters_of(*model), weights0));
  CHECK(grpo::testing::same_tensors(grpo::testing::parameters_of(*model), grpo::testing::parameters_of(*shadow)));
  // The reward scores with the trained weights.
  const auto scored = reward->score(step2.completions, {});
  const auto direct = grpo::rewards::RewardModelReward(shadow, tokenizer, reading).score(step2.completions, {});
  for (std::size_t i = 0; i < scored.size(); ++i) CHECK(*scored[i] == *direct[i]);

  // A checkpoint: another model restored from it holds the same weights and buffer, and the next steps go alike.
  const auto dir = std::filesystem::temp_directory_path() / "grpo_reward_model_refresh_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  refresh.save(dir);
  CHECK(std::filesystem::exists(dir / "reward_model_refresh.safetensors"));
  auto other_model = new_model(2);
  grpo::train::RewardModelRefresh restored(
      std::make_shared<grpo::rewards::RewardModelReward>(other_model, tokenizer, reading), options);
  restored.restore(dir);
  CHECK(grpo::testing::same_tensors(grpo::testing::parameters_of(*other_model), grpo::testing::parameters_of(*model)));
  CHECK(same_pairs({restored.buffer().begin(), restored.buffer().end()}, newest));
  for (const std::int64_t step : {3, 4}) {
    const auto a = by_name(refresh.observe(batch_of(step)));
    const auto b = by_name(restored.observe(batch_of(step)));
    for (const auto& [name, value] : a) {
      if (!name.starts_with("timing_s/")) CHECK(b.at(name) == value);
    }
  }
  CHECK(grpo::testing::same_tensors(grpo::testing::parameters_of(*other_model), grpo::testing::parameters_of(*model)));

  // Errors: a checkpoint without the file, a model it does not fit, bad options.
  const auto empty = dir / "empty";
  std::filesystem::create_directories(empty);
  CHECK_THROWS_WITH(restored.restore(empty), Catch::Contains("reward_model_refresh.safetensors") &&
                                                 Catch::Contains("--rm-refresh-every"));
  torch::manual_seed(3);
  auto wider = grpo::models::value_model_from_policy(
      grpo::models::CausalLM(grpo::testing::tiny_model_config({.vocab = grpo::train::TinyTask::kVocab, .hidden = 24})),
      grpo::models::ScalarHeadLayout::sequence_classification);
  grpo::train::RewardModelRefresh misfit(std::make_shared<grpo::rewards::RewardModelReward>(wider, tokenizer, reading),
                                         options);
  CHECK_THROWS_WITH(misfit.restore(dir), Catch::Contains("reward_model_refresh.safetensors"));
  CHECK_THROWS_AS(grpo::train::RewardModelRefresh(reward, {.every_steps = 0}), grpo::ConfigError);
  CHECK_THROWS_WITH(grpo::train::RewardModelRefresh(std::make_shared<grpo::rewards::RewardModelReward>(
                                                        model, tokenizer,
                                                        grpo::rewards::RewardModelOptions{.step_separator = "</think>"}),
                                                    options),
                    Catch::Contains("process reward model"));
  grpo::models::CausalLM half(grpo::testing::tiny_model_config({.vocab = grpo::train::TinyTask::kVocab}),
                              grpo::models::WeightInit::normal, torch::TensorOptions().dtype(torch::kBFloat16));
  // bf16 weights train through fp32 masters (train_reward_model): a refresh moves them and leaves them bf16.
  auto half_model = grpo::models::value_model_from_policy(half);
  const torch::Tensor half_head = half_model->head_weight().clone();
  grpo::train::RewardModelRefresh half_refresh(
      std::make_shared<grpo::rewards::RewardModelReward>(half_model, tokenizer, reading), options);
  half_refresh.observe(batch_of(1));
  const auto half_metrics = by_name(half_refresh.observe(batch_of(2)));  // step 2: the refresh trains
  CHECK(half_metrics.count("reward_model/refresh_loss") == 1);
  CHECK(half_model->head_weight().scalar_type() == torch::kBFloat16);
  CHECK_FALSE(torch::equal(half_model->head_weight(), half_head));
  CHECK_THROWS_WITH(grpo::train::RewardModelRefresh(reward, {.every_steps = 1, .buffer_pairs = 0}),
                    Catch::Contains("buffer_pairs"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("correct_variance_share: the part of each group's reward spread that right against wrong explains, by hand",
          "[train][reward_model]") {
  std::vector<grpo::rewards::Completion> completions;
  std::vector<std::optional<float>> totals;
  std::vector<std::optional<bool>> correct;
  const auto add = [&](std::size_t group, std::optional<float> total, std::optional<bool> right) {
    grpo::rewards::Completion c;
    c.group = group;
    completions.push_back(c);
    totals.push_back(total);
    correct.push_back(right);
  };
  add(0, 1.0f, true);  // the rule's case: all the spread is right against wrong
  add(0, 3.0f, false);
  for (const float x : {0.0f, 1.0f}) add(1, x, false);  // mean 2, spread 4 + 1 + 0 + 9 = 14; the classes' means
  for (const float x : {2.0f, 5.0f}) add(1, x, true);   // 0.5 and 3.5: 2 · 1.5² · 2 = 9 of it
  add(2, 1.0f, false);  // all wrong, yet spread: none explained
  add(2, 2.0f, false);
  add(3, 4.0f, true);  // equal totals: no advantage, not counted
  add(3, 4.0f, false);
  add(4, 7.0f, true);  // a row without a total and one without a judge's value drop out; one row is left
  add(4, std::nullopt, false);
  add(4, 1.0f, std::nullopt);
  const auto share = grpo::train::correct_variance_share(completions, totals, correct);
  CHECK(share.groups == 3);
  CHECK(share.share == Approx((1.0 + 9.0 / 14.0 + 0.0) / 3.0).epsilon(1e-12));
  const auto none = grpo::train::correct_variance_share({completions[6], completions[7]}, {4.0f, 4.0f}, {true, false});
  CHECK(none.groups == 0);
  CHECK(none.share == 0.0);
  CHECK_THROWS_WITH(grpo::train::correct_variance_share(completions, {1.0f}, correct),
                    Catch::Contains("13 completions, 1 totals"));
}
