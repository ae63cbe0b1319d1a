// SPDX-License-Identifier: Apache-2.0
// The ROLL converter (train/roll_config.hpp) on ROLL query filters, without a training run (the
// whole-run test with three domains is in r1_zero_test.cpp): ROLL's defaults (user_defined_rollout_loop.py
// query_filter) become dynamic-sampling settings, and a type ROLL does not have is an error naming its line.
#include <grpo/train/roll_config.hpp>

#include <catch2/catch.hpp>

#include <map>
#include <string>

namespace {

/// The converted settings, by run-setting key (one value each).
std::map<std::string, std::string> settings_of(const std::string& yaml) {
  const auto root = grpo::io::parse_config(yaml, "rlvr_config.yaml");
  std::map<std::string, std::string> out;
  for (const auto& s : grpo::train::convert_roll_config(root).settings) out[s.key] = s.values.empty() ? "" : s.values[0];
  return out;
}

const std::string kOneDomain =
    "actor_train:\n  data_args:\n    file_name: [math.jsonl]\n"
    "rewards:\n  math_rule:\n    worker_cls: roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker\n";

}  // namespace

TEST_CASE("ROLL config conversion: one domain's query_filter_config is the run's dynamic-sampling filter",
          "[examples][config]") {
  // std_filter: std <= std_threshold drops; no mean condition.
  auto s = settings_of(kOneDomain + "    query_filter_config:\n      type: std_filter\n      filter_args:\n"
                                    "        std_threshold: 0.05\n");
  CHECK(s.at("dynamic_sampling_min_std") == "0.05");
  CHECK(s.count("dynamic_sampling_mean_above") == 0);
  CHECK(s.at("dynamic_sampling_max_rounds") == std::to_string(grpo::train::kRollFilterRounds));
  // mean_filter: mean <= threshold_down or >= threshold_up drops; ROLL's threshold_down default is -1, and there is
  // no std condition (min_std -1 keeps a group of equal rewards).
  s = settings_of(kOneDomain + "    query_filter_config:\n      type: mean_filter\n      filter_args:\n"
                               "        threshold_up: 0.9\n");
  CHECK(s.at("dynamic_sampling_min_std") == "-1");
  CHECK(s.at("dynamic_sampling_mean_above") == "-1");
  CHECK(s.at("dynamic_sampling_mean_below") == "0.9");
  // no_filter (ROLL's default type) keeps every group: no dynamic sampling.
  s = settings_of(kOneDomain + "    query_filter_config:\n      type: no_filter\n");
  CHECK(s.count("dynamic_sampling_max_rounds") == 0);
  CHECK(s.count("dynamic_sampling_min_std") == 0);
  CHECK_THROWS_WITH(settings_of(kOneDomain + "    query_filter_config:\n      type: median_filter\n"),
                    Catch::Contains("rlvr_config.yaml:8: rewards.math_rule.query_filter_config.type") &&
                        Catch::Contains("'median_filter' is not a ROLL query filter (no_filter, mean_filter, std_filter)"));
}

TEST_CASE("ROLL config conversion: adv_estimator gae is PPO with a critic, at ROLL's defaults where left out",
          "[examples][config]") {
  // ROLL's PPO section (docs "Proximal Policy Optimization", RLVRConfig): λ, γ, no value clipping (~), the critic's
  // optimiser under critic.training_args.
  auto s = settings_of("adv_estimator: gae\nlambd: 0.9\ngamma: 0.99\nvalue_clip: ~\ncritic_warmup: 3\n"
                       "critic:\n  training_args:\n    learning_rate: 2.0e-6\n    weight_decay: 0.05\n");
  CHECK(s.at("advantage") == "gae");
  CHECK(s.at("gae_lambda") == "0.9");
  CHECK(s.at("gamma") == "0.99");
  CHECK(s.at("value_clip") == "0");
  CHECK(s.at("critic_warmup") == "3");
  CHECK(s.at("critic_lr") == "2.0e-6");
  CHECK(s.at("critic_weight_decay") == "0.05");
  // Left out: ROLL's λ 0.95 and no value clipping, not this trainer's defaults (λ 1, clip 0.5).
  s = settings_of("adv_estimator: gae\nvalue_clip: 0.2\n");
  CHECK(s.at("gae_lambda") == "0.95");
  CHECK(s.at("value_clip") == "0.2");
  s = settings_of("adv_estimator: gae\n");
  CHECK(s.at("value_clip") == "0");
  // GAE whitens its advantages itself (verl's rule): ROLL's whiten_advantages is not applied a second time, and
  // false (ROLL's raw GAE advantages) is reported.
  s = settings_of("adv_estimator: gae\nwhiten_advantages: true\n");
  CHECK(s.count("whiten_advantages") == 0);
  const auto raw = grpo::train::convert_roll_config(
      grpo::io::parse_config("adv_estimator: gae\nwhiten_advantages: false\n", "rlvr_config.yaml"));
  REQUIRE(raw.unmapped.size() == 1);
  CHECK_THAT(raw.unmapped[0], Catch::Contains("rlvr_config.yaml:2: whiten_advantages: false: GAE's advantages are "
                                              "whitened here"));
  // Without gae, the critic's keys are reported, not applied.
  const auto root = grpo::io::parse_config("adv_estimator: grpo\nlambd: 0.9\nvalue_clip: 0.5\n", "rlvr_config.yaml");
  const auto conversion = grpo::train::convert_roll_config(root);
  std::string unmapped;
  for (const auto& line : conversion.unmapped) unmapped += line + "\n";
  CHECK_THAT(unmapped, Catch::Contains("lambd: GAE's λ: read with adv_estimator gae") &&
                           Catch::Contains("value_clip: a critic's setting: read with adv_estimator gae"));
  for (const auto& setting : conversion.settings) CHECK(setting.key != "gae_lambda");
}
