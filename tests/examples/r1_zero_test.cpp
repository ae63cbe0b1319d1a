// SPDX-License-Identifier: Apache-2.0
// examples/r1_zero run as a user runs it: the tiny task learns (and the same seed gives the same curve), mode 2 runs
// on a tiny random Qwen2 checkpoint with the real Qwen tokenizer on every data-set format, and a resumed run equals
// an uninterrupted one.
#include <grpo/core/json_quote.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/rewards/registry.hpp>
#include <support/fake_judge_server.hpp>
#include <examples/example_testing.hpp>
#include <support/model_testing.hpp>
#include <support/process_testing.hpp>
#include <support/test_paths.hpp>
#include <text/reference_fixture.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <simdjson.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

namespace fs = std::filesystem;

namespace {

fs::path scratch_root() { return grpo::testing::scratch_root("grpo_r1_zero_test"); }

/// An empty directory under scratch_root().
fs::path scratch(const std::string& name) {
  const auto dir = scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

grpo::testing::CommandResult r1_zero(const std::string& args, const fs::path& output_dir) {
  return grpo::testing::run_command(std::string(grpo::testing::r1_zero_path()) + " --output-dir " +
                                    output_dir.string() + " " + args + " 2>&1");
}

/// r1_zero on `processes` processes (scripts/launch.sh -n: c10d over Gloo).
grpo::testing::CommandResult r1_zero_launched(int processes, const std::string& args, const fs::path& output_dir) {
  return grpo::testing::run_command(fmt::format("{}/scripts/launch.sh -n {} {} --output-dir {} {} 2>&1",
                                                grpo::testing::source_dir(), processes, grpo::testing::r1_zero_path(),
                                                output_dir.string(), args));
}

/// r1_zero on two processes.
grpo::testing::CommandResult r1_zero_two_ranks(const std::string& args, const fs::path& output_dir) {
  return r1_zero_launched(2, args, output_dir);
}

/// r1_zero with `args` on one process and on two (with `two_rank_args` added), into scratch(name + "_one") and
/// scratch(name + "_two"); both must succeed. Returns the two output directories.
std::pair<fs::path, fs::path> run_one_and_two_ranks(const std::string& args, const std::string& name,
                                                    const std::string& two_rank_args = "") {
  const auto one_dir = scratch(name + "_one"), two_dir = scratch(name + "_two");
  const auto one = r1_zero(args, one_dir);
  INFO(one.out);
  REQUIRE(one.status == 0);
  const auto two = r1_zero_two_ranks(args + two_rank_args, two_dir);
  INFO(two.out);
  REQUIRE(two.status == 0);
  return {one_dir, two_dir};
}

using StepMetrics = std::map<std::string, double>;

/// metrics.jsonl as step → {name: value}; several lines of one step (training, evaluation) are merged.
std::map<std::int64_t, StepMetrics> read_metrics(const fs::path& output_dir) {
  std::map<std::int64_t, StepMetrics> out;
  simdjson::dom::parser parser;
  std::ifstream in(output_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    simdjson::dom::object object = parser.parse(line);
    const auto step = int64_t(object["step"]);
    for (auto [key, value] : object) {
      if (value.is_number()) out[step][std::string(key)] = double(value);
    }
  }
  return out;
}

/// The training metrics that depend only on the run's numbers, not on the wall clock (evaluations are left out: runs
/// of different lengths evaluate at different steps).
StepMetrics deterministic(StepMetrics metrics) {
  std::erase_if(metrics, [](const auto& entry) {
    const std::string& name = entry.first;
    return name == "wall_time" || name == "step_time" || name == "tokens_per_second" ||
           name.find("seconds") != std::string::npos || name.rfind("eval/", 0) == 0 || name.starts_with("timing_s/") ||
           name.starts_with("perf/");
  });
  return metrics;
}

std::optional<fs::path> tiny_qwen_checkpoint() { return grpo::testing::tiny_qwen_checkpoint(scratch("model")); }

/// completions.jsonl as a list of parsed lines: step, domain and the reward values by name.
struct CompletionLine {
  std::int64_t step = 0;
  std::string prompt, completion;
  std::string domain;
  std::map<std::string, double> rewards;  // NaN for no value
};

std::vector<CompletionLine> read_completions(const fs::path& output_dir) {
  std::vector<CompletionLine> out;
  simdjson::dom::parser parser;
  std::ifstream in(output_dir / "completions.jsonl");
  for (std::string line; std::getline(in, line);) {
    simdjson::dom::object object = parser.parse(line);
    CompletionLine c;
    c.step = int64_t(object["step"]);
    c.prompt = std::string(std::string_view(object["prompt"]));
    c.completion = std::string(std::string_view(object["completion"]));
    std::string_view domain;
    if (!object["domain"].get_string().get(domain)) c.domain = std::string(domain);
    for (auto [name, value] : simdjson::dom::object(object["rewards"])) {
      c.rewards[std::string(name)] = value.is_null() ? NAN : double(value);
    }
    out.push_back(std::move(c));
  }
  return out;
}

/// Step → the (prompt, completion) pairs a run logged in completions.jsonl.
std::map<std::int64_t, std::multiset<std::pair<std::string, std::string>>> completions_by_step(const fs::path& dir) {
  std::map<std::int64_t, std::multiset<std::pair<std::string, std::string>>> out;
  for (const auto& line : read_completions(dir)) out[line.step].insert({line.prompt, line.completion});
  return out;
}

}  // namespace

// What the tiny task's held-out accuracy is without learning ("max d1 … d5 =", the answer the largest digit, uniform
// over 1-9, every other digit below it): a constant answer is right 1 time in 9 (0.11); copying a prompt digit is
// right when it is the maximum, on average 1/5 of the time plus ties (about 0.2-0.37); the starting policy, warmed up
// to copy a digit that is not the largest, scores 0.00-0.03. The learning tests evaluate near-greedily
// (kLearningEval: temperature 0.05, 128 problems × 2 samples), so the score is whether the policy's most likely answer
// is right, not how much probability it has moved yet: decisive, where temperature-1 accuracy after 160 steps spread
// from 0.76 to 0.95 over seeds. Each threshold sits about 0.1 or more below the worst final accuracy measured over
// seeds 1-3 and three CPU paths (docs/testing.md), and at least 0.2 above the no-learning baseline (LoRA's 0.18); with
// GRPO_TEST_ZERO_LR=1 (the policy never updated) every one fails.
constexpr double kTinyTaskNoLearningBest = 0.37;
const std::string kLearningEval = " --eval-problems 128 --eval-samples 2 --eval-temperature 0.05";
/// PPO on the tiny task: the critic's rate (its default 1e-5 is verl's for billion-parameter critics) and GAE's λ.
const std::string kPpoFlags = "--critic-lr 1e-3 --gae-lambda 0.95";
/// The reward-model refresh on the tiny task: every step, on the newest 512 pairs (up to 16 from each prompt), 32 pairs
/// an AdamW step at lr 1e-3.
const std::string kRewardModelRefreshFlags = "--rm-refresh-every 1 --rm-refresh-pairs-per-prompt 16 "
                                             "--rm-refresh-buffer 512 --rm-refresh-batch-size 32 --rm-refresh-lr 1e-3";

TEST_CASE("r1_zero tiny task: GRPO lifts held-out accuracy, and the same seed gives the same curve", "[examples]") {
  const auto dir = scratch("tiny");
  const auto run = r1_zero("--steps 160 --eval-every 160 --save-every 0" + kLearningEval +
                               grpo::testing::learning_rate_flag(""),
                           dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(dir);
  const double before = metrics.at(0).at("eval/mean_accuracy");
  const double after = metrics.at(160).at("eval/mean_accuracy");
  CHECK(before <= 0.1);  // the starting policy speaks the format but answers wrong
  CHECK(after >= 0.7);   // measured 0.80-1.00 (seed 1, this test's: 1.00 on every CPU path)
  static_assert(0.7 > kTinyTaskNoLearningBest + 0.2);
  CHECK(metrics.at(160).at("rewards/format/mean") > 0.9);

  // The first steps again, in a second process: the same numbers.
  const auto again_dir = scratch("tiny_again");
  const auto again = r1_zero("--steps 5 --eval-every 0 --eval-problems 8 --save-every 0", again_dir);
  REQUIRE(again.status == 0);
  const auto again_metrics = read_metrics(again_dir);
  for (std::int64_t step = 1; step <= 5; ++step) {
    INFO("step " << step);
    CHECK(deterministic(again_metrics.at(step)) == deterministic(metrics.at(step)));
  }
}

TEST_CASE("r1_zero tiny task: pipelined rollouts one step off (decoupled correction) lift held-out accuracy",
          "[examples][pipeline]") {
  const auto dir = scratch("tiny_pipelined");
  const auto run = r1_zero("--steps 160 --eval-every 160 --save-every 0 --max-staleness 1 --off-policy-correction "
                           "decoupled --rollout-is token --generation-threads 1" +
                               kLearningEval + grpo::testing::learning_rate_flag(""),
                           dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(dir);
  CHECK(metrics.at(1).at("pipeline/staleness") == 0.0);  // batches 1 and 2 both come from the starting weights
  for (std::int64_t step = 2; step <= 160; step += 53) {
    INFO("step " << step);
    CHECK(metrics.at(step).at("pipeline/staleness") == 1.0);
    CHECK(metrics.at(step).at("pipeline/weights_version") == static_cast<double>(step - 2));
    CHECK(metrics.at(step).at("pipeline/importance_weight/mean") > 0.0);
  }
  const double before = metrics.at(0).at("eval/mean_accuracy");
  const double after = metrics.at(160).at("eval/mean_accuracy");
  CHECK(before <= 0.1);
  CHECK(after >= 0.7);  // as the synchronous trainer's test; docs/pipelining.md has the curves of seeds 1-3
  static_assert(0.7 > kTinyTaskNoLearningBest + 0.2);

  // Without a correction the flag is refused, naming what to choose.
  const auto refused = r1_zero("--steps 2 --max-staleness 1", scratch("tiny_pipelined_refused"));
  CHECK(refused.status != 0);
  CHECK_THAT(refused.out, Catch::Contains("choose off_policy_correction decoupled"));
}

TEST_CASE("r1_zero tiny task: ReMax (each prompt's greedy completion as the baseline) lifts held-out accuracy",
          "[examples]") {
  const auto dir = scratch("tiny_remax");
  // ReMax's advantages are not normalised, and it learns this task a little slower than GRPO: 200 steps.
  const auto run = r1_zero("--advantage remax --steps 200 --eval-every 200 --save-every 0" + kLearningEval +
                               grpo::testing::learning_rate_flag(""),
                           dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(dir);
  CHECK(metrics.at(0).at("eval/mean_accuracy") <= 0.1);
  const double after = metrics.at(200).at("eval/mean_accuracy");
  CHECK(after >= 0.65);  // measured 0.76-1.00 (seed 1: 1.00 on every CPU path)
  static_assert(0.65 > kTinyTaskNoLearningBest + 0.2);
  // The greedy completions were scored every step, and learned too.
  CHECK(metrics.at(1).count("rewards/greedy_baseline/mean") == 1);
  CHECK(metrics.at(200).at("rewards/greedy_baseline/mean") > metrics.at(1).at("rewards/greedy_baseline/mean"));
}

TEST_CASE("r1_zero tiny task: PPO with a critic (GAE) lifts held-out accuracy, and the value loss falls",
          "[examples][ppo]") {
  const auto dir = scratch("tiny_ppo");
  const auto run = r1_zero("--advantage gae " + kPpoFlags + " --steps 160 --eval-every 160 --save-every 0" +
                               kLearningEval + grpo::testing::learning_rate_flag(""),
                           dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(dir);
  CHECK(metrics.at(0).at("eval/mean_accuracy") <= 0.1);
  const double after = metrics.at(160).at("eval/mean_accuracy");
  CHECK(after >= 0.9);  // seed 1 (this test's): 1.000 on the default and the restricted CPU path (docs/ppo.md)
  static_assert(0.9 > kTinyTaskNoLearningBest + 0.2);
  // The critic learnt: its mean value follows the mean return from where its new head started (≈ 0) to the trained
  // policy's level (> 1), and its loss over the last 20 steps is below half of the first 20 steps' (measured 0.19 and
  // 0.28 of it, the gap 0.016 and 0.026: docs/ppo.md).
  double first = 0.0, last = 0.0, gap = 0.0, returns = 0.0;
  for (std::int64_t step = 1; step <= 20; ++step) {
    const auto& late = metrics.at(140 + step);
    first += metrics.at(step).at("critic/vf_loss") / 20.0;
    last += late.at("critic/vf_loss") / 20.0;
    gap += std::abs(late.at("critic/values/mean") - late.at("critic/returns/mean")) / 20.0;
    returns += late.at("critic/returns/mean") / 20.0;
  }
  INFO("critic/vf_loss: first 20 steps " << first << ", last 20 " << last << "; last 20: mean return " << returns
                                         << ", |mean value - mean return| " << gap);
  CHECK(std::abs(metrics.at(1).at("critic/values/mean")) < 0.2);
  CHECK(returns > 1.0);
  CHECK(gap < 0.08);
  CHECK(last < 0.5 * first);
}

#ifdef GRPO_HAVE_CLI
namespace {

/// `grpo train-rm --task tiny` (and `flags`) into scratch(name), and beside it a reward list with that model as the
/// only reward and the verifier at weight 0, where it only says what is correct.
struct TinyRewardModel {
  fs::path dir, rewards;
  grpo::testing::CommandResult trained;
};
TinyRewardModel train_tiny_reward_model(const std::string& name, const std::string& flags = "") {
  TinyRewardModel out{.dir = scratch(name), .rewards = scratch(name + "_config") / "rewards.json", .trained = {}};
  out.trained = grpo::testing::run_command(std::string(grpo::testing::cli_path()) + " train-rm --task tiny " + flags +
                                           " --out " + out.dir.string() + " 2>&1");
  std::ofstream(out.rewards) << R"([{"name": "reward_model", "model_dir": )" << grpo::json_quoted(out.dir.string())
                             << R"(}, {"name": "accuracy", "weight": 0}])";
  return out;
}

}  // namespace

TEST_CASE("r1_zero tiny task: a reward model trained on pairs its verifier made orders 0.95 of held-out pairs, and "
          "scores a GRPO run as its only reward",
          "[examples][reward_model]") {
  // grpo train-rm --task tiny: the starting policy with a new score head, trained on 4 (right, wrong) pairs per
  // training prompt, graded by the accuracy reward; held out: one pair per held-out problem.
  const auto model = train_tiny_reward_model("tiny_rm");
  const auto& rm = model.dir;
  INFO(model.trained.out);
  REQUIRE(model.trained.status == 0);
  simdjson::dom::parser parser;
  const simdjson::dom::element results = parser.load((rm / "train_rm_results.json").string());
  const double pairs_before = double(results["before"]["accuracy"]), pairs_after = double(results["after"]["accuracy"]);
  INFO("held-out pair accuracy before " << pairs_before << ", after " << pairs_after);
  CHECK(int64_t(results["after"]["pairs"]) == 256);
  CHECK(pairs_before < 0.8);   // a new head: measured 0.68, 0.46, 0.25 over seeds 1-3
  CHECK(pairs_after >= 0.95);  // measured 0.973, 0.977 and 0.969 (seed 1, this test's, with the default kernels, the
                               // restricted CPU path and MKL at AVX2), 1.000 and 0.984 (seeds 2, 3)

  // GRPO with it as the only reward; the verifier, at weight 0, only says what is correct. Each total is the reward
  // model's score of the completion, as the reward reads it from the directory.
  const auto dir = scratch("tiny_rm_grpo");
  const auto run = r1_zero("--reward-config " + model.rewards.string() + " --steps 4 --eval-every 0 --save-every 0 "
                           "--log-completions 64",
                           dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(dir);
  CHECK(metrics.at(4).count("rewards/reward_model/mean") == 1);
  CHECK(metrics.at(4).count("rewards/accuracy/mean") == 1);
  const auto reward = grpo::rewards::RewardRegistry::with_builtins().create(
      R"({"name": "reward_model", "model_dir": )" + grpo::json_quoted(rm.string()) + "}");
  const auto lines = read_completions(dir);
  REQUIRE(!lines.empty());
  std::vector<grpo::rewards::Completion> logged(lines.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    logged[i].prompt = lines[i].prompt;
    logged[i].text = lines[i].completion;
  }
  const auto scores = reward->score(logged, {});
  for (std::size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i].prompt << " | " << lines[i].completion);
    REQUIRE(scores[i]);
    CHECK(lines[i].rewards.at("reward_model") == Approx(*scores[i]).epsilon(1e-5).margin(1e-5));
  }
}

TEST_CASE("r1_zero tiny task: a reward model trained on the run's own completions (--rm-refresh-every) lifts held-out "
          "accuracy as the only reward",
          "[examples][reward_model]") {
  // Trained once, the reward model is over-optimised: held-out accuracy after 160 steps, seeds 1-3, 0.00 / 0.16 / 0.19
  // alone and 0.20 / 0.24 / 0.14 with --beta 0.1. Trained every step on the run's pairs (right over wrong by the
  // verifier at weight 0), with the same KL: 0.77 / 0.59 / 0.59, where the rule reward with that KL reaches 1.00 / 0.78 /
  // 0.78 (docs/reward_models.md). The threshold is 0.14 below the worst seed and 0.21 above the once-trained model's
  // best (0.24); seed 1 on the restricted CPU path: 0.72.
  const auto model = train_tiny_reward_model("tiny_rm_learning_model");
  REQUIRE(model.trained.status == 0);
  const auto dir = scratch("tiny_rm_learning");
  const auto run = r1_zero("--reward-config " + model.rewards.string() + " " + kRewardModelRefreshFlags +
                               " --beta 0.1 --steps 160 --eval-every 160 --save-every 0" + kLearningEval +
                               grpo::testing::learning_rate_flag(""),
                           dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(dir);
  const double before = metrics.at(0).at("eval/mean_accuracy"), after = metrics.at(160).at("eval/mean_accuracy");
  INFO("held-out accuracy " << before << " -> " << after);
  CHECK(before <= 0.1);
  CHECK(after >= 0.45);
}

TEST_CASE("r1_zero --rm-refresh-every: the reward model learns from the run's own completions, is saved with the "
          "checkpoints, and a resumed run equals the uninterrupted one",
          "[examples][reward_model]") {
  const auto model = train_tiny_reward_model("tiny_rm_refresh_model", "--epochs 1");
  REQUIRE(model.trained.status == 0);
  const std::string args = "--reward-config " + model.rewards.string() + " --rm-refresh-every 2 --eval-every 0 --save-every 2";
  const auto straight = scratch("tiny_rm_refresh_straight");
  const auto run = r1_zero(args + " --steps 4", straight);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(straight);
  for (const std::int64_t step : {1, 2, 3, 4}) {
    INFO("step " << step);
    CHECK(metrics.at(step).at("reward_model/policy_pairs") > 0);
    CHECK(metrics.at(step).count("reward_model/policy_pair_accuracy") == 1);
    CHECK(metrics.at(step).count("reward_model/refresh_loss") == (step % 2 == 0 ? 1u : 0u));
  }
  CHECK(metrics.at(2).at("reward_model/buffer_pairs") ==
        metrics.at(1).at("reward_model/policy_pairs") + metrics.at(2).at("reward_model/policy_pairs"));
  CHECK(fs::exists(straight / "checkpoints" / "checkpoint-4" / "reward_model_refresh.safetensors"));
  // The directory's model is the run's starting point only: the steps after a refresh score with the trained one.
  CHECK(grpo::io::read_file(straight / "checkpoints" / "checkpoint-2" / "reward_model_refresh.safetensors") !=
        grpo::io::read_file(straight / "checkpoints" / "checkpoint-4" / "reward_model_refresh.safetensors"));

  const auto resumed = scratch("tiny_rm_refresh_resumed");
  REQUIRE(r1_zero(args + " --steps 2", resumed).status == 0);
  const auto second = r1_zero(args + " --steps 4 --resume", resumed);
  INFO(second.out);
  REQUIRE(second.status == 0);
  CHECK_THAT(second.out, Catch::Contains("resumed from"));
  const auto resumed_metrics = read_metrics(resumed);
  for (const std::int64_t step : {3, 4}) CHECK(deterministic(resumed_metrics.at(step)) == deterministic(metrics.at(step)));
  for (const char* file : {"model.safetensors", "reward_model_refresh.safetensors"}) {
    INFO(file);
    CHECK(grpo::io::read_file(resumed / "checkpoints" / "checkpoint-4" / file) ==
          grpo::io::read_file(straight / "checkpoints" / "checkpoint-4" / file));
  }
  // Without a reward model to train, or with several processes' worth of options it cannot keep, the flag is refused.
  const auto bare = r1_zero("--rm-refresh-every 2 --steps 1", scratch("tiny_rm_refresh_bare"));
  CHECK(bare.status != 0);
  CHECK_THAT(bare.out, Catch::Contains("--rm-refresh-every 2: the run's rewards have no \"reward_model\" entry"));
  const auto pipelined = r1_zero(args + " --steps 1 --max-staleness 1 --off-policy-correction bypass",
                                 scratch("tiny_rm_refresh_pipelined"));
  CHECK(pipelined.status != 0);
  CHECK_THAT(pipelined.out, Catch::Contains("--rm-refresh-every with --max-staleness"));
}

TEST_CASE("r1_zero --rm-refresh-every on two ranks: every rank learns the whole step's pairs, as the one-rank run",
          "[examples][distributed]") {
  const auto model = train_tiny_reward_model("tiny_rm_ranks_model", "--epochs 1");
  REQUIRE(model.trained.status == 0);
  const std::string args = " --reward-config " + model.rewards.string() +
                           " --rm-refresh-every 1 --steps 2 --eval-every 0 --save-every 0 --no-tensorboard";
  const auto [one_dir, two_dir] = run_one_and_two_ranks(args, "tiny_rm_ranks");
  const auto one_metrics = read_metrics(one_dir), two_metrics = read_metrics(two_dir);
  // Step 1 samples from the same weights, so both runs draw the same completions (keyed noise): the same pairs, and
  // a refresh on the same buffer. Each rank on its own would hold half of them.
  for (const char* name : {"reward_model/policy_pairs", "reward_model/buffer_pairs", "reward_model/policy_pair_accuracy",
                           "reward_model/correct_share"}) {
    INFO(name);
    CHECK(two_metrics.at(1).at(name) == Approx(one_metrics.at(1).at(name)).epsilon(1e-12));
  }
  CHECK(two_metrics.at(1).at("reward_model/buffer_pairs") > 0);
  for (const char* name : {"reward_model/refresh_loss", "reward_model/refresh_accuracy"}) {
    INFO(name);
    CHECK(two_metrics.at(1).at(name) == Approx(one_metrics.at(1).at(name)).epsilon(1e-5));
  }
  // Step 2's rewards come from the refreshed copies: equal on both ranks, so the step's mean reward is the one-rank
  // run's while the policies agree (its loss to fp32 rounding).
  CHECK(two_metrics.at(2).at("reward") == Approx(one_metrics.at(2).at("reward")).epsilon(1e-4));
}
#endif

namespace {

/// r1_zero --dtype bf16 --optimizer-precision `precision` on the tiny task: the model line says `model_line`, and
/// held-out accuracy goes from ≤ 0.1 to ≥ 0.7 in 160 steps.
void check_bf16_learns(const std::string& precision, const std::string& model_line) {
  const auto dir = scratch("tiny_bf16_" + precision);
  const auto run = r1_zero("--dtype bf16 --optimizer-precision " + precision + " --steps 160 --eval-every 160 "
                           "--save-every 0" + kLearningEval + grpo::testing::learning_rate_flag(""),
                           dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  CHECK_THAT(run.out, Catch::Contains(model_line));
  const auto metrics = read_metrics(dir);
  CHECK(metrics.at(0).at("eval/mean_accuracy") <= 0.1);
  CHECK(metrics.at(160).at("eval/mean_accuracy") >= 0.7);  // measured 0.80-1.00 (seed 1: 1.00 on every path)
  static_assert(0.7 > kTinyTaskNoLearningBest + 0.2);
}

}  // namespace

TEST_CASE("r1_zero --dtype bf16 (fp32 master weights) learns the tiny task as fp32 does", "[examples][precision]") {
  check_bf16_learns("fp32_master", "bf16 with fp32 master weights");
}

TEST_CASE("r1_zero --dtype bf16 --optimizer-precision compensated learns the tiny task without fp32 master weights",
          "[examples][precision]") {
  check_bf16_learns("compensated", "bf16 with compensated bf16 AdamW");
}

TEST_CASE("r1_zero runs with OMP_WAIT_POLICY=PASSIVE unless the environment sets a policy", "[examples][precision]") {
  const auto dir = scratch("wait_policy");
  const std::string args = " --output-dir " + dir.string() + " --steps 1 --eval-every 0 --save-every 0 2>&1";
  const auto unset = grpo::testing::run_command("env -u OMP_WAIT_POLICY " + std::string(grpo::testing::r1_zero_path()) + args);
  INFO(unset.out);
  REQUIRE(unset.status == 0);
  CHECK_THAT(unset.out, Catch::Contains("OMP_WAIT_POLICY=PASSIVE"));
  const auto active = grpo::testing::run_command("env OMP_WAIT_POLICY=active " + std::string(grpo::testing::r1_zero_path()) + args);
  INFO(active.out);
  REQUIRE(active.status == 0);
  CHECK_THAT(active.out, Catch::Contains("OMP_WAIT_POLICY=active"));
}

TEST_CASE("r1_zero --lora-r trains adapters only and learns the tiny task, and the adapter it writes loads back",
          "[examples][lora]") {
  const auto dir = scratch("tiny_lora");
  // LoRA learns this 64-wide model more slowly than full fine-tuning (its embeddings and head stay frozen), and at
  // temperature 1 its held-out accuracy after 200 steps was 0.40-0.49 over seeds and CPU paths (0.31 on a CPU with
  // AMX), too near the 0.37 of no learning; its most likely answer is right far more often. At lr 5e-3 that was
  // 0.68-1.00 near-greedily with the generator's sampling noise but 0.45-0.89 over seeds 1-3 with keyed noise; lr
  // 1e-2 collapses (0.03 on seeds 1-3), lr 3e-3 gives 1.00, 1.00, 0.90 (keyed) and 0.96, 0.93, 0.79 (generator) on seeds 1-3.
  const auto run = r1_zero("--lora-r 16 --lora-alpha 32 --lora-dropout 0 --lora-target-modules all-linear "
                           "--steps 200 --eval-every 200 --save-every 100" + kLearningEval +
                               grpo::testing::learning_rate_flag(" --lr 3e-3"),
                           dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  CHECK_THAT(run.out, Catch::Contains("LoRA r=16 on 14 modules"));
  const auto metrics = read_metrics(dir);
  CHECK(metrics.at(0).at("eval/mean_accuracy") <= 0.1);
  CHECK(metrics.at(200).at("eval/mean_accuracy") >= 0.55);  // measured 0.90-1.00, see above
  static_assert(0.55 > kTinyTaskNoLearningBest + 0.15);
  // The base weights did not move: the final checkpoint's model equals the step-100 one; the adapters did.
  const auto checkpoints = dir / "checkpoints";
  const auto at_100 = grpo::io::load_checkpoint_tensors(checkpoints / "checkpoint-100");
  const auto at_200 = grpo::io::load_checkpoint_tensors(checkpoints / "checkpoint-200");
  for (const auto& [name, tensor] : at_200) {
    INFO(name);
    CHECK(torch::equal(tensor, at_100.at(name)));
  }
  const auto adapter_100 = grpo::io::SafetensorsFile(checkpoints / "checkpoint-100" / "adapter" / "adapter_model.safetensors").tensors();
  const auto adapter = grpo::io::SafetensorsFile(dir / "adapter" / "adapter_model.safetensors").tensors();
  REQUIRE(adapter.size() == 28);
  CHECK_FALSE(torch::equal(adapter.begin()->second, adapter_100.at(adapter.begin()->first)));
  // --lora-adapter continues from the written adapter (and refuses --lora-r beside it).
  const auto again = r1_zero("--lora-adapter " + (dir / "adapter").string() + " --steps 1 --eval-every 0 "
                             "--eval-problems 8 --save-every 0", scratch("tiny_lora_again"));
  CHECK(again.status == 0);
  CHECK_THAT(again.out, Catch::Contains("LoRA r=16 on 14 modules"));
  const auto both = r1_zero("--lora-adapter " + (dir / "adapter").string() + " --lora-r 4 --steps 1",
                            scratch("tiny_lora_both"));
  CHECK(both.status != 0);
  CHECK_THAT(both.out, Catch::Contains("drop --lora-r"));
}

TEST_CASE("r1_zero rejects model flags it cannot honour, naming the flag, before any work", "[examples][precision]") {
  const auto dir = scratch("bad_model_flags");
  for (const auto& [flags, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--dtype fp16", "--dtype fp16: half-precision matrix products need a CUDA device"},
           {"--dtype fp64", "--dtype: expected one of fp32, bf16, fp16, got 'fp64'"},
           {"--device cuda:0", "--device cuda:0: this LibTorch has no CUDA support"},
           {"--device tpu", "--device tpu: expected cpu or cuda[:N]"},
           {"--device cudax", "--device cudax: expected cpu or cuda[:N]"},
           {"--optimizer-precision compensated", "--optimizer-precision compensated steps bf16 weights in place; it "
                                                 "needs --dtype bf16"},
           {"--dtype bf16 --optimizer-precision compensated --lora-r 4", "LoRA adapters train in fp32"},
           {"--optimizer-precision bf16", "unknown optimizer precision 'bf16'"},
           {"--fp32-lm-head", "--fp32-lm-head: the model is already fp32"},
           {"--lora-target-modules q_proj", "--lora-target-modules needs --lora-r > 0"},
           {"--lora-r 4 --lora-target-modules qkv", "target_modules [qkv] match no module of this qwen2 model"},
           {"--lora-r 4 --lora-dropout 1", "--lora-dropout"}}) {
    const auto r = r1_zero(flags + " --steps 1", dir);
    INFO(flags << "\n" << r.out);
    CHECK(r.status != 0);
    CHECK_THAT(r.out, Catch::Contains(expected));
    CHECK_THAT(r.out, !Catch::Contains("step 1/1"));
  }
}

TEST_CASE("r1_zero rejects bad flags and config files with the field at fault", "[examples]") {
  const auto dir = scratch("bad");
  std::ofstream(dir / "bad_field.json") << "{\n  \"steps\": 3,\n  \"learning_rate\": 0.1\n}\n";
  auto r = r1_zero("--config " + (dir / "bad_field.json").string(), dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("bad_field.json:3: unknown field 'learning_rate'"));
  std::ofstream(dir / "bad_value.json") << "{\"group_size\": 1}";
  r = r1_zero("--config " + (dir / "bad_value.json").string(), dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("bad_value.json:1: field 'group_size'"));
  r = r1_zero("--loss ppo --steps 1", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("unknown loss recipe 'ppo'"));
  // The kernel-path variable of the environment (docs/testing.md) is named when it holds no path.
  const auto bad_path = grpo::testing::run_command("GRPO_KERNEL_PATH=avx9 " + std::string(grpo::testing::r1_zero_path()) +
                                                   " --output-dir " + (dir / "path").string() +
                                                   " --steps 1 --eval-every 0 --save-every 0 2>&1");
  CHECK(bad_path.status != 0);
  CHECK_THAT(bad_path.out, Catch::Contains("GRPO_KERNEL_PATH: unknown kernel path 'avx9'"));
  r = r1_zero("--task data", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("--model DIR and --data FILE"));
  // A value of the wrong type names the flag and the type expected (not a range of 300 digits).
  for (const auto& [flags, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--steps abc", "--steps: expected an integer, got 'abc'"},
           {"--steps 1.5", "--steps: expected an integer, got '1.5'"},
           {"--mu 0", "--mu: expected a number > 0, got '0'"},
           {"--lr fast", "--lr: expected a number, got 'fast'"},
           {"--seed -1", "--seed: expected an integer >= 0, got '-1'"},
           {"--top-p 2", "--top-p: expected a number in [1e-06, 1], got '2'"},
           {"--reward-weights 1,x", "--reward-weights: expected a number, got 'x'"}}) {
    r = r1_zero(flags, dir);
    INFO(flags);
    CHECK(r.status != 0);
    CHECK_THAT(r.out, Catch::Contains(expected));
    CHECK(r.out.find("179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878"
                     "171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944"
                     "075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250"
                     "404026184124858368") == std::string::npos);
  }
  std::ofstream(dir / "bad_type.yaml") << "steps: many\n";
  r = r1_zero("--config " + (dir / "bad_type.yaml").string(), dir);
  CHECK_THAT(r.out, Catch::Contains("bad_type.yaml:1: field 'steps'") && Catch::Contains("expected an integer"));
}

TEST_CASE("r1_zero mode 2: a Qwen2 checkpoint on every data-set format, and resume equals an uninterrupted run",
          "[examples]") {
  const fs::path datasets = fs::path(grpo::testing::test_data_dir()) / "datasets";
  const auto checkpoint = tiny_qwen_checkpoint();
  if (!checkpoint) return;
  const fs::path model_dir = *checkpoint;

  // A few rows of each format: ROLL (chat list in a JSON string), GSM8K ("#### N"), TRL/NuminaMath, mapped fields.
  const auto data_dir = scratch("data");
  auto head = [&](const fs::path& from, const fs::path& to, int lines) {
    std::ifstream in(from);
    std::ofstream out(to);
    std::string line;
    for (int i = 0; i < lines && std::getline(in, line); ++i) out << line << "\n";
  };
  head(datasets / "roll_deepmath_train_head100.jsonl", data_dir / "roll.jsonl", 5);
  head(datasets / "gsm8k_train_head50.jsonl", data_dir / "gsm8k.jsonl", 5);
  std::ofstream(data_dir / "trl.jsonl") << R"({"problem": "What is $2+3$?", "solution": "$2+3=\\boxed{5}$"})" "\n"
                                        << R"({"problem": "What is $4 \\cdot 3$?", "solution": "\\boxed{12}"})" "\n"
                                        << R"({"problem": "Simplify $\\frac{6}{8}$.", "solution": "\\boxed{\\frac34}"})" "\n";
  std::ofstream(data_dir / "fields.jsonl") << R"({"q": "1+1?", "a": 2})" "\n" << R"({"q": "2+2?", "a": 4})" "\n"
                                           << R"({"q": "3+3?", "a": 6})" "\n";
  const std::string common = "--model " + model_dir.string() +
                             " --prompts 2 --group-size 2 --max-new-tokens 6 --held-out 1 --eval-every 0"
                             " --eval-samples 2 --seed 5 ";
  for (const std::string format : {"roll", "gsm8k", "trl", "fields"}) {
    INFO(format);
    const auto out = scratch("run_" + format);
    std::string args = common + "--steps 2 --data " + (data_dir / (format + ".jsonl")).string();
    if (format == "fields") args += " --data-format fields --prompt-field q --answer-field a";
    const auto run = r1_zero(args, out);
    INFO(run.out);
    REQUIRE(run.status == 0);
    const auto metrics = read_metrics(out);
    REQUIRE(metrics.count(2) == 1);
    CHECK(metrics.at(2).count("reward") == 1);
    CHECK(metrics.at(2).at("num_tokens") > 0);
    CHECK(fs::exists(out / "checkpoints" / "checkpoint-2" / "model.safetensors"));
  }

  // Resume: one step, stop, resume to two steps; the result equals the uninterrupted run above, bit for bit.
  const auto resumed = scratch("resumed");
  const std::string roll_args = common + "--data " + (data_dir / "roll.jsonl").string();
  REQUIRE(r1_zero(roll_args + " --steps 1", resumed).status == 0);
  const auto second = r1_zero(roll_args + " --steps 2 --resume", resumed);
  INFO(second.out);
  REQUIRE(second.status == 0);
  CHECK_THAT(second.out, Catch::Contains("resumed from"));
  const auto straight = scratch_root() / "run_roll";
  CHECK(grpo::io::read_file(resumed / "checkpoints" / "checkpoint-2" / "model.safetensors") ==
        grpo::io::read_file(straight / "checkpoints" / "checkpoint-2" / "model.safetensors"));
  CHECK(deterministic(read_metrics(resumed).at(2)) == deterministic(read_metrics(straight).at(2)));
}

namespace {

grpo::testing::CommandResult sft(const std::string& args) {
  return grpo::testing::run_command(std::string(grpo::testing::sft_path()) + " " + args + " 2>&1");
}

/// The program the policy is taught to write (JSON-escaped): it passes code row c1 (print the sum of two integers) and
/// fails c2 (print the line reversed).
constexpr const char* kSumProgramJson = R"(```python\nprint(sum(map(int, input().split())))\n```)";
constexpr const char* kSumStatement = "print(sum(map(int, input().split())))";

/// The first message's content of a ROLL row (`messages` a list, or a JSON string holding the list).
std::string first_message(const std::string& line) {
  simdjson::dom::parser parser, inner;
  const simdjson::dom::element messages = parser.parse(line)["messages"];
  const simdjson::dom::element list = messages.is_string() ? inner.parse(std::string(messages.get_string().value()))
                                                           : messages;
  return std::string(std::string_view(list.at(0)["content"]));
}

/// `model_dir` fine-tuned (examples/sft) to answer every prompt of the example data sets with the sum program, so
/// that its completions reach the sandbox (a random model writes no code block, which code_tests scores 0 unrun).
fs::path teach_sum_program(const fs::path& model_dir) {
  const auto dir = scratch("sum_program");
  std::ofstream rows(dir / "sft.jsonl");
  for (const std::string domain : {"math", "code", "general"}) {
    std::ifstream in(fs::path(grpo::testing::source_dir()) / "examples" / "data" / (domain + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      rows << R"({"messages": [{"role": "user", "content": )" << grpo::json_quoted(first_message(line))
           << R"(}, {"role": "assistant", "content": ")" << kSumProgramJson << R"("}]})" << '\n';
    }
  }
  rows.close();
  const auto out = dir / "model";
  // Taught until the program is nearly certain (SFT loss ~0.15 per token after 60 epochs; 40 epochs at 1e-2 left
  // ~2.4, and samples strayed from the program half of the time).
  const auto run = sft(fmt::format("--model {} --data {} --output {} --epochs 60 --lr 2e-2 --lr-decay constant "
                                   "--batch-size 16 --seed 1",
                                   model_dir.string(), (dir / "sft.jsonl").string(), out.string()));
  INFO(run.out);
  REQUIRE(run.status == 0);
  return out;
}

/// The environment that points r1_zero's HTTP judge at the loopback `judge`.
std::string judge_env(const grpo::testing::FakeServer& judge) {
  return "OPENAI_BASE_URL=" + judge.base_url() + " OPENAI_API_KEY=test";
}

/// r1_zero run from the source tree (the example configs name examples/data/... relative to it) with `env` set.
grpo::testing::CommandResult r1_zero_in_source(const std::string& env, const std::string& args, const fs::path& output_dir) {
  return grpo::testing::run_command("cd " + std::string(grpo::testing::source_dir()) + " && " + env + " " + grpo::testing::r1_zero_path() +
                                    " --output-dir " + output_dir.string() + " " + args + " 2>&1");
}

}  // namespace

TEST_CASE("r1_zero multi-domain: math, code (sandbox) and judged rows, each scored by its own domain's rewards",
          "[examples][domains]") {
  // Wide enough to learn one program in a few seconds of SFT.
  const auto model_dir = grpo::testing::tiny_qwen_checkpoint(
      scratch("model"), {.vocab = 151936, .hidden = 64, .intermediate = 128, .layers = 2, .heads = 4, .kv_heads = 2});
  if (!model_dir) return;
  using grpo::testing::FakeServer;
  FakeServer judge({{200, grpo::testing::chat_body("The response meets the criteria. [[YES]]")}}, 1000,
                   std::chrono::seconds(300));
  const std::string env = judge_env(judge);
  // The shipped three-domain config (extends math.yaml extends base.yaml), made small with --set, on a policy that
  // writes a Python program (the sum of two integers) for every prompt.
  const fs::path policy = teach_sum_program(*model_dir);
  const std::string args = "--model " + policy.string() +
                           " --config examples/configs/multi_domain.yaml --set prompts=6 --set group_size=2"
                           " --set max_new_tokens=40 --steps 3 --eval-every 0 --eval-samples 1 --log-completions 100"
                           " --save-every 0 --threads 1";
  const auto dir = scratch("domains");
  const auto run = r1_zero_in_source(env, args, dir);
  INFO(run.out);
  REQUIRE(run.status == 0);

  // Each completion was scored by its own domain's rewards only (the completions table lists the rewards that ran).
  const auto lines = read_completions(dir);
  REQUIRE(lines.size() == 3 * 6 * 2);
  std::map<std::string, int> seen;
  int sum_programs = 0, passed = 0;  // code completions ending with the taught program; those the sandbox passed
  for (const auto& line : lines) {
    INFO("step " << line.step << " domain " << line.domain);
    ++seen[line.domain];
    std::vector<std::string> names;
    for (const auto& [name, value] : line.rewards) names.push_back(name);
    if (line.domain == "math") {
      CHECK(names == std::vector<std::string>{"accuracy", "format"});
    } else if (line.domain == "code") {
      CHECK(names == std::vector<std::string>{"code_tests"});
      // The program passes both tests of "...prints their sum." and no test of the other code rows; any other
      // completion (a sample that strayed from the program) fails or does not parse.
      const double value = line.rewards.at("code_tests");
      const std::string program_block = std::string(kSumStatement) + "\n```";
      const bool ends_with_program = line.completion.size() >= program_block.size() &&
                                     line.completion.compare(line.completion.size() - program_block.size(),
                                                             program_block.size(), program_block) == 0;
      if (ends_with_program) {
        ++sum_programs;
        CHECK(value == (line.prompt.find("prints their sum") != std::string::npos ? 1.0 : 0.0));
      }
      passed += value == 1.0;
    } else {
      REQUIRE(line.domain == "general");
      CHECK(names == std::vector<std::string>{"judge"});
      CHECK(line.rewards.at("judge") == 1.0);  // the fake judge says yes to everything
    }
  }
  // The mix: 6 prompts with probabilities 0.5 / 0.3 / 0.2 give math 3, code 1 or 2, general 1 or 2 every step.
  const auto metrics = read_metrics(dir);
  for (std::int64_t step = 1; step <= 3; ++step) {
    INFO("step " << step);
    const auto& m = metrics.at(step);
    CHECK(m.at("domains/math/completions") == 6);
    CHECK((m.at("domains/code/completions") == 2 || m.at("domains/code/completions") == 4));
    CHECK(m.at("domains/math/completions") + m.at("domains/code/completions") + m.at("domains/general/completions") ==
          12);
    for (const std::string domain : {"math", "code", "general"}) {
      for (const std::string metric : {"accuracy", "frac_reward_zero_std", "completion_length", "reward/mean", "reward/std"}) {
        CHECK(m.count("domains/" + domain + "/" + metric) == 1);
      }
    }
    CHECK(m.at("domains/general/accuracy") == 1.0);
    CHECK(m.at("domains/math/accuracy") == 0.0);  // a program is no answer
    CHECK(m.count("kl_coef") == 1);
    CHECK(m.at("curriculum/difficulty_max") == Approx(2.0 + 8.0 * (step - 1) / 99.0));
  }
  CHECK(seen["math"] == 18);
  CHECK(seen["general"] >= 6);
  // The code rows ran in the sandbox: the taught program was written and passed the sum row's tests.
  CHECK(sum_programs >= seen["code"] / 2);
  CHECK(passed >= 1);
  // The judge saw each row's own criteria (the exact criterion texts, which no reference answer repeats) and no other
  // row's.
  std::vector<std::pair<std::string, std::vector<std::string>>> general_rows;  // question, criteria
  {
    simdjson::dom::parser parser, inner;
    std::ifstream in(fs::path(grpo::testing::source_dir()) / "examples" / "data" / "general.jsonl");
    for (std::string line; std::getline(in, line);) {
      const simdjson::dom::element field = parser.parse(line)["evaluation_criteria"];  // a list, or a JSON string of one
      const simdjson::dom::element list = field.is_string() ? inner.parse(std::string(field.get_string().value())) : field;
      std::vector<std::string> criteria;
      for (const auto criterion : simdjson::dom::array(list)) {
        criteria.emplace_back(std::string_view(criterion));
      }
      general_rows.emplace_back(first_message(line), criteria);
    }
  }
  const auto requests = judge.requests();
  REQUIRE(requests.size() >= static_cast<std::size_t>(seen["general"]));
  for (const std::string& request : requests) {
    INFO(request);
    int own = 0;
    for (const auto& [question, criteria] : general_rows) {
      const bool asked = request.find(question) != std::string::npos;
      own += asked;
      for (const std::string& criterion : criteria) CHECK((request.find(criterion) != std::string::npos) == asked);
    }
    CHECK(own == 1);
  }
  // Per-domain accuracy on the console line.
  // Per-domain metrics on the console (the progress line and a line per domain) and in the TensorBoard events.
  CHECK_THAT(run.out, Catch::Contains("math_acc") && Catch::Contains("general_acc"));
  CHECK_THAT(run.out, Catch::Contains("          code: reward ") && Catch::Contains("       general: reward 1 ± 0"));
  std::string events;
  for (const auto& entry : fs::directory_iterator(dir / "tensorboard")) events += grpo::io::read_file(entry.path());
  for (const std::string domain : {"math", "code", "general"}) {
    for (const std::string metric : {"accuracy", "frac_reward_zero_std", "completion_length", "reward/mean"}) {
      INFO(domain << " " << metric);
      CHECK(events.find("domains/" + domain + "/" + metric) != std::string::npos);  // a summary value's tag
    }
  }
}

TEST_CASE("r1_zero multi-domain resume equals the uninterrupted run with mixing, curriculum, adaptive KL, dynamic "
          "sampling and a synced reference",
          "[examples][domains]") {
  const auto model_dir = tiny_qwen_checkpoint();
  if (!model_dir) return;
  using grpo::testing::FakeServer;
  FakeServer judge(grpo::testing::verdict_by_request_hash(), 1000, std::chrono::seconds(300));
  const std::string env = judge_env(judge);
  // Adaptive KL that moves fast (target far below the measured KL, short horizon), a reference synced every step,
  // and a filter that retires each prompt after one all-wrong group (so steps 2-3 depend on the filter's state).
  const std::string args = "--model " + model_dir->string() +
                           " --config examples/configs/multi_domain.yaml --set prompts=4 --set group_size=2"
                           " --set max_new_tokens=6 --set beta=0.05 --set kl.target=1e-6 --set kl.horizon=20"
                           " --set ref_sync_every=1 --set ref_sync_alpha=0.5 --set curriculum.filter.window=1"
                           " --set lr=1e-3 --eval-every 0 --eval-samples 1 --save-every 1 --keep-last 0 --threads 1"
                           " --set warmup_steps=0 --dynamic-sampling-max-rounds 3 --dynamic-sampling-prompts 8";
  // (DAPO rounds draw further batches from the data: the count of batches drawn is resumed too.)
  const auto straight = scratch("domains_straight");
  auto run = r1_zero_in_source(env, args + " --steps 3", straight);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto resumed = scratch("domains_resumed");
  REQUIRE(r1_zero_in_source(env, args + " --steps 2", resumed).status == 0);
  run = r1_zero_in_source(env, args + " --steps 3 --resume", resumed);
  INFO(run.out);
  REQUIRE(run.status == 0);
  CHECK_THAT(run.out, Catch::Contains("resumed from"));

  const auto a = straight / "checkpoints" / "checkpoint-3", b = resumed / "checkpoints" / "checkpoint-3";
  CHECK(grpo::io::read_file(a / "model.safetensors") == grpo::io::read_file(b / "model.safetensors"));
  CHECK(grpo::io::read_file(a / "reference" / "model.safetensors") ==
        grpo::io::read_file(b / "reference" / "model.safetensors"));
  CHECK(grpo::io::read_file(a / "trainer_state.json") == grpo::io::read_file(b / "trainer_state.json"));
  const auto m_straight = read_metrics(straight), m_resumed = read_metrics(resumed);
  CHECK(deterministic(m_resumed.at(3)) == deterministic(m_straight.at(3)));
  // The parts were active: β moved, the filter retired prompts, the reference differs from the policy.
  CHECK(m_straight.at(2).at("kl_coef") != m_straight.at(1).at("kl_coef"));
  CHECK(m_straight.at(3).at("curriculum/retired_prompts") > 0);
  CHECK(m_straight.at(1).at("dynamic_sampling/rounds") + m_straight.at(2).at("dynamic_sampling/rounds") > 2);
  CHECK(grpo::io::read_file(a / "reference" / "model.safetensors") != grpo::io::read_file(a / "model.safetensors"));
  const std::string state = grpo::io::read_file(a / "trainer_state.json");
  CHECK_THAT(state, Catch::Contains("\"data/code/position\"") && Catch::Contains("\"curriculum/filter\""));
}

TEST_CASE("r1_zero layered configs: bad keys, overrides, bases and tags are rejected with the place at fault",
          "[examples][domains]") {
  const auto dir = scratch("config_errors");
  const std::string source = grpo::testing::source_dir();
  auto r = r1_zero("--config " + source + "/examples/configs/base.yaml --set kl.targte=0.2", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("--set kl.targte=0.2: unknown field 'kl.targte'"));
  std::ofstream(dir / "typo.yaml") << "extends: " << source << "/examples/configs/multi_domain.yaml\n"
                                   << "domains:\n  math:\n    probabilty: 0.4\n";
  r = r1_zero("--config " + (dir / "typo.yaml").string(), dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("typo.yaml:4: unknown key 'domains.math.probabilty'"));
  std::ofstream(dir / "orphan.yaml") << "steps: 3\nextends: missing_base.yaml\n";
  r = r1_zero("--config " + (dir / "orphan.yaml").string(), dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("orphan.yaml:2") && Catch::Contains("missing_base.yaml"));
  std::ofstream(dir / "general.yaml") << "domains:\n  general: {data: x.jsonl}\n";
  r = r1_zero("--config " + (dir / "general.yaml").string() + " --model " + dir.string(), dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("domain 'general' (general) needs 'rewards'"));
  // Bad domain values name the --set (or file:line) and the key path.
  const std::string multi = "--config " + source + "/examples/configs/multi_domain.yaml";
  r = r1_zero(multi + " --set domains.math.probability=-1", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("--set domains.math.probability=-1: 'domains.math.probability' must be a number >= 0"));
  r = r1_zero(multi + " --set 'domains.code.reward_clip=[1, -1]'", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("'domains.code.reward_clip' should be c >= 0 or [lo, hi] with lo <= hi"));
  r = r1_zero(multi + " --set domains.code.kind=physics", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("--set domains.code.kind=physics: 'domains.code.kind'"));
  r = r1_zero(multi + " --set domains.general.reward_normalisation=zscore", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("'domains.general.reward_normalisation'") && Catch::Contains("zscore"));
  r = r1_zero(multi + " --set domains.code.dynamic_sampling_filter=0.5", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("'domains.code.dynamic_sampling_filter' should be a map with min_std"));
  r = r1_zero(multi + " --set 'domains.code.dynamic_sampling_filter={min_sdt: 0.1}'", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("domains.code.dynamic_sampling_filter.min_sdt"));
  // A stage condition on a metric the run never logs stops the run at its first step, not never.
  std::ofstream(dir / "stages.yaml") << "stages:\n  - {max_new_tokens: 8}\n"
                                        "  - {when: \"completions/clipped_ratoi >= 0.5\", max_new_tokens: 10}\n";
  r = r1_zero("--config " + (dir / "stages.yaml").string() + " --steps 2 --prompts 4 --eval-every 0 --eval-problems 4",
              dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("stages[1]: 'when' names metric 'completions/clipped_ratoi', which this run does "
                                    "not log"));

  // A row whose tag no domain serves: an error at start naming the file, line and tag.
  const auto model_dir = tiny_qwen_checkpoint();
  if (!model_dir) return;
  std::ofstream(dir / "physics.jsonl")
      << R"({"id": "p1", "tag": "math", "messages": [{"role": "user", "content": "1+1?"}], "ground_truth": "2"})" "\n"
      << R"({"id": "p2", "tag": "physics", "messages": [{"role": "user", "content": "g?"}], "ground_truth": "9.8"})" "\n";
  std::ofstream(dir / "tags.yaml") << "domains:\n  math:\n    data: " << (dir / "physics.jsonl").string() << "\n";
  r = r1_zero("--model " + model_dir->string() + " --config " + (dir / "tags.yaml").string() + " --steps 1", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("physics.jsonl:2") && Catch::Contains("tag 'physics'"));
  // Two domains claiming one tag; an accuracy_reward that is no reward of the domain; step credit so heavy that a
  // right final answer and a wrong one overlap, without an explicit threshold.
  const std::string math = "--model " + model_dir->string() + " --config examples/configs/math.yaml --steps 1";
  r = r1_zero_in_source("", math + " --set domains.algebra.tags=[math] --set domains.algebra.data=examples/data/math.jsonl",
                        dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("domains.algebra: tag 'math' is claimed by domain 'math' too"));
  r = r1_zero_in_source("", math + " --set domains.math.accuracy_reward=acc", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("domains.math.rewards: accuracy_reward 'acc' is not a reward of the domain"));
  r = r1_zero_in_source("", math + " --set 'domains.math.rewards=[{name: accuracy, step_weight: 0.6}]'", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("accuracy with step_weight 0.6 cannot tell a right final answer"));
}

TEST_CASE("r1_zero DAPO dynamic sampling and context-lengthening stages on the tiny task, and resume mid-stage",
          "[examples][recipes]") {
  const auto dir = scratch("recipes");
  // Stage 0 cuts completions (6 tokens) at 5, so every one is truncated; stage 1 starts once the clipped ratio has
  // been >= 0.9 for 2 steps (at step 3), with G = 4 and truncated completions masked; stage 2 starts at step 6 with
  // a soft overlong penalty over the last 4 of 10 tokens and its own learning rate.
  std::ofstream(dir / "stages.yaml")
      << "stages:\n"
         "  - {max_new_tokens: 5}\n"
         "  - {when: \"completions/clipped_ratio >= 0.9\", patience: 2, max_new_tokens: 8, group_size: 4,"
         " mask_truncated: true}\n"
         "  - {at_step: 6, max_new_tokens: 10, overlong_buffer: 4, lr: 5.0e-4}\n";
  const std::string args = "--config " + (dir / "stages.yaml").string() +
                           " --dynamic-sampling-max-rounds 3 --prompts 16 --eval-every 0 --eval-problems 8"
                           " --eval-samples 1 --save-every 1 --keep-last 0";
  const auto straight = dir / "straight";
  auto run = r1_zero(args + " --steps 8", straight);
  INFO(run.out);
  REQUIRE(run.status == 0);
  CHECK_THAT(run.out, Catch::Contains("context stage 0 -> 1 from step 3 (completions/clipped_ratio = ") &&
                          Catch::Contains("context stage 1 -> 2 from step 6 (at step 6)"));
  const auto metrics = read_metrics(straight);
  for (std::int64_t step = 1; step <= 8; ++step) {
    INFO("step " << step);
    const auto& m = metrics.at(step);
    const double stage = step <= 2 ? 0 : step <= 5 ? 1 : 2;
    CHECK(m.at("context/stage") == stage);
    CHECK(m.at("context/max_new_tokens") == (stage == 0 ? 5 : stage == 1 ? 8 : 10));
    CHECK(m.at("dynamic_sampling/rounds") >= 1);
    CHECK(m.at("dynamic_sampling/rounds") <= 3);
    CHECK(m.at("dynamic_sampling/kept_groups") <= 16);
    if (m.at("dynamic_sampling/skipped") == 0) {
      CHECK(m.at("frac_reward_zero_std") == 0.0);  // every kept group has reward spread
      CHECK(m.at("dynamic_sampling/kept_groups") > 0);
    }
    CHECK(m.count("rewards/soft_overlong/mean") == (stage == 2 ? 1u : 0u));
    CHECK(m.at("learning_rate") == (stage == 2 ? 5e-4 : 1e-3));
    // Stage 1's G = 4 (the run's is 8): at most 4 completions of at most 8 tokens per kept group reach the loss.
    if (stage == 1) CHECK(m.at("num_tokens") <= 4 * 8 * m.at("dynamic_sampling/kept_groups"));
    if (stage == 0) CHECK(m.at("completions/clipped_ratio") >= 0.9);
  }
  // Stopped in stage 1 and resumed: stage 2 still starts at step 6 and the run equals the uninterrupted one.
  const auto resumed = dir / "resumed";
  REQUIRE(r1_zero(args + " --steps 4", resumed).status == 0);
  run = r1_zero(args + " --steps 8 --resume", resumed);
  INFO(run.out);
  REQUIRE(run.status == 0);
  CHECK_THAT(run.out, Catch::Contains("context stage 1 -> 2 from step 6"));
  CHECK(grpo::io::read_file(straight / "checkpoints" / "checkpoint-8" / "model.safetensors") ==
        grpo::io::read_file(resumed / "checkpoints" / "checkpoint-8" / "model.safetensors"));
  const auto resumed_metrics = read_metrics(resumed);
  for (std::int64_t step = 5; step <= 8; ++step) {
    INFO("step " << step);
    CHECK(deterministic(resumed_metrics.at(step)) == deterministic(metrics.at(step)));
  }
  // As after a crash past the last checkpoint: steps 7 and 8 run again, and metrics.jsonl keeps one record per step.
  fs::remove_all(resumed / "checkpoints" / "checkpoint-8");
  fs::remove_all(resumed / "checkpoints" / "checkpoint-7");
  REQUIRE(r1_zero(args + " --steps 8 --resume", resumed).status == 0);
  std::map<std::int64_t, int> records;  // training records (evaluations are records of their own) per step
  std::ifstream lines(resumed / "metrics.jsonl");
  for (std::string line; std::getline(lines, line);) {
    if (line.find("eval/") == std::string::npos) ++records[std::stoll(line.substr(line.find(':') + 1))];
  }
  for (std::int64_t step = 1; step <= 8; ++step) CHECK(records[step] == 1);
  CHECK(deterministic(read_metrics(resumed).at(8)) == deterministic(metrics.at(8)));
}

TEST_CASE("r1_zero overlapped reward scoring gives the same step metrics as sequential scoring", "[examples][recipes]") {
  const auto model_dir = tiny_qwen_checkpoint();
  if (!model_dir) return;
  using grpo::testing::FakeServer;
  FakeServer judge(grpo::testing::verdict_by_request_hash(), 1000, std::chrono::seconds(300));
  const std::string env = judge_env(judge);
  // Three chunks per round: code_tests (sandbox) and the judge score chunk k while chunk k + 1 is sampled.
  const std::string args = "--model " + model_dir->string() +
                           " --config examples/configs/multi_domain.yaml --set prompts=6 --set group_size=2"
                           " --set max_new_tokens=6 --steps 2 --eval-every 0 --eval-samples 1 --save-every 0"
                           " --threads 1 --generation-chunks 3 --dynamic-sampling-max-rounds 2";
  const auto sequential = scratch("scoring_sequential"), overlapped = scratch("scoring_overlapped");
  auto run = r1_zero_in_source(env, args + " --no-overlap-scoring", sequential);
  INFO(run.out);
  REQUIRE(run.status == 0);
  run = r1_zero_in_source(env, args + " --overlap-scoring", overlapped);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto a = read_metrics(sequential), b = read_metrics(overlapped);
  for (std::int64_t step = 1; step <= 2; ++step) {
    INFO("step " << step);
    CHECK(deterministic(a.at(step)) == deterministic(b.at(step)));
    CHECK(a.at(step).count("domains/general/rewards/judge/mean") == 1);
  }
}

TEST_CASE("r1_zero DAPO dynamic sampling on two ranks: a rank left without groups still trains its share (dr_grpo)",
          "[examples][recipes]") {
  // Two prompts a round, one per rank, until both kept groups have spread: a round that keeps rank 0's group and
  // fills the target leaves rank 1 with no rows, whose dr_grpo normaliser (B · max length) then adds nothing.
  const auto dir = scratch("dynamic_two_ranks");
  const auto run = r1_zero_two_ranks(
      "--loss dr_grpo --advantage dr_grpo --prompts 2 --group-size 4 --dynamic-sampling-max-rounds 4 --steps 12 "
      "--eval-every 0 --eval-problems 8 --eval-samples 1 --save-every 0 --no-tensorboard",
      dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(dir);
  for (std::int64_t step = 1; step <= 12; ++step) {
    INFO("step " << step);
    const auto& m = metrics.at(step);
    if (m.count("loss")) CHECK(std::isfinite(m.at("loss")));
    if (m.at("dynamic_sampling/skipped") == 0) CHECK(m.at("frac_reward_zero_std") == 0.0);
  }
  CHECK(fs::exists(dir / "checkpoints" / "checkpoint-12" / "model.safetensors"));
}

TEST_CASE("r1_zero on two ranks learns the tiny task", "[examples][distributed]") {
  // Each rank samples and scores its half of the prompts; the gradients are summed (c10d, Gloo).
  const auto dir = scratch("two_ranks_learn");
  const auto run = r1_zero_two_ranks("--steps 160 --eval-every 160 --save-every 0" + kLearningEval +
                                         " --no-tensorboard" + grpo::testing::learning_rate_flag(""),
                                     dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(dir);
  CHECK(metrics.at(0).at("eval/mean_accuracy") <= 0.1);
  CHECK(metrics.at(160).at("eval/mean_accuracy") >= 0.7);  // measured 0.80-1.00 (seed 1: 1.00 on both CPU paths)
  static_assert(0.7 > kTinyTaskNoLearningBest + 0.2);
  for (std::int64_t step = 1; step <= 160; ++step) CHECK(std::isfinite(metrics.at(step).at("loss")));
}

TEST_CASE("r1_zero on two ranks follows the one-rank run: the same completions, and metrics to fp32 rounding until a "
          "sampled token differs",
          "[examples][distributed]") {
  // Keyed sampling noise: the two runs draw the same completions while their weights agree; the gradient sums of one
  // and two ranks differ by fp32 reduction-order rounding, which can flip a sampled token at a near-tie of p / E.
  const std::string args = " --steps 30 --eval-every 0 --eval-problems 8 --eval-samples 1 --save-every 0 "
                           "--log-completions 1000 --no-tensorboard";
  const auto [one_dir, two_dir] = run_one_and_two_ranks(args, "follow");
  // The two-rank run's (prompt, completion) pairs of each step must be among the one-rank run's.
  const auto one_completions = completions_by_step(one_dir), two_completions = completions_by_step(two_dir);
  std::int64_t first_difference = 0;
  for (std::int64_t step = 1; step <= 30 && first_difference == 0; ++step) {
    const auto& mine = two_completions.at(step);
    const auto& all = one_completions.at(step);
    REQUIRE(!mine.empty());
    for (const auto& pair : mine) {
      if (all.count(pair) < mine.count(pair)) first_difference = step;
    }
  }
  // Only rank 0 logs its completions: a step where rank 1's differ shows in the batch's mean reward, length or
  // entropy (over every completion of the step; the entropy also drifts with rounding: measured up to 4e-5 relative
  // by step 24, 3e-4 at a differing token).
  const auto one_metrics = read_metrics(one_dir), two_metrics = read_metrics(two_dir);
  for (std::int64_t step = 1; step <= (first_difference == 0 ? 30 : first_difference - 1); ++step) {
    using Tolerance = std::pair<const char*, double>;
    for (const auto& [name, tolerance] :
         {Tolerance{"reward", 1e-6}, Tolerance{"completions/mean_length", 1e-6}, Tolerance{"entropy", 1e-4}}) {
      const double a = one_metrics.at(step).at(name), b = two_metrics.at(step).at(name);
      if (std::abs(a - b) > tolerance * std::max(1.0, std::abs(a))) first_difference = step;
    }
    if (first_difference == step) break;
  }
  WARN("two ranks drew the one-rank run's completions until step "
       << (first_difference == 0 ? std::string("30 (the end)") : std::to_string(first_difference - 1)));
  CHECK((first_difference == 0 || first_difference > 1));  // step 1: the same weights, the same completions
  // While the completions agree, the rewards and lengths are equal and the loss agrees to fp32 rounding. The
  // gradient norm does at step 1 (the same weights); later AdamW's m / √v turns the rounding noise of gradients near
  // zero into steps of up to the learning rate, so it agrees less closely (measured 2e-3 relative by step 9).
  const std::int64_t agreeing = first_difference == 0 ? 30 : first_difference - 1;
  for (std::int64_t step = 1; step <= agreeing; ++step) {
    for (const char* name : {"loss", "reward", "completions/mean_length", "frac_reward_zero_std", "grad_norm"}) {
      if (step > 1 && std::string_view(name) == "grad_norm") continue;
      INFO("step " << step << ", " << name);
      const double a = one_metrics.at(step).at(name), b = two_metrics.at(step).at(name);
      CHECK(std::abs(a - b) <= (step == 1 ? 1e-5 : 1e-4) * std::max(1.0, std::abs(a)));
    }
  }
}

TEST_CASE("r1_zero on two ranks with pipelined rollouts follows the one-rank pipelined run", "[examples][distributed]") {
  // With s = 1, batches 1 and 2 are both sampled with the starting weights: both runs draw the same completions for
  // them (keyed noise), and the losses agree to the fp32 rounding of one rank's gradient sum against two.
  const std::string args = " --steps 4 --eval-every 0 --eval-problems 8 --eval-samples 1 --save-every 0 "
                           "--log-completions 1000 --no-tensorboard --max-staleness 1 --off-policy-correction bypass";
  const auto [one_dir, two_dir] = run_one_and_two_ranks(args, "pipelined");
  const auto one_completions = completions_by_step(one_dir), two_completions = completions_by_step(two_dir);
  const auto one_metrics = read_metrics(one_dir), two_metrics = read_metrics(two_dir);
  for (std::int64_t step = 1; step <= 2; ++step) {
    INFO("step " << step);
    const auto& mine = two_completions.at(step);  // rank 0's share
    REQUIRE(!mine.empty());
    for (const auto& pair : mine) CHECK(one_completions.at(step).count(pair) >= mine.count(pair));
    for (const char* name : {"loss", "reward", "completions/mean_length", "pipeline/staleness"}) {
      INFO(name);
      const double a = one_metrics.at(step).at(name), b = two_metrics.at(step).at(name);
      CHECK(std::abs(a - b) <= 1e-4 * std::max(1.0, std::abs(a)));
    }
  }
  CHECK(two_metrics.at(4).at("pipeline/staleness") == 1.0);
}

/// The metrics of a pipelined run that depend only on its numbers: deterministic() without the pipeline's waits and
/// idle fractions (wall-clock measurements).
StepMetrics pipelined_numbers(const StepMetrics& metrics) {
  StepMetrics out = deterministic(metrics);
  std::erase_if(out, [](const auto& entry) {
    return entry.first.starts_with("pipeline/trainer_") || entry.first.starts_with("pipeline/sampler_");
  });
  return out;
}

/// Steps first … last of `got` have `expected`'s pipelined_numbers exactly.
void check_same_pipelined_steps(const std::map<std::int64_t, StepMetrics>& expected,
                                const std::map<std::int64_t, StepMetrics>& got, std::int64_t first, std::int64_t last) {
  for (std::int64_t step = first; step <= last; ++step) {
    INFO("step " << step);
    REQUIRE(got.count(step) == 1);
    CHECK(pipelined_numbers(got.at(step)) == pipelined_numbers(expected.at(step)));
  }
}

TEST_CASE("r1_zero with a rollout rank (one process trains, one samples and scores, the weights sent over c10d) gives "
          "the one-process pipelined run bit for bit, and resumes so",
          "[examples][distributed][pipeline]") {
  // Evaluations at steps 2 and 4 run on the trainer while the rollout rank samples: they change nothing else.
  const std::string args = " --steps 4 --eval-every 2 --eval-problems 8 --eval-samples 1 --save-every 2 "
                           "--no-tensorboard --max-staleness 1 --off-policy-correction decoupled --rollout-is token "
                           "--generation-threads 1";
  const auto [threaded, ranks] = run_one_and_two_ranks(args, "rollout_rank", " --rollout-ranks 1");
  const auto expected = read_metrics(threaded), got = read_metrics(ranks);
  check_same_pipelined_steps(expected, got, 1, 4);
  for (std::int64_t step = 1; step <= 4; ++step) {
    CHECK(got.at(step).at("pipeline/staleness") == (step == 1 ? 0.0 : 1.0));
  }
  const auto weights = [](const fs::path& dir, int step) {
    return grpo::io::read_file(dir / "checkpoints" / fmt::format("checkpoint-{}", step) / "model.safetensors");
  };
  CHECK(weights(ranks, 4) == weights(threaded, 4));
  CHECK(got.at(2).at("eval/mean_accuracy") == expected.at(2).at("eval/mean_accuracy"));
  CHECK(weights(ranks, 4) != weights(ranks, 2));  // the weights moved: the comparison can fail

  // Resumed from step 2, with batches 3 and 4 in flight: the trainer sends the rollout rank their weights and the
  // prompt source's state, and steps 3 and 4 are the uninterrupted run's.
  const auto resumed = scratch("rollout_rank_resumed");
  fs::create_directories(resumed / "checkpoints");
  fs::copy(ranks / "checkpoints" / "checkpoint-2", resumed / "checkpoints" / "checkpoint-2", fs::copy_options::recursive);
  REQUIRE(fs::is_directory(resumed / "checkpoints" / "checkpoint-2" / "pipeline"));
  const auto again = r1_zero_two_ranks(args + " --rollout-ranks 1 --resume", resumed);
  INFO(again.out);
  REQUIRE(again.status == 0);
  CHECK_THAT(again.out, Catch::Contains("resumed from"));
  check_same_pipelined_steps(got, read_metrics(resumed), 3, 4);
  CHECK(weights(resumed, 4) == weights(ranks, 4));

  // The layout is checked before anything is built, naming the flag.
  const auto alone = r1_zero(args + " --rollout-ranks 1", scratch("rollout_rank_alone"));
  CHECK(alone.status != 0);
  CHECK_THAT(alone.out, Catch::Contains("--rollout-ranks 1") && Catch::Contains("WORLD_SIZE must be 2"));
  const auto synchronous = r1_zero(" --steps 1 --rollout-ranks 1", scratch("rollout_rank_synchronous"));
  CHECK(synchronous.status != 0);
  CHECK_THAT(synchronous.out, Catch::Contains("--rollout-ranks 1") && Catch::Contains("--max-staleness"));
}

TEST_CASE("r1_zero with a rollout rank equals the one-process pipelined run for multi-turn tool rollouts, ReMax's "
          "greedy baselines and PPO's critic",
          "[examples][distributed][pipeline]") {
  // What crosses the link beyond a plain batch: turns and tool replies (completion_turns, the attention mask, turn
  // rewards), ReMax's greedy baselines (sampled and scored on the rollout rank), and PPO's critic values (computed
  // on the trainer from the batch it received).
  const std::string variant = GENERATE(std::string("--task tiny_lookup"), std::string("--advantage remax"),
                                       std::string("--advantage gae"));
  INFO(variant);
  const std::string args = " " + variant + " --steps 3 --eval-every 0 --eval-problems 8 --eval-samples 1 "
                           "--save-every 0 --no-tensorboard --max-staleness 1 --off-policy-correction bypass "
                           "--generation-threads 1";
  const auto [threaded, ranks] = run_one_and_two_ranks(args, "rollout_rank_variant", " --rollout-ranks 1");
  check_same_pipelined_steps(read_metrics(threaded), read_metrics(ranks), 1, 3);
  CHECK(read_completions(ranks).size() == read_completions(threaded).size());
}

TEST_CASE("r1_zero with two trainer ranks and two rollout ranks equals the two-rank pipelined run bit for bit",
          "[examples][distributed][pipeline]") {
  // The trainers' gradient all-reduce and the rollout ranks' pass rates run in subgroups of the four (met through
  // rank 0's store); each rollout rank collects its trainer's share, as that trainer's worker thread would.
  const std::string args = " --steps 3 --eval-every 0 --eval-problems 8 --eval-samples 1 --save-every 0 "
                           "--no-tensorboard --max-staleness 1 --off-policy-correction bypass --generation-threads 1";
  const auto threaded = scratch("rollout_ranks_four_threaded"), ranks = scratch("rollout_ranks_four");
  const auto two = r1_zero_two_ranks(args, threaded);
  INFO(two.out);
  REQUIRE(two.status == 0);
  const auto four = r1_zero_launched(4, args + " --rollout-ranks 2", ranks);
  INFO(four.out);
  REQUIRE(four.status == 0);
  check_same_pipelined_steps(read_metrics(threaded), read_metrics(ranks), 1, 3);
}

TEST_CASE("r1_zero --advantage gae on two ranks follows the one-rank run: the critic's values, returns, loss and "
          "update over every rank's tokens",
          "[examples][distributed][ppo]") {
  // Step 1 starts from the same policy and critic on both runs and draws the same completions (keyed noise), so every
  // critic figure is the one-rank run's to fp32 rounding: the values, GAE's returns whitened over both ranks' tokens,
  // the value loss normalised over every rank's tokens, and the critic's all-reduced gradient norm. Step 2 draws its
  // completions with the updated policy: the same ones while the updates agree.
  const std::string args = "--advantage gae " + kPpoFlags + " --steps 2 --eval-every 0 --eval-problems 8 "
                           "--eval-samples 1 --save-every 0 --log-completions 1000 --no-tensorboard";
  const auto [one_dir, two_dir] = run_one_and_two_ranks(args, "ppo");
  const auto one_completions = completions_by_step(one_dir), two_completions = completions_by_step(two_dir);
  const auto one_metrics = read_metrics(one_dir), two_metrics = read_metrics(two_dir);
  const auto agree = [&](std::int64_t step, double tolerance) {
    for (const char* name : {"loss", "reward", "grad_norm", "critic/vf_loss", "critic/vf_clipfrac", "critic/grad_norm",
                             "critic/values/mean", "critic/returns/mean", "critic/vpred_mean"}) {
      INFO("step " << step << ", " << name);
      REQUIRE(one_metrics.at(step).count(name) == 1);
      const double a = one_metrics.at(step).at(name), b = two_metrics.at(step).at(name);
      CHECK(std::abs(a - b) <= tolerance * std::max(1.0, std::abs(a)));
    }
  };
  const auto same_completions = [&](std::int64_t step) {
    const auto& mine = two_completions.at(step);  // rank 0's share
    REQUIRE(!mine.empty());
    bool same = true;
    for (const auto& pair : mine) same = same && one_completions.at(step).count(pair) >= mine.count(pair);
    return same && std::abs(one_metrics.at(step).at("completions/mean_length") -
                            two_metrics.at(step).at("completions/mean_length")) < 1e-6;
  };
  CHECK(same_completions(1));
  agree(1, 1e-5);
  if (same_completions(2)) {
    agree(2, 1e-4);
  } else {
    WARN("step 2 drew other completions on two ranks (a near-tie flipped by fp32 rounding): compared step 1 only");
  }
}

TEST_CASE("r1_zero pass-rate filter: a failing judge scores nothing and retires no prompt, a judge saying no retires "
          "them",
          "[examples][domains]") {
  const auto model_dir = tiny_qwen_checkpoint();
  if (!model_dir) return;
  using grpo::testing::FakeServer;
  // Only the judged domain, every prompt retired after one all-wrong group.
  const std::string args = "--model " + model_dir->string() +
                           " --config examples/configs/multi_domain.yaml --set prompts=3 --set group_size=2"
                           " --set max_new_tokens=4 --set domains.math.probability=0 --set domains.code.probability=0"
                           " --set 'domains.general.rewards=[{name: judge, backend: http, model: judge, max_retries: 0}]'"
                           " --set curriculum.filter.window=1 --set curriculum.filter.retire=unsolved --steps 2"
                           " --eval-every 0 --eval-samples 1 --save-every 0 --threads 1 --no-tensorboard";
  const auto retired = [&](FakeServer& judge, const std::string& name) {
    const auto dir = scratch(name);
    const auto run = r1_zero_in_source(judge_env(judge), args, dir);
    INFO(run.out);
    REQUIRE(run.status == 0);
    const auto metrics = read_metrics(dir);
    CHECK(metrics.at(2).at("domains/general/completions") == 6);
    return metrics.at(2).at("curriculum/retired_prompts");
  };
  FakeServer failing({{500, R"({"error": "overloaded"})"}}, 1000, std::chrono::seconds(300));
  CHECK(retired(failing, "judge_failing") == 0);
  FakeServer no({{200, grpo::testing::chat_body("The response misses the criteria. [[NO]]")}}, 1000,
                std::chrono::seconds(300));
  CHECK(retired(no, "judge_no") > 0);
}

namespace {

/// config.yaml of a run as key → value text (top-level scalar and flow-list lines). A value the run did not set (the
/// recipe's, written as a comment "# key: value  # not set: ...") is read too, with its key prefixed by "# ".
std::map<std::string, std::string> read_config_yaml(const fs::path& output_dir) {
  std::map<std::string, std::string> out;
  std::ifstream in(output_dir / "config.yaml");
  for (std::string line; std::getline(in, line);) {
    const bool derived = line.starts_with("# ") && line.find("  # not set") != std::string::npos;
    if (derived) line = line.substr(2, line.find("  # not set") - 2);
    const auto colon = line.find(": ");
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    out[(derived ? "# " : "") + line.substr(0, colon)] = line.substr(colon + 2);
  }
  return out;
}

}  // namespace

/// A short tiny-task run: 2 steps of 4 prompts, a 4-problem evaluation.
const std::string kQuick = "--steps 2 --prompts 4 --eval-every 0 --eval-problems 4 --eval-samples 1 --save-every 0 ";

TEST_CASE("r1_zero --eval-greedy: a greedy decode per held-out problem beside the sampled pass@1", "[examples][config]") {
  // 30 steps take the tiny task's greedy accuracy from 0 to about 0.47 (32 problems), so the checks below compare
  // numbers that can differ.
  const std::string base = "--steps 30 --eval-every 30 --eval-problems 32 --save-every 0 --eval-greedy ";
  // At evaluation temperature 0 the sampled pass is itself greedy: the two accuracies are one number, twice.
  const auto greedy_dir = scratch("eval_greedy_t0");
  REQUIRE(r1_zero(base + "--eval-samples 2 --eval-temperature 0", greedy_dir).status == 0);
  const auto greedy = read_metrics(greedy_dir);
  CHECK(greedy.at(0).at("eval/greedy_accuracy") == greedy.at(0).at("eval/mean_accuracy"));
  CHECK(greedy.at(30).at("eval/greedy_accuracy") == greedy.at(30).at("eval/mean_accuracy"));
  CHECK(greedy.at(30).at("eval/greedy_accuracy") >= 0.25);  // measured 0.47
  // The greedy pass does not depend on the evaluation temperature; at temperature 3 the samples are near chance.
  const auto hot_dir = scratch("eval_greedy_t3");
  const auto hot_run = r1_zero(base + "--eval-samples 2 --eval-temperature 3", hot_dir);
  REQUIRE(hot_run.status == 0);
  CHECK_THAT(hot_run.out, Catch::Contains("eval step   30: greedy accuracy"));
  const auto hot = read_metrics(hot_dir);
  CHECK(hot.at(0).at("eval/greedy_accuracy") == greedy.at(0).at("eval/greedy_accuracy"));
  CHECK(hot.at(30).at("eval/greedy_accuracy") == greedy.at(30).at("eval/greedy_accuracy"));
  CHECK(hot.at(30).at("eval/mean_accuracy") <= hot.at(30).at("eval/greedy_accuracy") - 0.2);  // measured 0.05
  // Without the flag there is no greedy pass.
  const auto plain_dir = scratch("eval_no_greedy");
  REQUIRE(r1_zero("--steps 1 --prompts 4 --eval-every 0 --eval-problems 4 --save-every 0", plain_dir).status == 0);
  CHECK(read_metrics(plain_dir).at(0).count("eval/greedy_accuracy") == 0);
}

TEST_CASE("r1_zero: the values of a loss recipe apply unless overridden (--loss gspo trains the GSPO clip range)",
          "[examples][config]") {
  const std::string& quick = kQuick;
  // --loss gspo trains with GSPO's ε (3e-4 / 4e-4): the same numbers as giving them explicitly.
  const auto gspo = scratch("gspo"), gspo_explicit = scratch("gspo_explicit");
  REQUIRE(r1_zero(quick + "--loss gspo", gspo).status == 0);
  REQUIRE(r1_zero(quick + "--loss gspo --epsilon 3e-4 --epsilon-high 4e-4", gspo_explicit).status == 0);
  for (std::int64_t step = 1; step <= 2; ++step) {
    CHECK(deterministic(read_metrics(gspo).at(step)) == deterministic(read_metrics(gspo_explicit).at(step)));
  }
  auto config = read_config_yaml(gspo);
  CHECK(config.at("# epsilon") == "0.0003");  // the recipe's: a comment, so a rerun with another recipe takes its own
  CHECK(config.at("# epsilon_high") == "0.0004");
  // grpo: its own symmetric ε and β (a reference model, so a KL metric); --epsilon alone keeps it symmetric.
  const auto grpo_dir = scratch("grpo");
  REQUIRE(r1_zero(quick + "--loss grpo", grpo_dir).status == 0);
  config = read_config_yaml(grpo_dir);
  CHECK(config.at("# epsilon_high") == "0.2");
  CHECK(config.at("# beta") == "0.04");
  CHECK(read_metrics(grpo_dir).at(2).count("kl") == 1);
  REQUIRE(r1_zero(quick + "--loss grpo --epsilon 0.1 --beta 0", grpo_dir).status == 0);
  config = read_config_yaml(grpo_dir);
  CHECK(config.at("# epsilon_high") == "0.1");
  CHECK(config.at("epsilon") == "0.1");
  CHECK(read_metrics(grpo_dir).at(2).count("kl") == 0);
  REQUIRE(r1_zero(quick + "--epsilon-high 0.3", grpo_dir).status == 0);  // dapo: ε_low stays the recipe's
  config = read_config_yaml(grpo_dir);
  CHECK(config.at("# epsilon") == "0.2");
  CHECK(config.at("epsilon_high") == "0.3");
}

TEST_CASE("r1_zero: --adaptive-entropy moves the logged entropy_coef by the delta, and bad bounds name the flag",
          "[examples][config]") {
  const std::string& quick = kQuick;
  // Target 100 nats is above any entropy: every optimizer step (one per trainer step here) raises the coefficient.
  const auto dir = scratch("adaptive_entropy");
  REQUIRE(r1_zero(quick + "--adaptive-entropy --entropy-coef 0.01 --entropy-target 100 --entropy-coef-delta 0.02",
                  dir).status == 0);
  const auto metrics = read_metrics(dir);
  CHECK(metrics.at(1).at("entropy_coef") == Approx(0.03).epsilon(1e-12));
  CHECK(metrics.at(2).at("entropy_coef") == Approx(0.05).epsilon(1e-12));
  CHECK(read_config_yaml(dir).at("adaptive_entropy") == "true");
  const auto bad = r1_zero(quick + "--adaptive-entropy --entropy-coef 0.5 --entropy-coef-max 0.1", scratch("bad_entropy"));
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("entropy_coef (0.5) must lie in [entropy_coef_min, entropy_coef_max]"));
}

TEST_CASE("r1_zero: verl rollout correction flags weigh and reject by the sampler's log-probs", "[examples][config]") {
  const std::string& quick = kQuick;
  // A k1 band that excludes ratio 1 rejects every token (trainer and sampler agree to rounding): nothing is trained.
  const auto none_kept = scratch("rollout_rs_all");
  REQUIRE(r1_zero(quick + "--rollout-rs token_k1 --rollout-rs-threshold 1.5_2", none_kept).status == 0);
  for (std::int64_t step = 1; step <= 2; ++step) CHECK(read_metrics(none_kept).at(step).at("num_tokens") == 0.0);
  // A wide band keeps them, and token-level IS weights near 1 are logged.
  const auto kept = scratch("rollout_rs_kept");
  REQUIRE(r1_zero(quick + "--rollout-rs token_k1 --rollout-rs-threshold 0.5_2 --rollout-is token", kept).status == 0);
  const auto metrics = read_metrics(kept);
  CHECK(metrics.at(1).at("num_tokens") > 0.0);
  CHECK(metrics.at(1).at("sampling/importance_sampling_ratio/mean") == Approx(1.0).margin(1e-3));
  const auto bad = r1_zero(quick + "--rollout-rs token_k2 --rollout-rs-threshold 0.1_1", scratch("rollout_rs_bad"));
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("rollout_rs_threshold: option 'token_k2' takes one upper bound"));
}

TEST_CASE("r1_zero: token-level estimators and KL in the reward from flags and config keys", "[examples][config]") {
  const std::string& quick = kQuick;
  // Adaptive KL in the reward: step 1 measures KL 0 (the reference is the starting policy), so β_r shrinks by the
  // clipped error 0.2 over n = 4 prompts × 8 completions sequences of the horizon 100.
  const auto dir = scratch("kl_in_reward");
  REQUIRE(r1_zero(quick + "--advantage reinforce_pp --gamma 0.95 --kl-in-reward-coef 0.01 --kl-in-reward-control "
                          "adaptive --kl-in-reward-target 0.001 --kl-in-reward-horizon 100 --kl-in-reward-estimator kl",
                  dir).status == 0);
  const auto metrics = read_metrics(dir);
  CHECK(metrics.at(1).at("actor/reward_kl_penalty") == 0.0);
  CHECK(metrics.at(1).at("actor/reward_kl_penalty_coeff") == Approx(0.01).epsilon(1e-12));
  CHECK(metrics.at(2).at("actor/reward_kl_penalty_coeff") == Approx(0.01 * (1.0 - 0.2 * 32.0 / 100.0)).epsilon(1e-12));
  const auto config = read_config_yaml(dir);
  CHECK(config.at("advantage") == "\"reinforce_pp\"");
  CHECK(config.at("kl_in_reward_coef") == "0.01");
  CHECK(config.at("gamma") == "0.95");
  // The same settings as a nested config section.
  const auto nested = scratch("kl_in_reward_nested");
  std::ofstream(nested / "run.yaml") << "advantage: optimal_token_baseline\nkl_in_reward:\n  coef: 0.02\n"
                                        "  estimator: low_var_kl\n";
  REQUIRE(r1_zero(quick + "--config " + (nested / "run.yaml").string(), nested).status == 0);
  CHECK(read_metrics(nested).at(2).at("actor/reward_kl_penalty_coeff") == 0.02);
  CHECK(read_config_yaml(nested).at("kl_in_reward_estimator") == "\"low_var_kl\"");
  // Bad values name the setting.
  auto bad = r1_zero(quick + "--kl-in-reward-control adaptive", scratch("kl_in_reward_bad"));
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("kl_in_reward (KL in the reward; beta is its coef): KL controller: adaptive control needs an initial beta > 0"));
  bad = r1_zero(quick + "--advantage remix", scratch("advantage_bad"));
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("--advantage") && Catch::Contains("remax"));
}

TEST_CASE("r1_zero: --rewards alone, and nested loss keys and reward entries in a config", "[examples][config]") {
  const std::string& quick = kQuick;
  // --rewards accuracy alone: weight 1, no format reward.
  const auto accuracy = scratch("accuracy_only");
  const auto run = r1_zero(quick + "--rewards accuracy", accuracy);
  INFO(run.out);
  REQUIRE(run.status == 0);
  CHECK(read_metrics(accuracy).at(2).count("rewards/accuracy/mean") == 1);
  CHECK(read_metrics(accuracy).at(2).count("rewards/format/mean") == 0);
  CHECK(read_config_yaml(accuracy).at("# reward_weights") == "[1]");
  CHECK(read_config_yaml(accuracy).at("rewards") == "[\"accuracy\"]");
  auto bad = r1_zero(quick + "--rewards accuracy,format --reward-weights 1", accuracy);
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("--reward-weights: 1 weights for 2 rewards"));

  // Nested loss keys and reward entries in a config (docs/training_helpers.md's schema), checked and applied.
  const auto nested = scratch("nested");
  std::ofstream(nested / "base.yaml") << "loss: {type: grpo, beta: 0.04, epsilon: 0.2}\nrewards: [{name: accuracy}]\n";
  std::ofstream(nested / "dapo.yaml")
      << "extends: base.yaml\nloss: {type: dapo, epsilon_high: 0.28}\n"
         "rewards: [{name: accuracy}, {name: format, weight: 0.5}]\n";
  const auto layered = r1_zero(quick + "--config " + (nested / "dapo.yaml").string(), nested / "out");
  INFO(layered.out);
  REQUIRE(layered.status == 0);
  const auto config = read_config_yaml(nested / "out");
  CHECK(config.at("loss") == "\"dapo\"");
  CHECK(config.at("beta") == "0.04");          // the base's loss.beta
  CHECK(config.at("epsilon") == "0.2");        // the base's loss.epsilon
  CHECK(config.at("epsilon_high") == "0.28");
  CHECK_THAT(config.at("rewards"), Catch::Contains("\"weight\":0.5"));
  CHECK(read_metrics(nested / "out").at(2).count("rewards/format/mean") == 1);
  bad = r1_zero(quick + "--config " + (nested / "dapo.yaml").string() + " --set loss.epsilonn=0.1", nested / "bad");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("--set loss.epsilonn=0.1: unknown field 'loss.epsilonn'"));
  CHECK(!fs::exists(nested / "bad" / "metrics.jsonl"));  // nothing half-written
  // A later layer naming the same setting wins: --set beta=0 over the base's loss.beta (no reference, no KL).
  const auto overridden = r1_zero(quick + "--config " + (nested / "dapo.yaml").string() + " --set beta=0", nested / "beta0");
  INFO(overridden.out);
  REQUIRE(overridden.status == 0);
  CHECK(read_config_yaml(nested / "beta0").at("beta") == "0");
  CHECK(read_metrics(nested / "beta0").at(2).count("kl") == 0);
  // Two spellings of one setting in the files: an error naming both places.
  std::ofstream(nested / "twice.yaml") << "extends: base.yaml\nbeta: 0\n";
  bad = r1_zero("--config " + (nested / "twice.yaml").string(), nested / "bad");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("twice.yaml:2: 'beta' and ") &&
                          Catch::Contains("base.yaml:1: 'loss.beta' set the same setting (--beta)"));
  // A --no- flag as a key, and a reward entry the registry does not know: errors with the place.
  std::ofstream(nested / "negated.yaml") << "steps: 1\nno_tensorboard: true\n";
  bad = r1_zero("--config " + (nested / "negated.yaml").string(), nested / "bad");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("negated.yaml:2: field 'no_tensorboard': write 'tensorboard: false'"));
  std::ofstream(nested / "typo.yaml") << "steps: 1\nrewards: [{name: acuracy}]\n";
  bad = r1_zero("--config " + (nested / "typo.yaml").string(), nested / "bad");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("typo.yaml:2: 'rewards'") && Catch::Contains("acuracy"));
  bad = r1_zero(quick + "--set loss.type=ppo", nested / "bad");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("--set loss.type=ppo: field 'loss.type'") &&
                          Catch::Contains("unknown loss recipe 'ppo'"));

  // The two files of docs/training_helpers.md as written there, with a real model directory and data file.
  const auto model_dir = tiny_qwen_checkpoint();
  if (!model_dir) return;
  std::ofstream(nested / "doc_base.yaml") << "model: {dir: " << model_dir->string() << "}\n"
                                          << "data: " << grpo::testing::source_dir() << "/examples/data/math.jsonl\n"
                                          << "loss: {type: grpo, beta: 0.04, epsilon: 0.2}\nrewards: [{name: accuracy}]\n";
  std::ofstream(nested / "doc_dapo.yaml") << "extends: doc_base.yaml\nloss: {type: dapo, epsilon_high: 0.28}\n"
                                             "rewards: [{name: accuracy}, {name: format, weight: 0.5}]\n";
  const auto documented = r1_zero("--config " + (nested / "doc_dapo.yaml").string() +
                                      " --steps 1 --prompts 2 --group-size 2 --max-new-tokens 4 --held-out 1 --eval-every 0"
                                      " --eval-samples 1 --save-every 0 --threads 1",
                                  nested / "doc");
  INFO(documented.out);
  REQUIRE(documented.status == 0);
  CHECK(read_metrics(nested / "doc").at(1).count("rewards/format/mean") == 1);
  CHECK(read_metrics(nested / "doc").at(1).count("kl") == 1);  // β 0.04 from the base: a reference
}

TEST_CASE("r1_zero: the config.yaml a run writes, given back to --config, runs the same run", "[examples][config]") {
  // Stages, dynamic sampling, adaptive KL, chunks and a recipe's resolved values.
  const auto first = scratch("first"), again = scratch("again");
  std::ofstream(first / "stages.yaml") << "stages:\n  - {max_new_tokens: 6}\n  - {at_step: 2, max_new_tokens: 8}\n";
  const auto original = r1_zero("--steps 3 --prompts 4 --eval-every 0 --eval-problems 4 --eval-samples 1 --config " +
                                    (first / "stages.yaml").string() +
                                    " --dynamic-sampling-max-rounds 2 --beta 0.01 --kl-control adaptive"
                                    " --generation-chunks 2 --loss gspo --mu 2",
                                first / "run");
  INFO(original.out);
  REQUIRE(original.status == 0);
  const auto rerun = r1_zero("--config " + (first / "run" / "config.yaml").string(), again);
  INFO(rerun.out);
  REQUIRE(rerun.status == 0);
  const auto a = read_metrics(first / "run"), b = read_metrics(again);
  for (std::int64_t step = 1; step <= 3; ++step) {
    INFO("step " << step);
    CHECK(deterministic(a.at(step)) == deterministic(b.at(step)));
  }
  CHECK(a.at(3).at("context/max_new_tokens") == 8);
  // The recipe's values were comments: the same config with another recipe takes that recipe's clip range.
  const auto cispo = r1_zero("--config " + (first / "run" / "config.yaml").string() + " --loss cispo --steps 1",
                             first / "cispo");
  INFO(cispo.out);
  REQUIRE(cispo.status == 0);
  CHECK(read_config_yaml(first / "cispo").at("# epsilon_high") == "5");
  // Its own config.yaml into its own directory would overwrite the run: refused.
  const auto onto_itself = grpo::testing::run_command(std::string(grpo::testing::r1_zero_path()) + " --config " +
                                                      (first / "run" / "config.yaml").string() + " --output-dir " +
                                                      (first / "run").string() + " 2>&1");
  CHECK(onto_itself.status != 0);
  CHECK_THAT(onto_itself.out, Catch::Contains("this run would overwrite the run it repeats"));
  CHECK(!fs::exists(first / "run" / "config.yaml.tmp"));
}

TEST_CASE("r1_zero --roll-config: a ROLL rlvr_config.yaml runs, and every key it does not use is listed with why",
          "[examples][domains][config]") {
  const auto model_dir = tiny_qwen_checkpoint();
  if (!model_dir) return;
  using grpo::testing::FakeServer;
  FakeServer judge({{200, grpo::testing::chat_body("YES")}}, 1000, std::chrono::seconds(300));
  // Written from ROLL's examples/qwen2.5-7B-rlvr_megatron/rlvr_config.yaml (alibaba/ROLL 8eb27cc), made small, on the
  // three example data files; the ifeval worker section is not in the mix, as in ROLL's own example.
  const auto dir = scratch("roll_config");
  std::ofstream(dir / "rlvr_config.yaml")
      << "hydra:\n  run:\n    dir: .\n  output_subdir: null\n"
         "defaults:\n  - ../config/deepspeed_zero@_here_\n"
         "exp_name: \"qwen2.5-7B-rlvr-config\"\nseed: 42\nlogging_dir: ./output/logs\noutput_dir: ./output\n"
         "num_gpus_per_node: 8\nmax_steps: 2\nsave_steps: 100\nlogging_steps: 1\neval_steps: 10\n"
         "resume_from_checkpoint: false\nrollout_batch_size: 4  # prompt\nprompt_length: 2048\n"
         "response_length: 12\nnum_return_sequences_in_group: 2\nppo_epochs: 1\nadv_estimator: \"grpo\"\n"
         "loss_agg_mode: seq-mean-token-mean\nvalue_clip: 0.5\nreward_clip: 10\nadvantage_clip: 2.0\n"
         "dual_clip_loss: true\nnorm_mean_type: ~\nnorm_std_type: ~\nmax_len_mask: true\ndifficulty_mask: true\n"
         "difficulty_low_threshold: 0.1\ndifficulty_high_threshold: 0.95\nadd_token_level_kl: true\n"
         "init_kl_coef: 0.01\ntarget_kl: 0.1\nkl_horizon: 1000\nwhiten_advantages: true\npg_clip: 0.2\n"
         "pretrain: " << model_dir->string() << "\nreward_pretrain: Qwen/Qwen2.5-7B\n"
         "validation:\n  data_args:\n    template: qwen2_5\n    file_name:\n      - examples/data/math.jsonl\n"
         "  generating_args:\n    max_new_tokens: ${response_length}\n    top_p: 0.6\n    top_k: 50\n"
         "    temperature: 0.6\n    num_return_sequences: 1\n"
         "actor_train:\n  model_args:\n    dtype: bf16\n  training_args:\n    learning_rate: 1.0e-3\n"
         "    weight_decay: 0\n    per_device_train_batch_size: 1\n    gradient_accumulation_steps: 32\n"
         "    warmup_steps: 0\n  data_args:\n    template: qwen2_5\n    file_name:\n"
         "      - examples/data/math.jsonl\n      - examples/data/code.jsonl\n      - examples/data/general.jsonl\n"
         "    domain_interleave_probs:\n      math_rule: 0.5\n      code_sandbox: 0.25\n      llm_judge: 0.25\n"
         "    messages: messages\n  strategy_args:\n    strategy_name: megatron_train\n"
         "actor_infer:\n  generating_args:\n    max_new_tokens: ${response_length}\n    top_p: 0.99\n"
         "    top_k: 100\n    temperature: 0.99\n    num_return_sequences: ${num_return_sequences_in_group}\n"
         "reference:\n  strategy_args:\n    strategy_name: megatron_infer\n"
         "rewards:\n"
         "  math_rule:\n    worker_cls: roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker\n"
         "    tag_included: [math]\n"
         "    query_filter_config:\n      type: mean_filter\n      filter_args:\n        threshold_up: 0.9\n"
         "        threshold_down: 0.1\n"
         "  code_sandbox:\n    use_local: true\n"
         "    worker_cls: roll.pipeline.rlvr.rewards.code_sandbox_reward_worker.CodeSandboxRewardWorker\n"
         "    tag_included: [code]\n"
         "    query_filter_config:\n      type: std_filter\n      filter_args:\n        std_threshold: 0\n"
         "  llm_judge:\n    worker_cls: roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker\n"
         "    judge_prompt: Qwen2.5-7B-Instruct-RLVR-prompt\n    tag_included: [general]\n"
         "    model_args:\n      model_name_or_path: virtuoussy/Qwen2.5-7B-Instruct-RLVR\n"
         "  ifeval:\n    worker_cls: roll.pipeline.rlvr.rewards.ifeval_rule_reward_worker.GeneralRuleRewardWorker\n"
         "    tag_included: [ifeval]\n";
  const auto out = dir / "run";
  const auto run = r1_zero_in_source(judge_env(judge),
                                     "--roll-config " + (dir / "rlvr_config.yaml").string() +
                                         " --held-out 1 --eval-problems 2 --eval-samples 1 --threads 1 --lr 1e-3",
                                     out);
  INFO(run.out);
  REQUIRE(run.status == 0);
  // The report: each key not used, at its line, with the reason.
  for (const std::string expected :
       {"rlvr_config.yaml:18: prompt_length: prompts are not dropped by length here",
        "max_len_mask: mask truncated completions with a context stage",
        "validation.data_args.template: the model's own chat template",
        "validation.generating_args.max_new_tokens: evaluation uses the run's completion limit",
        "reference.strategy_args.strategy_name: infrastructure",
        "value_clip: a critic's setting: read with adv_estimator gae",
        "rewards.ifeval: not in domain_interleave_probs",
        "rewards.code_sandbox.use_local: not a setting this converter maps"}) {
    CHECK_THAT(run.out, Catch::Contains(expected));
  }
  // What it maps: the config.yaml the run wrote, and the metrics.
  const auto config = read_config_yaml(out);
  CHECK(config.at("steps") == "2");
  CHECK(config.at("prompts") == "4");
  CHECK(config.at("group_size") == "2");
  CHECK(config.at("max_new_tokens") == "12");
  CHECK(config.at("loss") == "\"grpo\"");
  CHECK(config.at("epsilon") == "0.2");
  CHECK(config.at("dual_clip") == "1.4");
  CHECK(config.at("advantage_clip") == "2");
  CHECK(config.at("reward_clip") == "10");
  CHECK(config.at("kl_in_reward_coef") == "0.01");
  CHECK(config.at("kl_in_reward_control") == "\"adaptive\"");
  CHECK(config.at("top_k") == "100");
  CHECK(config.at("eval_temperature") == "0.6");
  CHECK(config.at("difficulty_mask") == "[0.1, 0.95]");
  CHECK(config.at("whiten_advantages") == "true");
  CHECK(config.at("eval_top_k") == "50");
  CHECK(config.at("validation_data") == "[\"examples/data/math.jsonl\"]");
  // ROLL's per-domain query filters: per-domain dynamic sampling with each domain's filter (llm_judge has none:
  // it keeps every group, as ROLL's no_filter).
  CHECK(config.at("dynamic_sampling_per_domain") == "true");
  CHECK(config.at("dynamic_sampling_max_rounds") == "8");
  const std::string domains = config.at("domains");
  CHECK_THAT(domains,
             Catch::Contains(R"("dynamic_sampling_filter":{"min_std":-1,"mean_above":0.1,"mean_below":0.9}},"code_sandbox")") &&
                 Catch::Contains(R"("dynamic_sampling_filter":{"min_std":0}},"llm_judge")") &&
                 Catch::Contains(R"("dynamic_sampling_filter":{"min_std":-1}}})"));
  const auto metrics = read_metrics(out);
  // P = 4 at 0.5/0.25/0.25: llm_judge's one group a step always passes (the fake judge says YES to all: std 0 > -1);
  // no code completion of 12 tokens passes a test, and std 0 <= std_threshold 0 drops every code group.
  CHECK(metrics.at(1).at("dynamic_sampling/llm_judge/kept_groups") == 1.0);
  CHECK(metrics.at(1).at("dynamic_sampling/code_sandbox/kept_groups") == 0.0);
  CHECK(metrics.at(1).count("dynamic_sampling/math_rule/kept_groups") == 1);
  CHECK(metrics.at(1).at("actor/reward_kl_penalty_coeff") == Approx(0.01));
  for (const std::string domain : {"math_rule", "code_sandbox", "llm_judge"}) {
    CHECK(metrics.at(1).count("domains/" + domain + "/reward/mean") == 1);
  }
  // The command line wins over the ROLL file.
  const auto again = r1_zero_in_source(judge_env(judge),
                                       "--roll-config " + (dir / "rlvr_config.yaml").string() +
                                           " --held-out 1 --eval-problems 1 --eval-samples 1 --threads 1 --steps 1",
                                       dir / "again");
  INFO(again.out);
  REQUIRE(again.status == 0);
  CHECK(read_config_yaml(dir / "again").at("steps") == "1");
}

TEST_CASE("grpo train runs the demo as r1_zero does: the same metrics, completions and held-out accuracy",
          "[examples][config]") {
#ifdef GRPO_HAVE_CLI
  // One option table and one set of parts: the tool and the example differ only in who writes the loop (r1_zero
  // calls the phases one by one, grpo train calls step()).
  const std::string args = " --steps 6 --eval-every 3 --eval-problems 64 --log-completions 8";
  const auto example = scratch("demo_r1_zero"), tool = scratch("demo_grpo_train");
  const auto a = r1_zero(args, example);
  REQUIRE(a.status == 0);
  const auto b = grpo::testing::run_command(std::string(grpo::testing::cli_path()) + " train --output-dir " + tool.string() + args +
                                            " 2>&1");
  INFO(b.out);
  REQUIRE(b.status == 0);
  const auto curve = [](const std::string& out) { return out.substr(out.rfind("held-out accuracy by step:")); };
  CHECK(curve(a.out) == curve(b.out));
  const auto ma = read_metrics(example), mb = read_metrics(tool);
  REQUIRE(ma.size() == mb.size());
  for (const auto& [step, metrics] : ma) CHECK(deterministic(metrics) == deterministic(mb.at(step)));
  CHECK(grpo::io::read_file(example / "completions.jsonl") == grpo::io::read_file(tool / "completions.jsonl"));
  // grpo train --config on r1_zero's config.yaml runs the same run again.
  const auto again = scratch("demo_grpo_train_config");
  const auto c = grpo::testing::run_command(std::string(grpo::testing::cli_path()) + " train --config " +
                                            (example / "config.yaml").string() + " --output-dir " + again.string() +
                                            " 2>&1");
  INFO(c.out);
  REQUIRE(c.status == 0);
  CHECK(curve(c.out) == curve(a.out));
  const auto help = grpo::testing::run_command(std::string(grpo::testing::cli_path()) + " train --help 2>&1");
  CHECK(help.status == 0);
  CHECK_THAT(help.out, Catch::Contains("grpo train [options]") && Catch::Contains("--kl-target NUMBER"));
#else
  SUCCEED("built without tools/ (GRPO_BUILD_TOOLS=OFF)");
#endif
}

// The tiny lookup task (agent/tiny_lookup_task.hpp) runs multi-turn tool rollouts through the whole run: its steps,
// checkpoints and resume.
// The tiny lookup task's learning test: with the tool GRPO lifts held-out accuracy from about the no-tool level (0.1)
// to the task learned; with every call answered by an error (--env no_tools) it cannot. Measured (temperature 0.05,
// 128 problems, docs/testing.md): after 150 steps 1.000 on seeds 1-3 and on the restricted CPU path (start
// 0.03-0.13); without the tool at most 0.16 at any evaluation. With GRPO_TEST_ZERO_LR=1 the check after >= 0.9 fails.
TEST_CASE("r1_zero --task tiny_lookup: GRPO learns to use the tool (held-out accuracy from the no-tool level to "
          "0.9 and more), and without the tool it stays there", "[examples][agent]") {
  const std::string args = " --task tiny_lookup --steps 150 --eval-every 150 --save-every 0" + kLearningEval +
                           grpo::testing::learning_rate_flag("");
  const auto with_tool = scratch("lookup_learns");
  auto run = r1_zero(args, with_tool);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(with_tool);
  CHECK(metrics.at(0).at("eval/mean_accuracy") <= 0.25);
  const double after = metrics.at(150).at("eval/mean_accuracy");
  CHECK(after >= 0.9);
  const auto without_tool = scratch("lookup_no_tools");
  run = r1_zero(args + " --env no_tools", without_tool);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto control = read_metrics(without_tool);
  CHECK(control.at(150).at("eval/mean_accuracy") <= 0.25);
  // The switch itself, on the starting policy's calls (one per trajectory): answered with the tool's value, or with an
  // error. Not every call: a call written in the last allowed turn is not run, and later policies may stop calling.
  CHECK(metrics.at(1).at("multi_turn/failed_call_fraction") <= 0.05);
  CHECK(control.at(1).at("multi_turn/failed_call_fraction") >= 0.95);
}

TEST_CASE("r1_zero --task tiny_lookup: multi-turn tool rollouts pipelined (the generator rebuilt over the sampler "
          "copy) equal the synchronous run at staleness 0, and run one step off",
          "[examples][agent][pipeline]") {
  const std::string args = " --task tiny_lookup --steps 4 --eval-every 0 --eval-problems 8 --save-every 0";
  const auto sync_dir = scratch("lookup_sync"), piped_dir = scratch("lookup_piped"), off_dir = scratch("lookup_off");
  REQUIRE(r1_zero(args, sync_dir).status == 0);
  auto run = r1_zero(args + " --max-staleness 0", piped_dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto sync = read_metrics(sync_dir), piped = read_metrics(piped_dir);
  for (std::int64_t step = 1; step <= 4; ++step) {
    INFO("step " << step);
    auto mine = deterministic(piped.at(step));
    std::erase_if(mine, [](const auto& entry) { return entry.first.starts_with("pipeline/"); });
    CHECK(mine == deterministic(sync.at(step)));
    CHECK(mine.contains("multi_turn/failed_call_fraction"));
  }
  run = r1_zero(args + " --max-staleness 1 --off-policy-correction bypass", off_dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  CHECK(read_metrics(off_dir).at(3).at("pipeline/staleness") == 1.0);
}

TEST_CASE("r1_zero --task tiny_lookup: a run resumed mid-run equals the uninterrupted one", "[examples][agent]") {
  const std::string args = " --task tiny_lookup --eval-every 0 --eval-problems 8 --save-every 1 --keep-last 0";
  const auto straight = scratch("lookup_straight"), resumed = scratch("lookup_resumed");
  auto run = r1_zero(args + " --steps 6", straight);
  INFO(run.out);
  REQUIRE(run.status == 0);
  REQUIRE(r1_zero(args + " --steps 3", resumed).status == 0);
  run = r1_zero(args + " --steps 6 --resume", resumed);
  INFO(run.out);
  REQUIRE(run.status == 0);
  CHECK(grpo::io::read_file(straight / "checkpoints" / "checkpoint-6" / "model.safetensors") ==
        grpo::io::read_file(resumed / "checkpoints" / "checkpoint-6" / "model.safetensors"));
  const auto a = read_metrics(straight), b = read_metrics(resumed);
  for (std::int64_t step = 4; step <= 6; ++step) {
    INFO("step " << step);
    CHECK(deterministic(b.at(step)) == deterministic(a.at(step)));
    CHECK(a.at(step).at("multi_turn/turns") > 1.0);  // trajectories of more than one turn were resumed
  }
}

TEST_CASE("r1_zero --env: tools on a Hugging Face checkpoint's chat template, and bad settings name the flag",
          "[examples][agent]") {
  const auto dir = scratch("env");
  for (const auto& [flags, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--env calculator", "--env needs --task tiny_lookup or data"},
           {"--task tiny_lookup --env calculator", "--task tiny_lookup: --env must be lookup"},
           {"--task tiny_lookup --max-turns 0", "--max-turns"},
           {"--task tiny_lookup --tool-step-timeout -1", "--tool-step-timeout"}}) {
    INFO(flags);
    const auto r = r1_zero(flags + " --steps 1", dir);
    CHECK(r.status != 0);
    CHECK_THAT(r.out, Catch::Contains(expected));
  }
  const auto model = tiny_qwen_checkpoint();
  if (!model) return;
  std::ofstream(dir / "data.jsonl") << R"({"problem": "What is $12 \\cdot 34$?", "solution": "\\boxed{408}"})" "\n"
                                    << R"({"problem": "What is $7+8$?", "solution": "\\boxed{15}"})" "\n"
                                    << R"({"problem": "What is $9-4$?", "solution": "\\boxed{5}"})" "\n";
  const std::string data = " --model " + model->string() + " --data " + (dir / "data.jsonl").string() +
                           " --held-out 1 --prompts 2 --group-size 2 --max-new-tokens 6 --eval-every 0 --save-every 0"
                           " --log-completions 4 --steps 1";
  auto r = r1_zero(data + " --env nonsense", dir / "unknown");
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("--env: unknown environment 'nonsense' (known: calculator, lookup, no_tools"));
  const auto run_dir = dir / "calculator";
  r = r1_zero(data + " --env calculator", run_dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  // The prompts announce the calculator in the chat template's tools block, and the step logs the rollouts' turns.
  const auto completions = read_completions(run_dir);
  REQUIRE(!completions.empty());
  CHECK_THAT(completions.front().prompt, Catch::Contains("<tools>") && Catch::Contains("\"name\": \"calculator\""));
  const auto metrics = read_metrics(run_dir);
  CHECK(metrics.at(1).at("multi_turn/turns") >= 1.0);
  CHECK(metrics.at(1).count("multi_turn/end/answer") == 1);
}
