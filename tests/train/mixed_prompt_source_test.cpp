// SPDX-License-Identifier: Apache-2.0
// MixedPromptSource on ROLL rows with the real Qwen tokenizer: each row's domain is decided by its tag at load and
// travels with the problem, the mix is the domains' shares, the curriculum and the pass-rate filter decide what is
// drawn, and a source restored from saved state draws exactly what the original draws next.
#include <grpo/train/mixed_prompt_source.hpp>
#include <text/reference_fixture.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <support/skip.hpp>

namespace fs = std::filesystem;
using namespace grpo;

namespace {

fs::path write_rows() {
  const auto dir = fs::temp_directory_path() / ("grpo_mixed_source_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream out(dir / "rows.jsonl");
  for (int i = 0; i < 12; ++i) {  // math rows of difficulty 1..4
    out << fmt::format(R"({{"id": "m{}", "tag": "math", "difficulty": {}, "messages": [{{"role": "user", "content": "What is {} + {}?"}}], "ground_truth": "{}"}})",
                       i, 1 + i % 4, i, i, 2 * i)
        << "\n";
  }
  for (int i = 0; i < 6; ++i) {
    out << fmt::format(R"({{"id": "g{}", "tag": "essay", "messages": [{{"role": "user", "content": "Explain idea {}."}}], "evaluation_criteria": ["mentions {}"]}})",
                       i, i, i)
        << "\n";
  }
  return dir / "rows.jsonl";
}

train::MixedPromptSourceOptions options(const fs::path& rows) {
  train::MixedPromptSourceOptions o;
  o.domains = {{.name = "math", .kind = io::DomainKind::math, .tags = {"math"}, .probability = 3.0},
               {.name = "general", .kind = io::DomainKind::general, .tags = {"essay"}, .probability = 1.0}};
  o.files = {rows};
  o.held_out = 1;
  o.seed = 3;
  o.curriculum.kind = train::DifficultyScheduleKind::staged;
  o.curriculum.stages = {{1, {1, 2}}, {3, {1, 4}}};  // easy math rows first; general rows have no difficulty
  o.steps = 6;
  o.filter = train::PassRateFilterOptions{.window = 1, .retire_unsolved = true, .retire_solved = false};
  return o;
}

}  // namespace

TEST_CASE("MixedPromptSource: domains by tag, shares, curriculum, filter, and a restored source draws the same",
          "[train][mixed_prompt_source]") {
  const auto dir = text::testing::find_tokenizer_dir("qwen3");
  if (!dir) GRPO_SKIP(text::testing::missing_tokenizer("qwen3"));
  const auto rows = write_rows();
  const auto tokenizer = text::Tokenizer::from_pretrained(*dir);
  train::MixedPromptSource source(options(rows), tokenizer, {151645});
  CHECK(source.domain_names() == std::vector<std::string>{"math", "general"});
  CHECK(source.held_out().size() == 2);  // one per domain

  // Step 1: 8 prompts at shares 3:1 are exactly 6 math and 2 general (P·p is whole); each problem's domain is its
  // row's tag's, and math rows are within the curriculum's [1, 2].
  auto batch = source.train_batch(1, 8);
  std::map<std::size_t, int> counts;
  for (const auto& p : batch) {
    ++counts[p.domain];
    const auto tag = p.row->text("tag").value();
    CHECK(p.domain == (tag == "math" ? 0u : 1u));
    CHECK(p.id.starts_with(p.domain == 0 ? "math/m" : "general/g"));
    if (p.domain == 0) CHECK(std::stod(p.row->text("difficulty").value()) <= 2.0);
    CHECK_THAT(p.prompt_text, Catch::Contains("<|im_start|>user") && Catch::EndsWith("<|im_start|>assistant\n"));
  }
  CHECK(counts[0] == 6);
  CHECK(counts[1] == 2);

  // All-wrong groups retire their prompts (window 1); NaN (nothing could be judged) retires nothing.
  std::vector<double> rates;
  std::set<std::string> retired;
  for (const auto& p : batch) {
    rates.push_back(p.id == batch[0].id ? NAN : 0.0);
    if (p.id != batch[0].id) retired.insert(p.id);
  }
  source.observe(batch, rates, 1);
  std::map<std::string, double> metrics;
  for (const auto& [name, value] : source.metrics(1)) metrics[name] = value;
  CHECK(metrics.at("curriculum/difficulty_max") == 2.0);
  CHECK(metrics.at("curriculum/retired_prompts") == static_cast<double>(retired.size()));

  // Save after step 1, restore into a fresh source: both draw the same prompts for steps 2..4.
  train::TrainerState state;
  state.step = 1;
  source.save_state(state);
  train::MixedPromptSource restored(options(rows), tokenizer, {151645});
  restored.load_state(state);
  for (std::int64_t step = 2; step <= 4; ++step) {
    const auto a = source.train_batch(step, 8), b = restored.train_batch(step, 8);
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].id == b[i].id);
      CHECK(a[i].prompt_ids == b[i].prompt_ids);
    }
  }
  CHECK(source.metrics(4) == restored.metrics(4));

  // A row whose tag no domain claims: the file, line and tag.
  auto unclaimed = options(rows);
  unclaimed.domains.pop_back();
  CHECK_THROWS_WITH(train::MixedPromptSource(unclaimed, tokenizer, {151645}),
                    Catch::Contains("rows.jsonl:13") && Catch::Contains("essay"));
  // A state without a domain's position names it.
  train::TrainerState empty;
  CHECK_THROWS_WITH(restored.load_state(empty), Catch::Contains("no position for domain 'math'"));
}

TEST_CASE("MixedPromptSource: a validation file gives the held-out problems, ROLL prompt rows stay raw, the domain "
          "field wins",
          "[train][mixed_prompt_source]") {
  const auto dir = text::testing::find_tokenizer_dir("qwen3");
  if (!dir) GRPO_SKIP(text::testing::missing_tokenizer("qwen3"));
  const auto rows = write_rows();
  const auto validation = rows.parent_path() / "validation.jsonl";
  {
    std::ofstream out(validation);
    out << R"({"id": "v1", "tag": "aime", "domain": "math", "prompt": "RAW 1 + 1 =", "ground_truth": "2"})" << "\n"
        << R"({"id": "v2", "tag": "essay", "messages": [{"role": "user", "content": "Why?"}], "ground_truth": "Because."})"
        << "\n";
  }
  auto o = options(rows);
  o.validation_files = {validation};
  const auto tokenizer = text::Tokenizer::from_pretrained(*dir);
  train::MixedPromptSource source(o, tokenizer, {151645});
  // Exactly the validation rows, in file order, each in its domain; every training row trains (held_out unused).
  REQUIRE(source.held_out().size() == 2);
  CHECK(source.held_out()[0].domain == 0);  // its `domain` field names math (its tag names nothing)
  CHECK(source.held_out()[0].prompt_text == "RAW 1 + 1 =");  // a prompt row is used as it is
  CHECK(source.held_out()[1].domain == 1);
  CHECK_THAT(source.held_out()[1].prompt_text, Catch::Contains("<|im_start|>user\nWhy?"));
  std::set<std::string> ids;
  for (int step = 1; step <= 6; ++step) {
    for (const auto& p : source.train_batch(step, 8)) ids.insert(p.row->text("id").value());
  }
  CHECK(ids.count("v1") == 0);
  CHECK(ids.size() == 18);  // all 12 math and 6 general rows train: nothing is split off
}
