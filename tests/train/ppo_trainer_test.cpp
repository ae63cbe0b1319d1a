// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer with a critic (advantage gae, PPO): the batch's values are the critic's of the state before each
// token, the advantages and returns of a real step equal GAE by hand (double loops over the KL-shaped token rewards
// and those values), the critic learns towards the returns with verl's metrics, the warm-up trains the critic alone,
// and a checkpoint resumes the critic bit-exactly.
#include <grpo/train/grpo_trainer.hpp>
#include <support/successor_task.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <vector>

using namespace grpo;
using testing::parameters_of;
using testing::rows_of;

namespace {

constexpr double kGamma = 0.9, kLambda = 0.8;

/// GAE (γ 0.9, λ 0.8) with a critic learning fast enough to move in one step.
testing::SuccessorRun ppo_run(const std::function<void(train::GrpoTrainerOptions&)>& configure = {}) {
  return testing::SuccessorRun(
      [&](train::GrpoTrainerOptions& o) {
        train::select_advantage(o, "gae");
        o.token_advantage.gamma = kGamma;
        o.token_advantage.lambda = kLambda;
        o.critic.learning_rate = 0.05;
        if (configure) configure(o);
      },
      /*with_critic=*/true);
}


}  // namespace

TEST_CASE("GrpoTrainer gae: the critic's values, and GAE's advantages and returns on KL-shaped rewards, by hand",
          "[train][trainer][ppo]") {
  const double beta = 0.05;
  auto run = ppo_run([&](train::GrpoTrainerOptions& o) { o.kl_in_reward = {.beta = beta, .estimator = KlEstimator::k1}; });
  auto& trainer = *run.trainer;
  REQUIRE(trainer.critic() != nullptr);
  trainer.step(1);  // the policy leaves the reference and the critic moves off its initial head
  trainer.begin_step(2);
  const auto batch = trainer.collect_groups(2);
  REQUIRE(batch.rows() == 16);
  REQUIRE(batch.old_values.defined());
  REQUIRE(batch.old_values.sizes() == batch.rollout.completion_mask.sizes());

  // V_t is the head on the hidden state of the token before completion token t (verl values[:, -T - 1 : -1]).
  torch::Tensor expected_values;
  {
    torch::NoGradGuard no_grad;
    const auto& r = batch.rollout;
    expected_values = trainer.critic()->model()->forward(r.input_ids(), r.attention_mask())
                          .narrow(1, r.prompt_length() - 1, r.completion_length());
  }
  const auto valid = batch.rollout.completion_mask != 0;
  CHECK(torch::allclose(batch.old_values.masked_select(valid), expected_values.masked_select(valid), 1e-6, 1e-7));
  CHECK(batch.old_values.masked_select(~valid).abs().sum().item<double>() == 0.0);
  // ... so the first completion token's is the value of the prompt alone, read at its last token.
  for (std::size_t b = 0; b < batch.problems.size() * 4; ++b) {
    torch::NoGradGuard no_grad;
    const auto prompt = torch::tensor(batch.problems[b / 4].prompt_ids, torch::kLong).unsqueeze(0);
    const double alone = trainer.critic()->model()->forward(prompt)[0][-1].item<double>();
    CHECK(batch.old_values[static_cast<std::int64_t>(b)][0].item<double>() == Approx(alone).epsilon(1e-5).margin(1e-6));
  }

  const auto adv = trainer.advantages(batch);
  REQUIRE(adv.advantages.sizes() == batch.rollout.completion_mask.sizes());
  REQUIRE(adv.returns.sizes() == batch.rollout.completion_mask.sizes());

  // By hand: r_t = total·[t last] − β·(old_t − ref_t); from the last token back, δ_t = r_t + γ·V_{t+1} − V_t and
  // A_t = δ_t + γλ·A_{t+1} (0 past the end), R_t = A_t + V_t; A whitened over the valid tokens (unbiased variance).
  const auto mask = rows_of(batch.rollout.completion_mask);
  const auto old_lp = rows_of(batch.old_log_probs), ref_lp = rows_of(batch.ref_log_probs);
  const auto values = rows_of(batch.old_values);
  const std::size_t B = mask.size(), T = mask[0].size();
  std::vector<std::vector<double>> raw(B, std::vector<double>(T, 0.0)), returns = raw;
  std::vector<double> flat;
  for (std::size_t b = 0; b < B; ++b) {
    std::size_t last = T;
    for (std::size_t t = 0; t < T; ++t) {
      if (mask[b][t] != 0) last = t;
    }
    double next_value = 0.0, next_advantage = 0.0;
    for (std::size_t t = T; t-- > 0;) {
      if (mask[b][t] == 0) continue;
      const double r = (t == last ? static_cast<double>(*batch.totals[b]) : 0.0) - beta * (old_lp[b][t] - ref_lp[b][t]);
      const double a = r + kGamma * next_value - values[b][t] + kGamma * kLambda * next_advantage;
      raw[b][t] = a;
      returns[b][t] = a + values[b][t];
      next_value = values[b][t];
      next_advantage = a;
      flat.push_back(a);
    }
  }
  const double n = static_cast<double>(flat.size());
  double mean = 0.0, var = 0.0;
  for (const double a : flat) mean += a / n;
  for (const double a : flat) var += (a - mean) * (a - mean) / (n - 1.0);
  const auto got = rows_of(adv.advantages), got_returns = rows_of(adv.returns);
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t t = 0; t < T; ++t) {
      INFO("row " << b << " token " << t);
      const bool here = mask[b][t] != 0;
      CHECK(got[b][t] == Approx(here ? (raw[b][t] - mean) / std::sqrt(var + 1e-8) : 0.0).epsilon(1e-6).margin(1e-9));
      CHECK(got_returns[b][t] == Approx(here ? returns[b][t] : 0.0).epsilon(1e-6).margin(1e-9));
    }
  }

  // The step: the critic's update under verl's names, and the explained variance of the values before it.
  const auto update = trainer.policy_update(batch, adv);
  REQUIRE(update.critic);
  CHECK(update.actor_updated);
  const auto report = trainer.finish_step(batch, adv, update, 1.0);
  for (const char* name : {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm",
                           "critic/lr", "critic/values/mean", "critic/returns/mean", "critic/vf_explained_var", "loss"}) {
    INFO(name);
    REQUIRE(report.by_name.count(name) == 1);
    CHECK(std::isfinite(report.by_name.at(name)));
  }
  CHECK(report.by_name.at("critic/lr") == 0.05);
  double v_sum = 0.0, d_sum = 0.0, d_squares = 0.0, r_sum = 0.0, r_squares = 0.0;
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t t = 0; t < T; ++t) {
      if (mask[b][t] == 0) continue;
      v_sum += values[b][t];
      r_sum += returns[b][t];
      r_squares += returns[b][t] * returns[b][t];
      d_sum += returns[b][t] - values[b][t];
      d_squares += (returns[b][t] - values[b][t]) * (returns[b][t] - values[b][t]);
    }
  }
  const double var_d = (d_squares - d_sum * d_sum / n) / (n - 1.0), var_r = (r_squares - r_sum * r_sum / n) / (n - 1.0);
  CHECK(report.by_name.at("critic/values/mean") == Approx(v_sum / n).epsilon(1e-9));
  CHECK(report.by_name.at("critic/returns/mean") == Approx(r_sum / n).epsilon(1e-9));
  CHECK(report.by_name.at("critic/vf_explained_var") == Approx(1.0 - var_d / (var_r + 1e-5)).epsilon(1e-9));
}

TEST_CASE("GrpoTrainer gae: the value loss falls as the critic trains on the runs' returns", "[train][trainer][ppo]") {
  auto run = ppo_run([](train::GrpoTrainerOptions& o) { o.learning_rate = 0.0; });  // a fixed policy: fixed targets
  std::vector<double> losses;
  for (std::int64_t step = 1; step <= 12; ++step) losses.push_back(run.trainer->step(step).by_name.at("critic/vf_loss"));
  const double first = (losses[0] + losses[1] + losses[2]) / 3.0, last = (losses[9] + losses[10] + losses[11]) / 3.0;
  INFO("first three " << first << ", last three " << last);
  CHECK(last < 0.5 * first);
}

TEST_CASE("GrpoTrainer gae: critic_warmup steps train the critic alone", "[train][trainer][ppo]") {
  auto run = ppo_run([](train::GrpoTrainerOptions& o) { o.critic_warmup = 2; });
  auto& trainer = *run.trainer;
  auto policy = parameters_of(trainer.module());
  auto critic = parameters_of(*trainer.critic()->model());
  for (std::int64_t step = 1; step <= 2; ++step) {
    INFO("step " << step);
    const auto report = trainer.step(step);
    CHECK(report.by_name.count("critic/vf_loss") == 1);
    CHECK(report.by_name.count("loss") == 0);  // no policy update, no policy loss
    const auto critic_now = parameters_of(*trainer.critic()->model());
    CHECK(testing::same_tensors(parameters_of(trainer.module()), policy));
    CHECK(!testing::same_tensors(critic_now, critic));
    critic = critic_now;
  }
  const auto report = trainer.step(3);
  CHECK(report.by_name.count("loss") == 1);
  CHECK(!testing::same_tensors(parameters_of(trainer.module()), policy));
}

TEST_CASE("GrpoTrainer gae: a checkpoint holds the critic, and the resumed step equals the uninterrupted one",
          "[train][trainer][ppo]") {
  const auto dir = std::filesystem::temp_directory_path() / ("grpo_ppo_checkpoint_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  train::CheckpointManager checkpoints({.directory = dir, .keep_last = 0});
  auto run = ppo_run();
  run.trainer->step(1);
  run.trainer->step(2);
  const auto path = run.trainer->save(checkpoints, 2);
  REQUIRE(path);
  CHECK(std::filesystem::is_regular_file(*path / "critic" / "model.safetensors"));
  CHECK(std::filesystem::is_regular_file(*path / "critic" / "optimizer.pt"));
  const auto uninterrupted = run.trainer->step(3);

  auto resumed = ppo_run();
  REQUIRE(resumed.trainer->restore(checkpoints) == 2);
  const auto again = resumed.trainer->step(3);
  for (const char* name : {"critic/vf_loss", "critic/grad_norm", "critic/vf_explained_var", "loss", "grad_norm"}) {
    INFO(name);
    CHECK(again.by_name.at(name) == uninterrupted.by_name.at(name));
  }
  CHECK(testing::same_tensors(parameters_of(*resumed.trainer->critic()->model()),
                              parameters_of(*run.trainer->critic()->model())));
  CHECK(testing::same_tensors(parameters_of(resumed.trainer->module()), parameters_of(run.trainer->module())));

  // A run without a critic cannot resume into one that has it: the error names the missing part.
  const auto plain_dir = dir / "plain";
  train::CheckpointManager plain_checkpoints({.directory = plain_dir, .keep_last = 0});
  testing::SuccessorRun plain([](train::GrpoTrainerOptions& o) { train::select_advantage(o, "reinforce_pp"); });
  plain.trainer->save(plain_checkpoints, 1);
  auto critic_run = ppo_run();
  CHECK_THROWS_WITH(critic_run.trainer->restore(plain_checkpoints), Catch::Contains("has no critic/"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("GrpoTrainer gae: a critic and advantage gae come together, and bad critic options are named",
          "[train][trainer][ppo]") {
  CHECK_THROWS_WITH(testing::SuccessorRun([](train::GrpoTrainerOptions& o) { train::select_advantage(o, "gae"); }),
                    Catch::Contains("advantage gae (PPO) needs a critic") &&
                        Catch::Contains("GrpoTrainerParts::critic"));
  CHECK_THROWS_WITH(testing::SuccessorRun([](train::GrpoTrainerOptions&) {}, /*with_critic=*/true),
                    Catch::Contains("a critic trains only with advantage gae"));
  train::GrpoTrainerOptions o;
  o.critic_warmup = 3;
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("critic_warmup 3 needs a critic"));
  train::select_advantage(o, "gae");
  o.validate();
  o.critic_warmup = -1;
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("critic_warmup must be >= 0"));
  o.critic_warmup = 0;
  o.token_advantage.lambda = 1.5;
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("gae lambda"));
  o.token_advantage.lambda = 1.0;
  o.critic.learning_rate = -1.0;
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("critic learning_rate"));
  o.critic.learning_rate = 1e-5;
  o.critic.loss.clip_range = -0.1;
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("value clip range"));
}
