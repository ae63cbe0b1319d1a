// SPDX-License-Identifier: Apache-2.0
// A learned reward model as a reward: a models::ValueModel (a causal LM with a scalar head, e.g. a Hugging Face
// ...ForSequenceClassification checkpoint) scores each completion after its prompt, in batches, in-process, on the
// model's device (the policy's or another).
//
//   outcome RM  the head at the last token of prompt + completion (what transformers' sequence classifier pools)
//   process RM  the completion split into reasoning steps at `step_separator`; each step is encoded with the separator
//               after it, and the head is read at the separator's last token; the steps' scores are aggregated by
//               min (the weakest step, as PRM papers score a solution), last, or mean
//
// Each raw score x becomes (x − shift) / scale, then σ(·) with `sigmoid` (a head trained with a logistic loss gives
// log-odds). The text given to the model is Completion::prompt (the prompt as the policy saw it, after its chat
// template) followed by Completion::text and completion_suffix, encoded by the reward model's own tokenizer (special
// tokens recognised, none added: a templated prompt carries its own BOS), so the reward model may use another
// tokenizer than the policy. Read it where the reward model was trained to be read: set completion_suffix to the end
// of an assistant turn for a model trained on chat-rendered pairs. This header stays torch-free: the model and tokenizer
// are only forward-declared here.
//
//   auto rm = grpo::models::value_model_from_pretrained("rm-dir");
//   auto tokenizer = grpo::text::Tokenizer::from_pretrained("rm-dir");
//   auto reward = std::make_shared<grpo::rewards::RewardModelReward>(rm, tokenizer, grpo::rewards::RewardModelOptions{});
//   auto same = grpo::rewards::reward_model_from_pretrained("rm-dir");   // what {"name": "reward_model"} builds
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/rewards/reward_function.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace grpo::models {
class ValueModel;
}
namespace grpo::text {
class Tokenizer;
}

namespace grpo::rewards {

/// How a process reward model's step scores become one reward.
enum class StepAggregation { min, last, mean };

namespace detail {
inline constexpr ::grpo::detail::EnumNames<StepAggregation, 3> kStepAggregationNames{{
    {StepAggregation::min, "min"},
    {StepAggregation::last, "last"},
    {StepAggregation::mean, "mean"},
}};
}  // namespace detail

GRPO_ENUM_NAMES(StepAggregation, detail::kStepAggregationNames, "step aggregation", parse_step_aggregation);

struct RewardModelOptions {
  std::string name = "reward_model";  ///< the reward's name in metrics and configs
  std::int64_t batch_size = 8;        ///< completions per forward pass
  /// Tokens of prompt + completion the model reads; longer texts keep their last max_length tokens (where the
  /// score is read; a process RM's steps before the window get no score).
  std::int64_t max_length = 4096;
  /// Text put after the completion before it is encoded (outcome RM): the end of the assistant turn as the reward
  /// model was trained on it, e.g. "<|im_end|>\n" for a ChatML model trained on conversations (TRL renders each side
  /// with the chat template; the trainer's completion text has its special tokens decoded away). "": none.
  std::string completion_suffix;
  /// Process RM: the text that ends each reasoning step (e.g. "\n\n", or a PRM's step token such as "<extra_0>").
  /// Empty: an outcome RM.
  std::string step_separator;
  StepAggregation step_aggregation = StepAggregation::min;
  double shift = 0.0, scale = 1.0;  ///< each raw score x becomes (x − shift) / scale (scale > 0)
  bool sigmoid = false;             ///< then σ(·)

  /// ConfigError naming the option.
  void validate() const;
};

/// The token ids a reward model reads for `completion` (Completion::prompt followed by Completion::text, encoded by
/// the reward model's tokenizer; after truncation to max_length) and the positions in them where its scores are read
/// (one for an outcome RM, one per step for a process RM). The one encoding of RewardModelReward and of training a
/// reward model on preference pairs (train/reward_model_training.hpp).
struct RewardModelInput {
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> score_positions;
};
RewardModelInput encode_for_reward_model(const text::Tokenizer& tokenizer, const Completion& completion,
                                         const RewardModelOptions& options);

class RewardModelReward final : public RewardFunction {
 public:
  /// Keeps copies of the handles (a ValueModel and a Tokenizer share their weights and tables with the caller's); the
  /// model is put in eval mode. Throws ConfigError for bad options.
  RewardModelReward(const models::ValueModel& model, const text::Tokenizer& tokenizer, RewardModelOptions options = {});
  ~RewardModelReward() override;

  std::string name() const override;
  /// One score per completion; nullopt for a process RM's completion with no step inside the window (an empty
  /// completion). Forward passes are serialised (a mutex): concurrent calls wait for each other.
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;

  /// encode_for_reward_model with this reward's tokenizer and options: what score() runs.
  RewardModelInput encode(const Completion& completion) const;
  const RewardModelOptions& options() const;
  /// Runs `update` on the model (the caller's handle shares its weights) and this reward's tokenizer while no score
  /// call runs: score() waits for it, and it for a running score(). How a run trains its reward model in place
  /// (train/reward_model_refresh.hpp); the model is put back in eval mode after it.
  void update_model(const std::function<void(models::ValueModel& model, const text::Tokenizer& tokenizer)>& update) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Where reward_model_from_pretrained puts the model.
struct RewardModelPlacement {
  std::string dtype = "float32";  ///< float32, bfloat16 or float16
  std::string device = "cpu";     ///< a torch device: cpu, cuda, cuda:N
};

/// A RewardModelReward of a scalar-head checkpoint directory (models::value_model_from_pretrained: any of its three
/// layouts) read with the tokenizer saved beside it (text::Tokenizer::from_pretrained of the same directory): what the
/// registry's "reward_model" entry builds from its "model_dir". Throws ConfigError naming the directory for a
/// checkpoint or tokenizer that does not load (a checkpoint without a scalar head among them), naming dtype or device
/// for a value outside the ones above or a CUDA device this build or machine lacks, and RewardModelOptions::validate's.
std::shared_ptr<RewardModelReward> reward_model_from_pretrained(const std::filesystem::path& directory,
                                                                RewardModelOptions options = {},
                                                                const RewardModelPlacement& placement = {});

}  // namespace grpo::rewards
