// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/context_schedule.hpp>

#include <catch2/catch.hpp>

using namespace grpo::train;

namespace {

// DeepScaleR's recipe: 8K with G 8, 16K with G 16 from step 500, then 24K once the truncated ratio stays >= 0.1 for
// 3 steps.
std::vector<ContextStage> deepscaler() {
  return {{.max_new_tokens = 8192, .group_size = 8},
          {.max_new_tokens = 16384, .group_size = 16, .at_step = 500},
          {.max_new_tokens = 24576, .learning_rate = 5e-7, .mask_truncated = true, .overlong_buffer = 4096,
           .metric = "completions/clipped_ratio", .op = ">=", .threshold = 0.1, .patience = 3}};
}

}  // namespace

TEST_CASE("context schedule switches by step and by metric with patience", "[train][context]") {
  ContextSchedule schedule(deepscaler());
  for (std::int64_t step = 1; step < 500; ++step) {
    CHECK_FALSE(schedule.begin_step(step).has_value());
    // The metric stage is not looked at while stage 0 runs.
    CHECK_FALSE(schedule.end_step(step, {{"completions/clipped_ratio", 0.5}}).has_value());
  }
  CHECK(schedule.current().max_new_tokens == 8192);
  const auto at_500 = schedule.begin_step(500);
  REQUIRE(at_500.has_value());
  CHECK(at_500->from == 0);
  CHECK(at_500->to == 1);
  CHECK(at_500->step == 500);
  CHECK(at_500->reason == "at step 500");
  CHECK(schedule.current().group_size == 16);

  CHECK_FALSE(schedule.end_step(500, {{"completions/clipped_ratio", 0.2}}).has_value());  // 1 of 3
  CHECK_FALSE(schedule.end_step(501, {{"completions/clipped_ratio", 0.05}}).has_value()); // streak broken
  CHECK_FALSE(schedule.end_step(502, {{"completions/clipped_ratio", 0.1}}).has_value());  // 1
  CHECK_FALSE(schedule.end_step(503, {{"other", 1.0}}).has_value());                      // missing: broken
  CHECK_FALSE(schedule.end_step(504, {{"completions/clipped_ratio", 0.1}}).has_value());  // 1
  CHECK_FALSE(schedule.end_step(505, {{"completions/clipped_ratio", 0.3}}).has_value());  // 2
  const auto by_metric = schedule.end_step(506, {{"completions/clipped_ratio", 0.25}});   // 3: switch at 507
  REQUIRE(by_metric.has_value());
  CHECK(by_metric->step == 507);
  CHECK(by_metric->reason == "completions/clipped_ratio = 0.25 >= 0.1 for 3 steps");
  CHECK(schedule.current().max_new_tokens == 24576);
  CHECK(schedule.current().mask_truncated);
  CHECK_FALSE(schedule.end_step(507, {{"completions/clipped_ratio", 1.0}}).has_value());  // the last stage stays
  CHECK_FALSE(schedule.begin_step(100000).has_value());
}

TEST_CASE("context schedule: a late first step passes every step-triggered stage it has reached", "[train][context]") {
  ContextSchedule schedule({{.max_new_tokens = 8}, {.max_new_tokens = 16, .at_step = 3},
                            {.max_new_tokens = 24, .at_step = 5}, {.max_new_tokens = 32, .at_step = 9}});
  const auto change = schedule.begin_step(7);  // e.g. resumed at step 7 from a checkpoint without schedule state
  REQUIRE(change.has_value());
  CHECK(change->from == 0);
  CHECK(change->to == 2);
  CHECK(change->reason == "at step 5");
  CHECK(schedule.current().max_new_tokens == 24);
  CHECK_FALSE(schedule.begin_step(8).has_value());
  // A metric-triggered stage in between stops the walk: stages run in order.
  ContextSchedule gated({{.max_new_tokens = 8}, {.max_new_tokens = 16, .metric = "reward", .threshold = 1.0},
                         {.max_new_tokens = 24, .at_step = 2}});
  CHECK_FALSE(gated.begin_step(10).has_value());
  CHECK(gated.index() == 0);
}

TEST_CASE("context schedule resumes mid-stage and mid-streak exactly", "[train][context]") {
  ContextSchedule straight(deepscaler());
  straight.begin_step(500);
  straight.end_step(500, {{"completions/clipped_ratio", 0.2}});
  straight.end_step(501, {{"completions/clipped_ratio", 0.2}});
  const auto saved = straight.state_values();
  CHECK(saved == std::map<std::string, double>{{"context/stage", 1}, {"context/streak", 2}});
  ContextSchedule resumed(deepscaler());
  resumed.restore(saved);
  CHECK(resumed.index() == 1);
  // One more step over the threshold switches both.
  CHECK(straight.end_step(502, {{"completions/clipped_ratio", 0.2}}).has_value());
  CHECK(resumed.end_step(502, {{"completions/clipped_ratio", 0.2}}).has_value());
  CHECK(resumed.state_values() == straight.state_values());
  CHECK_THROWS_WITH(resumed.restore({{"context/stage", 7}, {"context/streak", 0}}), Catch::Contains("out of range"));
  CHECK_THROWS_AS(resumed.restore({}), grpo::ConfigError);
}

TEST_CASE("context schedule validation names the stage and field", "[train][context]") {
  CHECK_THROWS_WITH(ContextSchedule(std::vector<ContextStage>{}), Catch::Contains("no stages"));
  CHECK_THROWS_WITH(ContextSchedule(std::vector<ContextStage>{{.max_new_tokens = 0}}), Catch::Contains("stage 0: max_new_tokens must be > 0"));
  CHECK_THROWS_WITH(ContextSchedule(std::vector<ContextStage>{{.max_new_tokens = 8}, {.max_new_tokens = 16}}),
                    Catch::Contains("stage 1: give either at_step or a metric condition to start it, not neither"));
  CHECK_THROWS_WITH(ContextSchedule(std::vector<ContextStage>{{.max_new_tokens = 8}, {.max_new_tokens = 16, .at_step = 5, .metric = "x"}}),
                    Catch::Contains("not both"));
  CHECK_THROWS_WITH(ContextSchedule(std::vector<ContextStage>{{.max_new_tokens = 8}, {.max_new_tokens = 16, .metric = "x", .op = "=="}}),
                    Catch::Contains("op must be"));
  CHECK_THROWS_WITH(ContextSchedule(std::vector<ContextStage>{{.max_new_tokens = 8, .overlong_buffer = 9}}), Catch::Contains("overlong_buffer"));
  CHECK_THROWS_WITH(ContextSchedule(std::vector<ContextStage>{{.max_new_tokens = 8},
                                     {.max_new_tokens = 16, .at_step = 10},
                                     {.max_new_tokens = 32, .at_step = 10}}),
                    Catch::Contains("stage 2: at_step 10 is not after the previous stage's step 10"));
  CHECK_THROWS_WITH(ContextSchedule(std::vector<ContextStage>{{.max_new_tokens = 8, .group_size = 1}}), Catch::Contains("group_size"));
}
