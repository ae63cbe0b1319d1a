// SPDX-License-Identifier: Apache-2.0
// GrpoLoss against verl's policy losses + agg_loss + kl_penalty + entropy as dp_actor.py assembles them
// (volcengine/verl @ b178a3cd56f58b2d502255daba591e92833930a7, transcribed in references.hpp), dp_size = 1,
// batch_num_tokens / global_batch_size None. verl divides by 0 on an all-masked batch (NaN), so the all-masked batch
// is checked against the library's documented 0 instead.
#include <grpo/loss/grpo_loss.hpp>

#include <optional>
#include <string>
#include <vector>

#include "parity/parity_support.hpp"
#include "parity/references.hpp"

namespace {

using grpo::GrpoLossOptions;
using grpo::LossImplementation;
using grpo::ImportanceLevel;
using grpo::KlEstimator;
using grpo::LogRatioBounds;
using grpo::LossType;
using grpo::PolicyLossType;
using grpo::SamplerCorrectionMode;
using parity::Batch;
namespace ref = parity::ref;

struct AggMode {
  std::string verl;
  LossType type;
  std::optional<double> loss_scale_factor;
};

const std::vector<AggMode>& agg_modes() {
  static const std::vector<AggMode> modes{{"token-mean", LossType::token_mean, std::nullopt},
                                          {"seq-mean-token-sum", LossType::seq_mean_token_sum, std::nullopt},
                                          {"seq-mean-token-mean", LossType::seq_mean_token_mean, std::nullopt},
                                          {"seq-mean-token-sum-norm", LossType::seq_mean_token_sum_norm, std::nullopt},
                                          {"seq-mean-token-sum-norm", LossType::seq_mean_token_sum_norm, 16.0}};
  return modes;
}

/// The actor-level extras of dp_actor.py: rollout IS weights, KL loss, entropy bonus.
struct Extras {
  std::string name;
  bool rollout_is = false;             // rollout_is_weights = TRL token_truncate ratio (clip [0.5, 2])
  std::optional<std::string> kl_type;  // verl kl_loss_type
  double kl_coef = 0.0;
  double entropy_coeff = 0.0;
};

const std::vector<Extras>& extras() {
  static const std::vector<Extras> e{
      {.name = "plain"},
      {.name = "rollout IS", .rollout_is = true},
      {.name = "kl low_var_kl", .kl_type = "low_var_kl", .kl_coef = 0.01},
      {.name = "kl k3 (verl's = low_var_kl)", .kl_type = "k3", .kl_coef = 0.01},
      {.name = "kl k1", .kl_type = "k1", .kl_coef = 0.02},
      {.name = "kl abs", .kl_type = "abs", .kl_coef = 0.02},
      {.name = "kl mse", .kl_type = "mse", .kl_coef = 0.02},
      {.name = "entropy 0.01", .entropy_coeff = 0.01},
      {.name = "all", .rollout_is = true, .kl_type = "low_var_kl", .kl_coef = 0.01, .entropy_coeff = 0.01},
  };
  return e;
}

KlEstimator library_estimator(const std::string& verl) {
  if (verl == "k3" || verl == "low_var_kl") return KlEstimator::low_var_kl;
  if (verl == "k1" || verl == "kl") return KlEstimator::k1;
  if (verl == "abs") return KlEstimator::abs;
  return KlEstimator::k2;
}

void apply(GrpoLossOptions& o, const Extras& e) {
  if (e.rollout_is) {
    o.sampler_correction.mode = SamplerCorrectionMode::token_truncate;
    o.sampler_correction.clip_min = 0.5;
    o.sampler_correction.clip_max = 2.0;
  }
  if (e.kl_type) {
    o.beta = e.kl_coef;
    o.kl.estimator = library_estimator(*e.kl_type);
  }
  o.entropy_coef = e.entropy_coeff;
  o.entropy_aggregation = grpo::EntropyAggregation::like_loss;
}

/// dp_actor.py update_policy @ b178a3c lines 596-648: pg_loss, − entropy_agg·entropy_coeff, + kl_loss·kl_loss_coef.
torch::Tensor verl_actor_loss(const torch::Tensor& pg_loss, const Batch& b, const torch::Tensor& lp,
                              const torch::Tensor& entropy, const std::string& loss_agg_mode,
                              std::optional<double> loss_scale_factor, const Extras& e) {
  auto mask = b.maskf();
  auto policy_loss = pg_loss;
  if (e.entropy_coeff != 0) {
    auto entropy_agg = ref::verl_agg_loss(entropy, mask, loss_agg_mode, loss_scale_factor);
    policy_loss = policy_loss - entropy_agg * e.entropy_coeff;
  }
  if (e.kl_type) {
    auto kld = ref::verl_kl_penalty(lp, b.ref, *e.kl_type);
    auto kl_loss = ref::verl_agg_loss(kld, mask, loss_agg_mode, loss_scale_factor);
    policy_loss = policy_loss + kl_loss * e.kl_coef;
  }
  return policy_loss;
}

torch::Tensor rollout_is_weights(const Batch& b, const Extras& e) {
  if (!e.rollout_is) return {};
  return ref::trl_vllm_importance_sampling_ratio(b.old, b.sampler, b.maskf(), "token_truncate", 0.5, 2.0);
}

/// verl gets per-token advantages (its estimators broadcast over response_mask).
torch::Tensor verl_advantages(const Batch& b, bool per_token) {
  return per_token ? b.adv_tok : b.adv.unsqueeze(1) * b.maskf();
}

void check_all_masked_zero(const GrpoLossOptions& o, bool per_token) {
  auto b = parity::all_masked_batch();
  INFO("all-masked batch: verl divides 0 by 0 here; the library documents loss 0 and zero gradients");
  auto e = parity::evaluate(
      [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
        return parity::library_loss(o, b, lp, entropy, per_token, true);
      },
      b.lp, b.entropy);
  CHECK(e.value.item<double>() == 0.0);
  CHECK(e.grad_lp.abs().max().item<double>() == 0.0);
  CHECK(e.grad_entropy.abs().max().item<double>() == 0.0);
}

using PgLosses = std::function<torch::Tensor(const Batch& b, const torch::Tensor& lp, const torch::Tensor& adv,
                                             const torch::Tensor& is_weights)>;

/// Runs the library against verl for every agg mode × extras × batch × advantage shape.
void run_verl(const std::string& what, GrpoLossOptions base, const PgLosses& pg_losses,
              const std::vector<AggMode>& modes, bool forced_seq_mean_token_mean = false) {
  for (const auto& mode : modes) {
    for (const auto& e : extras()) {
      for (const bool per_token : {false, true}) {
        GrpoLossOptions o = base;
        o.loss_type = mode.type;
        o.loss_scale_factor = mode.loss_scale_factor;
        apply(o, e);
        for (const auto& b : parity::standard_batches()) {
          for (const auto implementation : {LossImplementation::automatic, LossImplementation::generic}) {
            o.implementation = implementation;
            INFO(what << ", loss_agg_mode " << mode.verl << (mode.loss_scale_factor ? " (factor 16)" : "") << ", "
                      << e.name << ", advantages " << (per_token ? "[B, T]" : "[B]") << ", batch " << b.name
                      << ", implementation " << grpo::to_string(implementation));
            parity::check_parity(
                [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
                  return parity::library_loss(o, b, lp, entropy, per_token, true);
                },
                [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
                  auto mat = pg_losses(b, lp, verl_advantages(b, per_token), rollout_is_weights(b, e));
                  // gspo and sapo aggregate seq-mean-token-mean whatever loss_agg_mode says (core_algos.py 1313, 1397).
                  auto pg_loss = ref::verl_agg_loss(mat, b.maskf(),
                                                    forced_seq_mean_token_mean ? "seq-mean-token-mean" : mode.verl,
                                                    mode.loss_scale_factor);
                  return verl_actor_loss(pg_loss, b, lp, entropy, mode.verl, mode.loss_scale_factor, e);
                },
                b);
          }
        }
        check_all_masked_zero(o, per_token);
      }
    }
  }
}

}  // namespace

TEST_CASE("verl parity: vanilla with dual clip and default bounds [parity]") {
  for (const double c : {3.0, 10.0}) {
    for (const auto& [lo, hi] : std::vector<std::pair<double, double>>{{0.2, 0.2}, {0.2, 0.28}}) {
      GrpoLossOptions o;
      o.policy.type = PolicyLossType::ppo_clip;
      o.policy.epsilon_low = lo;
      o.policy.epsilon_high = hi;
      o.policy.dual_clip_c = c;
      ref::VerlActorConfig cfg{.clip_ratio_low = lo, .clip_ratio_high = hi, .clip_ratio_c = c};
      run_verl("vanilla c=" + std::to_string(c) + " eps " + std::to_string(lo) + "/" + std::to_string(hi), o,
               [&](const Batch& b, const torch::Tensor& lp, const torch::Tensor& adv, const torch::Tensor& w) {
                 return ref::verl_vanilla_pg_losses(b.old, lp, adv, cfg, w);
               },
               agg_modes());
    }
  }
}

TEST_CASE("verl parity: gspo is sequence_token with bounds at_most 10 [parity]") {
  GrpoLossOptions o;
  o.policy.importance_level = ImportanceLevel::sequence_token;
  o.policy.log_ratio_bounds = LogRatioBounds::at_most(10.0);
  o.policy.epsilon_low = 3e-4;
  o.policy.epsilon_high = 4e-4;
  ref::VerlActorConfig cfg{.clip_ratio_low = 3e-4, .clip_ratio_high = 4e-4};
  run_verl("gspo", o,
           [&](const Batch& b, const torch::Tensor& lp, const torch::Tensor& adv, const torch::Tensor& w) {
             return ref::verl_gspo_pg_losses(b.old, lp, adv, b.maskf(), cfg, w);
           },
           {agg_modes()[2]}, true);
}

TEST_CASE("verl parity: sapo with default bounds [parity]") {
  for (const auto& [tp, tn] : std::vector<std::pair<double, double>>{{1.0, 1.05}, {0.5, 2.0}}) {
    GrpoLossOptions o;
    o.policy.type = PolicyLossType::sapo;
    o.policy.sapo_tau_pos = tp;
    o.policy.sapo_tau_neg = tn;
    ref::VerlActorConfig cfg{.tau_pos = tp, .tau_neg = tn};
    run_verl("sapo tau " + std::to_string(tp) + "/" + std::to_string(tn), o,
             [&](const Batch& b, const torch::Tensor& lp, const torch::Tensor& adv, const torch::Tensor& w) {
               return ref::verl_sapo_pg_losses(b.old, lp, adv, cfg, w);
             },
             {agg_modes()[2]}, true);
  }
}

TEST_CASE("verl parity: cispo is cispo_two_sided with default bounds [parity]") {
  GrpoLossOptions o;
  o.policy.type = PolicyLossType::cispo_two_sided;
  o.policy.epsilon_low = 0.2;
  o.policy.epsilon_high = 0.28;
  ref::VerlActorConfig cfg{.clip_ratio_low = 0.2, .clip_ratio_high = 0.28};
  run_verl("cispo", o,
           [&](const Batch& b, const torch::Tensor& lp, const torch::Tensor& adv, const torch::Tensor& w) {
             return ref::verl_cispo_pg_losses(b.old, lp, adv, cfg, w);
           },
           agg_modes());
}

TEST_CASE("verl parity: gpg [parity]") {
  GrpoLossOptions o;
  o.policy.type = PolicyLossType::gpg;
  run_verl("gpg", o,
           [&](const Batch&, const torch::Tensor& lp, const torch::Tensor& adv, const torch::Tensor& w) {
             return ref::verl_gpg_pg_losses(lp, adv, w);
           },
           agg_modes());
}

TEST_CASE("verl parity: kl_cov [parity]") {
  for (const double ratio : {2e-4, 0.1, 0.5}) {
    for (const double coef : {0.1, 1.0}) {
      GrpoLossOptions o;
      o.policy.type = PolicyLossType::kl_cov;
      o.policy.kl_cov_ratio = ratio;
      o.policy.kl_cov_coef = coef;
      ref::VerlActorConfig cfg{.kl_cov_ratio = ratio, .ppo_kl_coef = coef};
      run_verl("kl_cov ratio " + std::to_string(ratio) + " coef " + std::to_string(coef), o,
               [&](const Batch& b, const torch::Tensor& lp, const torch::Tensor& adv, const torch::Tensor& w) {
                 return ref::verl_kl_cov_pg_losses(b.old, lp, adv, b.maskf(), cfg, w);
               },
               {agg_modes()[0], agg_modes()[2]});
    }
  }
}

TEST_CASE("verl parity: clip_cov with every candidate picked [parity]") {
  // clip_cov_ratio 1: min(#candidates, max(int(N), 1)) = every candidate, so the random permutation cannot matter.
  for (const auto& [lb, ub] : std::vector<std::pair<double, double>>{{1.0, 5.0}, {0.05, 5.0}, {-0.3, 0.4}}) {
    GrpoLossOptions o;
    o.policy.type = PolicyLossType::clip_cov;
    o.policy.clip_cov_ratio = 1.0;
    o.policy.clip_cov_lb = lb;
    o.policy.clip_cov_ub = ub;
    ref::VerlActorConfig cfg{.clip_cov_ratio = 1.0, .clip_cov_lb = lb, .clip_cov_ub = ub};
    run_verl("clip_cov lb " + std::to_string(lb) + " ub " + std::to_string(ub), o,
             [&](const Batch& b, const torch::Tensor& lp, const torch::Tensor& adv, const torch::Tensor& w) {
               return ref::verl_clip_cov_pg_losses(b.old, lp, adv, b.maskf(), cfg, w);
             },
             {agg_modes()[0], agg_modes()[2]});
  }
}

TEST_CASE("verl parity: clip_cov random pick under torch manual_seed [parity]") {
  // The library draws from the default generator when PolicyLossOptions::seed is unset (verl behaviour): seeding it
  // identically before each call must give verl's pick.
  for (const double ratio : {0.05, 0.2}) {
    for (const auto& b : parity::standard_batches()) {
      for (uint64_t seed : {11u, 12u, 13u}) {
        INFO("clip_cov ratio " << ratio << " lb 0.05 ub 5, batch " << b.name << ", manual_seed " << seed);
        GrpoLossOptions o;
        o.loss_type = LossType::token_mean;
        o.policy.type = PolicyLossType::clip_cov;
        o.policy.clip_cov_ratio = ratio;
        o.policy.clip_cov_lb = 0.05;
        ref::VerlActorConfig cfg{.clip_cov_ratio = ratio, .clip_cov_lb = 0.05};
        parity::check_parity(
            [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
              torch::manual_seed(seed);
              return parity::library_loss(o, b, lp, entropy, false, true);
            },
            [&](const torch::Tensor& lp, const torch::Tensor&) {
              torch::manual_seed(seed);
              auto mat = ref::verl_clip_cov_pg_losses(b.old, lp, verl_advantages(b, false), b.maskf(), cfg);
              return ref::verl_agg_loss(mat, b.maskf(), "token-mean");
            },
            b);
      }
    }
  }
}

TEST_CASE("verl parity: geo_mean with per-token advantages [parity]") {
  auto batches = parity::standard_batches();
  for (const auto& [lo, hi] : std::vector<std::pair<double, double>>{{0.4, 0.4}, {0.2, 0.3}}) {
    for (const bool is : {false, true}) {
      for (const auto& b : batches) {
        INFO("geo_mean eps " << lo << "/" << hi << (is ? ", rollout IS token_truncate [0.5, 2]" : "") << ", batch "
                             << b.name);
        GrpoLossOptions o;
        o.loss_type = LossType::grpo;
        o.policy.type = PolicyLossType::gmpo;
        o.policy.epsilon_low = lo;
        o.policy.epsilon_high = hi;
        Extras e{.rollout_is = is};
        apply(o, e);
        ref::VerlActorConfig cfg{.clip_ratio_low = lo, .clip_ratio_high = hi};
        parity::check_parity(
            [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
              return parity::library_loss(o, b, lp, entropy, true, true);
            },
            [&](const torch::Tensor& lp, const torch::Tensor&) {
              return ref::verl_geo_mean_loss(b.old, lp, b.adv_tok, b.maskf(), cfg, rollout_is_weights(b, e));
            },
            b);
      }
      GrpoLossOptions o;
      o.loss_type = LossType::grpo;
      o.policy.type = PolicyLossType::gmpo;
      check_all_masked_zero(o, true);
    }
  }
}
