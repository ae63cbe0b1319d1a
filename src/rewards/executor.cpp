// SPDX-License-Identifier: Apache-2.0
// The reward executor's thread pool and budget enforcement (see executor.hpp).
#include <grpo/core/error.hpp>
#include <grpo/rewards/executor.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace grpo::rewards {

using Clock = std::chrono::steady_clock;

RewardMetrics summarize(std::span<const std::optional<float>> values) {
  RewardMetrics metrics;
  metrics.count = values.size();
  if (values.empty()) return metrics;
  std::size_t present = 0;
  double sum = 0.0;
  for (const auto& value : values) {
    if (value) {
      ++present;
      sum += *value;
    }
  }
  metrics.frac_no_value = static_cast<double>(values.size() - present) / static_cast<double>(values.size());
  if (present == 0) return metrics;
  metrics.mean = sum / static_cast<double>(present);
  if (present >= 2) {
    double squares = 0.0;
    for (const auto& value : values) {
      if (value) squares += (*value - metrics.mean) * (*value - metrics.mean);
    }
    metrics.std = std::sqrt(squares / static_cast<double>(present - 1));
  }
  return metrics;
}

// Workers are detached threads that share ownership of the pool state, so a worker stuck in an abandoned call can
// outlive the executor. A worker whose call was abandoned is "retired": it exits when the call returns, and a
// fresh worker takes its place, so the pool keeps num_threads workers able to take new work.
struct RewardExecutor::Pool {
  using Retired = std::shared_ptr<std::atomic<bool>>;
  using Task = std::function<void(const Retired&)>;

  std::mutex mutex;
  std::condition_variable work_ready;
  std::condition_variable workers_exited;
  std::deque<Task> queue;
  bool stopping = false;
  std::size_t live_workers = 0;  // workers not retired and not yet exited

  static void spawn(const std::shared_ptr<Pool>& pool) {
    {
      std::lock_guard lock(pool->mutex);
      ++pool->live_workers;
    }
    std::thread([pool, retired = std::make_shared<std::atomic<bool>>(false)] { pool->run(retired); }).detach();
  }

  void run(const Retired& retired) {
    while (true) {
      Task task;
      {
        std::unique_lock lock(mutex);
        work_ready.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) {  // stopping
          --live_workers;
          workers_exited.notify_all();
          return;
        }
        task = std::move(queue.front());
        queue.pop_front();
      }
      task(retired);
      if (retired->load()) return;  // a replacement already took this worker's place in live_workers
    }
  }

  /// Called when a worker's call was abandoned: that worker no longer counts, a new one is started.
  static void retire(const std::shared_ptr<Pool>& pool, const Retired& retired) {
    retired->store(true);
    {
      std::lock_guard lock(pool->mutex);
      --pool->live_workers;
    }
    spawn(pool);
  }

  void push(Task task) {
    {
      std::lock_guard lock(mutex);
      queue.push_back(std::move(task));
    }
    work_ready.notify_one();
  }

  void stop() {
    std::unique_lock lock(mutex);
    stopping = true;
    work_ready.notify_all();
    workers_exited.wait(lock, [&] { return live_workers == 0; });
  }
};

namespace {

// One score() call: the batch is split into ranges, each scored by one call of the reward. The job is shared with
// the workers, so an abandoned call still owns everything it touches.
struct Job {
  enum class State { queued, running, done, abandoned };
  struct Range {
    std::size_t begin = 0, end = 0;
    State state = State::queued;
    Clock::time_point start;
    std::shared_ptr<std::atomic<bool>> worker_retired;
  };

  RewardPtr reward;
  std::vector<Completion> owned;  // a copy of the batch when calls may be abandoned
  std::span<const Completion> batch;
  std::chrono::milliseconds budget{0};  // per completion; 0 = none
  std::vector<Range> ranges;

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::optional<float>> values;
  std::vector<char> over_budget;
  std::vector<char> errored;
  std::exception_ptr first_error;
  std::exception_ptr misuse;  // a broken contract (wrong number of values), rethrown as grpo::Error

  Clock::duration range_budget(const Range& range) const { return budget * static_cast<long>(range.end - range.begin); }

  Clock::time_point deadline_of(const Range& range) const {
    return budget.count() > 0 ? range.start + range_budget(range) : Clock::time_point::max();
  }

  // Records the outcome of one call. Caller holds the mutex.
  void finish(Range& range, std::vector<std::optional<float>> result, std::exception_ptr error, bool late,
              std::optional<float> fallback) {
    range.state = State::done;
    const std::size_t size = range.end - range.begin;
    if (error) {
      if (!first_error) first_error = error;
      for (std::size_t i = range.begin; i < range.end; ++i) errored[i] = 1;
      return;
    }
    try {
      detail::check_result_size(*reward, result.size(), size);
    } catch (const Error&) {
      misuse = std::current_exception();
      return;
    }
    for (std::size_t i = 0; i < size; ++i) {
      if (late) {
        over_budget[range.begin + i] = 1;
        values[range.begin + i] = fallback;
      } else {
        values[range.begin + i] = result[i];
      }
    }
  }

  // Runs range `index` on the current thread (a worker, or the caller when there is no pool).
  void run(std::size_t index, const std::shared_ptr<std::atomic<bool>>& worker_retired, std::optional<float> fallback) {
    ScoringContext context;
    std::size_t begin = 0, end = 0;
    {
      std::lock_guard lock(mutex);
      Range& range = ranges[index];
      range.state = State::running;
      range.start = Clock::now();
      range.worker_retired = worker_retired;
      context.deadline = deadline_of(range);
      begin = range.begin;
      end = range.end;
    }
    changed.notify_all();  // the coordinator may be waiting without a timer: it must start this range's clock
    std::vector<std::optional<float>> result;
    std::exception_ptr error;
    try {
      result = reward->score(batch.subspan(begin, end - begin), context);
    } catch (...) {
      error = std::current_exception();
    }
    const bool late = Clock::now() > context.deadline;
    {
      std::lock_guard lock(mutex);
      Range& range = ranges[index];
      if (range.state == State::abandoned) return;  // the coordinator already applied the fallback
      finish(range, std::move(result), error, late, fallback);
    }
    changed.notify_all();
  }
};

std::vector<Job::Range> split(std::size_t size, std::size_t parts) {
  std::vector<Job::Range> ranges;
  parts = std::max<std::size_t>(1, std::min(parts, size));
  for (std::size_t p = 0; p < parts; ++p) {
    Job::Range range;
    range.begin = size * p / parts;
    range.end = size * (p + 1) / parts;
    ranges.push_back(range);
  }
  return ranges;
}

}  // namespace

RewardExecutor::RewardExecutor(RewardExecutorOptions options) : options_(options) {
  GRPO_CHECK_CONFIG(options_.budget.count() >= 0, "RewardExecutorOptions::budget must be >= 0 ms, got {} ms",
                    options_.budget.count());
  if (options_.num_threads > 0) {
    pool_ = std::make_shared<Pool>();
    for (std::size_t i = 0; i < options_.num_threads; ++i) Pool::spawn(pool_);
  }
}

RewardExecutor::~RewardExecutor() {
  if (pool_) pool_->stop();
}

RewardExecutor::RewardExecutor(RewardExecutor&&) noexcept = default;

RewardExecutor& RewardExecutor::operator=(RewardExecutor&& other) noexcept {
  if (this != &other) {
    if (pool_) pool_->stop();
    options_ = other.options_;
    pool_ = std::move(other.pool_);
  }
  return *this;
}

RewardScores RewardExecutor::score(const RewardPtr& reward, std::span<const Completion> batch) const {
  GRPO_CHECK(reward != nullptr, "RewardExecutor::score: reward is null");
  const auto started = Clock::now();
  const std::size_t size = batch.size();
  const bool budgeted = options_.budget.count() > 0;
  const std::optional<float> fallback =
      options_.fallback == BudgetFallback::zero ? std::optional<float>(0.0f) : std::nullopt;

  auto job = std::make_shared<Job>();
  job->reward = reward;
  job->budget = options_.budget;
  job->values.assign(size, std::nullopt);
  job->over_budget.assign(size, 0);
  job->errored.assign(size, 0);
  if (size > 0) {
    if (reward->scope() == RewardScope::batch) {
      job->ranges = split(size, 1);
    } else if (budgeted) {
      job->ranges = split(size, size);
    } else {
      job->ranges = split(size, std::max<std::size_t>(1, options_.num_threads));
    }
  }

  if (!pool_) {
    job->batch = batch;
    for (std::size_t i = 0; i < job->ranges.size(); ++i) job->run(i, nullptr, fallback);
  } else {
    if (budgeted) {
      job->owned.assign(batch.begin(), batch.end());
      job->batch = job->owned;
    } else {
      job->batch = batch;
    }
    for (std::size_t i = 0; i < job->ranges.size(); ++i) {
      pool_->push([job, i, fallback](const std::shared_ptr<std::atomic<bool>>& retired) { job->run(i, retired, fallback); });
    }
    std::unique_lock lock(job->mutex);
    while (true) {
      bool pending = false;
      auto next_deadline = Clock::time_point::max();
      const auto now = Clock::now();
      for (Job::Range& range : job->ranges) {
        if (range.state == Job::State::queued) pending = true;
        if (range.state != Job::State::running) continue;
        const auto deadline = job->deadline_of(range);
        if (now >= deadline) {
          range.state = Job::State::abandoned;
          for (std::size_t k = range.begin; k < range.end; ++k) {
            job->over_budget[k] = 1;
            job->values[k] = fallback;
          }
          Pool::retire(pool_, range.worker_retired);
        } else {
          pending = true;
          next_deadline = std::min(next_deadline, deadline);
        }
      }
      if (!pending) break;
      if (next_deadline == Clock::time_point::max()) {
        job->changed.wait(lock);
      } else {
        job->changed.wait_until(lock, next_deadline);
      }
    }
  }

  if (job->misuse) std::rethrow_exception(job->misuse);
  if (job->first_error && options_.on_error == ErrorPolicy::rethrow) std::rethrow_exception(job->first_error);

  RewardScores scores;
  scores.values = std::move(job->values);
  scores.metrics = summarize(scores.values);
  if (size > 0) {
    const auto fraction = [size](const std::vector<char>& flags) {
      return static_cast<double>(std::count(flags.begin(), flags.end(), char{1})) / static_cast<double>(size);
    };
    scores.metrics.frac_over_budget = fraction(job->over_budget);
    scores.metrics.frac_error = fraction(job->errored);
  }
  scores.metrics.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return scores;
}

}  // namespace grpo::rewards
