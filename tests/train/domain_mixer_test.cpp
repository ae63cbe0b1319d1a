// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/domain_mixer.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

using grpo::train::DomainMixer;

TEST_CASE("domain mixer: every step's counts sum to P and stay within 1 of P·p", "[train][domain_mixer]") {
  const DomainMixer mixer({.probabilities = {0.5, 0.3, 0.2}, .seed = 7});
  for (const std::int64_t prompts : {0, 1, 2, 7, 16, 33}) {
    for (std::int64_t step = 1; step <= 200; ++step) {
      const auto counts = mixer.counts(step, prompts);
      REQUIRE(counts.size() == 3);
      CHECK(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}) == prompts);
      for (std::size_t d = 0; d < 3; ++d) CHECK(std::abs(counts[d] - prompts * mixer.probabilities()[d]) < 1.0);
    }
  }
  // Integral shares are exact every step.
  const auto exact = mixer.counts(3, 10);
  CHECK(exact == std::vector<std::int64_t>{5, 3, 2});
}

TEST_CASE("domain mixer: the realised mix matches the probabilities within sampling error", "[train][domain_mixer]") {
  // P = 1: each step draws one domain with probability p_d, so over N steps the count of d is Binomial(N, p_d).
  const std::vector<double> p = {0.45, 0.35, 0.2};
  const DomainMixer mixer({.probabilities = p, .seed = 3});
  const std::int64_t n = 20000;
  std::vector<double> hits(3, 0.0);
  for (std::int64_t step = 1; step <= n; ++step) {
    const auto slots = mixer.assignment(step, 1);
    REQUIRE(slots.size() == 1);
    hits[slots[0]] += 1;
  }
  for (std::size_t d = 0; d < 3; ++d) {
    const double sigma = std::sqrt(n * p[d] * (1 - p[d]));
    INFO("domain " << d << ": " << hits[d] << " hits, expected " << n * p[d] << " ± " << sigma);
    CHECK(std::abs(hits[d] - n * p[d]) < 5 * sigma);
  }
  // P = 6 with weights {3, 1, 1} (normalised to 0.6, 0.2, 0.2): counts are ⌊6p⌋ + Bernoulli(frac(6p)), so the mean
  // over N steps is 6p within 5·sqrt(r(1−r)/N) with r = frac(6p) = {0.6, 0.2, 0.2}.
  const DomainMixer weighted({.probabilities = {3, 1, 1}, .seed = 11});
  CHECK(weighted.probabilities() == std::vector<double>{0.6, 0.2, 0.2});
  std::vector<double> total(3, 0.0);
  for (std::int64_t step = 1; step <= n; ++step) {
    const auto counts = weighted.counts(step, 6);
    for (std::size_t d = 0; d < 3; ++d) total[d] += static_cast<double>(counts[d]);
  }
  const double mean0 = total[0] / n, mean1 = total[1] / n, mean2 = total[2] / n;
  CHECK(std::abs(mean0 - 3.6) < 5 * std::sqrt(0.6 * 0.4 / n));
  CHECK(std::abs(mean1 - 1.2) < 5 * std::sqrt(0.2 * 0.8 / n));
  CHECK(std::abs(mean2 - 1.2) < 5 * std::sqrt(0.2 * 0.8 / n));
}

TEST_CASE("domain mixer: reproducible from the seed, slots shuffled, errors", "[train][domain_mixer]") {
  const DomainMixer a({.probabilities = {0.5, 0.5}, .seed = 1});
  const DomainMixer b({.probabilities = {0.5, 0.5}, .seed = 1});
  const DomainMixer c({.probabilities = {0.5, 0.5}, .seed = 2});
  bool any_difference = false, orders_differ = false;
  for (std::int64_t step = 1; step <= 50; ++step) {
    const auto slots = a.assignment(step, 8);
    CHECK(slots == b.assignment(step, 8));  // a pure function of (seed, step, P): a resumed run draws the same
    any_difference = any_difference || slots != c.assignment(step, 8);
    orders_differ = orders_differ || slots != a.assignment(step + 1, 8);
    CHECK(std::count(slots.begin(), slots.end(), 0u) == 4);
  }
  CHECK(any_difference);
  CHECK(orders_differ);
  // A zero-weight domain never appears.
  const DomainMixer zero({.probabilities = {1, 0}, .seed = 1});
  for (std::int64_t step = 1; step <= 20; ++step) CHECK(zero.counts(step, 5) == std::vector<std::int64_t>{5, 0});
  CHECK_THROWS_WITH(DomainMixer({.probabilities = {}}), Catch::Contains("no domains"));
  CHECK_THROWS_WITH(DomainMixer({.probabilities = {1, -1}}), Catch::Contains("domain 1 must be finite and >= 0"));
  CHECK_THROWS_WITH(DomainMixer({.probabilities = {0, 0}}), Catch::Contains("sum to 0"));
  CHECK_THROWS_AS(a.counts(1, -1), grpo::ConfigError);
}
