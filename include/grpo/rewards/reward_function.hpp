// SPDX-License-Identifier: Apache-2.0
// The reward interface: what a completion record holds, the cooperative scoring deadline, the virtual
// RewardFunction, and make_reward, the adapter that turns any callable into one.
//
// Rewards are torch-free on purpose: a reward is plain text processing (std::string, token ids as int64_t, one
// std::optional<float> per completion), so reward code builds fast and is usable without LibTorch. A missing value
// (std::nullopt) means "cannot judge" (the gold answer did not parse, the verifier timed out): it is excluded from
// group statistics, as TRL does with None (TRL trl/trainer/grpo_trainer.py); write it as NaN in a reward matrix with
// rewards::with_nan (reward_set.hpp) before handing the matrix to GroupAdvantage.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/io/row.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace grpo::rewards {

/// The dataset row a prompt came from (io::Row), and one of its fields.
using FieldValue = io::FieldValue;
using Row = io::Row;

/// One sampled completion and what a reward may need to judge it.
struct Completion {
  std::string prompt;                     ///< the prompt text as the model saw it (after the chat template)
  std::string text;                       ///< the decoded completion (may be empty, huge, or invalid UTF-8)
  std::vector<std::int64_t> token_ids;    ///< the completion's token ids (may be empty when only text is known)
  bool truncated = false;                 ///< generation stopped at the length limit (no EOS)
  std::size_t group = 0;                  ///< index of the prompt this answers; rewards comparing siblings use it
  std::shared_ptr<const Row> row;         ///< the dataset row (may be null: rewards needing it give no value)
  /// The index of its domain when the caller decided it (GrpoTrainer: Problem::domain, from the prompt source's
  /// routing); per-domain scoring (DomainRewards) uses it instead of routing the row's tag again.
  std::optional<std::size_t> domain;
};

/// Passed to every score call. Rewards doing long work (the verifier, code execution) check `expired()` at their
/// checkpoints and give up with no value; the executor also protects against rewards that never check.
struct ScoringContext {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();

  bool expired() const { return std::chrono::steady_clock::now() >= deadline; }
};

/// How a reward may be split into calls. Most rewards judge each completion alone; some compare siblings (the
/// Kimi 1.5 length reward uses the group's shortest and longest completions) and must see the whole batch.
enum class RewardScope {
  completion,  ///< score(batch) == concatenation of score(part) for any split: the executor may split freely
  batch,       ///< values depend on the other completions: the executor always passes the whole batch in one call
};

/// A reward function: `score` returns one optional value per completion of the batch, in order.
///
/// Requirements: `score` is const and may be called concurrently from several threads (the executor scores
/// completions in parallel), so a stateful reward synchronises its own state. Bad model text is a score, not an
/// error: a reward returns a value (or no value) for every completion, and throws only for misuse.
class RewardFunction {
 public:
  virtual ~RewardFunction() = default;

  /// The name used in metrics ("rewards/<name>/mean") and in configs.
  virtual std::string name() const = 0;

  /// One value per completion; std::nullopt = cannot judge. The result's size must equal batch.size().
  virtual std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                                  const ScoringContext& context) const = 0;

  virtual RewardScope scope() const { return RewardScope::completion; }

  /// The answer this reward grades in `completion`, normalised so that answers it would grade alike compare equal as
  /// strings (GrpoTrainer::evaluate's majority vote); nullopt when the completion states none or the reward grades no
  /// single answer (the default).
  virtual std::optional<std::string> graded_answer(const Completion& /*completion*/) const { return std::nullopt; }
};

/// Rewards are shared: a RewardSet, a router and work abandoned by the executor after a budget overrun may all
/// hold the same one.
using RewardPtr = std::shared_ptr<const RewardFunction>;

namespace detail {

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};

template <typename ValueType>
std::optional<float> to_optional_float(ValueType&& value) {
  using Plain = std::remove_cvref_t<ValueType>;
  if constexpr (IsOptional<Plain>::value) {
    if (!value.has_value()) return std::nullopt;
    return static_cast<float>(*value);
  } else {
    return static_cast<float>(value);
  }
}

/// Throws grpo::Error when a reward broke its contract of one value per completion.
inline void check_result_size(const RewardFunction& reward, std::size_t values, std::size_t completions) {
  GRPO_CHECK(values == completions, "reward '{}' returned {} values for a batch of {} completions", reward.name(),
             values, completions);
}

/// The reward built by make_reward: adapts one of the callable shapes documented there.
template <typename CallableType>
class CallableReward final : public RewardFunction {
 public:
  CallableReward(std::string name, CallableType callable, RewardScope scope)
      : name_(std::move(name)), callable_(std::move(callable)), scope_(scope) {}

  std::string name() const override { return name_; }
  RewardScope scope() const override { return scope_; }

  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override {
    using Batch = std::span<const Completion>;
    if constexpr (std::is_invocable_v<const CallableType&, Batch, const ScoringContext&>) {
      return callable_(batch, context);
    } else if constexpr (std::is_invocable_v<const CallableType&, Batch>) {
      return callable_(batch);
    } else {
      std::vector<std::optional<float>> values;
      values.reserve(batch.size());
      for (const Completion& completion : batch) {
        if constexpr (std::is_invocable_v<const CallableType&, const Completion&, const ScoringContext&>) {
          values.push_back(to_optional_float(callable_(completion, context)));
        } else {
          values.push_back(to_optional_float(callable_(completion)));
        }
      }
      return values;
    }
  }

 private:
  std::string name_;
  CallableType callable_;
  RewardScope scope_;
};

}  // namespace detail

/// Turns a callable into a reward. Accepted shapes (checked in this order):
///   std::vector<std::optional<float>>(std::span<const Completion>, const ScoringContext&)   whole batch
///   std::vector<std::optional<float>>(std::span<const Completion>)                           whole batch
///   R(const Completion&, const ScoringContext&)    per completion, R = float, double, or std::optional of either
///   R(const Completion&)                           per completion
/// The callable is invoked through a const reference, possibly from several threads at once.
///
///   auto brevity = grpo::rewards::make_reward("brevity", [](const Completion& c) { return c.text.size() < 200; });
template <typename CallableType>
RewardPtr make_reward(std::string name, CallableType callable, RewardScope scope = RewardScope::completion) {
  using Batch = std::span<const Completion>;
  static_assert(std::is_invocable_v<const CallableType&, Batch, const ScoringContext&> ||
                    std::is_invocable_v<const CallableType&, Batch> ||
                    std::is_invocable_v<const CallableType&, const Completion&, const ScoringContext&> ||
                    std::is_invocable_v<const CallableType&, const Completion&>,
                "make_reward needs a callable taking (std::span<const Completion>[, const ScoringContext&]) or "
                "(const Completion&[, const ScoringContext&])");
  GRPO_CHECK_CONFIG(!name.empty(), "make_reward: the reward name must not be empty");
  return std::make_shared<detail::CallableReward<CallableType>>(std::move(name), std::move(callable), scope);
}

}  // namespace grpo::rewards
