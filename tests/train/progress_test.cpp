// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/progress.hpp>

#include <catch2/catch.hpp>

#include <cmath>

using grpo::train::format_progress_line;

TEST_CASE("format_progress_line: bar, percent, elapsed<ETA and scalars", "[train][progress]") {
  // 25 of 100 steps in 50 s: 2 s per step, 75 steps left → ETA 150 s = 02:30; 25% of 20 characters = 5 '#'.
  CHECK(format_progress_line(25, 100, 50.0, {{"loss", 0.123456}, {"reward", 0.5}}) ==
        "step 25/100 [#####...............]  25% 00:50<02:30 | loss 0.1235 | reward 0.5");
  // Before the first step there is no ETA; the bar is empty.
  CHECK(format_progress_line(0, 10, 0.0, {}, {.bar_width = 4}) == "step 0/10 [....]   0% 00:00<--:--");
  // 1 of 3 steps in 3700 s: ETA 7400 s = 2 h 3 min 20 s; 1/3 of 6 = 2 '#'; 33%.
  CHECK(format_progress_line(1, 3, 3700.0, {{"kl", std::nan("")}}, {.bar_width = 6, .precision = 2}) ==
        "step 1/3 [##....]  33% 1:01:40<2:03:20 | kl nan");
  // The end: a full bar and no time left.
  CHECK(format_progress_line(8, 8, 61.0, {}, {.bar_width = 3}) == "step 8/8 [###] 100% 01:01<00:00");
}

TEST_CASE("format_progress_line rejects impossible progress", "[train][progress]") {
  CHECK_THROWS_AS(format_progress_line(0, 0, 0.0, {}), grpo::ConfigError);
  CHECK_THROWS_AS(format_progress_line(11, 10, 0.0, {}), grpo::ConfigError);
  CHECK_THROWS_AS(format_progress_line(-1, 10, 0.0, {}), grpo::ConfigError);
  CHECK_THROWS_AS(format_progress_line(1, 10, -1.0, {}), grpo::ConfigError);
  CHECK_THROWS_AS(format_progress_line(1, 10, 1.0, {}, {.bar_width = 0}), grpo::ConfigError);
}
