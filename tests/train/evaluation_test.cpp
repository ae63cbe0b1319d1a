// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/evaluation.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using grpo::train::EvalSample;
using grpo::train::majority_vote_correct;
using grpo::train::pass_at_k;
using grpo::train::summarize_evaluation;

namespace {

// 1 − C(n−c, k)/C(n, k) with the binomials from lgamma, the textbook form of the estimator.
double pass_at_k_by_binomials(int n, int c, int k) {
  if (n - c < k) return 1.0;
  auto log_choose = [](int a, int b) { return std::lgamma(a + 1.0) - std::lgamma(b + 1.0) - std::lgamma(a - b + 1.0); };
  return 1.0 - std::exp(log_choose(n - c, k) - log_choose(n, k));
}

}  // namespace

TEST_CASE("pass_at_k: hand-computed values", "[train][evaluation]") {
  CHECK(pass_at_k(5, 2, 2) == Approx(0.7));   // 1 − C(3,2)/C(5,2) = 1 − 3/10
  CHECK(pass_at_k(5, 1, 3) == Approx(0.6));   // 1 − C(4,3)/C(5,3) = 1 − 4/10
  CHECK(pass_at_k(4, 1, 1) == Approx(0.25));  // c / n
  CHECK(pass_at_k(10, 0, 5) == 0.0);
  CHECK(pass_at_k(3, 3, 2) == 1.0);
  CHECK(pass_at_k(4, 2, 3) == 1.0);  // any 3 of 4 include one of the 2 correct
}

TEST_CASE("pass_at_k equals the binomial formula for every n <= 30", "[train][evaluation]") {
  for (int n = 1; n <= 30; ++n)
    for (int c = 0; c <= n; ++c)
      for (int k = 1; k <= n; ++k) CHECK(pass_at_k(n, c, k) == Approx(pass_at_k_by_binomials(n, c, k)).margin(1e-12));
}

TEST_CASE("pass_at_k rejects impossible counts", "[train][evaluation]") {
  CHECK_THROWS_AS(pass_at_k(4, 5, 1), grpo::ConfigError);
  CHECK_THROWS_AS(pass_at_k(4, -1, 1), grpo::ConfigError);
  CHECK_THROWS_AS(pass_at_k(4, 1, 0), grpo::ConfigError);
  CHECK_THROWS_AS(pass_at_k(4, 1, 5), grpo::ConfigError);
}

TEST_CASE("majority_vote_correct: most frequent answer, earliest on ties, no-answer samples do not vote",
          "[train][evaluation]") {
  const std::vector<EvalSample> majority_right = {{"3", false}, {"7", true}, {"7", true}, {std::nullopt, false}};
  CHECK(majority_vote_correct(majority_right) == 1.0);
  const std::vector<EvalSample> majority_wrong = {{"7", true}, {"3", false}, {"3", false}};
  CHECK(majority_vote_correct(majority_wrong) == 0.0);
  // 2 votes each: "5" reached 2 first (sample 2), so it wins.
  const std::vector<EvalSample> tie = {{"5", false}, {"9", true}, {"5", false}, {"9", true}};
  CHECK(majority_vote_correct(tie) == 0.0);
  const std::vector<EvalSample> none = {{std::nullopt, true}, {std::nullopt, false}};
  CHECK(majority_vote_correct(none) == 0.0);
  CHECK(majority_vote_correct(std::vector<EvalSample>{}) == 0.0);
}

TEST_CASE("summarize_evaluation: per-problem averages", "[train][evaluation]") {
  // Problem 0: 1 of 3 correct, majority "2" wrong. Problem 1: 3 of 3 correct.
  const std::vector<EvalSample> samples = {{"2", false}, {"2", false}, {"4", true},
                                           {"8", true},  {"8", true},  {"8.0", true}};
  const auto s = summarize_evaluation(samples, 3, 2);
  CHECK(s.problems == 2);
  CHECK(s.samples_per_problem == 3);
  CHECK(s.k == 2);
  CHECK(s.mean_accuracy == Approx((1.0 / 3 + 1.0) / 2));
  CHECK(s.pass_at_k == Approx((2.0 / 3 + 1.0) / 2));  // problem 0: 1 − C(2,2)/C(3,2) = 2/3
  CHECK(s.maj_at_n == Approx(0.5));
  CHECK_THROWS_AS(summarize_evaluation(samples, 4, 2), grpo::ConfigError);  // 6 is not a multiple of 4
  CHECK_THROWS_AS(summarize_evaluation(samples, 3, 4), grpo::ConfigError);  // k > n
}
