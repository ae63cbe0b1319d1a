// SPDX-License-Identifier: Apache-2.0
// The prefetch cache and the background prefetcher (see reward_prefetch.hpp).
#include <grpo/core/error.hpp>
#include <grpo/rewards/reward_prefetch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <set>
#include <string_view>
#include <utility>

namespace grpo::rewards {

namespace {

using Clock = std::chrono::steady_clock;

void mix(std::size_t& seed, std::size_t value) {
  seed ^= value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

// The row is left out so that equal rows behind different pointers still meet; it is compared on a hash match.
std::size_t completion_hash(const Completion& c) {
  std::size_t seed = std::hash<std::string_view>{}(c.text);
  mix(seed, std::hash<std::string_view>{}(c.prompt));
  mix(seed, std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(c.token_ids.data()),
                                                           c.token_ids.size() * sizeof(std::int64_t))));
  mix(seed, c.truncated ? 1 : 0);
  return seed;
}

bool same_row(const std::shared_ptr<const Row>& a, const std::shared_ptr<const Row>& b) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr) return false;
  return a->fields() == b->fields();
}

bool same_completion(const Completion& a, const Completion& b) {
  return a.truncated == b.truncated && a.text == b.text && a.token_ids == b.token_ids && a.prompt == b.prompt &&
         same_row(a.row, b.row);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// PrefetchedReward

PrefetchedReward::PrefetchedReward(RewardPtr inner, PrefetchedRewardOptions options)
    : inner_(std::move(inner)), options_(std::move(options)) {
  GRPO_CHECK_CONFIG(inner_ != nullptr, "PrefetchedReward: the wrapped reward is null");
  name_ = inner_->name();
  GRPO_CHECK_CONFIG(inner_->scope() == RewardScope::completion,
                    "PrefetchedReward: reward '{}' is batch-scoped (its values depend on the whole batch), so it "
                    "cannot be scored chunk by chunk ahead of time; leave it unwrapped",
                    name_);
}

const PrefetchedReward::Entry* PrefetchedReward::find_locked(const Completion& completion, std::size_t hash) const {
  const auto [first, last] = index_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    if (same_completion(it->second->completion, completion)) return &*it->second;
  }
  return nullptr;
}

std::vector<std::optional<float>> PrefetchedReward::score(std::span<const Completion> batch,
                                                          const ScoringContext& context) const {
  std::vector<std::optional<float>> values(batch.size());
  std::vector<std::size_t> misses;
  {
    std::lock_guard lock(mutex_);
    if (!order_.empty()) {
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (const Entry* entry = find_locked(batch[i], completion_hash(batch[i]))) {
          values[i] = entry->value;
        } else {
          misses.push_back(i);
        }
      }
    } else {
      misses.resize(batch.size());
      for (std::size_t i = 0; i < batch.size(); ++i) misses[i] = i;
    }
    stats_.hits += batch.size() - misses.size();
    stats_.misses += misses.size();
  }
  if (misses.empty()) return values;
  if (misses.size() == batch.size()) {
    auto scored = inner_->score(batch, context);
    detail::check_result_size(*inner_, scored.size(), batch.size());
    return scored;
  }
  std::vector<Completion> rest;
  rest.reserve(misses.size());
  for (const std::size_t i : misses) rest.push_back(batch[i]);
  const auto scored = inner_->score(rest, context);
  detail::check_result_size(*inner_, scored.size(), rest.size());
  for (std::size_t k = 0; k < misses.size(); ++k) values[misses[k]] = scored[k];
  return values;
}

void PrefetchedReward::store(std::span<const Completion> batch, std::span<const std::optional<float>> values) {
  GRPO_CHECK(batch.size() == values.size(), "PrefetchedReward::store ({}): {} values for {} completions", name_,
             values.size(), batch.size());
  // Hash and copy outside the lock: the scoring threads and the trainer's score() contend for it.
  std::vector<Entry> fresh;
  fresh.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) fresh.push_back({completion_hash(batch[i]), batch[i], values[i]});
  std::lock_guard lock(mutex_);
  for (Entry& entry : fresh) {
    if (find_locked(entry.completion, entry.hash) != nullptr) continue;  // an identical completion: keep the first
    order_.push_back(std::move(entry));
    index_.emplace(order_.back().hash, std::prev(order_.end()));
    ++stats_.stored;
    while (options_.max_entries > 0 && order_.size() > options_.max_entries) {
      const auto oldest = order_.begin();
      const auto [first, last] = index_.equal_range(oldest->hash);
      for (auto it = first; it != last; ++it) {
        if (it->second == oldest) {
          index_.erase(it);
          break;
        }
      }
      order_.pop_front();
      ++stats_.evicted;
    }
  }
}

std::optional<std::optional<float>> PrefetchedReward::cached(const Completion& completion) const {
  std::lock_guard lock(mutex_);
  if (const Entry* entry = find_locked(completion, completion_hash(completion))) return entry->value;
  return std::nullopt;
}

void PrefetchedReward::clear() {
  // Free outside the lock: a step's entries may hold many long texts.
  Order old;
  {
    std::lock_guard lock(mutex_);
    index_.clear();
    old.swap(order_);
    stats_ = {};
  }
}

std::size_t PrefetchedReward::size() const {
  std::lock_guard lock(mutex_);
  return order_.size();
}

PrefetchStats PrefetchedReward::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

// ---------------------------------------------------------------------------------------------------------------
// RewardPrefetcher

// Exceptions recorded by the scoring calls, for wait(). Shared with the recorders, which an abandoned call keeps alive.
struct RewardPrefetcher::Errors {
  std::mutex mutex;
  std::exception_ptr first;   // a wrapped reward's exception (rethrown under ErrorPolicy::rethrow)
  std::exception_ptr misuse;  // a broken contract (always rethrown)
  std::size_t not_stored = 0;
};

namespace {

// What the prefetcher's executor runs: the wrapped reward's inner reward on a part of a chunk; the values that
// arrived before the call's deadline are stored in the wrapper's cache. The executor applies budgets and splits.
class Recorder final : public RewardFunction {
 public:
  using OnError = std::function<void(std::exception_ptr error, bool misuse)>;

  Recorder(std::shared_ptr<PrefetchedReward> target, OnError on_error)
      : target_(std::move(target)), on_error_(std::move(on_error)) {}

  std::string name() const override { return target_->name(); }

  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override {
    std::vector<std::optional<float>> values;
    try {
      values = target_->inner()->score(batch, context);
    } catch (...) {
      // A late exception belongs to an abandoned (or over-budget) call: sequential scoring would not see it either.
      if (Clock::now() <= context.deadline) on_error_(std::current_exception(), false);
      throw;
    }
    if (values.size() != batch.size()) {
      try {
        detail::check_result_size(*target_->inner(), values.size(), batch.size());
      } catch (...) {
        on_error_(std::current_exception(), true);
        throw;
      }
    }
    // The executor's own test for lateness (now > deadline), taken after the call as it does: a late value is not
    // cached (the executor counts it over budget).
    if (Clock::now() <= context.deadline) target_->store(batch, values);
    return values;
  }

 private:
  std::shared_ptr<PrefetchedReward> target_;
  OnError on_error_;
};

RewardExecutorOptions executor_options(const RewardPrefetcherOptions& options) {
  GRPO_CHECK_CONFIG(options.threads >= 1, "RewardPrefetcherOptions::threads must be >= 1, got 0 (the chunks are "
                                          "scored on background threads)");
  RewardExecutorOptions executor;
  executor.num_threads = options.threads;
  executor.budget = options.budget;
  executor.on_error = ErrorPolicy::no_value;  // the recorders keep the exceptions; the executor must not throw them
  return executor;
}

}  // namespace

RewardPrefetcher::RewardPrefetcher(std::vector<std::shared_ptr<PrefetchedReward>> rewards,
                                   RewardPrefetcherOptions options)
    : rewards_(std::move(rewards)),
      options_(options),
      errors_(std::make_shared<Errors>()),
      executor_(executor_options(options)) {
  for (std::size_t k = 0; k < rewards_.size(); ++k) {
    GRPO_CHECK_CONFIG(rewards_[k] != nullptr, "RewardPrefetcher: rewards[{}] is null", k);
    recorders_.push_back(std::make_shared<Recorder>(
        rewards_[k], [errors = errors_, keep = options_.on_error == ErrorPolicy::rethrow](std::exception_ptr error,
                                                                                          bool misuse) {
          std::lock_guard lock(errors->mutex);
          if (misuse) {
            if (!errors->misuse) errors->misuse = error;
          } else if (keep && !errors->first) {
            errors->first = error;
          }
        }));
  }
  thread_ = std::thread([this] { run(); });
}

RewardPrefetcher::~RewardPrefetcher() {
  {
    std::unique_lock lock(mutex_);
    wait_idle(lock);
    stopping_ = true;
  }
  work_ready_.notify_all();
  thread_.join();
}

void RewardPrefetcher::run() {
  while (true) {
    std::vector<Completion> chunk;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      chunk = std::move(queue_.front());
      queue_.pop_front();
    }
    for (std::size_t k = 0; k < rewards_.size(); ++k) {
      const auto& accept = rewards_[k]->options().prefetch_if;
      try {
        RewardScores scores;
        if (!accept) {
          scores = executor_.score(recorders_[k], chunk);
        } else {
          std::vector<Completion> part;
          for (const Completion& c : chunk) {
            if (accept(c)) part.push_back(c);
          }
          if (!part.empty()) scores = executor_.score(recorders_[k], part);
        }
        // Over budget (abandoned or late) and failed calls stored nothing. The executor's fractions are counts / n.
        const double failed = (scores.metrics.frac_over_budget + scores.metrics.frac_error) *
                              static_cast<double>(scores.metrics.count);
        std::lock_guard lock(errors_->mutex);
        errors_->not_stored += static_cast<std::size_t>(std::llround(failed));
      } catch (...) {
        // A broken contract (already recorded by the recorder) or a throwing prefetch_if: wait() reports it.
        std::lock_guard lock(errors_->mutex);
        if (!errors_->misuse) errors_->misuse = std::current_exception();
      }
    }
    {
      std::lock_guard lock(mutex_);
      --pending_;
    }
    idle_.notify_all();
  }
}

void RewardPrefetcher::wait_idle(std::unique_lock<std::mutex>& lock) {
  idle_.wait(lock, [&] { return pending_ == 0; });
}

void RewardPrefetcher::submit(std::vector<Completion> chunk) {
  if (chunk.empty()) return;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(chunk));
    ++pending_;
  }
  work_ready_.notify_one();
}

void RewardPrefetcher::wait() {
  {
    std::unique_lock lock(mutex_);
    wait_idle(lock);
  }
  std::exception_ptr error;
  {
    std::lock_guard lock(errors_->mutex);
    error = errors_->misuse ? errors_->misuse : errors_->first;
    errors_->misuse = nullptr;
    errors_->first = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void RewardPrefetcher::clear() {
  {
    std::unique_lock lock(mutex_);
    wait_idle(lock);
  }
  {
    std::lock_guard lock(errors_->mutex);
    errors_->misuse = nullptr;
    errors_->first = nullptr;
    errors_->not_stored = 0;
  }
  for (const auto& reward : rewards_) reward->clear();
}

std::size_t RewardPrefetcher::pending() const {
  std::lock_guard lock(mutex_);
  return pending_;
}

std::size_t RewardPrefetcher::not_stored() const {
  std::lock_guard lock(errors_->mutex);
  return errors_->not_stored;
}

// ---------------------------------------------------------------------------------------------------------------
// wrap_for_prefetch

PrefetchWrapped wrap_for_prefetch(const RewardSet& set, const std::vector<std::string>& labels,
                                  PrefetchedRewardOptions options) {
  std::set<std::string, std::less<>> wanted(labels.begin(), labels.end());
  for (const std::string& label : wanted) {
    const auto& entries = set.entries();
    const bool found = std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.label == label; });
    GRPO_CHECK_CONFIG(found, "wrap_for_prefetch: no reward labelled '{}' in the set", label);
  }
  std::vector<RewardSetEntry> entries;
  std::vector<std::shared_ptr<PrefetchedReward>> prefetched;
  for (const RewardSetEntry& entry : set.entries()) {
    RewardSetEntry copy = entry;
    if (wanted.contains(entry.label)) {
      try {
        auto wrapper = std::make_shared<PrefetchedReward>(entry.reward, options);
        prefetched.push_back(wrapper);
        copy.reward = std::move(wrapper);
      } catch (const ConfigError& error) {
        throw ConfigError(fmt::format("wrap_for_prefetch: entry '{}': {}", entry.label, error.what()));
      }
    }
    entries.push_back(std::move(copy));
  }
  const RewardExecutorOptions& executor = set.options().executor;
  RewardPrefetcherOptions prefetcher;
  prefetcher.threads = std::max<std::size_t>(1, executor.num_threads);
  prefetcher.budget = executor.budget;
  prefetcher.on_error = executor.on_error;
  return {RewardSet(std::move(entries), set.options()), std::move(prefetched), prefetcher};
}

}  // namespace grpo::rewards
