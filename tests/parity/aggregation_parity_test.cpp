// SPDX-License-Identifier: Apache-2.0
// aggregate_loss + local_normaliser against TRL's loss_type branches of _compute_loss (huggingface/trl @ f2cd577)
// and verl's agg_loss (volcengine/verl @ b178a3c), on a per-token loss matrix with gradient.
#include <grpo/loss/aggregation.hpp>

#include <string>
#include <vector>

#include "parity/parity_support.hpp"
#include "parity/references.hpp"

namespace {

using grpo::LossType;
namespace ref = parity::ref;

/// TRL _compute_loss's aggregation branches (grpo_trainer.py lines ~3095-3125), GA = 1, one process,
/// num_items_in_batch = Σ mask. luspo takes per_token_loss of shape (B, 1) (sequence-level IS): column 0 of values.
torch::Tensor trl_aggregate(const std::string& loss_type, const torch::Tensor& per_token_loss,
                            const torch::Tensor& mask, int64_t max_completion_length) {
  if (loss_type == "grpo" || loss_type == "sapo")
    return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)).mean();
  if (loss_type == "bnpo") return (per_token_loss * mask).sum() / mask.sum().clamp_min(1.0);
  if (loss_type == "dr_grpo")
    return (per_token_loss * mask).sum() / static_cast<double>(per_token_loss.size(0) * max_completion_length);
  if (loss_type == "cispo" || loss_type == "dapo" || loss_type == "vespo") {
    auto normalizer = mask.sum().clamp_min(1.0) / 1.0;
    return (per_token_loss * mask).sum() / normalizer;
  }
  if (loss_type == "luspo") return (per_token_loss.slice(1, 0, 1) * mask.sum(1, /*keepdim=*/true)).mean();
  throw std::invalid_argument(loss_type);
}

struct Case {
  LossType type;
  std::string source;  // "trl" or "verl"
  std::string name;    // TRL loss_type or verl loss_agg_mode
  std::optional<double> loss_scale_factor;
};

}  // namespace

TEST_CASE("aggregate_loss matches TRL loss_type and verl agg_loss for every loss type [parity]") {
  const std::vector<Case> cases{
      {LossType::grpo, "trl", "grpo", {}},
      {LossType::sapo, "trl", "sapo", {}},
      {LossType::bnpo, "trl", "bnpo", {}},
      {LossType::dr_grpo, "trl", "dr_grpo", {}},
      {LossType::dapo, "trl", "dapo", {}},
      {LossType::cispo, "trl", "cispo", {}},
      {LossType::vespo, "trl", "vespo", {}},
      {LossType::luspo, "trl", "luspo", {}},
      {LossType::token_mean, "verl", "token-mean", {}},
      {LossType::seq_mean_token_sum, "verl", "seq-mean-token-sum", {}},
      {LossType::seq_mean_token_mean, "verl", "seq-mean-token-mean", {}},
      {LossType::seq_mean_token_sum_norm, "verl", "seq-mean-token-sum-norm", {}},
      {LossType::seq_mean_token_sum_norm, "verl", "seq-mean-token-sum-norm", 37.0},
  };
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  const int64_t max_completion_length = 11;
  for (const auto& c : cases) {
    for (const auto& b : batches) {
      const bool all_masked = b.name == "all-masked";
      INFO(c.source << " " << c.name << (c.loss_scale_factor ? " (factor 37)" : "") << ", batch " << b.name);
      torch::manual_seed(99);
      // A per-token loss depending on lp (so the gradient is checked too); constant over each row for luspo.
      auto coeff = torch::randn({b.B(), b.T()}, parity::kF64);
      if (c.type == LossType::luspo) coeff = coeff.slice(1, 0, 1).expand({b.B(), b.T()}).contiguous();
      auto values = [&](const torch::Tensor& lp) {
        auto v = coeff * lp.exp();
        if (c.type == LossType::luspo) v = v.slice(1, 0, 1).expand({b.B(), b.T()});
        return v;
      };
      auto library = [&](const torch::Tensor& lp, const torch::Tensor&) {
        auto normaliser = grpo::local_normaliser(
            c.type, b.mask, {.max_completion_length = max_completion_length, .loss_scale_factor = c.loss_scale_factor});
        // Garbage where masked: aggregate must ignore it.
        auto v = torch::where(b.mask, values(lp), torch::full({}, std::nan(""), parity::kF64));
        return grpo::aggregate_loss(v, b.mask, c.type, normaliser);
      };
      auto reference = [&](const torch::Tensor& lp, const torch::Tensor&) {
        if (c.source == "trl") return trl_aggregate(c.name, values(lp), b.maskf(), max_completion_length);
        return ref::verl_agg_loss(values(lp), b.maskf(), c.name, c.loss_scale_factor);
      };
      if (all_masked && c.source == "verl" && c.name != "seq-mean-token-sum-norm") {
        // verl divides 0 by 0 (NaN); the library documents 0 with zero gradient.
        auto e = parity::evaluate(library, b.lp, b.entropy);
        CHECK(e.value.item<double>() == 0.0);
        CHECK(e.grad_lp.abs().max().item<double>() == 0.0);
        continue;
      }
      parity::check_parity(library, reference, b);
    }
  }
}

TEST_CASE("parse_loss_type accepts verl hyphenated loss_agg_mode names [parity]") {
  CHECK(grpo::parse_loss_type("token-mean") == LossType::token_mean);
  CHECK(grpo::parse_loss_type("seq-mean-token-sum") == LossType::seq_mean_token_sum);
  CHECK(grpo::parse_loss_type("seq-mean-token-mean") == LossType::seq_mean_token_mean);
  CHECK(grpo::parse_loss_type("seq-mean-token-sum-norm") == LossType::seq_mean_token_sum_norm);
  for (const char* trl : {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"})
    CHECK(grpo::to_string(grpo::parse_loss_type(trl)) == trl);
}
