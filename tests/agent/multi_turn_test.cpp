// SPDX-License-Identifier: Apache-2.0
// Multi-turn tool rollouts on the tiny lookup task: the rollout is token-in/token-out (the trainer's log-probs equal
// the sampler's on every sampled token, replies are what the environment answered), reply tokens are never trained
// on, and the limits end trajectories as documented. That GRPO learns to use the tool (and cannot without it) is
// tests/examples' tiny_lookup learning test.
#include <grpo/agent/multi_turn_generator.hpp>
#include <grpo/agent/tiny_lookup_task.hpp>
#include <grpo/loss/grpo_loss.hpp>
#include <grpo/loss/recipes.hpp>
#include <grpo/policy/decode.hpp>
#include <grpo/policy/policy.hpp>
#include <grpo/rewards/registry.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/step_scorer.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <numeric>
#include <thread>

using grpo::agent::MultiTurnGenerator;
using grpo::agent::MultiTurnOptions;
using grpo::agent::TinyLookupTask;
using grpo::agent::TrajectoryEnd;
using Task = TinyLookupTask;

namespace {

constexpr std::uint64_t kSeed = 3;

// The tiny lookup model after its warm-up (built once: the warm-up is the slow part).
grpo::models::CausalLM warmed_up_model() {
  static const grpo::models::CausalLM model = [] {
    Task task(kSeed, 0);
    auto m = grpo::agent::tiny_lookup_model(kSeed);
    grpo::agent::warm_up_tiny_lookup_model(m, task, kSeed, 150);
    return m;
  }();
  auto copy = grpo::agent::tiny_lookup_model(kSeed);
  torch::NoGradGuard no_grad;
  auto from = model->named_parameters();
  for (auto& p : copy->named_parameters()) p.value().copy_(*from.find(p.key()));
  return copy;
}

grpo::train::GenerationRequest request(std::span<const grpo::train::Problem> problems, std::int64_t group) {
  grpo::SamplerOptions sampling;
  sampling.max_new_tokens = 8;
  sampling.eos_token_ids = {Task::kEos};
  sampling.pad_token_id = Task::kPad;
  sampling.seed = 11;
  return {.problems = problems, .group_size = group, .sampling = sampling, .prompt_keys = {}, .max_rows = 0};
}

std::shared_ptr<MultiTurnGenerator<grpo::models::CausalLM>> lookup_generator(grpo::models::CausalLM model,
                                                                              MultiTurnOptions options = {},
                                                                              grpo::agent::EnvironmentFactory env = {}) {
  if (!env) env = [] { return std::make_unique<grpo::agent::TinyLookupEnvironment>(); };
  options.max_turns = options.max_turns == MultiTurnOptions{}.max_turns ? 2 : options.max_turns;
  options.max_total_tokens = options.max_total_tokens == MultiTurnOptions{}.max_total_tokens ? 24 : options.max_total_tokens;
  return std::make_shared<MultiTurnGenerator<grpo::models::CausalLM>>(
      model, std::make_shared<grpo::agent::TinyLookupCodec>(), env, options);
}

std::vector<std::int64_t> row_of(const torch::Tensor& t, std::int64_t row) {
  const auto r = t[row].contiguous();
  return {r.data_ptr<std::int64_t>(), r.data_ptr<std::int64_t>() + r.numel()};
}

}  // namespace

TEST_CASE("multi-turn rollout: sampled ids kept, replies from the environment, masks and turns per token", "[agent]") {
  auto model = warmed_up_model();
  Task task(kSeed, 0);
  const auto problems = task.train_batch(1, 6);
  auto generator = lookup_generator(model);
  const grpo::Rollout r = generator->generate(request(problems, 4));
  REQUIRE(r.batch_size() == 24);
  REQUIRE(r.completion_attention_mask.defined());
  REQUIRE(r.completion_turns.defined());
  const auto& infos = generator->trajectories();
  REQUIRE(infos.size() == 24);
  std::int64_t called = 0;
  for (std::int64_t row = 0; row < 24; ++row) {
    INFO("row " << row);
    const auto ids = row_of(r.completion_ids, row), loss = row_of(r.completion_mask, row),
               attention = row_of(r.completion_attention_mask, row), turns = row_of(r.completion_turns, row);
    const auto& info = infos[static_cast<std::size_t>(row)];
    const auto& problem = problems[static_cast<std::size_t>(row / 4)];
    // Real tokens form a prefix; loss ⊆ attention; turns −1 exactly on padding.
    std::int64_t real = 0;
    while (real < static_cast<std::int64_t>(ids.size()) && attention[real] == 1) ++real;
    for (std::size_t t = 0; t < ids.size(); ++t) {
      const bool is_real = static_cast<std::int64_t>(t) < real;
      CHECK(attention[t] == (is_real ? 1 : 0));
      CHECK((loss[t] == 0 || is_real));
      CHECK((turns[t] == -1) == !is_real);
    }
    CHECK(real == info.sampled_tokens + info.reply_tokens);
    std::int64_t sampled = 0;
    for (std::int64_t t = 0; t < real; ++t) sampled += loss[t];
    CHECK(sampled == info.sampled_tokens);
    // The reply tokens are exactly the fragment of the turn-0 calls' answers from the problem's table (computed here
    // from the table, not by the environment), and only after a turn that ended with its end-of-turn token.
    std::vector<std::int64_t> turn0, reply;
    for (std::int64_t t = 0; t < real; ++t) {
      if (turns[t] == 0) (loss[t] == 1 ? turn0 : reply).push_back(ids[t]);
    }
    const grpo::agent::TinyLookupCodec codec;
    const auto calls = codec.parse_calls(codec.turn_text(turn0));
    if (reply.empty()) {
      CHECK((calls.empty() || info.end != TrajectoryEnd::answer));
    } else {
      ++called;
      REQUIRE(!calls.empty());
      CHECK(turn0.back() == Task::kEos);
      std::vector<std::string> expected;
      for (const auto& call : calls) {
        const auto key = call.call ? grpo::agent::ToolArguments(call.call->arguments_json).string("key") : "";
        const bool known = key.size() == 1 && key[0] >= 'a' && key[0] < 'a' + Task::kKeys;
        expected.push_back(known ? std::string(1, Task::table(problem)[static_cast<std::size_t>(key[0] - 'a')]) : "err");
      }
      CHECK(reply == codec.reply_ids(expected));
    }
    // What rewards read: every sampled token, the turns after the reply included, the reply left out.
    std::vector<std::int32_t> sampled_ids;
    for (std::int64_t t = 0; t < real; ++t) {
      if (loss[t] == 1) sampled_ids.push_back(static_cast<std::int32_t>(ids[t]));
    }
    CHECK(grpo::completion_token_ids(r)[static_cast<std::size_t>(row)] == sampled_ids);
    const bool answered = info.end == TrajectoryEnd::answer;
    CHECK(r.truncated[row].item<bool>() == !answered);
  }
  CHECK(called >= 12);  // the warmed-up policy calls the tool in most trajectories
  // The generator's metrics, with the names and reductions the trainer logs.
  const auto metrics = generator->last_metrics();
  REQUIRE(metrics.size() == 11);
  CHECK(metrics[0].name == "multi_turn/turns");
  CHECK(metrics[0].value == Approx(static_cast<double>(std::accumulate(
                                       infos.begin(), infos.end(), std::int64_t{0},
                                       [](std::int64_t s, const auto& i) { return s + i.turns; })) /
                                   24.0));
  CHECK(metrics[4].name == "multi_turn/end/answer");
}

TEST_CASE("multi-turn rollout: the trainer's log-probs equal the sampler's on every sampled token", "[agent]") {
  auto model = warmed_up_model();
  Task task(kSeed, 0);
  const auto problems = task.train_batch(2, 8);
  const grpo::Rollout r = lookup_generator(model)->generate(request(problems, 4));
  grpo::Policy<grpo::models::CausalLM> policy(model);
  torch::NoGradGuard no_grad;
  const auto trainer = policy.token_log_probs(r).log_probs;
  const auto sampled = r.completion_mask != 0;
  REQUIRE(sampled.sum().item<std::int64_t>() > 100);
  // A fresh prefill of the whole trajectory (prompt, turns and replies) gives what the sampler drew the turns with.
  CHECK(torch::allclose(trainer.masked_select(sampled), r.sampler_log_probs.masked_select(sampled), 1e-4, 1e-5));
}

TEST_CASE("tool-reply tokens are never trained on: every loss, KL and entropy term, fused and generic", "[agent]") {
  // Trajectories that end in a reply (so no later token reads it): replacing the reply's ids must change neither the
  // loss nor any gradient. With the reply in the middle, later tokens read it as context, as they should.
  auto model = warmed_up_model();
  auto reference = grpo::Policy<grpo::models::CausalLM>(warmed_up_model()).frozen_copy();
  const std::int64_t rows = 4, tp = 4, tc = 9;
  grpo::Rollout a;
  a.prompt_ids = torch::tensor({Task::kBos, Task::kGet, Task::kFirstKey + 2, Task::kEquals}).repeat({rows, 1});
  a.prompt_mask = torch::ones({rows, tp}, torch::kInt64);
  a.completion_ids = torch::tensor(std::vector<std::int64_t>{Task::kCall, Task::kFirstKey + 2, Task::kCallEnd, Task::kEos,
                                                             Task::kReply, 7, Task::kReplyEnd, Task::kPad, Task::kPad})
                         .repeat({rows, 1});
  a.completion_mask = torch::tensor(std::vector<std::int64_t>{1, 1, 1, 1, 0, 0, 0, 0, 0}).repeat({rows, 1});
  a.completion_attention_mask = torch::tensor(std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 1, 0, 0}).repeat({rows, 1});
  a.truncated = torch::zeros({rows}, torch::kBool);
  a.sampler_log_probs = torch::full({rows, tc}, -1.0);
  a.completion_ids[1][1] = Task::kFirstKey + 5;  // rows differ
  grpo::Rollout b = a;
  b.completion_ids = a.completion_ids.clone();
  b.completion_ids.narrow(1, 4, 3).copy_(torch::tensor(std::vector<std::int64_t>{3, Task::kError, 9}).repeat({rows, 1}));
  const auto advantages = torch::tensor({1.0, -0.5, 0.25, -0.75});
  for (const std::string_view recipe : grpo::recipes::kRecipeNames) {
    for (const auto implementation : {grpo::LossImplementation::automatic, grpo::LossImplementation::generic}) {
      INFO(recipe << " " << grpo::to_string(implementation));
      auto options = grpo::recipes::by_name(recipe, tc);
      options.beta = 0.04;
      options.entropy_coef = 0.01;
      options.implementation = implementation;
      const grpo::GrpoLoss loss(options);
      auto loss_and_grads = [&](const grpo::Rollout& r) {
        grpo::Policy<grpo::models::CausalLM> policy(model);
        model->zero_grad();
        const auto current = policy.token_log_probs(r, /*with_entropy=*/true);
        grpo::LossInputs in;
        in.log_probs = current.log_probs;
        in.entropy = current.entropy;
        {
          torch::NoGradGuard no_grad;
          in.ref_log_probs = reference.token_log_probs(r).log_probs;
          in.old_log_probs = current.log_probs.detach() - 0.05;
        }
        in.advantages = advantages;
        in.mask = r.completion_mask;
        in.truncated = r.truncated;
        in.sampler_log_probs = r.sampler_log_probs;
        const auto out = loss(in, loss.local_normaliser(in));
        out.loss.backward();
        std::vector<torch::Tensor> grads;
        for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
        return std::pair(out.loss.item<double>(), grads);
      };
      const auto [loss_a, grads_a] = loss_and_grads(a);
      const auto [loss_b, grads_b] = loss_and_grads(b);
      CHECK(loss_a == loss_b);
      bool same = true;
      double norm = 0.0;
      for (std::size_t i = 0; i < grads_a.size(); ++i) {
        same = same && torch::equal(grads_a[i], grads_b[i]);
        norm += grads_a[i].square().sum().item<double>();
      }
      CHECK(same);
      CHECK(norm > 0.0);  // the sampled tokens do train
    }
  }
}

TEST_CASE("multi-turn limits: turns, token budget, failed calls, a hanging environment", "[agent]") {
  auto model = warmed_up_model();
  Task task(kSeed, 0);
  const auto problems = task.train_batch(3, 4);
  SECTION("one turn: a turn that calls ends the trajectory, truncated") {
    MultiTurnOptions options;
    options.max_turns = 1;
    auto generator = lookup_generator(model, options);
    const auto r = generator->generate(request(problems, 2));
    for (std::int64_t row = 0; row < r.batch_size(); ++row) {
      const auto& info = generator->trajectories()[static_cast<std::size_t>(row)];
      CHECK(info.turns == 1);
      CHECK(info.reply_tokens == 0);
      if (info.tool_calls > 0) {
        CHECK(info.end == TrajectoryEnd::turns);
        CHECK(r.truncated[row].item<bool>());
      }
    }
    CHECK(torch::equal(r.completion_mask, r.completion_attention_mask));  // nothing but sampled tokens
  }
  SECTION("a budget the reply does not fit in ends the trajectory before it") {
    MultiTurnOptions options;
    options.max_total_tokens = 6;  // "<call> k </call> <eos>" fits, the 3-token reply would leave no room
    auto generator = lookup_generator(model, options);
    const auto r = generator->generate(request(problems, 2));
    for (const auto& info : generator->trajectories()) {
      CHECK(info.sampled_tokens <= 6);
      CHECK(info.reply_tokens == 0);
      if (info.tool_calls > 0) CHECK(info.end == TrajectoryEnd::budget);
    }
    CHECK(r.completion_length() <= 6);
  }
  SECTION("no tools: every call is answered with an error and counted") {
    MultiTurnOptions options;
    options.failed_call_reward = -0.5;
    auto generator = lookup_generator(model, options, [] { return std::make_unique<grpo::agent::NoToolsEnvironment>(); });
    const auto r = generator->generate(request(problems, 2));
    std::int64_t failed = 0;
    for (const auto& info : generator->trajectories()) {
      CHECK(info.failed_calls == info.tool_calls);
      failed += info.failed_calls;
      if (info.tool_calls > 0) CHECK(info.turn_rewards.front() == -0.5 * static_cast<double>(info.tool_calls));
    }
    CHECK(failed > 0);
    const auto reply_tokens = r.completion_ids.masked_select((r.completion_attention_mask != 0) & (r.completion_mask == 0));
    CHECK((reply_tokens == Task::kError).sum().item<std::int64_t>() == failed);
    // Each turn's reward sits on the turn's last sampled token (the one before its reply), nowhere else.
    REQUIRE(r.completion_rewards.defined());
    const auto& infos = generator->trajectories();
    for (std::int64_t row = 0; row < r.batch_size(); ++row) {
      const auto& info = infos[static_cast<std::size_t>(row)];
      auto expected = torch::zeros({r.completion_length()}, torch::kFloat32);
      for (std::int64_t j = 0; j < r.completion_length(); ++j) {
        const std::int64_t turn = r.completion_turns[row][j].item<std::int64_t>();
        const bool last_sampled = r.completion_mask[row][j].item<std::int64_t>() == 1 &&
                                  (j + 1 == r.completion_length() || r.completion_mask[row][j + 1].item<std::int64_t>() == 0);
        if (last_sampled && turn < static_cast<std::int64_t>(info.turn_rewards.size())) {
          expected[j] = info.turn_rewards[static_cast<std::size_t>(turn)];
        }
      }
      CHECK(torch::equal(r.completion_rewards[row], expected));
      double sum = 0.0;
      for (const double v : info.turn_rewards) sum += v;
      CHECK(r.completion_rewards[row].sum().item<double>() == Approx(sum));
      CHECK(sum == -0.5 * static_cast<double>(info.failed_calls));
    }
  }
  SECTION("an environment that hangs ends its trajectory at the step timeout; the others finish") {
    class Hanging final : public grpo::agent::Environment {
     public:
      void reset(const grpo::train::Problem&) override {}
      grpo::agent::EnvironmentStep step(std::string_view, std::span<const grpo::agent::ParsedToolCall>) override {
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return {};
      }
    };
    MultiTurnOptions options;
    options.step_timeout_seconds = 0.2;
    auto generator = lookup_generator(model, options, [] { return std::make_unique<Hanging>(); });
    const auto start = std::chrono::steady_clock::now();
    const auto r = generator->generate(request(problems, 2));
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5.0);
    std::int64_t timed_out = 0;
    for (const auto& info : generator->trajectories()) {
      if (info.tool_calls > 0) CHECK(info.end == TrajectoryEnd::timeout);
      timed_out += info.end == TrajectoryEnd::timeout;
    }
    CHECK(timed_out > 0);
    CHECK(r.truncated.sum().item<std::int64_t>() >= timed_out);
  }
}
