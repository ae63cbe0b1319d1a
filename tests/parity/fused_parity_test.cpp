// SPDX-License-Identifier: Apache-2.0
// FusedGrpoLoss against GrpoLoss (value and gradient w.r.t. log_probs, float64) on every option combination it
// accepts, and the ConfigError on the ones it refuses (include/grpo/logprob/fused_grpo_loss.hpp).
#include <grpo/logprob/fused_grpo_loss.hpp>
#include <grpo/loss/grpo_loss.hpp>

#include <optional>
#include <string>
#include <vector>

#include "parity/parity_support.hpp"

namespace {

using grpo::FusedGrpoLoss;
using grpo::GrpoLoss;
using grpo::GrpoLossOptions;
using grpo::ImportanceLevel;
using grpo::KlEstimator;
using grpo::LogRatioBounds;
using grpo::LossType;
using grpo::PolicyLossType;
using parity::Batch;

torch::Tensor run(const auto& loss, const Batch& b, const torch::Tensor& lp, const torch::Tensor& entropy,
                  bool with_ref) {
  grpo::LossInputs inputs{.log_probs = lp,
                          .old_log_probs = b.old_lib,
                          .ref_log_probs = with_ref ? b.ref_lib : torch::Tensor(),
                          .advantages = b.adv,
                          .mask = b.mask,
                          .entropy = entropy.detach(),
                          .truncated = b.truncated};
  return loss(inputs, loss.local_normaliser(inputs)).loss;
}

}  // namespace

TEST_CASE("FusedGrpoLoss matches GrpoLoss on every accepted option [parity]") {
  const std::vector<LossType> loss_types{LossType::grpo,       LossType::bnpo,
                                         LossType::dr_grpo,    LossType::dapo,
                                         LossType::cispo,      LossType::luspo,
                                         LossType::token_mean, LossType::seq_mean_token_sum,
                                         LossType::seq_mean_token_mean, LossType::seq_mean_token_sum_norm};
  std::vector<std::optional<LogRatioBounds>> bounds{std::nullopt, LogRatioBounds::none(),
                                                    LogRatioBounds::symmetric(20.0), LogRatioBounds::at_most(10.0)};
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  int compared = 0, refused = 0;
  for (const auto loss_type : loss_types) {
    for (const auto policy : {PolicyLossType::ppo_clip, PolicyLossType::cispo}) {
      if ((loss_type == LossType::cispo) != (policy == PolicyLossType::cispo)) continue;
      for (const auto level : {ImportanceLevel::token, ImportanceLevel::sequence}) {
        for (const std::optional<KlEstimator> kl : std::vector<std::optional<KlEstimator>>{
                 std::nullopt, KlEstimator::k1, KlEstimator::abs, KlEstimator::k2, KlEstimator::k3,
                 KlEstimator::low_var_kl}) {
          for (const bool truncated : {false, true}) {
            for (const auto& bound : bounds) {
              GrpoLossOptions o;
              o.loss_type = loss_type;
              o.max_completion_length = 9;
              o.policy.type = policy;
              o.policy.importance_level = level;
              o.policy.epsilon_high = policy == PolicyLossType::cispo ? 4.0 : 0.28;
              o.policy.log_ratio_bounds = bound;
              if (kl) {
                o.beta = 0.05;
                o.kl.estimator = *kl;
              }
              o.mask_truncated_completions = truncated;
              const std::string combo =
                  fmt::format("loss_type {}, policy {}, level {}, kl {}, truncated {}, bounds {}",
                              grpo::to_string(loss_type), grpo::to_string(policy),
                              grpo::to_string(level), kl ? std::string(grpo::to_string(*kl)) : "none",
                              truncated, bound ? fmt::format("[{}, {}]", bound->low, bound->high) : "unset");
              INFO(combo);
              bool valid = true;
              try {
                GrpoLoss probe(o);
              } catch (const grpo::ConfigError&) {
                valid = false;  // GrpoLoss refuses it too (e.g. luspo at token level)
              }
              if (!valid) continue;
              const std::string reason = FusedGrpoLoss::unsupported_reason(o);
              if (!reason.empty()) {
                ++refused;
                INFO("refused: " << reason);
                CHECK_THROWS_AS(FusedGrpoLoss(o), grpo::ConfigError);
                // Combinations the header documents as supported must not be refused.
                CHECK(!(bound == std::nullopt));
                continue;
              }
              GrpoLossOptions generic = o;  // GrpoLoss would otherwise run the fused kernel itself
              generic.implementation = grpo::LossImplementation::generic;
              GrpoLoss reference(generic);
              FusedGrpoLoss fused(o);
              for (const auto& b : batches) {
                INFO("batch " << b.name);
                ++compared;
                parity::check_parity(
                    [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
                      return run(fused, b, lp, entropy, kl.has_value());
                    },
                    [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
                      return run(reference, b, lp, entropy, kl.has_value());
                    },
                    b);
              }
            }
          }
        }
      }
    }
  }
  INFO("compared " << compared << " batches, refused " << refused << " combinations");
  CHECK(compared > 0);
}

TEST_CASE("FusedGrpoLoss refuses the options it does not support [parity]") {
  auto refused = [](const std::string& what, auto edit) {
    GrpoLossOptions o;
    edit(o);
    INFO(what);
    CHECK_FALSE(FusedGrpoLoss::unsupported_reason(o).empty());
    CHECK_THROWS_AS(FusedGrpoLoss(o), grpo::ConfigError);
  };
  refused("entropy_coef", [](GrpoLossOptions& o) { o.entropy_coef = 0.01; });
  refused("top_entropy_quantile", [](GrpoLossOptions& o) { o.top_entropy_quantile = 0.5; });
  refused("delta", [](GrpoLossOptions& o) { o.policy.delta = 1.5; });
  refused("dual_clip_c", [](GrpoLossOptions& o) { o.policy.dual_clip_c = 3.0; });
  refused("sampler correction", [](GrpoLossOptions& o) {
    o.sampler_correction.mode = grpo::SamplerCorrectionMode::token_truncate;
  });
  refused("off-policy mask", [](GrpoLossOptions& o) { o.off_policy_mask_threshold = 0.1; });
  refused("kl_importance_weighted", [](GrpoLossOptions& o) {
    o.beta = 0.1;
    o.kl_importance_weighted = true;
  });
  refused("kl clamp", [](GrpoLossOptions& o) {
    o.beta = 0.1;
    o.kl.clamp = 10.0;
  });
  refused("kl straight-through", [](GrpoLossOptions& o) {
    o.beta = 0.1;
    o.kl.straight_through = true;
  });
  refused("sapo", [](GrpoLossOptions& o) {
    o.loss_type = LossType::sapo;
    o.policy.type = PolicyLossType::sapo;
  });
  refused("vespo", [](GrpoLossOptions& o) {
    o.loss_type = LossType::vespo;
    o.policy.type = PolicyLossType::vespo;
  });
  refused("gmpo", [](GrpoLossOptions& o) {
    o.loss_type = LossType::grpo;
    o.policy.type = PolicyLossType::gmpo;
  });
  refused("gpg", [](GrpoLossOptions& o) { o.policy.type = PolicyLossType::gpg; });
  refused("clip_cov", [](GrpoLossOptions& o) { o.policy.type = PolicyLossType::clip_cov; });
  refused("kl_cov", [](GrpoLossOptions& o) { o.policy.type = PolicyLossType::kl_cov; });
  refused("cispo_two_sided", [](GrpoLossOptions& o) { o.policy.type = PolicyLossType::cispo_two_sided; });
  refused("sequence_token", [](GrpoLossOptions& o) { o.policy.importance_level = ImportanceLevel::sequence_token; });
}
