// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer as a library user composes it: a prompt source and a surrogate of their own, steps, save, restore and a
// bit-exact resume; overlapped scoring equals sequential scoring; pass rates reach the source over the judged
// completions only; the phases compose into step(); a registered surrogate equals the built-in one it re-implements.
#include <grpo/models/lora.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/loss/recipes.hpp>
#include <grpo/io/read_file.hpp>
#include <support/model_testing.hpp>
#include <support/tensor_testing.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

namespace fs = std::filesystem;
using namespace grpo;

namespace {

fs::path scratch(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("grpo_trainer_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// The metrics of a step that do not depend on the clock.
std::map<std::string, double> deterministic(const train::Scalars& scalars) {
  std::map<std::string, double> out(scalars.begin(), scalars.end());
  std::erase_if(out, [](const auto& e) {
    return e.first == "step_time" || e.first == "tokens_per_second" || e.first.find("seconds") != std::string::npos ||
           e.first.starts_with("timing_s/") || e.first.starts_with("perf/");
  });
  return out;
}

bool same_parameters(models::CausalLM& a, models::CausalLM& b) {
  const auto pa = a->parameters(), pb = b->parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    if (!torch::equal(pa[i], pb[i])) return false;
  }
  return pa.size() == pb.size();
}

/// Registers plain REINFORCE, −A·log π, as `name` (once per process).
void register_reinforce(const std::string& name) {
  if (PolicyLossRegistry::global().contains(name)) return;
  PolicyLossRegistry::global().add(name, [](const auto& lp, const auto&, const auto& adv, const auto& mask,
                                            const PolicyLossOptions&) {
    PolicyLossOutput out;
    out.per_token_loss = -(adv.dim() == 1 ? adv.unsqueeze(1) : adv) * lp * mask;
    return out;
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// A custom trainer in under 60 lines: "repeat the prompt's token" over an 8-token vocabulary, a surrogate registered
// by name (−A·log π, plain REINFORCE), a reward written as a lambda.

namespace {

struct CopyTask final : train::PromptSource {  // prompt [t], answer: t again; state = prompts drawn
  std::int64_t drawn = 0;
  std::vector<train::Problem> held;
  train::Problem problem(std::int64_t token) const {
    return {.prompt_ids = {token}, .prompt_text = std::to_string(token),
            .row = std::make_shared<const rewards::Row>(rewards::Row{{"ground_truth", std::to_string(token)}})};
  }
  std::vector<train::Problem> train_batch(std::int64_t, std::int64_t count) override {
    std::vector<train::Problem> out;
    for (std::int64_t i = 0; i < count; ++i) out.push_back(problem(1 + (drawn++ * 5) % 6));
    return out;
  }
  const std::vector<train::Problem>& held_out() const override { return held; }
  std::string decode(std::span<const std::int64_t> ids) const override {
    return ids.empty() ? "" : std::to_string(ids[0]);
  }
  std::vector<std::int64_t> eos_token_ids() const override { return {7}; }
  std::int64_t pad_token_id() const override { return 0; }
  void save_state(train::TrainerState& s) const override { s.values["copy/drawn"] = static_cast<double>(drawn); }
  void load_state(const train::TrainerState& s) override { drawn = static_cast<std::int64_t>(s.values.at("copy/drawn")); }
};

struct CopyRun {  // everything a run owns, built the same way for the straight and the resumed run
  CopyTask task;
  train::StepScorer scorer{rewards::RewardSet({{rewards::make_reward("accuracy", [](const rewards::Completion& c) {
                                                  return c.text == c.row->text("ground_truth").value_or("") ? 1.0 : 0.0;
                                                }), 1.0}})};
  train::ProcessGroup group{train::ProcessGroupOptions{}};
  models::CausalLM model;
  std::unique_ptr<train::GrpoTrainer> trainer;
  /// adaptive_entropy: the entropy bonus starts at 0.01 and moves by 0.01 per optimizer step towards `target`.
  /// dtype: the model's; lora: adapters on every projection (the reference is then the base model, not synced).
  explicit CopyRun(std::optional<double> adaptive_entropy_target = std::nullopt,
                   torch::ScalarType dtype = torch::kFloat32, bool lora = false,
                   train::OptimizerPrecision precision = train::OptimizerPrecision::fp32_master)
      : model((torch::manual_seed(7), models::CausalLM(testing::tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32})))) {
    model->to(dtype);
    if (lora) models::add_lora(model, {.rank = 2, .alpha = 4, .dropout = 0.1, .target_modules = {"all-linear"}});
    train::GrpoTrainerOptions o{.steps = 4, .prompts_per_step = 4, .group_size = 4, .seed = 11};
    if (adaptive_entropy_target) {
      o.adaptive_entropy = train::AdaptiveEntropyOptions{.target = *adaptive_entropy_target, .delta = 0.01};
    }
    o.sampling.max_new_tokens = 2;
    o.loss = recipes::grpo();
    o.loss.beta = 0.02;
    o.kl = {.type = train::KlControl::adaptive, .target = 1e-6, .horizon = 20};  // β moves every step
    o.ref_sync_every = lora ? 0 : 1;  // a reference that moves too (saved in checkpoints)
    o.ref_sync_alpha = 0.5;
    o.dynamic_sampling_max_rounds = 2;  // extra rounds draw more prompts: the source's state matters
    o.mu = 2;
    o.micro_batches = 2;
    o.generation_chunks = 2;
    o.learning_rate = 0.05;
    o.optimizer_precision = precision;
    select_policy_loss(o.loss, "test_reinforce");
    if (adaptive_entropy_target) o.loss.entropy_coef = 0.01;
    trainer = std::make_unique<train::GrpoTrainer>(model, task, scorer, group, o);
  }
};

}  // namespace

TEST_CASE("GrpoTrainer: a custom prompt source and a registered surrogate train, save, restore and resume bit-exactly",
          "[train][trainer]") {
  register_reinforce("test_reinforce");
  const auto dir = scratch("custom");
  train::CheckpointManager straight_checkpoints({.directory = dir / "straight", .keep_last = 0});
  CopyRun straight;
  std::vector<train::Scalars> metrics;
  std::int64_t straight_drawn_at_2 = 0;
  double beta_at_2 = 0.0;
  for (std::int64_t step = 1; step <= 4; ++step) {
    metrics.push_back(straight.trainer->step(step).scalars);
    if (step == 2) {
      straight.trainer->save(straight_checkpoints, step);
      straight_drawn_at_2 = straight.task.drawn;
      beta_at_2 = straight.trainer->kl_controller().beta();
    }
  }
  // The run learned something and used the registered surrogate's gradient (the loss moved the weights).
  const std::map<std::string, double> last(metrics.back().begin(), metrics.back().end());
  CHECK(last.at("num_tokens") > 0);
  CHECK(last.count("kl") == 1);
  CHECK(std::isfinite(last.at("loss")));
  CHECK(beta_at_2 != 0.02);  // the adaptive controller moved β

  // A new process's worth of objects, restored from step 2, runs steps 3 and 4: the same weights and metrics.
  CopyRun resumed;
  train::CheckpointManager resumed_checkpoints({.directory = dir / "straight", .keep_last = 0});
  REQUIRE(resumed.trainer->restore(resumed_checkpoints) == 2);
  CHECK(resumed.task.drawn == straight_drawn_at_2);
  CHECK(resumed.trainer->kl_controller().beta() == beta_at_2);
  for (std::int64_t step = 3; step <= 4; ++step) {
    CHECK(deterministic(resumed.trainer->step(step).scalars) == deterministic(metrics[step - 1]));
  }
  CHECK(same_parameters(resumed.model, straight.model));
}

TEST_CASE("GrpoTrainer: loss.beta is beta's one owner: recipes::grpo() trains with its 0.04 against a frozen reference",
          "[train][trainer][kl]") {
  // A library user who writes options.loss = recipes::grpo() gets TRL's GRPO loss with its beta 0.04: the reference is
  // built and every step's loss has the KL term; beta 0 builds no reference and logs no KL.
  for (const double beta : {0.04, 0.0}) {
    INFO("beta " << beta);
    CopyTask task;
    train::StepScorer scorer{rewards::RewardSet({{rewards::make_reward("accuracy", [](const rewards::Completion& c) {
                                                    return c.text == c.row->text("ground_truth").value_or("") ? 1.0 : 0.0;
                                                  }), 1.0}})};
    train::ProcessGroup group{train::ProcessGroupOptions{}};
    torch::manual_seed(7);
    models::CausalLM model(testing::tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32}));
    train::GrpoTrainerOptions o{.steps = 2, .prompts_per_step = 4, .group_size = 4, .seed = 3};
    o.sampling.max_new_tokens = 2;
    o.loss = recipes::grpo();
    REQUIRE(o.loss.beta == 0.04);  // the recipe's own value
    o.loss.beta = beta;
    o.learning_rate = 0.05;
    train::GrpoTrainer trainer(model, task, scorer, group, o);
    CHECK(trainer.kl_controller().beta() == beta);
    for (std::int64_t step = 1; step <= 2; ++step) {
      const train::Scalars scalars = trainer.step(step).scalars;
      const std::map<std::string, double> metrics(scalars.begin(), scalars.end());
      CHECK(metrics.at("kl_coef") == beta);     // the beta this step's loss used
      CHECK(metrics.count("kl") == (beta > 0.0 ? 1u : 0u));  // measured against the reference
      if (beta > 0.0 && step == 2) CHECK(metrics.at("kl") > 0.0);  // the policy moved away from the frozen copy
    }
  }
}

TEST_CASE("GrpoTrainer: a bf16 model trains through fp32 master weights or compensated bf16 AdamW, a LoRA model trains "
          "its adapters only, and all resume bit-exactly", "[train][trainer][precision][lora]") {
  register_reinforce("test_reinforce");
  struct Variant {
    const char* name;
    torch::ScalarType dtype;
    bool lora;
    train::OptimizerPrecision precision = train::OptimizerPrecision::fp32_master;
  };
  for (const Variant variant :
       {Variant{"bf16", torch::kBFloat16, false}, Variant{"fp32 LoRA", torch::kFloat32, true},
        Variant{"bf16 LoRA", torch::kBFloat16, true},
        Variant{"bf16 compensated", torch::kBFloat16, false, train::OptimizerPrecision::compensated}}) {
    INFO(variant.name);
    const auto dir = scratch(std::string("precision_") + (variant.lora ? "lora_" : "") + c10::toString(variant.dtype) +
                             "_" + std::string(train::to_string(variant.precision)));
    const bool masters = variant.dtype == torch::kBFloat16 && !variant.lora &&
                         variant.precision == train::OptimizerPrecision::fp32_master;
    train::CheckpointManager checkpoints({.directory = dir, .keep_last = 0});
    CopyRun straight(std::nullopt, variant.dtype, variant.lora, variant.precision);
    std::map<std::string, torch::Tensor> start;
    for (const auto& p : straight.model->named_parameters()) start.emplace(p.key(), p.value().clone());
    std::vector<train::Scalars> metrics;
    for (std::int64_t step = 1; step <= 4; ++step) {
      metrics.push_back(straight.trainer->step(step).scalars);
      if (step == 2) straight.trainer->save(checkpoints, step);
    }
    // What moved: every trainable parameter; with LoRA nothing else.
    for (const auto& p : straight.model->named_parameters()) {
      INFO(p.key());
      CHECK(p.value().scalar_type() == (models::is_lora_parameter(p.key()) ? torch::kFloat32 : variant.dtype));
      CHECK(torch::equal(p.value(), start.at(p.key())) == (variant.lora && !models::is_lora_parameter(p.key())));
    }
    const std::map<std::string, double> last(metrics.back().begin(), metrics.back().end());
    CHECK(last.at("kl") > 0.0);
    const auto file = dir / "checkpoint-2";
    CHECK(fs::exists(file / "adapter" / "adapter_model.safetensors") == variant.lora);
    CHECK(fs::exists(file / "master_weights.safetensors") == masters);
    CHECK(models::from_pretrained(file)->lm_head_weight().scalar_type() == variant.dtype);  // saved as trained

    CopyRun resumed(std::nullopt, variant.dtype, variant.lora, variant.precision);
    REQUIRE(resumed.trainer->restore(checkpoints) == 2);
    for (std::int64_t step = 3; step <= 4; ++step) {
      CHECK(deterministic(resumed.trainer->step(step).scalars) == deterministic(metrics[step - 1]));
    }
    CHECK(same_parameters(resumed.model, straight.model));
    // A run with the other optimizer precision cannot take this checkpoint's optimizer state: the error says so.
    if (variant.dtype == torch::kBFloat16 && !variant.lora) {
      const auto other = variant.precision == train::OptimizerPrecision::compensated
                             ? train::OptimizerPrecision::fp32_master
                             : train::OptimizerPrecision::compensated;
      CopyRun switched(std::nullopt, variant.dtype, false, other);
      CHECK_THROWS_WITH(switched.trainer->restore(checkpoints), Catch::Contains("optimizer_precision"));
    }
    // A resumed run without the fp32 masters would round them from bf16: the checkpoint is required to have them.
    if (masters) {
      fs::remove(file / "master_weights.safetensors");
      CopyRun without(std::nullopt, variant.dtype, false);
      CHECK_THROWS_WITH(without.trainer->restore(checkpoints), Catch::Contains("master_weights.safetensors"));
    }
    fs::remove_all(dir);
  }
}

TEST_CASE("GrpoTrainer with LoRA: the reference log-probs are the base model's (the adapters off), no second copy",
          "[train][trainer][lora]") {
  register_reinforce("test_reinforce");
  CopyRun run(std::nullopt, torch::kFloat32, true);
  {
    torch::NoGradGuard no_grad;  // adapters that change the outputs
    for (auto& p : run.model->named_parameters()) {
      if (models::is_lora_parameter(p.key())) p.value().normal_(0.0, 0.5);
    }
  }
  run.trainer->begin_step(1);
  const auto batch = run.trainer->collect_groups(1);
  REQUIRE(batch.ref_log_probs.defined());
  torch::NoGradGuard no_grad;
  Policy<models::CausalLM> base(models::deep_copy(run.model));  // deep_copy has no adapters: the base
  Policy<models::CausalLM> adapted(run.model);
  GRPO_REQUIRE_CLOSE(batch.ref_log_probs, base.token_log_probs(batch.rollout).log_probs, 0, 0);
  CHECK((batch.ref_log_probs - adapted.token_log_probs(batch.rollout).log_probs).abs().max().item<double>() > 1e-3);
}

TEST_CASE("MasterWeights: updates below bf16's resolution accumulate in fp32, and micro-batch gradients sum in fp32",
          "[train][precision]") {
  // Weights near 1 (bf16 spacing 2⁻⁷ above 1, 2⁻⁸ below) and Adam steps of lr = 1e-3: a pure bf16 update is rounded away.
  auto weight = torch::full({4}, 1.0, torch::kBFloat16).set_requires_grad(true);
  train::MasterWeights master({{"w", weight}});
  REQUIRE(master.mixed());
  REQUIRE(master.masters()[0].scalar_type() == torch::kFloat32);
  auto reference = torch::full({4}, 1.0, torch::kFloat32).set_requires_grad(true);  // what fp32 training computes
  torch::optim::AdamW optimizer(master.masters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.0));
  torch::optim::AdamW fp32(std::vector<torch::Tensor>{reference}, torch::optim::AdamWOptions(1e-3).weight_decay(0.0));
  for (int step = 0; step < 10; ++step) {
    optimizer.zero_grad();
    fp32.zero_grad();
    // Two micro-batches whose gradients are exact in bf16 but whose bf16 sum is not (1 + 2⁻⁹ rounds to 1).
    for (double g : {1.0, 1.0 / 512}) {
      (weight * g).sum().backward();
      master.accumulate_gradients();
      CHECK_FALSE(weight.grad().defined());
      (reference * g).sum().backward();
    }
    CHECK(torch::equal(master.masters()[0].grad(), reference.grad()));
    optimizer.step();
    fp32.step();
    master.masters_to_parameters();
  }
  CHECK(torch::equal(master.masters()[0], reference.detach()));
  CHECK(reference.detach()[0].item<double>() == Approx(1.0 - 10e-3).epsilon(1e-4));
  CHECK(torch::equal(weight.detach(), reference.detach().to(torch::kBFloat16)));  // 0.99 in bf16: the update landed
  // Full-precision parameters are their own masters.
  auto full = torch::ones({3}, torch::kFloat32).set_requires_grad(true);
  train::MasterWeights same({{"w", full}});
  CHECK_FALSE(same.mixed());
  CHECK(same.masters()[0].is_same(full));
  CHECK(same.state().empty());
}

TEST_CASE("GrpoTrainer: each phase's time and the peak memory are in the step's metrics, inside the step's time",
          "[train][trainer]") {
  register_reinforce("test_reinforce");
  CopyRun run;
  const auto report = run.trainer->step(1);
  const auto& m = report.by_name;
  for (const char* phase : {"timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/ref",
                            "timing_s/update_actor/forward", "timing_s/update_actor/backward",
                            "timing_s/update_actor/optimizer"}) {
    INFO(phase);
    CHECK(m.at(phase) > 0.0);  // this run samples, scores, has μ = 2 (old log-probs) and a reference
  }
  CHECK(m.at("timing_s/update_actor") == Approx(m.at("timing_s/update_actor/forward") +
                                                m.at("timing_s/update_actor/backward") +
                                                m.at("timing_s/update_actor/optimizer")));
  const double phases = m.at("timing_s/gen") + m.at("timing_s/reward") + m.at("timing_s/old_log_prob") +
                        m.at("timing_s/ref") + m.at("timing_s/update_actor");
  CHECK(phases <= m.at("step_time"));
  // getrusage's peak: more than the model's weights, less than the machine.
  CHECK(m.at("perf/peak_rss_gb") > 0.01);
  CHECK(m.at("perf/peak_rss_gb") < 1024.0);
}

TEST_CASE("GrpoTrainer: adaptive entropy control moves the coefficient per optimizer step and resumes bit-exactly",
          "[train][trainer]") {
  register_reinforce("test_reinforce");
  // Target 10 nats is above any entropy of an 8-token vocabulary (≤ ln 8): each of the μ = 2 optimizer steps per
  // trainer step raises the coefficient by 0.01 (TRL's rule), and from the second pass on the bonus applies.
  const auto dir = scratch("adaptive_entropy");
  train::CheckpointManager checkpoints({.directory = dir, .keep_last = 0});
  CopyRun straight(10.0);
  CHECK(straight.trainer->entropy_controller().applied() == 0.0);  // nothing measured yet: +inf > target
  std::vector<train::Scalars> metrics;
  for (std::int64_t step = 1; step <= 4; ++step) {
    metrics.push_back(straight.trainer->step(step).scalars);
    const std::map<std::string, double> logged(metrics.back().begin(), metrics.back().end());
    CHECK(logged.at("entropy_coef") == Approx(0.01 + 0.02 * static_cast<double>(step)).epsilon(1e-12));
    const double entropy = straight.trainer->entropy_controller().last_entropy();
    CHECK((entropy > 0.0 && entropy <= std::log(8.0) + 1e-9));
    CHECK(straight.trainer->entropy_controller().applied() == straight.trainer->entropy_controller().coef());
    if (step == 2) straight.trainer->save(checkpoints, step);
  }
  CopyRun resumed(10.0);
  REQUIRE(resumed.trainer->restore(checkpoints) == 2);
  CHECK(resumed.trainer->entropy_controller().coef() == Approx(0.05).epsilon(1e-12));
  CHECK(std::isfinite(resumed.trainer->entropy_controller().last_entropy()));
  for (std::int64_t step = 3; step <= 4; ++step) {
    CHECK(deterministic(resumed.trainer->step(step).scalars) == deterministic(metrics[step - 1]));
  }
  CHECK(same_parameters(resumed.model, straight.model));

  // Target 0: the entropy is always above it, so the coefficient falls to its minimum (0) and the bonus never
  // applies: the run equals one without an entropy bonus.
  CopyRun never(0.0), without;
  for (std::int64_t step = 1; step <= 2; ++step) {
    const auto a = never.trainer->step(step).scalars;
    const auto b = without.trainer->step(step).scalars;
    const std::map<std::string, double> logged(a.begin(), a.end());
    CHECK(logged.at("entropy_coef") == 0.0);
    CHECK(logged.at("loss") == std::map<std::string, double>(b.begin(), b.end()).at("loss"));
  }
  CHECK(same_parameters(never.model, without.model));
}

TEST_CASE("PolicyLossRegistry: a registered surrogate equals the built-in one it re-implements, value and gradient",
          "[train][trainer][loss]") {
  register_reinforce("test_reinforce_fp64");
  torch::manual_seed(3);
  const auto lp_values = -torch::rand({3, 5}, torch::kFloat64) * 3;
  const auto adv = torch::randn({3}, torch::kFloat64);
  auto mask = torch::ones({3, 5}, torch::kInt64);
  mask[1].slice(0, 2).fill_(0);
  mask[2].fill_(0);  // an empty row
  auto loss_of = [&](GrpoLossOptions options) {
    auto lp = lp_values.clone().requires_grad_(true);
    GrpoLoss loss(options);
    LossInputs in;
    in.log_probs = lp;
    in.advantages = adv;
    in.mask = mask;
    const auto out = loss(in, loss.local_normaliser(in));
    out.loss.backward();
    return std::pair{out.loss.item<double>(), lp.grad()};
  };
  auto builtin = recipes::dapo();
  builtin.policy.type = PolicyLossType::gpg;  // verl's gpg: −A·lp
  auto registered = recipes::dapo();
  select_policy_loss(registered, "test_reinforce_fp64");
  const auto [a, grad_a] = loss_of(builtin);
  const auto [b, grad_b] = loss_of(registered);
  CHECK(a == Approx(b).epsilon(1e-12));
  CHECK(torch::allclose(grad_a, grad_b, 1e-12, 1e-12));
  // By hand: the dapo loss is Σ −A_i·lp_it over valid tokens / the number of valid tokens (7).
  double by_hand = 0.0;
  for (int i = 0; i < 3; ++i) {
    for (int t = 0; t < 5; ++t) {
      if (mask[i][t].item<int64_t>()) by_hand -= adv[i].item<double>() * lp_values[i][t].item<double>();
    }
  }
  CHECK(b == Approx(by_hand / 7.0).epsilon(1e-12));
  // Names: a built-in selects the type; an unknown name lists the built-in and the registered ones.
  select_policy_loss(registered, "cispo");
  CHECK(registered.policy.type == PolicyLossType::cispo);
  CHECK(registered.policy_loss_name.empty());
  CHECK_THROWS_WITH(select_policy_loss(registered, "nope"),
                    Catch::Contains("unknown policy loss 'nope'") && Catch::Contains("ppo_clip") &&
                        Catch::Contains("test_reinforce_fp64"));
  CHECK_THROWS_WITH(PolicyLossRegistry::global().add("gmpo", nullptr), Catch::Contains("null function"));
  CHECK_THROWS_WITH(PolicyLossRegistry::global().add("gmpo", [](const auto&, const auto&, const auto&, const auto&,
                                                                const PolicyLossOptions&) { return PolicyLossOutput{}; }),
                    Catch::Contains("'gmpo' is a built-in policy loss"));
}

namespace {

/// A prompt source that records what it observed.
struct ObservingTask final : train::PromptSource {
  std::vector<train::Problem> held;
  std::vector<double> observed;
  std::vector<train::Problem> train_batch(std::int64_t, std::int64_t count) override {
    std::vector<train::Problem> out;
    for (std::int64_t i = 0; i < count; ++i) {
      out.push_back({.prompt_ids = {1 + i % 5}, .prompt_text = std::to_string(i),
                     .row = std::make_shared<const rewards::Row>(rewards::Row{{"index", std::to_string(i)}})});
    }
    return out;
  }
  const std::vector<train::Problem>& held_out() const override { return held; }
  std::string decode(std::span<const std::int64_t> ids) const override {
    std::string out;
    for (const auto id : ids) out += std::to_string(id) + " ";
    return out;
  }
  std::vector<std::int64_t> eos_token_ids() const override { return {7}; }
  std::int64_t pad_token_id() const override { return 0; }
  void observe(std::span<const train::Problem>, std::span<const double> rates, std::int64_t) override {
    observed.assign(rates.begin(), rates.end());
  }
};

train::GrpoTrainerOptions small_options() {
  train::GrpoTrainerOptions o{.steps = 3, .prompts_per_step = 4, .group_size = 3, .seed = 5};
  o.sampling.max_new_tokens = 3;
  o.loss = recipes::dapo();
  o.learning_rate = 0.02;
  return o;
}

}  // namespace

TEST_CASE("GrpoTrainer: pass rates count the judged completions only, and the phases compose into step()",
          "[train][trainer]") {
  // The judge: no value for prompt 0 (a failed call), value 1 ("correct") for prompt 1, 0 for the rest, and a
  // second reward that varies within groups so every group has spread.
  auto judge = rewards::make_reward("accuracy", [](const rewards::Completion& c) -> std::optional<double> {
    const auto index = c.row->text("index").value_or("");
    if (index == "0") return std::nullopt;
    return index == "1" ? 1.0 : 0.0;
  });
  auto noise = rewards::make_reward("length", [](const rewards::Completion& c) { return c.text.size() % 3; });
  ObservingTask task;
  train::StepScorer scorer(rewards::RewardSet({{judge, 1.0}, {noise, 0.1}}));
  train::ProcessGroup group{train::ProcessGroupOptions{}};
  torch::manual_seed(1);
  models::CausalLM model(testing::tiny_model_config({.vocab = 8}));
  train::GrpoTrainer trainer(model, task, scorer, group, small_options());
  trainer.begin_step(1);
  const auto batch = trainer.collect_groups(1);
  REQUIRE(task.observed.size() == 4);
  CHECK(std::isnan(task.observed[0]));  // nothing judged: unknown, so a curriculum retires nothing
  CHECK(task.observed[1] == 1.0);
  CHECK(task.observed[2] == 0.0);
  CHECK(batch.rows() == 12);
  CHECK(batch.completions[4].group == 1);
  const auto adv = trainer.advantages(batch);
  REQUIRE(adv.advantages.numel() == 12);
  const auto update = trainer.policy_update(batch, adv);
  const auto report = trainer.finish_step(batch, adv, update, 1.0);
  CHECK(report.by_name.at("rewards/accuracy/mean") == Approx(3.0 / 9.0));  // prompt 1's 3 of the 9 judged
  CHECK(report.by_name.at("rewards/accuracy/frac_no_value") == Approx(3.0 / 12.0));
  CHECK(report.by_name.at("learning_rate") == 0.02);

  // The same step by step() from the same start gives the same numbers.
  ObservingTask task2;
  torch::manual_seed(1);
  models::CausalLM model2(testing::tiny_model_config({.vocab = 8}));
  train::GrpoTrainer trainer2(model2, task2, scorer, group, small_options());
  CHECK(deterministic(trainer2.step(1).scalars) == deterministic(report.scalars));
  CHECK(same_parameters(model, model2));
}

TEST_CASE("GrpoTrainer: the sampler's probabilities against the trainer's recomputation, as verl's debug metrics",
          "[train][trainer]") {
  auto reward = rewards::make_reward("length", [](const rewards::Completion& c) { return c.text.size() % 3; });
  train::StepScorer scorer(rewards::RewardSet({{reward, 1.0}}));
  train::ProcessGroup group{train::ProcessGroupOptions{}};
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    INFO(c10::toString(dtype));
    ObservingTask task;
    auto model = testing::random_fp64_model(testing::tiny_model_config({.vocab = 8}), 3);
    model->to(dtype);
    auto options = small_options();
    options.sampling.max_new_tokens = 6;
    options.kl_in_reward.beta = 0.01;  // the rollout policy's log-probs are recomputed
    train::GrpoTrainer trainer(model, task, scorer, group, options);
    trainer.begin_step(1);
    const auto batch = trainer.collect_groups(1);
    REQUIRE(batch.old_log_probs.defined());
    const auto adv = trainer.advantages(batch);
    const auto report = trainer.finish_step(batch, adv, trainer.policy_update(batch, adv), 1.0);
    // Independently: torch's reductions over the valid tokens, in fp64.
    const auto valid = batch.rollout.completion_mask != 0;
    const auto a = batch.rollout.sampler_log_probs.to(torch::kFloat64).exp().masked_select(valid);
    const auto b = batch.old_log_probs.to(torch::kFloat64).exp().masked_select(valid);
    const auto d = (a - b).abs();
    REQUIRE(d.numel() > 10);
    CHECK(report.by_name.at("training/rollout_probs_diff_max") == Approx(d.max().item<double>()).margin(1e-15));
    CHECK(report.by_name.at("training/rollout_probs_diff_mean") == Approx(d.mean().item<double>()).margin(1e-15));
    CHECK(report.by_name.at("training/rollout_probs_diff_std") == Approx(d.std().item<double>()).margin(1e-12));
    CHECK(report.by_name.at("training/rollout_actor_probs_pearson_corr") ==
          Approx(torch::corrcoef(torch::stack({a, b}))[0][1].item<double>()).margin(1e-9));
    // The sampler records what the trainer computes, as fp32 log-probs (its KV cache changes only the rounding): at
    // μ = 1 the ratio is 1 up to fp32 rounding (measured: 3.5e-8 for the fp64 model).
    CHECK(d.max().item<double>() < (dtype == torch::kFloat64 ? 1e-6 : 1e-5));
  }
  // Without a recomputation there is nothing to compare: no such metric.
  ObservingTask task;
  auto model = testing::random_fp64_model(testing::tiny_model_config({.vocab = 8}), 3);
  train::GrpoTrainer plain(model, task, scorer, group, small_options());
  const auto scalars = plain.step(1).scalars;
  CHECK(std::none_of(scalars.begin(), scalars.end(),
                     [](const auto& e) { return e.first.starts_with("training/rollout"); }));
}

TEST_CASE("GrpoTrainer: scoring chunk k while chunk k + 1 samples gives the sequential numbers", "[train][trainer]") {
  auto reward = rewards::make_reward("accuracy", [](const rewards::Completion& c) {
    return c.text.find('3') != std::string::npos ? 1.0 : 0.0;
  });
  std::vector<train::Scalars> results;
  for (const bool overlap : {false, true}) {
    ObservingTask task;
    train::StepScorer scorer(rewards::RewardSet({{reward, 1.0}}), overlap);
    train::ProcessGroup group{train::ProcessGroupOptions{}};
    torch::manual_seed(2);
    models::CausalLM model(testing::tiny_model_config({.vocab = 8}));
    auto options = small_options();
    options.generation_chunks = 2;
    train::GrpoTrainer trainer(model, task, scorer, group, options);
    trainer.step(1);
    results.push_back(trainer.step(2).scalars);
  }
  CHECK(deterministic(results[0]) == deterministic(results[1]));
}

TEST_CASE("GrpoTrainerOptions: invalid values are rejected with the setting's name", "[train][trainer]") {
  auto options = small_options();
  options.group_size = 1;
  CHECK_THROWS_WITH(options.validate(), Catch::Contains("group_size must be >= 2"));
  options = small_options();
  options.ref_sync_alpha = 2;
  CHECK_THROWS_WITH(options.validate(), Catch::Contains("ref_sync_alpha must be in [0, 1]"));
  options = small_options();
  options.loss.policy.epsilon_low = -1;
  CHECK_THROWS_WITH(options.validate(), Catch::Contains("epsilon_low"));
  options = small_options();
  options.eval_temperature = -0.5;
  CHECK_THROWS_WITH(options.validate(), Catch::Contains("eval_temperature must be >= 0 (0 = greedy)"));
  options.eval_temperature = 0.0;  // greedy evaluation
  CHECK_NOTHROW(options.validate());
  options = small_options();
  options.eval_top_p = 1.5;
  CHECK_THROWS_WITH(options.validate(), Catch::Contains("evaluation sampling (eval_top_p"));
  options = small_options();
  options.dynamic_sampling_metric = "";
  CHECK_THROWS_WITH(options.validate(), Catch::Contains("dynamic_sampling_metric"));
}
