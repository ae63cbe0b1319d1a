// SPDX-License-Identifier: Apache-2.0
#include <grpo/models/causal_lm.hpp>
#include <grpo/policy/policy.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include <vector>

namespace {

/// Four sequences with left-padded prompts of 2–5 tokens and right-padded completions of 1–6 tokens.
grpo::Rollout ragged_rollout(int64_t vocab) {
  torch::manual_seed(31);
  grpo::Rollout r;
  r.prompt_ids = torch::randint(0, vocab, {4, 5}, torch::kInt64);
  r.prompt_mask = torch::tensor({{0, 0, 0, 1, 1}, {1, 1, 1, 1, 1}, {0, 1, 1, 1, 1}, {0, 0, 1, 1, 1}}, torch::kInt64);
  r.completion_ids = torch::randint(0, vocab, {4, 6}, torch::kInt64);
  r.completion_mask =
      torch::tensor({{1, 1, 1, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, {1, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 0, 0}}, torch::kInt64);
  r.prompt_ids.masked_fill_(r.prompt_mask == 0, 0);
  r.completion_ids.masked_fill_(r.completion_mask == 0, 0);
  return r;
}

struct Result {
  torch::Tensor log_probs, entropy;
  std::vector<torch::Tensor> grads;
};

Result run(grpo::Policy<grpo::models::CausalLM>& policy, const grpo::Rollout& r, const torch::Tensor& weights) {
  policy.model()->zero_grad();
  auto out = policy.token_log_probs(r, /*with_entropy=*/true);
  const auto mask = r.completion_mask.to(torch::kFloat64);
  ((out.log_probs * weights + out.entropy) * mask).sum().backward();
  Result result{out.log_probs.detach() * mask, out.entropy.detach() * mask, {}};
  for (const auto& p : policy.model()->parameters()) result.grads.push_back(p.grad().clone());
  return result;
}

}  // namespace

TEST_CASE("pack_sequences gives the padded forward's log-probs, entropy and gradients (fp64, ragged rows)",
          "[policy][packing]") {
  auto config = grpo::testing::tiny_model_config(
      {.vocab = 40, .hidden = 16, .intermediate = 24, .layers = 2, .heads = 4, .kv_heads = 2});
  auto model = grpo::testing::random_fp64_model(config, 32);
  const auto r = ragged_rollout(config.vocab_size);
  const auto weights = torch::randn({4, 6}, torch::kFloat64);
  for (int64_t chunk : {0, 3}) {
    INFO("chunk_sequences " << chunk);
    grpo::Policy<grpo::models::CausalLM> padded(model, {.chunk_sequences = chunk});
    grpo::Policy<grpo::models::CausalLM> packed(model, {.chunk_sequences = chunk, .pack_sequences = true});
    const auto expected = run(padded, r, weights);
    const auto actual = run(packed, r, weights);
    GRPO_REQUIRE_CLOSE(actual.log_probs, expected.log_probs, 1e-12, 1e-12);
    GRPO_REQUIRE_CLOSE(actual.entropy, expected.entropy, 1e-12, 1e-12);
    REQUIRE(actual.grads.size() == expected.grads.size());
    for (size_t i = 0; i < expected.grads.size(); ++i) {
      REQUIRE(expected.grads[i].abs().sum().item<double>() > 0.0);
      GRPO_REQUIRE_CLOSE(actual.grads[i], expected.grads[i], 1e-10, 1e-12);
    }
  }
}

TEST_CASE("packed_hidden_states gives each sequence the hidden states it has alone", "[models][packing]") {
  auto config = grpo::testing::tiny_model_config({.vocab = 40, .hidden = 16, .intermediate = 24, .layers = 2});
  auto model = grpo::testing::random_fp64_model(config, 33);
  const auto a = torch::tensor({{3, 9, 1, 4}}, torch::kInt64), b = torch::tensor({{7, 2, 2}}, torch::kInt64);
  const auto packed = model->packed_hidden_states(torch::cat({a, b}, 1), torch::tensor({{0, 1, 2, 3, 0, 1, 2}}),
                                                  torch::tensor({{1, 1, 1, 1, 2, 2, 2}}));
  GRPO_REQUIRE_CLOSE(packed.narrow(1, 0, 4), model->hidden_states(a), 1e-12, 1e-12);
  GRPO_REQUIRE_CLOSE(packed.narrow(1, 4, 3), model->hidden_states(b), 1e-12, 1e-12);
  REQUIRE_THROWS_WITH(model->packed_hidden_states(a, torch::tensor({{0, 1, 2}}), torch::ones({1, 4}, torch::kInt64)),
                      Catch::Contains("position_ids must be int64 of input_ids' shape [1, 4], got [1, 3]"));
}
