// SPDX-License-Identifier: Apache-2.0
#include <grpo/advantage/group_advantage.hpp>
#include <grpo/rewards/domain_rewards.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace grpo::rewards;
using grpo::rewards::testing::require_values;

/// What one reward saw: the number of calls and the tag of every completion it was given.
struct Seen {
  std::mutex mutex;
  int calls = 0;
  std::vector<std::string> tags;
};

/// A deterministic reward that records what it is called with.
RewardPtr recorded(std::string name, std::shared_ptr<Seen> seen,
                   std::function<std::optional<float>(const Completion&)> value) {
  return make_reward(std::move(name), [seen, value](std::span<const Completion> batch) {
    std::vector<std::optional<float>> values;
    const std::lock_guard lock(seen->mutex);
    ++seen->calls;
    for (const Completion& c : batch) {
      seen->tags.push_back(c.row ? c.row->text("tag").value_or("?") : "?");
      values.push_back(value(c));
    }
    return values;
  });
}

/// The completion text read as a number; "none" = no value.
std::optional<float> number(const Completion& c) {
  if (c.text == "none") return std::nullopt;
  return std::strtof(c.text.c_str(), nullptr);
}

Completion completion(std::string text, const std::shared_ptr<const Row>& row, std::size_t group,
                      std::vector<std::int64_t> token_ids = {}) {
  Completion c;
  c.text = std::move(text);
  c.row = row;
  c.group = group;
  c.token_ids = std::move(token_ids);
  return c;
}

std::shared_ptr<const Row> tagged(const std::string& tag) { return std::make_shared<const Row>(Row{{"tag", tag}}); }

/// Three domains used in a batch and one absent from it:
///   math    (tags math, gsm8k): accuracy = text contains "right" (w 1) + format = text starts with '<' (w 0.5)
///   code    (tags {} = {code}): tests = the text as a number (w 1), clip [-1, 1], mean normalisation
///   general (tag chat):         judge = the text as a number (w 2), mean_std normalisation, accuracy judge >= 0.25
///   poetry  (tag poem):         meter = 1, never in the batch
struct Fixture {
  std::shared_ptr<Seen> accuracy = std::make_shared<Seen>(), format = std::make_shared<Seen>(),
                        tests = std::make_shared<Seen>(), judge = std::make_shared<Seen>(),
                        meter = std::make_shared<Seen>();

  std::vector<DomainSpec> specs(bool clip_after_normalisation = false) const {
    std::vector<DomainSpec> domains;
    domains.push_back(DomainSpec{
        .name = "math",
        .tags = {"math", "gsm8k"},
        .rewards = RewardSet({{.reward = recorded("accuracy", accuracy,
                                                  [](const Completion& c) -> std::optional<float> {
                                                    return c.text.find("right") != std::string::npos ? 1.0f : 0.0f;
                                                  })},
                              {.reward = recorded("format", format,
                                                  [](const Completion& c) -> std::optional<float> {
                                                    return c.text.starts_with("<") ? 1.0f : 0.0f;
                                                  }),
                               .weight = 0.5}}),
    });
    domains.push_back(DomainSpec{
        .name = "code",
        .rewards = RewardSet({{.reward = recorded("code_tests", tests, number), .label = "tests"}}),
        .clip = std::pair{-1.0, 1.0},
        .normalisation = DomainNormalisation::mean,
        .clip_after_normalisation = clip_after_normalisation,
    });
    domains.push_back(DomainSpec{
        .name = "general",
        .tags = {"chat"},
        .rewards = RewardSet({{.reward = recorded("judge", judge, number), .weight = 2.0}}),
        .normalisation = DomainNormalisation::mean_std,
        .accuracy_reward = "judge",
        .accuracy_threshold = 0.25,
    });
    domains.push_back(DomainSpec{
        .name = "poetry",
        .tags = {"poem"},
        .rewards = RewardSet({{.reward = recorded("meter", meter, [](const Completion&) -> std::optional<float> {
                                 return 1.0f;
                               })}}),
    });
    return domains;
  }
};

/// Six prompts of two completions, domains interleaved: math, code, math (gsm8k), general, code, general.
std::vector<Completion> mixed_batch() {
  const auto math = tagged("math"), code1 = tagged("code"), gsm = tagged("gsm8k"), chat1 = tagged("chat"),
             code2 = tagged("code"), chat2 = tagged("chat");
  return {
      completion("<right", math, 0, {11, 12, 13}),  // 1 + 0.5 = 1.5; 3 tokens
      completion("wrong", math, 0),                 // 0; 5 bytes
      completion("3", code1, 1),                    // 3 → clip 1
      completion("0.5", code1, 1),                  // 0.5
      completion("<wrong", gsm, 2),                 // 0.5
      completion("<wrong", gsm, 2),                 // 0.5 (zero spread)
      completion("1", chat1, 3),                    // 2·1 = 2
      completion("0", chat1, 3),                    // 0
      completion("none", code2, 4),                 // no value
      completion("-2", code2, 4),                   // −2 → clip −1
      completion("0.25", chat2, 5),                 // 0.5
      completion("0.25", chat2, 5),                 // 0.5 (zero spread)
  };
}

// general: totals 2, 0, 0.5, 0.5 → mean 0.75, Bessel std sqrt((1.5625 + 0.5625 + 0.0625 + 0.0625)/3) = sqrt(0.75).
const double kGeneralStd = std::sqrt(0.75);
double general(double total) { return (total - 0.75) / (kGeneralStd + 1e-6); }

TEST_CASE("DomainRewards scores each completion with its own domain's reward set", "[rewards][domains]") {
  Fixture f;
  const DomainRewards rewards(f.specs());
  const std::vector<Completion> batch = mixed_batch();
  const DomainScores scores = rewards.score(batch);

  // Routing: one call per domain present, and a reward only ever sees its own domain's tags.
  CHECK(f.accuracy->calls == 1);
  CHECK(f.format->calls == 1);
  CHECK(f.tests->calls == 1);
  CHECK(f.judge->calls == 1);
  CHECK(f.meter->calls == 0);  // absent domain: its rewards are not called
  CHECK(f.accuracy->tags == std::vector<std::string>{"math", "math", "gsm8k", "gsm8k"});
  CHECK(f.format->tags == f.accuracy->tags);
  CHECK(f.tests->tags == std::vector<std::string>{"code", "code", "code", "code"});
  CHECK(f.judge->tags == std::vector<std::string>{"chat", "chat", "chat", "chat"});

  CHECK(scores.domain == std::vector<std::size_t>{0, 0, 1, 1, 0, 0, 2, 2, 1, 1, 2, 2});
  REQUIRE(scores.members.size() == 4);
  CHECK(scores.members[0] == std::vector<std::size_t>{0, 1, 4, 5});
  CHECK(scores.members[1] == std::vector<std::size_t>{2, 3, 8, 9});
  CHECK(scores.members[2] == std::vector<std::size_t>{6, 7, 10, 11});
  CHECK(scores.members[3].empty());

  // math: weighted sum, no clip, no normalisation.
  // code: clip [−1, 1] → 1, 0.5, none, −1; mean over present = 0.5/3 = 1/6 → 5/6, 1/3, none, −7/6.
  // general: 2·judge → 2, 0, 0.5, 0.5, then (r − 0.75)/(sqrt(0.75) + 1e-6).
  require_values(scores.total, {1.5, 0.0, 5.0 / 6.0, 1.0 / 3.0, 0.5, 0.5, general(2.0), general(0.0), std::nullopt,
                                -7.0 / 6.0, general(0.5), general(0.5)},
                 1e-6);

  // Each domain's own RewardSetScores, in batch order, with raw (unclipped, unnormalised) totals.
  REQUIRE(scores.per_domain.size() == 4);
  CHECK(scores.per_domain[0].names == std::vector<std::string>{"accuracy", "format"});
  CHECK(scores.per_domain[0].weights == std::vector<double>{1.0, 0.5});
  require_values(scores.per_domain[0].values[0], {1.0, 0.0, 0.0, 0.0});
  require_values(scores.per_domain[0].values[1], {1.0, 0.0, 1.0, 1.0});
  require_values(scores.per_domain[0].total, {1.5, 0.0, 0.5, 0.5});
  CHECK(scores.per_domain[1].names == std::vector<std::string>{"tests"});
  require_values(scores.per_domain[1].total, {3.0, 0.5, std::nullopt, -2.0});
  require_values(scores.per_domain[2].total, {2.0, 0.0, 0.5, 0.5});
  // The absent domain: labels and weights, no values.
  CHECK(scores.per_domain[3].names == std::vector<std::string>{"meter"});
  CHECK(scores.per_domain[3].weights == std::vector<double>{1.0});
  REQUIRE(scores.per_domain[3].values.size() == 1);
  CHECK(scores.per_domain[3].values[0].empty());
  CHECK(scores.per_domain[3].total.empty());
}

TEST_CASE("DomainRewards routes by Completion::domain when the caller decided it, not by the tag again",
          "[rewards][domains]") {
  Fixture f;
  const DomainRewards rewards(f.specs());
  // Tagged "math" but routed to poetry (domain 3) by the prompt source (a `domain` field, or unknown_tag routing),
  // and an untagged row routed to code (domain 1).
  std::vector<Completion> batch = {completion("right", tagged("math"), 0), completion("0.5", nullptr, 1)};
  batch[0].domain = 3;
  batch[1].domain = 1;
  const DomainScores scores = rewards.score(batch);
  CHECK(scores.domain == std::vector<std::size_t>{3, 1});
  CHECK(f.accuracy->calls == 0);
  CHECK(f.meter->calls == 1);
  CHECK(f.tests->calls == 1);
  require_values(scores.per_domain[3].total, {1.0});
  batch[1].domain = 4;
  CHECK_THROWS_WITH(rewards.score(batch), Catch::Contains("is in domain 4, but there are 4 domains"));
}

TEST_CASE("DomainRewards summaries and metrics, by hand", "[rewards][domains]") {
  Fixture f;
  const DomainRewards rewards(f.specs());
  const DomainScores scores = rewards.score(mixed_batch());
  REQUIRE(scores.summaries.size() == 4);

  const auto& math = scores.summaries[0];
  CHECK(math.name == "math");
  CHECK(math.completions == 4);
  CHECK(math.groups == 2);
  // Raw totals 1.5, 0, 0.5, 0.5: mean 0.625, deviations .875 −.625 −.125 −.125, squares sum 1.1875, /3.
  CHECK(math.reward_mean == Approx(0.625));
  CHECK(math.reward_std == Approx(std::sqrt(1.1875 / 3.0)));
  CHECK(math.accuracy == Approx(0.25));             // only "<right" has accuracy 1
  CHECK(math.frac_reward_zero_std == Approx(0.5));  // prompt 2 (0.5, 0.5) of prompts {0, 2}
  CHECK(math.mean_length == Approx((3 + 5 + 6 + 6) / 4.0));  // 3 token ids, then text bytes
  CHECK(math.clip_frac == 0.0);

  const auto& code = scores.summaries[1];
  CHECK(code.completions == 4);
  CHECK(code.groups == 2);
  CHECK(code.reward_mean == Approx(0.5));  // raw 3, 0.5, −2 (one without value)
  CHECK(code.reward_std == Approx(2.5));   // deviations 2.5, 0, −2.5: sqrt(12.5 / 2)
  CHECK(code.accuracy == Approx(0.25));    // first reward (tests) >= 1: only 3; no value is not correct
  // Prompt 1 (5/6, 1/3) spreads; prompt 4 has one value: not counted, as GroupAdvantage does.
  CHECK(code.frac_reward_zero_std == 0.0);
  CHECK(code.mean_length == Approx((1 + 3 + 4 + 2) / 4.0));
  CHECK(code.clip_frac == Approx(2.0 / 3.0));  // 3 and −2 of the three values present

  const auto& chat = scores.summaries[2];
  CHECK(chat.completions == 4);
  CHECK(chat.groups == 2);
  CHECK(chat.reward_mean == Approx(0.75));
  CHECK(chat.reward_std == Approx(kGeneralStd));
  CHECK(chat.accuracy == Approx(0.75));              // judge 1, 0.25, 0.25 >= 0.25; 0 is not
  CHECK(chat.frac_reward_zero_std == Approx(0.5));  // prompt 5
  CHECK(chat.mean_length == Approx((1 + 1 + 4 + 4) / 4.0));

  // Per completion (batch order): the accuracy metric's numerator, for pass rates.
  CHECK(scores.correct == std::vector<std::uint8_t>{1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 1});
  // Whether it could judge at all: the code completion whose tests gave no value (batch 8) could not.
  CHECK(scores.judged == std::vector<std::uint8_t>{1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1});

  const auto& poetry = scores.summaries[3];  // absent: reported with zeros
  CHECK(poetry.name == "poetry");
  CHECK(poetry.completions == 0);
  CHECK(poetry.groups == 0);
  CHECK(poetry.reward_mean == 0.0);
  CHECK(poetry.reward_std == 0.0);
  CHECK(poetry.accuracy == 0.0);
  CHECK(poetry.frac_reward_zero_std == 0.0);
  CHECK(poetry.mean_length == 0.0);

  const auto metrics = scores.metrics();
  CHECK(metrics.at("domains/math/reward/mean") == Approx(0.625));
  CHECK(metrics.at("domains/math/reward/std") == Approx(std::sqrt(1.1875 / 3.0)));
  CHECK(metrics.at("domains/math/accuracy") == Approx(0.25));
  CHECK(metrics.at("domains/math/frac_reward_zero_std") == Approx(0.5));
  CHECK(metrics.at("domains/math/completion_length") == Approx(5.0));
  CHECK(metrics.at("domains/math/completions") == 4.0);
  CHECK(metrics.at("domains/math/groups") == 2.0);
  CHECK(metrics.at("domains/math/rewards/accuracy/mean") == Approx(0.25));
  CHECK(metrics.at("domains/math/rewards/format/mean") == Approx(0.75));
  CHECK(metrics.at("domains/code/rewards/tests/mean") == Approx(0.5));
  CHECK(metrics.at("domains/code/rewards/tests/frac_no_value") == Approx(0.25));
  CHECK(metrics.at("domains/code/reward/clip_frac") == Approx(2.0 / 3.0));
  CHECK(metrics.at("domains/general/rewards/judge/mean") == Approx(0.375));
  CHECK(metrics.at("domains/poetry/completions") == 0.0);
  CHECK(metrics.at("domains/poetry/accuracy") == 0.0);
  CHECK(metrics.at("domains/poetry/reward/mean") == 0.0);
  CHECK(metrics.at("domains/poetry/rewards/meter/mean") == 0.0);
  CHECK(metrics.count("domains/math/reward") == 0);  // the per-domain RewardSet totals are not repeated

  // Overall, over the 11 final totals present.
  const std::vector<double> finals{1.5,          0.0,          5.0 / 6.0,    1.0 / 3.0,   0.5,          0.5,
                                   general(2.0), general(0.0), -7.0 / 6.0, general(0.5), general(0.5)};
  double sum = 0.0, squares = 0.0;
  for (const double x : finals) sum += x;
  const double mean = sum / 11.0;
  for (const double x : finals) squares += (x - mean) * (x - mean);
  CHECK(metrics.at("reward") == Approx(mean));
  CHECK(metrics.at("reward_std") == Approx(std::sqrt(squares / 10.0)));
  CHECK(metrics.at("reward/frac_no_value") == Approx(1.0 / 12.0));
}

TEST_CASE("DomainRewards zero-std fractions agree with GroupAdvantage", "[rewards][domains]") {
  Fixture f;
  const DomainRewards rewards(f.specs());
  // Completions of different prompts interleaved (g0, g1, g0, g1, ...): statistics follow Completion::group, not
  // position. Prompt p's two completions are at p' and p' + 3 within each half.
  const auto math = tagged("math"), code = tagged("code"), chat = tagged("chat");
  const std::vector<Completion> batch{
      completion("<wrong", math, 0), completion("1", code, 1), completion("0.5", chat, 2),
      completion("<wrong", math, 0), completion("1", code, 1), completion("1", chat, 2),
      completion("<right", math, 3), completion("none", code, 4), completion("none", chat, 5),
      completion("wrong", math, 3),  completion("none", code, 4), completion("none", chat, 5),
  };
  const DomainScores scores = rewards.score(batch);
  // math prompts 0 (0.5, 0.5: zero) and 3 (1.5, 0); code prompts 1 (1, 1 → equal after clip and mean: zero) and 4 (no
  // values: not counted); general prompts 2 (spread) and 5 (no values).
  CHECK(scores.summaries[0].frac_reward_zero_std == Approx(0.5));
  CHECK(scores.summaries[1].frac_reward_zero_std == Approx(0.5));
  CHECK(scores.summaries[2].frac_reward_zero_std == 0.0);
  require_values(scores.total, {0.5, 0.0, (1.0 - 1.5) / (std::sqrt(0.5) + 1e-6), 0.5, 0.0,
                                (2.0 - 1.5) / (std::sqrt(0.5) + 1e-6), 1.5, std::nullopt, std::nullopt, 0.0,
                                std::nullopt, std::nullopt},
                 1e-5);

  // The reward matrix [P, G] = [6, 2] GroupAdvantage would see, from the final totals.
  std::vector<float> matrix(12);
  std::vector<int> filled(6, 0);
  const std::vector<float> finals = with_nan(scores.total);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::size_t p = batch[i].group;
    matrix[p * 2 + filled[p]++] = finals[i];
  }
  const auto adv = grpo::GroupAdvantage()(torch::tensor(matrix).reshape({6, 2}));
  double weighted = 0.0;
  std::size_t groups = 0;
  for (const auto& s : scores.summaries) {
    weighted += s.frac_reward_zero_std * static_cast<double>(s.groups);
    groups += s.groups;
  }
  CHECK(groups == 6);
  CHECK(weighted / 6.0 == Approx(adv.frac_reward_zero_std));
  CHECK(adv.frac_reward_zero_std == Approx(2.0 / 6.0));
}

TEST_CASE("DomainRewards clips after normalising in ROLL's order when asked", "[rewards][domains]") {
  Fixture f;
  const DomainRewards rewards(f.specs(/*clip_after_normalisation=*/true));
  const DomainScores scores = rewards.score(mixed_batch());
  // code raw 3, 0.5, none, −2: mean 0.5 → 2.5, 0, none, −2.5 → clip [−1, 1] → 1, 0, none, −1.
  const auto& code = scores.members[1];
  std::vector<std::optional<float>> code_totals;
  for (const std::size_t i : code) code_totals.push_back(scores.total[i]);
  require_values(code_totals, {1.0, 0.0, std::nullopt, -1.0});
  CHECK(scores.summaries[1].clip_frac == Approx(2.0 / 3.0));
}

TEST_CASE("DomainRewards normalisation edge cases", "[rewards][domains]") {
  const auto value = [](const Completion& c) { return number(c); };
  const auto one_domain = [&](DomainNormalisation normalisation, std::optional<std::pair<double, double>> clip = {}) {
    std::vector<DomainSpec> domains;
    domains.push_back(DomainSpec{.name = "math",
                                 .rewards = RewardSet({{.reward = make_reward("v", value)}}),
                                 .clip = clip,
                                 .normalisation = normalisation});
    return DomainRewards(std::move(domains));
  };
  const auto row = tagged("math");

  SECTION("a single value: std 0, so mean_std gives 0 (ROLL would give NaN)") {
    const auto scores = one_domain(DomainNormalisation::mean_std).score(std::vector{
        completion("3", row, 0), completion("none", row, 0)});
    require_values(scores.total, {0.0, std::nullopt});
  }
  SECTION("no value at all stays no value") {
    const auto scores = one_domain(DomainNormalisation::mean).score(std::vector{completion("none", row, 0)});
    require_values(scores.total, {std::nullopt});
    CHECK(scores.summaries[0].completions == 1);
    CHECK(scores.summaries[0].accuracy == 0.0);
    CHECK(scores.metrics().at("reward/frac_no_value") == 1.0);
    CHECK(scores.metrics().at("reward") == 0.0);
  }
  SECTION("mean_std by hand, one-sided clip") {
    // 1, 2, 3, 10 → clip (−inf, 4] → 1, 2, 3, 4: mean 2.5, Bessel std sqrt(5/3).
    const double inf = std::numeric_limits<double>::infinity();
    const auto scores = one_domain(DomainNormalisation::mean_std, std::pair{-inf, 4.0})
                            .score(std::vector{completion("1", row, 0), completion("2", row, 0),
                                               completion("3", row, 1), completion("10", row, 1)});
    const double s = std::sqrt(5.0 / 3.0) + 1e-6;
    require_values(scores.total, {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}, 1e-6);
    CHECK(scores.summaries[0].clip_frac == Approx(0.25));
    CHECK(scores.summaries[0].reward_mean == Approx(4.0));  // raw, before the clip
  }
  SECTION("an empty batch") {
    const auto scores = one_domain(DomainNormalisation::mean).score(std::vector<Completion>{});
    CHECK(scores.total.empty());
    REQUIRE(scores.summaries.size() == 1);
    CHECK(scores.summaries[0].completions == 0);
    CHECK(scores.metrics().at("reward") == 0.0);
    CHECK(scores.metrics().at("reward/frac_no_value") == 0.0);
  }
}

TEST_CASE("DomainRewards gives the same totals for a batch sorted by domain", "[rewards][domains]") {
  // Sorted batches take the no-copy path (a contiguous subspan per domain).
  Fixture f;
  const DomainRewards rewards(f.specs());
  const std::vector<Completion> mixed = mixed_batch();
  const DomainScores interleaved = rewards.score(mixed);
  std::vector<Completion> sorted;
  std::vector<std::size_t> order;
  for (std::size_t d = 0; d < 3; ++d) {
    for (const std::size_t i : interleaved.members[d]) {
      sorted.push_back(mixed[i]);
      order.push_back(i);
    }
  }
  const DomainScores by_domain = rewards.score(sorted);
  for (std::size_t j = 0; j < sorted.size(); ++j) {
    INFO("completion " << order[j]);
    REQUIRE(by_domain.total[j].has_value() == interleaved.total[order[j]].has_value());
    if (by_domain.total[j]) CHECK(*by_domain.total[j] == *interleaved.total[order[j]]);
  }
  for (std::size_t d = 0; d < 4; ++d) {
    const auto& a = by_domain.summaries[d];
    const auto& b = interleaved.summaries[d];
    INFO("domain " << a.name);
    CHECK(a.completions == b.completions);
    CHECK(a.groups == b.groups);
    CHECK(a.reward_mean == b.reward_mean);
    CHECK(a.reward_std == b.reward_std);
    CHECK(a.accuracy == b.accuracy);
    CHECK(a.frac_reward_zero_std == b.frac_reward_zero_std);
    CHECK(a.mean_length == b.mean_length);
    CHECK(a.clip_frac == b.clip_frac);
  }
}

TEST_CASE("DomainRewards rejects rows it cannot route", "[rewards][domains]") {
  Fixture f;
  const DomainRewards rewards(f.specs());
  CHECK(rewards.domain_of_tag("gsm8k") == std::optional<std::size_t>{0});
  CHECK(rewards.domain_of_tag("code") == std::optional<std::size_t>{1});  // empty tags = {name}
  CHECK(rewards.domain_of_tag("general") == std::nullopt);                // its tags are {chat}
  CHECK(rewards.domain_of_tag("sonnet") == std::nullopt);

  const auto throws_with = [&](std::vector<Completion> batch, const std::string& text) {
    CHECK_THROWS_AS(rewards.score(batch), grpo::Error);
    CHECK_THROWS_WITH(rewards.score(batch), Catch::Contains(text));
  };
  throws_with({completion("x", tagged("math"), 0), completion("x", tagged("sonnet"), 1)}, "'sonnet'");
  throws_with({completion("x", tagged("sonnet"), 0)}, "math (math, gsm8k), code (code), general (chat)");
  throws_with({completion("x", nullptr, 0)}, "no row");
  throws_with({completion("x", std::make_shared<const Row>(Row{{"domain", std::string("math")}}), 0)}, "field 'tag'");
  // Both completions of prompt 0 must share a domain.
  throws_with({completion("x", tagged("math"), 0), completion("x", tagged("code"), 0)}, "prompt 0");
  CHECK(f.accuracy->calls == 0);  // nothing was scored

  // Another tag field.
  std::vector<DomainSpec> domains;
  domains.push_back({.name = "math", .rewards = RewardSet({{.reward = make_reward("v", number)}})});  // as docs show
  const DomainRewards by_domain(std::move(domains), "domain");
  const auto scores =
      by_domain.score(std::vector{completion("2", std::make_shared<const Row>(Row{{"domain", std::string("math")}}), 0)});
  require_values(scores.total, {2.0});
}

TEST_CASE("DomainRewards validates its domains", "[rewards][domains]") {
  const auto spec = [](std::string name, std::vector<std::string> tags = {}) {
    return DomainSpec{.name = std::move(name),
                      .tags = std::move(tags),
                      .rewards = RewardSet({{.reward = make_reward("v", number)},
                                            {.reward = make_reward("w", number), .label = "second"}})};
  };
  const auto build = [](auto... specs) {
    std::vector<DomainSpec> domains;
    (domains.push_back(std::move(specs)), ...);
    return DomainRewards(std::move(domains));
  };
  CHECK_THROWS_AS(DomainRewards(std::vector<DomainSpec>{}), grpo::ConfigError);
  CHECK_THROWS_AS(build(spec("")), grpo::ConfigError);
  CHECK_THROWS_WITH(build(spec("math"), spec("math", {"gsm8k"})), Catch::Contains("two domains are named 'math'"));
  CHECK_THROWS_WITH(build(spec("math", {"math", "mixed"}), spec("code", {"code", "mixed"})),
                    Catch::Contains("tag 'mixed' is claimed by domains 'math' and 'code'"));
  CHECK_THROWS_WITH(build(spec("math"), spec("code", {"math"})), Catch::Contains("tag 'math'"));
  CHECK_NOTHROW(build(spec("math", {"math", "math"})));  // a repeated tag within one domain is harmless

  auto bad_label = spec("math");
  bad_label.accuracy_reward = "accuracy";
  CHECK_THROWS_WITH(build(std::move(bad_label)), Catch::Contains("accuracy_reward 'accuracy'") &&
                                                     Catch::Contains("v, second"));
  auto good_label = spec("math");
  good_label.accuracy_reward = "second";
  CHECK_NOTHROW(build(std::move(good_label)));

  auto bad_clip = spec("math");
  bad_clip.clip = std::pair{1.0, -1.0};
  CHECK_THROWS_WITH(build(std::move(bad_clip)), Catch::Contains("lo <= hi"));
  auto nan_clip = spec("math");
  nan_clip.clip = std::pair{std::nan(""), 1.0};
  CHECK_THROWS_AS(build(std::move(nan_clip)), grpo::ConfigError);
  auto bad_threshold = spec("math");
  bad_threshold.accuracy_threshold = std::nan("");
  CHECK_THROWS_AS(build(std::move(bad_threshold)), grpo::ConfigError);

  CHECK(parse_domain_normalisation("none") == DomainNormalisation::none);
  CHECK(parse_domain_normalisation("mean") == DomainNormalisation::mean);
  CHECK(parse_domain_normalisation("mean_std") == DomainNormalisation::mean_std);
  CHECK(to_string(DomainNormalisation::mean_std) == "mean_std");
  CHECK_THROWS_WITH(parse_domain_normalisation("running"),
                    Catch::Contains("'running'") && Catch::Contains("none, mean, mean_std"));
}

}  // namespace
