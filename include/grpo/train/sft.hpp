// SPDX-License-Identifier: Apache-2.0
// Supervised fine-tuning (SFT): the cold-start stage of the DeepSeek-R1 recipe (SFT on chat data with reasoning,
// then GRPO from that checkpoint), as parts for the user's loop.
//
//   chat rows ──read_sft_conversations──► messages ──sft_example_from_chat──► SftExample {ids, loss_mask}
//       ──make_sft_batches (padded + length buckets, or packed)──► SftBatch [B, T]
//       ──sft_loss / SftTrainer (fused linear log-probs, explicit normaliser)──► loss.backward(), AdamW step
//
// Targets (loss_mask) are the tokens of assistant messages only: their content with any <think> reasoning and the
// end-of-turn token (<|im_end|>, <|eot_id|>), as transformers' assistant_only_loss and TRL's completion-only loss
// train. System and user messages, role headers and the newline after the end-of-turn token are context.
//
// The loss is the token-mean negative log-likelihood of a whole optimizer step's targets,
//   L = −Σ_{targets t} log p(x_t | x_<t) / N,   N = Normaliser::tokens(targets of every micro-batch of the step),
// computed from the model's final hidden states and lm_head weight by linear_token_log_probs (the fused path the
// GRPO policy uses; full-vocabulary logits never exist), for the target positions only. Micro-batches that share
// the step's normaliser sum to exactly the loss and gradient of the unsplit batch.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <grpo/core/error.hpp>
#include <grpo/loss/aggregation.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/text/chat_template.hpp>
#include <grpo/text/tokenizer.hpp>
#include <grpo/train/lr_schedule.hpp>
#include <grpo/train/master_weights.hpp>
#include <grpo/train/metrics_writer.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::train {

// ---------------------------------------------------------------------------------------------------------------
// Examples

/// One tokenised training sequence. loss_mask[t] = 1 when token t is a target: the loss predicts ids[t] from
/// ids[0..t). Same length as ids; loss_mask[0] must be 0 (nothing precedes the first token).
struct SftExample {
  std::vector<std::int64_t> ids;
  std::vector<std::uint8_t> loss_mask;

  std::size_t size() const { return ids.size(); }
  /// Number of targets (nonzero loss_mask entries).
  std::int64_t num_targets() const;
};

/// Throws grpo::Error, prefixed by `what` ("SftExample 3"), unless ids is non-empty with ids >= 0, loss_mask has
/// the same length with entries 0 or 1, and loss_mask[0] == 0.
void check_sft_example(const SftExample& example, std::string_view what = "SftExample");

/// Which assistant messages of a conversation are targets.
enum class SftTargets {
  all_assistant,   ///< every assistant message (transformers' assistant_only_loss)
  last_assistant,  ///< only the last one; earlier turns are context (e.g. for Qwen3, whose template drops the
                   ///< reasoning of earlier turns, so they teach answering without thinking)
};

struct SftChatOptions {
  /// Keep only the first max_length tokens (0 = no limit). Targets past the cut are lost with it.
  std::int64_t max_length = 0;
  /// The template to render with; unset = tokenizer.chat_template() (tokenizer_config.json's).
  std::optional<text::ChatTemplate> chat_template;
  /// Text that ends an assistant turn; empty = the format's: "<|im_end|>" (chatml, qwen3), "<|eot_id|>" (llama3).
  std::string end_of_turn;
  SftTargets targets = SftTargets::all_assistant;
};

/// The token ids of a conversation as its chat template renders it, with the assistant messages as targets.
///
/// How targets are found: rendering is a pure function of the messages, so assistant message i starts where
/// render(messages[0..i), add_generation_prompt = true) ends (the role header is context) and ends with the first
/// end-of-turn marker after that. Each such prefix must be a prefix of the whole conversation's text, else a
/// grpo::Error names the message. qwen3: assistant messages before the last user query lose their reasoning, as the
/// template renders them in the full conversation (so prefixes agree); reasoning after it stays a target
/// ("<think>\n…\n</think>\n\n" + content). chatml / llama3 cannot render reasoning_content: it is folded into the
/// content as "<think>\n{reasoning}\n</think>\n\n{content}" (DeepSeek-R1's distilled format).
///
/// Tokenisation: the text is encoded piece by piece at the target boundaries (add_special_tokens = false, special
/// tokens in contents matched, as apply_chat_template), so the context before an assistant turn is encoded exactly
/// as the GRPO prompt ending in the generation prompt is, and the turn as the model would generate it. This equals
/// encoding the whole text unless a BPE piece would cross a boundary (a turn starting with whitespace).
///
/// Throws grpo::Error for no messages, no assistant message, an assistant message containing the end-of-turn
/// marker, or a template whose prefixes disagree; ConfigError for max_length < 0 or no usable chat template.
SftExample sft_example_from_chat(const text::Tokenizer& tokenizer, std::span<const text::ChatMessage> messages,
                                 const SftChatOptions& options = {});

/// One conversation of a chat data set, with "file:line" (JSONL) or "file[index]" (JSON array) for messages.
struct SftConversation {
  std::vector<text::ChatMessage> messages;
  std::string source;
};

/// Reads chat SFT data: JSON lines (blank lines ignored) or a JSON array of objects, each with
///   `messages`: a list (or a JSON string holding one) of {role, content[, reasoning_content]}, or
///   `conversations`: a list of {from, value} (ShareGPT / Bespoke-Stratos / OpenThoughts: from "human"/"user" →
///   user, "gpt"/"assistant" → assistant, "system", "tool"), plus an optional top-level `system` string that becomes
///   the first message.
/// Other fields are ignored. Throws grpo::Error naming a file that cannot be read, ParseError naming file:line and
/// the field ("chat.jsonl:4: field 'messages[1].content' should be a string").
std::vector<SftConversation> read_sft_conversations(const std::filesystem::path& path);
/// As read_sft_conversations, from text in memory; `source` names it in errors.
std::vector<SftConversation> parse_sft_conversations(std::string_view text, std::string_view source);

// ---------------------------------------------------------------------------------------------------------------
// Batches

enum class SftLayout {
  padded,  ///< one example per row, right-padded to the longest row of the batch
  packed,  ///< several examples per row, each attending only to itself, positions restarting at 0
};

struct SftBatchOptions {
  SftLayout layout = SftLayout::padded;
  /// Rows per batch: examples (padded) or packed rows (packed).
  std::int64_t batch_size = 8;
  /// padded: length bucketing as transformers' group_by_length: consecutive windows of bucket_window·batch_size
  /// examples are each sorted by length, longest first, before being cut into batches, so a batch holds examples of
  /// similar length (less padding). The examples keep their order across windows: shuffle them per epoch before
  /// batching. 0 = no sorting.
  std::int64_t bucket_window = 16;
  /// packed: tokens per row. Rows are filled best-fit decreasing (TRL's "bfd" packing): examples by length, longest
  /// first, each into the fullest row it fits. An example longer than max_tokens is an error (truncate with
  /// SftChatOptions::max_length <= max_tokens).
  std::int64_t max_tokens = 2048;
  /// Id written at padding positions (masked everywhere, never a target).
  std::int64_t pad_token_id = 0;

  /// Throws ConfigError naming the field.
  void validate() const;
};

/// A batch of B rows of T tokens. Row b holds one example (padded) or several (packed) followed by padding.
/// Position t's hidden state predicts targets[b, t] = input_ids[b, t + 1] when both belong to the same example.
struct SftBatch {
  torch::Tensor input_ids;       ///< [B, T] int64; pad_token_id at padding
  torch::Tensor attention_mask;  ///< [B, T] int64: 1 real token, 0 padding
  torch::Tensor position_ids;    ///< [B, T] int64: 0, 1, ... restarting at every example; 0 at padding
  torch::Tensor sequence_ids;    ///< [B, T] int64: the example's place in its row (0, 1, ...); −1 at padding
  torch::Tensor targets;         ///< [B, T] int64: the next token within the example; 0 where target_mask is 0
  torch::Tensor target_mask;     ///< [B, T] float32: 1 where targets[b, t] is a target (loss_mask of token t + 1)
  SftLayout layout = SftLayout::padded;
  /// The examples of each row, as indices into the list they were batched from, in row order.
  std::vector<std::vector<std::size_t>> rows;
  std::int64_t num_targets = 0;  ///< Σ target_mask
  std::int64_t num_tokens = 0;   ///< Σ attention_mask (real tokens)
};

/// The rows of every batch, without building tensors: rows[r] lists the indices of the examples in row r (one when
/// padded), in the order SftBatchOptions describes; batch k is rows [k·batch_size, (k + 1)·batch_size). For data sets
/// too large to hold as tensors at once: plan once per epoch, collate_sft_rows one batch at a time. Throws grpo::Error
/// naming an invalid example (check_sft_example) or one longer than a packed row, ConfigError for bad options.
std::vector<std::vector<std::size_t>> plan_sft_rows(std::span<const SftExample> examples,
                                                    const SftBatchOptions& options = {});

/// One batch from explicit rows: rows[b] lists the indices of the examples concatenated in row b; the layout and the
/// padding id come from `options`. A row of several examples needs SftLayout::packed (grpo::Error otherwise).
SftBatch collate_sft_rows(std::span<const SftExample> examples, std::span<const std::vector<std::size_t>> rows,
                          const SftBatchOptions& options = {});

/// plan_sft_rows, every batch collated: each example appears in exactly one batch; the last may be smaller. Holds the
/// whole data set as tensors (about 44 bytes per token).
std::vector<SftBatch> make_sft_batches(std::span<const SftExample> examples, const SftBatchOptions& options = {});

/// The normaliser of one optimizer step made of these micro-batches: Normaliser::tokens(Σ num_targets).
Normaliser sft_normaliser(std::span<const SftBatch> micro_batches);

// ---------------------------------------------------------------------------------------------------------------
// Loss

struct SftLossOptions {
  /// Rows of logits computed at once inside linear_token_log_probs (0 = automatic, about 128 MiB).
  std::int64_t chunk_rows = 0;
};

struct SftLossOutput {
  /// 0-dim, differentiable: Σ_targets −log p / normaliser.divisor(); float32 (float64 for float64 hidden states)
  torch::Tensor loss;
  double nll_sum = 0.0;     ///< Σ_targets −log p of this micro-batch (no grad)
  std::int64_t tokens = 0;  ///< targets of this micro-batch
  /// "loss" (this micro-batch's share of the step's loss), "nll" (nll_sum / tokens, NaN when there are none),
  /// "num_tokens".
  Scalars metrics;
};

/// The SFT loss from final hidden states: hidden [B, T, H] (or [N, H]) floating, lm_head weight [V, H] of the same
/// dtype, targets of hidden's leading shape int64, target_mask of the same shape (nonzero = target). Only the target
/// rows go through linear_token_log_probs. With no targets the loss is 0 (still attached to the graph). Throws
/// grpo::Error naming the argument and its shape when the inputs do not fit. For any model exposing hidden states.
SftLossOutput sft_loss_from_hidden(const torch::Tensor& hidden, const torch::Tensor& weight,
                                   const torch::Tensor& targets, const torch::Tensor& target_mask,
                                   const Normaliser& normaliser, const SftLossOptions& options = {});

/// Final hidden states [B, T, H] of a batch. padded: model->hidden_states(input_ids, attention_mask). packed: the
/// model's own layers run with the batch's position_ids and a block-diagonal causal mask (token t of example k sees
/// tokens 0..t of example k only), so every example's hidden states equal those of the example run alone.
torch::Tensor sft_hidden_states(models::CausalLM& model, const SftBatch& batch);

/// sft_loss_from_hidden(sft_hidden_states(model, batch), model->lm_head_weight(), batch.targets, batch.target_mask,
/// normaliser). For a step split into micro-batches pass every part sft_normaliser(all parts).
SftLossOutput sft_loss(models::CausalLM& model, const SftBatch& batch, const Normaliser& normaliser,
                       const SftLossOptions& options = {});

struct SftEvaluation {
  double mean_nll = 0.0;  ///< nll_sum / tokens: mean negative log-likelihood per target token (NaN without targets)
  double nll_sum = 0.0;
  std::int64_t tokens = 0;
};

/// Mean NLL per target token of `examples` under the model, without gradients, batched by `batching` (one batch
/// collated at a time).
SftEvaluation evaluate_nll(models::CausalLM& model, std::span<const SftExample> examples,
                           const SftBatchOptions& batching = {});
/// The same over ready-made batches.
SftEvaluation evaluate_nll(models::CausalLM& model, std::span<const SftBatch> batches);

// ---------------------------------------------------------------------------------------------------------------
// Trainer

struct SftTrainerOptions {
  /// Gradient clipping on the global L2 norm (0 = off; the norm is still reported).
  double max_grad_norm = 1.0;
  /// When set, the learning rate of step s is learning_rate_at(s, *schedule); otherwise the optimizer's is kept.
  std::optional<LrScheduleOptions> schedule;
  SftLossOptions loss;
  /// With the AdamWOptions constructor: fp32 master weights for a bf16 model, or compensated bf16 AdamW
  /// (master_weights.hpp OptimizerPrecision), whose stochastic rounding is seeded with `seed`.
  OptimizerPrecision optimizer_precision = OptimizerPrecision::fp32_master;
  std::uint64_t seed = 0;

  /// Throws ConfigError naming the field.
  void validate() const;
};

/// What one optimizer step did.
struct SftStepOutput {
  std::int64_t step = 0;  ///< 1-based number of this step
  double loss = 0.0;      ///< the step's loss: Σ nll / N (the mean NLL per target token)
  double nll_sum = 0.0;
  std::int64_t tokens = 0;     ///< targets in the step (N)
  double grad_norm = 0.0;      ///< global gradient L2 norm before clipping
  double learning_rate = 0.0;  ///< the rate this step used
  /// TRL's SFT names: "loss", "grad_norm", "learning_rate", "num_tokens".
  Scalars metrics() const;
};

/// One optimizer step per call over a list of micro-batches (gradient accumulation): zero the gradients, then for
/// each micro-batch loss.backward() with the step's normaliser (sft_normaliser of all of them), so the step equals
/// one big batch; clip; set the learning rate from the schedule; AdamW step.
///
/// A bf16 (or fp16) model trains through fp32 master weights (master_weights.hpp), as GrpoTrainer does: gradients
/// summed in fp32, clipping and AdamW (fp32 state) on the masters, the parameters the rounded masters after each
/// step. Build such a trainer with the AdamWOptions constructor, which owns its optimizer over the masters (or, with
/// optimizer_precision compensated, a CompensatedAdamW over the bf16 parameters themselves).
class SftTrainer {
 public:
  /// The trainer owns an AdamW over the model's trainable parameters (their fp32 masters for a half-precision model).
  SftTrainer(models::CausalLM model, torch::optim::AdamWOptions adamw, SftTrainerOptions options = {});
  /// The caller's optimizer, over the model's full-precision parameters; it must outlive the trainer. Throws
  /// ConfigError for a model with half-precision trainable parameters (stepping them directly would round small
  /// updates away: use the AdamWOptions constructor).
  SftTrainer(models::CausalLM model, torch::optim::AdamW& optimizer, SftTrainerOptions options = {});

  SftStepOutput step(std::span<const SftBatch> micro_batches);

  /// Steps taken so far (set it when resuming, so the schedule continues).
  std::int64_t steps_done() const { return steps_done_; }
  void set_steps_done(std::int64_t steps) { steps_done_ = steps; }
  const SftTrainerOptions& options() const { return options_; }
  /// The optimizer stepped (the caller's AdamW, or the trainer's own AdamW / CompensatedAdamW), for checkpoints.
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  /// The fp32 masters of the trainable parameters (the parameters themselves for a full-precision model or
  /// optimizer_precision compensated).
  const MasterWeights& master_weights() const { return master_; }

 private:
  models::CausalLM model_;
  SftTrainerOptions options_;
  MasterWeights master_;
  std::unique_ptr<torch::optim::Optimizer> own_optimizer_;  // set by the AdamWOptions constructor
  torch::optim::Optimizer* optimizer_;
  std::int64_t steps_done_ = 0;
};

}  // namespace grpo::train
