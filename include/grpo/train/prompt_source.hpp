// SPDX-License-Identifier: Apache-2.0
// Where a GRPO run's prompts come from: the interface GrpoTrainer draws training batches and held-out problems from.
// MixedPromptSource (mixed_prompt_source.hpp) is the data-set implementation (ROLL rows, domain mixing, curriculum,
// pass-rate filter); a task built in code (the r1_zero example's tiny task) implements the five pure methods.
#pragma once

#include <grpo/rewards/reward_function.hpp>
#include <grpo/train/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace grpo::train {

/// One prompt: its token ids as the model sees them, its text (what rewards and the completion table see), the row
/// rewards judge against, the domain it belongs to and a key that is unique over the run's prompts.
struct Problem {
  std::vector<std::int64_t> prompt_ids;    ///< after the chat template, special tokens included
  std::string prompt_text;                 ///< the same prompt as text
  std::shared_ptr<const rewards::Row> row; ///< gold answer, tests, criteria, tag, ... (may be null)
  std::size_t domain = 0;                  ///< index into PromptSource::domain_names(): decided once, at load
  std::string id;                          ///< unique over the run's prompts: a curriculum's key (may be "")
};

/// Where GrpoTrainer's prompts come from. Called on every rank with the same arguments in the same order: the
/// trainer shards each returned batch itself, so every rank must see the same batch.
class PromptSource {
 public:
  virtual ~PromptSource() = default;

  /// The next `count` training prompts of `step`. Called in step order, once per generation round (dynamic sampling
  /// asks again within a step and must get new prompts). A source with sampling state saves it in save_state so that
  /// a resumed run sees the same prompts.
  virtual std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) = 0;
  /// The problems evaluation samples (never trained on).
  virtual const std::vector<Problem>& held_out() const = 0;
  /// A completion's token ids as text (special tokens and ids outside the vocabulary dropped).
  virtual std::string decode(std::span<const std::int64_t> ids) const = 0;
  virtual std::vector<std::int64_t> eos_token_ids() const = 0;
  virtual std::int64_t pad_token_id() const = 0;

  /// Domain names, indexed by Problem::domain (one name for a single data set or a task built in code).
  virtual std::vector<std::string> domain_names() const { return {"data"}; }
  /// The pass rate of each problem of a train_batch(step) round (the whole round, every rank): the fraction of its
  /// judged completions that were correct, NaN when none could be judged. For curricula; default: ignored.
  virtual void observe(std::span<const Problem> /*problems*/, std::span<const double> /*pass_rates*/,
                       std::int64_t /*step*/) {}
  /// Sampling metrics of the step ("curriculum/...", "data/<domain>/epoch"), logged as the max over ranks.
  virtual std::vector<std::pair<std::string, double>> metrics(std::int64_t /*step*/) const { return {}; }
  /// Sampling state for a checkpoint, and back (keys of the source's own choosing, e.g. "data/<domain>/position").
  virtual void save_state(TrainerState& /*state*/) const {}
  virtual void load_state(const TrainerState& /*state*/) {}
};

}  // namespace grpo::train
