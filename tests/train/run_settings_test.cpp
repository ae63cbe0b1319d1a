// SPDX-License-Identifier: Apache-2.0
// The run's option table (train/run_settings.hpp): every option is in --help, accepted as a config key and written to
// config.yaml, which reads back as the same settings; flags, config keys and --set reach the trainer option each is
// bound to; the recipe fills the loss values not given; errors name the flag or the file:line and key.
#include <grpo/train/run_settings.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace grpo;

namespace {

fs::path scratch(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("grpo_run_settings_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool parse(train::RunSettings& settings, std::vector<std::string> args) {
  return train::parse_run_settings(settings, args, "test [options]");
}

}  // namespace

TEST_CASE("Run option table: every option is in --help, accepted as a config key and written to config.yaml",
          "[train][config]") {
  const auto dir = scratch("table");
  std::ofstream(dir / "file.json") << "[]";
  // A value for each option without a default; every other option is given its default back.
  const std::map<std::string, std::string> samples = {
      {"model", dir.string()}, {"data", (dir / "file.json").string()}, {"prompt_field", "question"},
      {"answer_field", "answer"}, {"lora_target_modules", "[q_proj, v_proj]"}, {"lora_adapter", dir.string()},
      {"critic_model", dir.string()}, {"max_staleness", "1"},
      {"advantage_clip", "2"}, {"reward_clip", "3"}, {"dual_clip", "3"},
      {"dynamic_sampling_mean_above", "0.1"}, {"dynamic_sampling_mean_below", "0.9"},
      {"difficulty_mask", "[0.1, 0.9]"}, {"rollout_is", "token"}, {"rollout_is_threshold", "2.5"}, {"rollout_rs", "token_k1"},
      {"rollout_rs_threshold", "0.5_2.0"}, {"curriculum_start", "[0, 2]"}, {"curriculum_end", "[0, 10]"},
      {"curriculum_stages", "['10:0:5']"}, {"reward_weights", "[1, 0.5]"}, {"reward_config", (dir / "file.json").string()},
      {"eval_temperature", "0.7"}, {"validation_data", (dir / "file.json").string()},
      {"roll_config", (dir / "file.json").string()}, {"env", "calculator"}};
  train::RunSettings settings;
  const train::OptionTable table = train::run_option_table(settings);
  const std::string help = table.help("test [options]");
  std::string config;
  for (const train::OptionSpec& option : table.options()) {
    INFO(option.key);
    CHECK_THAT(help, Catch::Contains(train::flag_of(option.key)));
    for (const std::string& alias : option.aliases) CHECK_THAT(help, Catch::Contains(train::flag_of(alias)));
    const auto sample = samples.find(option.key);
    const std::string value = sample != samples.end() ? sample->second : option.yaml();
    REQUIRE_FALSE(value.empty());  // a new option without a default needs a sample above
    config += fmt::format("{}: {}\n", option.key, value);
  }
  // Every key is accepted (read, checked and stored) by the table ...
  const io::ConfigNode root = io::parse_config(config, "all.yaml");
  std::map<std::string, train::GivenValue> given;
  table.add_config(root, given);
  CHECK(given.size() == table.options().size());
  table.apply(given);
  io::reject_unread_keys(root);
  // ... and every option that config.yaml writes is there, with the value it was given.
  train::write_run_config(dir / "config.yaml", settings);
  const std::string written = read(dir / "config.yaml");
  for (const train::OptionSpec& option : table.options()) {
    INFO(option.key);
    if (option.written) CHECK_THAT(written, Catch::Contains(fmt::format("\n{}: {}\n", option.key, option.yaml())));
    if (!option.written) CHECK_THAT(written, !Catch::Contains(fmt::format("\n{}: ", option.key)));
  }
}

TEST_CASE("Run settings: config.yaml reads back as the same settings, the recipe's values as comments",
          "[train][config]") {
  const auto dir = scratch("round_trip");
  train::RunSettings first;
  REQUIRE(parse(first, {"--loss", "gspo", "--kl-target", "0.05", "--set", "mu=2", "--rollout-is", "token",
                        "--difficulty-mask", "0.1,0.9", "--output-dir", dir.string()}));
  train::write_run_config(dir / "first.yaml", first);
  const std::string text = read(dir / "first.yaml");
  CHECK_THAT(text, Catch::Contains("\n# epsilon: 0.0003  # not set: the recipe's"));  // GSPO's clip range
  train::RunSettings second;
  REQUIRE(parse(second, {"--config", (dir / "first.yaml").string(), "--output-dir", dir.string()}));
  train::write_run_config(dir / "second.yaml", second);
  CHECK(read(dir / "second.yaml") == text);
  CHECK(second.trainer.kl.target == 0.05);
  CHECK(second.trainer.mu == 2);
  CHECK(second.trainer.difficulty_mask == std::pair(0.1, 0.9));
  CHECK(second.trainer.loss.policy.epsilon_low == first.trainer.loss.policy.epsilon_low);
}

TEST_CASE("Run settings: each option reaches the member it is bound to, over the recipe where it is a loss value",
          "[train][config]") {
  train::RunSettings s;
  REQUIRE(parse(s, {"--loss", "grpo", "--epsilon", "0.3", "--kl-in-reward-coef", "0.01", "--kl-in-reward-estimator",
                    "k3", "--eval-top-k", "5", "--adaptive-entropy", "--entropy-target", "0.4", "--prompts", "12",
                    "--no-tensorboard", "--advantage", "remax", "--gamma", "0.9"}));
  CHECK(s.trainer.loss.beta == 0.04);                    // grpo's own β: not given, the recipe's
  CHECK(s.trainer.loss.policy.epsilon_low == 0.3);       // given over the recipe
  CHECK(s.trainer.loss.policy.epsilon_high == 0.3);      // a symmetric recipe: --epsilon sets both
  CHECK(s.derived.contains("beta"));
  CHECK_FALSE(s.derived.contains("epsilon"));
  CHECK(s.trainer.kl_in_reward.beta == 0.01);
  CHECK(s.trainer.kl_in_reward.estimator == KlEstimator::k3);
  CHECK(s.trainer.eval_top_k == 5);
  REQUIRE(s.trainer.adaptive_entropy);
  CHECK(s.trainer.adaptive_entropy->target == 0.4);
  CHECK(s.trainer.adaptive_entropy->delta == train::AdaptiveEntropyOptions{}.delta);  // the controller's own default
  CHECK(s.trainer.prompts_per_step == 12);
  CHECK_FALSE(s.tensorboard);
  CHECK(s.trainer.token_advantage.estimator == TokenAdvantageEstimator::remax);
  CHECK(s.trainer.token_advantage.gamma == 0.9);  // after the estimator's selection, not reset by it
  // verl's rollout correction brings verl's threshold (2) and log-ratio bound (20), not TRL's cap of 3.
  train::RunSettings verl;
  REQUIRE(parse(verl, {"--rollout-is", "sequence"}));
  CHECK(verl.trainer.loss.sampler_correction.mode == SamplerCorrectionMode::sequence_truncate);
  CHECK(verl.trainer.loss.sampler_correction.clip_max == 2.0);
  CHECK(verl.trainer.loss.sampler_correction.log_ratio_bound == 20.0);
  train::RunSettings capped;
  REQUIRE(parse(capped, {"--rollout-is-threshold", "4", "--rollout-is", "token"}));
  CHECK(capped.trainer.loss.sampler_correction.clip_max == 4.0);  // given: over verl's, whatever the flag order
  // The defaults are the trainer's own (GrpoTrainerOptions), not a copy.
  train::RunSettings defaults;
  REQUIRE(parse(defaults, {}));
  const train::GrpoTrainerOptions library;
  CHECK(defaults.trainer.steps == library.steps);
  CHECK(defaults.trainer.kl.horizon == library.kl.horizon);
  CHECK(defaults.trainer.eval_top_p == library.eval_top_p);
  CHECK(defaults.trainer.sampling.max_new_tokens == 8);  // the tiny task's limit
}

TEST_CASE("Run settings: errors name the flag, or the file:line and key, at fault", "[train][config]") {
  const auto dir = scratch("errors");
  const auto error_of = [](std::vector<std::string> args) {
    train::RunSettings s;
    try {
      parse(s, std::move(args));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of({"--steps", "0"}) == "--steps: expected a number > 0, got '0'");
  CHECK(error_of({"--seed", "-1"}) == "--seed: expected an integer >= 0, got '-1'");
  CHECK(error_of({"--top-p=2"}) == "--top-p: expected a number in [1e-06, 1], got '2'");
  CHECK_THAT(error_of({"--stepz", "3"}), Catch::Contains("unknown option '--stepz'"));
  CHECK_THAT(error_of({"--steps"}), Catch::Contains("--steps needs a value"));
  CHECK_THAT(error_of({"--steps", "3", "--steps", "4"}), Catch::Contains("given twice"));
  CHECK_THAT(error_of({"--advantage", "ppo"}), Catch::Contains("--advantage: unknown") && Catch::Contains("remax"));
  CHECK_THAT(error_of({"--difficulty-mask", "0.1"}), Catch::Contains("--difficulty-mask: expected LOW,HIGH"));
  CHECK_THAT(error_of({"--model", (dir / "none").string()}),
             Catch::Contains("--model: expected a model directory or a .gguf file"));
  std::ofstream(dir / "bad.yaml") << "steps: 3\nkl:\n  target: -1\n";
  CHECK(error_of({"--config", (dir / "bad.yaml").string()}) ==
        (dir / "bad.yaml").string() + ":3: field 'kl.target': expected a number > 0, got '-1'");
  std::ofstream(dir / "twice.yaml") << "beta: 0.1\nloss:\n  beta: 0.2\n";
  CHECK_THAT(error_of({"--config", (dir / "twice.yaml").string()}), Catch::Contains("set the same setting (--beta)"));
  std::ofstream(dir / "negated.yaml") << "no_tensorboard: true\n";
  CHECK_THAT(error_of({"--config", (dir / "negated.yaml").string()}), Catch::Contains("write 'tensorboard: false'"));
}

TEST_CASE("enum_option: any spelling of a GRPO_ENUM_NAMES enum is accepted, the canonical name is written, and an "
          "unknown one is an error naming the flag and the valid names",
          "[train][config]") {
  LossType type = LossType::dapo;
  train::OptionTable table;
  table.add(train::enum_option("loss_type", type, "how the loss is aggregated"));
  CHECK(table.options().at(0).yaml() == "\"dapo\"");
  const std::vector<std::string> alias = {"--loss-type", "seq-mean-token-mean"};  // verl's spelling
  table.apply(table.parse_command_line(alias).given);
  CHECK(type == LossType::seq_mean_token_mean);
  CHECK(table.options().at(0).yaml() == "\"seq_mean_token_mean\"");
  const std::vector<std::string> unknown = {"--loss-type", "token_sum"};
  CHECK_THROWS_WITH(table.apply(table.parse_command_line(unknown).given),
                    Catch::Contains("--loss-type") && Catch::Contains("unknown loss type 'token_sum'") &&
                        Catch::Contains("token_mean (alias token-mean)"));
  CHECK(type == LossType::seq_mean_token_mean);
}
