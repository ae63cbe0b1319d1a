// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer with a token-level estimator and with KL in the reward: the advantages of a real step equal a
// computation by hand (plain double loops over the batch's totals, mask and log-probs), ReMax's baseline is the
// reward of the greedy completion, the optimal token baseline gets Σπ² of the rollout policy, and an adaptive β_r
// follows the controller's rule on the KL each step logs.
#include <grpo/train/grpo_trainer.hpp>
#include <support/successor_task.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

using namespace grpo;

using testing::rows_of;
using testing::successor_scorer;
using Run = testing::SuccessorRun;

TEST_CASE("GrpoTrainer: REINFORCE++ on KL-shaped token rewards equals the computation by hand", "[train][trainer]") {
  const double beta = 0.05, gamma = 0.9;
  Run run([&](train::GrpoTrainerOptions& o) {
    train::select_advantage(o, "reinforce_plus_plus");  // verl's spelling
    o.token_advantage.gamma = gamma;
    o.kl_in_reward = {.beta = beta, .estimator = KlEstimator::k1};
  });
  auto& trainer = *run.trainer;
  trainer.step(1);  // the policy moves away from the reference
  trainer.begin_step(2);
  const auto batch = trainer.collect_groups(2);
  REQUIRE(batch.rows() == 16);
  REQUIRE(batch.old_log_probs.defined());
  REQUIRE(batch.ref_log_probs.defined());
  const auto adv = trainer.advantages(batch);
  REQUIRE(adv.advantages.dim() == 2);

  // By hand: r_t = total·[t last] − β·(old_t − ref_t) on valid tokens; G_t = r_t + γ·G_{t+1}; whitened over the
  // valid tokens with the unbiased variance.
  const auto mask = rows_of(batch.rollout.completion_mask);
  const auto old_lp = rows_of(batch.old_log_probs), ref_lp = rows_of(batch.ref_log_probs);
  const std::size_t B = mask.size(), T = mask[0].size();
  std::vector<std::vector<double>> returns(B, std::vector<double>(T, 0.0));
  double kl_magnitude = 0.0;
  std::vector<double> values;
  for (std::size_t b = 0; b < B; ++b) {
    std::size_t last = T;
    for (std::size_t t = 0; t < T; ++t) {
      if (mask[b][t] != 0) last = t;
    }
    double running = 0.0;
    for (std::size_t t = T; t-- > 0;) {
      if (mask[b][t] == 0) {
        running = 0.0;
        continue;
      }
      const double kl = old_lp[b][t] - ref_lp[b][t];
      kl_magnitude += std::abs(kl);
      const double r = (t == last ? static_cast<double>(*batch.totals[b]) : 0.0) - beta * kl;
      running = r + gamma * running;
      returns[b][t] = running;
      values.push_back(running);
    }
  }
  CHECK(kl_magnitude > 1e-3);  // the KL term is not trivially zero
  const double n = static_cast<double>(values.size());
  double mean = 0.0;
  for (const double v : values) mean += v;
  mean /= n;
  double var = 0.0;
  for (const double v : values) var += (v - mean) * (v - mean);
  var /= n - 1.0;
  const auto got = rows_of(adv.advantages);
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t t = 0; t < T; ++t) {
      const double expected = mask[b][t] != 0 ? (returns[b][t] - mean) / std::sqrt(var + 1e-8) : 0.0;
      INFO("row " << b << " token " << t);
      CHECK(got[b][t] == Approx(expected).epsilon(1e-6).margin(1e-9));
    }
  }
  // The step trains on them.
  const auto update = trainer.policy_update(batch, adv);
  const auto report = trainer.finish_step(batch, adv, update, 1.0);
  CHECK(std::isfinite(report.by_name.at("loss")));
  CHECK(report.by_name.at("actor/reward_kl_penalty_coeff") == beta);
}

TEST_CASE("GrpoTrainer: a group estimator with KL in the reward takes total − β·Σ KL as the sequence reward",
          "[train][trainer]") {
  const double beta = 0.1;
  Run run([&](train::GrpoTrainerOptions& o) {
    train::select_advantage(o, "dr_grpo");  // r − group mean: easy to write by hand
    o.kl_in_reward = {.beta = beta, .estimator = KlEstimator::k2};
  });
  auto& trainer = *run.trainer;
  trainer.step(1);
  trainer.begin_step(2);
  const auto batch = trainer.collect_groups(2);
  const auto adv = trainer.advantages(batch);
  REQUIRE(adv.advantages.dim() == 1);
  const auto mask = rows_of(batch.rollout.completion_mask);
  const auto old_lp = rows_of(batch.old_log_probs), ref_lp = rows_of(batch.ref_log_probs);
  std::vector<double> shaped;
  for (std::size_t b = 0; b < mask.size(); ++b) {
    double kl = 0.0;
    for (std::size_t t = 0; t < mask[b].size(); ++t) {
      if (mask[b][t] != 0) kl += 0.5 * (old_lp[b][t] - ref_lp[b][t]) * (old_lp[b][t] - ref_lp[b][t]);  // k2
    }
    shaped.push_back(static_cast<double>(*batch.totals[b]) - beta * kl);
  }
  for (std::size_t p = 0; p < shaped.size() / 4; ++p) {
    const double mean = (shaped[4 * p] + shaped[4 * p + 1] + shaped[4 * p + 2] + shaped[4 * p + 3]) / 4.0;
    for (std::size_t g = 0; g < 4; ++g) {
      CHECK(adv.advantages[static_cast<std::int64_t>(4 * p + g)].item<double>() ==
            Approx(shaped[4 * p + g] - mean).epsilon(1e-6).margin(1e-6));
    }
  }
}

TEST_CASE("GrpoTrainer: adaptive KL in the reward follows the controller's rule on the KL each step logs",
          "[train][trainer]") {
  const double target = 0.02, horizon = 40.0;
  Run run([&](train::GrpoTrainerOptions& o) {
    train::select_advantage(o, "grpo");
    o.kl_in_reward = {.beta = 0.05,
                      .control = {.type = train::KlControl::adaptive, .target = target, .horizon = horizon},
                      .estimator = KlEstimator::low_var_kl};
  });
  std::vector<double> logged_kl, logged_beta;
  for (std::int64_t step = 1; step <= 5; ++step) {
    const auto report = run.trainer->step(step);
    logged_kl.push_back(report.by_name.at("actor/reward_kl_penalty"));
    logged_beta.push_back(report.by_name.at("actor/reward_kl_penalty_coeff"));
  }
  CHECK(logged_kl[0] == 0.0);  // the reference is the starting policy
  CHECK(logged_kl.back() > 0.0);
  // ROLL/verl AdaptiveKLController.update(current_kl, n_steps = 16 sequences), step by step from the logged KL.
  double beta = 0.05;
  for (std::size_t k = 0; k < logged_kl.size(); ++k) {
    INFO("step " << k + 1);
    CHECK(logged_beta[k] == Approx(beta).epsilon(1e-12));
    const double error = std::clamp(logged_kl[k] / target - 1.0, -0.2, 0.2);
    beta *= 1.0 + error * 16.0 / horizon;
  }
  CHECK(run.trainer->reward_kl_controller().beta() == Approx(beta).epsilon(1e-12));

  // A checkpoint carries β_r: a restored run continues with it, not with the initial 0.05.
  const auto dir = std::filesystem::temp_directory_path() / ("grpo_reward_kl_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  train::CheckpointManager checkpoints({.directory = dir, .keep_last = 0});
  run.trainer->save(checkpoints, 5);
  Run resumed([&](train::GrpoTrainerOptions& o) {
    o.kl_in_reward = {.beta = 0.05,
                      .control = {.type = train::KlControl::adaptive, .target = target, .horizon = horizon},
                      .estimator = KlEstimator::low_var_kl};
  });
  REQUIRE(resumed.trainer->restore(checkpoints) == 5);
  CHECK(resumed.trainer->reward_kl_controller().beta() == run.trainer->reward_kl_controller().beta());
  std::filesystem::remove_all(dir);
}

TEST_CASE("GrpoTrainer: ReMax's baseline is the reward of each prompt's greedy completion", "[train][trainer]") {
  Run run([](train::GrpoTrainerOptions& o) { train::select_advantage(o, "remax"); });
  auto& trainer = *run.trainer;
  trainer.begin_step(1);
  const auto batch = trainer.collect_groups(1);
  REQUIRE(batch.greedy_baselines.defined());
  REQUIRE(batch.greedy_baselines.size(0) == batch.rows());

  // The greedy completion by hand: repeated argmax of the model's last logit until 7 or 4 tokens.
  const auto scorer = successor_scorer();
  for (std::size_t p = 0; p < batch.problems.size(); ++p) {
    std::vector<std::int64_t> ids = batch.problems[p].prompt_ids, completion;
    {
      torch::NoGradGuard no_grad;
      while (completion.size() < 4) {
        const auto input = torch::tensor(ids, torch::kLong).unsqueeze(0);
        const auto logits = run.model->forward(input, torch::ones_like(input));
        const std::int64_t next = logits[0][-1].argmax().item<std::int64_t>();
        ids.push_back(next);
        completion.push_back(next);
        if (next == 7) break;
      }
    }
    rewards::Completion c;
    c.token_ids = completion;
    c.text = run.task.decode(completion);
    c.row = batch.problems[p].row;
    c.truncated = completion.back() != 7;
    const double expected = *scorer.score(std::span(&c, 1)).total[0];
    for (std::int64_t g = 0; g < 4; ++g) {
      CHECK(batch.greedy_baselines[static_cast<std::int64_t>(4 * p) + g].item<double>() == Approx(expected));
    }
  }
  // A_t = total − baseline on every valid token (the outcome reward sits on the last one), 0 elsewhere.
  const auto adv = trainer.advantages(batch);
  const auto mask = rows_of(batch.rollout.completion_mask);
  const auto got = rows_of(adv.advantages);
  for (std::size_t b = 0; b < mask.size(); ++b) {
    const double a = static_cast<double>(*batch.totals[b]) - batch.greedy_baselines[static_cast<std::int64_t>(b)].item<double>();
    for (std::size_t t = 0; t < mask[b].size(); ++t) CHECK(got[b][t] == Approx(mask[b][t] != 0 ? a : 0.0).margin(1e-6));
  }
}

TEST_CASE("GrpoTrainer: the optimal token baseline gets the rollout policy's Σπ² and trains", "[train][trainer]") {
  Run run([](train::GrpoTrainerOptions& o) { train::select_advantage(o, "otb"); });
  auto& trainer = *run.trainer;
  trainer.begin_step(1);
  const auto batch = trainer.collect_groups(1);
  REQUIRE(batch.sum_pi_squared.defined());
  // Σ_v softmax(logits)_v² of every completion position, from the model's full logits in float64.
  torch::Tensor expected;
  {
    torch::NoGradGuard no_grad;
    const auto& r = batch.rollout;
    const auto logits = run.model->forward(r.input_ids(), r.attention_mask())
                            .narrow(1, r.prompt_length() - 1, r.completion_length())
                            .to(torch::kFloat64);
    expected = torch::softmax(logits, -1).square().sum(-1);
  }
  const auto valid = batch.rollout.completion_mask != 0;
  CHECK(torch::allclose(batch.sum_pi_squared.to(torch::kFloat64).masked_select(valid), expected.masked_select(valid),
                        1e-5, 1e-6));
  const auto adv = trainer.advantages(batch);
  REQUIRE(adv.advantages.sizes() == batch.rollout.completion_mask.sizes());
  CHECK(adv.advantages.masked_select(~valid).abs().max().item<double>() == 0.0);
  CHECK(torch::isfinite(adv.advantages).all().item<bool>());
  const auto update = trainer.policy_update(batch, adv);
  CHECK(std::isfinite(trainer.finish_step(batch, adv, update, 1.0).by_name.at("loss")));
}

TEST_CASE("GrpoTrainer: with a sampler correction the optimal token baseline weighs W by the squared IS weights "
          "(verl rollout_is_weights)", "[train][trainer]") {
  // Top-k sampling with the sampling distribution's log-probs: the sampler's probabilities are renormalised over the
  // kept tokens, so ρ = π_rollout / π_sampler < 1 and the truncated weights are far from 1.
  Run run([](train::GrpoTrainerOptions& o) {
    train::select_advantage(o, "otb");
    o.sampling.top_k = 3;
    o.sampling.log_probs = SamplerLogProbs::sampling_distribution;
    o.loss.sampler_correction = {.mode = SamplerCorrectionMode::token_truncate, .clip_max = 2.0};
  });
  auto& trainer = *run.trainer;
  trainer.begin_step(1);
  const auto batch = trainer.collect_groups(1);
  const auto adv = trainer.advantages(batch);
  // By hand: ρ_t = exp(old_t − sampler_t) clamped to 2, from the batch's own log-probs.
  const auto valid = batch.rollout.completion_mask != 0;
  const auto rho = (batch.old_log_probs.to(torch::kFloat64) - batch.rollout.sampler_log_probs.to(torch::kFloat64))
                       .exp()
                       .clamp_max(2.0)
                       .masked_fill(~valid, 1.0);
  CHECK((rho.masked_select(valid) < 0.95).any().item<bool>());
  std::vector<double> totals;
  for (const auto& t : batch.totals) totals.push_back(t ? static_cast<double>(*t) : NAN);
  const auto rewards = outcome_token_rewards(torch::tensor(totals, torch::kFloat64), valid);
  const auto groups = torch::arange(batch.rows(), torch::kLong).div(batch.group_size, "floor");
  const auto weighted =
      optimal_token_baseline_advantages(rewards, valid, groups, batch.old_log_probs, batch.sum_pi_squared, rho);
  const auto unweighted =
      optimal_token_baseline_advantages(rewards, valid, groups, batch.old_log_probs, batch.sum_pi_squared);
  CHECK(torch::allclose(adv.advantages, weighted, 1e-9, 1e-12));
  CHECK((adv.advantages - unweighted).abs().max().item<double>() > 1e-3);
}

TEST_CASE("select_advantage: one name picks one estimator, and bad names list both kinds", "[train][trainer]") {
  train::GrpoTrainerOptions o;
  train::select_advantage(o, "remax");
  CHECK(o.token_advantage.estimator == TokenAdvantageEstimator::remax);
  train::select_advantage(o, "rloo");
  CHECK(o.token_advantage.estimator == TokenAdvantageEstimator::none);
  CHECK(o.advantage.estimator == AdvantageEstimator::rloo);
  CHECK_THROWS_WITH(train::select_advantage(o, "remix"), Catch::Contains("remix") && Catch::Contains("rloo") && Catch::Contains("remax"));
  o.token_advantage.gamma = 1.5;
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("gamma"));
  o.token_advantage.gamma = 1.0;
  o.kl_in_reward = {.beta = 0.0, .control = {.type = train::KlControl::adaptive}};
  CHECK(!o.kl_in_reward.enabled());
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("kl_in_reward"));
}

TEST_CASE("GrpoTrainer: whiten_advantages whitens group advantages over the completion tokens, by hand",
          "[train][trainer]") {
  Run run([](train::GrpoTrainerOptions& o) {
    train::select_advantage(o, "dr_grpo");
    o.whiten_advantages = true;  // ROLL whiten_advantages
  });
  auto& trainer = *run.trainer;
  trainer.begin_step(1);
  const auto batch = trainer.collect_groups(1);
  const auto adv = trainer.advantages(batch);
  REQUIRE(adv.advantages.dim() == 1);
  // r − group mean, then (a − mean_w)/sqrt(var_w + 1e-8) with each sequence weighted by its token count (verl's
  // masked_whiten over tokens: mean over N + 1e-8, unbiased variance).
  const auto mask = rows_of(batch.rollout.completion_mask);
  std::vector<double> a(batch.totals.size()), w(batch.totals.size());
  for (std::size_t p = 0; p < a.size() / 4; ++p) {
    double mean = 0.0;
    for (std::size_t g = 0; g < 4; ++g) mean += static_cast<double>(*batch.totals[4 * p + g]) / 4.0;
    for (std::size_t g = 0; g < 4; ++g) a[4 * p + g] = static_cast<double>(*batch.totals[4 * p + g]) - mean;
  }
  double n = 0.0, sum = 0.0;
  for (std::size_t b = 0; b < a.size(); ++b) {
    for (const double m : mask[b]) w[b] += m != 0 ? 1.0 : 0.0;
    n += w[b];
    sum += w[b] * a[b];
  }
  const double mean = sum / (n + 1e-8);
  double squares = 0.0;
  for (std::size_t b = 0; b < a.size(); ++b) squares += w[b] * (a[b] - mean) * (a[b] - mean);
  const double var = squares / (n + 1e-8) * n / (n - 1.0);
  for (std::size_t b = 0; b < a.size(); ++b) {
    const double expected = w[b] > 0 ? (a[b] - mean) / std::sqrt(var + 1e-8) : 0.0;
    CHECK(adv.advantages[static_cast<std::int64_t>(b)].item<double>() == Approx(expected).epsilon(1e-9).margin(1e-9));
  }
}
