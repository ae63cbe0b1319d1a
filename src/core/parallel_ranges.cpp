// SPDX-License-Identifier: Apache-2.0
// parallel_ranges (parallel_ranges.hpp) on a pool of worker threads that live as long as the program.
//
// Decoding calls a kernel ~150 times per token (every projection and every layer's attention), each a fraction of
// a millisecond; starting a std::thread per call (~20–50 µs, and the late start of the second half) cost a fifth of
// a small projection's time. Workers wait for the next call spinning for a short while, then asleep on a condition
// variable (so an idle program uses no CPU). A call made while the pool is busy (from another thread, or nested in a
// task) or in a forked child (the workers are the parent's) starts threads of its own as before.
#include "parallel_ranges.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

namespace grpo::detail {
namespace {

using RangeFn = std::function<void(int64_t, int64_t)>;

/// One step of a spin-wait: tells the core it is waiting (x86 PAUSE), which spares the memory system.
inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Task t of a call: [t·chunk, min(n, (t + 1)·chunk)).
void run_task(const RangeFn& fn, int64_t task, int64_t n, int64_t chunk) {
  const int64_t begin = task * chunk, end = std::min(n, begin + chunk);
  if (begin < end) fn(begin, end);
}

void run_on_new_threads(int64_t tasks, int64_t n, int64_t chunk, const RangeFn& fn) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(tasks - 1));
  for (int64_t t = 1; t < tasks; ++t) threads.emplace_back([&fn, t, n, chunk] { run_task(fn, t, n, chunk); });
  run_task(fn, 0, n, chunk);
  for (auto& thread : threads) thread.join();
}

class WorkerPool {
 public:
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& thread : threads_) thread.join();
  }

  /// Runs tasks 1 .. tasks − 1 on workers and task 0 on the caller; false (nothing run) when the pool is in use or
  /// this is a forked child.
  bool try_run(int64_t tasks, int64_t n, int64_t chunk, const RangeFn& fn) {
    if (::getpid() != owner_) return false;
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    while (static_cast<int64_t>(threads_.size()) < tasks - 1) {
      const int index = static_cast<int>(threads_.size());
      threads_.emplace_back([this, index] { work(index); });
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      tasks_ = tasks;
      n_ = n;
      chunk_ = chunk;
      pending_.store(static_cast<int64_t>(threads_.size()), std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    run_task(fn, 0, n, chunk);
    await([this] { return pending_.load(std::memory_order_acquire) == 0; }, done_);
    return true;
  }

 private:
  /// How long a waiting thread spins before it sleeps (on 2 cores a longer spin holds a core that LibTorch's
  /// OpenMP threads want between the kernels; 20–200 µs measured alike for decoding).
  static constexpr std::chrono::microseconds kSpin{50};

  /// Returns once done() holds: spins for up to kSpin, then sleeps on `cv` (notified under mutex_).
  template <typename Done>
  void await(const Done& done, std::condition_variable& cv) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    while (!done() && std::chrono::steady_clock::now() < spin_until) relax();
    if (done()) return;
    std::unique_lock<std::mutex> lock(mutex_);
    cv.wait(lock, done);
  }

  void work(int index) {
    uint64_t seen = 0;
    for (;;) {
      await([&] { return generation_.load(std::memory_order_acquire) != seen; }, wake_);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_) return;
      if (index + 1 < tasks_) run_task(*fn_, index + 1, n_, chunk_);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_one();
      }
    }
  }

  const pid_t owner_ = ::getpid();
  std::mutex busy_;   // held by the caller of a run
  std::mutex mutex_;  // guards the job and the condition variables
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> generation_{0};  // one more per run: what wakes the workers
  std::atomic<int64_t> pending_{0};      // workers that have not finished this run
  const RangeFn* fn_ = nullptr;
  int64_t tasks_ = 0, n_ = 0, chunk_ = 0;
  bool stop_ = false;
};

}  // namespace

void parallel_ranges(int64_t n, int64_t grain, const RangeFn& fn) {
  if (n <= 0) return;
  const int64_t tasks =
      std::min<int64_t>(std::max(at::get_num_threads(), 1), (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (tasks <= 1) return fn(0, n);
  const int64_t chunk = (n + tasks - 1) / tasks;
  static WorkerPool pool;
  if (!pool.try_run(tasks, n, chunk, fn)) run_on_new_threads(tasks, n, chunk, fn);
}

}  // namespace grpo::detail
