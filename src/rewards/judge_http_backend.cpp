// SPDX-License-Identifier: Apache-2.0
// HttpJudgeBackend: OpenAI-compatible /chat/completions over libcurl (see judge_reward.hpp). One easy handle per
// attempt; no libcurl type leaves this file.
#include <grpo/core/json_quote.hpp>
#include <grpo/rewards/judge_reward.hpp>

#include <curl/curl.h>
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace grpo::rewards {
namespace {

using Clock = std::chrono::steady_clock;

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string environment(const std::string& name) {
  if (name.empty()) return {};
  const char* value = std::getenv(name.c_str());
  return value == nullptr ? std::string() : std::string(value);
}

struct Body {
  std::string text;
  std::size_t limit = 0;
  bool overflow = false;
};

std::size_t write_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* body = static_cast<Body*>(user);
  const std::size_t bytes = size * count;
  if (body->text.size() + bytes > body->limit) {
    body->overflow = true;
    return 0;  // aborts the transfer
  }
  body->text.append(data, bytes);
  return bytes;
}

struct Attempt {
  long status = 0;        // HTTP status, 0 when no response
  std::string content;    // the reply's message content when ok
  bool ok = false;
  bool retryable = false;
};

// choices[0].message.content of a chat completion response.
std::optional<std::string> reply_content(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body).get(root)) return std::nullopt;
  std::string_view content;
  if (root["choices"].at(0)["message"]["content"].get_string().get(content)) return std::nullopt;
  return std::string(content);
}

}  // namespace

struct HttpJudgeBackend::State {
  std::string url;
  std::mutex mutex;
  std::condition_variable slot_free;
  std::size_t in_flight = 0;
  std::atomic<std::size_t> attempts{0}, retries{0}, failures{0}, max_in_flight{0};

  Attempt post(const HttpJudgeOptions& options, const std::string& payload, std::chrono::milliseconds timeout) {
    Attempt attempt;
    CURL* curl = curl_easy_init();
    if (curl == nullptr) {
      attempt.retryable = true;
      return attempt;
    }
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Accept: application/json");
    headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip (and its 1 s wait) for big bodies
    const std::string key = environment(options.api_key_env);
    std::string authorization;
    if (!key.empty()) {
      authorization = "Authorization: Bearer " + key;
      headers = curl_slist_append(headers, authorization.c_str());
    }
    Body body;
    body.limit = options.max_reply_bytes;
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for DNS timeouts: we run on worker threads
    curl_easy_setopt(curl, CURLOPT_NOPROXY, "localhost,127.0.0.1,::1");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<long long>(1, timeout.count())));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::max<long long>(1, std::min(options.connect_timeout, timeout).count())));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    const CURLcode code = curl_easy_perform(curl);
    if (code == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &attempt.status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);

    if (code != CURLE_OK) {
      // Network errors and timeouts are worth another try; a body over the limit is not.
      attempt.retryable = !body.overflow;
      return attempt;
    }
    if (attempt.status == 200) {
      if (auto content = reply_content(body.text)) {
        attempt.ok = true;
        attempt.content = std::move(*content);
      } else {
        attempt.retryable = true;  // garbage from an overloaded or restarting server
      }
      return attempt;
    }
    attempt.retryable = attempt.status == 408 || attempt.status == 429 || attempt.status >= 500;
    return attempt;
  }

  void acquire(std::size_t limit) {
    std::unique_lock lock(mutex);
    slot_free.wait(lock, [&] { return in_flight < limit; });
    ++in_flight;
    std::size_t seen = max_in_flight.load();
    while (in_flight > seen && !max_in_flight.compare_exchange_weak(seen, in_flight)) {
    }
  }

  void release() {
    {
      std::lock_guard lock(mutex);
      --in_flight;
    }
    slot_free.notify_one();
  }
};

HttpJudgeBackend::HttpJudgeBackend(HttpJudgeOptions options)
    : options_(std::move(options)), state_(std::make_shared<State>()) {
  std::string base = options_.base_url.empty() ? environment(options_.base_url_env) : options_.base_url;
  GRPO_CHECK_CONFIG(!base.empty(), "HttpJudgeBackend: no endpoint: set base_url or the environment variable '{}'",
                    options_.base_url_env);
  GRPO_CHECK_CONFIG(base.rfind("http://", 0) == 0 || base.rfind("https://", 0) == 0,
                    "HttpJudgeBackend: base_url must start with http:// or https://, got '{}'", base);
  while (!base.empty() && base.back() == '/') base.pop_back();
  state_->url = base + "/chat/completions";
  GRPO_CHECK_CONFIG(!options_.model.empty(), "HttpJudgeBackend: option 'model' is required");
  GRPO_CHECK_CONFIG(options_.max_concurrency > 0, "HttpJudgeBackend: max_concurrency must be > 0");
  GRPO_CHECK_CONFIG(options_.timeout.count() > 0, "HttpJudgeBackend: timeout must be > 0 ms, got {} ms",
                    options_.timeout.count());
  GRPO_CHECK_CONFIG(options_.connect_timeout.count() > 0, "HttpJudgeBackend: connect_timeout must be > 0 ms");
  GRPO_CHECK_CONFIG(options_.initial_backoff.count() >= 0 && options_.max_backoff >= options_.initial_backoff,
                    "HttpJudgeBackend: need 0 <= initial_backoff <= max_backoff, got {} ms and {} ms",
                    options_.initial_backoff.count(), options_.max_backoff.count());
  GRPO_CHECK_CONFIG(options_.backoff_multiplier >= 1.0 && std::isfinite(options_.backoff_multiplier),
                    "HttpJudgeBackend: backoff_multiplier must be >= 1, got {}", options_.backoff_multiplier);
  GRPO_CHECK_CONFIG(options_.temperature >= 0.0 && std::isfinite(options_.temperature),
                    "HttpJudgeBackend: temperature must be finite and >= 0, got {}", options_.temperature);
  GRPO_CHECK_CONFIG(options_.max_tokens > 0, "HttpJudgeBackend: max_tokens must be > 0");
  GRPO_CHECK_CONFIG(options_.max_reply_bytes > 0, "HttpJudgeBackend: max_reply_bytes must be > 0");
  init_curl_once();
}

HttpJudgeBackend::~HttpJudgeBackend() = default;

HttpJudgeStats HttpJudgeBackend::stats() const {
  return HttpJudgeStats{state_->attempts.load(), state_->retries.load(), state_->failures.load(),
                        state_->max_in_flight.load()};
}

std::vector<std::optional<std::string>> HttpJudgeBackend::complete(std::span<const JudgeRequest> requests,
                                                                   const ScoringContext& context) const {
  std::vector<std::optional<std::string>> replies(requests.size());
  const auto one = [&](const JudgeRequest& request) -> std::optional<std::string> {
    std::string payload = "{\"model\":" + json_quoted(options_.model) + ",\"messages\":[";
    if (!request.system.empty()) payload += "{\"role\":\"system\",\"content\":" + json_quoted(request.system) + "},";
    payload += "{\"role\":\"user\",\"content\":" + json_quoted(request.user) + "}]";
    payload += fmt::format(",\"temperature\":{},\"max_tokens\":{},\"stream\":false}}", options_.temperature,
                           options_.max_tokens);
    for (std::size_t attempt = 0; attempt <= options_.max_retries; ++attempt) {
      const auto now = Clock::now();
      if (now >= context.deadline) break;
      auto timeout = options_.timeout;
      if (context.deadline != Clock::time_point::max()) {
        timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(context.deadline - now));
      }
      state_->acquire(options_.max_concurrency);
      ++state_->attempts;
      Attempt result = state_->post(options_, payload, timeout);
      state_->release();
      if (result.ok) return std::move(result.content);
      if (!result.retryable || attempt == options_.max_retries) break;
      const double factor = std::pow(options_.backoff_multiplier, static_cast<double>(attempt));
      const auto wait = std::min(options_.max_backoff, std::chrono::milliseconds(static_cast<long long>(
                                                           static_cast<double>(options_.initial_backoff.count()) * factor)));
      if (Clock::now() + wait >= context.deadline) break;
      ++state_->retries;
      std::this_thread::sleep_for(wait);
    }
    ++state_->failures;
    return std::nullopt;
  };

  // Up to max_concurrency threads per call; the shared slot count bounds requests in flight over all calls.
  const std::size_t workers = std::min(requests.size(), options_.max_concurrency);
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next++; i < requests.size(); i = next++) replies[i] = one(requests[i]);
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (std::thread& thread : threads) thread.join();
  return replies;
}

}  // namespace grpo::rewards
