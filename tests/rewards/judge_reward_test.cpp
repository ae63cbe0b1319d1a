// SPDX-License-Identifier: Apache-2.0
// The judge reward: verdict parsing, the prompt template, the HTTP backend against a fake OpenAI-compatible server on
// loopback (errors, rate limits, slow answers, garbage, the concurrency cap), and the local-model backend against an
// independent greedy decode.
#include <grpo/core/json_quote.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/rewards/judge_reward.hpp>
#include <grpo/rewards/registry.hpp>
#include <grpo/text/tokenizer.hpp>

#include "rewards/reward_testing.hpp"
#include "support/fake_judge_server.hpp"
#include "support/model_testing.hpp"
#include "support/tokenizer_testing.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

using namespace grpo::rewards;
using grpo::testing::chat_body;
using grpo::testing::FakeServer;
using grpo::testing::Reply;
using grpo::rewards::testing::completion;
using grpo::rewards::testing::require_values;

namespace {

HttpJudgeOptions fast_http(const FakeServer& server) {
  HttpJudgeOptions options;
  options.base_url = server.base_url();
  options.model = "judge-model";
  options.api_key_env = "GRPO_TEST_JUDGE_KEY";
  options.timeout = std::chrono::milliseconds(2000);
  options.initial_backoff = std::chrono::milliseconds(10);
  options.max_backoff = std::chrono::milliseconds(40);
  options.max_retries = 3;
  return options;
}

/// A backend that replies with a fixed text per request (or none), recording the requests.
class ScriptedBackend final : public JudgeBackend {
 public:
  explicit ScriptedBackend(std::vector<std::optional<std::string>> replies) : replies_(std::move(replies)) {}
  std::vector<std::optional<std::string>> complete(std::span<const JudgeRequest> requests,
                                                   const ScoringContext&) const override {
    std::lock_guard lock(mutex_);
    seen_.assign(requests.begin(), requests.end());
    std::vector<std::optional<std::string>> out;
    for (std::size_t i = 0; i < requests.size(); ++i) out.push_back(replies_[i % replies_.size()]);
    return out;
  }
  std::vector<JudgeRequest> seen() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  std::vector<std::optional<std::string>> replies_;
  mutable std::mutex mutex_;
  mutable std::vector<JudgeRequest> seen_;
};

std::shared_ptr<const Row> judge_row() {
  return std::make_shared<Row>(Row::from_json(
      R"({"prompt": "Name the capital of France.", "ground_truth": "Paris", "evaluation_criteria": "Only the city matters."})"));
}

}  // namespace

TEST_CASE("parse_verdict: yes/no, Score x/10, and unparseable replies", "[rewards][judge]") {
  CHECK(parse_verdict("Yes") == 1.0f);
  CHECK(parse_verdict("The answer matches.\nVerdict: NO") == 0.0f);
  CHECK(parse_verdict("[[YES]]") == 1.0f);
  CHECK(parse_verdict("**Verdict:** yes.") == 1.0f);
  // After "verdict", its word wins over later chatter; without it, the last yes/no does.
  CHECK(parse_verdict("Verdict: yes\n(no further comments)") == 1.0f);
  CHECK(parse_verdict("No, wait. Actually yes") == 1.0f);
  CHECK(parse_verdict("<think>no no no</think>yes") == 1.0f);
  CHECK(parse_verdict("Score: 7/10") == Approx(0.7));       // 7 / 10
  CHECK(parse_verdict("**Score**: 8") == Approx(0.8));      // read as out of 10
  CHECK(parse_verdict("score = 3 / 5") == Approx(0.6));     // 3 / 5
  CHECK(parse_verdict("Score: 9.5/10, yes") == Approx(0.95));
  CHECK(parse_verdict("Score: 12/10") == std::nullopt);     // out of range, and no yes/no
  CHECK(parse_verdict("noted; yesterday") == std::nullopt);  // not standalone words
  CHECK(parse_verdict("I am not sure.") == std::nullopt);
  CHECK(parse_verdict("") == std::nullopt);
}

TEST_CASE("fill_judge_template replaces the four fields and keeps other braces", "[rewards][judge]") {
  CHECK(fill_judge_template("Q={question} R={reference} A={response} C={criteria} {other} {", "q", "r", "a", "c") ==
        "Q=q R=r A=a C=c {other} {");
  // A value containing a placeholder is not expanded again.
  CHECK(fill_judge_template("{response}|{question}", "x", "", "{question}", "") == "{question}|x");
}

TEST_CASE("JudgeReward builds the request from the row and scores the verdicts", "[rewards][judge]") {
  auto backend = std::make_shared<ScriptedBackend>(
      std::vector<std::optional<std::string>>{"Verdict: yes", "Score: 4/10", "hmm", std::nullopt});
  JudgeOptions options;
  options.max_response_bytes = 12;
  JudgeReward reward(options, backend);
  const auto row = judge_row();
  std::vector<Completion> batch = {completion("<think>Lyon?</think>Paris", row), completion("Paris, I think", row),
                                   completion("Marseille", row), completion("Paris", row)};
  const auto values = reward.score(batch, {});
  REQUIRE(values.size() == 4);
  CHECK(values[0] == 1.0f);
  CHECK(values[1] == Approx(0.4f));
  CHECK(values[2] == std::nullopt);
  CHECK(values[3] == std::nullopt);
  const JudgeStats stats = reward.stats();
  CHECK(stats.requests == 4);
  CHECK(stats.unparseable == 1);
  CHECK(stats.failed == 1);

  const auto seen = backend->seen();
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].system == options.system_prompt);
  CHECK(seen[0].user.find("Name the capital of France.") != std::string::npos);
  CHECK(seen[0].user.find("Reference answer:\nParis") != std::string::npos);
  CHECK(seen[0].user.find("Only the city matters.") != std::string::npos);
  CHECK(seen[0].user.find("Response to grade:\nParis\n") != std::string::npos);  // thinking stripped
  CHECK(seen[0].user.find("Lyon") == std::string::npos);
  CHECK(seen[1].user.find("Paris, I thi\n[... response cut ...]") != std::string::npos);  // 12 bytes kept

  CHECK_THROWS_AS(JudgeReward(options, nullptr), grpo::ConfigError);
  options.prompt_template = "no placeholder";
  CHECK_THROWS_WITH(JudgeReward(options, backend), Catch::Contains("{response}"));
}

TEST_CASE("JudgeReward on a ROLL judge row: the user's question and the reference, never the system text",
          "[rewards][judge]") {
  auto backend = std::make_shared<ScriptedBackend>(std::vector<std::optional<std::string>>{"Verdict: yes"});
  JudgeReward reward({}, backend);
  // ROLL's multi-subject RLVR rows: a system instruction, then the question; ground_truth only (no criteria).
  const auto row = std::make_shared<Row>(Row::from_json(
      R"({"tag": "RLVR", "prompt": "SYSTEM-TEXT", "messages": "[{\"role\": \"system\", \"content\": )"
      R"(\"SYSTEM-TEXT: reason step by step.\"}, {\"role\": \"user\", \"content\": \"Which gas do plants )"
      R"(absorb?\"}, {\"role\": \"assistant\", \"content\": \"Earlier turn.\"}, {\"role\": \"user\", )"
      R"(\"content\": \"Answer with a formula.\"}]", "ground_truth": "CO2"})"));
  Completion c = completion("It is CO2.", row);
  c.prompt = "<|im_start|>system\nSYSTEM-TEXT ...";  // the rendered prompt is not what the judge reads either
  const JudgeRequest request = reward.request_for(c);
  CHECK(request.user.find("Question:\nAnswer with a formula.\n") != std::string::npos);  // the last user turn
  CHECK(request.user.find("Reference answer:\nCO2") != std::string::npos);
  CHECK(request.user.find("SYSTEM-TEXT") == std::string::npos);
  CHECK(request.user.find(JudgeOptions{}.default_criteria) != std::string::npos);  // no criteria in the row
  // A row without a chat: the question fields, then the completion's prompt.
  CHECK(reward.request_for(completion("x", judge_row())).user.find("Name the capital of France.") != std::string::npos);
  Completion bare = completion("x", std::make_shared<Row>(Row::from_json(R"({"ground_truth": "1"})")));
  bare.prompt = "What is 0 + 1?";
  CHECK(reward.request_for(bare).user.find("Question:\nWhat is 0 + 1?") != std::string::npos);
}

TEST_CASE("HTTP judge: request shape, key from the environment, verdicts", "[rewards][judge][http]") {
  FakeServer server({{200, chat_body("Verdict: yes")}});
  ::setenv("GRPO_TEST_JUDGE_KEY", "sk-test-123", 1);
  auto backend = std::make_shared<HttpJudgeBackend>(fast_http(server));
  JudgeReward reward({}, backend);
  const auto values = reward.score(std::vector<Completion>{completion("Paris", judge_row())}, {});
  ::unsetenv("GRPO_TEST_JUDGE_KEY");
  require_values(values, {1.0});
  const auto requests = server.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].rfind("POST /v1/chat/completions HTTP/1.1\r\n", 0) == 0);
  CHECK(requests[0].find("Authorization: Bearer sk-test-123\r\n") != std::string::npos);
  CHECK(requests[0].find(R"("model":"judge-model")") != std::string::npos);
  CHECK(requests[0].find(R"("role":"system")") != std::string::npos);
  CHECK(requests[0].find("Name the capital of France.") != std::string::npos);
  CHECK(requests[0].find(R"("temperature":0)") != std::string::npos);
  CHECK(backend->stats().attempts == 1);
}

TEST_CASE("HTTP judge: 500 and 429 are retried with back-off, then the answer counts", "[rewards][judge][http]") {
  FakeServer server({{500, "oops"}, {429, R"({"error":"rate limited"})"}, {200, chat_body("Score: 6/10")}});
  HttpJudgeBackend backend(fast_http(server));
  const auto started = std::chrono::steady_clock::now();
  const auto replies = backend.complete(std::vector<JudgeRequest>{{"s", "u"}}, {});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  REQUIRE(replies.size() == 1);
  CHECK(replies[0] == "Score: 6/10");
  CHECK(backend.stats().attempts == 3);
  CHECK(backend.stats().retries == 2);
  CHECK(seconds >= 0.03);  // back-off 10 ms then 20 ms
}

TEST_CASE("HTTP judge: garbage answers exhaust the retries and give no value", "[rewards][judge][http]") {
  FakeServer server({{200, "<html>not json</html>"}, {200, R"({"choices": []})"}, {200, "{"}});
  HttpJudgeOptions options = fast_http(server);
  options.max_retries = 2;
  auto backend = std::make_shared<HttpJudgeBackend>(options);
  JudgeReward reward({}, backend);
  const auto values = reward.score(std::vector<Completion>{completion("Paris", judge_row())}, {});
  require_values(values, {std::nullopt});
  CHECK(backend->stats().attempts == 3);
  CHECK(backend->stats().failures == 1);
  CHECK(reward.stats().failed == 1);
}

TEST_CASE("HTTP judge: client errors are not retried, and an unparseable verdict is counted", "[rewards][judge][http]") {
  FakeServer bad_request({{400, R"({"error":"bad"})"}});
  HttpJudgeBackend backend(fast_http(bad_request));
  CHECK(backend.complete(std::vector<JudgeRequest>{{"s", "u"}}, {})[0] == std::nullopt);
  CHECK(backend.stats().attempts == 1);

  FakeServer vague({{200, chat_body("It depends.")}});
  JudgeReward reward({}, std::make_shared<HttpJudgeBackend>(fast_http(vague)));
  CHECK(reward.score(std::vector<Completion>{completion("Paris", judge_row())}, {})[0] == std::nullopt);
  CHECK(reward.stats().unparseable == 1);
}

TEST_CASE("HTTP judge: a slow answer times out, and the scoring deadline bounds the retries", "[rewards][judge][http]") {
  FakeServer server({{200, chat_body("yes"), std::chrono::milliseconds(3000)}});
  HttpJudgeOptions options = fast_http(server);
  options.timeout = std::chrono::milliseconds(200);
  options.max_retries = 1;
  HttpJudgeBackend backend(options);
  auto started = std::chrono::steady_clock::now();
  CHECK(backend.complete(std::vector<JudgeRequest>{{"s", "u"}}, {})[0] == std::nullopt);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::milliseconds(1500));  // 2 × 200 ms + back-off
  CHECK(backend.stats().attempts == 2);

  options.timeout = std::chrono::milliseconds(5000);
  options.max_retries = 5;
  HttpJudgeBackend patient(options);
  ScoringContext context;
  context.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  started = std::chrono::steady_clock::now();
  CHECK(patient.complete(std::vector<JudgeRequest>{{"s", "u"}}, context)[0] == std::nullopt);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::milliseconds(1000));
}

TEST_CASE("HTTP judge: requests in flight never exceed max_concurrency", "[rewards][judge][http]") {
  FakeServer server({{200, chat_body("yes"), std::chrono::milliseconds(120)}});
  HttpJudgeOptions options = fast_http(server);
  options.max_concurrency = 2;
  HttpJudgeBackend backend(options);
  const std::vector<JudgeRequest> requests(6, JudgeRequest{"s", "u"});
  // Two callers at once (two executor threads): the cap holds over both.
  std::vector<std::optional<std::string>> first, second;
  std::thread other([&] { second = backend.complete(requests, {}); });
  first = backend.complete(requests, {});
  other.join();
  for (const auto& reply : first) CHECK(reply == "yes");
  for (const auto& reply : second) CHECK(reply == "yes");
  CHECK(server.connections() == 12);
  CHECK(server.max_concurrent() <= 2);
  CHECK(backend.stats().max_in_flight == 2);
}

TEST_CASE("HTTP judge options: URL from the environment, and errors name the option", "[rewards][judge][http]") {
  HttpJudgeOptions options;
  options.model = "m";
  options.base_url_env = "GRPO_TEST_JUDGE_URL";
  ::unsetenv("GRPO_TEST_JUDGE_URL");
  CHECK_THROWS_WITH(HttpJudgeBackend(options), Catch::Contains("GRPO_TEST_JUDGE_URL"));
  ::setenv("GRPO_TEST_JUDGE_URL", "ftp://127.0.0.1/v1", 1);
  CHECK_THROWS_WITH(HttpJudgeBackend(options), Catch::Contains("http://"));
  ::setenv("GRPO_TEST_JUDGE_URL", "http://127.0.0.1:1/v1/", 1);
  CHECK_NOTHROW(HttpJudgeBackend(options));
  ::unsetenv("GRPO_TEST_JUDGE_URL");
  options.base_url = "http://127.0.0.1:1/v1";
  options.model.clear();
  CHECK_THROWS_WITH(HttpJudgeBackend(options), Catch::Contains("model"));
  options.model = "m";
  options.max_concurrency = 0;
  CHECK_THROWS_WITH(HttpJudgeBackend(options), Catch::Contains("max_concurrency"));
}

TEST_CASE("judge from a config, against the fake server", "[rewards][judge][http]") {
  FakeServer server({{200, chat_body("Verdict: no")}});
  const auto registry = RewardRegistry::with_builtins();
  const RewardPtr reward = registry.create(fmt::format(
      R"({{"name": "judge", "base_url": "{}", "model": "m", "max_retries": 0, "timeout_ms": 2000, "criteria_field": "rubric"}})",
      server.base_url()));
  CHECK(reward->name() == "judge");
  require_values(reward->score(std::vector<Completion>{completion("Lyon", judge_row())}, {}), {0.0});
  CHECK_THROWS_WITH(registry.create(R"({"name": "judge", "backend": "local"})"), Catch::Contains("model_dir"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "judge", "base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key": "x"})"),
                    Catch::Contains("unknown option 'api_key'"));
}

namespace {

// A byte-level tokenizer with no merges (ids 0..255 = bytes) and an end token (256): every id decodes.
grpo::text::Tokenizer byte_tokenizer() {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    vocab += (b ? ", " : "") + grpo::json_quoted(grpo::testing::byte_spelling(b)) + fmt::format(": {}", b);
  }
  return grpo::text::Tokenizer::from_json(fmt::format(R"({{
  "version": "1.0",
  "added_tokens": [{{"id": 256, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": true}}],
  "normalizer": null,
  "pre_tokenizer": {{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}},
  "post_processor": null,
  "decoder": {{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}},
  "model": {{"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": {{{}}}, "merges": []}}
}})",
                                                      vocab));
}

}  // namespace

TEST_CASE("local judge: batched greedy replies equal a plain greedy loop", "[rewards][judge][local]") {
  torch::manual_seed(7);
  grpo::testing::TinyModelSizes sizes;
  sizes.vocab = 257;
  sizes.hidden = 16;
  auto config = grpo::testing::tiny_model_config(sizes);
  config.eos_token_ids = {256};
  grpo::models::CausalLM model(config);
  model->eval();
  const auto tokenizer = byte_tokenizer();
  LocalJudgeOptions options;
  options.max_new_tokens = 6;
  options.batch_size = 2;  // three requests: batches of 2 and 1
  LocalJudgeBackend backend(model, tokenizer, options);
  const std::vector<JudgeRequest> requests = {{"Grade.", "Is 2+2=4?"}, {"", "yes or no"}, {"Grade.", "Paris?"}};
  const auto replies = backend.complete(requests, {});
  REQUIRE(replies.size() == 3);

  // Independent greedy decoding: full forward over the growing sequence, argmax, stop after the EOS (256).
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::string prompt = requests[i].system.empty() ? requests[i].user + "\n"
                                                          : requests[i].system + "\n\n" + requests[i].user + "\n";
    const auto prompt_ids = tokenizer.encode(prompt);
    std::vector<int64_t> sequence(prompt_ids.begin(), prompt_ids.end());
    std::vector<int32_t> generated;
    for (int step = 0; step < options.max_new_tokens; ++step) {
      const auto logits = model->forward(torch::tensor(sequence, torch::kInt64).unsqueeze(0));
      const int64_t next = logits[0][-1].argmax().item<int64_t>();
      sequence.push_back(next);
      if (next == 256) break;
      generated.push_back(static_cast<int32_t>(next));
    }
    INFO("request " << i);
    REQUIRE(replies[i].has_value());
    CHECK(*replies[i] == tokenizer.decode(generated));
  }

  // A scoring deadline already past: nothing is generated.
  ScoringContext expired;
  expired.deadline = std::chrono::steady_clock::now();
  CHECK(backend.complete(requests, expired)[0] == std::nullopt);
}
