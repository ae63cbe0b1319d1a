// SPDX-License-Identifier: Apache-2.0
// step_batch_codec.hpp: a StepBatch with every field set (tensors of several dtypes, undefined ones, shared and own
// dataset rows, invalid UTF-8, unset optionals) comes back equal field by field; bytes that are not such a batch
// (cut short anywhere, another kind, trailing bytes, a bad dtype) are refused with a ParseError, never garbage.
#include <grpo/core/error.hpp>
#include <grpo/train/step_batch_codec.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>

using namespace grpo;

namespace {

bool same(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && a.device().is_cpu() == b.device().is_cpu() &&
         (a.numel() == 0 || std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0);
}

bool same_rows(const rewards::Row* a, const rewards::Row* b) {
  if ((a == nullptr) != (b == nullptr)) return false;
  return a == nullptr || a->fields() == b->fields();
}

train::StepBatch full_batch() {
  torch::manual_seed(5);
  train::StepBatch b;
  b.step = 7;
  b.group_size = 2;
  b.max_new_tokens = 5;
  b.mask_truncated = true;
  b.weights_version = 5;
  b.train = true;
  b.rollout.prompt_ids = torch::randint(0, 50, {4, 3}, torch::kInt64);
  b.rollout.prompt_mask = torch::ones({4, 3}, torch::kInt64);
  b.rollout.completion_ids = torch::randint(0, 50, {4, 5}, torch::kInt64);
  b.rollout.completion_mask = torch::randint(0, 2, {4, 5}, torch::kInt64);
  b.rollout.truncated = torch::tensor({true, false, false, true});
  b.rollout.sampler_log_probs = -torch::rand({4, 5});
  b.rollout.completion_turns = torch::randint(-1, 2, {4, 5}, torch::kInt64);  // attention mask, rewards: undefined
  auto shared_row = std::make_shared<const rewards::Row>(
      rewards::Row{{"answer", std::string("42")}, {"score", 0.5}, {"tests", std::vector<std::string>{"a", "b\n"}}});
  b.problems.push_back({.prompt_ids = {1, 2, 3}, .prompt_text = "what is 6·7?", .row = shared_row, .domain = 1,
                        .id = "p0"});
  b.problems.push_back({.prompt_ids = {4}, .prompt_text = std::string("\xff\xfe bad utf-8", 13), .row = nullptr,
                        .domain = 0, .id = ""});
  for (std::size_t i = 0; i < 4; ++i) {
    rewards::Completion c;
    c.prompt = b.problems[i / 2].prompt_text;
    c.text = i == 3 ? std::string("\0zero\xc3", 6) : "<answer>" + std::to_string(i) + "</answer>";
    c.token_ids = {static_cast<std::int64_t>(i), 9};
    c.truncated = i % 2 == 0;
    c.group = i / 2;
    c.row = i < 2 ? shared_row : (i == 2 ? std::make_shared<const rewards::Row>(rewards::Row{{"own", 1.0}}) : nullptr);
    if (i != 1) c.domain = i;
    b.completions.push_back(std::move(c));
  }
  b.totals = {1.5f, std::nullopt, -0.25f, 0.0f};
  b.reward_values = {{{"accuracy", 1.0}, {"format", std::nullopt}}, {}, {{"accuracy", -0.5}}, {{"x", 0.0}}};
  b.correct = {true, std::nullopt, false, true};
  b.in_loss_groups = torch::tensor({true, false});
  b.score_metrics = {{"rewards/accuracy/mean", 0.25, train::MetricReduction::weighted_mean, 4.0},
                     {"rewards/max", 1.5, train::MetricReduction::max, 1.0}};
  b.generation_metrics = {{"env/turns", 2.0, train::MetricReduction::sum, 0.0}};
  b.sampling_metrics = {{"dynamic_sampling/rounds", 2.0}};
  b.source_metrics = {{"curriculum/level", 3.0}, {"data/x/epoch", 0.5}};
  b.sampled_lengths = torch::rand({6}, torch::kFloat64);
  b.sampled_truncated = torch::tensor({0.0, 1.0, 0.0, 0.0, 1.0, 0.0}, torch::kFloat64);
  b.old_log_probs = -torch::rand({4, 5});
  b.greedy_baselines = torch::tensor({1.0, std::nan(""), 0.5, 0.0}, torch::kFloat64);  // ref, Σπ², KL, values: undefined
  b.old_values = torch::rand({4, 5}).to(torch::kBFloat16);
  b.generation_seconds = 1.25;
  b.scoring_seconds = 0.5;
  b.values_seconds = 3e-9;
  return b;
}

}  // namespace

TEST_CASE("Step batch codec: every field of a batch comes back as it was", "[train][codec]") {
  const train::StepBatch a = full_batch();
  const train::StepBatch b = train::decode_step_batch(train::encode_step_batch(a));
  CHECK(b.step == a.step);
  CHECK(b.group_size == a.group_size);
  CHECK(b.max_new_tokens == a.max_new_tokens);
  CHECK(b.mask_truncated == a.mask_truncated);
  CHECK((b.weights_version == a.weights_version));
  CHECK(b.train == a.train);
  for (const auto& [x, y] : {std::pair{&a.rollout.prompt_ids, &b.rollout.prompt_ids},
                             {&a.rollout.prompt_mask, &b.rollout.prompt_mask},
                             {&a.rollout.completion_ids, &b.rollout.completion_ids},
                             {&a.rollout.completion_mask, &b.rollout.completion_mask},
                             {&a.rollout.truncated, &b.rollout.truncated},
                             {&a.rollout.sampler_log_probs, &b.rollout.sampler_log_probs},
                             {&a.rollout.completion_attention_mask, &b.rollout.completion_attention_mask},
                             {&a.rollout.completion_turns, &b.rollout.completion_turns},
                             {&a.rollout.completion_rewards, &b.rollout.completion_rewards},
                             {&a.in_loss_groups, &b.in_loss_groups},
                             {&a.sampled_lengths, &b.sampled_lengths},
                             {&a.sampled_truncated, &b.sampled_truncated},
                             {&a.old_log_probs, &b.old_log_probs},
                             {&a.ref_log_probs, &b.ref_log_probs},
                             {&a.sum_pi_squared, &b.sum_pi_squared},
                             {&a.reward_kl, &b.reward_kl},
                             {&a.greedy_baselines, &b.greedy_baselines},
                             {&a.old_values, &b.old_values}}) {
    CHECK(same(*x, *y));
  }
  REQUIRE(b.problems.size() == a.problems.size());
  for (std::size_t i = 0; i < a.problems.size(); ++i) {
    CHECK(b.problems[i].prompt_ids == a.problems[i].prompt_ids);
    CHECK(b.problems[i].prompt_text == a.problems[i].prompt_text);
    CHECK(same_rows(b.problems[i].row.get(), a.problems[i].row.get()));
    CHECK(b.problems[i].domain == a.problems[i].domain);
    CHECK(b.problems[i].id == a.problems[i].id);
  }
  REQUIRE(b.completions.size() == a.completions.size());
  for (std::size_t i = 0; i < a.completions.size(); ++i) {
    INFO("completion " << i);
    CHECK(b.completions[i].prompt == a.completions[i].prompt);
    CHECK(b.completions[i].text == a.completions[i].text);
    CHECK(b.completions[i].token_ids == a.completions[i].token_ids);
    CHECK(b.completions[i].truncated == a.completions[i].truncated);
    CHECK(b.completions[i].group == a.completions[i].group);
    CHECK(same_rows(b.completions[i].row.get(), a.completions[i].row.get()));
    CHECK((b.completions[i].domain == a.completions[i].domain));
  }
  // The G completions of a prompt share its row again (one object, as GrpoTrainer made them).
  CHECK(b.completions[0].row == b.problems[0].row);
  CHECK(b.completions[1].row == b.problems[0].row);
  CHECK(b.completions[2].row != nullptr);
  CHECK(b.completions[3].row == nullptr);
  CHECK((b.totals == a.totals));
  CHECK((b.reward_values == a.reward_values));
  CHECK((b.correct == a.correct));
  for (const auto& [x, y] : {std::pair{&a.score_metrics, &b.score_metrics},
                             {&a.generation_metrics, &b.generation_metrics}}) {
    REQUIRE(x->size() == y->size());
    for (std::size_t i = 0; i < x->size(); ++i) {
      CHECK((*y)[i].name == (*x)[i].name);
      CHECK((*y)[i].value == (*x)[i].value);
      CHECK((*y)[i].reduction == (*x)[i].reduction);
      CHECK((*y)[i].weight == (*x)[i].weight);
    }
  }
  CHECK((b.sampling_metrics == a.sampling_metrics));
  CHECK((b.source_metrics == a.source_metrics));
  CHECK(b.generation_seconds == a.generation_seconds);
  CHECK(b.scoring_seconds == a.scoring_seconds);
  CHECK(b.old_log_prob_seconds == a.old_log_prob_seconds);
  CHECK(b.ref_log_prob_seconds == a.ref_log_prob_seconds);
  CHECK(b.values_seconds == a.values_seconds);
  // An empty batch (a rank left without rows by dynamic sampling) too.
  const train::StepBatch empty = train::decode_step_batch(train::encode_step_batch(train::StepBatch{}));
  CHECK(empty.rows() == 0);
  CHECK(!empty.weights_version);
  CHECK(!empty.rollout.prompt_ids.defined());
}

TEST_CASE("Step batch codec: a trainer state comes back as it was", "[train][codec]") {
  train::TrainerState state{.step = 12, .seed = 99, .values = {{"data/a/position", 17.0}, {"x", -0.5}},
                            .texts = {{"curriculum/filter", "{\"k\": [1, 2]}"}, {"bytes", std::string("\0\xff", 2)}}};
  CHECK(train::decode_trainer_state(train::encode_trainer_state(state)) == state);
  CHECK(train::decode_trainer_state(train::encode_trainer_state({})) == train::TrainerState{});
}

TEST_CASE("Step batch codec: bytes that are not an encoded batch are refused, naming why", "[train][codec]") {
  const std::string bytes = train::encode_step_batch(full_batch());
  // Cut short at every length: each prefix is refused (never read past the end, never a partial batch).
  for (std::size_t n = 0; n < bytes.size(); n += 1 + n / 50) {
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(train::decode_step_batch(std::string_view(bytes).substr(0, n)), ParseError);
  }
  CHECK_THROWS_WITH(train::decode_step_batch(bytes + "x"), Catch::Contains("1 bytes after the end"));
  CHECK_THROWS_WITH(train::decode_step_batch("hello"), Catch::Contains("does not start with"));
  CHECK_THROWS_WITH(train::decode_step_batch(train::encode_trainer_state({})), Catch::Contains("a step batch"));
  CHECK_THROWS_WITH(train::decode_trainer_state(bytes), Catch::Contains("a trainer state"));
  // A dtype code no tensor has: the first tensor's code sits after the magic, 3 int64, 2 flags, the optional version
  // (flag + int64) and the defined flag.
  std::string bad = bytes;
  const std::size_t at = std::string_view("grpo.StepBatch.1").size() + 3 * 8 + 1 + 1 + 8 + 1 + 1;
  const std::int32_t code = 1000;
  std::memcpy(bad.data() + at, &code, sizeof(code));
  CHECK_THROWS_WITH(train::decode_step_batch(bad), Catch::Contains("tensor dtype code 1000"));
  // A shape far larger than the bytes: refused before anything is allocated.
  bad = bytes;
  const std::int64_t huge = std::int64_t{1} << 40;
  std::memcpy(bad.data() + at + sizeof(code) + sizeof(std::uint64_t), &huge, sizeof(huge));
  CHECK_THROWS_WITH(train::decode_step_batch(bad), Catch::Contains("a tensor of shape [1099511627776"));
}
