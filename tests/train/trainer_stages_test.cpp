// SPDX-License-Identifier: Apache-2.0
// The stages of a GRPO step on their own: the generator and the optimizer a caller passes to GrpoTrainer (a
// generator that delegates to the sampler reproduces the default run, one that does not sample at all trains on what
// it wrote, an SGD optimizer steps by −lr·g), the scorer's shaping (DAPO's overlong punishment by hand), a scoring
// round over a prefetching scorer, and GroupSelection's filters (per-domain spread and the difficulty mask by hand);
// and a model type of the user's own (a bigram table) trained, with its KL reference, and resumed from a checkpoint.
#include <grpo/loss/recipes.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <support/model_testing.hpp>
#include <support/token_prompt_source.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace grpo;

namespace {

/// Prompts [t] (t = 1 … 5), each row's gold answer the same token, in two domains; stop token 7, padding 0.
struct EchoTask final : testing::TokenPromptSource {
  std::vector<train::Problem> train_batch(std::int64_t, std::int64_t count) override {
    std::vector<train::Problem> out;
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t token = 1 + i % 5;
      out.push_back({.prompt_ids = {token}, .prompt_text = std::to_string(token),
                     .row = std::make_shared<const rewards::Row>(rewards::Row{{"ground_truth", std::to_string(token)}}),
                     .domain = static_cast<std::size_t>(i % 2)});
    }
    return out;
  }
  std::vector<std::string> domain_names() const override { return {"even", "odd"}; }
};

train::GrpoTrainerOptions options() {
  train::GrpoTrainerOptions o{.steps = 3, .prompts_per_step = 4, .group_size = 4, .seed = 9};
  o.sampling.max_new_tokens = 3;
  o.loss = recipes::dapo();
  o.learning_rate = 0.02;
  return o;
}

/// 1 when the completion starts with the prompt's token (the row's ground truth), else 0.
train::StepScorer echo_scorer() {
  return train::StepScorer(rewards::RewardSet({{rewards::make_reward("accuracy", [](const rewards::Completion& c) {
                                                  return c.text.starts_with(c.row->text("ground_truth").value_or("x"))
                                                             ? 1.0
                                                             : 0.0;
                                                }), 1.0}}));
}

std::map<std::string, double> deterministic(const train::Scalars& scalars) {
  std::map<std::string, double> out(scalars.begin(), scalars.end());
  std::erase_if(out, [](const auto& e) {
    return e.first == "step_time" || e.first == "tokens_per_second" || e.first.ends_with("seconds") ||
           e.first.starts_with("timing_s/") ||
           e.first.starts_with("perf/");
  });
  return out;
}

/// Delegates to the library's sampler and records every request.
struct RecordingGenerator final : train::Generator {
  explicit RecordingGenerator(models::CausalLM model) : sampler(std::move(model)) {}
  struct Seen {
    std::size_t problems;
    std::int64_t group_size, max_new_tokens;
    double temperature;
    std::uint64_t seed;
    std::vector<std::uint64_t> prompt_keys;
  };
  Rollout generate(const train::GenerationRequest& request) override {
    seen.push_back({request.problems.size(), request.group_size, request.sampling.max_new_tokens,
                    request.sampling.temperature, request.sampling.seed, request.prompt_keys});
    return sampler.generate(request);
  }
  train::SamplerGenerator<models::CausalLM> sampler;
  std::vector<Seen> seen;
};

/// Completions written by hand, no model involved: for each prompt [t], alternately [t, 7] (right) and [6, 7].
struct ScriptedGenerator final : train::Generator {
  Rollout generate(const train::GenerationRequest& request) override {
    const auto rows = static_cast<std::int64_t>(request.problems.size()) * request.group_size;
    Rollout r;
    r.prompt_ids = torch::empty({rows, 1}, torch::kInt64);
    r.prompt_mask = torch::ones({rows, 1}, torch::kInt64);
    r.completion_ids = torch::empty({rows, 2}, torch::kInt64);
    r.completion_mask = torch::ones({rows, 2}, torch::kInt64);
    r.truncated = torch::zeros({rows}, torch::kBool);
    for (std::int64_t b = 0; b < rows; ++b) {
      const std::int64_t token = request.problems[static_cast<std::size_t>(b / request.group_size)].prompt_ids[0];
      r.prompt_ids[b][0] = token;
      r.completion_ids[b][0] = b % 2 == 0 ? token : 6;
      r.completion_ids[b][1] = 7;
    }
    r.sampler_log_probs = torch::zeros({rows, 2});
    return r;
  }
};

/// ScriptedGenerator's completions with an environment's reward on a token, as a multi-turn rollout has a turn's:
/// −0.5 on the first token of rows 1, 5, 9, … (a wrong completion of each group).
struct RewardingGenerator final : train::Generator {
  Rollout generate(const train::GenerationRequest& request) override {
    Rollout r = ScriptedGenerator{}.generate(request);
    r.completion_rewards = torch::zeros(r.completion_ids.sizes(), torch::kFloat32);
    for (std::int64_t b = 1; b < r.batch_size(); b += 4) r.completion_rewards[b][0] = -0.5f;
    return r;
  }
};

models::CausalLM echo_model() {
  torch::manual_seed(4);
  return models::CausalLM(testing::tiny_model_config({.vocab = 8}));
}

/// A user-defined model type, not models::CausalLM: a bigram table whose row for token x is the logits of the next
/// token. No hidden states (the trainer takes log-probs from its logits), no KV cache (the sampler runs the whole
/// sequence at each step); Cloneable, so the KL reference is a deep copy.
struct BigramImpl final : torch::nn::Cloneable<BigramImpl> {
  explicit BigramImpl(std::int64_t vocab) : vocab(vocab) { reset(); }
  void reset() override { table = register_parameter("table", 0.1 * torch::randn({vocab, vocab})); }
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& /*mask*/) {
    return table.index_select(0, ids.flatten()).view({ids.size(0), ids.size(1), vocab});
  }
  std::int64_t vocab;
  torch::Tensor table;
};
TORCH_MODULE(Bigram);

/// The bigram's mean probability of echoing the prompt's token first, p(t | t) over the prompts t = 1 … 4 of a
/// four-prompt step.
double echo_probability(Bigram& model) {
  torch::NoGradGuard no_grad;
  const auto tokens = torch::arange(1, 5, torch::kInt64);
  return torch::softmax(model->table.index_select(0, tokens), -1).gather(1, tokens.unsqueeze(1)).mean().item<double>();
}

/// What a one-trainer test holds: the task, the scorer, one process and the model.
struct EchoRun {
  EchoTask task;
  train::StepScorer scorer = echo_scorer();
  train::ProcessGroup group{train::ProcessGroupOptions{}};
  models::CausalLM model = echo_model();
};

}  // namespace

TEST_CASE("GrpoTrainer with a custom generator: every chunk and ReMax's greedy request go through it, and "
          "delegating to the sampler gives the default run's numbers",
          "[train][trainer]") {
  auto o = options();
  o.generation_chunks = 2;
  train::select_advantage(o, "remax");
  EchoTask task_a, task_b;
  auto scorer = echo_scorer();
  train::ProcessGroup group{train::ProcessGroupOptions{}};
  auto model_a = echo_model(), model_b = echo_model();
  train::GrpoTrainer plain(model_a, task_a, scorer, group, o);
  auto recording = std::make_shared<RecordingGenerator>(model_b);
  train::GrpoTrainer custom(model_b, task_b, scorer, group, o, {.generator = recording});
  for (std::int64_t step = 1; step <= 2; ++step) {
    CHECK(deterministic(custom.step(step).scalars) == deterministic(plain.step(step).scalars));
  }
  REQUIRE(recording->seen.size() == 6);  // per step: two chunks, then the greedy completions of the kept prompts
  for (std::size_t step = 0; step < 2; ++step) {
    const auto& chunk0 = recording->seen[3 * step];
    const auto& chunk1 = recording->seen[3 * step + 1];
    const auto& greedy = recording->seen[3 * step + 2];
    CHECK(chunk0.problems == 2);
    CHECK(chunk1.problems == 2);
    CHECK(chunk0.group_size == 4);
    CHECK(chunk0.temperature == 1.0);
    CHECK(chunk0.max_new_tokens == 3);
    // One noise stream per step; each prompt keyed by its index in the step's batch, whichever chunk samples it.
    CHECK(chunk0.seed == chunk1.seed);
    CHECK(chunk0.prompt_keys == std::vector<std::uint64_t>{0, 1});
    CHECK(chunk1.prompt_keys == std::vector<std::uint64_t>{2, 3});
    CHECK(greedy.problems == 4);
    CHECK(greedy.group_size == 1);
    CHECK(greedy.temperature == 0.0);  // ReMax's baseline is a greedy generation request
  }
  CHECK(recording->seen[0].seed != recording->seen[3].seed);  // and each step
}

TEST_CASE("GrpoTrainer with keyed noise: generation_chunks change no completion (with the generator's they do)",
          "[train][trainer]") {
  const auto completions = [](std::int64_t chunks, SamplingNoise noise) {
    EchoRun run;
    auto o = options();
    o.prompts_per_step = 6;
    o.generation_chunks = chunks;
    o.sampling.noise = noise;
    train::GrpoTrainer trainer(run.model, run.task, run.scorer, run.group, o);
    std::vector<std::vector<std::int64_t>> out;
    for (std::int64_t step = 1; step <= 2; ++step) {
      trainer.begin_step(step);
      for (const auto& c : trainer.collect_groups(step).completions) out.push_back(c.token_ids);
    }
    return out;
  };
  const auto whole = completions(1, SamplingNoise::keyed);
  REQUIRE(whole.size() == 48);
  CHECK(completions(3, SamplingNoise::keyed) == whole);
  CHECK(completions(6, SamplingNoise::keyed) == whole);
  CHECK(completions(3, SamplingNoise::generator) != completions(1, SamplingNoise::generator));
}

TEST_CASE("GrpoTrainer with a generator that does not sample trains on the completions it wrote", "[train][trainer]") {
  EchoRun run;
  auto& model = run.model;
  train::GrpoTrainer trainer(model, run.task, run.scorer, run.group, options(),
                             {.generator = std::make_shared<ScriptedGenerator>()});
  const auto before = model->parameters()[0].clone();
  trainer.begin_step(1);
  const auto batch = trainer.collect_groups(1);
  REQUIRE(batch.rows() == 16);
  for (std::int64_t b = 0; b < batch.rows(); ++b) {
    const std::string token = std::to_string(batch.problems[static_cast<std::size_t>(b / 4)].prompt_ids[0]);
    CHECK(batch.completions[static_cast<std::size_t>(b)].text == (b % 2 == 0 ? token + "7" : "67"));
    CHECK(*batch.totals[static_cast<std::size_t>(b)] == (b % 2 == 0 ? 1.0f : 0.0f));
  }
  // Rewards 1, 0, 1, 0 in every group: GRPO's advantages (r − mean) / (std + 1e-4) (Bessel std, TRL's epsilon).
  const auto adv = trainer.advantages(batch);
  const double expected = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-4);
  for (std::int64_t b = 0; b < batch.rows(); ++b) {
    CHECK(adv.advantages[b].item<double>() == Approx(b % 2 == 0 ? expected : -expected).epsilon(1e-6));
  }
  const auto update = trainer.policy_update(batch, adv);
  CHECK(update.grad_norm > 0.0);
  CHECK_FALSE(torch::equal(before, model->parameters()[0]));
}

TEST_CASE("GrpoTrainer with a generator's token rewards: each total holds their sum, and a token-level estimator "
          "sees each at its token",
          "[train][trainer]") {
  const auto run_step = [](const std::string& estimator) {
    EchoRun run;
    auto o = options();
    train::select_advantage(o, estimator);
    train::GrpoTrainer trainer(run.model, run.task, run.scorer, run.group, o,
                               {.generator = std::make_shared<RewardingGenerator>()});
    trainer.begin_step(1);
    auto batch = trainer.collect_groups(1);
    auto adv = trainer.advantages(batch);
    return std::pair{std::move(batch), std::move(adv)};
  };
  // Each group's rows: right (1), wrong with the environment's −0.5, right (1), wrong (0).
  const std::vector<double> totals{1.0, -0.5, 1.0, 0.0};
  {
    const auto [batch, adv] = run_step("grpo");
    REQUIRE(batch.rows() == 16);
    for (std::int64_t b = 0; b < batch.rows(); ++b) {
      CHECK(*batch.totals[static_cast<std::size_t>(b)] == totals[static_cast<std::size_t>(b % 4)]);
      const auto& values = batch.reward_values[static_cast<std::size_t>(b)];
      REQUIRE(values.back().first == "environment");
      CHECK(*values.back().second == (b % 4 == 1 ? -0.5 : 0.0));
    }
    const auto metric = std::find_if(batch.score_metrics.begin(), batch.score_metrics.end(),
                                     [](const auto& m) { return m.name == "rewards/environment/mean"; });
    REQUIRE(metric != batch.score_metrics.end());
    CHECK(metric->value == Approx(-0.125));
    // GRPO on the totals by hand: mean 0.375, Bessel std sqrt(1.6875 / 3) = 0.75, TRL's epsilon 1e-4.
    for (std::int64_t b = 0; b < batch.rows(); ++b) {
      const double expected = (totals[static_cast<std::size_t>(b % 4)] - 0.375) / (0.75 + 1e-4);
      CHECK(adv.advantages[b].item<double>() == Approx(expected).epsilon(1e-9));
    }
  }
  {
    // REINFORCE++ (γ = 1): the return of token t is the sum of the rewards from t on. The −0.5 row: −0.5 then 0 (the
    // environment's reward is on its first token, the scorer's 0 on its last); right rows 1, 1; wrong rows 0, 0.
    // Then whitened over the batch's 32 tokens: (G − mean) / sqrt(Bessel var + 1e-8).
    const auto [batch, adv] = run_step("reinforce_pp");
    REQUIRE(batch.rows() == 16);
    const std::vector<std::vector<double>> returns{{1, 1}, {-0.5, 0}, {1, 1}, {0, 0}};
    double sum = 0, squares = 0;
    for (const auto& row : returns) {
      for (const double g : row) sum += 4 * g, squares += 4 * g * g;
    }
    const double mean = sum / 32, var = (squares - 32 * mean * mean) / 31;
    for (std::int64_t b = 0; b < batch.rows(); ++b) {
      for (std::int64_t t = 0; t < 2; ++t) {
        const double g = returns[static_cast<std::size_t>(b % 4)][static_cast<std::size_t>(t)];
        CHECK(adv.advantages[b][t].item<double>() == Approx((g - mean) / std::sqrt(var + 1e-8)).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("GrpoTrainer with a custom optimizer: SGD steps each parameter by -lr * its gradient", "[train][trainer]") {
  EchoRun run;
  auto& model = run.model;
  auto o = options();
  o.max_grad_norm = 0.0;  // no clipping: the step is exactly the gradient's
  o.learning_rate = 0.5;
  const train::GrpoTrainerParts parts{
      .generator = std::make_shared<ScriptedGenerator>(),  // rewards with spread in every group
      .optimizer = [](const std::vector<torch::Tensor>& parameters) {
        return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(1.0));
      }};
  train::GrpoTrainer trainer(model, run.task, run.scorer, run.group, o, parts);
  REQUIRE(dynamic_cast<torch::optim::SGD*>(&trainer.optimizer()) != nullptr);
  std::vector<torch::Tensor> before;
  for (const auto& p : model->parameters()) before.push_back(p.detach().clone());
  trainer.step(1);
  std::size_t moved = 0;
  const auto after = model->parameters();
  for (std::size_t i = 0; i < after.size(); ++i) {
    REQUIRE(after[i].grad().defined());
    // The trainer's learning rate (0.5, a constant schedule) replaced the factory's 1.0.
    const auto expected = before[i] - 0.5 * after[i].grad();
    CHECK(torch::allclose(after[i].detach(), expected, 1e-6, 1e-7));
    moved += !torch::equal(after[i].detach(), before[i]);
  }
  CHECK(moved > 0);

  o.optimizer_precision = train::OptimizerPrecision::compensated;
  auto bf16 = echo_model();
  bf16->to(torch::kBFloat16);
  CHECK_THROWS_WITH(train::GrpoTrainer(bf16, run.task, run.scorer, run.group, o, parts),
                    Catch::Contains("custom optimizer") && Catch::Contains("optimizer_precision"));
}

TEST_CASE("GrpoTrainer trains a user-defined model type: the bigram learns the task, with a KL reference synced "
          "to it, and resumes bit-exactly from its own checkpoint",
          "[train][trainer]") {
  auto o = options();
  o.loss = recipes::grpo();  // β = 0.04: a frozen deep copy of the bigram is the reference
  o.ref_sync_every = 2;      // TR-DPO: the reference follows the policy, and the checkpoint carries it
  o.learning_rate = 0.3;
  const auto bigram = [] {
    torch::manual_seed(11);
    return Bigram(8);
  };
  const auto dir = testing::fresh_temp_dir("user_model");
  train::CheckpointManager checkpoints({.directory = dir});
  EchoTask task;
  auto scorer = echo_scorer();
  train::ProcessGroup group{train::ProcessGroupOptions{}};

  Bigram model = bigram();
  const double before = echo_probability(model);
  std::map<std::int64_t, std::map<std::string, double>> straight;
  {
    train::GrpoTrainer trainer(model, task, scorer, group, o);
    REQUIRE(trainer.module().parameters().size() == 1);
    for (std::int64_t step = 1; step <= 24; ++step) {
      straight[step] = deterministic(trainer.step(step).scalars);
      if (step == 20) trainer.save(checkpoints, step);
    }
  }
  CHECK(straight[1].contains("kl"));
  // Rewarded for echoing the prompt's token first, the bigram learns to (its own table, by hand).
  const double after = echo_probability(model);
  INFO("p(t | t) " << before << " -> " << after);
  // About 1/8 at the start (0.12 measured); after 24 steps 0.73-0.99 over seeds 1-9 with keyed noise (0.73 at this
  // seed, 9), 0.88-0.99 with the generator's.
  CHECK(before < 0.2);
  CHECK(after > 0.6);

  // A fresh bigram, restored from step 20 (its table, AdamW's state, the synced reference, the RNG), goes on exactly.
  Bigram resumed = bigram();
  EchoTask resumed_task;
  train::GrpoTrainer trainer(resumed, resumed_task, scorer, group, o);
  REQUIRE(trainer.restore(checkpoints) == 20);
  for (std::int64_t step = 21; step <= 24; ++step) CHECK(deterministic(trainer.step(step).scalars) == straight[step]);
  CHECK(torch::equal(resumed->table, model->table));
  std::filesystem::remove_all(dir);
}

TEST_CASE("StepScorer: the overlong punishment of a stage is part of the scores, and a round over a prefetching "
          "scorer equals score()",
          "[train][trainer]") {
  std::vector<rewards::Completion> batch(4);
  const std::vector<std::size_t> lengths = {4, 6, 8, 10};  // limit 8, buffer 4: ramp over (4, 8]
  for (std::size_t b = 0; b < batch.size(); ++b) {
    batch[b].token_ids.assign(lengths[b], 1);
    batch[b].text = std::string(lengths[b], 'a');
    batch[b].group = b / 2;
  }
  auto constant = rewards::make_reward("accuracy", [](const rewards::Completion&) { return 1.0; });
  const train::StepScorer scorer(rewards::RewardSet({{constant, 1.0}}));
  const auto plain = scorer.score(batch);
  const auto shaped = scorer.score(batch, {.max_new_tokens = 8, .overlong_buffer = 4, .overlong_factor = 0.5});
  // DAPO eq. 13 by hand: |o| <= 4 → 0; 6 → (4 − 6)/4 = −0.5; 8 → −1; 10 > 8 → −1; weighted by 0.5.
  const std::vector<double> penalty = {0.0, -0.5, -1.0, -1.0};
  for (std::size_t b = 0; b < batch.size(); ++b) {
    CHECK(*plain.total[b] == 1.0f);
    CHECK(*shaped.total[b] == Approx(1.0 + 0.5 * penalty[b]));
    REQUIRE(shaped.rewards[b].back().first == "soft_overlong");
    CHECK(*shaped.rewards[b].back().second == Approx(penalty[b]));
  }
  CHECK(shaped.metrics.back().name == "rewards/soft_overlong/mean");
  CHECK(shaped.metrics.back().value == Approx(-2.5 / 4));

  // The same through a round of a scorer that prefetches completion-scoped rewards, chunk by chunk.
  train::StepScorer overlapping(rewards::RewardSet({{constant, 1.0}}), /*overlap=*/true);
  REQUIRE(overlapping.prefetches());
  auto round = overlapping.round();
  round.add(std::span(batch).first(2));
  round.add(std::span(batch).subspan(2));
  const auto from_round = round.scores(batch, {.max_new_tokens = 8, .overlong_buffer = 4, .overlong_factor = 0.5});
  for (std::size_t b = 0; b < batch.size(); ++b) CHECK(from_round.total[b] == shaped.total[b]);
}

TEST_CASE("GroupSelection: spread by each domain's filter and metric, and the difficulty mask's groups, by hand",
          "[train][trainer]") {
  // Four groups of two: totals (1, 0), (1, 1), (0.5, 0.7), (0.2, nullopt); domains even, odd, even, odd.
  train::StepScores scores;
  scores.total = {1.0f, 0.0f, 1.0f, 1.0f, 0.5f, 0.7f, 0.2f, std::nullopt};
  scores.correct = {1, 0, 1, 1, 0, 1, 0, 0};
  scores.judged = {1, 1, 1, 1, 1, 1, 1, 0};
  scores.rewards.assign(8, {{"accuracy", 1.0}});
  std::vector<train::Problem> problems(4);
  for (std::size_t p = 0; p < 4; ++p) problems[p].domain = p % 2;
  const std::vector<std::string> domains = {"even", "odd"};

  const train::GroupSelection dapo({}, domains);  // std > 1e-8 on the total
  CHECK(dapo.informative(scores, problems, 2) == std::vector<std::uint8_t>{1, 0, 1, 0});
  CHECK_FALSE(dapo.in_loss(scores.total, 2).defined());  // no mask: every group trains

  // The even domain's own band: mean below 0.55 only, so (1, 0) (mean 0.5) passes and (0.5, 0.7) (0.6) does not.
  const train::GroupSelection per_domain({.domain_filters = {{"even", {.mean_below = 0.55}}}}, domains);
  CHECK(per_domain.informative(scores, problems, 2) == std::vector<std::uint8_t>{1, 0, 0, 0});

  // Accuracy must spread: (1, 1) does not, (0, 1) does; the unjudged completion has no value (one value: no spread).
  const train::GroupSelection accuracy({.metric = "accuracy"}, domains);
  CHECK(accuracy.informative(scores, problems, 2) == std::vector<std::uint8_t>{1, 0, 1, 0});

  // ROLL's difficulty mask (0.3, 0.9): group means 0.5, 1, 0.6, 0.2 (over the values present) → in, out, in, out.
  const train::GroupSelection masked({.difficulty_mask = std::pair(0.3, 0.9)}, domains);
  const auto in_loss = masked.in_loss(scores.total, 2);
  REQUIRE(in_loss.defined());
  CHECK(torch::equal(in_loss, torch::tensor({true, false, true, false})));

  CHECK_THROWS_WITH(train::GroupSelection({.domain_filters = {{"code", {}}}}, domains),
                    Catch::Contains("domains.code.dynamic_sampling_filter") && Catch::Contains("even, odd"));
  const train::GroupSelection unknown({.metric = "format"}, domains);
  CHECK_THROWS_WITH(unknown.informative(scores, problems, 2),
                    Catch::Contains("'format'") && Catch::Contains("labels: accuracy"));
}
