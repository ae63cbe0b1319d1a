// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <catch2/catch.hpp>

TEST_CASE("GRPO_CHECK formats the message only on failure and throws grpo::Error", "[core]") {
  int formatted = 0;
  auto count = [&] { return ++formatted; };
  REQUIRE_NOTHROW([&] { GRPO_CHECK(true, "never {}", count()); }());
  REQUIRE(formatted == 0);
  try {
    GRPO_CHECK(1 + 1 == 3, "shape {} is wrong", grpo::shape_str(torch::zeros({2, 3})));
    FAIL("no exception");
  } catch (const grpo::Error& e) {
    REQUIRE(std::string(e.what()) == "shape [2, 3] is wrong");
  }
}

TEST_CASE("GRPO_CHECK_CONFIG throws ConfigError, a grpo::Error", "[core]") {
  REQUIRE_THROWS_AS([] { GRPO_CHECK_CONFIG(false, "epsilon must be > 0, got {}", -1.0); }(), grpo::ConfigError);
  REQUIRE_THROWS_AS([] { GRPO_CHECK_CONFIG(false, "x"); }(), grpo::Error);
}

TEST_CASE("tensor checks name the argument and its shape", "[core]") {
  auto a = torch::zeros({2, 3});
  auto b = torch::zeros({2, 4});
  REQUIRE_THROWS_WITH(grpo::detail::check_same_shape(a, "log_probs", b, "mask", "policy_loss"),
                      "policy_loss: log_probs has shape [2, 3] but mask has shape [2, 4]");
  REQUIRE_THROWS_WITH(grpo::detail::check_dim(a, 3, "logits", "token_log_probs"),
                      "token_log_probs: logits must have 3 dimensions, got shape [2, 3]");
  REQUIRE(grpo::shape_str(torch::Tensor()) == "undefined");
}
