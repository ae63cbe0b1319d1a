// SPDX-License-Identifier: Apache-2.0
// Tests of grpo/loss/policy_loss.hpp: hand-computed [2, 3] cases, an fp64 element-loop re-derivation on random
// ragged [3, 5] batches, gradient checks, clip statistics, ±100 log ratios, empty rows, option and name errors.
#include <grpo/loss/policy_loss.hpp>

#include "support/tensor_testing.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace {

using grpo::ImportanceLevel;
using grpo::PolicyLossOptions;
using grpo::LogRatioBounds;
using grpo::PolicyLossType;
using grpo::testing::autograd_grad;
using grpo::testing::finite_difference_grad;

// ---------------------------------------------------------------------------------------------------------------
// A batch held as plain vectors (row-major [B, T]) so the reference below can loop over elements.
struct Batch {
  int64_t rows = 0, cols = 0;
  std::vector<double> lp, old, adv;  // adv has B entries, or B·T when adv_per_token
  std::vector<int> mask;
  bool adv_per_token = false;

  double a(int64_t i, int64_t t) const { return adv_per_token ? adv[i * cols + t] : adv[i]; }
  bool valid(int64_t i, int64_t t) const { return mask[i * cols + t] != 0; }
  double length(int64_t i) const {
    double n = 0;
    for (int64_t t = 0; t < cols; ++t) n += valid(i, t);
    return std::max(n, 1.0);
  }
  torch::Tensor tensor(const std::vector<double>& v, std::vector<int64_t> shape) const {
    return torch::tensor(v, torch::kFloat64).reshape(shape);
  }
  torch::Tensor lp_t() const { return tensor(lp, {rows, cols}); }
  torch::Tensor old_t() const { return tensor(old, {rows, cols}); }
  torch::Tensor adv_t() const {
    return adv_per_token ? tensor(adv, {rows, cols}) : tensor(adv, {rows});
  }
  torch::Tensor mask_t() const {
    return torch::tensor(std::vector<int64_t>(mask.begin(), mask.end())).reshape({rows, cols}).to(torch::kBool);
  }
};

grpo::PolicyLossOutput run(const Batch& b, const PolicyLossOptions& o) {
  return grpo::policy_loss(b.lp_t(), b.old_t(), b.adv_t(), b.mask_t(), o);
}

torch::Tensor as_tensor(const std::vector<double>& v, int64_t rows, int64_t cols) {
  return torch::tensor(v, torch::kFloat64).reshape({rows, cols});
}

torch::Tensor bool_tensor(const std::vector<int>& v, int64_t rows, int64_t cols) {
  return torch::tensor(std::vector<int64_t>(v.begin(), v.end())).reshape({rows, cols}).to(torch::kBool);
}

void require_same_bool(const torch::Tensor& actual, const torch::Tensor& expected) {
  INFO("actual " << actual << "\nexpected " << expected);
  REQUIRE(actual.scalar_type() == torch::kBool);
  REQUIRE(torch::equal(actual, expected));
}

// The hand case used throughout: B = 2, T = 3, the last token of row 1 is padding.
//   w    = [[0.5, 1.1, 1.5], [0.7, 1.3, (9, pad)]]   (old = lp − ln w)
//   lp   = [[−1, −0.5, −2], [−0.3, −1.2, (−4, pad)]]
//   A    = [1, −2]
Batch hand_batch() {
  Batch b;
  b.rows = 2;
  b.cols = 3;
  b.lp = {-1.0, -0.5, -2.0, -0.3, -1.2, -4.0};
  const std::vector<double> w = {0.5, 1.1, 1.5, 0.7, 1.3, 9.0};
  for (size_t k = 0; k < w.size(); ++k) b.old.push_back(b.lp[k] - std::log(w[k]));
  b.mask = {1, 1, 1, 1, 1, 0};
  b.adv = {1.0, -2.0};
  return b;
}

PolicyLossOptions with_type(PolicyLossType type, ImportanceLevel level = ImportanceLevel::token) {
  PolicyLossOptions o;
  o.type = type;
  o.importance_level = level;
  return o;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// ---------------------------------------------------------------------------------------------------------------
// fp64 reference: the formulas of policy_loss.hpp written as element loops.
struct Reference {
  std::vector<double> loss;  // [B·T]
  std::vector<double> grad;  // analytic d Σ loss / d lp for the stop-gradient types (cispo*, vespo), else empty
  std::vector<int> candidates;  // clip_cov: tokens eligible for the random drop
  std::vector<int> selected;    // kl_cov: top-covariance tokens
};

std::vector<double> covariance(const Batch& b) {
  double n = 0, sum_a = 0, sum_lp = 0;
  for (int64_t i = 0; i < b.rows; ++i)
    for (int64_t t = 0; t < b.cols; ++t)
      if (b.valid(i, t)) {
        n += 1;
        sum_a += b.a(i, t);
        sum_lp += b.lp[i * b.cols + t];
      }
  const double mean_a = sum_a / std::max(n, 1.0), mean_lp = sum_lp / std::max(n, 1.0);
  std::vector<double> cov(b.rows * b.cols, 0.0);
  for (int64_t i = 0; i < b.rows; ++i)
    for (int64_t t = 0; t < b.cols; ++t)
      cov[i * b.cols + t] = (b.a(i, t) - mean_a) * (b.lp[i * b.cols + t] - mean_lp);
  return cov;
}

Reference reference(const Batch& b, const PolicyLossOptions& o) {
  const int64_t B = b.rows, T = b.cols;
  const auto bounds = o.effective_log_ratio_bounds();
  const double c_lo = bounds.low, c_hi = bounds.high, el = o.epsilon_low, eh = o.epsilon_high;
  auto clampd = [](double x, double lo, double hi) { return std::min(std::max(x, lo), hi); };
  Reference r;
  r.loss.assign(B * T, 0.0);
  r.candidates.assign(B * T, 0);
  r.selected.assign(B * T, 0);
  const bool sg_type = o.type == PolicyLossType::cispo || o.type == PolicyLossType::cispo_two_sided ||
                       o.type == PolicyLossType::vespo;
  if (sg_type) r.grad.assign(B * T, 0.0);
  int n_valid = 0;
  for (int64_t k = 0; k < B * T; ++k) n_valid += b.mask[k] != 0;
  const auto cov = covariance(b);
  // kl_cov: indices of the k largest covariances among valid tokens.
  if (o.type == PolicyLossType::kl_cov && n_valid > 0) {
    std::vector<int64_t> idx;
    for (int64_t k = 0; k < B * T; ++k)
      if (b.mask[k]) idx.push_back(k);
    std::sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) { return cov[x] > cov[y]; });
    const int64_t count = std::max<int64_t>(static_cast<int64_t>(std::floor(o.kl_cov_ratio * n_valid)), 1);
    for (int64_t j = 0; j < count; ++j) r.selected[idx[j]] = 1;
  }
  for (int64_t i = 0; i < B; ++i) {
    double seq_sum = 0, vespo_sum = 0, gmpo_sum = 0, adv_sum = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (!b.valid(i, t)) continue;
      const double d = b.lp[i * T + t] - b.old[i * T + t];
      seq_sum += d;
      vespo_sum += clampd(d, c_lo, c_hi);
      const double dc = clampd(d, c_lo, c_hi), in_range = clampd(dc, -el, eh);
      // TRL GMPOTrainer ([B] advantages): by the sign test A > 0; verl geo_mean ([B, T]): sign(A)·min(sign(A)·…).
      const double a = b.a(i, t), sgn = (a > 0) - (a < 0);
      gmpo_sum += b.adv_per_token ? sgn * std::min(sgn * dc, sgn * in_range)
                                  : (a > 0 ? std::min(dc, in_range) : std::max(dc, in_range));
      adv_sum += b.a(i, t);
    }
    const double len = b.length(i);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t k = i * T + t;
      if (!b.valid(i, t)) continue;
      const double a = b.a(i, t), lp = b.lp[k], d = lp - b.old[k];
      const double log_w =
          o.importance_level == ImportanceLevel::token ? clampd(d, c_lo, c_hi) : clampd(seq_sum / len, c_lo, c_hi);
      const double w = std::exp(log_w);
      switch (o.type) {
        case PolicyLossType::ppo_clip:
        case PolicyLossType::clip_cov: {
          const double w1 = o.delta ? std::min(w, *o.delta) : w;
          const double unclipped = -a * w1, clipped = -a * clampd(w, 1 - el, 1 + eh);
          double l = std::max(unclipped, clipped);
          if (o.dual_clip_c && a < 0) l = std::min(l, -a * *o.dual_clip_c);
          r.loss[k] = l;
          r.candidates[k] = !(clipped > unclipped) && cov[k] > o.clip_cov_lb && cov[k] < o.clip_cov_ub;
          break;
        }
        case PolicyLossType::cispo:
          r.loss[k] = -std::min(w, eh) * a * lp;
          r.grad[k] = -std::min(w, eh) * a;
          break;
        case PolicyLossType::cispo_two_sided:
          r.loss[k] = -clampd(w, 1 - el, 1 + eh) * a * lp;
          r.grad[k] = -clampd(w, 1 - el, 1 + eh) * a;
          break;
        case PolicyLossType::sapo: {
          const double tau = a > 0 ? o.sapo_tau_pos : o.sapo_tau_neg;
          r.loss[k] = -(4 / tau) * sigmoid(tau * (w - 1)) * a;
          break;
        }
        case PolicyLossType::vespo: {
          const double log_big_w = clampd(vespo_sum, std::log(1e-8), 20.0), big_w = std::exp(log_big_w);
          const bool nonneg = a >= 0;
          const double kk = nonneg ? o.vespo_k_pos : o.vespo_k_neg;
          const double lam = std::max(nonneg ? o.vespo_lambda_pos : o.vespo_lambda_neg, 1e-4);
          const double phi = std::exp(lam + kk * log_big_w - lam * big_w);
          r.loss[k] = -phi * a * lp;
          r.grad[k] = -phi * a;
          break;
        }
        case PolicyLossType::gpg:
          r.loss[k] = -a * lp;
          break;
        case PolicyLossType::gmpo: {
          // verl divides by |o| + 1e-8, TRL by max(|o|, 1).
          const double seq_adv = b.adv_per_token ? adv_sum / (len + 1e-8) : b.adv[i];
          r.loss[k] = -seq_adv * std::exp(gmpo_sum / (b.adv_per_token ? len + 1e-8 : len));
          break;
        }
        case PolicyLossType::kl_cov:
          r.loss[k] = -a * w + (r.selected[k] ? o.kl_cov_coef * std::abs(d) : 0.0);
          break;
      }
    }
  }
  return r;
}

// Random [3, 5] batch with ragged rows of length 5, 2 and 3, log ratios of about ±0.3 (inside and outside the
// default clip range), advantages per sequence or per token.
Batch random_batch(uint64_t seed, bool adv_per_token) {
  torch::manual_seed(seed);
  Batch b;
  b.rows = 3;
  b.cols = 5;
  auto lp = -(torch::rand({3, 5}, torch::kFloat64) * 2 + 0.1);
  auto old = lp - torch::randn({3, 5}, torch::kFloat64) * 0.3;
  auto adv = adv_per_token ? torch::randn({3, 5}, torch::kFloat64) : torch::tensor({1.3, -0.7, 0.4}, torch::kFloat64);
  auto to_vec = [](const torch::Tensor& x) {
    auto c = x.contiguous();
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  };
  b.lp = to_vec(lp);
  b.old = to_vec(old);
  b.adv = to_vec(adv);
  b.adv_per_token = adv_per_token;
  b.mask = {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0};
  return b;
}

// Every (type, level) combination validate() accepts.
std::vector<PolicyLossOptions> all_supported_options() {
  std::vector<PolicyLossOptions> out;
  const PolicyLossType types[] = {PolicyLossType::ppo_clip, PolicyLossType::cispo,   PolicyLossType::cispo_two_sided,
                                  PolicyLossType::sapo,     PolicyLossType::vespo,   PolicyLossType::gpg,
                                  PolicyLossType::gmpo,     PolicyLossType::clip_cov, PolicyLossType::kl_cov};
  const ImportanceLevel levels[] = {ImportanceLevel::token, ImportanceLevel::sequence, ImportanceLevel::sequence_token};
  for (auto type : types)
    for (auto level : levels) {
      auto o = with_type(type, level);
      if (type == PolicyLossType::cispo) o.epsilon_high = 5.0;
      if (type == PolicyLossType::clip_cov) o.seed = 7;
      try {
        o.validate();
      } catch (const grpo::ConfigError&) {
        continue;
      }
      out.push_back(o);
    }
  return out;
}

// Runs f, requires that it throws ErrorType whose message contains every one of `parts`.
template <typename ErrorType, typename Fn>
void require_throws_containing(Fn&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const ErrorType& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      INFO("message: " << message);
      REQUIRE(message.find(part) != std::string::npos);
    }
    return;
  }
  FAIL("no exception thrown");
}

std::string describe(const PolicyLossOptions& o) {
  return std::string(grpo::to_string(o.type)) + " @ " +
         std::string(grpo::to_string(o.importance_level));
}

torch::Tensor sum_loss(const Batch& b, const PolicyLossOptions& o, const torch::Tensor& lp) {
  return grpo::policy_loss(lp, b.old_t(), b.adv_t(), b.mask_t(), o).per_token_loss.sum();
}

}  // namespace

TEST_CASE("the loops over every supported (type, level) cover the 17 pairs the options accept", "[loss][policy_loss]") {
  // ppo_clip, cispo, cispo_two_sided and sapo at all three levels; vespo, gpg, gmpo,
  // clip_cov and kl_cov at token only (PolicyLossOptions::importance_level). A pair validate() stops accepting, or
  // a new one, changes this count and so fails here instead of silently leaving the loops.
  std::set<std::string> pairs;
  for (const auto& o : all_supported_options()) pairs.insert(describe(o));
  CHECK(pairs.size() == 17);
  CHECK(all_supported_options().size() == 17);
}

// ===============================================================================================================
// Hand-computed values on the [2, 3] batch (ε_low = ε_high = 0.2 unless stated).

TEST_CASE("ppo_clip token level: values and clip statistics by hand", "[loss][policy_loss]") {
  const auto b = hand_batch();
  const auto out = run(b, with_type(PolicyLossType::ppo_clip));
  // Row 0, A = 1: L = max(−w, −clip(w, 0.8, 1.2)):  w=0.5 → max(−0.5, −0.8) = −0.5;  w=1.1 → −1.1;
  //   w=1.5 → max(−1.5, −1.2) = −1.2 (clipped high).
  // Row 1, A = −2: L = max(2w, 2·clip(w)):  w=0.7 → max(1.4, 1.6) = 1.6 (clipped low);  w=1.3 → max(2.6, 2.4) = 2.6;
  //   pad → 0.
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({-0.5, -1.1, -1.2, 1.6, 2.6, 0.0}, 2, 3), 1e-12, 1e-12);
  REQUIRE(out.per_token_loss.scalar_type() == torch::kFloat64);
  GRPO_REQUIRE_CLOSE(out.log_ratio, as_tensor({std::log(0.5), std::log(1.1), std::log(1.5), std::log(0.7),
                                               std::log(1.3), 0.0}, 2, 3), 1e-12, 1e-12);
  require_same_bool(out.clipped_low, bool_tensor({0, 0, 0, 1, 0, 0}, 2, 3));
  require_same_bool(out.clipped_high, bool_tensor({0, 0, 1, 0, 0, 0}, 2, 3));
  require_same_bool(out.pg_clipped, bool_tensor({0, 0, 1, 1, 0, 0}, 2, 3));
  require_same_bool(out.dual_clipped, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
  require_same_bool(out.cov_selected, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
  REQUIRE_FALSE(out.vespo_phi.defined());
}

TEST_CASE("ppo_clip dual clip caps the loss of negative advantages at −c·A", "[loss][policy_loss]") {
  const auto b = hand_batch();
  auto o = with_type(PolicyLossType::ppo_clip);
  o.dual_clip_c = 1.25;
  const auto out = run(b, o);
  // Row 1, A = −2, cap −A·c = 2.5:  w=0.7: min(1.6, 2.5) = 1.6;  w=1.3: min(2.6, 2.5) = 2.5 (dual clipped).
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({-0.5, -1.1, -1.2, 1.6, 2.5, 0.0}, 2, 3), 1e-12, 1e-12);
  require_same_bool(out.dual_clipped, bool_tensor({0, 0, 0, 0, 1, 0}, 2, 3));
  require_same_bool(out.pg_clipped, bool_tensor({0, 0, 1, 1, 0, 0}, 2, 3));
}

TEST_CASE("ppo_clip two-sided delta caps the unclipped branch at min(w, δ)", "[loss][policy_loss]") {
  const auto b = hand_batch();
  auto o = with_type(PolicyLossType::ppo_clip);
  o.delta = 1.25;
  const auto out = run(b, o);
  // Row 0 w=1.5: w' = 1.25, max(−1.25, −1.2) = −1.2, still clipped high (w' > 1.2).
  // Row 1 w=1.3: w' = 1.25, max(2·1.25, 2·1.2) = 2.5, the unclipped branch wins (not pg-clipped).
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({-0.5, -1.1, -1.2, 1.6, 2.5, 0.0}, 2, 3), 1e-12, 1e-12);
  require_same_bool(out.clipped_high, bool_tensor({0, 0, 1, 0, 0, 0}, 2, 3));
  require_same_bool(out.pg_clipped, bool_tensor({0, 0, 1, 1, 0, 0}, 2, 3));
  require_same_bool(out.dual_clipped, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
}

TEST_CASE("ppo_clip sequence and sequence_token levels use the geometric mean ratio", "[loss][policy_loss]") {
  const auto b = hand_batch();
  // Row 0: log w = (ln 0.5 + ln 1.1 + ln 1.5)/3 → w = 0.825^(1/3) = 0.93789 (inside [0.8, 1.2]), L = −w.
  // Row 1: log w = (ln 0.7 + ln 1.3)/2 → w = √0.91 = 0.95394, A = −2 → L = 2w = 1.90788. The pad is ignored.
  const double w0 = std::cbrt(0.825), w1 = std::sqrt(0.91);
  const auto expected = as_tensor({-w0, -w0, -w0, 2 * w1, 2 * w1, 0.0}, 2, 3);
  const auto expected_log = as_tensor({std::log(w0), std::log(w0), std::log(w0), std::log(w1), std::log(w1), 0.0}, 2, 3);
  for (auto level : {ImportanceLevel::sequence, ImportanceLevel::sequence_token}) {
    const auto out = run(b, with_type(PolicyLossType::ppo_clip, level));
    GRPO_REQUIRE_CLOSE(out.per_token_loss, expected, 1e-12, 1e-12);
    GRPO_REQUIRE_CLOSE(out.log_ratio, expected_log, 1e-12, 1e-12);
    require_same_bool(out.pg_clipped, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
  }
  // Gradients of Σ L wrt lp. sequence: every token of row i moves w_i: dL_i,t/dlp_s = −A·w_i/|o_i|, summed over the
  // |o_i| tokens → −A·w_i per token: row 0 −w0, row 1 2·w1. sequence_token: only the own token, also −A·w_i.
  // They agree here because every token of a row carries the same A; they differ in which tokens feed which loss.
  const auto expected_grad = as_tensor({-w0, -w0, -w0, 2 * w1, 2 * w1, 0.0}, 2, 3);
  for (auto level : {ImportanceLevel::sequence, ImportanceLevel::sequence_token}) {
    auto f = [&](const torch::Tensor& lp) { return sum_loss(b, with_type(PolicyLossType::ppo_clip, level), lp); };
    GRPO_REQUIRE_CLOSE(autograd_grad(f, b.lp_t()), expected_grad, 1e-12, 1e-12);
  }
}

TEST_CASE("sequence_token level: each token's gradient only flows through its own log-prob", "[loss][policy_loss]") {
  // Per-token advantages make the difference visible: with A = [[1, 2, 3], ...] and row 0 w0 inside the clip range,
  // sequence_token gives dΣL/dlp_t = −A_t·w0, while sequence gives −w0·ΣA/|o| = −2·w0 for every token.
  auto b = hand_batch();
  b.adv_per_token = true;
  b.adv = {1.0, 2.0, 3.0, -2.0, -2.0, 0.0};
  const double w0 = std::cbrt(0.825), w1 = std::sqrt(0.91);
  auto grad = [&](ImportanceLevel level) {
    return autograd_grad([&](const torch::Tensor& lp) { return sum_loss(b, with_type(PolicyLossType::ppo_clip, level), lp); },
                         b.lp_t());
  };
  GRPO_REQUIRE_CLOSE(grad(ImportanceLevel::sequence_token),
                     as_tensor({-w0, -2 * w0, -3 * w0, 2 * w1, 2 * w1, 0.0}, 2, 3), 1e-12, 1e-12);
  GRPO_REQUIRE_CLOSE(grad(ImportanceLevel::sequence),
                     as_tensor({-2 * w0, -2 * w0, -2 * w0, 2 * w1, 2 * w1, 0.0}, 2, 3), 1e-12, 1e-12);
}

TEST_CASE("cispo (TRL upper cap) by hand", "[loss][policy_loss]") {
  const auto b = hand_batch();
  auto o = with_type(PolicyLossType::cispo);
  o.epsilon_high = 1.2;  // absolute cap on w
  const auto out = run(b, o);
  // L = −min(w, 1.2)·A·lp.  Row 0 (A=1): −0.5·(−1) = 0.5;  −1.1·(−0.5) = 0.55;  −1.2·(−2) = 2.4.
  // Row 1 (A=−2): −0.7·(−2)·(−0.3) = −0.42;  −1.2·(−2)·(−1.2) = −2.88.
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({0.5, 0.55, 2.4, -0.42, -2.88, 0.0}, 2, 3), 1e-12, 1e-12);
  // TRL's cispo_clip_ratio mask: w > cap ∧ A > 0 → only row 0 t2. verl-style "weight was clipped": also row 1 t1.
  require_same_bool(out.clipped_high, bool_tensor({0, 0, 1, 0, 0, 0}, 2, 3));
  require_same_bool(out.clipped_low, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
  require_same_bool(out.pg_clipped, bool_tensor({0, 0, 1, 0, 1, 0}, 2, 3));
  // The weight is a constant: dL/dlp = −min(w, 1.2)·A.
  auto f = [&](const torch::Tensor& lp) { return sum_loss(b, o, lp); };
  GRPO_REQUIRE_CLOSE(autograd_grad(f, b.lp_t()), as_tensor({-0.5, -1.1, -1.2, 1.4, 2.4, 0.0}, 2, 3), 1e-12, 1e-12);
}

TEST_CASE("cispo_two_sided (verl) by hand", "[loss][policy_loss]") {
  const auto b = hand_batch();
  const auto out = run(b, with_type(PolicyLossType::cispo_two_sided));
  // Weights clip(w, 0.8, 1.2) = [[0.8, 1.1, 1.2], [0.8, 1.2, -]].  L = −c·A·lp:
  // Row 0: −0.8·(−1) = 0.8;  −1.1·(−0.5) = 0.55;  −1.2·(−2) = 2.4.  Row 1: −0.8·(−2)·(−0.3) = −0.48;  −1.2·(−2)·(−1.2) = −2.88.
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({0.8, 0.55, 2.4, -0.48, -2.88, 0.0}, 2, 3), 1e-12, 1e-12);
  require_same_bool(out.pg_clipped, bool_tensor({1, 0, 1, 1, 1, 0}, 2, 3));
  require_same_bool(out.clipped_low, bool_tensor({0, 0, 0, 1, 0, 0}, 2, 3));
  require_same_bool(out.clipped_high, bool_tensor({0, 0, 1, 0, 0, 0}, 2, 3));
}

TEST_CASE("sapo by hand", "[loss][policy_loss]") {
  const auto b = hand_batch();
  const auto out = run(b, with_type(PolicyLossType::sapo));
  // Row 0, A = 1, τ = 1: L = −4·σ(w − 1):  σ(−0.5) = 0.377541 → −1.510163;  σ(0.1) = 0.524979 → −2.099917;
  //   σ(0.5) = 0.622459 → −2.489837.
  // Row 1, A = −2, τ = 1.05: L = (8/1.05)·σ(1.05·(w − 1)) = 7.619048·σ(±0.315):  σ(−0.315) = 0.421895 → 3.214436;
  //   σ(0.315) = 0.578105 → 4.404611.
  GRPO_REQUIRE_CLOSE(out.per_token_loss,
                     as_tensor({-1.510163, -2.099917, -2.489837, 3.214436, 4.404611, 0.0}, 2, 3), 1e-6, 1e-6);
  require_same_bool(out.pg_clipped, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
}

TEST_CASE("cispo, cispo_two_sided and sapo at sequence_token level by hand", "[loss][policy_loss]") {
  const auto b = hand_batch();
  // w is the sequence weight of every token: row 0 w0 = 0.825^(1/3) = 0.93789, row 1 w1 = √0.91 = 0.95394, both
  // under the cap 5 and inside [0.8, 1.2], so neither CISPO form clips.
  const double w0 = std::cbrt(0.825), w1 = std::sqrt(0.91);
  // CISPO: L = −w_i·A·lp → row 0: −w0·lp = [w0, 0.5·w0, 2·w0]; row 1: 2·w1·lp = [−0.6·w1, −2.4·w1].
  const auto cispo_expected = as_tensor({w0, 0.5 * w0, 2 * w0, -0.6 * w1, -2.4 * w1, 0.0}, 2, 3);
  // Gradient: the weight is a constant, dL/dlp = −w_i·A.
  const auto cispo_grad = as_tensor({-w0, -w0, -w0, 2 * w1, 2 * w1, 0.0}, 2, 3);
  for (auto type : {PolicyLossType::cispo, PolicyLossType::cispo_two_sided}) {
    auto o = with_type(type, ImportanceLevel::sequence_token);
    if (type == PolicyLossType::cispo) o.epsilon_high = 5.0;
    const auto out = run(b, o);
    GRPO_REQUIRE_CLOSE(out.per_token_loss, cispo_expected, 1e-12, 1e-12);
    require_same_bool(out.pg_clipped, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
    auto f = [&](const torch::Tensor& lp) { return sum_loss(b, o, lp); };
    GRPO_REQUIRE_CLOSE(autograd_grad(f, b.lp_t()), cispo_grad, 1e-12, 1e-12);
  }
  // SAPO: row 0 L = −4·σ(w0 − 1) = −4·σ(−0.06211) = −1.937908; row 1 L = (8/1.05)·σ(1.05·(w1 − 1)) =
  //   7.619048·σ(−0.04836) = 3.717420.
  const auto out = run(b, with_type(PolicyLossType::sapo, ImportanceLevel::sequence_token));
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({-4 * sigmoid(w0 - 1), -4 * sigmoid(w0 - 1), -4 * sigmoid(w0 - 1),
                                                    8 / 1.05 * sigmoid(1.05 * (w1 - 1)),
                                                    8 / 1.05 * sigmoid(1.05 * (w1 - 1)), 0.0}, 2, 3),
                     1e-12, 1e-12);
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({-1.937908, -1.937908, -1.937908, 3.717420, 3.717420, 0.0}, 2, 3),
                     1e-6, 1e-6);
}

TEST_CASE("vespo by hand", "[loss][policy_loss]") {
  const auto b = hand_batch();
  const auto out = run(b, with_type(PolicyLossType::vespo));
  // Row 0: W = 0.5·1.1·1.5 = 0.825 (the product of token ratios, not their mean), A ≥ 0 → k = 2, λ = 3:
  //   φ = exp(3 + 2·ln 0.825 − 3·0.825) = e^0.525·0.825² = 1.690459·0.680625 = 1.150568.
  // Row 1: W = 0.7·1.3 = 0.91, A < 0 → k = 3, λ = 2: φ = e^(2 − 1.82)·0.91³ = 1.197217·0.753571 = 0.902189.
  // L = −φ·A·lp: row 0 → [1.150568, 0.575284, 2.301136]; row 1 → 2φ·lp = [−0.541313, −2.165254].
  const double phi0 = std::exp(0.525) * 0.825 * 0.825, phi1 = std::exp(0.18) * 0.91 * 0.91 * 0.91;
  GRPO_REQUIRE_CLOSE(out.vespo_phi, torch::tensor({phi0, phi1}, torch::kFloat64), 1e-12, 1e-12);
  GRPO_REQUIRE_CLOSE(out.vespo_phi, torch::tensor({1.150568, 0.902189}, torch::kFloat64), 1e-6, 1e-6);
  GRPO_REQUIRE_CLOSE(out.per_token_loss,
                     as_tensor({phi0, 0.5 * phi0, 2 * phi0, -0.6 * phi1, -2.4 * phi1, 0.0}, 2, 3), 1e-12, 1e-12);
  auto f = [&](const torch::Tensor& lp) { return sum_loss(b, with_type(PolicyLossType::vespo), lp); };
  // φ is a constant: dL/dlp = −φ·A.
  GRPO_REQUIRE_CLOSE(autograd_grad(f, b.lp_t()), as_tensor({-phi0, -phi0, -phi0, 2 * phi1, 2 * phi1, 0.0}, 2, 3),
                     1e-12, 1e-12);
}

TEST_CASE("gpg by hand", "[loss][policy_loss]") {
  const auto b = hand_batch();
  const auto out = run(b, with_type(PolicyLossType::gpg));
  // L = −A·lp: row 0 → [1, 0.5, 2]; row 1 → 2·lp = [−0.6, −2.4].
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({1.0, 0.5, 2.0, -0.6, -2.4, 0.0}, 2, 3), 1e-12, 1e-12);
}

TEST_CASE("gmpo by hand: sequence loss on every valid token", "[loss][policy_loss]") {
  const auto b = hand_batch();
  auto o = with_type(PolicyLossType::gmpo);
  o.epsilon_low = o.epsilon_high = 0.4;  // the GMPO paper's range, in log space
  const auto out = run(b, o);
  // Row 0, A = 1 > 0: Δ = [ln 0.5, ln 1.1, ln 1.5] = [−0.6931, 0.0953, 0.4055]; min(Δ, clip(Δ, −0.4, 0.4)) =
  //   [−0.6931, 0.0953, 0.4] → w_0 = exp(mean) = (0.5·1.1·e^0.4)^(1/3) = 0.820504^(1/3) = 0.936182, L_0 = −w_0.
  // Row 1, A = −2: Δ = [ln 0.7, ln 1.3] both inside ±0.4 → w_1 = √0.91, L_1 = 2·√0.91 = 1.907878.
  const double w0 = std::cbrt(0.5 * 1.1 * std::exp(0.4)), w1 = std::sqrt(0.91);
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({-w0, -w0, -w0, 2 * w1, 2 * w1, 0.0}, 2, 3), 1e-12, 1e-12);
  // The sequence-mean of token-means is mean_i L_i = (−w0 + 2·w1)/2, GMPO's objective.
  const auto token_means = out.per_token_loss.sum(1) / torch::tensor({3.0, 2.0}, torch::kFloat64);
  REQUIRE(token_means.mean().item<double>() == Approx((-w0 + 2 * w1) / 2).epsilon(1e-12));
  // TRL: high = Δ > 0.4 ∧ A > 0 (row 0 t2); low = Δ < −0.4 ∧ A < 0 (none). verl geo_mean pg_clipfrac: outside
  // ∧ A > 0 (row 0 t0 and t2); pg_clipfrac_lower: outside ∧ A < 0 (none).
  require_same_bool(out.clipped_high, bool_tensor({0, 0, 1, 0, 0, 0}, 2, 3));
  require_same_bool(out.clipped_low, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
  require_same_bool(out.pg_clipped, bool_tensor({1, 0, 1, 0, 0, 0}, 2, 3));
  require_same_bool(out.dual_clipped, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
  GRPO_REQUIRE_CLOSE(out.log_ratio, as_tensor({std::log(w0), std::log(w0), std::log(w0), std::log(w1), std::log(w1), 0.0},
                                              2, 3), 1e-12, 1e-12);
}

TEST_CASE("clip_cov by hand: covariance band candidates are dropped", "[loss][policy_loss]") {
  const auto b = hand_batch();
  // Batch means over the 5 valid tokens: mean A = (3 − 4)/5 = −0.2, mean lp = (−1 −0.5 −2 −0.3 −1.2)/5 = −1.
  // cov = (A + 0.2)·(lp + 1): row 0 → 1.2·[0, 0.5, −1] = [0, 0.6, −1.2]; row 1 → −1.8·[0.7, −0.2] = [−1.26, 0.36].
  // With band (0.3, 5) the candidates are row 0 t1 (0.6) and row 1 t1 (0.36), neither clipped by PPO.
  auto o = with_type(PolicyLossType::clip_cov);
  o.clip_cov_lb = 0.3;
  o.clip_cov_ub = 5.0;
  o.seed = 3;
  SECTION("ratio 0.5: max(⌊0.5·5⌋, 1) = 2 picks both candidates") {
    o.clip_cov_ratio = 0.5;
    const auto out = run(b, o);
    // PPO token loss [[−0.5, −1.1, −1.2], [1.6, 2.6, 0]] with both candidates zeroed.
    GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({-0.5, 0.0, -1.2, 1.6, 0.0, 0.0}, 2, 3), 1e-12, 1e-12);
    require_same_bool(out.cov_selected, bool_tensor({0, 1, 0, 0, 1, 0}, 2, 3));
    require_same_bool(out.pg_clipped, bool_tensor({0, 1, 0, 0, 1, 0}, 2, 3));  // verl logs the drop as pg_clipfrac
    require_same_bool(out.clipped_low, bool_tensor({0, 0, 0, 1, 0, 0}, 2, 3));
    require_same_bool(out.clipped_high, bool_tensor({0, 0, 1, 0, 0, 0}, 2, 3));
    // Dropped tokens get no gradient; the others the PPO gradient −A·w (unclipped) or 0 (clipped).
    auto f = [&](const torch::Tensor& lp) { return sum_loss(b, o, lp); };
    GRPO_REQUIRE_CLOSE(autograd_grad(f, b.lp_t()), as_tensor({-0.5, 0.0, 0.0, 0.0, 0.0, 0.0}, 2, 3), 1e-12, 1e-12);
  }
  SECTION("ratio 0.2: one of the two candidates, the same one for the same seed") {
    o.clip_cov_ratio = 0.2;
    const auto first = run(b, o);
    REQUIRE(first.cov_selected.sum().item<int64_t>() == 1);
    REQUIRE((first.cov_selected & ~bool_tensor({0, 1, 0, 0, 1, 0}, 2, 3)).sum().item<int64_t>() == 0);
    for (int repeat = 0; repeat < 3; ++repeat) require_same_bool(run(b, o).cov_selected, first.cov_selected);
    // Both candidates are reachable over seeds.
    torch::Tensor seen = torch::zeros({2, 3}, torch::kBool);
    for (uint64_t s = 0; s < 32; ++s) {
      o.seed = s;
      seen = seen | run(b, o).cov_selected;
    }
    require_same_bool(seen, bool_tensor({0, 1, 0, 0, 1, 0}, 2, 3));
  }
  SECTION("no seed: the pick follows torch::manual_seed") {
    o.clip_cov_ratio = 0.2;
    o.seed.reset();
    torch::manual_seed(11);
    const auto first = run(b, o).cov_selected;
    torch::manual_seed(11);
    require_same_bool(run(b, o).cov_selected, first);
  }
}

TEST_CASE("kl_cov by hand: the top-covariance tokens get the |Δ| penalty", "[loss][policy_loss]") {
  const auto b = hand_batch();
  // cov as in the clip_cov case: [[0, 0.6, −1.2], [−1.26, 0.36]]. ratio 0.4 → max(⌊0.4·5⌋, 1) = 2 tokens:
  // row 0 t1 (0.6) and row 1 t1 (0.36). L = −A·w (no clipping) + 0.1·|ln w| on those two:
  // row 0: [−0.5, −1.1 + 0.1·ln 1.1, −1.5];  row 1: [1.4, 2.6 + 0.1·ln 1.3].
  auto o = with_type(PolicyLossType::kl_cov);
  o.kl_cov_ratio = 0.4;
  auto out = run(b, o);
  GRPO_REQUIRE_CLOSE(out.per_token_loss,
                     as_tensor({-0.5, -1.1 + 0.1 * std::log(1.1), -1.5, 1.4, 2.6 + 0.1 * std::log(1.3), 0.0}, 2, 3),
                     1e-12, 1e-12);
  require_same_bool(out.cov_selected, bool_tensor({0, 1, 0, 0, 1, 0}, 2, 3));
  require_same_bool(out.pg_clipped, bool_tensor({0, 0, 0, 0, 0, 0}, 2, 3));
  // Default ratio 2e-4: max(⌊0.001⌋, 1) = 1 token, the largest covariance (row 0 t1).
  out = run(b, with_type(PolicyLossType::kl_cov));
  require_same_bool(out.cov_selected, bool_tensor({0, 1, 0, 0, 0, 0}, 2, 3));
}

// ===============================================================================================================
// fp64 re-derivation on random ragged batches, and gradient checks.

TEST_CASE("every type and level matches the fp64 element-loop reference", "[loss][policy_loss]") {
  for (bool per_token : {false, true}) {
    const auto b = random_batch(per_token ? 21 : 20, per_token);
    for (auto o : all_supported_options()) {
      if (o.type == PolicyLossType::gmpo) o.epsilon_low = o.epsilon_high = 0.1;  // make some tokens clip
      if (o.type == PolicyLossType::kl_cov) o.kl_cov_ratio = 0.3;                 // ⌊0.3·10⌋ = 3 tokens
      if (o.type == PolicyLossType::clip_cov) {
        o.clip_cov_lb = 0.0;
        o.clip_cov_ratio = 0.2;  // ⌊0.2·10⌋ = 2 of the candidates
      }
      INFO(describe(o) << (per_token ? " with [B, T] advantages" : " with [B] advantages"));
      const auto out = run(b, o);
      const auto ref = reference(b, o);
      auto expected = as_tensor(ref.loss, b.rows, b.cols);
      if (o.type == PolicyLossType::clip_cov) {
        // The random drop: a subset of the reference candidates of the right size, and zero loss there.
        const auto candidates = bool_tensor(ref.candidates, b.rows, b.cols) & b.mask_t();
        const int64_t n_candidates = candidates.sum().item<int64_t>();
        REQUIRE(n_candidates >= 2);
        REQUIRE(out.cov_selected.sum().item<int64_t>() == std::min<int64_t>(2, n_candidates));
        REQUIRE((out.cov_selected & ~candidates).sum().item<int64_t>() == 0);
        expected = torch::where(out.cov_selected, torch::zeros_like(expected), expected);
      }
      if (o.type == PolicyLossType::kl_cov) require_same_bool(out.cov_selected, bool_tensor(ref.selected, b.rows, b.cols));
      GRPO_REQUIRE_CLOSE(out.per_token_loss, expected, 1e-12, 1e-12);
    }
  }
}

TEST_CASE("gradients of Σ per_token_loss match finite differences (float64)", "[loss][policy_loss]") {
  for (bool per_token : {false, true}) {
    const auto b = random_batch(per_token ? 31 : 30, per_token);
    for (auto o : all_supported_options()) {
      if (o.type == PolicyLossType::gmpo) o.epsilon_low = o.epsilon_high = 0.1;
      if (o.type == PolicyLossType::kl_cov) o.kl_cov_ratio = 0.3;
      if (o.type == PolicyLossType::clip_cov) {
        o.clip_cov_lb = 0.0;
        o.clip_cov_ratio = 0.2;
      }
      INFO(describe(o) << (per_token ? " with [B, T] advantages" : " with [B] advantages"));
      auto f = [&](const torch::Tensor& lp) { return sum_loss(b, o, lp); };
      const auto grad = autograd_grad(f, b.lp_t());
      const auto ref = reference(b, o);
      if (!ref.grad.empty()) {
        // cispo, cispo_two_sided, vespo: the weight is a stop-gradient constant, so the gradient is the weight
        // times −A (finite differences of the forward value would also move the weight).
        GRPO_REQUIRE_CLOSE(grad, as_tensor(ref.grad, b.rows, b.cols), 1e-12, 1e-12);
      } else if (o.importance_level == ImportanceLevel::sequence_token) {
        // GSPO-token: the value is that of the sequence weight, the gradient flows only through each token's own
        // lp. That is the gradient of the TOKEN-level loss whose old log-probs are frozen at lp − log w_i.
        const auto seq_log_w = run(b, with_type(PolicyLossType::ppo_clip, ImportanceLevel::sequence)).log_ratio;
        auto token = o;
        token.importance_level = ImportanceLevel::token;
        const auto frozen_old = b.lp_t() - seq_log_w;
        auto g = [&](const torch::Tensor& lp) {
          return grpo::policy_loss(lp, frozen_old, b.adv_t(), b.mask_t(), token).per_token_loss.sum();
        };
        GRPO_REQUIRE_CLOSE(grad, finite_difference_grad(g, b.lp_t()), 1e-6, 1e-7);
      } else {
        GRPO_REQUIRE_CLOSE(grad, finite_difference_grad(f, b.lp_t()), 1e-6, 1e-7);
      }
    }
  }
}

TEST_CASE("log_importance_weight is the weight the surrogate uses, with its gradient", "[loss][policy_loss]") {
  const auto b = random_batch(40, false);
  for (auto level : {ImportanceLevel::token, ImportanceLevel::sequence, ImportanceLevel::sequence_token}) {
    INFO(grpo::to_string(level));
    const auto o = with_type(PolicyLossType::ppo_clip, level);
    auto f = [&](const torch::Tensor& lp) {
      return grpo::log_importance_weight(lp, b.old_t(), b.mask_t(), level, o.effective_log_ratio_bounds());
    };
    GRPO_REQUIRE_CLOSE(f(b.lp_t()), run(b, o).log_ratio, 0, 0);
    // d Σ log w / d lp = 1 on valid tokens at every level: token trivially; sequence: each of the |o_i| entries of
    // row i is Σ_t Δ_t/|o_i|, so every token contributes |o_i|·(1/|o_i|); sequence_token: lp − sg(lp) per token.
    auto sum = [&](const torch::Tensor& lp) { return f(lp).sum(); };
    GRPO_REQUIRE_CLOSE(autograd_grad(sum, b.lp_t()), b.mask_t().to(torch::kFloat64), 1e-12, 1e-12);
  }
  // The clamp: log w = ±100 becomes ±20 with no gradient under verl's symmetric bounds; at_most(10) clamps only
  // the upper side (verl gspo); none() leaves both with gradient 1 (TRL); the float64 overflow guard is 700.
  auto lp = torch::zeros({1, 2}, torch::kFloat64);
  auto old = torch::tensor({{-100.0, 100.0}}, torch::kFloat64);
  auto f = [&](const LogRatioBounds& bounds) {
    return [&, bounds](const torch::Tensor& x) {
      return grpo::log_importance_weight(x, old, torch::ones({1, 2}), ImportanceLevel::token, bounds);
    };
  };
  auto grad_of = [&](const LogRatioBounds& bounds) {
    return autograd_grad([&](const torch::Tensor& x) { return f(bounds)(x).sum(); }, lp);
  };
  GRPO_REQUIRE_CLOSE(f(LogRatioBounds::symmetric(20))(lp), torch::tensor({{20.0, -20.0}}, torch::kFloat64), 0, 0);
  GRPO_REQUIRE_CLOSE(grad_of(LogRatioBounds::symmetric(20)), torch::zeros({1, 2}, torch::kFloat64), 0, 0);
  GRPO_REQUIRE_CLOSE(f(LogRatioBounds::at_most(10))(lp), torch::tensor({{10.0, -100.0}}, torch::kFloat64), 0, 0);
  GRPO_REQUIRE_CLOSE(grad_of(LogRatioBounds::at_most(10)), torch::tensor({{0.0, 1.0}}, torch::kFloat64), 0, 0);
  GRPO_REQUIRE_CLOSE(f(LogRatioBounds::none())(lp), torch::tensor({{100.0, -100.0}}, torch::kFloat64), 0, 0);
  GRPO_REQUIRE_CLOSE(grad_of(LogRatioBounds::none()), torch::ones({1, 2}, torch::kFloat64), 0, 0);
  auto far_old = torch::tensor({{-1000.0, 1000.0}}, torch::kFloat64);
  GRPO_REQUIRE_CLOSE(grpo::log_importance_weight(lp, far_old, torch::ones({1, 2}), ImportanceLevel::token,
                                                 LogRatioBounds::none()),
                     torch::tensor({{700.0, -700.0}}, torch::kFloat64), 0, 0);
}

// ===============================================================================================================
// Numerical edge cases.

TEST_CASE("log ratios of ±100 give finite losses and gradients for every type and level", "[loss][policy_loss]") {
  for (auto dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
    for (double sign : {1.0, -1.0}) {
      auto lp = torch::tensor({-0.5, -1.0, -2.0, -0.7, -0.2, -1.5}, torch::kFloat64).reshape({2, 3});
      auto delta = torch::tensor({100.0, -100.0, 0.1, -100.0, 100.0, 0.05}, torch::kFloat64).reshape({2, 3});
      auto old = lp - delta;
      auto adv = torch::tensor({1.5 * sign, -0.5 * sign}, torch::kFloat64);
      auto mask = torch::ones({2, 3});
      for (auto o : all_supported_options()) {
        INFO(describe(o) << " dtype " << c10::toString(dtype) << " sign " << sign);
        auto leaf = lp.to(dtype).detach().requires_grad_(true);
        auto out = grpo::policy_loss(leaf, old.to(dtype), adv.to(dtype), mask, o);
        REQUIRE(out.per_token_loss.scalar_type() == dtype);
        REQUIRE(torch::isfinite(out.per_token_loss).all().item<bool>());
        REQUIRE(torch::isfinite(out.log_ratio).all().item<bool>());
        out.per_token_loss.sum().backward();
        REQUIRE(torch::isfinite(leaf.grad()).all().item<bool>());
      }
    }
  }
}

TEST_CASE("log ratios of ±100: the clipped surrogate's exact values and gradients (verl's ±20 clamp)",
          "[loss][policy_loss]") {
  // ppo_clip, token level, ε = 0.2, as verl's compute_policy_loss_vanilla (core_algos.py, verl 0.5): log w is
  // clamped to [−20, 20] before exp, so a clamped token has no gradient; loss = −min(w·A, clip(w, 0.8, 1.2)·A).
  // Worked by hand per token (Δ = lp − old, A per row):
  //   A = 1.5:  Δ = 100 → w = e^20, min(1.5e^20, 1.8) = 1.8 → −1.8 (gradient 0: clamped and clipped)
  //             Δ = −100 → w = e^−20, min(1.5e^−20, 1.2) → −1.5e^−20 (gradient 0: clamped)
  //             Δ = 0.1 → w = e^0.1 inside the clip range → −1.5e^0.1, gradient −1.5e^0.1
  //   A = −0.5: Δ = −100 → min(−0.5e^−20, −0.4) = −0.4 → 0.4 (gradient 0)
  //             Δ = 100 → min(−0.5e^20, −0.6) = −0.5e^20 → 0.5e^20 (gradient 0: clamped; no dual clip by default)
  //             Δ = 0.05 → 0.5e^0.05, gradient 0.5e^0.05
  auto lp = torch::tensor({-0.5, -1.0, -2.0, -0.7, -0.2, -1.5}, torch::kFloat64).reshape({2, 3});
  auto delta = torch::tensor({100.0, -100.0, 0.1, -100.0, 100.0, 0.05}, torch::kFloat64).reshape({2, 3});
  auto adv = torch::tensor({1.5, -0.5}, torch::kFloat64);
  auto leaf = lp.detach().requires_grad_(true);
  auto out = grpo::policy_loss(leaf, lp - delta, adv, torch::ones({2, 3}), PolicyLossOptions{});
  const auto expected = torch::tensor({-1.8, -1.5 * std::exp(-20.0), -1.5 * std::exp(0.1), 0.4,
                                       0.5 * std::exp(20.0), 0.5 * std::exp(0.05)},
                                      torch::kFloat64)
                            .reshape({2, 3});
  GRPO_REQUIRE_CLOSE(out.per_token_loss, expected, 1e-14, 0);
  GRPO_REQUIRE_CLOSE(out.log_ratio,
                     torch::tensor({20.0, -20.0, 0.1, -20.0, 20.0, 0.05}, torch::kFloat64).reshape({2, 3}), 1e-14, 0);
  out.per_token_loss.sum().backward();
  GRPO_REQUIRE_CLOSE(leaf.grad(),
                     torch::tensor({0.0, 0.0, -1.5 * std::exp(0.1), 0.0, 0.0, 0.5 * std::exp(0.05)}, torch::kFloat64)
                         .reshape({2, 3}),
                     1e-14, 0);
  // With verl's dual clip c = 3, the A < 0 token at w = e^20 is capped at −c·A = 1.5.
  PolicyLossOptions dual;
  dual.dual_clip_c = 3.0;
  auto capped = grpo::policy_loss(lp, lp - delta, adv, torch::ones({2, 3}), dual).per_token_loss;
  CHECK(capped[1][1].item<double>() == Approx(1.5).epsilon(1e-14));
}

TEST_CASE("empty rows and padding with −inf or NaN log-probs give zero rows and zero gradients", "[loss][policy_loss]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto lp = torch::tensor({-0.5, -1.0, -inf, nan, -inf, -0.3, -1.1, nan}, torch::kFloat64).reshape({2, 4});
  auto old = torch::tensor({-0.6, -0.8, nan, -inf, nan, 0.0, -1.0, -inf}, torch::kFloat64).reshape({2, 4});
  auto mask = torch::tensor({1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}).reshape({2, 4});  // float mask, row 1 empty
  for (auto o : all_supported_options()) {
    INFO(describe(o));
    for (const auto& adv : {torch::tensor({1.0, -1.0}, torch::kFloat64), torch::full({2, 4}, 0.7, torch::kFloat64)}) {
      auto leaf = lp.detach().requires_grad_(true);
      auto out = grpo::policy_loss(leaf, old, adv, mask, o);
      REQUIRE(torch::isfinite(out.per_token_loss).all().item<bool>());
      REQUIRE(torch::equal(out.per_token_loss.slice(1, 2), torch::zeros({2, 2}, torch::kFloat64)));
      REQUIRE(torch::equal(out.per_token_loss[1], torch::zeros({4}, torch::kFloat64)));
      REQUIRE(torch::equal(out.log_ratio[1], torch::zeros({4}, torch::kFloat64)));
      for (const auto& flags : {out.clipped_low, out.clipped_high, out.pg_clipped, out.dual_clipped, out.cov_selected})
        REQUIRE_FALSE(flags[1].any().item<bool>());
      out.per_token_loss.sum().backward();
      REQUIRE(torch::isfinite(leaf.grad()).all().item<bool>());
      REQUIRE(torch::equal(leaf.grad().slice(1, 2), torch::zeros({2, 2}, torch::kFloat64)));
      REQUIRE(torch::equal(leaf.grad()[1], torch::zeros({4}, torch::kFloat64)));
    }
  }
}

TEST_CASE("an entirely masked batch gives zero loss and zero gradient", "[loss][policy_loss]") {
  auto lp = torch::randn({2, 3}, torch::kFloat64);
  auto mask = torch::zeros({2, 3}, torch::kBool);
  for (auto o : all_supported_options()) {
    INFO(describe(o));
    auto leaf = lp.detach().requires_grad_(true);
    auto out = grpo::policy_loss(leaf, lp + 0.1, torch::tensor({1.0, -1.0}, torch::kFloat64), mask, o);
    REQUIRE(torch::equal(out.per_token_loss, torch::zeros({2, 3}, torch::kFloat64)));
    out.per_token_loss.sum().backward();
    REQUIRE(torch::equal(leaf.grad(), torch::zeros({2, 3}, torch::kFloat64)));
  }
}

TEST_CASE("half-precision inputs are computed in float32 and returned in their dtype", "[loss][policy_loss]") {
  const auto b = hand_batch();
  auto lp = b.lp_t().to(torch::kBFloat16);
  auto out = grpo::policy_loss(lp, b.old_t().to(torch::kBFloat16), b.adv_t().to(torch::kBFloat16), b.mask_t(),
                               with_type(PolicyLossType::ppo_clip));
  REQUIRE(out.per_token_loss.scalar_type() == torch::kBFloat16);
  // bfloat16 keeps ~3 significant digits (inputs rounded too).
  GRPO_REQUIRE_CLOSE(out.per_token_loss, as_tensor({-0.5, -1.1, -1.2, 1.6, 2.6, 0.0}, 2, 3), 2e-2, 2e-2);
}

// ===============================================================================================================
// Errors.

TEST_CASE("validate rejects bad options, naming the option", "[loss][policy_loss]") {
  struct Bad {
    std::function<void(PolicyLossOptions&)> set;
    std::string option;
  };
  const std::vector<Bad> cases = {
      {[](auto& o) { o.epsilon_low = -0.1; }, "epsilon_low"},
      {[](auto& o) { o.epsilon_high = std::nan(""); }, "epsilon_high"},
      {[](auto& o) { o.type = PolicyLossType::cispo; o.epsilon_high = 0; }, "epsilon_high"},
      // A clip range needs both sides > 0.
      {[](auto& o) { o.epsilon_low = 0; }, "epsilon_low must be > 0 for ppo_clip, got 0"},
      {[](auto& o) { o.epsilon_high = 0; }, "epsilon_high must be > 0 for ppo_clip, got 0"},
      {[](auto& o) { o.type = PolicyLossType::clip_cov; o.epsilon_low = 0; }, "epsilon_low must be > 0 for clip_cov"},
      {[](auto& o) { o.type = PolicyLossType::cispo_two_sided; o.epsilon_high = 0; },
       "epsilon_high must be > 0 for cispo_two_sided"},
      {[](auto& o) { o.type = PolicyLossType::gmpo; o.epsilon_low = 0; }, "epsilon_low must be > 0 for gmpo"},
      {[](auto& o) { o.delta = 1.0; }, "delta"},
      {[](auto& o) { o.type = PolicyLossType::sapo; o.delta = 2.0; }, "delta"},
      {[](auto& o) { o.dual_clip_c = 1.0; }, "dual_clip_c"},
      {[](auto& o) { o.dual_clip_c = 0.5; }, "dual_clip_c"},
      {[](auto& o) { o.type = PolicyLossType::clip_cov; o.dual_clip_c = 3.0; }, "dual_clip_c"},
      {[](auto& o) { o.log_ratio_bounds = LogRatioBounds{0.0, 1.0}; }, "log_ratio_bounds"},
      {[](auto& o) { o.log_ratio_bounds = LogRatioBounds{-1.0, std::nan("")}; }, "log_ratio_bounds"},
      {[](auto& o) { o.sapo_tau_pos = 0; }, "sapo_tau_pos"},
      {[](auto& o) { o.sapo_tau_neg = -1; }, "sapo_tau_neg"},
      {[](auto& o) { o.vespo_k_pos = -1; }, "vespo_k_pos"},
      {[](auto& o) { o.vespo_k_neg = std::nan(""); }, "vespo_k_neg"},
      {[](auto& o) { o.vespo_lambda_pos = 0; }, "vespo_lambda_pos"},
      {[](auto& o) { o.vespo_lambda_neg = -2; }, "vespo_lambda_neg"},
      {[](auto& o) { o.clip_cov_ratio = 0; }, "clip_cov_ratio"},
      {[](auto& o) { o.clip_cov_ratio = 1.5; }, "clip_cov_ratio"},
      {[](auto& o) { o.clip_cov_lb = 5; o.clip_cov_ub = 1; }, "clip_cov_lb"},
      {[](auto& o) { o.kl_cov_ratio = 0; }, "kl_cov_ratio"},
      {[](auto& o) { o.kl_cov_coef = -0.1; }, "kl_cov_coef"},
      {[](auto& o) { o.type = PolicyLossType::vespo; o.importance_level = ImportanceLevel::sequence_token; }, "importance_level"},
      {[](auto& o) { o.type = PolicyLossType::gmpo; o.importance_level = ImportanceLevel::sequence; }, "importance_level"},
      {[](auto& o) { o.type = PolicyLossType::kl_cov; o.importance_level = ImportanceLevel::sequence; }, "importance_level"},
  };
  REQUIRE_NOTHROW(PolicyLossOptions{}.validate());
  // ε = 0 stays valid where it bounds nothing (sapo, vespo, gpg, kl_cov) and for cispo's unused epsilon_low.
  for (auto type : {PolicyLossType::cispo, PolicyLossType::sapo, PolicyLossType::vespo, PolicyLossType::gpg,
                    PolicyLossType::kl_cov}) {
    PolicyLossOptions o;
    o.type = type;
    o.epsilon_low = 0;
    if (type != PolicyLossType::cispo) o.epsilon_high = 0;
    INFO("type " << grpo::to_string(type));
    REQUIRE_NOTHROW(o.validate());
  }
  const auto b = hand_batch();
  for (const auto& bad : cases) {
    PolicyLossOptions o;
    bad.set(o);
    INFO("expected an error naming " << bad.option);
    require_throws_containing<grpo::ConfigError>([&] { o.validate(); }, {"PolicyLossOptions." + bad.option});
    require_throws_containing<grpo::ConfigError>([&] { run(b, o); }, {bad.option});  // policy_loss validates too
  }
  // The supported combinations: ppo_clip, cispo, cispo_two_sided and sapo at every level; vespo, gpg, gmpo,
  // clip_cov, kl_cov at token.
  REQUIRE(all_supported_options().size() == 3 + 3 + 3 + 3 + 5);
}

TEST_CASE("policy_loss rejects mismatched shapes and dtypes, naming the argument", "[loss][policy_loss]") {
  const auto lp = torch::zeros({2, 3}, torch::kFloat64);
  const auto mask = torch::ones({2, 3});
  const auto adv = torch::zeros({2});
  const PolicyLossOptions o;
  using grpo::policy_loss;
  require_throws_containing<grpo::Error>([&] { policy_loss(lp, torch::zeros({2, 4}, torch::kFloat64), adv, mask, o); },
                                         {"old_log_probs", "[2, 4]"});
  require_throws_containing<grpo::Error>([&] { policy_loss(lp, lp, torch::zeros({3}), mask, o); },
                                         {"advantages", "[3]"});
  require_throws_containing<grpo::Error>([&] { policy_loss(lp, lp, torch::zeros({2, 2}), mask, o); },
                                         {"advantages", "[2, 2]"});
  require_throws_containing<grpo::Error>([&] { policy_loss(lp, lp, adv, torch::ones({3, 2}), o); }, {"mask", "[3, 2]"});
  require_throws_containing<grpo::Error>([&] { policy_loss(torch::zeros({6}), torch::zeros({6}), adv, mask, o); },
                                         {"log_probs", "[6]"});
  require_throws_containing<grpo::Error>([&] { policy_loss(lp.to(torch::kLong), lp, adv, mask, o); }, {"log_probs"});
  require_throws_containing<grpo::Error>([&] { policy_loss(lp, lp, torch::zeros({2}, torch::kLong), mask, o); },
                                         {"advantages"});
}

TEST_CASE("policy-loss and importance-level names parse, and unknown names list the valid ones", "[loss][policy_loss]") {
  const PolicyLossType types[] = {PolicyLossType::ppo_clip, PolicyLossType::cispo,   PolicyLossType::cispo_two_sided,
                                  PolicyLossType::sapo,     PolicyLossType::vespo,   PolicyLossType::gpg,
                                  PolicyLossType::gmpo,     PolicyLossType::clip_cov, PolicyLossType::kl_cov};
  for (auto type : types) REQUIRE(grpo::parse_policy_loss_type(grpo::to_string(type)) == type);
  REQUIRE(grpo::parse_policy_loss_type("vanilla") == PolicyLossType::ppo_clip);
  REQUIRE(grpo::parse_policy_loss_type("geo_mean") == PolicyLossType::gmpo);
  std::vector<std::string> all_names = {"'gspo'"};
  for (auto type : types) all_names.emplace_back(grpo::to_string(type));
  try {
    grpo::parse_policy_loss_type("gspo");
    FAIL("no exception thrown");
  } catch (const grpo::ConfigError& e) {
    for (const auto& name : all_names) REQUIRE(std::string(e.what()).find(name) != std::string::npos);
  }
  for (auto level : {ImportanceLevel::token, ImportanceLevel::sequence, ImportanceLevel::sequence_token})
    REQUIRE(grpo::parse_importance_level(grpo::to_string(level)) == level);
  require_throws_containing<grpo::ConfigError>([] { grpo::parse_importance_level("seq"); },
                                               {"'seq'", "token", "sequence", "sequence_token"});
}
