// SPDX-License-Identifier: Apache-2.0
// The device-generic code on a CUDA device against the same computation on the CPU: the kernels' generic path,
// blocked attention, the model, the sampler and GrpoTrainer's step (its batch on the CPU, the model on the GPU). Label "cuda": scripts/run-tests.sh leaves these tests out when no
// GPU is visible (nvidia-smi); this binary is built everywhere, so the code stays compiling against the CPU-only
// LibTorch too. With a CUDA LibTorch and a GPU, `scripts/test.sh -L cuda` runs them alone.
#include <grpo/logprob/fused_grpo_loss.hpp>
#include <grpo/logprob/linear_log_probs.hpp>
#include <grpo/logprob/token_log_probs.hpp>
#include <grpo/loss/recipes.hpp>
#include <grpo/models/attention.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/policy/keyed_noise.hpp>
#include <grpo/policy/sampler.hpp>
#include <grpo/train/distributed.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include <filesystem>

namespace {

const torch::Device kCuda(torch::kCUDA, 0);

void require_gpu() {
  REQUIRE(torch::cuda::is_available());  // the label is only run where a GPU is visible
}

}  // namespace

TEST_CASE("token_log_probs and linear_token_log_probs on a GPU equal the CPU kernels, values and gradients",
          "[cuda]") {
  require_gpu();
  torch::manual_seed(1);
  const auto logits = torch::randn({3, 5, 1001}, torch::kFloat64) * 3;
  const auto ids = torch::randint(0, 1001, {3, 5}, torch::kInt64);
  // detach() first: on the CPU, to() returns the tensor itself, which must stay a constant for the GPU's run.
  auto run = [&](const torch::Device& device) {
    auto x = logits.detach().to(device).requires_grad_(true);
    auto out = grpo::token_log_probs(x, ids.to(device), {.temperature = 0.7, .with_entropy = true});
    (out.log_probs.sum() + out.entropy.sum()).backward();
    return std::tuple{out.log_probs.cpu(), out.entropy.cpu(), x.grad().cpu()};
  };
  const auto [lp_cpu, h_cpu, g_cpu] = run(torch::kCPU);
  const auto [lp_gpu, h_gpu, g_gpu] = run(kCuda);
  GRPO_REQUIRE_CLOSE(lp_gpu, lp_cpu, 1e-10, 1e-12);
  GRPO_REQUIRE_CLOSE(h_gpu, h_cpu, 1e-10, 1e-12);
  GRPO_REQUIRE_CLOSE(g_gpu, g_cpu, 1e-10, 1e-12);

  const auto hidden = torch::randn({2, 4, 16}, torch::kFloat64), weight = torch::randn({1001, 16}, torch::kFloat64);
  auto linear = [&](const torch::Device& device) {
    auto h = hidden.detach().to(device).requires_grad_(true), w = weight.detach().to(device).requires_grad_(true);
    auto out = grpo::linear_token_log_probs(h, w, ids.narrow(0, 0, 2).narrow(1, 0, 4).to(device), {});
    out.log_probs.sum().backward();
    return std::tuple{out.log_probs.cpu(), h.grad().cpu(), w.grad().cpu()};
  };
  const auto [a_cpu, ah_cpu, aw_cpu] = linear(torch::kCPU);
  const auto [a_gpu, ah_gpu, aw_gpu] = linear(kCuda);
  GRPO_REQUIRE_CLOSE(a_gpu, a_cpu, 1e-10, 1e-12);
  GRPO_REQUIRE_CLOSE(ah_gpu, ah_cpu, 1e-10, 1e-12);
  GRPO_REQUIRE_CLOSE(aw_gpu, aw_cpu, 1e-10, 1e-12);
}

TEST_CASE("FusedGrpoLoss on a GPU equals the CPU kernel, loss and gradient", "[cuda]") {
  require_gpu();
  torch::manual_seed(2);
  const auto lp = torch::randn({4, 6}, torch::kFloat64) * 0.1 - 1.0;
  const auto old = lp + torch::randn({4, 6}, torch::kFloat64) * 0.05;
  const auto ref = lp + torch::randn({4, 6}, torch::kFloat64) * 0.05;
  const auto advantages = torch::randn({4}, torch::kFloat64);
  const auto mask = torch::ones({4, 6}, torch::kInt64);
  auto options = grpo::recipes::dapo();
  options.beta = 0.04;
  const grpo::FusedGrpoLoss loss(options);
  auto run = [&](const torch::Device& device) {
    auto x = lp.detach().to(device).requires_grad_(true);
    grpo::LossInputs in{.log_probs = x, .old_log_probs = old.to(device), .ref_log_probs = ref.to(device),
                        .advantages = advantages.to(device), .mask = mask.to(device)};
    auto out = loss(in, loss.local_normaliser(in));
    out.loss.backward();
    return std::pair{out.loss.cpu(), x.grad().cpu()};
  };
  const auto [l_cpu, g_cpu] = run(torch::kCPU);
  const auto [l_gpu, g_gpu] = run(kCuda);
  GRPO_REQUIRE_CLOSE(l_gpu, l_cpu, 1e-10, 1e-12);
  GRPO_REQUIRE_CLOSE(g_gpu, g_cpu, 1e-10, 1e-12);
}

TEST_CASE("blocked attention and a model on a GPU equal the CPU, and the sampler draws there",
          "[cuda]") {
  require_gpu();
  torch::manual_seed(3);
  const auto q = torch::randn({2, 4, 6, 8}, torch::kFloat64), k = torch::randn({2, 2, 6, 8}, torch::kFloat64),
             v = torch::randn({2, 2, 6, 8}, torch::kFloat64);
  const auto segments = torch::tensor({{0, 0, 1, 1, 1, 1}, {1, 1, 1, 2, 2, 0}}, torch::kInt64);
  GRPO_REQUIRE_CLOSE(
      grpo::models::blocked_attention(q.to(kCuda), k.to(kCuda), v.to(kCuda), segments.to(kCuda), 2).cpu(),
      grpo::models::blocked_attention(q, k, v, segments, 2), 1e-10, 1e-12);

  auto model = grpo::testing::random_fp64_model(
      grpo::testing::tiny_model_config({.vocab = 32, .hidden = 16, .intermediate = 32, .layers = 2, .heads = 4}), 4);
  const auto ids = torch::tensor({{0, 5, 7, 9}, {3, 3, 1, 2}}, torch::kInt64);
  const auto mask = torch::tensor({{0, 1, 1, 1}, {1, 1, 1, 1}}, torch::kInt64);
  const auto on_cpu = model->forward(ids, mask).detach() * mask.unsqueeze(-1);
  model->to(kCuda);
  const auto on_gpu = model->forward(ids.to(kCuda), mask.to(kCuda)).detach().cpu() * mask.unsqueeze(-1);
  GRPO_REQUIRE_CLOSE(on_gpu, on_cpu, 1e-10, 1e-12);

  grpo::Sampler first({.temperature = 1.0, .max_new_tokens = 5, .seed = 9}),
      second({.temperature = 1.0, .max_new_tokens = 5, .seed = 9});
  const auto a = first.generate(model, {{1, 2, 3}, {4, 5}}, 2), b = second.generate(model, {{1, 2, 3}, {4, 5}}, 2);
  REQUIRE(a.completion_ids.sizes() == torch::IntArrayRef({4, 5}));
  REQUIRE(torch::equal(a.completion_ids, b.completion_ids));  // keyed by seed, prompt and sample
  REQUIRE(a.completion_ids.min().item<int64_t>() >= 0);
  REQUIRE(a.completion_ids.max().item<int64_t>() < 32);
}

TEST_CASE("keyed sampling noise on a GPU is the CPU's: the same exponentials, the same race, the same completions",
          "[cuda]") {
  require_gpu();
  const std::vector<std::int64_t> key_values{static_cast<std::int64_t>(grpo::prompt_noise_key(5, 0)),
                                             static_cast<std::int64_t>(grpo::prompt_noise_key(5, 1)), -1, 0};
  const auto keys = torch::tensor(key_values, torch::kInt64), samples = torch::tensor({0, 1, 2, 70000}, torch::kInt64);
  const std::int64_t vocab = 151936;
  const auto cpu = grpo::keyed_exponential(keys, samples, 3, vocab, torch::kCPU);
  const auto gpu = grpo::keyed_exponential(keys, samples, 3, vocab, kCuda).cpu();
  GRPO_REQUIRE_CLOSE(gpu, cpu, 2.4e-7, 0.0);  // the same bits; the two float32 logs to an ulp
  torch::manual_seed(2);
  const auto probs = torch::softmax(torch::randn({4, vocab}) * 3.0, -1);
  REQUIRE(torch::equal(grpo::keyed_race(probs.to(kCuda), keys, samples, 3).cpu(),
                       grpo::keyed_race(probs, keys, samples, 3)));

  // A float64 model whose logits agree on both devices to 1e-10: the same completions, keyed by prompt and sample.
  auto model = grpo::testing::random_fp64_model(
      grpo::testing::tiny_model_config({.vocab = 32, .hidden = 16, .intermediate = 32, .layers = 2, .heads = 4}), 4);
  const grpo::SamplerOptions options{.temperature = 1.0, .max_new_tokens = 6, .top_p = 0.95, .seed = 9};
  const auto on_cpu = grpo::Sampler(options).generate(model, {{1, 2, 3}, {4, 5}}, 3);
  model->to(kCuda);
  const auto on_gpu = grpo::Sampler(options).generate(model, {{1, 2, 3}, {4, 5}}, 3);
  REQUIRE(torch::equal(on_gpu.completion_ids, on_cpu.completion_ids));
}

namespace {

/// Prompts [t] over a 32-token vocabulary; a completion is right when it starts with t (reward 1).
struct RepeatTask final : grpo::train::PromptSource {
  std::int64_t drawn = 0;
  std::vector<grpo::train::Problem> held;
  std::vector<grpo::train::Problem> train_batch(std::int64_t, std::int64_t count) override {
    std::vector<grpo::train::Problem> out;
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t token = 1 + (drawn++ * 5) % 30;
      out.push_back({.prompt_ids = {token}, .prompt_text = std::to_string(token),
                     .row = std::make_shared<const grpo::rewards::Row>(
                         grpo::rewards::Row{{"ground_truth", std::to_string(token)}})});
    }
    return out;
  }
  const std::vector<grpo::train::Problem>& held_out() const override { return held; }
  std::string decode(std::span<const std::int64_t> ids) const override {
    return ids.empty() ? "" : std::to_string(ids[0]);
  }
  std::vector<std::int64_t> eos_token_ids() const override { return {31}; }
  std::int64_t pad_token_id() const override { return 0; }
  void save_state(grpo::train::TrainerState& s) const override { s.values["repeat/drawn"] = static_cast<double>(drawn); }
  void load_state(const grpo::train::TrainerState& s) override {
    drawn = static_cast<std::int64_t>(s.values.at("repeat/drawn"));
  }
};

grpo::train::StepScorer repeat_scorer() {
  return grpo::train::StepScorer(grpo::rewards::RewardSet(
      {{grpo::rewards::make_reward("accuracy", [](const grpo::rewards::Completion& c) {
          return c.text == c.row->text("ground_truth").value_or("") ? 1.0 : 0.0;
        }), 1.0}}));
}

grpo::models::CausalLM small_model(torch::ScalarType dtype) {
  auto model = grpo::testing::random_fp64_model(
      grpo::testing::tiny_model_config({.vocab = 32, .hidden = 16, .intermediate = 32, .layers = 2, .heads = 4}), 5);
  model->to(kCuda, dtype);
  return model;
}

}  // namespace

TEST_CASE("GrpoTrainer steps a model on a GPU (KL in the loss and the reward, mu 2, rollout rejection, compensated "
          "bf16) and restores a checkpoint there", "[cuda]") {
  require_gpu();
  for (const auto precision : {grpo::train::OptimizerPrecision::fp32_master, grpo::train::OptimizerPrecision::compensated}) {
    INFO(grpo::train::to_string(precision));
    RepeatTask task;
    auto scorer = repeat_scorer();
    grpo::train::ProcessGroup group{grpo::train::ProcessGroupOptions{}};
    auto model = small_model(torch::kBFloat16);
    grpo::train::GrpoTrainerOptions o{.steps = 2, .prompts_per_step = 4, .group_size = 4, .seed = 3};
    o.sampling.max_new_tokens = 3;
    o.loss = grpo::recipes::dapo();
    o.loss.beta = 0.04;
    o.kl_in_reward.beta = 0.01;
    o.mu = 2;
    o.micro_batches = 2;
    o.loss.rollout_rejection = grpo::parse_rollout_rejection("token_k1", "100");
    o.optimizer_precision = precision;
    o.learning_rate = 1e-2;
    grpo::train::GrpoTrainer trainer(model, task, scorer, group, o);
    std::vector<torch::Tensor> before;
    for (const auto& p : model->parameters()) before.push_back(p.detach().cpu().clone());
    const auto report = trainer.step(1);
    for (const auto& [name, value] : report.scalars) {
      INFO(name);
      CHECK(std::isfinite(value));
    }
    bool moved = false;
    std::size_t i = 0;
    for (const auto& p : model->parameters()) {
      CHECK(p.device().is_cuda());
      moved = moved || !torch::equal(p.detach().cpu(), before[i++]);
    }
    CHECK(moved);
    const auto dir = grpo::testing::fresh_temp_dir("cuda_trainer");
    grpo::train::CheckpointManager checkpoints({.directory = dir, .keep_last = 0});
    trainer.save(checkpoints, 1);
    auto again = small_model(torch::kBFloat16);
    RepeatTask task_again;
    grpo::train::GrpoTrainer resumed(again, task_again, scorer, group, o);
    REQUIRE(resumed.restore(checkpoints) == 1);
    trainer.step(2);
    resumed.step(2);
    const auto pa = model->parameters(), pb = again->parameters();
    for (std::size_t j = 0; j < pa.size(); ++j) CHECK(torch::equal(pa[j].cpu(), pb[j].cpu()));
  }
}

TEST_CASE("GrpoTrainer::policy_update on a GPU equals the CPU's (fp64, a fixed batch)", "[cuda]") {
  require_gpu();
  auto update = [](const torch::Device& device) {
    RepeatTask task;
    auto scorer = repeat_scorer();
    grpo::train::ProcessGroup group{grpo::train::ProcessGroupOptions{}};
    auto model = grpo::testing::random_fp64_model(
        grpo::testing::tiny_model_config({.vocab = 32, .hidden = 16, .intermediate = 32, .layers = 2, .heads = 4}), 5);
    model->to(device);
    grpo::train::GrpoTrainerOptions o{.steps = 1, .prompts_per_step = 1, .group_size = 4, .seed = 3};
    o.loss = grpo::recipes::dapo();
    o.micro_batches = 2;
    grpo::train::GrpoTrainer trainer(model, task, scorer, group, o);
    grpo::train::StepBatch batch;
    batch.step = 1;
    batch.group_size = 4;
    batch.max_new_tokens = 5;
    batch.problems = task.train_batch(1, 1);
    auto& r = batch.rollout;  // on the CPU, as the sampler returns it
    r.prompt_ids = torch::tensor({{0, 4, 9}}, torch::kInt64).repeat({4, 1});
    r.prompt_mask = torch::tensor({{0, 1, 1}}, torch::kInt64).repeat({4, 1});
    r.completion_ids = torch::tensor({{1, 2, 3, 4, 5}, {6, 7, 8, 0, 0}, {9, 10, 0, 0, 0}, {11, 12, 13, 14, 15}});
    r.completion_mask = (r.completion_ids != 0).to(torch::kInt64);
    r.truncated = torch::zeros({4}, torch::kBool);
    r.sampler_log_probs = torch::zeros({4, 5}, torch::kFloat64);
    for (int g = 0; g < 4; ++g) {
      batch.completions.push_back({.group = 0});
      batch.totals.push_back(static_cast<float>(g % 2));
    }
    trainer.policy_update(batch, trainer.advantages(batch));
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().cpu());
    return out;
  };
  const auto cpu = update(torch::kCPU), gpu = update(kCuda);
  REQUIRE(cpu.size() == gpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) GRPO_REQUIRE_CLOSE(gpu[i], cpu[i], 1e-9, 1e-11);
}

TEST_CASE("ProcessGroup with backend nccl on one GPU: collectives run through NCCL, CPU tensors staged on the GPU",
          "[cuda]") {
  require_gpu();
  namespace gt = grpo::train;
  REQUIRE(gt::built_with_nccl());
  gt::ProcessGroup group(gt::ProcessGroupOptions{.backend = gt::DistributedBackend::nccl});
  REQUIRE(group.backend_name() == "nccl");
  REQUIRE(group.exchange_device() == kCuda);
  torch::Tensor on_gpu = torch::arange(6, torch::kFloat64).to(kCuda);
  group.all_reduce_(on_gpu);  // one rank: the sum is the tensor itself, computed by NCCL on the GPU
  GRPO_REQUIRE_CLOSE(on_gpu.cpu(), torch::arange(6, torch::kFloat64), 0.0, 0.0);
  torch::Tensor on_cpu = torch::tensor({1.5f, -2.0f});
  group.all_reduce_(on_cpu, gt::ReduceOp::max);
  group.broadcast_(on_cpu, 0);
  REQUIRE(on_cpu.device().is_cpu());
  REQUIRE(on_cpu[1].item<float>() == -2.0f);
  REQUIRE(group.all_reduce(2.5, gt::ReduceOp::min) == 2.5);
  group.barrier();
  // GPU gradients through the trainer's helper (one rank: left as they are, an undefined one made zeros).
  torch::Tensor p = torch::ones({3}, torch::TensorOptions().device(kCuda).requires_grad(true));
  (p * 2).sum().backward();
  gt::all_reduce_gradients(group, {p});
  GRPO_REQUIRE_CLOSE(p.grad().cpu(), torch::full({3}, 2.0f), 0.0, 0.0);
}
