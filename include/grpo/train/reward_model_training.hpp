// SPDX-License-Identifier: Apache-2.0
// Training a reward model on preference pairs, as TRL's RewardTrainer: a models::ValueModel scores the chosen and the
// rejected completion of each pair (its sequence score at the last token of prompt + completion, encoded as
// RewardModelReward reads it: rewards::encode_for_reward_model), the Bradley–Terry loss (loss/bradley_terry.hpp) is
// minimised with AdamW, and the pairwise accuracy on held-out pairs says how well it orders them.
//
// Pairs are read from JSON lines in TRL's preference formats (one object a line):
//   {"chosen": "...", "rejected": "..."}                               implicit prompt (inside both texts)
//   {"prompt": "...", "chosen": "...", "rejected": "..."}              explicit prompt
//   {"chosen": [messages], "rejected": [messages]}                     conversational, implicit prompt
//   {"prompt": [messages], "chosen": [messages], "rejected": [messages]}   conversational, explicit prompt
// with an optional numeric "margin". Conversational pairs are rendered with the reward model's chat template: the
// prompt with the assistant header added, each side as the whole conversation, of which the prompt must be a prefix.
// Or they are made from graded completions (verifier_preference_pairs: a right answer preferred to a wrong one).
//
//   auto pairs = grpo::train::read_preference_pairs("prefs.jsonl", &tokenizer.chat_template());
//   auto critic = grpo::models::value_model_from_policy(policy, grpo::models::ScalarHeadLayout::sequence_classification);
//   auto epochs = grpo::train::train_reward_model(critic, tokenizer, pairs, {.epochs = 2});
//   auto held_out = grpo::train::evaluate_reward_model(critic, tokenizer, test_pairs);   // .accuracy
#pragma once

#include <grpo/rewards/reward_function.hpp>
#include <grpo/train/master_weights.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::models {
class ValueModel;
}
namespace grpo::text {
class ChatTemplate;
class Tokenizer;
}  // namespace grpo::text

namespace grpo::train {

/// One preference: prompt + chosen is preferred to prompt + rejected (texts as the reward model reads them).
struct PreferencePair {
  std::string prompt;  ///< "" for an implicit prompt (it is inside both texts)
  std::string chosen, rejected;
  std::optional<double> margin;  ///< TRL's optional margin: chosen must beat rejected by it
  std::string source;            ///< "file:line", for errors
};

/// Parses JSON lines in the formats above; `source` names the text in errors. `chat`: the template conversational
/// pairs are rendered with (required when a line has message lists). Throws grpo::ParseError naming "source:line" and
/// the field: a missing "chosen" or "rejected", a side of the wrong type, sides of different kinds (text and messages),
/// a non-numeric margin, a conversation whose render does not start with its prompt's; ConfigError for a
/// conversational line without a template.
std::vector<PreferencePair> parse_preference_pairs(std::string_view jsonl, std::string_view source,
                                                   const text::ChatTemplate* chat = nullptr);
/// parse_preference_pairs of a file's contents (errors name the file). Throws grpo::Error for an unreadable file.
std::vector<PreferencePair> read_preference_pairs(const std::filesystem::path& file,
                                                  const text::ChatTemplate* chat = nullptr);

/// Pairs graded by a verifier, as reward-model data is made from a task with checkable answers: `completions` (several
/// per prompt; Completion::group says whose) are scored by `verifier` in one call, and a completion is correct when its
/// value is >= `threshold`, wrong when below, left out when it has none. Each prompt with completions of both kinds
/// gives min(pairs_per_prompt, correct × wrong) distinct pairs, chosen a correct completion and rejected a wrong one,
/// drawn with `seed` (grpo::seeded_permutation); a prompt with one kind gives none. A pair's prompt is the completions'
/// Completion::prompt, its sides their texts, its source "group G". Pairs come in the order of their groups' first
/// completion. Throws ConfigError for pairs_per_prompt < 1 and grpo::Error for a verifier that returns another count.
std::vector<PreferencePair> verifier_preference_pairs(std::span<const rewards::Completion> completions,
                                                      const rewards::RewardFunction& verifier, double threshold = 1.0,
                                                      std::int64_t pairs_per_prompt = 1, std::uint64_t seed = 0);
/// The pairing of verifier_preference_pairs over grades already known: `correct[i]` says whether completions[i] is
/// right (nullopt: not judged, left out). What a run's reward-model refresh pairs a step's completions with, by the
/// scorer's own rule for correct (StepBatch::correct). Throws grpo::Error when the sizes differ, ConfigError for
/// pairs_per_prompt < 1.
std::vector<PreferencePair> graded_preference_pairs(std::span<const rewards::Completion> completions,
                                                    std::span<const std::optional<bool>> correct,
                                                    std::int64_t pairs_per_prompt = 1, std::uint64_t seed = 0);

struct RewardModelTrainingOptions {
  std::int64_t epochs = 1;
  std::int64_t batch_size = 8;          ///< pairs per optimizer step
  double learning_rate = 1e-5;          ///< AdamW
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;           ///< 0: no clipping
  std::int64_t max_length = 1024;       ///< tokens of prompt + completion (the last ones are kept)
  std::optional<double> center_rewards_coefficient;  ///< TRL's centring term (BradleyTerryOptions)
  std::uint64_t seed = 0;               ///< the order of the pairs in each epoch (and compensated's rounding)
  /// How bf16 weights are stepped: fp32 master copies (default) or in place with Kahan compensation
  /// (train/master_weights.hpp). float32/float64 weights are stepped as they are either way.
  OptimizerPrecision optimizer_precision = OptimizerPrecision::fp32_master;

  /// ConfigError naming the option.
  void validate() const;
};

/// Training a run's reward model in place on the policy's own samples, as iterated online RLHF does (Bai et al. 2022,
/// "Training a Helpful and Harmless Assistant with RLHF"; Gao et al. 2022 on over-optimisation): every step's completions
/// are paired by the scorer's rule for correct (a right one preferred to a wrong one of the same prompt), the pairs
/// join a buffer of the newest `buffer_pairs`, and every `every_steps` steps the reward model trains on the buffer
/// (train_reward_model with `training`). GrpoTrainer's callback: train/reward_model_refresh.hpp.
struct RewardModelRefreshOptions {
  std::int64_t every_steps = 0;        ///< 0 = off
  std::int64_t pairs_per_prompt = 4;   ///< pairs drawn from each prompt's group (graded_preference_pairs)
  std::int64_t buffer_pairs = 4096;    ///< the newest pairs kept (older ones are dropped first)
  RewardModelTrainingOptions training;  ///< each refresh's training (its defaults: 1 epoch, batches of 8, lr 1e-5)

  /// ConfigError naming the option.
  void validate() const;
};

/// Mean loss and accuracy over pairs.
struct PreferenceMetrics {
  double loss = 0.0;
  double accuracy = 0.0;  ///< fraction of pairs scored chosen > rejected
  std::int64_t pairs = 0;
};

/// The Bradley–Terry loss and pairwise accuracy of `model` on `pairs` (no gradient, eval mode; batches of
/// batch_size pairs).
PreferenceMetrics evaluate_reward_model(models::ValueModel& model, const text::Tokenizer& tokenizer,
                                        std::span<const PreferencePair> pairs, std::int64_t batch_size = 8,
                                        std::int64_t max_length = 1024);

/// Trains `model` in place for options.epochs passes over `pairs` (shuffled by options.seed each epoch; the last
/// batch may be smaller) and returns each epoch's mean training loss and accuracy (as computed on each batch before
/// its step). Every parameter of the model that requires a gradient is trained (a LoRA backbone: its adapters and the
/// head) with AdamW, its gradient clipped to max_grad_norm; bf16 parameters through fp32 master copies (the
/// mixed-precision training of GrpoTrainer: a step below a bf16 weight's resolution accumulates in its master) or
/// compensated, as options.optimizer_precision says. Each call starts its masters from the weights as they are, and
/// ends rounding them into the weights. The model is left in eval mode. Throws ConfigError for bad options, no pairs,
/// no trainable parameter, float16 trainable parameters (no loss scaling here), or compensated without bf16 ones.
/// Conversational pairs end with the chat template's end of turn: score with RewardModelOptions::completion_suffix
/// set to it.
std::vector<PreferenceMetrics> train_reward_model(models::ValueModel& model, const text::Tokenizer& tokenizer,
                                                  std::span<const PreferencePair> pairs,
                                                  const RewardModelTrainingOptions& options = {});

}  // namespace grpo::train
