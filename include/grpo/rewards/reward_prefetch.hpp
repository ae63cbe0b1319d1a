// SPDX-License-Identifier: Apache-2.0
// Scoring while generating: rewards that wait on something (the code sandbox, an HTTP judge) score the completions
// of one chunk of prompts on background threads while the sampler produces the next chunk, and the step's ordinary
// scoring call (RewardSet, DomainRewards, TagRouter, unchanged) then finds their values in a cache.
//
// Two pieces:
//  - PrefetchedReward wraps a completion-scoped reward. It holds a cache of values computed ahead of time by
//    "prefetches"; its score() returns the cached value of each completion that has one (an identical completion:
//    same prompt, text, token ids, truncated flag and row) and scores the rest with the wrapped reward, in one call,
//    in batch order. It keeps the wrapped reward's name, so metrics keep theirs.
//  - RewardPrefetcher owns the background work: submit(chunk) returns at once and scores the chunk with every
//    wrapped reward on a RewardExecutor's threads (the same per-completion budget and abandonment as sequential
//    scoring); wait() blocks until every submitted chunk is done.
//
// Why the values are the sequential ones: a completion-scoped reward satisfies score(batch) == concatenation of
// score(part) for any split (RewardScope::completion), so a value computed for a completion inside a chunk is the
// value sequential scoring would compute inside the whole batch. Only values that arrived in time and without an
// exception are cached; a completion whose prefetch ran over its budget or threw is scored again by the ordinary
// call, whose executor then records the fallback, frac_over_budget or frac_error exactly as without prefetching (the
// price: such a completion is paid for twice). So for a deterministic reward values, totals and every metric but the
// timing fields ("seconds") are bit-identical to sequential scoring.
// A non-deterministic reward (a judge sampling at temperature > 0) gives, for a prefetched completion, one valid
// sample of its value: a different draw than the sequential call would have made, no more different than two
// sequential runs are from each other. A reward whose value depends on call order or on state changed between the
// prefetch and the step's scoring (a judge's model updated meanwhile) sees the prefetch's state.
//
// Stale entries: the cache key is the completion's full content, so a hit is always a value of the same completion;
// an entry is stale only if the reward itself changed. Call RewardPrefetcher::clear() (or PrefetchedReward::clear())
// at the start of every step so that the cache holds one step's completions; it is also bounded
// (PrefetchedRewardOptions::max_entries, oldest dropped first: a dropped value is simply scored again).
//
//   auto wrapped = grpo::rewards::wrap_for_prefetch(rewards, {"code_tests"});   // RewardSet with a wrapped entry
//   grpo::rewards::RewardPrefetcher prefetcher(wrapped.prefetched, wrapped.prefetcher_options);
//   prefetcher.clear();                                       // start of the step
//   for (chunk of prompts) {
//     auto completions = completions_of(sampler.generate(policy, chunk_ids, G), ...);
//     prefetcher.submit(completions);                         // returns at once; scores while the next chunk samples
//     batch.insert(batch.end(), completions.begin(), completions.end());
//   }
//   prefetcher.wait();                                        // rethrows what sequential scoring would have thrown
//   auto scores = wrapped.rewards.score(batch);               // same values and metrics as rewards.score(batch)
#pragma once

#include <grpo/rewards/executor.hpp>
#include <grpo/rewards/reward_function.hpp>
#include <grpo/rewards/reward_set.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace grpo::rewards {

struct PrefetchedRewardOptions {
  /// Most values kept in the cache; storing more drops the oldest first (a dropped completion is scored again when
  /// asked for). 0 = unbounded. Each entry copies its completion's prompt, text and ids.
  std::size_t max_entries = 16384;
  /// Which completions RewardPrefetcher scores ahead with this reward; null = all. Set it when the reward only ever
  /// sees part of the batch (a DomainRewards domain or a TagRouter route): e.g. only rows whose "tag" is "code",
  /// so the judge or the sandbox is not run for completions of other domains. score() is not affected.
  std::function<bool(const Completion&)> prefetch_if = nullptr;
};

/// Counters of one PrefetchedReward since construction or the last clear().
struct PrefetchStats {
  std::size_t stored = 0;     ///< values stored by prefetches (store() calls); duplicates of a cached key not counted
  std::size_t evicted = 0;    ///< values dropped to respect max_entries
  std::size_t hits = 0;       ///< completions score() answered from the cache
  std::size_t misses = 0;     ///< completions score() passed to the wrapped reward
};

/// A completion-scoped reward with a cache of values computed ahead of time (see the file comment). Thread-safe: every
/// member may be called from several threads at once.
class PrefetchedReward final : public RewardFunction {
 public:
  /// Throws ConfigError for a null reward or a batch-scoped one (its values depend on the whole batch, which a chunk
  /// does not have).
  explicit PrefetchedReward(RewardPtr inner, PrefetchedRewardOptions options = {});

  /// The wrapped reward's name, so metrics ("rewards/<name>/mean") and configs keep theirs.
  std::string name() const override { return name_; }
  RewardScope scope() const override { return RewardScope::completion; }
  std::optional<std::string> graded_answer(const Completion& completion) const override {
    return inner_->graded_answer(completion);
  }

  /// One value per completion: the cached value of an identical completion (prompt, text, token_ids, truncated equal;
  /// row the same pointer, both null, or equal rows; `group` is not compared: a completion-scoped reward may not
  /// depend on it), else the wrapped reward's value. The misses are scored in one call to the wrapped reward, in
  /// batch order, under `context` (no copy when nothing hit); its exceptions propagate; misses are not cached.
  /// Throws grpo::Error if the wrapped reward returns the wrong number of values.
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;

  /// Caches values computed elsewhere (RewardPrefetcher does this): values[i] belongs to batch[i]. A completion
  /// already cached keeps its first value. Throws grpo::Error when the sizes differ.
  void store(std::span<const Completion> batch, std::span<const std::optional<float>> values);

  /// The cached value of `completion`: nullopt on a miss; a present optional holding nullopt when the reward gave
  /// "no value" for it.
  std::optional<std::optional<float>> cached(const Completion& completion) const;

  /// Empties the cache and resets the counters.
  void clear();

  /// Number of cached values.
  std::size_t size() const;
  PrefetchStats stats() const;

  const RewardPtr& inner() const { return inner_; }
  const PrefetchedRewardOptions& options() const { return options_; }

 private:
  struct Entry {
    std::size_t hash = 0;
    Completion completion;  // group and row kept as given; row compared by pointer, then by value
    std::optional<float> value;
  };
  using Order = std::list<Entry>;

  // Caller holds mutex_.
  const Entry* find_locked(const Completion& completion, std::size_t hash) const;

  RewardPtr inner_;
  std::string name_;
  PrefetchedRewardOptions options_;
  mutable std::mutex mutex_;
  Order order_;                                                   // oldest first
  std::unordered_multimap<std::size_t, Order::iterator> index_;  // hash → entries with that hash
  mutable PrefetchStats stats_;
};

struct RewardPrefetcherOptions {
  /// Worker threads of the prefetcher's RewardExecutor (>= 1). Scoring a chunk splits it as RewardExecutor does: per
  /// completion with a budget, else one contiguous part per thread. The prefetcher also runs one coordinating thread
  /// that mostly waits.
  std::size_t threads = 1;
  /// Per-completion budget, as RewardExecutorOptions::budget (0 = none). Use the scoring executor's budget: a value
  /// that misses it is not cached, so the ordinary call scores that completion again and applies its fallback.
  std::chrono::milliseconds budget{0};
  /// ErrorPolicy::rethrow: wait() rethrows the first exception a wrapped reward threw (in time), as RewardExecutor
  /// with that policy would have during sequential scoring. ErrorPolicy::no_value: wait() does not throw; the
  /// completions affected are scored again by the ordinary call, which counts them in frac_error.
  ErrorPolicy on_error = ErrorPolicy::no_value;
};

/// Scores submitted chunks of completions with every wrapped reward on background threads, filling their caches (see
/// the file comment). submit(), wait() and clear() may be called from any thread; chunks are scored in submission
/// order, one after another, each on the executor's threads.
class RewardPrefetcher {
 public:
  /// Throws ConfigError for a null reward or threads == 0 (or a negative budget).
  explicit RewardPrefetcher(std::vector<std::shared_ptr<PrefetchedReward>> rewards,
                            RewardPrefetcherOptions options = {});
  /// Waits for every submitted chunk (their errors are dropped: destructors do not throw), then stops the threads.
  /// Calls abandoned at their budget may still be running on detached threads; they hold what they use.
  ~RewardPrefetcher();
  RewardPrefetcher(const RewardPrefetcher&) = delete;
  RewardPrefetcher& operator=(const RewardPrefetcher&) = delete;

  /// Queues `chunk` and returns at once; a background thread scores it with every wrapped reward (the completions its
  /// prefetch_if accepts) and stores the values that arrived in time. An empty chunk is ignored.
  void submit(std::vector<Completion> chunk);

  /// Blocks until every chunk submitted so far is scored. Then rethrows, once, the first exception recorded since
  /// the last wait(): a wrapped reward's (under ErrorPolicy::rethrow) or a broken contract (wrong number of values,
  /// grpo::Error, always, as RewardExecutor does). Bad model text never throws: it is a value.
  void wait();

  /// Waits for submitted chunks (dropping their errors) and empties every wrapped reward's cache: call it at the start
  /// of each step.
  void clear();

  /// Chunks submitted and not yet scored.
  std::size_t pending() const;

  /// Completions (summed over the wrapped rewards) whose prefetch threw or ran over its budget since construction or
  /// the last clear(): nothing was cached for them, so the step's scoring call scores them again.
  std::size_t not_stored() const;

  const std::vector<std::shared_ptr<PrefetchedReward>>& rewards() const { return rewards_; }
  const RewardPrefetcherOptions& options() const { return options_; }

 private:
  struct Errors;
  void run();
  void wait_idle(std::unique_lock<std::mutex>& lock);

  std::vector<std::shared_ptr<PrefetchedReward>> rewards_;
  std::vector<RewardPtr> recorders_;  // per reward: scores with the wrapped reward and stores into its cache
  RewardPrefetcherOptions options_;
  std::shared_ptr<Errors> errors_;    // shared with the recorders (an abandoned call may outlive the prefetcher)
  RewardExecutor executor_;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<std::vector<Completion>> queue_;
  std::size_t pending_ = 0;  // queued + the chunk being scored
  bool stopping_ = false;
  std::thread thread_;       // last member: started once everything above exists
};

/// A RewardSet whose chosen entries are PrefetchedReward wrappers, the wrappers, and prefetcher options matching the
/// set's executor.
struct PrefetchWrapped {
  RewardSet rewards;                                       ///< same labels, weights and options as the original
  std::vector<std::shared_ptr<PrefetchedReward>> prefetched;  ///< one per wrapped entry, in entry order
  /// threads = max(1, the set's executor threads), the set's budget and on_error.
  RewardPrefetcherOptions prefetcher_options;
};

/// Wraps the entries of `set` whose label is in `labels` (the slow ones: "code_tests", "judge") in PrefetchedReward;
/// the other entries are shared as they are. The original set stays usable. Throws ConfigError for a label that is not
/// an entry of the set, or that names a batch-scoped reward.
PrefetchWrapped wrap_for_prefetch(const RewardSet& set, const std::vector<std::string>& labels,
                                  PrefetchedRewardOptions options = {});

}  // namespace grpo::rewards
