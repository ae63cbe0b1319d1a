// SPDX-License-Identifier: Apache-2.0
// GroupAdvantage against TRL's group advantages (_generate_and_score_completions, huggingface/trl @ f2cd577) and
// verl's outcome estimators (verl/trainer/ppo/core_algos.py @ b178a3c). verl has no missing rewards: a group with
// NaN entries is given to verl as the group of its valid entries (a group of one is verl's singleton group), and
// the batch of verl's batch-level steps is the valid entries.
#include <grpo/advantage/group_advantage.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "parity/parity_support.hpp"
#include "parity/references.hpp"

namespace {

using grpo::AdvantageEstimator;
using grpo::GroupAdvantage;
using grpo::GroupAdvantageOptions;
using grpo::SingletonGroup;
namespace ref = parity::ref;
const double kNaN = std::nan("");

/// Reward matrices [P, G]: continuous rewards, binary rewards (ties, zero-std groups), rewards with NaN (a group
/// with one valid entry, a group with none).
std::vector<std::pair<std::string, torch::Tensor>> reward_sets() {
  torch::manual_seed(21);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.emplace_back("continuous 4x6", torch::randn({4, 6}, parity::kF64));
  out.emplace_back("binary 5x4", torch::randint(0, 2, {5, 4}).to(torch::kFloat64));
  auto with_nan = torch::rand({4, 5}, parity::kF64) * 2 - 0.5;
  with_nan[0][1] = kNaN;
  with_nan[1].fill_(kNaN);
  with_nan[1][3] = 0.8;  // singleton group
  with_nan[2].fill_(kNaN);  // nothing valid
  out.emplace_back("with NaN 4x5", with_nan);
  out.emplace_back("constant groups 3x3", torch::tensor({{1.0, 1.0, 1.0}, {0.0, 0.0, 0.0}, {0.0, 1.0, 0.5}}, parity::kF64));
  return out;
}

/// The valid entries as verl's (scores, index) batch, with their flat positions.
struct VerlBatch {
  torch::Tensor scores;
  std::vector<int64_t> index, position;
};

VerlBatch verl_batch(const torch::Tensor& rewards) {
  VerlBatch v;
  std::vector<double> s;
  const int64_t P = rewards.size(0), G = rewards.size(1);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t g = 0; g < G; ++g) {
      const double r = rewards[p][g].item<double>();
      if (std::isnan(r)) continue;
      s.push_back(r);
      v.index.push_back(p);
      v.position.push_back(p * G + g);
    }
  v.scores = torch::tensor(s, parity::kF64);
  return v;
}

/// Scatters verl's per-valid-entry advantages to [P·G], 0 at missing rewards.
torch::Tensor scatter(const VerlBatch& v, const torch::Tensor& values, int64_t n) {
  auto out = torch::zeros({n}, parity::kF64);
  for (size_t i = 0; i < v.position.size(); ++i) out[v.position[i]] = values[static_cast<int64_t>(i)];
  return out;
}

}  // namespace

TEST_CASE("GroupAdvantage grpo dr_grpo and group_mean_batch_std match TRL scale_rewards [parity]") {
  for (const auto& [name, rewards] : reward_sets()) {
    const int64_t G = rewards.size(1);
    for (const auto& [estimator, scale] : std::vector<std::pair<AdvantageEstimator, std::string>>{
             {AdvantageEstimator::grpo, "group"},
             {AdvantageEstimator::dr_grpo, "none"},
             {AdvantageEstimator::group_mean_batch_std, "batch"}}) {
      INFO("rewards " << name << ", TRL scale_rewards " << scale);
      GroupAdvantage adv(GroupAdvantageOptions{.estimator = estimator, .eps = 1e-4});
      auto lib = adv(rewards).advantages;
      auto expected = ref::trl_advantages(rewards.reshape({-1, 1}), torch::ones({1}, parity::kF64), G, scale,
                                          "sum_then_normalize");
      PARITY_CHECK_CLOSE(lib, expected);
    }
  }
}

TEST_CASE("GroupAdvantage with K reward functions matches TRL multi_objective_aggregation [parity]") {
  torch::manual_seed(22);
  auto rewards = torch::randn({3, 4, 5}, parity::kF64);  // [K, P, G]
  rewards[0][1][2] = kNaN;
  rewards[1][1][2] = kNaN;
  rewards[2][1][2] = kNaN;  // unscorable completion
  rewards[1][2].fill_(kNaN);  // function 1 does not judge prompt 2
  rewards[0][3][0] = kNaN;
  const std::vector<double> weights{1.0, 0.5, -2.0};
  auto per_func = rewards.permute({1, 2, 0}).reshape({-1, 3});  // TRL rewards_per_func (B, K)
  auto w = torch::tensor(weights, parity::kF64);
  for (const std::string aggregation : {"sum_then_normalize", "normalize_then_sum"}) {
    INFO("TRL multi_objective_aggregation " << aggregation);
    GroupAdvantage adv(GroupAdvantageOptions{.estimator = AdvantageEstimator::grpo,
                                             .eps = 1e-4,
                                             .aggregation = grpo::parse_reward_aggregation(aggregation),
                                             .reward_weights = weights});
    PARITY_CHECK_CLOSE(adv(rewards).advantages, ref::trl_advantages(per_func, w, 5, "group", aggregation));
  }
}

TEST_CASE("GroupAdvantage matches verl outcome estimators [parity]") {
  for (const auto& [name, rewards] : reward_sets()) {
    const int64_t P = rewards.size(0), G = rewards.size(1), n = P * G;
    const auto v = verl_batch(rewards);
    torch::manual_seed(23);
    auto lengths = torch::randint(1, 9, {P, G}).to(torch::kFloat64);
    std::vector<double> valid_lengths;
    for (auto pos : v.position) valid_lengths.push_back(lengths.view({-1})[pos].item<double>());
    auto response_length = torch::tensor(valid_lengths, parity::kF64);

    SECTION("grpo with verl epsilon and raw_reward singletons " + name) {
      for (const bool norm : {true, false}) {
        INFO("norm_adv_by_std_in_grpo " << norm);
        GroupAdvantage adv(GroupAdvantageOptions{.estimator = norm ? AdvantageEstimator::grpo
                                                                   : AdvantageEstimator::dr_grpo,
                                                 .eps = 1e-6,
                                                 .singleton = SingletonGroup::raw_reward});
        auto lib = adv(rewards).advantages;
        auto expected = scatter(v, ref::verl_grpo_advantage(v.scores, v.index, 1e-6, norm), n);
        // verl's singleton std is torch.tensor(1.0), a float32 0-d tensor, so id2std + epsilon rounds 1 + 1e-6 to
        // float32 (1.00000095) before dividing the float64 score: singleton entries agree to float32 rounding of
        // that constant only (the exact (s - 0)/(1 + eps) is checked in the singleton test case below).
        auto singleton = torch::zeros({n}, torch::kBool);
        for (int64_t p = 0; p < P; ++p)
          if ((~torch::isnan(rewards[p])).sum().item<int64_t>() == 1) singleton.view({P, G})[p].fill_(true);
        PARITY_CHECK_CLOSE(lib.masked_fill(singleton, 0.0), expected.masked_fill(singleton, 0.0));
        CHECK(torch::allclose(lib, expected, 1e-6, 0.0));
      }
    }
    SECTION("rloo " + name) {
      GroupAdvantage adv(GroupAdvantageOptions{.estimator = AdvantageEstimator::rloo,
                                               .singleton = SingletonGroup::raw_reward});
      PARITY_CHECK_CLOSE(adv(rewards).advantages, scatter(v, ref::verl_rloo_advantage(v.scores, v.index), n));
    }
    SECTION("gpg " + name) {
      GroupAdvantage adv(GroupAdvantageOptions{.estimator = AdvantageEstimator::gpg,
                                               .singleton = SingletonGroup::raw_reward});
      PARITY_CHECK_CLOSE(adv(rewards).advantages, scatter(v, ref::verl_gpg_advantage(v.scores, v.index), n));
    }
    SECTION("opo " + name) {
      GroupAdvantage adv(GroupAdvantageOptions{.estimator = AdvantageEstimator::opo,
                                               .singleton = SingletonGroup::raw_reward});
      PARITY_CHECK_CLOSE(adv(rewards, lengths).advantages,
                         scatter(v, ref::verl_opo_advantage(v.scores, response_length, v.index), n));
    }
    SECTION("reinforce_plus_plus_baseline token-weighted " + name) {
      if (v.scores.size(0) < 2) return;
      const int64_t T = 8;
      auto response_mask =
          (torch::arange(T).unsqueeze(0) < response_length.unsqueeze(1)).to(torch::kFloat64);
      auto mat = ref::verl_reinforce_pp_baseline_advantage(v.scores, response_mask, v.index);
      auto per_seq = mat.select(1, 0);  // every sequence has ≥ 1 token; its advantage is constant over them
      GroupAdvantage adv(GroupAdvantageOptions{.estimator = AdvantageEstimator::reinforce_pp_baseline,
                                               .singleton = SingletonGroup::raw_reward});
      PARITY_CHECK_CLOSE(adv(rewards, lengths).advantages, scatter(v, per_seq, n));
      INFO("without lengths: every sequence counts once (verl with one token per response)");
      auto mat1 = ref::verl_reinforce_pp_baseline_advantage(v.scores, torch::ones({v.scores.size(0), 1}, parity::kF64),
                                                            v.index);
      PARITY_CHECK_CLOSE(adv(rewards).advantages, scatter(v, mat1.select(1, 0), n));
    }
    SECTION("grpo_passk " + name) {
      bool has_singleton_or_tie = false;
      for (int64_t p = 0; p < P; ++p) {
        auto row = rewards[p];
        auto valid = row.masked_select(~torch::isnan(row));
        if (valid.numel() == 0) continue;
        if (valid.numel() < 2) has_singleton_or_tie = true;
        auto sorted = std::get<0>(valid.sort(0, true));
        if (valid.numel() >= 2 && sorted[0].item<double>() == sorted[1].item<double>()) has_singleton_or_tie = true;
      }
      if (has_singleton_or_tie) return;  // verl raises on groups of 1; tied maxima make topk's pick unspecified
      for (const bool norm : {true, false}) {
        INFO("norm_adv_by_std_in_grpo " << norm);
        GroupAdvantage adv(GroupAdvantageOptions{.estimator = AdvantageEstimator::pass_at_k,
                                                 .eps = 1e-6,
                                                 .singleton = SingletonGroup::error,
                                                 .pass_at_k_scale_by_std = norm});
        PARITY_CHECK_CLOSE(adv(rewards).advantages,
                           scatter(v, ref::verl_grpo_passk_advantage(v.scores, v.index, 1e-6, norm), n));
      }
    }
  }
}

TEST_CASE("verl grpo singleton group with raw_reward gives s over 1 plus eps [parity]") {
  auto rewards = torch::tensor({{0.7, kNaN, kNaN}, {1.0, 0.0, 0.5}}, parity::kF64);
  GroupAdvantage adv(GroupAdvantageOptions{.estimator = AdvantageEstimator::grpo,
                                           .eps = 1e-6,
                                           .singleton = SingletonGroup::raw_reward});
  auto out = adv(rewards).advantages;
  // verl compute_grpo_outcome_advantage: id2mean 0, id2std 1 → (s − 0) / (1 + ε).
  CHECK(out[0].item<double>() == Approx(0.7 / (1.0 + 1e-6)).epsilon(1e-12));
  GroupAdvantage passk(GroupAdvantageOptions{.estimator = AdvantageEstimator::pass_at_k,
                                             .singleton = SingletonGroup::error});
  CHECK_THROWS(passk(rewards));
}
