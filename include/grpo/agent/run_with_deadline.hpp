// SPDX-License-Identifier: Apache-2.0
// Running a tool call or an environment step that may hang: on a thread of its own, abandoned at its deadline.
#pragma once

#include <chrono>
#include <future>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace grpo::agent {

/// Runs `f()` on a thread of its own and waits at most `timeout` for it. Returns its result (an exception it throws
/// is rethrown here), or nullopt when the time ran out: the thread is then detached, keeps what `f` captured alive
/// and finishes, or not, on its own, so `f` must own (capture by value) everything it touches.
template <typename F>
std::optional<std::invoke_result_t<F&>> run_with_deadline(F f, std::chrono::milliseconds timeout) {
  std::packaged_task<std::invoke_result_t<F&>()> task(std::move(f));
  auto result = task.get_future();
  std::thread worker(std::move(task));
  if (result.wait_for(timeout) != std::future_status::ready) {
    worker.detach();
    return std::nullopt;
  }
  worker.join();
  return result.get();
}

}  // namespace grpo::agent
