// SPDX-License-Identifier: Apache-2.0
// Tests of grpo/train/distributed.hpp. The multi-process cases start this test binary twice on 127.0.0.1, each copy
// running one hidden "distributed worker ..." test case as one rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in
// its environment); every worker checks its own results and the parent checks exit codes, timing and messages.
#include <grpo/advantage/group_advantage.hpp>
#include <grpo/io/dataset.hpp>
#include <grpo/logprob/token_log_probs.hpp>
#include <grpo/loss/recipes.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/train/distributed.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/reward_model_refresh.hpp>

#include <support/process_testing.hpp>
#include <support/token_prompt_source.hpp>
#include <support/test_paths.hpp>
#include "support/model_testing.hpp"
#include "support/tensor_testing.hpp"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <torch/torch.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

namespace {

namespace fs = std::filesystem;
namespace gt = grpo::train;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

// ------------------------------------------------------------------------------------------------------------
// The workers (hidden test cases, run only by name from the multi-process tests below).

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

// Runs a worker body; an exception's message is also printed on one line (Catch wraps its report at 80 columns).
template <typename Body>
void run_worker(Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker error: %s\n", e.what());
    throw;
  }
}

gt::ProcessGroupOptions worker_options() {
  gt::ProcessGroupOptions defaults;
  defaults.rendezvous_timeout = std::chrono::milliseconds(env_int("GRPO_TEST_RENDEZVOUS_MS", 20'000));
  defaults.collective_timeout = std::chrono::milliseconds(env_int("GRPO_TEST_COLLECTIVE_MS", 20'000));
  return gt::ProcessGroupOptions::from_env(defaults);
}

// The synthetic task: a dataset of kDataset prompts; each step samples kPrompts of them, kGroup completions each.
constexpr int64_t kDataset = 12, kPrompts = 5, kGroup = 3, kPromptLen = 3, kCompletionLen = 4, kVocab = 16;

gt::PromptShardingOptions sharding() { return {.num_prompts = kDataset, .prompts_per_step = kPrompts, .seed = 7}; }

// Rows p·G + g of the global batch of one step: the same on every rank (seeded by the step).
struct StepData {
  torch::Tensor prompt_ids;      // [P, Tp]
  torch::Tensor completion_ids;  // [P·G, Tc]
  torch::Tensor mask;            // [P·G, Tc]
  torch::Tensor rewards;         // [P, G]
  torch::Tensor old_noise;       // [P·G, Tc]
  torch::Tensor ref_noise;       // [P·G, Tc]

  // The prompts [range.begin, range.end) with their completions.
  StepData slice(gt::ShardRange range) const {
    auto rows = [&](const torch::Tensor& t, int64_t per) { return t.narrow(0, range.begin * per, range.size() * per); };
    return {rows(prompt_ids, 1), rows(completion_ids, kGroup), rows(mask, kGroup),
            rows(rewards, 1),    rows(old_noise, kGroup),      rows(ref_noise, kGroup)};
  }
};

StepData step_data(int64_t step) {
  torch::Generator dataset_gen = at::detail::createCPUGenerator(1);
  const torch::Tensor dataset = torch::randint(0, kVocab, {kDataset, kPromptLen}, dataset_gen, torch::kInt64);
  const auto indices = gt::shard_prompt_indices(sharding(), step, 0, 1);  // the whole global batch
  torch::Generator gen = at::detail::createCPUGenerator(1000 + static_cast<uint64_t>(step));
  const int64_t b = kPrompts * kGroup;
  StepData d;
  d.prompt_ids = dataset.index_select(0, torch::tensor(indices, torch::kInt64));
  d.completion_ids = torch::randint(0, kVocab, {b, kCompletionLen}, gen, torch::kInt64);
  const torch::Tensor lengths = torch::randint(0, kCompletionLen + 1, {b, 1}, gen, torch::kInt64);
  lengths[1][0] = 0;               // an empty completion
  lengths[2][0] = kCompletionLen;  // a full one
  d.mask = (torch::arange(kCompletionLen).unsqueeze(0) < lengths).to(torch::kFloat64);
  d.rewards = torch::randint(0, 2, {kPrompts, kGroup}, gen, torch::kFloat64);
  d.rewards[1].fill_(1.0);  // an all-equal group
  d.old_noise = torch::randn({b, kCompletionLen}, gen, torch::kFloat64);
  d.ref_noise = torch::randn({b, kCompletionLen}, gen, torch::kFloat64);
  return d;
}

grpo::models::CausalLM tiny_model(uint64_t seed) {
  torch::manual_seed(seed);
  grpo::models::CausalLM model(grpo::testing::tiny_model_config({.vocab = kVocab}));
  model->to(torch::kFloat64);
  return model;
}

grpo::LossInputs loss_inputs(grpo::models::CausalLM& model, const StepData& d) {
  const torch::Tensor ids = torch::cat({d.prompt_ids.repeat_interleave(kGroup, 0), d.completion_ids}, 1);
  const torch::Tensor logits = model->forward(ids).narrow(1, kPromptLen - 1, kCompletionLen);
  grpo::LossInputs in;
  in.log_probs = grpo::token_log_probs(logits, d.completion_ids).log_probs;
  // Off-policy and reference log-probs a little away from the policy's, so clipping and KL metrics are not trivial.
  in.old_log_probs = in.log_probs.detach() + 0.2 * d.old_noise;
  in.ref_log_probs = in.log_probs.detach() + 0.1 * d.ref_noise;
  in.advantages = grpo::GroupAdvantage(grpo::GroupAdvantageOptions{})(d.rewards).advantages;
  in.mask = d.mask;
  return in;
}

grpo::GrpoLoss make_loss(grpo::LossType type) {
  grpo::GrpoLossOptions options;
  options.loss_type = type;
  options.beta = 0.04;
  options.max_completion_length = kCompletionLen;
  return grpo::GrpoLoss(options);
}

void copy_parameters(const grpo::models::CausalLM& from, grpo::models::CausalLM& to) {
  torch::NoGradGuard no_grad;
  auto source = from->named_parameters();
  for (auto& item : to->named_parameters()) item.value().copy_(source[item.key()]);
}

void require_parameters_close(const grpo::models::CausalLM& actual, const grpo::models::CausalLM& expected,
                              bool grads) {
  auto reference = expected->named_parameters();
  for (const auto& item : actual->named_parameters()) {
    INFO(item.key());
    const torch::Tensor& e = reference[item.key()];
    if (grads) {
      GRPO_REQUIRE_CLOSE(item.value().grad(), e.grad(), 0.0, 1e-9);
    } else {
      GRPO_REQUIRE_CLOSE(item.value(), e, 0.0, 1e-9);
    }
  }
}

// Reduced metrics of the rank's share against the metrics of one process on the whole batch.
void require_metrics_match(gt::ProcessGroup& pg, const grpo::LossMetrics& local, const grpo::LossMetrics& whole) {
  const auto reduced = gt::reduce_metrics(pg, gt::loss_metric_values(local));
  const auto expected = whole.items();
  REQUIRE(reduced.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO(expected[i].first << ": reduced " << reduced[i].second << ", one process " << expected[i].second);
    REQUIRE(reduced[i].first == expected[i].first);
    REQUIRE(std::abs(reduced[i].second - expected[i].second) <= 1e-9 * std::max(1.0, std::abs(expected[i].second)));
  }
}

TEST_CASE("distributed worker train", "[.worker]") {
  auto pg = gt::ProcessGroup::from_env(worker_options());
  REQUIRE(pg.world_size() == 2);
  REQUIRE(pg.backend_name() == "gloo");

  // Different initialisations per rank until rank 0's are broadcast.
  auto model = tiny_model(100 + static_cast<uint64_t>(pg.rank()));
  REQUIRE_THROWS_WITH(gt::check_parameters_consistent(pg, *model), Contains("differ across ranks"));
  const gt::BucketStats broadcast = gt::broadcast_parameters(pg, *model, 0, 512);
  REQUIRE(broadcast.buckets > 1);
  gt::check_parameters_consistent(pg, *model);
  auto reference = tiny_model(0);  // one process on the whole batch, from the same start
  copy_parameters(model, reference);

  // Sharding: the rank's prompts are its contiguous share of the global batch (3 + 2 of P = 5).
  const gt::ShardRange range = gt::shard_range(kPrompts, pg.rank(), pg.world_size());
  REQUIRE(range.size() == (pg.rank() == 0 ? 3 : 2));
  const auto global = gt::shard_prompt_indices(sharding(), 0, 0, 1);
  const auto mine = gt::shard_prompt_indices(sharding(), 0, pg.rank(), pg.world_size());
  REQUIRE(mine == std::vector<int64_t>(global.begin() + range.begin, global.begin() + range.end));

  // (No SECTIONs: Catch would run the case once per section, i.e. rendezvous twice on one port.)
  {  // One step: summed gradients and reduced metrics equal one process's, for each normaliser kind.
    const StepData whole = step_data(0);
    const StepData part = whole.slice(range);
    for (const grpo::LossType type : {grpo::LossType::dapo, grpo::LossType::grpo, grpo::LossType::dr_grpo}) {
      INFO("loss_type " << grpo::to_string(type));
      const grpo::GrpoLoss loss = make_loss(type);
      model->zero_grad();
      const grpo::LossInputs in = loss_inputs(model, part);
      const grpo::Normaliser n = gt::global_normaliser(pg, loss, in);
      const grpo::LossOutput out = loss(in, n);
      out.loss.backward();
      const gt::BucketStats stats =
          gt::all_reduce_gradients(pg, model->parameters(), {.bucket_bytes = 512, .check_parameters = true});
      REQUIRE(stats.buckets > 1);

      reference->zero_grad();
      const grpo::LossInputs all = loss_inputs(reference, whole);
      const grpo::Normaliser whole_n = loss.local_normaliser(all);
      const grpo::LossOutput expected = loss(all, whole_n);
      expected.loss.backward();
      REQUIRE(n.value() == whole_n.value());
      REQUIRE(reference->parameters()[0].grad().norm().item<double>() > 1e-6);
      require_parameters_close(model, reference, /*grads=*/true);
      require_metrics_match(pg, out.metrics, expected.metrics);
    }
  }

  {  // A rank left without rows (dynamic sampling dropped all its groups) adds nothing to the whole batch's normaliser.
    const auto own = [&](grpo::Normaliser local) { return pg.rank() == 0 ? std::optional(local) : std::nullopt; };
    const grpo::Normaliser dr = gt::global_normaliser(pg, grpo::LossType::dr_grpo, own(grpo::Normaliser::constant(24)));
    REQUIRE(dr.kind() == grpo::Normaliser::Kind::constant);
    REQUIRE(dr.value() == 24.0);
    const grpo::Normaliser tokens = gt::global_normaliser(pg, grpo::LossType::dapo, own(grpo::Normaliser::tokens(5)));
    REQUIRE(tokens.kind() == grpo::Normaliser::Kind::tokens);
    REQUIRE(tokens.value() == 5.0);
  }

  {  // 10 AdamW steps: parameters bitwise equal on both ranks and equal to one process's; then a checkpoint.
    const grpo::GrpoLoss loss = make_loss(grpo::LossType::dapo);
    torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
    torch::optim::AdamW reference_optimizer(reference->parameters(), torch::optim::AdamWOptions(1e-2));
    for (int64_t step = 0; step < 10; ++step) {
      INFO("step " << step);
      const StepData whole = step_data(step);
      optimizer.zero_grad();
      const grpo::LossInputs in = loss_inputs(model, whole.slice(range));
      const grpo::LossOutput out = loss(in, gt::global_normaliser(pg, loss, in));
      out.loss.backward();
      gt::all_reduce_gradients(pg, model->parameters(), {.check_parameters = true});
      optimizer.step();

      reference_optimizer.zero_grad();
      const grpo::LossInputs all = loss_inputs(reference, whole);
      const grpo::LossOutput expected = loss(all, loss.local_normaliser(all));
      expected.loss.backward();
      reference_optimizer.step();

      gt::check_parameters_consistent(pg, *model);
      require_parameters_close(model, reference, /*grads=*/false);
      require_metrics_match(pg, out.metrics, expected.metrics);
    }

    const fs::path dir = fs::path(std::getenv("GRPO_TEST_WORK_DIR")) / "checkpoints";
    gt::CheckpointManager manager({.directory = dir});
    const auto path = gt::save_checkpoint(pg, manager, model, optimizer, {.step = 10, .seed = 3});
    REQUIRE(path.has_value() == pg.is_main());
    auto restored = tiny_model(200 + static_cast<uint64_t>(pg.rank()));
    torch::optim::AdamW restored_optimizer(restored->parameters(), torch::optim::AdamWOptions(1e-2));
    const gt::TrainerState state = gt::load_checkpoint(pg, dir / "checkpoint-10", restored, restored_optimizer);
    REQUIRE(state.step == 10);
    gt::check_parameters_consistent(pg, *restored);
    require_parameters_close(restored, model, /*grads=*/false);

    // A checkpoint rank 0 cannot write (its directory would lie below a regular file): rank 0 throws its own error,
    // the other rank one naming rank 0, instead of waiting at a barrier.
    const fs::path blocked = fs::path(std::getenv("GRPO_TEST_WORK_DIR")) / "a-file";
    if (pg.is_main()) std::ofstream(blocked) << "x";
    pg.barrier();
    gt::CheckpointManager unwritable({.directory = blocked / "checkpoints"});
    if (pg.is_main()) {
      REQUIRE_THROWS(gt::save_checkpoint(pg, unwritable, model, optimizer, {.step = 11}));
    } else {
      REQUIRE_THROWS_WITH(gt::save_checkpoint(pg, unwritable, model, optimizer, {.step = 11}),
                          Contains("rank 0 failed to write checkpoint step 11"));
    }
  }

  {  // reduce_metrics by hand. Rank 0 passes value 1, rank 1 value 4, with these weights:
    const bool r0 = pg.rank() == 0;
    const double v = r0 ? 1.0 : 4.0;
    const auto reduced = gt::reduce_metrics(pg, {{"sum", v, gt::MetricReduction::sum},
                                                 {"mean", v, gt::MetricReduction::weighted_mean, r0 ? 1.0 : 3.0},
                                                 {"min", v, gt::MetricReduction::min, r0 ? 0.0 : 1.0},
                                                 {"max", v, gt::MetricReduction::max, 1.0}});
    REQUIRE(reduced[0].second == 5.0);   // 1 + 4
    REQUIRE(reduced[1].second == 3.25);  // (1·1 + 4·3) / (1 + 3)
    REQUIRE(reduced[2].second == 4.0);   // rank 0 measured nothing (weight 0): min over rank 1 alone
    REQUIRE(reduced[3].second == 4.0);   // max(1, 4)
    REQUIRE_THROWS_WITH(gt::reduce_metrics(pg, {{r0 ? "a" : "b", 1.0}}), Contains("different metric names"));
  }
}

// GrpoTrainer steps on two ranks against one process on the same global batch (5 prompts: 3 + 2), for every
// advantage estimator (group-relative and token-level, with whitening) and several losses, in float64: the
// completions are token-identical (keyed sampling noise), and the advantages of each rank's rows, the loss and the
// updated weights equal the single process's to 1e-9.
struct SuccessorSource final : grpo::testing::TokenPromptSource {  // prompt [t]: right when the first token is t + 1
  std::vector<gt::Problem> train_batch(std::int64_t step, std::int64_t count) override {
    std::vector<gt::Problem> out;
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t t = 1 + (step * 7 + i * 3) % 5;
      out.push_back({.prompt_ids = {t, (t + i) % 6}, .prompt_text = std::to_string(t),
                     .row = std::make_shared<const grpo::rewards::Row>(
                         grpo::rewards::Row{{"answer", std::to_string(t + 1)}})});
    }
    return out;
  }
};

gt::StepScorer successor_scorer() {  // 1 for the right first token, plus 0.1 per completion character (spread)
  auto reward = grpo::rewards::make_reward("accuracy", [](const grpo::rewards::Completion& c) {
    const bool right = !c.text.empty() && c.text.substr(0, 1) == c.row->text("answer").value_or("");
    return (right ? 1.0 : 0.0) + 0.1 * static_cast<double>(c.text.size());
  });
  return gt::StepScorer(grpo::rewards::RewardSet({{reward, 1.0}}));
}

struct ScaleCase {
  std::string name;
  std::function<void(gt::GrpoTrainerOptions&)> configure;
};

std::vector<ScaleCase> scale_cases() {
  std::vector<ScaleCase> cases;
  for (const char* estimator : {"grpo", "dr_grpo", "group_mean_batch_std", "rloo", "reinforce_pp_baseline", "gpg",
                                "pass_at_k", "reinforce_pp", "remax", "optimal_token_baseline"}) {
    cases.push_back({std::string("advantage ") + estimator,
                     [estimator](gt::GrpoTrainerOptions& o) { gt::select_advantage(o, estimator); }});
  }
  cases.push_back({"grpo, whitened", [](gt::GrpoTrainerOptions& o) { o.whiten_advantages = true; }});
  cases.push_back({"reinforce_pp, whitened, KL in the reward", [](gt::GrpoTrainerOptions& o) {
                     gt::select_advantage(o, "reinforce_pp");
                     o.whiten_advantages = true;
                     o.kl_in_reward.beta = 0.05;
                   }});
  cases.push_back({"DAPO dynamic sampling (G 2: rounds drop groups without spread)", [](gt::GrpoTrainerOptions& o) {
                     o.group_size = 2;
                     o.dynamic_sampling_max_rounds = 4;
                   }});
  cases.push_back({"top-entropy mask 0.5 (dapo, 2 micro-batches)",
                   [](gt::GrpoTrainerOptions& o) { o.loss.top_entropy_quantile = 0.5; }});
  cases.push_back({"GMPO with the top-entropy mask inside its geometric mean", [](gt::GrpoTrainerOptions& o) {
                     o.loss.loss_type = grpo::LossType::grpo;
                     o.loss.policy.type = grpo::PolicyLossType::gmpo;
                     o.loss.policy.epsilon_low = o.loss.policy.epsilon_high = 0.4;
                     o.loss.top_entropy_quantile = 0.4;
                     o.mu = 2;
                   }});
  cases.push_back({"GDPO batch z-score", [](gt::GrpoTrainerOptions& o) {
                     o.advantage.aggregation = grpo::RewardAggregation::normalize_then_sum;
                   }});
  for (const char* loss : {"grpo", "dr_grpo", "gspo", "cispo"}) {
    cases.push_back({std::string("loss ") + loss, [loss](gt::GrpoTrainerOptions& o) {
                       o.loss = grpo::recipes::by_name(loss, o.sampling.max_new_tokens);
                       o.loss.beta = 0.04;  // and a reference
                     }});
  }
  return cases;
}

struct ScaleRun {
  SuccessorSource source;
  gt::StepScorer scorer = successor_scorer();
  grpo::models::CausalLM model;
  std::unique_ptr<gt::GrpoTrainer> trainer;
  ScaleRun(gt::ProcessGroup& group, const ScaleCase& c)
      : model((torch::manual_seed(3),
               grpo::models::CausalLM(grpo::testing::tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32})))) {
    model->to(torch::kFloat64);
    gt::GrpoTrainerOptions o{.steps = 2, .prompts_per_step = kPrompts, .group_size = 4, .seed = 9};
    o.sampling.max_new_tokens = 4;
    o.loss = grpo::recipes::dapo();
    o.learning_rate = 0.1;
    o.micro_batches = 2;
    c.configure(o);
    trainer = std::make_unique<gt::GrpoTrainer>(model, source, scorer, group, o);
  }
};

TEST_CASE("distributed worker trainer", "[.worker]") {
  run_worker([] {
    auto pg = gt::ProcessGroup::from_env(worker_options());
    REQUIRE(pg.world_size() == 2);
    gt::ProcessGroup solo{gt::ProcessGroupOptions{}};
    const gt::ShardRange range = gt::shard_range(kPrompts, pg.rank(), pg.world_size());
    for (const ScaleCase& c : scale_cases()) {
      INFO(c.name);
      ScaleRun ranks(pg, c), one(solo, c);
      double rounds = 0.0;  // dynamic sampling: the rounds of both steps
      for (std::int64_t step = 1; step <= 2; ++step) {
        INFO("step " << step);
        std::vector<gt::StepBatch> batches;
        std::vector<grpo::AdvantageOutput> advantages;
        std::vector<gt::StepReport> reports;
        for (ScaleRun* run : {&ranks, &one}) {
          run->trainer->begin_step(step);
          batches.push_back(run->trainer->collect_groups(step));
          advantages.push_back(run->trainer->advantages(batches.back()));
          const gt::UpdateResult update = run->trainer->policy_update(batches.back(), advantages.back());
          reports.push_back(run->trainer->finish_step(batches.back(), advantages.back(), update, 1.0));
        }
        const gt::StepBatch &mine = batches[0], &whole = batches[1];
        const std::int64_t group = mine.group_size, first = range.begin * group;
        if (ranks.trainer->options().dynamic_sampling_max_rounds > 0) {
          // The rounds keep the same groups (their spread is summed over ranks), each rank its own share in round
          // order: every completion of this rank is one of the single process's (prompt and tokens), and the ranks'
          // rows add up to its rows.
          std::multiset<std::vector<std::int64_t>> all;
          for (const auto& c : whole.completions) {
            std::vector<std::int64_t> key = whole.problems[c.group].prompt_ids;
            key.insert(key.end(), c.token_ids.begin(), c.token_ids.end());
            all.insert(key);
          }
          for (const auto& c : mine.completions) {
            std::vector<std::int64_t> key = mine.problems[c.group].prompt_ids;
            key.insert(key.end(), c.token_ids.begin(), c.token_ids.end());
            REQUIRE(all.count(key) > 0);
          }
          REQUIRE(pg.all_reduce(static_cast<double>(mine.rows())) == static_cast<double>(whole.rows()));
          rounds += reports[1].by_name.at("dynamic_sampling/rounds");
        } else {
          REQUIRE(mine.rows() == range.size() * group);
          REQUIRE(whole.rows() == kPrompts * group);
          for (std::int64_t b = 0; b < mine.rows(); ++b) {  // token-identical completions
            REQUIRE(mine.completions[static_cast<std::size_t>(b)].token_ids ==
                    whole.completions[static_cast<std::size_t>(first + b)].token_ids);
          }
        }
        const torch::Tensor a = advantages[0].advantages,
                            e = advantages[1].advantages.narrow(0, std::min(first, whole.rows() - mine.rows()), mine.rows());
        if (ranks.trainer->options().dynamic_sampling_max_rounds > 0) {
          // (rows in another order: compared through the loss and the weights below)
        } else if (a.dim() == 1) {
          GRPO_REQUIRE_CLOSE(a, e, 0.0, 1e-9);
        } else {  // token-level: this rank's rows may be narrower (padded to its own longest completion)
          GRPO_REQUIRE_CLOSE(a, e.narrow(1, 0, a.size(1)), 0.0, 1e-9);
          REQUIRE(e.narrow(1, a.size(1), e.size(1) - a.size(1)).abs().sum().item<double>() == 0.0);
        }
        REQUIRE(advantages[1].advantages.abs().sum().item<double>() > 0.1);  // not a trivial step
        for (const char* metric : {"loss", "reward", "frac_reward_zero_std", "grad_norm"}) {
          INFO(metric);
          const double got = reports[0].by_name.at(metric), expected = reports[1].by_name.at(metric);
          REQUIRE(std::abs(got - expected) <= 1e-9 * std::max(1.0, std::abs(expected)));
        }
        require_parameters_close(ranks.model, one.model, /*grads=*/false);
      }
      if (ranks.trainer->options().dynamic_sampling_max_rounds > 0) REQUIRE(rounds > 2.0);  // a step re-sampled
    }
  });
}

TEST_CASE("distributed worker join", "[.worker]") {
  run_worker([] {
    auto pg = gt::ProcessGroup::from_env(worker_options());
    pg.barrier();
    std::printf("rank %d of %d joined\n", pg.rank(), pg.world_size());
  });
}

// Three ranks: subgroups of some ranks (ranks 1 and 2), of all of them twice under one name (two groups, keys of
// their own), of one rank, with a timeout of their own; and point to point on the parent (bytes and a tensor).
TEST_CASE("distributed worker subgroups", "[.worker]") {
  run_worker([] {
    auto pg = gt::ProcessGroup::from_env(worker_options());
    if (pg.world_size() != 3) throw std::runtime_error("run with 3 ranks");
    if (pg.rank() > 0) {
      auto pair = pg.subgroup("pair", pg.rank() - 1, 2, gt::DistributedBackend::gloo, 5000ms);
      if (pair.options().collective_timeout != 5000ms) throw std::runtime_error("pair: not its own timeout");
      if (pair.all_reduce(static_cast<double>(pg.rank())) != 3.0) throw std::runtime_error("pair: sum is not 1 + 2");
    }
    for (int round = 1; round <= 2; ++round) {
      auto all = pg.subgroup("all", pg.rank(), 3, gt::DistributedBackend::gloo);
      if (all.options().collective_timeout != pg.options().collective_timeout) {
        throw std::runtime_error("all: not the parent's timeout");
      }
      if (all.all_reduce(static_cast<double>(round * (pg.rank() + 1))) != 6.0 * round) {
        throw std::runtime_error("all: wrong sum");
      }
    }
    auto solo = pg.subgroup(fmt::format("solo{}", pg.rank()), 0, 1, gt::DistributedBackend::gloo);
    if (solo.all_reduce(7.0) != 7.0 || solo.backend_name() != "none") throw std::runtime_error("solo: not the identity");
    const std::string bytes("grpo \0 bytes \xff", 14);
    if (pg.rank() == 0) {
      pg.send_bytes(bytes, 2, 5);
      pg.send_(torch::arange(6, torch::kFloat64).reshape({2, 3}), 1, 6);
      pg.send_bytes("", 1, 7);
    } else if (pg.rank() == 2) {
      if (pg.recv_bytes(0, 5) != bytes) throw std::runtime_error("recv_bytes: other bytes");
    } else {
      torch::Tensor t = torch::zeros({2, 3}, torch::kFloat64);
      pg.recv_(t, 0, 6);
      if (!torch::equal(t, torch::arange(6, torch::kFloat64).reshape({2, 3}))) throw std::runtime_error("recv_: values");
      if (!pg.recv_bytes(0, 7).empty()) throw std::runtime_error("recv_bytes: not empty");
    }
    bool refused = false;
    try {
      pg.send_(torch::zeros({1}), pg.rank(), 0);
    } catch (const grpo::Error& e) {
      refused = std::string(e.what()).find("cannot exchange with rank") != std::string::npos;
    }
    if (!refused) throw std::runtime_error("send_ to itself was not refused");
    pg.barrier();
    std::printf("rank %d: subgroups and point to point ok\n", pg.rank());
  });
}

// gather_graded over two ranks of unequal shares: rank 0 holds groups 5 and 7 (its numbering), with totals; rank 1
// one group numbered 5 too, without totals, with bytes outside ASCII, an empty text and a row without a judge's value.
TEST_CASE("distributed worker graded", "[.worker]") {
  run_worker([] {
    auto pg = gt::ProcessGroup::from_env(worker_options());
    gt::StepBatch mine;
    mine.step = 3;
    mine.group_size = 2;
    const auto add = [&](std::string prompt, std::string text, std::size_t group, std::optional<bool> correct) {
      grpo::rewards::Completion c;
      c.prompt = std::move(prompt);
      c.text = std::move(text);
      c.group = group;
      mine.completions.push_back(c);
      mine.correct.push_back(correct);
    };
    if (pg.rank() == 0) {
      add("p0", "a", 5, true);
      add("p0", "bb", 5, false);
      add("p1", "ccc", 7, false);
      mine.totals = {1.5f, -2.0f, std::nullopt};
    } else {
      add("p\xc3\xa9", "\xe2\x88\x9a" "2 \xff", 5, std::nullopt);
      add("p\xc3\xa9", "", 5, true);
    }
    const gt::StepBatch whole = gt::gather_graded(pg, mine);
    REQUIRE(whole.step == 3);
    REQUIRE(whole.group_size == 2);
    REQUIRE(whole.completions.size() == 5);
    const std::vector<std::string> prompts{"p0", "p0", "p1", "p\xc3\xa9", "p\xc3\xa9"};
    const std::vector<std::string> texts{"a", "bb", "ccc", "\xe2\x88\x9a" "2 \xff", ""};
    const std::vector<std::size_t> groups{0, 0, 1, 2, 2};  // rank 1's group 5 is not rank 0's
    const std::vector<std::optional<bool>> correct{true, false, false, std::nullopt, true};
    const std::vector<std::optional<float>> totals{1.5f, -2.0f, std::nullopt, std::nullopt, std::nullopt};
    for (std::size_t i = 0; i < 5; ++i) {
      INFO("row " << i);
      REQUIRE(whole.completions[i].prompt == prompts[i]);
      REQUIRE(whole.completions[i].text == texts[i]);
      REQUIRE(whole.completions[i].group == groups[i]);
      REQUIRE(whole.correct[i] == correct[i]);
      REQUIRE(whole.totals[i] == totals[i]);
    }
    std::printf("rank %d gathered %zu rows\n", pg.rank(), whole.completions.size());
  });
}

// Rank 1 kills itself (SIGKILL: no clean-up, as in an out-of-memory kill) in the middle of a run of all-reduces.
TEST_CASE("distributed worker die", "[.worker]") {
  run_worker([] {
    auto pg = gt::ProcessGroup::from_env(worker_options());
    for (int i = 0; i < 1000; ++i) {
      if (pg.rank() == 1 && i == 3) std::raise(SIGKILL);
      torch::Tensor t = torch::ones({4}, torch::kFloat64);
      pg.all_reduce_(t);
      REQUIRE(t[0].item<double>() == 2.0);
    }
  });
}

// Rank 1 stays alive but never reaches the collective.
TEST_CASE("distributed worker silent", "[.worker]") {
  run_worker([] {
    auto pg = gt::ProcessGroup::from_env(worker_options());
    if (pg.rank() == 1) std::this_thread::sleep_for(60s);
    torch::Tensor t = torch::ones({4}, torch::kFloat64);
    pg.all_reduce_(t);
  });
}

// A complete data-parallel GRPO loop (examples/minimal_loop.cpp's counting task: prompt digit d, reward for
// completions d, d+1, d+2, d+3) written with the drop-in lines of docs/distributed.md. Prints the reduced metrics
// on rank 0, then the time split and tokens/s; fails unless the mean reward of the last 10 steps exceeds
// GRPO_TEST_MIN_REWARD_PERCENT / 100. Sizes from GRPO_TEST_STEPS, _PROMPTS, _GROUP, _HIDDEN.
constexpr int64_t kCountVocab = 10, kCountLength = 4;

struct CountPolicyImpl : torch::nn::Module {
  explicit CountPolicyImpl(int64_t hidden_size)
      : digit(register_module("digit", torch::nn::Embedding(kCountVocab, 32))),
        position(register_module("position", torch::nn::Embedding(kCountLength, 32))),
        hidden(register_module("hidden", torch::nn::Linear(64, hidden_size))),
        head(register_module("head", torch::nn::Linear(hidden_size, kCountVocab))) {}
  torch::Tensor forward(const torch::Tensor& prompts) {  // [B] → logits [B, T, V]
    auto x = torch::cat({digit(prompts).unsqueeze(1).expand({-1, kCountLength, -1}),
                         position(torch::arange(kCountLength)).unsqueeze(0).expand({prompts.size(0), -1, -1})},
                        -1);
    return head(torch::relu(hidden(x)));
  }
  torch::nn::Embedding digit, position;
  torch::nn::Linear hidden, head;
};
TORCH_MODULE(CountPolicy);

TEST_CASE("distributed worker count", "[.worker]") {
  run_worker([] {
    using Clock = std::chrono::steady_clock;
    const int steps = env_int("GRPO_TEST_STEPS", 150);
    const int64_t prompts_per_step = env_int("GRPO_TEST_PROMPTS", 16), group = env_int("GRPO_TEST_GROUP", 16);
    auto pg = gt::ProcessGroup::from_env(worker_options());  // world size 1 without the launcher's variables
    torch::manual_seed(static_cast<uint64_t>(pg.rank()));    // ranks start different: the broadcast fixes that
    CountPolicy policy(env_int("GRPO_TEST_HIDDEN", 128));
    gt::broadcast_parameters(pg, *policy);
    torch::optim::AdamW optimizer(policy->parameters(), torch::optim::AdamWOptions(2e-3));
    grpo::GroupAdvantage advantage(grpo::GroupAdvantageOptions{});
    auto loss_options = grpo::recipes::dapo();
    loss_options.entropy_coef = 0.01;
    grpo::GrpoLoss loss(loss_options);
    const gt::ShardRange mine = gt::shard_range(prompts_per_step, pg.rank(), pg.world_size());
    const int64_t batch = mine.size() * group;
    torch::Generator sampling = at::detail::createCPUGenerator(1000 + static_cast<uint64_t>(pg.rank()));

    double sample_s = 0, loss_s = 0, reduce_s = 0, last_rewards = 0;
    const auto start = Clock::now();
    for (int step = 1; step <= steps; ++step) {
      auto t0 = Clock::now();
      // The global batch's prompts (the same draw on every rank), of which this rank takes its share.
      torch::Generator data = at::detail::createCPUGenerator(static_cast<uint64_t>(step));
      auto prompts = torch::randint(0, kCountVocab, {prompts_per_step}, data, torch::kInt64)
                         .narrow(0, mine.begin, mine.size())
                         .repeat_interleave(group);
      torch::Tensor ids;
      {
        torch::NoGradGuard no_grad;
        auto probs = torch::softmax(policy(prompts), -1);
        ids = torch::multinomial(probs.view({-1, kCountVocab}), 1, false, sampling).view({batch, kCountLength});
      }
      auto target = (prompts.unsqueeze(1) + torch::arange(kCountLength)) % kCountVocab;
      auto rewards = (ids == target).to(torch::kFloat).mean(1).view({mine.size(), group});
      auto adv = advantage(rewards);
      auto t1 = Clock::now();
      auto lp = grpo::token_log_probs(policy(prompts), ids, {.with_entropy = true});
      grpo::LossInputs inputs{.log_probs = lp.log_probs,
                              .advantages = adv.advantages,
                              .mask = torch::ones({batch, kCountLength}),
                              .entropy = lp.entropy};
      auto out = loss(inputs, gt::global_normaliser(pg, loss, inputs));  // drop-in line 1
      optimizer.zero_grad();
      out.loss.backward();
      auto t2 = Clock::now();
      gt::all_reduce_gradients(pg, policy->parameters());  // drop-in line 2
      auto t3 = Clock::now();
      optimizer.step();
      auto metrics = gt::loss_metric_values(out.metrics);  // drop-in line 3: reduce, log on rank 0
      metrics.push_back(
          {"reward", rewards.mean().item<double>(), gt::MetricReduction::weighted_mean, static_cast<double>(batch)});
      const auto reduced = gt::reduce_metrics(pg, metrics);
      const double reward = reduced.back().second;
      if (step > steps - 10) last_rewards += reward / 10.0;
      if (pg.is_main() && (step % 50 == 0 || step == 1)) std::printf("step %3d  reward %.3f\n", step, reward);
      sample_s += std::chrono::duration<double>(t1 - t0).count();
      loss_s += std::chrono::duration<double>(t2 - t1).count();
      reduce_s += std::chrono::duration<double>(t3 - t2).count();
    }
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    const double tokens = static_cast<double>(steps * batch * kCountLength);
    std::printf(
        "rank %d of %d: %.2f s, %.0f completion tokens/s in this process (sample %.2f s, loss+backward "
        "%.2f s, all-reduce %.2f s); last-10-step reward %.3f\n",
        pg.rank(), pg.world_size(), wall, tokens / wall, sample_s, loss_s, reduce_s, last_rewards);
    gt::check_parameters_consistent(pg, *policy);
    REQUIRE(last_rewards > env_int("GRPO_TEST_MIN_REWARD_PERCENT", 0) / 100.0);
  });
}

// Measures all_reduce_gradients on GRPO_TEST_MEGABYTES of float32 gradients (default 64) for several bucket sizes,
// printing the time per call and the algorithm bandwidth (bytes / time) on rank 0.
TEST_CASE("distributed worker bandwidth", "[.worker]") {
  run_worker([] {
    auto pg = gt::ProcessGroup::from_env(worker_options());
    const int64_t floats = int64_t{env_int("GRPO_TEST_MEGABYTES", 64)} << 18;
    std::vector<torch::Tensor> parameters;
    for (int i = 0; i < 64; ++i) {  // 64 equal tensors, like the layers of a model
      parameters.push_back(torch::zeros({floats / 64}, torch::requires_grad()));
      parameters.back().mutable_grad() = torch::ones({floats / 64});
    }
    for (const std::size_t bucket_mb : {1, 4, 25, 100}) {
      gt::all_reduce_gradients(pg, parameters, {.bucket_bytes = bucket_mb << 20, .check_parameters = false});
      const auto start = std::chrono::steady_clock::now();
      const int repeats = 3;
      gt::BucketStats stats;
      for (int r = 0; r < repeats; ++r)
        stats = gt::all_reduce_gradients(pg, parameters, {.bucket_bytes = bucket_mb << 20, .check_parameters = false});
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
      if (pg.is_main())
        std::printf("world %d, %lld MB of gradients, bucket %zu MB (%lld buckets): %.3f s per all-reduce, %.2f GB/s\n",
                    pg.world_size(), static_cast<long long>(stats.bytes >> 20), bucket_mb,
                    static_cast<long long>(stats.buckets), seconds, static_cast<double>(stats.bytes) / seconds / 1e9);
    }
  });
}

// ------------------------------------------------------------------------------------------------------------
// The multi-process tests.

// This binary running one worker; --warn NoTests makes a misspelt worker name fail instead of passing.
std::vector<std::string> worker_command(const std::string& worker) {
  return {fs::read_symlink("/proc/self/exe").string(), "distributed worker " + worker, "--warn", "NoTests"};
}

struct Ranks {
  fs::path dir;
  int port = grpo::testing::free_loopback_port();
  std::vector<grpo::testing::ChildProcess> children;

  explicit Ranks(const std::string& name) {
    dir = fs::temp_directory_path() / fmt::format("grpo-distributed-{}-{}", name, getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Ranks() {
    for (const auto& c : children) kill(c.pid, SIGKILL);
    for (const auto& c : children) waitpid(c.pid, nullptr, WNOHANG);
    fs::remove_all(dir);
  }

  // Starts the worker as `rank`; `env` overrides the defaults.
  void start(const std::string& worker, int rank, int world_size, std::map<std::string, std::string> env = {}) {
    std::map<std::string, std::string> base{{"RANK", std::to_string(rank)},
                                            {"LOCAL_RANK", std::to_string(rank)},
                                            {"WORLD_SIZE", std::to_string(world_size)},
                                            {"MASTER_ADDR", "127.0.0.1"},
                                            {"MASTER_PORT", std::to_string(port)},
                                            {"OMP_NUM_THREADS", "1"},
                                            {"GRPO_TEST_WORK_DIR", dir.string()}};
    env.merge(base);
    children.push_back(
        grpo::testing::spawn_process(worker_command(worker), env, dir / fmt::format("rank{}.log", rank)));
  }

  grpo::testing::ChildExit wait(size_t index, std::chrono::milliseconds timeout) {
    return grpo::testing::wait_process(children.at(index), timeout);
  }
};

/// Runs `worker` as ranks 0 and 1 and requires both to pass within `timeout`.
void require_two_ranks_pass(const std::string& worker, std::chrono::milliseconds timeout) {
  Ranks ranks(worker);
  ranks.start(worker, 0, 2);
  ranks.start(worker, 1, 2);
  for (size_t r = 0; r < 2; ++r) {
    const auto result = ranks.wait(r, timeout);
    INFO("rank " << r << " output:\n" << result.output);
    REQUIRE(!result.timed_out);
    REQUIRE(result.exit_code == 0);
  }
}

TEST_CASE("two ranks: summed gradients, 10 AdamW steps, metrics and checkpoints equal one process's", "[distributed]") {
  require_two_ranks_pass("train", 60s);
}

TEST_CASE("two GrpoTrainer ranks equal one process on the same global batch for every estimator and loss",
          "[distributed]") {
  require_two_ranks_pass("trainer", 300s);
}

TEST_CASE("two ranks learn the counting task through the drop-in loop lines", "[distributed]") {
  Ranks ranks("count");
  // The mean reward starts at 0.09 (chance is 0.1); after 60 steps it is 0.54 over the last 10 (0.95 after 150).
  const std::map<std::string, std::string> env{{"GRPO_TEST_STEPS", "60"}, {"GRPO_TEST_MIN_REWARD_PERCENT", "40"}};
  ranks.start("count", 0, 2, env);
  ranks.start("count", 1, 2, env);
  for (size_t r = 0; r < 2; ++r) {
    const auto result = ranks.wait(r, 60s);
    INFO("rank " << r << " output:\n" << result.output);
    REQUIRE(!result.timed_out);
    REQUIRE(result.exit_code == 0);
  }
}

TEST_CASE("gather_graded: every rank gets every rank's graded completions, in rank order, groups renumbered",
          "[distributed]") {
  require_two_ranks_pass("graded", 60s);
}

TEST_CASE("subgroups of some ranks, of all of them twice under one name and of one rank, and point to point",
          "[distributed]") {
  Ranks ranks("subgroups");
  for (int r = 0; r < 3; ++r) ranks.start("subgroups", r, 3);
  for (size_t r = 0; r < 3; ++r) {
    const auto result = ranks.wait(r, 60s);
    INFO("rank " << r << " output:\n" << result.output);
    REQUIRE(!result.timed_out);
    REQUIRE(result.exit_code == 0);
  }
}

TEST_CASE("a rank that dies makes the other fail at once with a clear error", "[distributed]") {
  Ranks ranks("die");
  // A long collective timeout: the survivor must notice the closed connection, not wait for the timeout.
  ranks.start("die", 0, 2, {{"GRPO_TEST_COLLECTIVE_MS", "60000"}});
  ranks.start("die", 1, 2, {{"GRPO_TEST_COLLECTIVE_MS", "60000"}});
  const auto dead = ranks.wait(1, 30s);
  REQUIRE(dead.signal == SIGKILL);
  const auto survivor = ranks.wait(0, 15s);
  INFO(survivor.output);
  REQUIRE(!survivor.timed_out);
  REQUIRE(survivor.exit_code != 0);
  REQUIRE(survivor.seconds < 10.0);
  REQUIRE_THAT(survivor.output, Contains("ProcessGroup::all_reduce_ failed on rank 0 of 2"));
}

TEST_CASE("a rank that stays silent makes the other fail after collective_timeout", "[distributed]") {
  Ranks ranks("silent");
  ranks.start("silent", 0, 2, {{"GRPO_TEST_COLLECTIVE_MS", "1000"}});
  ranks.start("silent", 1, 2, {{"GRPO_TEST_COLLECTIVE_MS", "1000"}});
  const auto waiting = ranks.wait(0, 20s);
  INFO(waiting.output);
  REQUIRE(!waiting.timed_out);
  REQUIRE(waiting.exit_code != 0);
  REQUIRE(waiting.seconds < 15.0);
  REQUIRE_THAT(waiting.output, Contains("failed on rank 0 of 2"));
  REQUIRE_THAT(waiting.output, Contains("within 1 s (collective_timeout)"));
}

TEST_CASE("a wrong WORLD_SIZE fails fast on both ranks, naming both values", "[distributed]") {
  Ranks ranks("world");
  ranks.start("join", 0, 2);
  ranks.start("join", 1, 3);  // one process believes in a third rank
  for (size_t r = 0; r < 2; ++r) {
    const auto result = ranks.wait(r, 20s);
    INFO("rank " << r << " output:\n" << result.output);
    REQUIRE(!result.timed_out);
    REQUIRE(result.exit_code != 0);
    REQUIRE(result.seconds < 10.0);  // the rendezvous timeout is 20 s: the mismatch is detected, not waited out
    REQUIRE_THAT(result.output, Contains("WORLD_SIZE=3") && Contains("WORLD_SIZE=2"));
  }
}

TEST_CASE("an unreachable master fails after rendezvous_timeout, naming MASTER_ADDR:MASTER_PORT", "[distributed]") {
  Ranks ranks("master");
  ranks.start("join", 1, 2, {{"GRPO_TEST_RENDEZVOUS_MS", "2000"}});  // no rank 0: nothing listens on the port
  const auto result = ranks.wait(0, 20s);
  INFO(result.output);
  REQUIRE(!result.timed_out);
  REQUIRE(result.exit_code != 0);
  REQUIRE(result.seconds < 10.0);
  REQUIRE_THAT(result.output, Contains(fmt::format("could not reach rank 0's TCPStore at 127.0.0.1:{}", ranks.port)));
}

TEST_CASE("launch.sh starts N ranks with prefixed output, and fails when one rank fails", "[distributed]") {
  Ranks ranks("launch");
  const std::string script = grpo::testing::launch_script();
  auto launch = [&](const std::string& worker) {
    std::vector<std::string> command{"/bin/bash", script, "-n", "2"};
    for (auto& part : worker_command(worker)) command.push_back(part);
    return command;
  };
  ranks.children.push_back(grpo::testing::spawn_process(launch("join"), {}, ranks.dir / "ok.log"));
  const auto ok = ranks.wait(0, 30s);
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  REQUIRE_THAT(ok.output, Contains("[rank0] rank 0 of 2 joined") && Contains("[rank1] rank 1 of 2 joined"));

  ranks.children.push_back(
      grpo::testing::spawn_process(launch("die"), {{"GRPO_TEST_COLLECTIVE_MS", "60000"}}, ranks.dir / "die.log"));
  const auto failed = ranks.wait(1, 30s);
  INFO(failed.output);
  REQUIRE(!failed.timed_out);
  REQUIRE(failed.exit_code != 0);
  REQUIRE(failed.seconds < 15.0);
  REQUIRE_THAT(failed.output, Contains("launch.sh: rank") && Contains("stopping the other ranks"));
}

// ------------------------------------------------------------------------------------------------------------
// In one process.

TEST_CASE("ProcessGroup of world size 1: no rendezvous, collectives are the identity", "[distributed]") {
  gt::ProcessGroup pg(gt::ProcessGroupOptions{});
  REQUIRE(pg.is_main());
  REQUIRE(pg.backend_name() == "none");
  torch::Tensor t = torch::tensor({1.5, -2.0}, torch::kFloat64);
  pg.all_reduce_(t, gt::ReduceOp::max);
  pg.broadcast_(t, 0);
  pg.barrier();
  REQUIRE(t[1].item<double>() == -2.0);
  REQUIRE(pg.all_reduce(3.0) == 3.0);
  const grpo::Normaliser n = gt::global_normaliser(pg, grpo::LossType::dapo, grpo::Normaliser::tokens(7));
  REQUIRE(n.value() == 7.0);
  REQUIRE_THROWS_WITH(gt::global_normaliser(pg, grpo::LossType::dapo, grpo::Normaliser::sequences(7)),
                      Contains("needs a Normaliser::tokens"));
  // No rows anywhere: an empty count, but no dr_grpo constant to divide by.
  REQUIRE(gt::global_normaliser(pg, grpo::LossType::grpo, std::nullopt).value() == 0.0);
  REQUIRE_THROWS_WITH(gt::global_normaliser(pg, grpo::LossType::dr_grpo, std::nullopt),
                      Contains("Normaliser::constant: value must be > 0"));

  // An undefined gradient becomes zeros, so every rank reduces the same buffers.
  torch::Tensor p = torch::ones({3}, torch::requires_grad());
  gt::all_reduce_gradients(pg, {p});
  REQUIRE(p.grad().defined());
  REQUIRE(p.grad().abs().sum().item<double>() == 0.0);
}

TEST_CASE("ProcessGroupOptions: validation and the environment", "[distributed]") {
  auto invalid = [](auto change, const char* message) {
    gt::ProcessGroupOptions o;
    change(o);
    REQUIRE_THROWS_AS(o.validate(), grpo::ConfigError);
    REQUIRE_THROWS_WITH(o.validate(), Contains(message));
  };
  invalid([](auto& o) { o.world_size = 0; }, "world_size (WORLD_SIZE) must be >= 1, got 0");
  invalid([](auto& o) { o.world_size = 2, o.rank = 2; }, "rank (RANK) must be in [0, 2) for world_size 2, got 2");
  invalid([](auto& o) { o.world_size = 2, o.master_port = 70000; }, "master_port (MASTER_PORT) must be in [1, 65535]");
  invalid([](auto& o) { o.collective_timeout = std::chrono::milliseconds(0); }, "collective_timeout must be > 0");
  if (!gt::built_with_nccl()) {
    invalid([](auto& o) { o.backend = gt::DistributedBackend::nccl; }, "this build has no c10d NCCL");
  } else if (!torch::cuda::is_available()) {
    // A CUDA build on a machine without a GPU (CI): NCCL is refused by name before c10d is asked.
    REQUIRE_THROWS_AS(gt::ProcessGroup(gt::ProcessGroupOptions{.backend = gt::DistributedBackend::nccl}),
                      grpo::ConfigError);
    REQUIRE_THROWS_WITH(gt::ProcessGroup(gt::ProcessGroupOptions{.backend = gt::DistributedBackend::nccl}),
                        Contains("backend 'nccl' (rank 0 of 1): no GPU is visible"));
  }

  // from_env: restores the variables it touches.
  struct Env {
    std::map<std::string, std::optional<std::string>> saved;
    void set(const std::string& k, const char* v) {
      if (!saved.count(k))
        saved[k] = std::getenv(k.c_str()) ? std::optional<std::string>(std::getenv(k.c_str())) : std::nullopt;
      if (v)
        setenv(k.c_str(), v, 1);
      else
        unsetenv(k.c_str());
    }
    ~Env() {
      for (auto& [k, v] : saved) v ? setenv(k.c_str(), v->c_str(), 1) : unsetenv(k.c_str());
    }
  } env;
  for (const char* k : {"WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"})
    env.set(k, nullptr);
  REQUIRE(gt::ProcessGroupOptions::from_env().world_size == 1);
  env.set("WORLD_SIZE", "2");
  env.set("RANK", "1");
  REQUIRE_THROWS_WITH(gt::ProcessGroupOptions::from_env(), Contains("WORLD_SIZE=2 but MASTER_ADDR is not set"));
  env.set("MASTER_ADDR", "10.0.0.5");
  env.set("MASTER_PORT", "29x");
  REQUIRE_THROWS_WITH(gt::ProcessGroupOptions::from_env(), Contains("MASTER_PORT='29x' is not an integer"));
  env.set("MASTER_PORT", "29600");
  gt::ProcessGroupOptions defaults;
  defaults.collective_timeout = std::chrono::milliseconds(1234);
  const auto o = gt::ProcessGroupOptions::from_env(defaults);
  REQUIRE(o.rank == 1);
  REQUIRE(o.local_rank == 1);  // LOCAL_RANK unset: RANK
  REQUIRE(o.world_size == 2);
  REQUIRE(o.master_addr == "10.0.0.5");
  REQUIRE(o.master_port == 29600);
  REQUIRE(o.collective_timeout.count() == 1234);
}

TEST_CASE("shard_range: contiguous, in rank order, sizes differing by at most one", "[distributed]") {
  // 7 over 3 ranks: 3, 2, 2 → [0, 3), [3, 5), [5, 7).
  REQUIRE(gt::shard_range(7, 0, 3).begin == 0);
  REQUIRE(gt::shard_range(7, 0, 3).end == 3);
  REQUIRE(gt::shard_range(7, 1, 3).begin == 3);
  REQUIRE(gt::shard_range(7, 1, 3).end == 5);
  REQUIRE(gt::shard_range(7, 2, 3).begin == 5);
  REQUIRE(gt::shard_range(7, 2, 3).end == 7);
  REQUIRE(gt::shard_range(1, 1, 2).size() == 0);  // more ranks than prompts: an empty share
  REQUIRE_THROWS_AS(gt::shard_range(4, 2, 2), grpo::ConfigError);
}

TEST_CASE("shard_prompt_indices: the ranks cover each step's global batch once, each epoch is a permutation",
          "[distributed]") {
  const gt::PromptShardingOptions options{.num_prompts = 10, .prompts_per_step = 4, .seed = 42};
  std::vector<int64_t> stream;  // the global batches of steps 0..4: positions 0..19, i.e. epochs 0 and 1
  for (int64_t step = 0; step < 5; ++step) {
    const auto global = gt::shard_prompt_indices(options, step, 0, 1);
    std::vector<int64_t> joined;
    for (int r = 0; r < 3; ++r) {
      const auto part = gt::shard_prompt_indices(options, step, r, 3);
      REQUIRE(static_cast<int64_t>(part.size()) == gt::shard_range(4, r, 3).size());
      joined.insert(joined.end(), part.begin(), part.end());
    }
    REQUIRE(joined == global);
    stream.insert(stream.end(), global.begin(), global.end());
  }
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> e(stream.begin() + epoch * 10, stream.begin() + epoch * 10 + 10);
    std::sort(e.begin(), e.end());
    std::vector<int64_t> expected(10);
    std::iota(expected.begin(), expected.end(), 0);
    REQUIRE(e == expected);
  }
  REQUIRE(std::vector<int64_t>(stream.begin(), stream.begin() + 10) !=
          std::vector<int64_t>(stream.begin() + 10, stream.begin() + 20));  // a fresh shuffle per epoch
  // Epoch e is the order of io::Dataset::shuffled(seed + e): a user iterating the Dataset sees the same batches.
  std::vector<grpo::io::Example> examples(10);
  for (size_t i = 0; i < examples.size(); ++i) examples[i].ground_truth = std::to_string(i);
  const grpo::io::Dataset dataset(examples);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto shuffled = dataset.shuffled(42 + static_cast<uint64_t>(epoch)).examples();
    for (size_t k = 0; k < shuffled.size(); ++k)
      REQUIRE(shuffled[k].ground_truth == std::to_string(stream[static_cast<size_t>(epoch) * 10 + k]));
  }
  // Without shuffling: dataset order, wrapping around. Step 2 of P = 4 over 10 rows: positions 8, 9, 10, 11.
  REQUIRE(gt::shard_prompt_indices({.num_prompts = 10, .prompts_per_step = 4, .shuffle = false}, 2, 0, 1) ==
          std::vector<int64_t>{8, 9, 0, 1});
  REQUIRE_THROWS_WITH(gt::shard_prompt_indices({.num_prompts = 0, .prompts_per_step = 4}, 0, 0, 1),
                      Contains("num_prompts must be > 0, got 0"));
}

TEST_CASE("loss_metric_values: sums for losses and counts, token means weighted by num_tokens, min and max",
          "[distributed]") {
  grpo::LossMetrics m;
  m.num_tokens = 6;
  m.loss = 0.5;
  m.kl_mean = 0.25;
  std::map<std::string, gt::MetricValue> by_name;
  for (const auto& v : gt::loss_metric_values(m)) by_name[v.name] = v;
  REQUIRE(by_name.at("loss").reduction == gt::MetricReduction::sum);
  REQUIRE(by_name.at("num_tokens").reduction == gt::MetricReduction::sum);
  REQUIRE(by_name.at("kl").reduction == gt::MetricReduction::weighted_mean);
  REQUIRE(by_name.at("kl").weight == 6.0);
  REQUIRE(by_name.at("ratio/min").reduction == gt::MetricReduction::min);
  REQUIRE(by_name.at("ratio/max").reduction == gt::MetricReduction::max);
  REQUIRE(by_name.at("ratio/mean").reduction == gt::MetricReduction::weighted_mean);

  gt::ProcessGroup single(gt::ProcessGroupOptions{});
  const auto reduced = gt::reduce_metrics(single, {{"a", 2.0, gt::MetricReduction::min, 0.0}});
  REQUIRE(reduced == std::vector<std::pair<std::string, double>>{{"a", 2.0}});
}

TEST_CASE("combine_metrics: micro-batches combine as their union, with the reductions of reduce_metrics",
          "[distributed]") {
  using R = gt::MetricReduction;
  const std::vector<std::vector<gt::MetricValue>> parts = {
      {{"loss", 0.5, R::sum, 2}, {"kl", 0.1, R::weighted_mean, 2}, {"ratio/min", 0.9, R::min, 2}, {"ratio/max", 1.1, R::max, 2}},
      {{"loss", 0.25, R::sum, 6}, {"kl", 0.3, R::weighted_mean, 6}, {"ratio/min", 0.7, R::min, 6}, {"ratio/max", 1.3, R::max, 6}},
      // A micro-batch without valid tokens: nothing measured, left out of min and max.
      {{"loss", 0.0, R::sum, 0}, {"kl", 5.0, R::weighted_mean, 0}, {"ratio/min", 0.0, R::min, 0}, {"ratio/max", 9.0, R::max, 0}},
  };
  const auto combined = gt::combine_metrics(parts);
  REQUIRE(combined.size() == 4);
  CHECK(combined[0].value == Approx(0.75));                   // 0.5 + 0.25 + 0
  CHECK(combined[1].value == Approx((2 * 0.1 + 6 * 0.3) / 8));  // token-weighted: 0.25
  CHECK(combined[2].value == Approx(0.7));
  CHECK(combined[3].value == Approx(1.3));
  for (const auto& m : combined) CHECK(m.weight == 8.0);
  CHECK(gt::combine_metrics({}).empty());
  const std::vector<std::vector<gt::MetricValue>> mismatched = {{{"loss", 1.0, R::sum, 1}}, {{"kl", 1.0, R::sum, 1}}};
  CHECK_THROWS_WITH(gt::combine_metrics(mismatched), Contains("metric 'kl' where part 0 has 'loss'"));
}

}  // namespace
