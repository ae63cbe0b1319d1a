// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/difficulty_schedule.hpp>

#include <catch2/catch.hpp>

#include <ostream>

using namespace grpo::train;

namespace grpo::train {
// For Catch's messages (found by argument-dependent lookup).
std::ostream& operator<<(std::ostream& out, const DifficultyRange& range) {
  return out << "[" << range.min << ", " << range.max << "]";
}
}  // namespace grpo::train

TEST_CASE("difficulty schedule: linear widening, by hand", "[train][curriculum]") {
  // [0, 3] at step 1 → [0, 9] at step 101: the upper bound grows by 6/100 per step.
  const DifficultySchedule schedule({.kind = DifficultyScheduleKind::linear,
                                     .start = {0, 3},
                                     .end = {0, 9},
                                     .start_step = 1,
                                     .end_step = 101});
  CHECK(schedule.range_at(-5) == DifficultyRange{0, 3});
  CHECK(schedule.range_at(1) == DifficultyRange{0, 3});
  CHECK(schedule.range_at(51).max == Approx(6.0));
  CHECK(schedule.range_at(26).max == Approx(4.5));
  CHECK(schedule.range_at(101) == DifficultyRange{0, 9});
  CHECK(schedule.range_at(5000) == DifficultyRange{0, 9});
  CHECK(schedule.admits(3.0, 1));
  CHECK_FALSE(schedule.admits(3.5, 1));
  CHECK(schedule.admits(3.5, 51));
  CHECK(schedule.admits(std::nullopt, 1));  // rows without a difficulty are always sampled
  CHECK(schedule.ranges() == std::vector<DifficultyRange>{{0, 3}, {0, 9}});
  // Both bounds can move (a window sliding up); a zero-length ramp switches at end_step.
  const DifficultySchedule sliding({.kind = DifficultyScheduleKind::linear, .start = {1, 2}, .end = {5, 10},
                                    .start_step = 10, .end_step = 10});
  CHECK(sliding.range_at(9) == DifficultyRange{1, 2});
  CHECK(sliding.range_at(10) == DifficultyRange{5, 10});
}

TEST_CASE("difficulty schedule: stages switch at their steps, none admits all, errors", "[train][curriculum]") {
  const DifficultySchedule staged({.kind = DifficultyScheduleKind::staged,
                                   .stages = {{10, {0, 4}}, {50, {0, 7}}, {100, {3, 10}}}});
  CHECK(staged.range_at(1) == DifficultyRange{0, 4});  // the first stage also applies before its step
  CHECK(staged.range_at(49) == DifficultyRange{0, 4});
  CHECK(staged.range_at(50) == DifficultyRange{0, 7});
  CHECK(staged.range_at(100) == DifficultyRange{3, 10});
  CHECK_FALSE(staged.admits(2.0, 100));
  const DifficultySchedule none;
  CHECK(none.admits(1e9, 1));
  CHECK(parse_difficulty_schedule("staged") == DifficultyScheduleKind::staged);
  CHECK_THROWS_WITH(parse_difficulty_schedule("cosine"), Catch::Contains("unknown difficulty schedule 'cosine'"));
  CHECK_THROWS_WITH(DifficultySchedule({.kind = DifficultyScheduleKind::staged}), Catch::Contains("at least one stage"));
  CHECK_THROWS_WITH(DifficultySchedule({.kind = DifficultyScheduleKind::staged, .stages = {{5, {0, 1}}, {5, {0, 2}}}}),
                    Catch::Contains("stage 1 starts at step 5"));
  CHECK_THROWS_WITH(DifficultySchedule({.kind = DifficultyScheduleKind::linear, .start = {3, 1}, .end = {0, 1}}),
                    Catch::Contains("start range [3, 1] is empty"));
  CHECK_THROWS_WITH(DifficultySchedule({.kind = DifficultyScheduleKind::linear, .start_step = 10, .end_step = 5}),
                    Catch::Contains("end_step 5 is before start_step 10"));
}
