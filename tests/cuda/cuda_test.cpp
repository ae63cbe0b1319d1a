// SPDX-License-Identifier: Apache-2.0
// The device-generic code on a CUDA device against the same computation on the CPU: the kernels' generic path,
// blocked attention, the model and the sampler. Label "cuda": scripts/run-tests.sh leaves these tests out when no
// GPU is visible (nvidia-smi); this binary is built everywhere, so the code stays compiling against the CPU-only
// LibTorch too. With a CUDA LibTorch and a GPU, `scripts/test.sh -L cuda` runs them alone.
#include <grpo/logprob/fused_grpo_loss.hpp>
#include <grpo/logprob/linear_log_probs.hpp>
#include <grpo/logprob/token_log_probs.hpp>
#include <grpo/loss/recipes.hpp>
#include <grpo/models/attention.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/policy/sampler.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

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
  auto run = [&](const torch::Device& device) {
    auto x = logits.to(device).requires_grad_(true);
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
    auto h = hidden.to(device).requires_grad_(true), w = weight.to(device).requires_grad_(true);
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
    auto x = lp.to(device).requires_grad_(true);
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
  REQUIRE(torch::equal(a.completion_ids, b.completion_ids));  // the device generator is seeded
  REQUIRE(a.completion_ids.min().item<int64_t>() >= 0);
  REQUIRE(a.completion_ids.max().item<int64_t>() < 32);
}
