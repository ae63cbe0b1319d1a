// SPDX-License-Identifier: Apache-2.0
// The reward executor: scores a batch with one reward function on a thread pool, under a per-completion time
// budget that works on any thread, and summarises the values into metrics.
//
// Why not signals: math-verify's SIGALRM timeouts only work on the main thread; inside verl's and TRL's thread
// pools they were silently disabled (TRL's reward calls; Math-Verify's timeout is signal-based and does nothing off the
// main thread). Here the budget is enforced twice:
//  - cooperatively: each call gets a ScoringContext whose deadline is start + budget, which well-behaved rewards
//    (the built-in ones, the verifier) check and honour;
//  - by abandonment: with worker threads, the executor stops waiting when a completion's budget has passed,
//    records the fallback, counts it, and replaces the stuck worker with a fresh thread. The abandoned call keeps
//    its own copy of the batch and its own result slot (shared ownership), so when it finally returns it writes
//    nowhere that matters, and a process may exit while it is still running.
// A value that arrives after its budget is discarded in every mode, so serial and threaded scoring agree.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/rewards/reward_function.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace grpo::rewards {

/// What a completion gets when its budget runs out.
enum class BudgetFallback {
  no_value,  ///< std::nullopt: excluded from group statistics (default)
  zero,      ///< 0.0: counted as a wrong answer
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<BudgetFallback, 2> kBudgetFallbackNames{{
    {BudgetFallback::no_value, "none"},
    {BudgetFallback::zero, "zero"},
}};
}  // namespace detail

/// "none" (no_value) or "zero", as the executor config writes them.
GRPO_ENUM_NAMES(BudgetFallback, detail::kBudgetFallbackNames, "budget fallback");

/// What happens when a reward throws while scoring.
enum class ErrorPolicy {
  no_value,  ///< the affected completions get no value and are counted in frac_error (default)
  rethrow,   ///< the exception propagates out of RewardExecutor::score
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<ErrorPolicy, 2> kErrorPolicyNames{{
    {ErrorPolicy::no_value, "none"},
    {ErrorPolicy::rethrow, "rethrow"},
}};
}  // namespace detail

/// "none" (no_value) or "rethrow", as the executor config writes them.
GRPO_ENUM_NAMES(ErrorPolicy, detail::kErrorPolicyNames, "error policy");

struct RewardExecutorOptions {
  /// Worker threads. 0 scores in the calling thread: the budget is then only cooperative (a value that arrives late
  /// is still replaced by the fallback), so non-cooperative rewards need at least one worker.
  std::size_t num_threads = 0;
  /// Per-completion budget; zero = unlimited (the whole batch is then scored in as few calls as there are threads).
  std::chrono::milliseconds budget{0};
  BudgetFallback fallback = BudgetFallback::no_value;
  ErrorPolicy on_error = ErrorPolicy::no_value;
};

/// Summary of one reward function over one batch. Statistics cover the completions that have a value; with fewer
/// than two values std is 0, with none mean is 0 (never NaN: frac_no_value says what happened).
struct RewardMetrics {
  std::size_t count = 0;          ///< completions scored
  double mean = 0.0;              ///< mean of the values present
  double std = 0.0;               ///< Bessel-corrected std of the values present (n − 1, as TRL's nanstd)
  double frac_no_value = 0.0;     ///< fraction without a value (cannot judge, budget fallback no_value, errors)
  double frac_over_budget = 0.0;  ///< fraction whose budget ran out (the fallback was applied)
  double frac_error = 0.0;        ///< fraction whose scoring call threw
  double seconds = 0.0;           ///< wall time to score the batch
};

/// Computes count, mean, std and frac_no_value of a list of values (the time and budget fields stay 0).
RewardMetrics summarize(std::span<const std::optional<float>> values);

/// Values of one reward over a batch, with their metrics.
struct RewardScores {
  std::vector<std::optional<float>> values;  ///< [B]
  RewardMetrics metrics;
};

/// Scores batches on a pool of worker threads (see the file comment). Not copyable; one executor may be shared by
/// several reward functions, scored one after another.
class RewardExecutor {
 public:
  explicit RewardExecutor(RewardExecutorOptions options = {});
  ~RewardExecutor();
  RewardExecutor(const RewardExecutor&) = delete;
  RewardExecutor& operator=(const RewardExecutor&) = delete;
  RewardExecutor(RewardExecutor&&) noexcept;
  RewardExecutor& operator=(RewardExecutor&&) noexcept;

  /// Scores `batch` with `reward`: one value per completion, in order, plus metrics. Never throws for a slow reward;
  /// throws grpo::Error if the reward returns the wrong number of values, or rethrows the reward's exception under
  /// ErrorPolicy::rethrow.
  RewardScores score(const RewardPtr& reward, std::span<const Completion> batch) const;

  const RewardExecutorOptions& options() const { return options_; }

 private:
  struct Pool;
  RewardExecutorOptions options_;
  std::shared_ptr<Pool> pool_;  // null when num_threads == 0
};

}  // namespace grpo::rewards
