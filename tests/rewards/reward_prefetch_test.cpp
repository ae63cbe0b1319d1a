// SPDX-License-Identifier: Apache-2.0
// Scoring while generating: the prefetch cache gives the values and metrics of sequential scoring (checked against
// RewardSet, TagRouter and DomainRewards scoring the same batch without it), calls the wrapped reward once per
// completion, overlaps slow scoring with the caller's work, and reports errors as sequential scoring does.
#include <grpo/rewards/code_tests_reward.hpp>
#include <grpo/rewards/domain_rewards.hpp>
#include <grpo/rewards/reward_prefetch.hpp>
#include <grpo/rewards/reward_set.hpp>
#include <grpo/rewards/tag_router.hpp>

#include "rewards/reward_testing.hpp"
#include "sandbox/sandbox_testing.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <support/skip.hpp>

namespace {

using namespace grpo::rewards;
using grpo::rewards::testing::show;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// Calls and completions a reward was given, and the texts of each call.
struct Calls {
  std::mutex mutex;
  int calls = 0;
  int completions = 0;
  std::vector<std::vector<std::string>> texts;
};

/// A batch-form reward (one call per executor range) that records its calls and values each completion with `value`.
template <typename ValueType>
RewardPtr counted(std::string name, std::shared_ptr<Calls> calls, ValueType value) {
  return make_reward(std::move(name), [calls, value](std::span<const Completion> batch) {
    std::vector<std::optional<float>> values;
    std::vector<std::string> texts;
    for (const Completion& c : batch) {
      values.push_back(value(c));
      texts.push_back(c.text);
    }
    const std::lock_guard lock(calls->mutex);
    ++calls->calls;
    calls->completions += static_cast<int>(batch.size());
    calls->texts.push_back(std::move(texts));
    return values;
  });
}

std::optional<float> length_value(const Completion& c) { return static_cast<float>(c.text.size()) / 7.0f; }

/// 1 when the text holds a digit, 0 when not, no value for an empty text.
std::optional<float> digit_value(const Completion& c) {
  if (c.text.empty()) return std::nullopt;
  return c.text.find_first_of("0123456789") != std::string::npos ? 1.0f : 0.0f;
}

/// Uses the row and the token ids: the row's "answer" found in the text (no value without a row), plus 0.01 per id.
std::optional<float> answer_value(const Completion& c) {
  if (!c.row) return std::nullopt;
  const auto answer = c.row->text("answer");
  if (!answer) return std::nullopt;
  return (c.text.find(*answer) != std::string::npos ? 1.0f : 0.0f) + 0.01f * static_cast<float>(c.token_ids.size());
}

/// P = 4 prompts × G = 4 completions, with rows, token ids, truncated flags, an empty text and duplicate texts (the
/// same completion twice in a group).
std::vector<Completion> make_batch() {
  const std::vector<std::vector<std::string>> texts = {
      {"the answer is 12", "twelve", "the answer is 12", ""},
      {"I think 7", "7 for sure, 7", "no idea at all", "the answer is 8"},
      {"x = 3.5", "3.5", "35", "the answer is 3.5 indeed"},
      {"", "42", "42", "forty-two, so 42"},
  };
  const std::vector<std::string> answers = {"12", "7", "3.5", "42"};
  std::vector<Completion> batch;
  for (std::size_t p = 0; p < texts.size(); ++p) {
    auto row = std::make_shared<const Row>(Row{{"answer", answers[p]}, {"tag", p % 2 == 0 ? "code" : "math"}});
    for (std::size_t g = 0; g < texts[p].size(); ++g) {
      Completion c;
      c.prompt = "prompt " + std::to_string(p);
      c.text = texts[p][g];
      for (const char ch : c.text) c.token_ids.push_back(static_cast<std::int64_t>(ch));
      c.truncated = g == 3;
      c.group = p;
      c.row = p == 3 && g == 0 ? nullptr : row;  // one completion without a row
      batch.push_back(std::move(c));
    }
  }
  return batch;
}

/// Chunks of the given sizes, in order (as the sampler would produce them prompt group by prompt group).
std::vector<std::vector<Completion>> chunks_of(const std::vector<Completion>& batch, std::vector<std::size_t> sizes) {
  std::vector<std::vector<Completion>> chunks;
  std::size_t begin = 0;
  for (const std::size_t size : sizes) {
    chunks.emplace_back(batch.begin() + static_cast<std::ptrdiff_t>(begin),
                        batch.begin() + static_cast<std::ptrdiff_t>(begin + size));
    begin += size;
  }
  REQUIRE(begin == batch.size());
  return chunks;
}

/// Same presence and the same bits where present.
void require_identical(const std::vector<std::optional<float>>& actual,
                       const std::vector<std::optional<float>>& expected) {
  INFO("actual " << show(actual) << ", expected " << show(expected));
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("index " << i);
    REQUIRE(actual[i].has_value() == expected[i].has_value());
    if (expected[i]) REQUIRE(std::memcmp(&*actual[i], &*expected[i], sizeof(float)) == 0);
  }
}

/// Every metric but the timing ones ("…seconds"), exactly.
void require_same_metrics(const std::map<std::string, double>& actual, const std::map<std::string, double>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (const auto& [key, value] : expected) {
    if (key.size() >= 7 && key.compare(key.size() - 7, 7, "seconds") == 0) continue;
    INFO("metric " << key);
    REQUIRE(actual.count(key) == 1);
    CHECK(actual.at(key) == value);
  }
}

void require_same_scores(const RewardSetScores& actual, const RewardSetScores& expected) {
  REQUIRE(actual.names == expected.names);
  REQUIRE(actual.weights == expected.weights);
  REQUIRE(actual.values.size() == expected.values.size());
  for (std::size_t k = 0; k < expected.values.size(); ++k) {
    INFO("reward " << expected.names[k]);
    require_identical(actual.values[k], expected.values[k]);
  }
  require_identical(actual.total, expected.total);
  require_same_metrics(actual.metrics(), expected.metrics());
}

struct Counted3 {
  std::shared_ptr<Calls> length = std::make_shared<Calls>(), digits = std::make_shared<Calls>(),
                         answer = std::make_shared<Calls>();
};

RewardSet three_rewards(const Counted3& calls, RewardSetOptions options) {
  return RewardSet({{counted("length", calls.length, length_value), 0.5},
                    {counted("digits", calls.digits, digit_value), 1.0},
                    {counted("answer", calls.answer, answer_value), 2.0, "accuracy"}},
                   options);
}

TEST_CASE("Prefetched scores equal sequential scores, values and RewardSet metrics", "[rewards][prefetch]") {
  const auto batch = make_batch();
  const auto executor = GENERATE(RewardExecutorOptions{}, RewardExecutorOptions{.num_threads = 2},
                                 RewardExecutorOptions{.num_threads = 2, .budget = milliseconds(5000)});
  const auto sizes = GENERATE(std::vector<std::size_t>{16}, std::vector<std::size_t>{4, 4, 4, 4},
                              std::vector<std::size_t>{3, 9, 1, 3});
  INFO("executor threads " << executor.num_threads << ", budget " << executor.budget.count() << " ms; "
                           << sizes.size() << " chunks");
  RewardSetOptions options{.executor = executor, .truncated_coef = 0.5};

  const Counted3 sequential_calls;
  const RewardSet sequential = three_rewards(sequential_calls, options);
  const RewardSetScores expected = sequential.score(batch);

  const Counted3 calls;
  const RewardSet original = three_rewards(calls, options);
  PrefetchWrapped wrapped = wrap_for_prefetch(original, {"accuracy", "digits"});
  REQUIRE(wrapped.prefetched.size() == 2);
  CHECK(wrapped.prefetched[0]->name() == "digits");  // entry order, the reward's own name
  CHECK(wrapped.prefetched[1]->name() == "answer");
  CHECK(wrapped.prefetcher_options.threads == std::max<std::size_t>(1, executor.num_threads));
  CHECK(wrapped.prefetcher_options.budget == executor.budget);
  CHECK(wrapped.rewards.entries()[2].label == "accuracy");
  {
    RewardPrefetcher prefetcher(wrapped.prefetched, wrapped.prefetcher_options);
    for (auto& chunk : chunks_of(batch, sizes)) prefetcher.submit(std::move(chunk));
    prefetcher.wait();
    CHECK(prefetcher.pending() == 0);
    CHECK(prefetcher.not_stored() == 0);
  }
  // Every completion was scored once by each wrapped reward, in the prefetches; none again in score().
  CHECK(calls.digits->completions == 16);
  CHECK(calls.answer->completions == 16);
  const int digit_calls = calls.digits->calls;
  const RewardSetScores actual = wrapped.rewards.score(batch);
  require_same_scores(actual, expected);
  CHECK(calls.digits->calls == digit_calls);
  CHECK(calls.digits->completions == 16);
  CHECK(calls.answer->completions == 16);
  CHECK(calls.length->completions == 16);  // the unwrapped entry scored in score() as usual
  for (const auto& reward : wrapped.prefetched) {
    const PrefetchStats stats = reward->stats();
    CHECK(stats.hits == 16);
    CHECK(stats.misses == 0);
    CHECK(stats.stored == reward->size());
  }
  // Identical completions share one entry: "42" twice in group 3 (same row, ids, flags).
  CHECK(wrapped.prefetched[0]->size() == 14);  // 16 minus the "the answer is 12" and "42" duplicates
}

TEST_CASE("A cache hit does not call the wrapped reward, a miss is scored in score() in one call, in batch order",
          "[rewards][prefetch]") {
  const auto batch = make_batch();
  auto calls = std::make_shared<Calls>();
  auto reward = std::make_shared<PrefetchedReward>(counted("answer", calls, answer_value));
  CHECK(reward->name() == "answer");
  CHECK(reward->scope() == RewardScope::completion);

  // Prefetch every other group: groups 0 and 2.
  std::vector<Completion> prefetched;
  for (const Completion& c : batch) {
    if (c.group % 2 == 0) prefetched.push_back(c);
  }
  {
    RewardPrefetcher prefetcher({reward});
    prefetcher.submit(prefetched);
    prefetcher.wait();
  }
  REQUIRE(calls->calls == 1);
  REQUIRE(calls->completions == 8);

  const auto expected = testing::score(*counted("plain", std::make_shared<Calls>(), answer_value), batch);
  const auto values = testing::score(*reward, batch);
  require_identical(values, expected);
  // One more call, with exactly the 8 misses (groups 1 and 3), in batch order.
  REQUIRE(calls->calls == 2);
  std::vector<std::string> missed;
  for (const Completion& c : batch) {
    if (c.group % 2 == 1) missed.push_back(c.text);
  }
  CHECK(calls->texts.back() == missed);
  CHECK(reward->stats().hits == 8);
  CHECK(reward->stats().misses == 8);
  CHECK(reward->size() == 7);  // the 8 prefetched less the duplicate "the answer is 12"; misses are not cached

  // All hits: no call at all.
  const auto again = testing::score(*reward, prefetched);
  CHECK(calls->calls == 2);
  require_identical(again, testing::score(*counted("plain", std::make_shared<Calls>(), answer_value), prefetched));
}

TEST_CASE("The cache key: prompt, text, token ids, truncated and row, not the group", "[rewards][prefetch]") {
  PrefetchedReward reward(make_reward("len", [](const Completion& c) { return static_cast<float>(c.text.size()); }));
  Completion c;
  c.prompt = "p";
  c.text = "abc";
  c.token_ids = {1, 2, 3};
  c.group = 5;
  c.row = std::make_shared<const Row>(Row{{"answer", std::string("3")}});
  const std::vector<std::optional<float>> value{99.0f};  // a marker no real scoring gives
  reward.store(std::span<const Completion>(&c, 1), value);

  CHECK(reward.cached(c) == std::optional<std::optional<float>>(99.0f));
  auto other_group = c;
  other_group.group = 0;
  CHECK(reward.cached(other_group).has_value());
  auto equal_row = c;
  equal_row.row = std::make_shared<const Row>(Row{{"answer", std::string("3")}});
  CHECK(reward.cached(equal_row).has_value());  // another pointer to an equal row

  auto different = [&](auto change) {
    auto copy = c;
    change(copy);
    return !reward.cached(copy).has_value();
  };
  CHECK(different([](Completion& x) { x.prompt = "q"; }));
  CHECK(different([](Completion& x) { x.text = "abd"; }));
  CHECK(different([](Completion& x) { x.token_ids = {1, 2, 4}; }));
  CHECK(different([](Completion& x) { x.token_ids.clear(); }));
  CHECK(different([](Completion& x) { x.truncated = true; }));
  CHECK(different([](Completion& x) { x.row = nullptr; }));
  CHECK(different([](Completion& x) { x.row = std::make_shared<const Row>(Row{{"answer", std::string("4")}}); }));

  // "No value" is cached as such.
  auto none = c;
  none.text = "none";
  const std::vector<std::optional<float>> no_value{std::nullopt};
  reward.store(std::span<const Completion>(&none, 1), no_value);
  CHECK(reward.cached(none) == std::optional<std::optional<float>>(std::optional<float>()));
  const std::vector<Completion> batch{other_group, none};
  require_identical(testing::score(reward, batch), {99.0f, std::nullopt});

  // The first value of a key stays.
  const std::vector<std::optional<float>> later{1.0f};
  reward.store(std::span<const Completion>(&c, 1), later);
  CHECK(reward.cached(c) == std::optional<std::optional<float>>(99.0f));
  CHECK_THROWS_AS(reward.store(batch, later), grpo::Error);
}

TEST_CASE("submit() returns at once and the scoring overlaps the caller's own work", "[rewards][prefetch]") {
  // 6 completions × 100 ms of (sleeping) reward on one background thread, while the caller works 600 ms: sequential
  // would take the sum, 1.2 s; overlapped takes about the max, 0.6 s. Bounds leave room for two loaded cores.
  auto calls = std::make_shared<Calls>();
  auto reward = std::make_shared<PrefetchedReward>(counted("slow", calls, [](const Completion& c) {
    std::this_thread::sleep_for(milliseconds(100));
    return length_value(c);
  }));
  std::vector<Completion> batch;
  for (int i = 0; i < 6; ++i) batch.push_back(testing::completion("completion " + std::to_string(i)));

  RewardPrefetcher prefetcher({reward}, {.threads = 1});
  const auto start = Clock::now();
  for (const auto& chunk : chunks_of(batch, {2, 2, 2})) prefetcher.submit(chunk);
  const double submitted = seconds_since(start);
  CHECK(submitted < 0.1);
  CHECK(prefetcher.pending() >= 1);
  std::this_thread::sleep_for(milliseconds(600));  // the caller's work: sampling the next chunks
  prefetcher.wait();
  const double total = seconds_since(start);
  INFO("submit " << submitted << " s, total " << total << " s");
  CHECK(total >= 0.6);
  CHECK(total < 1.0);  // sequential: 1.2 s
  CHECK(calls->completions == 6);

  const auto before_score = Clock::now();
  const auto values = testing::score(*reward, batch);
  CHECK(seconds_since(before_score) < 0.05);  // all from the cache
  CHECK(calls->completions == 6);
  require_identical(values, testing::score(*make_reward("len", length_value), batch));
}

TEST_CASE("Errors: as sequential scoring reports them", "[rewards][prefetch]") {
  const auto batch = make_batch();
  const auto throwing = [](const Completion& c) -> std::optional<float> {
    if (c.text == "no idea at all") throw std::runtime_error("boom: cannot score");
    return length_value(c);
  };

  SECTION("ErrorPolicy::no_value: wait() does not throw; frac_error and values as sequential") {
    const auto executor = GENERATE(RewardExecutorOptions{}, RewardExecutorOptions{.num_threads = 2},
                                   RewardExecutorOptions{.num_threads = 2, .budget = milliseconds(5000)});
    INFO("executor threads " << executor.num_threads << ", budget " << executor.budget.count());
    const RewardSet sequential({{make_reward("throws", throwing)}, {make_reward("digits", digit_value)}},
                               {.executor = executor});
    const RewardSetScores expected = sequential.score(batch);
    REQUIRE(expected.reward_metrics[0].frac_error > 0.0);

    auto calls = std::make_shared<Calls>();
    const RewardSet original({{counted("throws", calls, throwing)}, {make_reward("digits", digit_value)}},
                             {.executor = executor});
    auto wrapped = wrap_for_prefetch(original, {"throws"});
    RewardPrefetcher prefetcher(wrapped.prefetched, wrapped.prefetcher_options);
    for (const auto& chunk : chunks_of(batch, {4, 4, 4, 4})) prefetcher.submit(chunk);
    CHECK_NOTHROW(prefetcher.wait());
    CHECK(prefetcher.not_stored() > 0);  // the failing call's completions, to be scored again
    require_same_scores(wrapped.rewards.score(batch), expected);
  }

  SECTION("ErrorPolicy::rethrow: wait() rethrows the reward's exception, once") {
    auto reward = std::make_shared<PrefetchedReward>(make_reward("throws", throwing));
    RewardPrefetcher prefetcher({reward}, {.threads = 1, .on_error = ErrorPolicy::rethrow});
    for (const auto& chunk : chunks_of(batch, {4, 4, 4, 4})) prefetcher.submit(chunk);
    CHECK_THROWS_WITH(prefetcher.wait(), Catch::Contains("boom: cannot score"));
    CHECK_NOTHROW(prefetcher.wait());
    // The other chunks were cached; the failing one was not, and sequential rethrowing scoring throws on it again.
    CHECK(reward->size() == 10);  // groups 0, 2 and 3 (12 completions) less two duplicates
    const RewardSet wrapped({{reward}}, {.executor = {.on_error = ErrorPolicy::rethrow}});
    CHECK_THROWS_WITH(wrapped.score(batch), Catch::Contains("boom"));
  }

  SECTION("A reward breaking its contract is a grpo::Error from wait(), whatever the policy") {
    auto reward = std::make_shared<PrefetchedReward>(
        make_reward("short", [](std::span<const Completion>) { return std::vector<std::optional<float>>{}; }));
    RewardPrefetcher prefetcher({reward});
    prefetcher.submit(batch);
    CHECK_THROWS_AS(prefetcher.wait(), grpo::Error);
    CHECK(reward->size() == 0);
    CHECK_THROWS_WITH(testing::score(*reward, batch), Catch::Contains("returned 0 values for a batch of 16"));
  }

  SECTION("A throwing prefetch_if is reported by wait()") {
    auto reward = std::make_shared<PrefetchedReward>(
        make_reward("len", length_value),
        PrefetchedRewardOptions{.prefetch_if = [](const Completion&) -> bool { throw std::logic_error("bad filter"); }});
    RewardPrefetcher prefetcher({reward});
    prefetcher.submit(batch);
    CHECK_THROWS_WITH(prefetcher.wait(), Catch::Contains("bad filter"));
  }
}

TEST_CASE("A prefetch over its budget is not cached: the step's scoring applies the fallback and counts it",
          "[rewards][prefetch]") {
  // "slow" sleeps 600 ms (never checking its deadline) against a 200 ms budget; the rest are instant.
  const auto sleepy = [](const Completion& c) -> std::optional<float> {
    if (c.text == "slow") std::this_thread::sleep_for(milliseconds(600));
    return static_cast<float>(c.text.size());
  };
  const auto batch = testing::completions({"a", "slow", "ccc", "dd"});
  const RewardSetOptions options{.executor = {.num_threads = 1, .budget = milliseconds(200),
                                              .fallback = BudgetFallback::zero}};
  const RewardSet sequential({{make_reward("sleepy", sleepy)}}, options);
  const RewardSetScores expected = sequential.score(batch);
  REQUIRE(expected.reward_metrics[0].frac_over_budget == 0.25);

  auto wrapped = wrap_for_prefetch(RewardSet({{make_reward("sleepy", sleepy)}}, options), {"sleepy"});
  RewardPrefetcher prefetcher(wrapped.prefetched, wrapped.prefetcher_options);
  prefetcher.submit(batch);
  prefetcher.wait();
  CHECK(prefetcher.not_stored() == 1);
  CHECK(wrapped.prefetched[0]->size() == 3);
  CHECK_FALSE(wrapped.prefetched[0]->cached(batch[1]).has_value());
  require_same_scores(wrapped.rewards.score(batch), expected);
}

TEST_CASE("clear() empties the caches, max_entries drops the oldest values", "[rewards][prefetch]") {
  const auto batch = make_batch();
  auto calls = std::make_shared<Calls>();
  auto reward = std::make_shared<PrefetchedReward>(counted("len", calls, length_value));
  RewardPrefetcher prefetcher({reward});
  prefetcher.submit(batch);
  prefetcher.clear();  // waits for the chunk, then drops it
  CHECK(calls->completions == 16);
  CHECK(reward->size() == 0);
  CHECK(reward->stats().stored == 0);
  testing::score(*reward, batch);
  CHECK(calls->completions == 32);  // scored again
  CHECK(reward->stats().misses == 16);

  PrefetchedReward bounded(make_reward("len", length_value), {.max_entries = 2});
  const auto texts = testing::completions({"one", "two", "three"});
  const std::vector<std::optional<float>> values{1.0f, 2.0f, 3.0f};
  bounded.store(texts, values);
  CHECK(bounded.size() == 2);
  CHECK(bounded.stats().evicted == 1);
  CHECK_FALSE(bounded.cached(texts[0]).has_value());
  CHECK(bounded.cached(texts[2]) == std::optional<std::optional<float>>(3.0f));
  bounded.clear();
  CHECK(bounded.size() == 0);
}

TEST_CASE("Prefetch set-up errors", "[rewards][prefetch]") {
  const auto batch_scoped = make_reward(
      "kimi_length", [](std::span<const Completion> b) { return std::vector<std::optional<float>>(b.size(), 0.0f); },
      RewardScope::batch);
  CHECK_THROWS_AS(PrefetchedReward(batch_scoped), grpo::ConfigError);
  CHECK_THROWS_WITH(PrefetchedReward(batch_scoped), Catch::Contains("kimi_length") && Catch::Contains("batch-scoped"));
  CHECK_THROWS_AS(PrefetchedReward(nullptr), grpo::ConfigError);

  const RewardSet set({{make_reward("len", length_value)}, {batch_scoped}});
  CHECK_THROWS_AS(wrap_for_prefetch(set, {"kimi_length"}), grpo::ConfigError);
  CHECK_THROWS_WITH(wrap_for_prefetch(set, {"judge"}), Catch::Contains("no reward labelled 'judge'"));
  CHECK_NOTHROW(wrap_for_prefetch(set, {}));  // nothing wrapped: the same set

  auto reward = std::make_shared<PrefetchedReward>(make_reward("len", length_value));
  CHECK_THROWS_AS(RewardPrefetcher({reward}, {.threads = 0}), grpo::ConfigError);
  CHECK_THROWS_AS(RewardPrefetcher({nullptr}), grpo::ConfigError);
  CHECK_THROWS_AS(RewardPrefetcher({reward}, {.budget = milliseconds(-1)}), grpo::ConfigError);
}

TEST_CASE("TagRouter and DomainRewards get the same scores from a prefetched route", "[rewards][prefetch]") {
  const auto batch = make_batch();  // groups 0 and 2 are tagged "code", 1 and 3 "math"; one completion has no row
  const auto is_code = [](const Completion& c) { return c.row && c.row->text("tag") == "code"; };

  SECTION("TagRouter") {
    const auto math = make_reward("math", digit_value);
    const TagRouter sequential("domain", {{"code", make_reward("code", answer_value)}, {"math", math}});
    const auto expected = testing::score(sequential, batch);

    auto calls = std::make_shared<Calls>();
    auto code = std::make_shared<PrefetchedReward>(counted("code", calls, answer_value),
                                                   PrefetchedRewardOptions{.prefetch_if = is_code});
    const TagRouter router("domain", {{"code", code}, {"math", math}});
    RewardPrefetcher prefetcher({code});
    for (const auto& chunk : chunks_of(batch, {8, 8})) prefetcher.submit(chunk);
    prefetcher.wait();
    CHECK(calls->completions == 8);  // only the code rows were prefetched
    require_identical(testing::score(router, batch), expected);
    CHECK(calls->completions == 8);
  }

  SECTION("DomainRewards") {
    std::vector<Completion> routed;  // DomainRewards needs a tag on every row
    for (const Completion& c : batch) {
      if (c.row) routed.push_back(c);
    }
    const auto domains = [](RewardSet code_set) {
      std::vector<DomainSpec> specs;
      specs.push_back({.name = "code",
                       .rewards = std::move(code_set),
                       .normalisation = DomainNormalisation::mean_std});
      specs.push_back({.name = "math", .rewards = RewardSet({{make_reward("digits", digit_value)}})});
      return DomainRewards(std::move(specs));
    };
    const auto code_set = [] {
      return RewardSet({{make_reward("answer", answer_value)}, {make_reward("length", length_value), 0.1}},
                       {.executor = {.num_threads = 2}});
    };
    const DomainScores expected = domains(code_set()).score(routed);

    auto wrapped = wrap_for_prefetch(code_set(), {"answer", "length"}, {.prefetch_if = is_code});
    RewardPrefetcher prefetcher(wrapped.prefetched, wrapped.prefetcher_options);
    for (const auto& chunk : chunks_of(routed, {3, 4, 8})) prefetcher.submit(chunk);
    prefetcher.wait();
    const DomainRewards prefetched = domains(std::move(wrapped.rewards));
    const DomainScores actual = prefetched.score(routed);
    require_identical(actual.total, expected.total);
    require_same_metrics(actual.metrics(), expected.metrics());
    for (const auto& reward : wrapped.prefetched) {
      CHECK(reward->stats().hits == 8);  // the code domain's completions, all from the cache
      CHECK(reward->stats().misses == 0);
    }
  }
}

TEST_CASE("The code_tests reward in the sandbox: prefetched values equal sequential ones",
          "[rewards][prefetch][code]") {
  CodeTestsOptions options;
  options.test_time = milliseconds(2000);
  options.sandbox = grpo::sandbox::testing::fast_options();
  RewardPtr code;
  try {
    code = std::make_shared<const CodeTestsReward>(options);
  } catch (const grpo::sandbox::SandboxError& error) {
    GRPO_SKIP(std::string("the sandbox cannot run here: ") + error.what());
  }
  const auto fenced = [](const std::string& body) { return "My solution:\n```python\n" + body + "```\n"; };
  // Three stdin/stdout tests of "print the sum of two integers".
  const auto row = std::make_shared<const Row>(Row::from_json(
      R"({"case_type": "input", "test_case_function": "", "test_cases": "[{\"input\": \"1 2\\n\", \"expected_output\": \"3\\n\"}, {\"input\": \"10 20\\n\", \"expected_output\": \"30\"}, {\"input\": \"123456 7890\\n\", \"expected_output\": \"131346\\n\"}]"})"));
  const std::vector<std::string> programs = {
      fenced("a, b = map(int, input().split())\nprint(a + b)\n"),                    // 1
      fenced("a, b = map(int, input().split())\nprint(a - b)\n"),                    // 0
      fenced("a, b = map(int, input().split())\nprint(a + b if a < 100 else 0)\n"),  // 2/3
      fenced("raise RuntimeError('boom')\n"),                                        // 0
      "no code at all",                                                              // 0
      fenced("import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"),       // 1
  };
  std::vector<Completion> batch;
  for (std::size_t p = 0; p < 2; ++p) {
    for (std::size_t g = 0; g < programs.size(); ++g) {
      Completion c = testing::completion(programs[(g + p) % programs.size()], row);
      c.prompt = "prompt " + std::to_string(p);
      c.group = p;
      batch.push_back(std::move(c));
    }
  }
  const RewardSetOptions set_options{.executor = {.num_threads = 2}};
  const RewardSet sequential({{code}, {make_reward("length", length_value), 0.01}}, set_options);
  const RewardSetScores expected = sequential.score(batch);
  CHECK(expected.reward_metrics[0].mean > 0.0);
  CHECK(expected.reward_metrics[0].mean < 1.0);

  auto wrapped = wrap_for_prefetch(sequential, {"code_tests"});
  RewardPrefetcher prefetcher(wrapped.prefetched, wrapped.prefetcher_options);
  for (const auto& chunk : chunks_of(batch, {6, 6})) prefetcher.submit(chunk);
  prefetcher.wait();
  const RewardSetScores actual = wrapped.rewards.score(batch);
  require_same_scores(actual, expected);
  CHECK(wrapped.prefetched[0]->stats().hits == 12);
  CHECK(wrapped.prefetched[0]->stats().misses == 0);
  CHECK(actual.metrics().at("rewards/code_tests/seconds") < expected.metrics().at("rewards/code_tests/seconds"));
}

}  // namespace
