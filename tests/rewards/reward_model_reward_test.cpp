// SPDX-License-Identifier: Apache-2.0
// RewardModelReward on a tiny random ValueModel with GPT-2's real tokenizer: an outcome RM's batched scores equal the
// model's own sequence score of each text alone; a process RM reads each step at its separator's last token (positions
// counted here from the tokenizer) and aggregates them by min, last and mean; shift, scale and σ by hand; the window
// of max_length; concurrent calls; bad options; the registry's "reward_model" entry on a checkpoint directory.
#include <grpo/core/error.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/rewards/registry.hpp>
#include <grpo/rewards/reward_model_reward.hpp>
#include <grpo/text/tokenizer.hpp>
#include <grpo/train/tiny_task.hpp>
#include <support/model_testing.hpp>
#include <support/skip.hpp>
#include <text/reference_fixture.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <vector>

using grpo::rewards::Completion;
using grpo::rewards::RewardModelOptions;
using grpo::rewards::RewardModelReward;
using grpo::rewards::StepAggregation;

namespace {

std::vector<std::int64_t> ids_of(const grpo::text::Tokenizer& tokenizer, const std::string& text) {
  const auto ids = tokenizer.encode(text, {.add_special_tokens = false});
  return {ids.begin(), ids.end()};
}

/// The model's value at every position of `ids` alone (one row, no padding).
std::vector<double> values_alone(grpo::models::ValueModel& model, const std::vector<std::int64_t>& ids) {
  torch::NoGradGuard no_grad;
  const auto v = model->forward(torch::tensor(ids, torch::kInt64).unsqueeze(0)).squeeze(0).to(torch::kFloat64);
  return {v.data_ptr<double>(), v.data_ptr<double>() + v.numel()};
}

Completion completion(std::string prompt, std::string text) {
  Completion c;
  c.prompt = std::move(prompt);
  c.text = std::move(text);
  return c;
}

}  // namespace

TEST_CASE("RewardModelReward: an outcome RM's batched scores are each text's score alone, and a process RM reads every "
          "step at its separator and aggregates",
          "[rewards][reward_model][needs-tokenizer]") {
  const auto dir = grpo::text::testing::find_tokenizer_dir("gpt2");
  if (!dir) GRPO_SKIP(grpo::text::testing::missing_tokenizer("gpt2"));
  const auto tokenizer = grpo::text::Tokenizer::from_file(*dir / "tokenizer.json");
  torch::manual_seed(12);
  grpo::models::CausalLM backbone(grpo::testing::tiny_model_config({.vocab = tokenizer.vocab_size()}));
  auto model = grpo::models::value_model_from_policy(backbone);
  {
    torch::NoGradGuard no_grad;
    model->head_weight().normal_(0.0, 1.0);  // scores of order 1
  }
  const std::string prompt = "Question: what is 2 + 3?\nAnswer:";
  const std::vector<Completion> batch{completion(prompt, " 5"), completion(prompt, " It is five, since 2 + 3 = 5."),
                                      completion(prompt, ""), completion("", " no prompt at all"),
                                      completion(prompt, " 6")};

  SECTION("outcome") {
    RewardModelReward reward(model, tokenizer, {.batch_size = 2});
    const auto scores = reward.score(batch, {});
    REQUIRE(scores.size() == batch.size());
    for (std::size_t b = 0; b < batch.size(); ++b) {
      const auto ids = ids_of(tokenizer, batch[b].prompt + batch[b].text);
      const auto encoded = reward.encode(batch[b]);
      CHECK(encoded.ids == ids);
      CHECK(encoded.score_positions == std::vector<std::int64_t>{static_cast<std::int64_t>(ids.size()) - 1});
      REQUIRE(scores[b]);
      CHECK(*scores[b] == Approx(values_alone(model, ids).back()).epsilon(1e-4).margin(1e-5));
    }
    CHECK(scores[0] != scores[4]);
    // completion_suffix: read where a model trained on chat-rendered pairs was (here GPT-2's <|endoftext|>, one id).
    RewardModelReward suffixed(model, tokenizer, {.completion_suffix = "<|endoftext|>"});
    const auto with_suffix = suffixed.encode(batch[0]);
    CHECK(with_suffix.ids == ids_of(tokenizer, batch[0].prompt + batch[0].text + "<|endoftext|>"));
    CHECK(with_suffix.ids.back() == 50256);
    CHECK(*suffixed.score(std::span<const Completion>(batch).first(1), {})[0] ==
          Approx(values_alone(model, with_suffix.ids).back()).epsilon(1e-4).margin(1e-5));
    // shift, scale and σ.
    RewardModelReward shaped(model, tokenizer, {.shift = 0.5, .scale = 2.0, .sigmoid = true});
    const auto shaped_scores = shaped.score(batch, {});
    for (std::size_t b = 0; b < batch.size(); ++b) {
      CHECK(*shaped_scores[b] == Approx(1.0 / (1.0 + std::exp(-(*scores[b] - 0.5) / 2.0))).epsilon(1e-4));
    }
    // Called from two threads at once: the same values.
    auto other = std::async(std::launch::async, [&] { return reward.score(batch, {}); });
    const auto here = reward.score(batch, {});
    const bool same = other.get() == here;
    CHECK(same);
  }

  SECTION("process") {
    const std::string text = " first add 2 and 3\n\nthat makes 5\n\n\n\nso the answer is 5";
    const std::vector<std::string> steps{" first add 2 and 3", "that makes 5", "so the answer is 5"};
    std::vector<std::int64_t> ids = ids_of(tokenizer, prompt), positions;
    for (const auto& step : steps) {
      const auto piece = ids_of(tokenizer, step + "\n\n");
      ids.insert(ids.end(), piece.begin(), piece.end());
      positions.push_back(static_cast<std::int64_t>(ids.size()) - 1);
    }
    const auto values = values_alone(model, ids);
    std::vector<double> step_scores;
    for (const auto p : positions) step_scores.push_back(values[static_cast<std::size_t>(p)]);
    const std::vector<Completion> one{completion(prompt, text), completion(prompt, "")};
    for (const auto [aggregation, expected] :
         std::vector<std::pair<StepAggregation, double>>{
             {StepAggregation::min, *std::min_element(step_scores.begin(), step_scores.end())},
             {StepAggregation::last, step_scores.back()},
             {StepAggregation::mean, (step_scores[0] + step_scores[1] + step_scores[2]) / 3}}) {
      RewardModelReward reward(model, tokenizer, {.step_separator = "\n\n", .step_aggregation = aggregation});
      const auto encoded = reward.encode(one[0]);
      CHECK(encoded.ids == ids);
      CHECK(encoded.score_positions == positions);
      const auto scores = reward.score(one, {});
      REQUIRE(scores[0]);
      CHECK(*scores[0] == Approx(expected).epsilon(1e-4).margin(1e-5));
      CHECK_FALSE(scores[1]);  // no step: no value
    }
    // A window of the last 6 tokens keeps only the steps whose separator is in it.
    RewardModelReward windowed(model, tokenizer, {.max_length = 6, .step_separator = "\n\n"});
    const auto encoded = windowed.encode(one[0]);
    CHECK(encoded.ids == std::vector<std::int64_t>(ids.end() - 6, ids.end()));
    const auto excess = static_cast<std::int64_t>(ids.size()) - 6;
    std::vector<std::int64_t> kept;
    for (const auto p : positions) {
      if (p >= excess) kept.push_back(p - excess);
    }
    CHECK(encoded.score_positions == kept);
    CHECK(kept.back() == 5);
  }
}

TEST_CASE("RewardModelOptions: bad values are errors that name the option", "[rewards][reward_model]") {
  CHECK_THROWS_WITH(RewardModelOptions{.batch_size = 0}.validate(), Catch::Contains("batch_size"));
  CHECK_THROWS_WITH(RewardModelOptions{.max_length = 0}.validate(), Catch::Contains("max_length"));
  CHECK_THROWS_WITH(RewardModelOptions{.scale = 0.0}.validate(), Catch::Contains("scale"));
  CHECK_THROWS_WITH(RewardModelOptions{.name = ""}.validate(), Catch::Contains("name"));
  CHECK(grpo::rewards::parse_step_aggregation("last") == StepAggregation::last);
}

TEST_CASE("The registry's reward_model loads a checkpoint directory and its tokenizer: the scores of the reward built "
          "from code, and bad entries are errors that name the option or the directory",
          "[rewards][reward_model]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("grpo_reward_model_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // A reward model of the tiny task: its tokenizer needs no fixture.
  const auto tokenizer = grpo::text::Tokenizer::from_json(grpo::train::TinyTask::tokenizer_json(), "tiny");
  auto model = grpo::models::value_model_from_policy(grpo::train::tiny_task_model(8),
                                                     grpo::models::ScalarHeadLayout::sequence_classification);
  {
    torch::NoGradGuard no_grad;
    model->head_weight().normal_(0.0, 1.0);
  }
  grpo::models::save_pretrained(model, dir / "rm");
  std::ofstream(dir / "rm" / "tokenizer.json") << grpo::train::TinyTask::tokenizer_json();
  const std::vector<Completion> batch{completion("max 1 7 3 0 2 =", "<think> </think> <answer> 7 </answer>"),
                                      completion("max 1 7 3 0 2 =", "<think> </think> <answer> 3 </answer>"),
                                      completion("max 4 4 9 1 2 =", "<think> </think> <answer> </answer>")};
  const auto registry = grpo::rewards::RewardRegistry::with_builtins();
  const auto rm = (dir / "rm").string();
  const auto built = registry.create(R"({"name": "reward_model", "model_dir": ")" + rm +
                                     R"(", "batch_size": 2, "shift": 0.5, "sigmoid": true})");
  CHECK(built->name() == "reward_model");
  const RewardModelReward direct(model, tokenizer, {.batch_size = 2, .shift = 0.5, .sigmoid = true});
  const auto from_registry = built->score(batch, {}), from_code = direct.score(batch, {});
  REQUIRE(from_registry.size() == 3);
  for (std::size_t b = 0; b < batch.size(); ++b) {
    REQUIRE(from_registry[b]);
    CHECK(*from_registry[b] == Approx(*from_code[b]).epsilon(1e-6));
  }
  CHECK(from_registry[0] != from_registry[1]);
  // Process RM options and bf16 go through too.
  const auto process = registry.create(R"({"name": "reward_model", "model_dir": ")" + rm +
                                       R"(", "step_separator": "</think>", "step_aggregation": "last", "dtype": "bfloat16"})");
  CHECK(process->score(batch, {})[0].has_value());

  const auto error_of = [&](const std::string& json) {
    try {
      registry.create(json);
    } catch (const grpo::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of(R"({"name": "reward_model"})"), Catch::Contains("model_dir") && Catch::Contains("required"));
  const std::string with_dir = R"({"name": "reward_model", "model_dir": ")" + rm + R"(", )";
  CHECK_THAT(error_of(with_dir + R"("dtype": "int8"})"), Catch::Contains("dtype") && Catch::Contains("float32"));
  CHECK_THAT(error_of(with_dir + R"("device": "gpu0"})"), Catch::Contains("device") && Catch::Contains("gpu0"));
  CHECK_THAT(error_of(with_dir + R"("batch_size": 0})"), Catch::Contains("batch_size"));
  CHECK_THAT(error_of(with_dir + R"("step_aggregation": "max"})"), Catch::Contains("step_aggregation"));
  CHECK_THAT(error_of(with_dir + R"("max_lenght": 8})"), Catch::Contains("max_lenght"));
  // A causal LM's checkpoint (no head), a directory without a tokenizer, no directory at all.
  grpo::models::save_pretrained(grpo::train::tiny_task_model(8), dir / "lm");
  std::ofstream(dir / "lm" / "tokenizer.json") << grpo::train::TinyTask::tokenizer_json();
  CHECK_THAT(error_of(R"({"name": "reward_model", "model_dir": ")" + (dir / "lm").string() + R"("})"),
             Catch::Contains("model_dir " + (dir / "lm").string()) && Catch::Contains("no scalar head"));
  fs::remove(dir / "rm" / "tokenizer.json");
  CHECK_THAT(error_of(R"({"name": "reward_model", "model_dir": ")" + rm + R"("})"),
             Catch::Contains("model_dir " + rm) && Catch::Contains("tokenizer.json"));
  CHECK_THAT(error_of(R"({"name": "reward_model", "model_dir": ")" + (dir / "none").string() + R"("})"),
             Catch::Contains("model_dir") && Catch::Contains("config.json"));
  fs::remove_all(dir);
}
