// SPDX-License-Identifier: Apache-2.0
// Test helpers for the reward tests: building completions and comparing optional values.
#pragma once

#include <grpo/rewards/reward_function.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace grpo::rewards::testing {

inline Completion completion(std::string text, std::shared_ptr<const Row> row = nullptr) {
  Completion c;
  c.text = std::move(text);
  c.row = std::move(row);
  return c;
}

inline std::vector<Completion> completions(const std::vector<std::string>& texts,
                                           std::shared_ptr<const Row> row = nullptr) {
  std::vector<Completion> batch;
  for (const auto& text : texts) batch.push_back(completion(text, row));
  return batch;
}

inline std::string show(const std::vector<std::optional<float>>& values) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    out << (i ? ", " : "");
    if (values[i]) out << *values[i]; else out << "none";
  }
  out << "]";
  return out.str();
}

/// Checks element by element: same presence, and |actual − expected| <= tol where present.
inline void require_values(const std::vector<std::optional<float>>& actual,
                           const std::vector<std::optional<double>>& expected, double tol = 1e-6) {
  INFO("actual " << show(actual));
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("index " << i);
    REQUIRE(actual[i].has_value() == expected[i].has_value());
    if (expected[i]) REQUIRE(std::abs(static_cast<double>(*actual[i]) - *expected[i]) <= tol);
  }
}

/// Scores a batch with a fresh context.
inline std::vector<std::optional<float>> score(const RewardFunction& reward, const std::vector<Completion>& batch) {
  return reward.score(batch, ScoringContext{});
}

}  // namespace grpo::rewards::testing
