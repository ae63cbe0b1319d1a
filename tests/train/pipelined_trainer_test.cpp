// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer with pipelined rollouts (max_staleness, rollout_pipeline.hpp): at staleness 0 the pipeline gives the
// synchronous trainer's numbers bit for bit; batch j is sampled with the weights after step j − 1 − s (its sampler
// log-probs are those weights' log-probs, not the current ones'); the decoupled correction's loss and gradient equal
// the formula by hand on a batch one version behind; the worker's exception reaches the trainer; a checkpoint with
// batches in flight resumes bit-exactly; and the configuration errors name the option.
#include <grpo/models/lora.hpp>
#include <grpo/policy/policy.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <support/process_testing.hpp>
#include <support/successor_task.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace grpo;
using testing::parameters_of;
namespace fs = std::filesystem;

namespace {

/// SuccessorTask's prompts, drawn from a state the checkpoint saves and moved by the pass rates observed, so that a
/// batch depends on the batches collected before it (as a curriculum's does).
struct DriftingSource final : testing::TokenPromptSource {
  std::int64_t draws = 0;
  double observed = 0.0;
  std::int64_t fail_at_draw = -1;  // >= 0: that draw throws (a data shard that went away)
  std::vector<train::Problem> train_batch(std::int64_t /*step*/, std::int64_t count) override {
    if (draws == fail_at_draw) throw Error("the data shard is gone");
    std::vector<train::Problem> out;
    const auto shift = static_cast<std::int64_t>(std::llround(observed * 10.0));
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t t = 1 + (draws * 7 + i * 3 + shift) % 5;
      out.push_back({.prompt_ids = {t}, .prompt_text = std::to_string(t),
                     .row = std::make_shared<const rewards::Row>(rewards::Row{{"answer", std::to_string(t + 1)}})});
    }
    ++draws;
    return out;
  }
  void observe(std::span<const train::Problem> /*problems*/, std::span<const double> pass_rates,
               std::int64_t /*step*/) override {
    for (const double p : pass_rates) {
      if (std::isfinite(p)) observed = std::fmod(observed + p, 100.0);
    }
  }
  std::vector<std::pair<std::string, double>> metrics(std::int64_t /*step*/) const override {
    return {{"drift/observed", observed}};
  }
  void save_state(train::TrainerState& state) const override {
    state.values["drift/draws"] = static_cast<double>(draws);
    state.values["drift/observed"] = observed;
  }
  void load_state(const train::TrainerState& state) override {
    draws = static_cast<std::int64_t>(state.values.at("drift/draws"));
    observed = state.values.at("drift/observed");
  }
};

using Reward = std::function<double(const rewards::Completion&)>;

/// The successor task's reward: 1 for the right first token, 0.1 per character.
double successor_reward(const rewards::Completion& c) {
  const bool right = !c.text.empty() && c.text.substr(0, 1) == c.row->text("answer").value_or("");
  return (right ? 1.0 : 0.0) + 0.1 * static_cast<double>(c.text.size());
}

/// A GrpoTrainer on DriftingSource: P = 4, G = 4, up to 4 tokens, the grpo recipe without the KL term, lr 0.2 (the
/// weights move visibly every step), then `configure`'s changes; `lora` trains rank-4 adapters instead.
struct PipelinedRun {
  DriftingSource source;
  train::StepScorer scorer;
  train::ProcessGroup group{train::ProcessGroupOptions{}};
  models::CausalLM model;
  std::unique_ptr<train::GrpoTrainer> trainer;
  /// `peer` and `side`: a run with rollout ranks (rollout_ranks.hpp): the partner, and this rank's side's group.
  explicit PipelinedRun(const std::function<void(train::GrpoTrainerOptions&)>& configure, bool lora = false,
                        Reward reward = successor_reward, std::optional<train::RolloutPeer> peer = std::nullopt,
                        train::ProcessGroup* side = nullptr)
      : scorer(rewards::RewardSet({{rewards::make_reward("accuracy", std::move(reward)), 1.0}})),
        model((torch::manual_seed(3),
               models::CausalLM(testing::tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32})))) {
    if (lora) models::add_lora(model, {.rank = 4, .alpha = 8.0, .target_modules = {"q_proj", "v_proj"}});
    train::GrpoTrainerOptions o{.steps = 6, .prompts_per_step = 4, .group_size = 4, .seed = 9};
    o.sampling.max_new_tokens = 4;
    o.loss = recipes::grpo();
    o.loss.beta = 0.0;
    o.learning_rate = lora ? 0.05 : 0.2;
    configure(o);
    train::GrpoTrainerParts parts;
    parts.rollout_peer = peer;
    trainer = std::make_unique<train::GrpoTrainer>(model, source, scorer, side != nullptr ? *side : group, o, parts);
  }
};

void one_step_off(train::GrpoTrainerOptions& o) {
  o.max_staleness = 1;
  o.off_policy_correction = train::OffPolicyCorrection::bypass;
}

/// The metrics that do not measure time or the pipeline itself.
std::map<std::string, double> numbers(const train::StepReport& report) {
  std::map<std::string, double> out;
  for (const auto& [name, value] : report.scalars) {
    if (name.starts_with("timing_s/") || name.starts_with("perf/") || name.starts_with("pipeline/") ||
        name.ends_with("/seconds") || name == "step_time" || name == "tokens_per_second") {
      continue;
    }
    out[name] = value;
  }
  return out;
}

/// The metrics on which two runs differ, "name: a vs b" each ("" when they agree).
std::string differences(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  std::string out;
  for (const auto& [name, value] : a) {
    const auto other = b.find(name);
    if (other == b.end()) {
      out += name + ": only in the first; ";
    } else if (other->second != value && !(std::isnan(value) && std::isnan(other->second))) {
      out += fmt::format("{}: {} vs {}; ", name, value, other->second);
    }
  }
  for (const auto& [name, value] : b) {
    if (!a.contains(name)) out += name + ": only in the second; ";
  }
  return out;
}


/// The trainer model's log-probs of `rollout`'s completion tokens with `weights` loaded in place of its trained
/// parameters (put back afterwards), at temperature 1.
torch::Tensor log_probs_with(models::CausalLM& model, const train::WeightsSnapshot& weights, const Rollout& rollout) {
  torch::NoGradGuard no_grad;
  auto parameters = model->named_parameters();
  const train::WeightsSnapshot now = train::snapshot_trained_weights(*model);
  for (const auto& [name, value] : weights) parameters[name].copy_(value);
  Policy<models::CausalLM> policy(model, {.temperature = 1.0});
  torch::Tensor out = policy.token_log_probs(rollout).log_probs.to(torch::kCPU, torch::kFloat64);
  for (const auto& [name, value] : now) parameters[name].copy_(value);
  return out;
}

fs::path scratch(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("grpo_pipelined_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("Pipelined trainer: staleness 0 gives the synchronous trainer's metrics and weights bit for bit",
          "[train][trainer][pipeline]") {
  PipelinedRun sync([](train::GrpoTrainerOptions&) {});
  PipelinedRun piped([](train::GrpoTrainerOptions& o) { o.max_staleness = 0; });
  for (std::int64_t step = 1; step <= 6; ++step) {  // the run's steps: the pipeline admits no batch past them
    INFO("step " << step);
    const auto expected = sync.trainer->step(step);
    const auto got = piped.trainer->step(step);
    CHECK(differences(numbers(got), numbers(expected)) == "");
    CHECK(got.by_name.at("pipeline/staleness") == 0.0);
    CHECK(got.by_name.at("pipeline/weights_version") == static_cast<double>(step - 1));
  }
  CHECK(testing::same_tensors(parameters_of(*piped.model), parameters_of(*sync.model)));
  CHECK(piped.source.draws == sync.source.draws);
  CHECK(piped.source.observed == sync.source.observed);
}

TEST_CASE("Pipelined trainer: at equal versions the decoupled importance weights are 1 (to the sampler's arithmetic)",
          "[train][trainer][pipeline]") {
  PipelinedRun run([](train::GrpoTrainerOptions& o) {
    o.max_staleness = 0;
    o.off_policy_correction = train::OffPolicyCorrection::decoupled;
    o.loss.sampler_correction = verl_rollout_correction(SamplerCorrectionMode::token_truncate);
  });
  for (std::int64_t step = 1; step <= 3; ++step) {
    const auto report = run.trainer->step(step);
    CHECK(report.by_name.at("pipeline/importance_weight/mean") == Approx(1.0).margin(1e-5));
    CHECK(report.by_name.at("pipeline/importance_weight/max") == Approx(1.0).margin(1e-4));
    CHECK(report.by_name.at("pipeline/importance_weight/clipped_frac") == 0.0);
  }
}

TEST_CASE("Pipelined trainer: batch j is sampled with the weights after step j - 1 - s, by admission, on the worker",
          "[train][trainer][pipeline]") {
  const bool lora = GENERATE(false, true);
  const std::int64_t s = GENERATE(1, 2);
  INFO("lora " << lora << ", s " << s);
  std::set<std::thread::id> scoring_threads;
  std::mutex scoring_mutex;
  PipelinedRun run(
      [&](train::GrpoTrainerOptions& o) {
        o.max_staleness = s;
        o.off_policy_correction = train::OffPolicyCorrection::bypass;
      },
      lora,
      [&](const rewards::Completion& c) {
        const std::lock_guard lock(scoring_mutex);
        scoring_threads.insert(std::this_thread::get_id());
        return successor_reward(c);
      });
  auto& trainer = *run.trainer;
  std::map<std::int64_t, train::WeightsSnapshot> after;  // the trained weights after each step
  after[0] = train::snapshot_trained_weights(*run.model);
  for (std::int64_t step = 1; step <= 5; ++step) {
    INFO("step " << step);
    trainer.begin_step(step);
    const train::StepBatch batch = trainer.collect_groups(step);
    const std::int64_t version = std::max<std::int64_t>(0, step - 1 - s);
    REQUIRE(batch.weights_version == version);
    REQUIRE(batch.rows() == 16);
    // The sampler's log-probs are the log-probs of the weights after step `version`, not of the current ones.
    const torch::Tensor valid = batch.rollout.completion_mask != 0;
    const torch::Tensor sampler = batch.rollout.sampler_log_probs.to(torch::kFloat64).masked_select(valid);
    const torch::Tensor behaviour = log_probs_with(run.model, after.at(version), batch.rollout).masked_select(valid);
    CHECK((sampler - behaviour).abs().max().item<double>() < 1e-5);
    if (version < step - 1) {
      const torch::Tensor current = log_probs_with(run.model, after.at(step - 1), batch.rollout).masked_select(valid);
      CHECK((sampler - current).abs().max().item<double>() > 1e-3);
    }
    const auto adv = trainer.advantages(batch);
    const auto update = trainer.policy_update(batch, adv);
    const auto report = trainer.finish_step(batch, adv, update, 1.0);
    CHECK(report.by_name.at("pipeline/staleness") == static_cast<double>(step - 1 - version));
    CHECK(report.by_name.at("pipeline/staleness") <= static_cast<double>(s));
    after[step] = train::snapshot_trained_weights(*run.model);
  }
  // Every completion was scored on the worker's thread, none on the trainer's.
  REQUIRE(scoring_threads.size() == 1);
  CHECK(*scoring_threads.begin() != std::this_thread::get_id());
}

TEST_CASE("Pipelined trainer: the decoupled correction on a batch one version behind, loss and gradient by hand",
          "[train][trainer][pipeline]") {
  constexpr double kCap = 1.2;  // low enough that some weights are truncated
  PipelinedRun run([&](train::GrpoTrainerOptions& o) {
    o.max_staleness = 1;
    o.off_policy_correction = train::OffPolicyCorrection::decoupled;
    o.loss.sampler_correction = {.mode = SamplerCorrectionMode::token_truncate, .clip_max = kCap};
  });
  auto& trainer = *run.trainer;
  trainer.step(1);
  trainer.step(2);
  trainer.begin_step(3);
  const train::StepBatch batch = trainer.collect_groups(3);
  REQUIRE(batch.weights_version == 1);
  const auto adv = trainer.advantages(batch);
  // The proximal log-probs are the current weights' (the old log-prob pass, recomputed now), the behaviour ones the
  // sampler's (the weights after step 1).
  const torch::Tensor valid = batch.rollout.completion_mask != 0;
  const train::WeightsSnapshot current = train::snapshot_trained_weights(*run.model);
  const torch::Tensor proximal = log_probs_with(run.model, current, batch.rollout);
  REQUIRE(batch.old_log_probs.defined());
  CHECK(torch::allclose(batch.old_log_probs.to(torch::kFloat64).masked_select(valid), proximal.masked_select(valid),
                        1e-6, 1e-6));
  const auto prox = testing::rows_of(batch.old_log_probs), behave = testing::rows_of(batch.rollout.sampler_log_probs);
  const auto mask = testing::rows_of(batch.rollout.completion_mask);
  const auto advantages = adv.advantages.to(torch::kFloat64);
  // By hand (grpo: each sequence's token mean, then the mean over sequences), at θ = θ_prox (μ = 1, the ratio 1, no
  // clipping): L = −(1/B) Σ_i (1/|o_i|) Σ_t ρ_t · A_i, ρ_t = min(π_prox/π_behave, cap); ∂L/∂lp_t = −ρ_t·A_i/(B·|o_i|).
  const std::size_t B = mask.size(), T = mask[0].size();
  double loss = 0.0, truncated = 0.0, tokens = 0.0, rho_sum = 0.0;
  std::vector<std::vector<double>> gradient(B, std::vector<double>(T, 0.0));
  for (std::size_t b = 0; b < B; ++b) {
    double length = 0.0;
    for (std::size_t t = 0; t < T; ++t) length += mask[b][t] != 0 ? 1.0 : 0.0;
    if (length == 0.0) continue;
    const double a = advantages[static_cast<std::int64_t>(b)].item<double>();
    for (std::size_t t = 0; t < T; ++t) {
      if (mask[b][t] == 0) continue;
      const double raw = std::exp(prox[b][t] - behave[b][t]);
      const double rho = std::min(raw, kCap);
      truncated += raw > kCap ? 1.0 : 0.0;
      tokens += 1.0;
      rho_sum += rho;
      loss += -rho * a / length / static_cast<double>(B);
      gradient[b][t] = -rho * a / (static_cast<double>(B) * length);
    }
  }
  REQUIRE(truncated > 0.0);  // the batch is stale enough for the cap to act
  REQUIRE(truncated < tokens);
  // The loss as the trainer builds it, on a leaf copy of the proximal log-probs.
  const GrpoLoss grpo_loss([] {
    GrpoLossOptions options = recipes::grpo();
    options.beta = 0.0;
    options.sampler_correction = {.mode = SamplerCorrectionMode::token_truncate, .clip_max = kCap};
    return options;
  }());
  const torch::Tensor lp = batch.old_log_probs.to(torch::kFloat64).clone().requires_grad_(true);
  LossInputs inputs;
  inputs.log_probs = lp;
  inputs.old_log_probs = batch.old_log_probs.to(torch::kFloat64);
  inputs.advantages = advantages;
  inputs.mask = batch.rollout.completion_mask;
  inputs.sampler_log_probs = batch.rollout.sampler_log_probs.to(torch::kFloat64);
  const auto result = grpo_loss(inputs, local_normaliser(LossType::grpo, batch.rollout.completion_mask));
  CHECK(result.loss.item<double>() == Approx(loss).epsilon(1e-9).margin(1e-12));
  result.loss.backward();
  const auto got = testing::rows_of(lp.grad());
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t t = 0; t < T; ++t) CHECK(got[b][t] == Approx(gradient[b][t]).epsilon(1e-9).margin(1e-12));
  }
  // The trainer's own update on the batch: the same loss (its forward recomputes lp, equal to the proximal one up to
  // the forward's arithmetic), and the pipeline's importance-weight metrics.
  const auto update = trainer.policy_update(batch, adv);
  const auto report = trainer.finish_step(batch, adv, update, 1.0);
  CHECK(report.by_name.at("loss") == Approx(loss).epsilon(1e-4).margin(1e-6));
  CHECK(report.by_name.at("sampling/importance_sampling_ratio/mean") == Approx(rho_sum / tokens).epsilon(1e-5));
  CHECK(report.by_name.at("pipeline/importance_weight/clipped_frac") == Approx(truncated / tokens).epsilon(1e-12));
  CHECK(report.by_name.at("pipeline/staleness") == 1.0);
}

TEST_CASE("Pipelined trainer: an exception in the generation worker reaches the trainer", "[train][trainer][pipeline]") {
  PipelinedRun run(one_step_off);
  run.source.fail_at_draw = 2;  // batch 3's prompts, drawn on the worker while step 2 trains
  CHECK_NOTHROW(run.trainer->step(1));
  CHECK_NOTHROW(run.trainer->step(2));  // collected before the failure: still good
  CHECK_THROWS_WITH(run.trainer->step(3), Catch::Contains("the data shard is gone"));
  CHECK_THROWS_WITH(run.trainer->step(3), Catch::Contains("the data shard is gone"));  // and on every later call
}

TEST_CASE("Pipelined trainer: a rollout rank's batches (weights and batches over c10d) equal the worker thread's, "
          "and its exception reaches the trainer",
          "[train][trainer][pipeline][distributed]") {
  // Two ranks in this process: the trainer rank on this thread, the rollout rank on another (rollout_ranks.hpp).
  const bool lora = GENERATE(false, true);
  const bool fail = GENERATE(false, true);
  INFO("lora " << lora << ", failing " << fail);
  PipelinedRun local(one_step_off, lora);
  std::vector<std::map<std::string, double>> expected;
  for (std::int64_t step = 1; step <= 4; ++step) expected.push_back(numbers(local.trainer->step(step)));

  train::ProcessGroupOptions world{.world_size = 2, .master_port = testing::free_loopback_port()};
  world.rendezvous_timeout = std::chrono::milliseconds(20'000);
  world.collective_timeout = std::chrono::milliseconds(60'000);
  std::mutex building;  // one model at a time: each seeds the global RNG and must draw the same weights
  std::exception_ptr rollout_error;
  train::RolloutPeer rollout_peer;
  std::string no_optimizer;
  std::thread rollout_rank([&] {  // no Catch assertions on this thread (Catch is not thread-safe): checked after
    try {
      train::ProcessGroupOptions mine = world;
      mine.rank = 1;
      train::RolloutRanks ranks = train::RolloutRanks::join(mine, 1);
      rollout_peer = ranks.peer;
      std::unique_ptr<PipelinedRun> served;
      {
        const std::lock_guard lock(building);
        served = std::make_unique<PipelinedRun>(one_step_off, lora, successor_reward, ranks.peer, ranks.side.get());
      }
      if (fail) served->source.fail_at_draw = 2;  // batch 3's prompts
      try {
        served->trainer->optimizer();
      } catch (const Error& e) {
        no_optimizer = e.what();
      }
      served->trainer->serve_rollouts();  // until the trainer below is destroyed
    } catch (...) {
      rollout_error = std::current_exception();
    }
  });
  {
    train::ProcessGroupOptions mine = world;
    mine.rank = 0;
    train::RolloutRanks ranks = train::RolloutRanks::join(mine, 1);
    CHECK(!ranks.peer.serves);
    std::unique_ptr<PipelinedRun> trained;
    {
      const std::lock_guard lock(building);
      trained = std::make_unique<PipelinedRun>(one_step_off, lora, successor_reward, ranks.peer, ranks.side.get());
    }
    if (!fail) {
      for (std::int64_t step = 1; step <= 4; ++step) {
        INFO("step " << step);
        CHECK(differences(numbers(trained->trainer->step(step)), expected[step - 1]) == "");
      }
      CHECK(testing::same_tensors(parameters_of(*trained->model), parameters_of(*local.model)));
    } else {
      CHECK_NOTHROW(trained->trainer->step(1));
      CHECK_NOTHROW(trained->trainer->step(2));  // collected before the failure
      CHECK_THROWS_WITH(trained->trainer->step(3),
                        Catch::Contains("rollout rank 1: batch 3 failed") && Catch::Contains("the data shard is gone"));
    }
  }  // the trainer tells its rollout rank to stop
  rollout_rank.join();
  if (rollout_error) std::rethrow_exception(rollout_error);
  CHECK(rollout_peer.serves);
  CHECK(rollout_peer.rank == 0);
  CHECK_THAT(no_optimizer, Catch::Contains("has no optimizer"));
}

TEST_CASE("Pipelined trainer: a checkpoint with batches in flight resumes bit-exactly", "[train][trainer][pipeline]") {
  const std::int64_t s = GENERATE(1, 2);
  INFO("s " << s);
  const auto configure = [s](train::GrpoTrainerOptions& o) {
    o.max_staleness = s;
    o.off_policy_correction = train::OffPolicyCorrection::decoupled;
    o.loss.sampler_correction = verl_rollout_correction(SamplerCorrectionMode::sequence_truncate);
  };
  PipelinedRun whole(configure);
  std::vector<std::map<std::string, double>> expected;
  for (std::int64_t step = 1; step <= 6; ++step) expected.push_back(numbers(whole.trainer->step(step)));

  const auto dir = scratch("resume_" + std::to_string(s));
  train::CheckpointManager checkpoints({.directory = dir});
  {
    PipelinedRun first(configure);
    for (std::int64_t step = 1; step <= 3; ++step) CHECK(differences(numbers(first.trainer->step(step)), expected[step - 1]) == "");
    const auto path = first.trainer->save(checkpoints, 3);
    REQUIRE(path);
    CHECK(fs::is_regular_file(*path / "pipeline" / "weights.safetensors"));
  }
  PipelinedRun resumed(configure);
  REQUIRE(resumed.trainer->restore(checkpoints) == 3);
  for (std::int64_t step = 4; step <= 6; ++step) {
    INFO("step " << step);
    CHECK(differences(numbers(resumed.trainer->step(step)), expected[step - 1]) == "");
  }
  CHECK(testing::same_tensors(parameters_of(*resumed.model), parameters_of(*whole.model)));
  fs::remove_all(dir);
}

TEST_CASE("Pipelined trainer: configuration errors name the option", "[train][trainer][pipeline]") {
  const auto fails = [](const std::function<void(train::GrpoTrainerOptions&)>& configure, const std::string& words) {
    INFO(words);
    CHECK_THROWS_WITH(PipelinedRun(configure), Catch::Contains(words));
  };
  fails([](auto& o) { o.max_staleness = 1; }, "choose off_policy_correction decoupled");
  fails([](auto& o) { o.max_staleness = -1; }, "max_staleness must be >= 0");
  fails(
      [](auto& o) {
        o.max_staleness = 1;
        o.off_policy_correction = train::OffPolicyCorrection::decoupled;
      },
      "set rollout_is");
  fails(
      [](auto& o) {
        one_step_off(o);
        o.loss.sampler_correction = verl_rollout_correction(SamplerCorrectionMode::token_truncate);
      },
      "bypass takes the sampler's log-probs");
  fails([](auto& o) { o.off_policy_correction = train::OffPolicyCorrection::bypass; }, "it needs max_staleness");
  fails([](auto& o) { o.generation_threads = 2; }, "it needs max_staleness");
  // A generator that cannot be rebuilt over the sampler copy cannot be pipelined.
  struct FixedGenerator final : train::Generator {
    Rollout generate(const train::GenerationRequest&) override { throw Error("not used"); }
  };
  DriftingSource source;
  train::StepScorer scorer(rewards::RewardSet({{rewards::make_reward("accuracy", successor_reward), 1.0}}));
  train::ProcessGroup group{train::ProcessGroupOptions{}};
  models::CausalLM model(testing::tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32}));
  train::GrpoTrainerOptions o{.steps = 2, .prompts_per_step = 4, .group_size = 4};
  o.max_staleness = 0;
  CHECK_THROWS_WITH(train::GrpoTrainer(model, source, scorer, group, o, {.generator = std::make_shared<FixedGenerator>()}),
                    Catch::Contains("cannot be rebuilt over it (Generator::rebind returns null)"));
  CHECK(train::parse_off_policy_correction("decoupled") == train::OffPolicyCorrection::decoupled);
  CHECK_THROWS_WITH(train::parse_off_policy_correction("sometimes"), Catch::Contains("decoupled"));
}

TEST_CASE("Pipelined trainer: a LoRA model's sampler copy shares the frozen base weights and holds adapters of its own",
          "[train][trainer][pipeline]") {
  torch::manual_seed(4);
  models::CausalLM model(testing::tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32}));
  const auto ids = torch::randint(0, 8, {2, 5}, torch::kLong);
  const auto logits = [&](torch::nn::Module& m) {
    torch::NoGradGuard no_grad;
    return dynamic_cast<models::CausalLMImpl&>(m).forward(ids, torch::ones_like(ids));
  };
  SECTION("LoRA: the base shared, the adapters copied") {
    models::add_lora(model, {.rank = 2, .alpha = 4.0, .target_modules = {"q_proj", "v_proj"}});
    {
      torch::NoGradGuard no_grad;  // adapters away from B = 0, so that they change the logits
      for (auto& p : model->named_parameters()) {
        if (models::is_lora_parameter(p.key())) p.value().normal_(0.0, 0.5);
      }
    }
    model->eval();
    train::TrainedModelOf<models::CausalLM> trained(model, PolicyOptions{});
    const auto copy = trained.sampler_copy();
    const auto source = model->named_parameters();
    std::int64_t shared = 0, own = 0;
    for (const auto& p : copy->module().named_parameters()) {
      INFO(p.key());
      CHECK_FALSE(p.value().requires_grad());
      const torch::Tensor& from = source[p.key()];
      CHECK(torch::equal(p.value(), from));
      const bool same_storage = p.value().data_ptr() == from.data_ptr();
      CHECK(same_storage != models::is_lora_parameter(p.key()));
      (same_storage ? shared : own) += 1;
    }
    CHECK(own == 2 * static_cast<std::int64_t>(models::lora_modules(model).size()));  // each adapter's A and B
    CHECK(shared > 0);
    for (const auto& p : model->named_parameters()) CHECK(p.value().requires_grad() == models::is_lora_parameter(p.key()));
    CHECK(torch::equal(logits(copy->module()), logits(*model)));
    // The trainer's adapters move; the copy keeps its own until it loads them.
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->named_parameters()) {
        if (models::is_lora_parameter(p.key())) p.value().add_(0.5);
      }
    }
    CHECK_FALSE(torch::allclose(logits(copy->module()), logits(*model)));
  }
  SECTION("LoRA with a base parameter trained too: that one is copied, not shared") {
    models::add_lora(model, {.rank = 2, .alpha = 4.0, .target_modules = {"q_proj", "v_proj"}});
    torch::Tensor norm = model->named_parameters()["model.norm.weight"];
    norm.set_requires_grad(true);
    train::TrainedModelOf<models::CausalLM> trained(model, PolicyOptions{});
    const auto copy = trained.sampler_copy();
    const auto copied = copy->module().named_parameters();
    CHECK(copied["model.norm.weight"].data_ptr() != norm.data_ptr());
    CHECK(torch::equal(copied["model.norm.weight"], norm));
    CHECK(copied["model.embed_tokens.weight"].data_ptr() == model->named_parameters()["model.embed_tokens.weight"].data_ptr());
  }
  SECTION("no LoRA: a deep copy") {
    model->eval();
    train::TrainedModelOf<models::CausalLM> trained(model, PolicyOptions{});
    const auto copy = trained.sampler_copy();
    const auto source = model->named_parameters();
    for (const auto& p : copy->module().named_parameters()) CHECK(p.value().data_ptr() != source[p.key()].data_ptr());
    CHECK(torch::equal(logits(copy->module()), logits(*model)));
  }
}
