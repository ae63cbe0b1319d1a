// SPDX-License-Identifier: Apache-2.0
#include <grpo/policy/rollout.hpp>

#include <catch2/catch.hpp>

namespace {

grpo::Rollout make(std::vector<std::vector<int64_t>> prompts, std::vector<std::vector<int64_t>> completions,
                   int64_t pad) {
  // Builds left-padded prompts and right-padded completions by hand.
  int64_t tp = 0, tc = 0;
  for (const auto& p : prompts) tp = std::max<int64_t>(tp, static_cast<int64_t>(p.size()));
  for (const auto& c : completions) tc = std::max<int64_t>(tc, static_cast<int64_t>(c.size()));
  const auto B = static_cast<int64_t>(prompts.size());
  grpo::Rollout r{torch::full({B, tp}, pad, torch::kInt64), torch::zeros({B, tp}, torch::kInt64),
                  torch::full({B, tc}, pad, torch::kInt64), torch::zeros({B, tc}, torch::kInt64),
                  torch::zeros({B}, torch::kBool),          torch::zeros({B, tc}, torch::kFloat32)};
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[static_cast<std::size_t>(b)];
    const auto& c = completions[static_cast<std::size_t>(b)];
    for (std::size_t i = 0; i < p.size(); ++i) {
      r.prompt_ids[b][tp - static_cast<int64_t>(p.size()) + static_cast<int64_t>(i)] = p[i];
      r.prompt_mask[b][tp - static_cast<int64_t>(p.size()) + static_cast<int64_t>(i)] = 1;
    }
    for (std::size_t i = 0; i < c.size(); ++i) {
      r.completion_ids[b][static_cast<int64_t>(i)] = c[i];
      r.completion_mask[b][static_cast<int64_t>(i)] = 1;
      r.sampler_log_probs[b][static_cast<int64_t>(i)] = -0.5f * static_cast<float>(i + 1);
    }
    r.truncated[b] = c.size() == 3;
  }
  return r;
}

}  // namespace

TEST_CASE("Rollout::select and concat_rollouts keep each row's tokens, masks and flags", "[policy][rollout]") {
  const int64_t pad = 0;
  const auto a = make({{5, 6}, {7}}, {{1, 2, 3}, {4}}, pad);
  const auto b = make({{8, 9, 10}}, {{11, 12}}, pad);
  const auto joined = grpo::concat_rollouts({a, b}, pad);
  // The same rollout built by hand in one go.
  const auto expected = make({{5, 6}, {7}, {8, 9, 10}}, {{1, 2, 3}, {4}, {11, 12}}, pad);
  CHECK(torch::equal(joined.prompt_ids, expected.prompt_ids));
  CHECK(torch::equal(joined.prompt_mask, expected.prompt_mask));
  CHECK(torch::equal(joined.completion_ids, expected.completion_ids));
  CHECK(torch::equal(joined.completion_mask, expected.completion_mask));
  CHECK(torch::equal(joined.truncated, expected.truncated));
  CHECK(torch::equal(joined.sampler_log_probs, expected.sampler_log_probs));

  const auto picked = joined.select(torch::tensor({2, 0}, torch::kInt64));
  CHECK(torch::equal(picked.completion_ids, torch::tensor({{11, 12, 0}, {1, 2, 3}}, torch::kInt64)));
  CHECK(torch::equal(picked.truncated, torch::tensor({false, true})));
  // Token rewards in one part only: the others get zeros, the padding too; select keeps them.
  auto rewarded = b;
  rewarded.completion_rewards = torch::tensor({{0.0f, -0.5f}});
  const auto with_rewards = grpo::concat_rollouts({a, rewarded}, pad);
  CHECK(torch::equal(with_rewards.completion_rewards, torch::tensor({{0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f},
                                                                     {0.0f, -0.5f, 0.0f}})));
  CHECK(!joined.completion_rewards.defined());
  CHECK(torch::equal(with_rewards.select(torch::tensor({2}, torch::kInt64)).completion_rewards,
                     torch::tensor({{0.0f, -0.5f, 0.0f}})));
  // An empty part (a round that kept nothing) adds no rows.
  const auto none = a.select(torch::zeros({0}, torch::kInt64));
  CHECK(grpo::concat_rollouts({none, b}, pad).batch_size() == 1);
  CHECK_THROWS_AS(grpo::concat_rollouts({}, pad), grpo::Error);
}
