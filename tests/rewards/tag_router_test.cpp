// SPDX-License-Identifier: Apache-2.0
#include <grpo/rewards/tag_router.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

namespace {

using namespace grpo::rewards;
using grpo::rewards::testing::require_values;
using grpo::rewards::testing::score;

std::shared_ptr<const Row> tagged(const std::string& tag) {
  return std::make_shared<const Row>(Row{{"tag", tag}});
}

RewardPtr constant(std::string name, float value) {
  return make_reward(std::move(name), [value](const Completion&) { return value; });
}

TEST_CASE("TagRouter scores each completion with its domain's reward", "[rewards][router]") {
  const TagRouter router("domain", {{"math", constant("math", 1.0f)}, {"code", constant("code", 2.0f)}});
  const std::vector<Completion> batch{testing::completion("a", tagged("math")), testing::completion("b", tagged("code")),
                                      testing::completion("c", tagged("math")), testing::completion("d", tagged("poetry")),
                                      testing::completion("e")};
  // Unknown tag and missing row: no value without a fallback.
  require_values(score(router, batch), {1.0, 2.0, 1.0, std::nullopt, std::nullopt});
  CHECK(router.name() == "domain");
  CHECK(router.scope() == RewardScope::completion);

  const TagRouter with_fallback("domain", {{"math", constant("math", 1.0f)}},
                                {.tag_field = "tag", .fallback = constant("other", 3.0f)});
  require_values(score(with_fallback, batch), {1.0, 3.0, 1.0, 3.0, 3.0});

  // Another field name (ROLL rows also carry "domain").
  const auto domain_row = std::make_shared<const Row>(Row{{"domain", std::string("code")}});
  const TagRouter by_domain("domain", {{"code", constant("code", 2.0f)}}, {.tag_field = "domain"});
  require_values(score(by_domain, {testing::completion("x", domain_row)}), {2.0});
}

TEST_CASE("TagRouter hands a batch-scoped route all of its completions at once", "[rewards][router]") {
  auto sizes = std::make_shared<std::vector<std::size_t>>();
  auto batch_size = make_reward(
      "size",
      [sizes](std::span<const Completion> all) {
        sizes->push_back(all.size());
        return std::vector<std::optional<float>>(all.size(), static_cast<float>(all.size()));
      },
      RewardScope::batch);
  const TagRouter router("domain", {{"math", batch_size}, {"code", constant("code", -1.0f)}});
  CHECK(router.scope() == RewardScope::batch);
  const std::vector<Completion> batch{testing::completion("a", tagged("math")), testing::completion("b", tagged("code")),
                                      testing::completion("c", tagged("math")), testing::completion("d", tagged("math"))};
  // The three math completions are scored together (value 3), not in runs of 1 and 2.
  require_values(score(router, batch), {3.0, -1.0, 3.0, 3.0});
  CHECK(*sizes == std::vector<std::size_t>{3});
}

TEST_CASE("TagRouter validates its routes", "[rewards][router]") {
  CHECK_THROWS_AS(TagRouter("domain", {}), grpo::ConfigError);
  CHECK_THROWS_AS(TagRouter("", {{"math", constant("math", 1.0f)}}), grpo::ConfigError);
  CHECK_THROWS_WITH(TagRouter("domain", {{"math", nullptr}}), Catch::Contains("math"));
}

}  // namespace
