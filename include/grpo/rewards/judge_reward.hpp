// SPDX-License-Identifier: Apache-2.0
// The LLM-judge reward: asks a judge model whether a completion is right, through a prompt template filled from the
// dataset row (question, reference answer, response, criteria such as the seed's `evaluation_criteria`), and parses
// its verdict: yes/no → 1/0 (ROLL's LLMJudgeRewardWorker v2, rLLM's "[[YES]]"), `Score: x/10` → x/10 (ROLL v1);
// anything else gives no value and is counted (ROLL falls back to 0.5; we would rather leave the completion out of
// its group's statistics and say how often it happened).
//
// Two backends behind one interface (JudgeBackend):
//  - HttpJudgeBackend: an OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, SGLang, llama.cpp's server, a
//    hosted API) over libcurl, with timeouts, retries with exponential back-off (network errors, 408, 429, 5xx,
//    unreadable answers) and a cap on requests in flight. The URL and key come from options or the environment
//    (OPENAI_BASE_URL, OPENAI_API_KEY, or variables you name); the key is only ever read from the environment.
//  - LocalJudgeBackend: a grpo::models::CausalLM with its text::Tokenizer and chat template, greedy, batched, through
//    grpo::Sampler. This header stays torch-free: the model and tokenizer are only forward-declared here.
#pragma once

#include <grpo/rewards/reward_function.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::models {
class CausalLM;
}
namespace grpo::text {
class Tokenizer;
}

namespace grpo::rewards {

/// One question to the judge: a system message and a user message.
struct JudgeRequest {
  std::string system;
  std::string user;
};

/// Answers judge requests. `complete` is const and may be called from several threads at once.
class JudgeBackend {
 public:
  virtual ~JudgeBackend() = default;
  /// One reply per request, in order; nullopt when the backend could not get an answer (after its retries, or past
  /// context.deadline).
  virtual std::vector<std::optional<std::string>> complete(std::span<const JudgeRequest> requests,
                                                           const ScoringContext& context) const = 0;
};

using JudgeBackendPtr = std::shared_ptr<const JudgeBackend>;

/// The judge's verdict as a reward: the text after the last </think> is read; a `Score: x/10` (or `Score: x`, read as
/// out of 10; `x/N` for another N) gives x/N when 0 ≤ x ≤ N; otherwise a standalone "yes" or "no" (any case, inside
/// brackets or bold too) gives 1 or 0: the first one after the last "verdict", else the last one of the reply;
/// otherwise nullopt.
std::optional<float> parse_verdict(std::string_view judge_text);

/// Replaces {question}, {reference}, {response} and {criteria} in `prompt_template` (other braces are kept).
std::string fill_judge_template(std::string_view prompt_template, std::string_view question, std::string_view reference,
                                std::string_view response, std::string_view criteria);

struct JudgeOptions {
  std::string system_prompt =
      "You are a careful grader. You compare a response with a reference answer and the grading criteria, and you "
      "end your reply with a verdict.";
  std::string prompt_template =
      "Question:\n{question}\n\nReference answer:\n{reference}\n\nResponse to grade:\n{response}\n\nCriteria: "
      "{criteria}\n\nIs the response correct? Reason briefly, then end with a last line that is exactly "
      "\"Verdict: yes\" or \"Verdict: no\".";
  /// The question shown to the judge: the last user turn of the row's chat in this field (ROLL's `messages`, a JSON
  /// string or list; ROLL's judge decodes the prompt's user part, never its system text); for a row without it, the
  /// first of question_fields; else Completion::prompt.
  std::string messages_field = "messages";
  std::vector<std::string> question_fields = {"prompt", "question", "problem"};
  std::vector<std::string> reference_fields = {"ground_truth", "reference", "answer", "solution"};
  std::string criteria_field = "evaluation_criteria";
  std::string default_criteria = "The response's final answer must agree with the reference answer.";
  /// Only the text after the completion's last </think> is shown to the judge.
  bool strip_thinking = true;
  /// Longer responses are cut to this many bytes (bounds the judge's input); 0 = no limit.
  std::size_t max_response_bytes = 16000;
};

/// Counters of a JudgeReward over its lifetime.
struct JudgeStats {
  std::size_t requests = 0;     ///< completions sent to the judge
  std::size_t unparseable = 0;  ///< replies without a verdict (no value)
  std::size_t failed = 0;       ///< requests the backend could not answer (no value)
};

/// The reward "judge": the parsed verdict of the backend's reply; no value for unparseable replies and failed
/// requests (both counted in stats()). The whole batch goes to the backend in one call, so a local model judges it
/// in batches and an HTTP backend sends it concurrently.
class JudgeReward final : public RewardFunction {
 public:
  /// Throws ConfigError for a null backend or a template without {response}.
  JudgeReward(JudgeOptions options, JudgeBackendPtr backend);
  std::string name() const override { return "judge"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  /// The request the judge gets for one completion.
  JudgeRequest request_for(const Completion& completion) const;
  JudgeStats stats() const;
  const JudgeOptions& options() const { return options_; }

 private:
  JudgeOptions options_;
  JudgeBackendPtr backend_;
  mutable std::atomic<std::size_t> requests_{0}, unparseable_{0}, failed_{0};
};

struct HttpJudgeOptions {
  /// Base URL up to /v1, e.g. "http://127.0.0.1:8000/v1"; requests go to {base_url}/chat/completions. Empty: read
  /// from the environment variable named by base_url_env.
  std::string base_url;
  std::string base_url_env = "OPENAI_BASE_URL";
  /// The API key is read from this environment variable when a request is built (never stored in options or
  /// configs); unset or empty = no Authorization header (local servers).
  std::string api_key_env = "OPENAI_API_KEY";
  std::string model;  ///< required: the "model" field of the request
  double temperature = 0.0;
  std::int64_t max_tokens = 512;
  std::chrono::milliseconds timeout{60000};          ///< whole request
  std::chrono::milliseconds connect_timeout{5000};
  std::size_t max_retries = 3;                       ///< after the first attempt
  std::chrono::milliseconds initial_backoff{500};    ///< wait before retry k: initial·multiplier^k, capped
  double backoff_multiplier = 2.0;
  std::chrono::milliseconds max_backoff{8000};
  std::size_t max_concurrency = 8;                   ///< requests in flight at once, over all calls
  std::size_t max_reply_bytes = 4u << 20;            ///< a longer body is an error
};

/// Counters of an HttpJudgeBackend over its lifetime.
struct HttpJudgeStats {
  std::size_t attempts = 0;  ///< HTTP requests sent (first tries and retries)
  std::size_t retries = 0;
  std::size_t failures = 0;  ///< requests given up (nullopt returned)
  std::size_t max_in_flight = 0;
};

/// OpenAI-compatible chat completions over HTTP(S) (see the file comment).
class HttpJudgeBackend final : public JudgeBackend {
 public:
  /// Throws ConfigError naming the option: no URL (option or environment), a URL that is not http(s)://, no model,
  /// max_concurrency 0, bad back-off values.
  explicit HttpJudgeBackend(HttpJudgeOptions options);
  ~HttpJudgeBackend() override;
  std::vector<std::optional<std::string>> complete(std::span<const JudgeRequest> requests,
                                                   const ScoringContext& context) const override;
  HttpJudgeStats stats() const;
  const HttpJudgeOptions& options() const { return options_; }

 private:
  struct State;
  HttpJudgeOptions options_;
  std::shared_ptr<State> state_;
};

struct LocalJudgeOptions {
  std::int64_t max_new_tokens = 64;
  std::size_t batch_size = 8;  ///< prompts per generate call
  /// Render requests with the tokenizer's chat template (system + user, generation prompt). Without one, or with
  /// false, the prompt is "{system}\n\n{user}\n".
  bool use_chat_template = true;
};

/// A local judge model: greedy decoding (temperature 0) with grpo::Sampler in batches, replies decoded without
/// special tokens. Generation stops at the tokenizer's EOS (else the model config's). Calls are serialised (one
/// model, one forward at a time).
class LocalJudgeBackend final : public JudgeBackend {
 public:
  LocalJudgeBackend(const models::CausalLM& model, const text::Tokenizer& tokenizer, LocalJudgeOptions options = {});
  ~LocalJudgeBackend() override;
  std::vector<std::optional<std::string>> complete(std::span<const JudgeRequest> requests,
                                                   const ScoringContext& context) const override;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

/// A LocalJudgeBackend for a Hugging Face checkpoint directory (config.json, safetensors, tokenizer files).
JudgeBackendPtr local_judge_from_pretrained(const std::filesystem::path& directory, LocalJudgeOptions options = {});

}  // namespace grpo::rewards
