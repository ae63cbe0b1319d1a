// SPDX-License-Identifier: Apache-2.0
#include <grpo/advantage/group_advantage.hpp>

#include "support/tensor_testing.hpp"

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

using grpo::AdvantageEstimator;
using grpo::GroupAdvantage;
using grpo::GroupAdvantageOptions;
using grpo::RewardAggregation;
using grpo::SingletonGroup;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kTight = 1e-12;

const std::vector<AdvantageEstimator> kAllEstimators{AdvantageEstimator::grpo,
                                                     AdvantageEstimator::dr_grpo,
                                                     AdvantageEstimator::group_mean_batch_std,
                                                     AdvantageEstimator::rloo,
                                                     AdvantageEstimator::reinforce_pp_baseline,
                                                     AdvantageEstimator::gpg,
                                                     AdvantageEstimator::pass_at_k,
                                                     AdvantageEstimator::opo};

torch::Tensor f64(std::vector<double> values, std::vector<int64_t> sizes) {
  return torch::tensor(values, torch::kFloat64).reshape(sizes);
}

GroupAdvantageOptions with(AdvantageEstimator estimator, double eps = 1e-4) {
  GroupAdvantageOptions o;
  o.estimator = estimator;
  o.eps = eps;
  return o;
}

// The hand-computed example: R = [[1, 2, 3, 6], [0, 0, 1, 1]], lengths L = [[1, 2, 3, 4], [4, 3, 2, 1]].
//   row 0: μ = 12/4 = 3, r − μ = [−2, −1, 0, 3], Σ(r − μ)² = 4 + 1 + 0 + 9 = 14, σ = √(14/3) ≈ 2.1602469
//   row 1: μ = 2/4 = 0.5, r − μ = [−.5, −.5, .5, .5], Σ(r − μ)² = 1, σ = √(1/3) ≈ 0.5773503
const torch::Tensor& hand_rewards() {
  static const torch::Tensor r = f64({1, 2, 3, 6, 0, 0, 1, 1}, {2, 4});
  return r;
}
const torch::Tensor& hand_lengths() {
  static const torch::Tensor l = torch::tensor({1, 2, 3, 4, 4, 3, 2, 1}, torch::kInt64).reshape({2, 4});
  return l;
}
const double kSigma0 = std::sqrt(14.0 / 3.0);
const double kSigma1 = std::sqrt(1.0 / 3.0);

// ---- an fp64 re-derivation written plainly from the formulas, loop by loop ----

using Matrix = std::vector<std::vector<double>>;  // [P][G], NaN = no value

Matrix to_matrix(const torch::Tensor& t) {
  auto c = t.to(torch::kFloat64).contiguous();
  Matrix m(c.size(0), std::vector<double>(c.size(1)));
  for (int64_t p = 0; p < c.size(0); ++p)
    for (int64_t g = 0; g < c.size(1); ++g) m[p][g] = c[p][g].item<double>();
  return m;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double bessel_std(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

torch::Tensor reference_advantages(const Matrix& r, const Matrix& lengths, const GroupAdvantageOptions& o) {
  const size_t P = r.size(), G = r[0].size();
  Matrix c(P, std::vector<double>(G, 0.0));
  std::vector<std::vector<bool>> in_batch(P, std::vector<bool>(G, false));
  std::vector<double> all_valid;
  for (const auto& row : r)
    for (double x : row)
      if (!std::isnan(x)) all_valid.push_back(x);
  const double batch_std = all_valid.size() >= 2 ? bessel_std(all_valid) : 0.0;

  for (size_t p = 0; p < P; ++p) {
    std::vector<size_t> idx;
    std::vector<double> vals;
    for (size_t g = 0; g < G; ++g)
      if (!std::isnan(r[p][g])) {
        idx.push_back(g);
        vals.push_back(r[p][g]);
      }
    if (vals.empty()) continue;
    if (vals.size() == 1) {
      if (o.singleton == SingletonGroup::zero) continue;
      // raw_reward: μ = 0, σ = 1 (verl), so grpo gives (s − 0)/(1 + ε).
      c[p][idx[0]] = o.estimator == AdvantageEstimator::grpo ? vals[0] / (1.0 + o.eps) : vals[0];
      in_batch[p][idx[0]] = true;
      continue;
    }
    const double n = static_cast<double>(vals.size()), mu = mean_of(vals), sd = bessel_std(vals);
    double sum = 0;
    for (double x : vals) sum += x;
    std::vector<double> sorted = vals;
    std::sort(sorted.rbegin(), sorted.rend());
    bool best_taken = false;
    double lw = 0, l = 0;
    for (size_t g : idx) {
      lw += lengths[p][g] * r[p][g];
      l += lengths[p][g];
    }
    for (size_t g : idx) {
      const double x = r[p][g];
      in_batch[p][g] = true;
      switch (o.estimator) {
        case AdvantageEstimator::grpo:
          c[p][g] = (x - mu) / (sd + o.eps);
          break;
        case AdvantageEstimator::dr_grpo:
        case AdvantageEstimator::reinforce_pp_baseline:
        case AdvantageEstimator::gpg:
          c[p][g] = x - mu;
          break;
        case AdvantageEstimator::group_mean_batch_std:
          c[p][g] = (x - mu) / (batch_std + o.eps);
          break;
        case AdvantageEstimator::rloo:  // minus the mean of the others
          c[p][g] = x - (sum - x) / (n - 1);
          break;
        case AdvantageEstimator::pass_at_k:
          if (x == sorted[0] && !best_taken) {
            c[p][g] = (sorted[0] - sorted[1]) / (o.pass_at_k_scale_by_std ? sd + o.eps : 1.0);
            best_taken = true;
          }
          break;
        case AdvantageEstimator::opo:
          c[p][g] = x - (l > 0 ? lw / l : mu);
          break;
      }
    }
  }
  if (o.estimator == AdvantageEstimator::gpg) {
    double nonzero = 0;
    for (double x : all_valid) nonzero += x != 0.0;
    const double alpha = static_cast<double>(all_valid.size()) / std::max(nonzero, 1.0);
    for (auto& row : c)
      for (double& x : row) x *= alpha;
  }
  if (o.estimator == AdvantageEstimator::reinforce_pp_baseline) {
    // Expand to tokens: sequence i contributes its value once per token (or once when lengths are all 1).
    std::vector<double> tokens;
    for (size_t p = 0; p < P; ++p)
      for (size_t g = 0; g < G; ++g)
        if (in_batch[p][g])
          for (int t = 0; t < static_cast<int>(lengths[p][g]); ++t) tokens.push_back(c[p][g]);
    // verl masked_mean divides by N + 1e-8; masked_var is masked_mean of the squares times N/(N − 1).
    const double n = static_cast<double>(tokens.size());
    double sum = 0;
    for (double x : tokens) sum += x;
    const double m = sum / (n + 1e-8);
    double ss = 0;
    for (double x : tokens) ss += (x - m) * (x - m);
    const double var = ss / (n + 1e-8) * (n / (n - 1));
    for (size_t p = 0; p < P; ++p)
      for (size_t g = 0; g < G; ++g)
        if (in_batch[p][g]) c[p][g] = (c[p][g] - m) / std::sqrt(var + 1e-8);
  }
  std::vector<double> flat;
  for (const auto& row : c) flat.insert(flat.end(), row.begin(), row.end());
  return torch::tensor(flat, torch::kFloat64);
}

// [5, 6] standard-normal rewards with some exact zeros (for GPG's count_nonzero) and missing values: row 0 two,
// row 2 all but one (a singleton group), row 3 every one, row 4 one. Lengths in [0, 20), so some are empty.
struct RandomCase {
  torch::Tensor rewards, lengths;
};
RandomCase random_case() {
  torch::manual_seed(2024);
  auto r = torch::randn({5, 6}, torch::kFloat64);
  r[1][2] = 0.0;
  r[4][0] = 0.0;
  r[0][5] = 0.0;
  r[0][1] = kNaN;
  r[0][3] = kNaN;
  for (int g = 0; g < 6; ++g) {
    if (g != 4) r[2][g] = kNaN;
    r[3][g] = kNaN;
  }
  r[4][5] = kNaN;
  auto l = torch::randint(0, 20, {5, 6}, torch::kInt64);
  return {r, l};
}

}  // namespace

TEST_CASE("grpo: group z-score (r − μ)/(σ + eps), Bessel std", "[advantage]") {
  auto out = GroupAdvantage(with(AdvantageEstimator::grpo))(hand_rewards());
  const double d0 = kSigma0 + 1e-4, d1 = kSigma1 + 1e-4;
  GRPO_REQUIRE_CLOSE(out.advantages, f64({-2 / d0, -1 / d0, 0, 3 / d0, -.5 / d1, -.5 / d1, .5 / d1, .5 / d1}, {8}),
                     kTight, kTight);
  GRPO_REQUIRE_CLOSE(out.group_mean, f64({3, 0.5}, {2}), kTight, kTight);
  GRPO_REQUIRE_CLOSE(out.group_std, f64({kSigma0, kSigma1}, {2}), kTight, kTight);
  REQUIRE(out.group_count.equal(torch::tensor({4, 4}, torch::kInt64)));
  REQUIRE(out.valid.all().item<bool>());
  REQUIRE(out.frac_reward_zero_std == 0.0);
  REQUIRE(out.reward_clip_frac == 0.0);
  REQUIRE(out.advantage_clip_frac == 0.0);
}

TEST_CASE("dr_grpo: group-centred r − μ", "[advantage]") {
  // Options are an aggregate, so designated initialisers work.
  auto out = GroupAdvantage({.estimator = AdvantageEstimator::dr_grpo})(hand_rewards());
  GRPO_REQUIRE_CLOSE(out.advantages, f64({-2, -1, 0, 3, -.5, -.5, .5, .5}, {8}), kTight, kTight);
}

TEST_CASE("group_mean_batch_std: group mean, std over the whole batch", "[advantage]") {
  // Batch {1,2,3,6,0,0,1,1}: mean 14/8 = 1.75; squared deviations .5625 .0625 1.5625 18.0625 3.0625 3.0625 .5625
  // .5625 sum to 27.5, so σ_batch = √(27.5/7) ≈ 1.9820624.
  auto out = GroupAdvantage(with(AdvantageEstimator::group_mean_batch_std))(hand_rewards());
  const double d = std::sqrt(27.5 / 7.0) + 1e-4;
  GRPO_REQUIRE_CLOSE(out.advantages, f64({-2 / d, -1 / d, 0, 3 / d, -.5 / d, -.5 / d, .5 / d, .5 / d}, {8}), kTight,
                     kTight);
}

TEST_CASE("rloo: reward minus the mean of the other samples", "[advantage]") {
  // row 0: 1 − (2+3+6)/3 = −8/3, 2 − 10/3 = −4/3, 3 − 9/3 = 0, 6 − 6/3 = 4
  // row 1: 0 − 2/3 = −2/3 (twice), 1 − 1/3 = 2/3 (twice)
  auto out = GroupAdvantage(with(AdvantageEstimator::rloo))(hand_rewards());
  GRPO_REQUIRE_CLOSE(out.advantages, f64({-8. / 3, -4. / 3, 0, 4, -2. / 3, -2. / 3, 2. / 3, 2. / 3}, {8}), kTight,
                     kTight);
}

TEST_CASE("reinforce_pp_baseline: centre per group, then verl masked_whiten over the batch", "[advantage]") {
  const GroupAdvantage adv(with(AdvantageEstimator::reinforce_pp_baseline));
  SECTION("sequence-weighted (no lengths)") {
    // c = [−2, −1, 0, 3, −.5, −.5, .5, .5], mean 0, unbiased var = (4+1+0+9+4·.25)/7 = 15/7 (verl's masked_var:
    // 15/(8 + 1e-8) · 8/7).
    const double s = std::sqrt(15.0 / (8.0 + 1e-8) * (8.0 / 7.0) + 1e-8);
    GRPO_REQUIRE_CLOSE(adv(hand_rewards()).advantages,
                       f64({-2 / s, -1 / s, 0, 3 / s, -.5 / s, -.5 / s, .5 / s, .5 / s}, {8}), kTight, kTight);
  }
  SECTION("token-weighted by lengths, as verl whitens over response tokens") {
    // Σ L·c = −2 −2 +0 +12 −2 −1.5 +1 +.5 = 6, Σ L = 20, mean = 0.3 (verl: 6/(20 + 1e-8)).
    // Σ L·(c − .3)² = 5.29 + 3.38 + .27 + 29.16 + 2.56 + 1.92 + .08 + .04 = 42.7, unbiased var = 42.7/19; with
    // verl's mean m: Σ L·(c − m)² = 42.7 + 20·(0.3 − m)², divided by 20 + 1e-8, times 20/19.
    const double m = 6.0 / (20.0 + 1e-8);
    const double s = std::sqrt((42.7 + 20.0 * (0.3 - m) * (0.3 - m)) / (20.0 + 1e-8) * (20.0 / 19.0) + 1e-8);
    GRPO_REQUIRE_CLOSE(adv(hand_rewards(), hand_lengths()).advantages,
                       f64({(-2 - m) / s, (-1 - m) / s, -m / s, (3 - m) / s, (-.5 - m) / s, (-.5 - m) / s,
                            (.5 - m) / s, (.5 - m) / s},
                           {8}),
                       kTight, kTight);
  }
}

TEST_CASE("gpg: α = B / count_nonzero(r) times the group-centred reward", "[advantage]") {
  // 8 rewards, 6 non-zero (row 1 has two zeros): α = 8/6 = 4/3.
  auto out = GroupAdvantage(with(AdvantageEstimator::gpg))(hand_rewards());
  const double a = 4.0 / 3.0;
  GRPO_REQUIRE_CLOSE(out.advantages, f64({-2 * a, -a, 0, 3 * a, -.5 * a, -.5 * a, .5 * a, .5 * a}, {8}), kTight,
                     kTight);
  SECTION("every reward zero: α uses max(count, 1) and all advantages are 0") {
    auto zero = GroupAdvantage(with(AdvantageEstimator::gpg))(torch::zeros({2, 4}, torch::kFloat64));
    GRPO_REQUIRE_CLOSE(zero.advantages, torch::zeros({8}, torch::kFloat64), 0, 0);
  }
}

TEST_CASE("pass_at_k: only the best of a group gets r_max − r_2nd", "[advantage]") {
  // row 0: best is 6 (index 3), second 3: 3/(σ0 + eps); row 1: max 1 is tied, r_max − r_2nd = 0.
  auto out = GroupAdvantage(with(AdvantageEstimator::pass_at_k))(hand_rewards());
  GRPO_REQUIRE_CLOSE(out.advantages, f64({0, 0, 0, 3 / (kSigma0 + 1e-4), 0, 0, 0, 0}, {8}), kTight, kTight);
  auto o = with(AdvantageEstimator::pass_at_k);
  o.pass_at_k_scale_by_std = false;
  auto raw = GroupAdvantage(o)(f64({1, 5, 2, 4, 0, 0, 1, 0}, {2, 4})).advantages;
  // row 0: 5 − 4 = 1 at index 1; row 1: 1 − 0 = 1 at index 2.
  GRPO_REQUIRE_CLOSE(raw, f64({0, 1, 0, 0, 0, 0, 1, 0}, {8}), kTight, kTight);
}

TEST_CASE("opo: length-weighted baseline b = Σ|o|·r / Σ|o|", "[advantage]") {
  // row 0: b = (1·1 + 2·2 + 3·3 + 4·6)/10 = 38/10 = 3.8; row 1: b = (4·0 + 3·0 + 2·1 + 1·1)/10 = 0.3.
  auto out = GroupAdvantage(with(AdvantageEstimator::opo))(hand_rewards(), hand_lengths());
  GRPO_REQUIRE_CLOSE(out.advantages, f64({-2.8, -1.8, -0.8, 2.2, -.3, -.3, .7, .7}, {8}), kTight, kTight);
  SECTION("a group of empty completions falls back to the plain mean") {
    auto empty = GroupAdvantage(with(AdvantageEstimator::opo))(hand_rewards(), torch::zeros({2, 4}));
    GRPO_REQUIRE_CLOSE(empty.advantages, f64({-2, -1, 0, 3, -.5, -.5, .5, .5}, {8}), kTight, kTight);
  }
}

TEST_CASE("every estimator matches an fp64 loop re-derivation on a random [5, 6] matrix with NaNs", "[advantage]") {
  const auto [rewards, lengths] = random_case();
  const Matrix r = to_matrix(rewards), l = to_matrix(lengths);
  const Matrix ones(5, std::vector<double>(6, 1.0));
  for (auto singleton : {SingletonGroup::zero, SingletonGroup::raw_reward}) {
    for (auto estimator : kAllEstimators) {
      for (bool use_lengths : {false, true}) {
        if (estimator == AdvantageEstimator::opo && !use_lengths) continue;
        auto o = with(estimator, 1e-6);
        o.singleton = singleton;
        INFO("estimator " << grpo::to_string(estimator) << ", singleton " << grpo::to_string(singleton) << ", lengths "
                          << use_lengths);
        auto out = GroupAdvantage(o)(rewards, use_lengths ? lengths : torch::Tensor());
        GRPO_REQUIRE_CLOSE(out.advantages, reference_advantages(r, use_lengths ? l : ones, o), 1e-10, 1e-10);
        REQUIRE(out.advantages.isfinite().all().item<bool>());
        // Missing rewards (row 3 whole, and the NaN entries) always get 0.
        REQUIRE(out.advantages.masked_select(rewards.reshape({-1}).isnan()).abs().max().item<double>() == 0.0);
      }
    }
  }
  auto out = GroupAdvantage()(rewards);
  REQUIRE(out.group_count.equal(torch::tensor({4, 6, 1, 0, 5}, torch::kInt64)));
  REQUIRE(out.group_mean[3].item<double>() == 0.0);  // no value: 0, not NaN
  REQUIRE(out.group_std[2].item<double>() == 0.0);   // one value: 0, not NaN
  REQUIRE(out.valid.equal(rewards.isnan().logical_not()));
}

TEST_CASE("advantages keep the rewards' dtype, statistics are fp64 inside", "[advantage]") {
  const auto [rewards, lengths] = random_case();
  for (auto estimator : kAllEstimators) {
    INFO(grpo::to_string(estimator));
    auto o = with(estimator);
    o.singleton = SingletonGroup::raw_reward;
    auto in64 = GroupAdvantage(o)(rewards, lengths);
    auto in32 = GroupAdvantage(o)(rewards.to(torch::kFloat32), lengths);
    REQUIRE(in32.advantages.scalar_type() == torch::kFloat32);
    REQUIRE(in32.group_mean.scalar_type() == torch::kFloat32);
    REQUIRE(in64.advantages.scalar_type() == torch::kFloat64);
    // float32 input only rounds the rewards (≈ 6e-8 relative); the arithmetic itself is the same fp64 code.
    GRPO_REQUIRE_CLOSE(in32.advantages, in64.advantages, 1e-5, 1e-5);
  }
}

TEST_CASE("TRL eps 1e-4 vs verl eps 1e-6 on a nearly constant group", "[advantage]") {
  // r = [0, 0, 0, .001]: μ = .00025, Σ(r − μ)² = 3·.00025² + .00075² = 7.5e-7, σ = √(2.5e-7) = 5e-4.
  // last sample: .00075/(5e-4 + 1e-4) = 1.25 (TRL) vs .00075/(5e-4 + 1e-6) = 1.497006 (verl).
  auto r = f64({0, 0, 0, 0.001}, {1, 4});
  auto trl = GroupAdvantage(grpo::advantage_preset("grpo"))(r).advantages;
  auto verl = GroupAdvantage(grpo::advantage_preset("verl_grpo"))(r).advantages;
  REQUIRE(trl[3].item<double>() == Approx(1.25).epsilon(1e-9));
  REQUIRE(verl[3].item<double>() == Approx(0.00075 / 5.01e-4).epsilon(1e-9));
  REQUIRE(trl[0].item<double>() == Approx(-0.00025 / 6e-4).epsilon(1e-9));
}

TEST_CASE("a group with one valid reward follows SingletonGroup", "[advantage]") {
  // Group 0 is G = 1 ([P, G] = [2, 1]); the same rule holds for a G = 4 group with three missing rewards.
  const auto single = f64({0.7, -2.0}, {2, 1});
  const auto one_valid = f64({kNaN, 0.7, kNaN, kNaN, 1, 2, 3, 6}, {2, 4});
  SECTION("zero: advantage 0 for every estimator") {
    for (auto estimator : kAllEstimators) {
      INFO(grpo::to_string(estimator));
      auto o = with(estimator);
      o.singleton = SingletonGroup::zero;
      GRPO_REQUIRE_CLOSE(GroupAdvantage(o)(single, torch::ones({2, 1})).advantages, torch::zeros({2}, torch::kFloat64),
                         0, 0);
      auto a = GroupAdvantage(o)(one_valid, torch::ones({2, 4})).advantages;
      GRPO_REQUIRE_CLOSE(a.slice(0, 0, 4), torch::zeros({4}, torch::kFloat64), 0, 0);
    }
  }
  SECTION("raw_reward: verl's μ = 0, σ = 1, so (s − 0)/(1 + ε) for grpo and the reward itself otherwise") {
    auto o = with(AdvantageEstimator::grpo, 1e-6);
    o.singleton = SingletonGroup::raw_reward;
    const double z = 1.0 / (1.0 + 1e-6);
    GRPO_REQUIRE_CLOSE(GroupAdvantage(o)(single).advantages, f64({0.7 * z, -2.0 * z}, {2}), kTight, kTight);
    auto a = GroupAdvantage(o)(one_valid).advantages;
    GRPO_REQUIRE_CLOSE(a.slice(0, 0, 4), f64({0, 0.7 * z, 0, 0}, {4}), kTight, kTight);
    // GPG scales it by α: rewards {0.7, −2} both non-zero, α = 2/2 = 1.
    o.estimator = AdvantageEstimator::gpg;
    GRPO_REQUIRE_CLOSE(GroupAdvantage(o)(single).advantages, f64({0.7, -2.0}, {2}), kTight, kTight);
    // REINFORCE++-baseline whitens the raw rewards: mean −1.3/(2 + 1e-8) ≈ −0.65, unbiased var = Σ(x − m)²/(2 + 1e-8)
    // · 2/1 ≈ (1.35² + 1.35²)/1 = 3.645 (verl masked_mean / masked_var).
    o.estimator = AdvantageEstimator::reinforce_pp_baseline;
    const double m = -1.3 / (2.0 + 1e-8);
    const double s = std::sqrt(((0.7 - m) * (0.7 - m) + (-2.0 - m) * (-2.0 - m)) / (2.0 + 1e-8) * 2.0 + 1e-8);
    GRPO_REQUIRE_CLOSE(GroupAdvantage(o)(single).advantages, f64({(0.7 - m) / s, (-2.0 - m) / s}, {2}), kTight,
                       kTight);
  }
  SECTION("error: throws naming the group") {
    auto o = with(AdvantageEstimator::pass_at_k);
    o.singleton = SingletonGroup::error;
    REQUIRE_THROWS_WITH(GroupAdvantage(o)(one_valid),
                        Catch::Contains("prompt group 0 has a single reward") && Catch::Contains("singleton = error"));
    REQUIRE_THROWS_AS(GroupAdvantage(o)(single), grpo::Error);
  }
}

TEST_CASE("all rewards equal in a group: advantage 0 and counted in frac_reward_zero_std", "[advantage]") {
  const auto r = f64({2, 2, 2, 2, 1, 2, 3, 4}, {2, 4});
  for (auto estimator : kAllEstimators) {
    INFO(grpo::to_string(estimator));
    auto out = GroupAdvantage(with(estimator))(r, torch::full({2, 4}, 3));
    // Equal lengths keep whitening's batch mean at 0, so REINFORCE++-baseline's constant group also stays 0.
    GRPO_REQUIRE_CLOSE(out.advantages.slice(0, 0, 4), torch::zeros({4}, torch::kFloat64), 0, 1e-12);
    REQUIRE(out.frac_reward_zero_std == 0.5);
    REQUIRE(out.advantages.isfinite().all().item<bool>());
  }
}

TEST_CASE("every reward missing: all advantages 0, no NaN anywhere", "[advantage]") {
  const auto r = torch::full({2, 4}, kNaN, torch::kFloat64);
  for (auto estimator : kAllEstimators) {
    INFO(grpo::to_string(estimator));
    auto out = GroupAdvantage(with(estimator))(r, torch::ones({2, 4}));
    GRPO_REQUIRE_CLOSE(out.advantages, torch::zeros({8}, torch::kFloat64), 0, 0);
    GRPO_REQUIRE_CLOSE(out.group_mean, torch::zeros({2}, torch::kFloat64), 0, 0);
    GRPO_REQUIRE_CLOSE(out.group_std, torch::zeros({2}, torch::kFloat64), 0, 0);
    REQUIRE(out.frac_reward_zero_std == 0.0);
    REQUIRE_FALSE(out.valid.any().item<bool>());
  }
  auto gdpo = GroupAdvantage(grpo::advantage_preset("gdpo"))(torch::full({3, 2, 4}, kNaN));
  GRPO_REQUIRE_CLOSE(gdpo.advantages, torch::zeros({8}), 0, 0);
}

TEST_CASE("an empty batch (P = 0) gives empty results", "[advantage]") {
  auto out = GroupAdvantage()(torch::zeros({0, 4}));
  REQUIRE(out.advantages.sizes() == torch::IntArrayRef{0});
  REQUIRE(out.group_mean.sizes() == torch::IntArrayRef{0});
  REQUIRE(out.frac_reward_zero_std == 0.0);
}

TEST_CASE("reward clip acts on raw rewards, advantage clip on the result", "[advantage]") {
  auto o = with(AdvantageEstimator::dr_grpo);
  o.reward_clip = std::pair{-1.0, 1.0};
  // [−3, 0, .5, 2] → [−1, 0, .5, 1], μ = .125; the missing entry stays missing. 2 of 7 valid rewards clipped.
  auto r = f64({-3, 0, 0.5, 2, 0.2, kNaN, 0.4, 0.6}, {2, 4});
  auto out = GroupAdvantage(o)(r);
  GRPO_REQUIRE_CLOSE(out.advantages, f64({-1.125, -0.125, 0.375, 0.875, -0.2, 0, 0, 0.2}, {8}), kTight, kTight);
  REQUIRE(out.reward_clip_frac == Approx(2.0 / 7.0));
  o.advantage_clip = std::pair{-0.5, 0.25};
  // −1.125 → −.5, .375 → .25, .875 → .25; the missing entry is not counted: 3 of 7.
  auto clipped = GroupAdvantage(o)(r);
  GRPO_REQUIRE_CLOSE(clipped.advantages, f64({-0.5, -0.125, 0.25, 0.25, -0.2, 0, 0, 0.2}, {8}), kTight, kTight);
  REQUIRE(clipped.advantage_clip_frac == Approx(3.0 / 7.0));
}

TEST_CASE("several reward functions: sum_then_normalize vs normalize_then_sum (GDPO)", "[advantage]") {
  // K = 2 functions, weights [1, 0.5]:  R0 = [[1, 0], [1, 1]],  R1 = [[0, 4], [2, NaN]].
  const auto rewards = f64({1, 0, 1, 1, 0, 4, 2, kNaN}, {2, 2, 2});
  const std::vector<double> w{1.0, 0.5};
  const double eps = 1e-4;
  SECTION("sum_then_normalize: r = nansum w·R = [[1, 2], [2, 1]], then group z-score") {
    REQUIRE(grpo::combine_rewards(rewards, w, RewardAggregation::sum_then_normalize).equal(f64({1, 2, 2, 1}, {2, 2})));
    // Each row: μ = 1.5, σ = √((.25 + .25)/1) = √.5.
    GroupAdvantageOptions o;
    o.reward_weights = w;
    const double a = 0.5 / (std::sqrt(0.5) + eps);
    GRPO_REQUIRE_CLOSE(GroupAdvantage(o)(rewards).advantages, f64({-a, a, a, -a}, {4}), kTight, kTight);
  }
  SECTION("normalize_then_sum: per-function group z-score, weighted sum, whole-batch z-score") {
    // Z0: row 0 [1, 0] → ±z with z = .5/(√.5 + eps); row 1 [1, 1] → σ = 0 → [0, 0].
    // Z1: row 0 [0, 4] → μ 2, σ = √8 → ∓y with y = 2/(√8 + eps); row 1 [2, NaN]: one value → 0 (singleton zero).
    // r = Z0 + .5·Z1 = [[d, −d], [0, 0]] with d = z − y/2; batch: mean 0, σ = √(2d²/3).
    const double z = 0.5 / (std::sqrt(0.5) + eps), y = 2.0 / (std::sqrt(8.0) + eps), d = z - y / 2;
    GRPO_REQUIRE_CLOSE(grpo::combine_rewards(rewards, w, RewardAggregation::normalize_then_sum),
                       f64({d, -d, 0, 0}, {2, 2}), kTight, kTight);
    auto o = grpo::advantage_preset("gdpo");
    o.reward_weights = w;
    const double s = std::sqrt(2 * d * d / 3) + eps;
    auto out = GroupAdvantage(o)(rewards);
    GRPO_REQUIRE_CLOSE(out.advantages, f64({d / s, -d / s, 0, 0}, {4}), kTight, kTight);
    REQUIRE(out.frac_reward_zero_std == 0.5);  // the combined row 1 is constant
  }
}

TEST_CASE("combining functions: a completion no function scored stays NaN and gets advantage 0", "[advantage]") {
  // K = 2, [P, G] = [1, 3]; completion 1 has no value from either function.
  const auto rewards = f64({1, kNaN, 3, kNaN, kNaN, 1}, {2, 1, 3});
  auto total = grpo::combine_rewards(rewards, {}, RewardAggregation::sum_then_normalize);
  GRPO_REQUIRE_CLOSE(total, f64({1, kNaN, 4}, {1, 3}), 0, 0);
  for (auto aggregation : {RewardAggregation::sum_then_normalize, RewardAggregation::normalize_then_sum}) {
    GroupAdvantageOptions o;
    o.aggregation = aggregation;
    auto out = GroupAdvantage(o)(rewards);
    REQUIRE(out.advantages[1].item<double>() == 0.0);
    REQUIRE(out.valid.equal(torch::tensor({true, false, true}).reshape({1, 3})));
    REQUIRE(out.advantages.isfinite().all().item<bool>());
  }
}

TEST_CASE("GDPO and sum-then-normalise match an fp64 loop re-derivation on random [3, 4, 5] rewards", "[advantage]") {
  torch::manual_seed(11);
  auto rewards = torch::randn({3, 4, 5}, torch::kFloat64);
  rewards.masked_fill_(torch::rand({3, 4, 5}) < 0.25, kNaN);
  const std::vector<double> w{1.0, -0.5, 2.0};
  const double eps = 1e-4;
  std::vector<Matrix> R;
  for (int k = 0; k < 3; ++k) R.push_back(to_matrix(rewards[k]));
  Matrix sum(4, std::vector<double>(5, kNaN)), gdpo = sum;
  for (int k = 0; k < 3; ++k) {
    for (int p = 0; p < 4; ++p) {
      std::vector<double> vals;
      for (double x : R[k][p])
        if (!std::isnan(x)) vals.push_back(x);
      for (int g = 0; g < 5; ++g) {
        const double x = R[k][p][g];
        if (std::isnan(x)) continue;
        const double zk = vals.size() >= 2 ? (x - mean_of(vals)) / (bessel_std(vals) + eps) : 0.0;
        sum[p][g] = (std::isnan(sum[p][g]) ? 0 : sum[p][g]) + w[k] * x;
        gdpo[p][g] = (std::isnan(gdpo[p][g]) ? 0 : gdpo[p][g]) + w[k] * zk;
      }
    }
  }
  std::vector<double> all;
  for (const auto& row : gdpo)
    for (double x : row)
      if (!std::isnan(x)) all.push_back(x);
  const double m = mean_of(all), s = bessel_std(all);
  std::vector<double> expected_gdpo;
  for (const auto& row : gdpo)
    for (double x : row) expected_gdpo.push_back(std::isnan(x) ? 0.0 : (x - m) / (s + eps));

  GroupAdvantageOptions o;
  o.reward_weights = w;
  const Matrix ones(4, std::vector<double>(5, 1.0));
  GRPO_REQUIRE_CLOSE(GroupAdvantage(o)(rewards).advantages, reference_advantages(sum, ones, o), 1e-10, 1e-10);
  o.aggregation = RewardAggregation::normalize_then_sum;
  GRPO_REQUIRE_CLOSE(GroupAdvantage(o)(rewards).advantages, torch::tensor(expected_gdpo, torch::kFloat64), 1e-10,
                     1e-10);
}

TEST_CASE("presets and name parsing", "[advantage]") {
  REQUIRE(grpo::parse_advantage_estimator("rloo") == AdvantageEstimator::rloo);
  for (auto estimator : kAllEstimators) {
    REQUIRE(grpo::parse_advantage_estimator(grpo::to_string(estimator)) == estimator);
    REQUIRE(grpo::advantage_preset(grpo::to_string(estimator)).estimator == estimator);
  }
  REQUIRE(grpo::parse_singleton_group("raw_reward") == SingletonGroup::raw_reward);
  REQUIRE(grpo::parse_reward_aggregation("normalize_then_sum") == RewardAggregation::normalize_then_sum);
  const auto trl = grpo::advantage_preset("grpo");
  REQUIRE((trl.eps == 1e-4 && trl.singleton == SingletonGroup::zero));
  const auto verl = grpo::advantage_preset("verl_grpo");
  REQUIRE((verl.eps == 1e-6 && verl.singleton == SingletonGroup::raw_reward));
  REQUIRE(grpo::advantage_preset("pass_at_k").singleton == SingletonGroup::error);
  REQUIRE(grpo::advantage_preset("gdpo").aggregation == RewardAggregation::normalize_then_sum);
  for (auto name : grpo::kAdvantagePresetNames) REQUIRE_NOTHROW(GroupAdvantage(grpo::advantage_preset(name)));

  REQUIRE_THROWS_AS(grpo::parse_advantage_estimator("ppo"), grpo::ConfigError);
  REQUIRE_THROWS_WITH(grpo::parse_advantage_estimator("ppo"),
                      "unknown advantage estimator 'ppo'; valid: grpo, dr_grpo, group_mean_batch_std, rloo, "
                      "reinforce_pp_baseline, gpg, pass_at_k, opo");
  REQUIRE_THROWS_AS(grpo::advantage_preset("remax"), grpo::ConfigError);
  REQUIRE_THROWS_WITH(grpo::advantage_preset("remax"),
                      Catch::Contains("'remax'") && Catch::Contains("verl_grpo") && Catch::Contains("gdpo"));
  REQUIRE_THROWS_WITH(grpo::parse_singleton_group("drop"), Catch::Contains("zero, raw_reward, error"));
  REQUIRE_THROWS_AS(grpo::parse_reward_aggregation("sum"), grpo::ConfigError);
}

TEST_CASE("bad inputs and options throw with messages naming them", "[advantage]") {
  const GroupAdvantage adv;
  REQUIRE_THROWS_WITH(adv(torch::zeros({8})),
                      "GroupAdvantage: rewards must be [P, G] or [K, P, G] (K reward "
                      "functions), got shape [8]");
  REQUIRE_THROWS_WITH(adv(torch::zeros({1, 2, 2, 2})), Catch::Contains("got shape [1, 2, 2, 2]"));
  REQUIRE_THROWS_WITH(adv(torch::zeros({2, 4}, torch::kInt64)), Catch::Contains("floating-point"));
  REQUIRE_THROWS_WITH(adv(torch::zeros({2, 4}), torch::ones({2, 3})),
                      "GroupAdvantage: lengths has shape [2, 3] but rewards has shape [2, 4]; lengths must be [P, G] "
                      "= [2, 4]");
  REQUIRE_THROWS_WITH(adv(torch::zeros({2, 4}), torch::full({2, 4}, -1)),
                      Catch::Contains("lengths must be finite and >= 0"));
  REQUIRE_THROWS_WITH(adv(f64({1, std::numeric_limits<double>::infinity()}, {1, 2})),
                      Catch::Contains("finite or NaN") && Catch::Contains("completion 1"));
  REQUIRE_THROWS_WITH(GroupAdvantage(with(AdvantageEstimator::opo))(torch::zeros({2, 4})),
                      Catch::Contains("opo needs lengths [P, G] = [2, 4]"));
  GroupAdvantageOptions weighted;
  weighted.reward_weights = {1.0, 2.0};
  REQUIRE_THROWS_WITH(GroupAdvantage(weighted)(torch::zeros({3, 2, 4})),
                      "GroupAdvantage: reward_weights has 2 entries but rewards has shape [3, 2, 4] (K = 3)");
  REQUIRE_THROWS_WITH(grpo::combine_rewards(torch::zeros({2, 4}), {}, RewardAggregation::sum_then_normalize),
                      Catch::Contains("combine_rewards: rewards must have 3 dimensions, got shape [2, 4]"));

  for (double eps : {0.0, -1e-4}) {
    REQUIRE_THROWS_AS(GroupAdvantage(with(AdvantageEstimator::grpo, eps)), grpo::ConfigError);
    REQUIRE_THROWS_WITH(GroupAdvantage(with(AdvantageEstimator::grpo, eps)), Catch::Contains("eps must be > 0"));
  }
  GroupAdvantageOptions o;
  o.whiten_eps = 0;
  REQUIRE_THROWS_WITH(GroupAdvantage(o), Catch::Contains("whiten_eps must be > 0"));
  o = {};
  o.reward_clip = std::pair{1.0, -1.0};
  REQUIRE_THROWS_WITH(GroupAdvantage(o),
                      "GroupAdvantageOptions: reward_clip must be (lo, hi) with lo <= hi, got (1, -1)");
  o = {};
  o.advantage_clip = std::pair{kNaN, 1.0};
  REQUIRE_THROWS_WITH(GroupAdvantage(o), Catch::Contains("advantage_clip"));
  o = {};
  o.reward_weights = {1.0, kNaN};
  REQUIRE_THROWS_WITH(GroupAdvantage(o), Catch::Contains("reward_weights[1] must be finite"));
  o = with(AdvantageEstimator::rloo);
  o.aggregation = RewardAggregation::normalize_then_sum;
  REQUIRE_THROWS_AS(GroupAdvantage(o), grpo::ConfigError);
  REQUIRE_THROWS_WITH(GroupAdvantage(o), Catch::Contains("needs estimator grpo, got estimator rloo"));
}

TEST_CASE("AdvantageRegistry: a registered estimator equals the built-in one it re-implements, with missing rewards",
          "[advantage][registry]") {
  using namespace grpo;
  if (!AdvantageRegistry::global().contains("test_rloo")) {
    // RLOO by hand: n/(n−1)·(r − mean) over each group's present rewards.
    AdvantageRegistry::global().add("test_rloo", [](const torch::Tensor& r, const torch::Tensor&) {
      const auto present = r.isnan().logical_not();
      const auto n = present.sum(1, true).to(torch::kFloat64);
      const auto mean = r.nan_to_num(0.0).sum(1, true) / n.clamp_min(1);
      return torch::where(n >= 2, n / (n - 1).clamp_min(1) * (r - mean), torch::zeros_like(r));
    });
  }
  const auto nan = std::numeric_limits<double>::quiet_NaN();
  const auto rewards = torch::tensor({1.0, 0.0, 0.5, nan, 2.0, 2.0, 1.0, 3.0, nan, 4.0, nan, nan}, torch::kFloat64)
                           .view({3, 4});
  GroupAdvantageOptions builtin{.estimator = AdvantageEstimator::rloo};
  GroupAdvantageOptions registered;
  select_advantage_estimator(registered, "test_rloo");
  CHECK(registered.estimator_name == "test_rloo");
  const auto a = GroupAdvantage(builtin)(rewards), b = GroupAdvantage(registered)(rewards);
  CHECK(torch::allclose(a.advantages, b.advantages, 1e-12, 1e-12));
  CHECK(torch::equal(a.group_mean, b.group_mean));
  CHECK(a.frac_reward_zero_std == b.frac_reward_zero_std);
  // By hand, group 0 (1, 0, 0.5; mean 0.5): 3/2·(1 − 0.5) = 0.75 for the first; missing rewards get 0.
  CHECK(b.advantages[0].item<double>() == Approx(0.75).epsilon(1e-12));
  CHECK(b.advantages[3].item<double>() == 0.0);
  CHECK(b.advantages[9].item<double>() == 0.0);  // a singleton group (4.0 alone): 0

  // Built-in names select the enum; unknown names list both kinds; a wrong shape names the estimator.
  select_advantage_estimator(registered, "dr_grpo");
  CHECK(registered.estimator == AdvantageEstimator::dr_grpo);
  CHECK(registered.estimator_name.empty());
  CHECK_THROWS_WITH(select_advantage_estimator(registered, "nope"),
                    Catch::Contains("unknown advantage estimator 'nope'") && Catch::Contains("rloo") &&
                        Catch::Contains("test_rloo"));
  CHECK_THROWS_WITH(AdvantageRegistry::global().add("rloo", [](const torch::Tensor& r, const torch::Tensor&) { return r; }),
                    Catch::Contains("'rloo' is a built-in advantage estimator"));
  if (!AdvantageRegistry::global().contains("test_flat")) {
    AdvantageRegistry::global().add("test_flat", [](const torch::Tensor& r, const torch::Tensor&) { return r.flatten(); });
  }
  GroupAdvantageOptions flat;
  select_advantage_estimator(flat, "test_flat");
  CHECK_THROWS_WITH(GroupAdvantage(flat)(rewards), Catch::Contains("'test_flat' must return advantages [P, G] = [3, 4]"));
}
