// SPDX-License-Identifier: Apache-2.0
#include <grpo/rewards/format_rewards.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

namespace {

using namespace grpo::rewards;
using grpo::rewards::testing::completions;
using grpo::rewards::testing::require_values;
using grpo::rewards::testing::score;

TEST_CASE("format r1_zero: think then answer, dot matches newline (DOTALL)", "[rewards][format]") {
  const auto r1 = [](const std::string& text) { return matches_format(text, FormatStyle::r1_zero); };
  CHECK(r1("<think>a</think><answer>b</answer>"));
  CHECK(r1("<think>\nmulti\nline</think> \t\n<answer>\n5\n</answer>"));
  CHECK(r1("<think></think><answer></answer>"));                      // both .*? empty
  CHECK(r1("<think>a</think><answer>b</answer>\n"));                  // Python $ before one final newline
  CHECK(r1("<think>a</think> x </think>\n<answer>b</answer>"));      // .*? grows past the first </think>
  CHECK(r1("<think>a</think><answer>b</answer> c </answer>"));        // .*? grows past the first </answer>
  CHECK_FALSE(r1(""));
  CHECK_FALSE(r1("<think>a</think><answer>b</answer>\n\n"));          // $ allows one newline, not two
  CHECK_FALSE(r1(" <think>a</think><answer>b</answer>"));             // anchored at the start
  CHECK_FALSE(r1("<think>a</think>x<answer>b</answer>"));             // only whitespace between the blocks
  CHECK_FALSE(r1("<think>a</think><answer>b</answer> trailing"));
  CHECK_FALSE(r1("<think>a<answer>b</answer>"));                      // no </think>
  CHECK_FALSE(r1("<think>a</think><answer>b"));                       // no </answer>
  CHECK_FALSE(r1("<think></think></answer>"));                        // no <answer>
}

TEST_CASE("format open_r1: newline form, MULTILINE $ accepts text on a later line", "[rewards][format]") {
  const auto strict = [](const std::string& text) { return matches_format(text, FormatStyle::open_r1); };
  CHECK(strict("<think>\na\n</think>\n<answer>\nb\n</answer>"));
  CHECK(strict("<think>\n\n</think>\n<answer>\n\n</answer>"));        // empty contents (each .*? empty)
  CHECK(strict("<think>\na\n</think>\n<answer>\nb\n</answer>\nextra"));  // open-r1's MULTILINE quirk
  CHECK_FALSE(strict("<think>\na\n</think>\n<answer>\nb\n</answer>extra"));
  CHECK_FALSE(strict("<think>a</think><answer>b</answer>"));
  CHECK_FALSE(strict("<think>\n</think>\n<answer>\nb\n</answer>"));   // the newline after <think> is used once
  CHECK_FALSE(strict("<think>\na\n</think>\n<answer>\nb</answer>"));  // no newline before </answer>
  CHECK_FALSE(strict(""));
}

TEST_CASE("FormatReward gives 1 or 0 per completion", "[rewards][format]") {
  const auto batch = completions({"<think>a</think><answer>b</answer>", "no tags", "",
                                  "<think>\na\n</think>\n<answer>\nb\n</answer>"});
  require_values(score(FormatReward(), batch), {1.0, 0.0, 0.0, 1.0});
  require_values(score(FormatReward({.style = FormatStyle::open_r1}), batch), {0.0, 0.0, 0.0, 1.0});
}

TEST_CASE("tag_count: 0.25 per tag that occurs exactly once (non-overlapping count)", "[rewards][format]") {
  CHECK(tag_count_score("<think>\nx\n</think>\n<answer>\ny\n</answer>") == 1.0f);  // 4 × 0.25
  CHECK(tag_count_score("") == 0.0f);
  CHECK(tag_count_score("<think>\nabc") == 0.25f);                                // only "<think>\n"
  CHECK(tag_count_score("<think>\n<think>\n") == 0.0f);                           // twice → no credit
  // "\n</think>\n</think>\n": the two occurrences of "\n</think>\n" share a newline; Python's str.count finds 1.
  CHECK(tag_count_score("\n</think>\n</think>\n") == 0.25f);
  // "<think>\nx\n</think>\n<answer>\ny" → 3 tags: 0.75.
  CHECK(tag_count_score("<think>\nx\n</think>\n<answer>\ny") == 0.75f);
  require_values(score(TagCountReward(), completions({"<think>\nabc", ""})), {0.25, 0.0});
}

TEST_CASE("reasoning_steps counts open-r1's pattern, the line anchor is an option", "[rewards][format]") {
  CHECK(count_reasoning_steps("Step 1: a\nStep 2: b\nStep 12: c", StepLineAnchor::every_line) == 3);
  CHECK(count_reasoning_steps("Step x: a Step 1 b", StepLineAnchor::every_line) == 0);
  CHECK(count_reasoning_steps("1. a\n2. b\n3. c", StepLineAnchor::every_line) == 3);
  CHECK(count_reasoning_steps("1. a\n2. b\n3. c", StepLineAnchor::string_start) == 1);  // open-r1: no MULTILINE
  CHECK(count_reasoning_steps("intro\n1. a", StepLineAnchor::string_start) == 0);
  CHECK(count_reasoning_steps("a1. b", StepLineAnchor::every_line) == 0);               // not at a line start
  CHECK(count_reasoning_steps("\n- a\n* b", StepLineAnchor::every_line) == 2);          // "\n-" and "\n*"
  CHECK(count_reasoning_steps("First, a. Second, b. Next, c. Finally, d.", StepLineAnchor::every_line) == 4);
  CHECK(count_reasoning_steps("first, lower case", StepLineAnchor::every_line) == 0);
  CHECK(count_reasoning_steps("", StepLineAnchor::every_line) == 0);

  // min(1, count/3): 3 steps → 1; 2 numbered lines → 2/3; string_start counts 1 → 1/3; 4 → min(1, 4/3) = 1.
  const auto batch = completions({"Step 1: a\nStep 2: b\nStep 3: c", "1. a\n2. b", "",
                                  "First, a. Second, b. Next, c. Finally, d."});
  require_values(score(ReasoningStepsReward(), batch), {1.0, 2.0 / 3.0, 0.0, 1.0});
  require_values(score(ReasoningStepsReward({.line_anchor = StepLineAnchor::string_start}), batch),
                 {1.0, 1.0 / 3.0, 0.0, 1.0});
  CHECK_THROWS_AS(ReasoningStepsReward({.target_steps = 0.0}), grpo::ConfigError);
}

TEST_CASE("format rewards on adversarial text: 1 MB, invalid UTF-8, many tags", "[rewards][format]") {
  std::string huge = "<think>";
  for (int i = 0; i < 100000; ++i) huge += "</think>\xff\xfe ";  // ~1 MB of closing tags never followed by <answer>
  huge += "</answer>";
  const auto started = std::chrono::steady_clock::now();
  CHECK_FALSE(matches_format(huge, FormatStyle::r1_zero));
  CHECK_FALSE(matches_format(huge, FormatStyle::open_r1));
  CHECK(tag_count_score(huge) == 0.0f);
  CHECK(count_reasoning_steps(huge, StepLineAnchor::every_line) == 0);
  const std::string steps(1 << 20, '\n');
  CHECK(count_reasoning_steps(steps, StepLineAnchor::every_line) == 0);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(1));
}

}  // namespace
