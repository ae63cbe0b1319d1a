// SPDX-License-Identifier: Apache-2.0
// Private: the library's one way to split a CPU kernel's loop over LibTorch's thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace grpo::detail {

/// fn(begin, end) over [0, n) split into at most at::get_num_threads() contiguous ranges of at least `grain`, the
/// first on the calling thread, the others on the library's worker pool (parallel_ranges.cpp; fresh std::threads
/// when the pool is busy). Why not at::parallel_for: in LibTorch 1.13 it is an inline template that only runs in
/// parallel when the calling translation unit is compiled with -fopenmp (it expands to `#pragma omp parallel`),
/// which this library is not (and should not force on its users); without it every call silently runs on one
/// thread. Handing a range to a worker costs a few microseconds, so callers choose `grain` to give each task tens of
/// microseconds or more. fn must not throw.
void parallel_ranges(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace grpo::detail
