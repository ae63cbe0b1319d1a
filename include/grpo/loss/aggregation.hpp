// SPDX-License-Identifier: Apache-2.0
// Reducing a per-token loss [B, T] to the scalar that is differentiated: every aggregation of TRL (loss_type) and
// verl (loss_agg_mode), with the normaliser passed explicitly.
//
// All of them are one of three shapes, with m the 0/1 loss mask and |o_b| = Σ_t m_bt:
//   sum_over_tokens             Σ_b Σ_t m·L / N
//   sum_of_sequence_means       Σ_b (Σ_t m·L / max(|o_b|, 1)) / N        (TRL)
//   sum_of_sequence_means_eps   Σ_b (Σ_t m·L / (|o_b| + 1e-8)) / N       (verl agg_loss)
// and differ only in N, which is a token count, a sequence count or a constant (class Normaliser).
//
// Why N is an argument: the systems compute N from the micro-batch at hand and then patch it for gradient
// accumulation and data parallelism (TRL divides by the accumulation steps, or by the generation batch's token
// count over the number of processes; verl multiplies by dp_size), which is where their normalisation bugs came
// from (trl#3021, trl PR#3231, PR#6024, ms-swift#10117). Here the loss of a micro-batch is its contribution to the
// loss of the whole batch: pass the count over the whole batch (summed over micro-batches and ranks), and the sum
// of the micro-batch losses, hence of their gradients, equals the loss and gradient of the unsplit batch. Without
// splitting, local_normaliser() gives the count of the batch itself. With DDP, which averages gradients over the
// P ranks instead of summing them, multiply each rank's loss by P (verl's dp_size factor).
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <grpo/core/enum_names.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace grpo {

/// The divisor N of an aggregation: a token count, a sequence count, or a constant.
/// Counts may be 0 (a batch with no valid token); they divide as max(count, 1), so an all-masked batch has loss 0,
/// as in TRL (clamp(min=1)) and verl (returns 0 on a zero denominator). A constant must be > 0.
class Normaliser {
 public:
  enum class Kind { tokens, sequences, constant };

  /// N = number of valid (mask ≠ 0) tokens in the whole batch. Used by dapo, bnpo, cispo, vespo, token_mean.
  static Normaliser tokens(double count) { return Normaliser(Kind::tokens, count); }
  /// N = number of sequences in the whole batch. Used by grpo, sapo, luspo and verl's seq-mean-* modes.
  static Normaliser sequences(double count) { return Normaliser(Kind::sequences, count); }
  /// N = a fixed constant (dr_grpo: B · max_completion_length; verl seq-mean-token-sum-norm: loss_scale_factor).
  static Normaliser constant(double value) { return Normaliser(Kind::constant, value); }

  Kind kind() const { return kind_; }
  double value() const { return value_; }
  /// What the loss is divided by: max(value, 1) for counts, value for a constant.
  double divisor() const { return kind_ == Kind::constant ? value_ : std::max(value_, 1.0); }
  /// "tokens(12)", "sequences(8)", "constant(2048)" for messages and logs.
  std::string describe() const { return fmt::format("{}({})", kind_name(kind_), value_); }

  static std::string_view kind_name(Kind kind) { return detail::enum_name(kind, kKindNames); }

 private:
  Normaliser(Kind kind, double value) : kind_(kind), value_(value) {
    GRPO_CHECK_CONFIG(std::isfinite(value), "Normaliser::{}: value must be finite, got {}", kind_name(kind), value);
    if (kind == Kind::constant) {
      GRPO_CHECK_CONFIG(value > 0.0, "Normaliser::constant: value must be > 0, got {}", value);
    } else {
      GRPO_CHECK_CONFIG(value >= 0.0, "Normaliser::{}: count must be >= 0, got {}", kind_name(kind), value);
    }
  }

  static constexpr detail::EnumNames<Kind, 3> kKindNames{{
      {Kind::tokens, "tokens"},
      {Kind::sequences, "sequences"},
      {Kind::constant, "constant"},
  }};

  Kind kind_;
  double value_;
};

/// The three aggregation shapes (see the top of this file). The two sequence-mean shapes differ by up to 1e-8
/// relative on non-empty rows and both give 0 for an empty one; each is its reference's exact form.
enum class Aggregation { sum_over_tokens, sum_of_sequence_means, sum_of_sequence_means_eps };

/// True for the two shapes that average each sequence's tokens first.
inline bool averages_sequences(Aggregation aggregation) { return aggregation != Aggregation::sum_over_tokens; }

/// Σ_b Σ_t m·L / N (sum_over_tokens), Σ_b (Σ_t m·L / max(|o_b|, 1)) / N (sum_of_sequence_means) or
/// Σ_b (Σ_t m·L / (|o_b| + 1e-8)) / N (sum_of_sequence_means_eps).
/// values: [B, T] floating (per-token loss; entries at masked positions are ignored, even NaN, and get zero
/// gradient); mask: [B, T], any dtype, nonzero = valid. Returns a 0-dim tensor of values' dtype.
inline torch::Tensor aggregate(const torch::Tensor& values, const torch::Tensor& mask, Aggregation aggregation,
                               const Normaliser& normaliser) {
  detail::check_dim(values, 2, "values", "aggregate");
  detail::check_floating(values, "values", "aggregate");
  detail::check_same_shape(values, "values", mask, "mask", "aggregate");
  const torch::Tensor invalid = mask == 0;
  const torch::Tensor masked = values.masked_fill(invalid, 0.0);
  if (aggregation == Aggregation::sum_over_tokens) return masked.sum() / normaliser.divisor();
  const torch::Tensor counts = (~invalid).sum(1).to(values.scalar_type());
  const torch::Tensor lengths =
      aggregation == Aggregation::sum_of_sequence_means ? counts.clamp_min(1.0) : counts + 1e-8;
  return (masked.sum(1) / lengths).sum() / normaliser.divisor();
}

/// The named aggregations: TRL's loss_type (grpo ... vespo) and verl's loss_agg_mode (token_mean ...).
///   loss type                 shape                    N (whole batch)          source
///   grpo, sapo                sum_of_sequence_means    sequences: B             TRL mean_b(seq mean) / GA
///   bnpo                      sum_over_tokens          tokens                   TRL Σ m·L / Σ m / GA (see below)
///   dr_grpo                   sum_over_tokens          constant: B·L_max        TRL Σ m·L / (B·max_completion_length)
///   dapo, cispo, vespo        sum_over_tokens          tokens                   TRL Σ m·L / num_items_in_batch
///   luspo                     sum_over_tokens          sequences: B             TRL mean_b(L_b·|o_b|) (sequence IS)
///   token_mean                sum_over_tokens          tokens                   verl token-mean
///   seq_mean_token_sum        sum_over_tokens          sequences: non-empty     verl seq-mean-token-sum
///   seq_mean_token_mean       sum_of_sequence_means_eps  sequences: non-empty   verl seq-mean-token-mean
///   seq_mean_token_sum_norm   sum_over_tokens          constant: factor or T    verl seq-mean-token-sum-norm
/// bnpo and dapo differ only in which token count TRL uses: bnpo the micro-batch's own (so a split batch is
/// weighted differently from the whole), dapo the generation batch's. Passing the whole batch's count to bnpo
/// makes it dapo; passing each micro-batch's own count reproduces TRL's bnpo (times GA). luspo: TRL multiplies the
/// sequence-level loss by |o_b| and averages over sequences; with the per-token loss constant over a row that is
/// Σ_t m·L / B. TRL's luspo with a per-token loss matrix (token-level IS, a KL or entropy mask, token-level sampler
/// weights) averages over all B·T elements, padding included; GrpoLossOptions refuses those combinations.
enum class LossType {
  grpo,
  bnpo,
  dr_grpo,
  dapo,
  cispo,
  sapo,
  luspo,
  vespo,
  token_mean,
  seq_mean_token_sum,
  seq_mean_token_mean,
  seq_mean_token_sum_norm,
};

namespace detail {
/// TRL's loss_type names; verl's loss_agg_mode names with underscores, and verl's own hyphenated spelling as alias.
inline constexpr EnumNames<LossType, 16> kLossTypeNames{{
    {LossType::grpo, "grpo"},
    {LossType::bnpo, "bnpo"},
    {LossType::dr_grpo, "dr_grpo"},
    {LossType::dapo, "dapo"},
    {LossType::cispo, "cispo"},
    {LossType::sapo, "sapo"},
    {LossType::luspo, "luspo"},
    {LossType::vespo, "vespo"},
    {LossType::token_mean, "token_mean"},
    {LossType::token_mean, "token-mean"},
    {LossType::seq_mean_token_sum, "seq_mean_token_sum"},
    {LossType::seq_mean_token_sum, "seq-mean-token-sum"},
    {LossType::seq_mean_token_mean, "seq_mean_token_mean"},
    {LossType::seq_mean_token_mean, "seq-mean-token-mean"},
    {LossType::seq_mean_token_sum_norm, "seq_mean_token_sum_norm"},
    {LossType::seq_mean_token_sum_norm, "seq-mean-token-sum-norm"},
}};
}  // namespace detail

/// TRL's loss_type names and verl's loss_agg_mode names (as verl writes them, "seq-mean-token-mean", or with
/// underscores).
GRPO_ENUM_NAMES(LossType, detail::kLossTypeNames, "loss type", parse_loss_type);

/// The shape and the normaliser kind of a loss type (table above).
struct AggregationRule {
  Aggregation aggregation;
  Normaliser::Kind normaliser;
};

inline AggregationRule aggregation_rule(LossType type) {
  using Kind = Normaliser::Kind;
  switch (type) {
    case LossType::grpo:
    case LossType::sapo:
      return {Aggregation::sum_of_sequence_means, Kind::sequences};
    case LossType::seq_mean_token_mean:
      return {Aggregation::sum_of_sequence_means_eps, Kind::sequences};
    case LossType::bnpo:
    case LossType::dapo:
    case LossType::cispo:
    case LossType::vespo:
    case LossType::token_mean:
      return {Aggregation::sum_over_tokens, Kind::tokens};
    case LossType::luspo:
    case LossType::seq_mean_token_sum:
      return {Aggregation::sum_over_tokens, Kind::sequences};
    case LossType::dr_grpo:
    case LossType::seq_mean_token_sum_norm:
      return {Aggregation::sum_over_tokens, Kind::constant};
  }
  return {Aggregation::sum_over_tokens, Kind::tokens};
}

/// Inputs of local_normaliser that are not in the mask.
struct LocalNormaliserOptions {
  /// dr_grpo: TRL's max_completion_length (required for dr_grpo).
  std::optional<int64_t> max_completion_length;
  /// seq_mean_token_sum_norm: verl's loss_scale_factor; default the padded length T (verl's default, which
  /// changes with the batch: set it to a constant to reproduce Dr. GRPO).
  std::optional<double> loss_scale_factor;
};

/// The normaliser of `type` computed from this batch alone, i.e. what to pass when the batch is not split. When it
/// is split, every part gets the whole batch's normaliser: the sum of the parts' values, except for
/// seq_mean_token_sum_norm's constant, which is the same for every part. mask: [B, T], nonzero = valid (after any
/// truncation mask). Token counts: Σ m. Sequence counts: B for TRL's grpo/sapo/luspo (TRL averages over every row); the
/// rows with at least one valid token for verl's seq_mean_* (verl's default when global_batch_size is unset). dr_grpo:
/// B · max_completion_length; seq_mean_token_sum_norm: loss_scale_factor or T.
inline Normaliser local_normaliser(LossType type, const torch::Tensor& mask,
                                   const LocalNormaliserOptions& options = {}) {
  detail::check_dim(mask, 2, "mask", "local_normaliser");
  const auto batch = static_cast<double>(mask.size(0));
  switch (type) {
    case LossType::grpo:
    case LossType::sapo:
    case LossType::luspo:
      return Normaliser::sequences(batch);
    case LossType::seq_mean_token_sum:
    case LossType::seq_mean_token_mean:
      return Normaliser::sequences(static_cast<double>(((mask != 0).sum(1) > 0).sum().item<int64_t>()));
    case LossType::bnpo:
    case LossType::dapo:
    case LossType::cispo:
    case LossType::vespo:
    case LossType::token_mean:
      return Normaliser::tokens(static_cast<double>((mask != 0).sum().item<int64_t>()));
    case LossType::dr_grpo:
      GRPO_CHECK_CONFIG(options.max_completion_length && *options.max_completion_length > 0,
                        "local_normaliser: loss_type 'dr_grpo' needs max_completion_length > 0, got {}",
                        options.max_completion_length ? std::to_string(*options.max_completion_length) : "none");
      return Normaliser::constant(batch * static_cast<double>(*options.max_completion_length));
    case LossType::seq_mean_token_sum_norm:
      return Normaliser::constant(options.loss_scale_factor.value_or(static_cast<double>(mask.size(1))));
  }
  return Normaliser::tokens(0.0);
}

/// Throws ConfigError unless `normaliser` has the kind `type` needs, naming both.
inline void check_normaliser(LossType type, const Normaliser& normaliser) {
  const auto expected = aggregation_rule(type).normaliser;
  GRPO_CHECK_CONFIG(normaliser.kind() == expected, "loss_type '{}' needs a Normaliser::{}(...), got Normaliser::{}",
                    to_string(type), Normaliser::kind_name(expected), normaliser.describe());
}

/// aggregate() with the shape of `type`, after checking the normaliser's kind against it.
/// values, mask: [B, T] (see aggregate). Returns a 0-dim tensor.
inline torch::Tensor aggregate_loss(const torch::Tensor& values, const torch::Tensor& mask, LossType type,
                                    const Normaliser& normaliser) {
  check_normaliser(type, normaliser);
  return aggregate(values, mask, aggregation_rule(type).aggregation, normaliser);
}

}  // namespace grpo
