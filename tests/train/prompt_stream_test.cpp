// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/permutation.hpp>
#include <grpo/train/prompt_stream.hpp>

#include <catch2/catch.hpp>

#include <set>

using grpo::train::PromptStream;

TEST_CASE("prompt stream: each epoch visits every item once, in a new seeded order", "[train][prompt_stream]") {
  PromptStream stream(5, 40);
  std::vector<std::size_t> first, second;
  for (int i = 0; i < 5; ++i) first.push_back(stream.next());
  CHECK(stream.epoch() == 1);
  for (int i = 0; i < 5; ++i) second.push_back(stream.next());
  CHECK(first == grpo::seeded_permutation(5, 40));
  CHECK(second == grpo::seeded_permutation(5, 41));
  CHECK(std::set<std::size_t>(second.begin(), second.end()).size() == 5);
  // Resume: a stream set to a saved position continues identically.
  PromptStream resumed(5, 40);
  resumed.set_position(7);
  PromptStream straight(5, 40);
  for (int i = 0; i < 7; ++i) straight.next();
  for (int i = 0; i < 12; ++i) CHECK(resumed.next() == straight.next());
  CHECK_THROWS_AS(PromptStream(0, 1), grpo::ConfigError);
}

TEST_CASE("prompt stream: a filter skips (and consumes) items, and gives up after one epoch's length",
          "[train][prompt_stream]") {
  PromptStream stream(6, 2);
  const auto order = grpo::seeded_permutation(6, 2);
  auto even = [](std::size_t item) { return item % 2 == 0; };
  std::size_t expected_position = 0;
  for (int k = 0; k < 3; ++k) {
    const auto item = stream.next_accepted(even);
    REQUIRE(item.has_value());
    CHECK(*item % 2 == 0);
    while (order[expected_position] % 2 != 0) ++expected_position;
    CHECK(*item == order[expected_position]);
    ++expected_position;
    CHECK(stream.position() == expected_position);
  }
  const std::uint64_t before = stream.position();
  CHECK_FALSE(stream.next_accepted([](std::size_t) { return false; }).has_value());
  CHECK(stream.position() == before);
}
