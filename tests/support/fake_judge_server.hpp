// SPDX-License-Identifier: Apache-2.0
// A fake OpenAI-compatible chat server on loopback for the judge reward's tests and the multi-domain r1_zero test:
// scripted replies, bounded in connections and lifetime, recording every request.
#pragma once

#include <grpo/core/json_quote.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace grpo::testing {

/// One scripted answer of the fake server.
struct Reply {
  int status = 200;
  std::string body;
  std::chrono::milliseconds delay{0};
};

inline std::string chat_body(const std::string& content) {
  return R"({"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":)" +
         grpo::json_quoted(content) + R"(},"finish_reason":"stop"}]})";
}

/// A fake OpenAI-compatible server on 127.0.0.1: the n-th connection gets script[min(n, size − 1)], or, when built
/// with a responder, the reply the responder gives for the request's text (deterministic per request). Each connection
/// is served on its own thread; the server accepts at most `max_connections` and stops by itself after `lifetime`
/// (or when destroyed), so no loop is unbounded.
class FakeServer {
 public:
  using Responder = std::function<Reply(const std::string& request)>;

  explicit FakeServer(Responder responder, std::size_t max_connections = 32,
                      std::chrono::milliseconds lifetime = std::chrono::milliseconds(15000))
      : FakeServer(std::vector<Reply>{}, max_connections, lifetime, std::move(responder)) {}

  explicit FakeServer(std::vector<Reply> script, std::size_t max_connections = 32,
                      std::chrono::milliseconds lifetime = std::chrono::milliseconds(15000), Responder responder = {})
      : script_(std::move(script)), responder_(std::move(responder)), max_connections_(max_connections),
        stop_at_(std::chrono::steady_clock::now() + lifetime) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_, 16) == 0);
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~FakeServer() {
    stop_ = true;
    acceptor_.join();
    for (std::thread& handler : handlers_) handler.join();
    ::close(listener_);
  }

  std::string base_url() const { return fmt::format("http://127.0.0.1:{}/v1", port_); }
  std::size_t connections() const { return accepted_.load(); }
  std::size_t max_concurrent() const { return max_active_.load(); }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void accept_loop() {
    while (!stop_ && std::chrono::steady_clock::now() < stop_at_ && accepted_ < max_connections_) {
      pollfd ready{listener_, POLLIN, 0};
      if (::poll(&ready, 1, 20) <= 0) continue;
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const std::size_t index = accepted_++;
      handlers_.emplace_back([this, client, index] { serve(client, index); });
    }
  }

  void serve(int client, std::size_t index) {
    const std::size_t now_active = ++active_;
    std::size_t seen = max_active_.load();
    while (now_active > seen && !max_active_.compare_exchange_weak(seen, now_active)) {
    }
    std::string request;
    char buffer[4096];
    std::size_t header_end = std::string::npos, content_length = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < give_up) {
      pollfd ready{client, POLLIN, 0};
      if (::poll(&ready, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      request.append(buffer, static_cast<std::size_t>(n));
      if (header_end == std::string::npos && (header_end = request.find("\r\n\r\n")) != std::string::npos) {
        const std::size_t field = request.find("Content-Length:");
        if (field != std::string::npos && field < header_end) content_length = std::stoul(request.substr(field + 15));
      }
      if (header_end != std::string::npos && request.size() >= header_end + 4 + content_length) break;
    }
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(request);
    }
    const Reply reply = responder_ ? responder_(request) : script_[std::min(index, script_.size() - 1)];
    const auto wake = std::chrono::steady_clock::now() + reply.delay;
    while (!stop_ && std::chrono::steady_clock::now() < wake) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    --active_;  // before answering: once the client has its answer it may start the next request
    const std::string response = fmt::format(
        "HTTP/1.1 {} Scripted\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        reply.status, reply.body.size(), reply.body);
    (void)!::send(client, response.data(), response.size(), MSG_NOSIGNAL);
    ::close(client);
  }

  std::vector<Reply> script_;
  Responder responder_;
  std::size_t max_connections_;
  std::chrono::steady_clock::time_point stop_at_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> accepted_{0}, active_{0}, max_active_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
  std::thread acceptor_;
  std::vector<std::thread> handlers_;
};

}  // namespace grpo::testing
