// SPDX-License-Identifier: Apache-2.0
#include "parallel_ranges.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace grpo::detail {

void parallel_ranges(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t tasks = std::min<int64_t>(std::max(at::get_num_threads(), 1), (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (tasks <= 1) return fn(0, n);
  const int64_t chunk = (n + tasks - 1) / tasks;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(tasks - 1));
  for (int64_t t = 1; t < tasks; ++t) {
    const int64_t begin = t * chunk, end = std::min(n, begin + chunk);
    if (begin < end) threads.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(0, std::min(n, chunk));
  for (auto& thread : threads) thread.join();
}

}  // namespace grpo::detail
