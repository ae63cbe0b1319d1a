// SPDX-License-Identifier: Apache-2.0
// GrpoLoss against TRL's _compute_loss (trl/trainer/grpo_trainer.py), GSPO-token (trl/experimental/gspo_token) and
// GMPOTrainer (trl/experimental/gmpo) @ f2cd57710ae345ea6428ae95363267fcf38a3dc8, transcribed in references.hpp.
#include <grpo/loss/grpo_loss.hpp>

#include <optional>
#include <cmath>
#include <string>
#include <vector>

#include "parity/parity_support.hpp"
#include "parity/references.hpp"

namespace {

using grpo::GrpoLossOptions;
using grpo::ImportanceLevel;
using grpo::LogRatioBounds;
using grpo::LossType;
using grpo::PolicyLossType;
using grpo::SamplerCorrectionMode;
using parity::Batch;

/// One option combination, in both vocabularies.
struct Variant {
  std::string name;
  double beta = 0.0;
  bool bias_corrected_kl = false;
  double top_entropy_quantile = 1.0;
  std::optional<double> off_policy_threshold;
  bool off_policy_uses_sampler = true;
  std::optional<std::string> vllm_mode;  // TRL vllm_importance_sampling_mode
  std::optional<double> clip_min;
  double clip_max = 3.0;
  double entropy_coef = 0.0;
  std::optional<double> delta;
  bool mask_truncated = false;
};

SamplerCorrectionMode sampler_mode(const std::string& trl_mode) { return grpo::parse_sampler_correction_mode(trl_mode); }

std::vector<Variant> variants(bool ppo, bool gspo_token) {
  std::vector<Variant> v;
  v.push_back({.name = "plain"});
  if (ppo) v.push_back({.name = "delta=1.5", .delta = 1.5});
  v.push_back({.name = "beta=0.04", .beta = 0.04});
  if (!gspo_token) v.push_back({.name = "beta=0.04 bias-corrected", .beta = 0.04, .bias_corrected_kl = true});
  v.push_back({.name = "top_entropy=0.6", .top_entropy_quantile = 0.6});
  v.push_back({.name = "top_entropy=0.2", .top_entropy_quantile = 0.2});
  if (!gspo_token) {
    v.push_back({.name = "off_policy=0.05 (sampler)", .off_policy_threshold = 0.05});
    v.push_back({.name = "off_policy=0.05 (old)", .off_policy_threshold = 0.05, .off_policy_uses_sampler = false});
    v.push_back({.name = "off_policy=-0.02 (sampler)", .off_policy_threshold = -0.02});
  }
  for (const char* mode : {"token_truncate", "token_mask", "sequence_truncate", "sequence_mask"}) {
    v.push_back({.name = std::string("vllm ") + mode, .vllm_mode = mode});
    v.push_back({.name = std::string("vllm ") + mode + " [0.5, 1.5]", .vllm_mode = mode, .clip_min = 0.5,
                 .clip_max = 1.5});
  }
  if (!gspo_token) {
    v.push_back({.name = "entropy_coef=0.01", .entropy_coef = 0.01});
    v.push_back({.name = "entropy_coef=0.02 top_entropy=0.5", .top_entropy_quantile = 0.5, .entropy_coef = 0.02});
  }
  v.push_back({.name = "mask_truncated", .mask_truncated = true});
  if (!gspo_token) {
    v.push_back({.name = "all", .beta = 0.04, .bias_corrected_kl = true, .top_entropy_quantile = 0.7,
                 .off_policy_threshold = 0.05, .vllm_mode = "token_truncate", .entropy_coef = 0.01,
                 .mask_truncated = true});
  } else {
    v.push_back({.name = "all", .beta = 0.04, .top_entropy_quantile = 0.7, .vllm_mode = "sequence_mask",
                 .mask_truncated = true});
  }
  return v;
}

parity::ref::TrlInputs trl_inputs(const Batch& b, const Variant& v, const torch::Tensor& lp,
                                  const torch::Tensor& entropy) {
  parity::ref::TrlInputs in;
  auto mask = b.maskf();
  if (v.mask_truncated) mask = mask * (~b.truncated).unsqueeze(1).to(torch::kFloat64);
  in.per_token_logps = lp;
  in.entropies = entropy;
  in.old_per_token_logps = b.old;
  in.ref_per_token_logps = b.ref;
  in.advantages = b.adv;
  in.completion_mask = mask;
  if (v.off_policy_uses_sampler) in.sampling_per_token_logps = b.sampler;
  if (v.vllm_mode) {
    in.sampling_per_token_logps = b.sampler;
    in.importance_sampling_ratio =
        parity::ref::trl_vllm_importance_sampling_ratio(b.old, b.sampler, mask, *v.vllm_mode, v.clip_min, v.clip_max);
  }
  in.num_items_in_batch = mask.sum().item<double>();
  return in;
}

void apply(GrpoLossOptions& o, parity::ref::TrlConfig& c, const Variant& v) {
  o.beta = c.beta = v.beta;
  o.kl_importance_weighted = c.use_bias_correction_kl = v.bias_corrected_kl;
  o.top_entropy_quantile = c.top_entropy_quantile = v.top_entropy_quantile;
  o.off_policy_mask_threshold = c.off_policy_mask_threshold = v.off_policy_threshold;
  o.entropy_coef = c.entropy_coef = v.entropy_coef;
  o.policy.delta = c.delta = v.delta;
  o.mask_truncated_completions = v.mask_truncated;
  if (v.vllm_mode) {
    o.sampler_correction.mode = sampler_mode(*v.vllm_mode);
    o.sampler_correction.clip_min = v.clip_min;
    o.sampler_correction.clip_max = v.clip_max;
  }
}

bool needs_sampler(const Variant& v) { return v.vllm_mode.has_value() || v.off_policy_uses_sampler; }

void run_trl(const GrpoLossOptions& base, const parity::ref::TrlConfig& base_config, const Variant& v,
             const Batch& b) {
  GrpoLossOptions o = base;
  parity::ref::TrlConfig c = base_config;
  apply(o, c, v);
  // Both implementations (the fused CPU kernel where it applies, and the generic composition) against TRL.
  for (const auto implementation : {grpo::LossImplementation::automatic, grpo::LossImplementation::generic}) {
    o.implementation = implementation;
    INFO("batch " << b.name << ", variant " << v.name << ", implementation " << grpo::to_string(implementation));
    parity::check_parity(
        [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
          return parity::library_loss(o, b, lp, entropy, false, needs_sampler(v));
        },
        [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
          return parity::ref::trl_compute_loss(trl_inputs(b, v, lp, entropy), c);
        },
        b);
  }
}

LossType loss_type_of(const std::string& trl) { return grpo::parse_loss_type(trl); }

}  // namespace

TEST_CASE("TRL parity: ppo-clip loss types at token level [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  for (const std::string loss_type : {"grpo", "bnpo", "dr_grpo", "dapo"}) {
    for (const auto& v : variants(true, false)) {
      for (const auto& b : batches) {
        INFO("loss_type " << loss_type << ", importance_sampling_level token, bounds none()");
        GrpoLossOptions o;
        o.loss_type = loss_type_of(loss_type);
        o.max_completion_length = 9;
        o.policy.type = PolicyLossType::ppo_clip;
        o.policy.epsilon_low = 0.2;
        o.policy.epsilon_high = 0.28;
        o.policy.log_ratio_bounds = LogRatioBounds::none();  // TRL does not clamp
        parity::ref::TrlConfig c{.loss_type = loss_type, .epsilon_low = 0.2, .epsilon_high = 0.28,
                                 .max_completion_length = 9};
        run_trl(o, c, v, b);
      }
    }
  }
}

TEST_CASE("TRL parity: GSPO sequence-level importance with default bounds [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  for (const std::string loss_type : {"grpo", "bnpo", "dr_grpo", "dapo"}) {
    for (const auto& v : variants(true, false)) {
      for (const auto& b : batches) {
        INFO("loss_type " << loss_type << ", importance_sampling_level sequence, bounds unset");
        GrpoLossOptions o;
        o.loss_type = loss_type_of(loss_type);
        o.max_completion_length = 9;
        o.policy.importance_level = ImportanceLevel::sequence;
        o.policy.epsilon_low = 3e-4;
        o.policy.epsilon_high = 4e-4;
        parity::ref::TrlConfig c{.loss_type = loss_type, .importance_sampling_level = "sequence",
                                 .epsilon_low = 3e-4, .epsilon_high = 4e-4, .max_completion_length = 9};
        run_trl(o, c, v, b);
      }
    }
  }
}

TEST_CASE("TRL parity: GSPO-token from trl experimental gspo_token with default bounds [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  for (const std::string loss_type : {"grpo", "bnpo", "dr_grpo", "dapo"}) {
    for (const auto& v : variants(true, true)) {
      for (const auto& b : batches) {
        INFO("loss_type " << loss_type << ", importance_sampling_level sequence_token, bounds unset");
        GrpoLossOptions o;
        o.loss_type = loss_type_of(loss_type);
        o.max_completion_length = 9;
        o.policy.importance_level = ImportanceLevel::sequence_token;
        parity::ref::TrlConfig c{.loss_type = loss_type, .importance_sampling_level = "sequence_token",
                                 .max_completion_length = 9};
        run_trl(o, c, v, b);
      }
    }
  }
}

TEST_CASE("TRL parity: cispo loss type [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  for (const double cap : {5.0, 1.1}) {
    for (const auto level : {ImportanceLevel::token, ImportanceLevel::sequence}) {
      for (const auto& v : variants(false, false)) {
        for (const auto& b : batches) {
          INFO("loss_type cispo, epsilon_high " << cap << ", level " << grpo::to_string(level)
                                                << ", bounds unset");
          GrpoLossOptions o;
          o.loss_type = LossType::cispo;
          o.policy.type = PolicyLossType::cispo;
          o.policy.importance_level = level;
          o.policy.epsilon_high = cap;
          parity::ref::TrlConfig c{.loss_type = "cispo",
                                   .importance_sampling_level = std::string(grpo::to_string(level)),
                                   .epsilon_high = cap};
          run_trl(o, c, v, b);
        }
      }
    }
  }
}

TEST_CASE("TRL parity: sapo loss type with bounds none [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  for (const auto level : {ImportanceLevel::token, ImportanceLevel::sequence}) {
    for (const auto& v : variants(false, false)) {
      for (const auto& b : batches) {
        INFO("loss_type sapo, tau 1.0/1.05, level " << grpo::to_string(level) << ", bounds none()");
        GrpoLossOptions o;
        o.loss_type = LossType::sapo;
        o.policy.type = PolicyLossType::sapo;
        o.policy.importance_level = level;
        o.policy.log_ratio_bounds = LogRatioBounds::none();
        parity::ref::TrlConfig c{.loss_type = "sapo",
                                 .importance_sampling_level = std::string(grpo::to_string(level))};
        run_trl(o, c, v, b);
      }
    }
  }
}

TEST_CASE("TRL parity: vespo loss type with default bounds [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  for (const auto& v : variants(false, false)) {
    // With a vLLM mode, TRL folds the ratio into the gamma weight's S instead of multiplying the loss.
    for (const auto& b : batches) {
      for (const bool custom : {false, true}) {
        INFO("loss_type vespo, " << (custom ? "k/lambda 1.5,0.5,4,1" : "TRL default k/lambda"));
        GrpoLossOptions o;
        o.loss_type = LossType::vespo;
        o.policy.type = PolicyLossType::vespo;
        parity::ref::TrlConfig c{.loss_type = "vespo"};
        if (custom) {
          o.policy.vespo_k_pos = c.vespo_k_pos = 1.5;
          o.policy.vespo_lambda_pos = c.vespo_lambda_pos = 0.5;
          o.policy.vespo_k_neg = c.vespo_k_neg = 4.0;
          o.policy.vespo_lambda_neg = c.vespo_lambda_neg = 1.0;
        }
        run_trl(o, c, v, b);
      }
    }
  }
}

TEST_CASE("TRL parity: LUSPO accepted combinations [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  std::vector<Variant> accepted{
      {.name = "plain"},
      {.name = "delta=1.5", .delta = 1.5},
      {.name = "off_policy=0.05", .off_policy_threshold = 0.05},
      {.name = "vllm sequence_truncate", .vllm_mode = "sequence_truncate"},
      {.name = "vllm sequence_mask [0.5, 1.5]", .vllm_mode = "sequence_mask", .clip_min = 0.5, .clip_max = 1.5},
      {.name = "entropy_coef=0.01", .entropy_coef = 0.01},
      {.name = "mask_truncated", .mask_truncated = true},
  };
  for (const auto& v : accepted) {
    for (const auto& b : batches) {
      INFO("loss_type luspo, importance_sampling_level sequence");
      GrpoLossOptions o;
      o.loss_type = LossType::luspo;
      o.policy.importance_level = ImportanceLevel::sequence;
      o.policy.epsilon_low = 3e-4;
      o.policy.epsilon_high = 4e-4;
      parity::ref::TrlConfig c{.loss_type = "luspo", .importance_sampling_level = "sequence", .epsilon_low = 3e-4,
                               .epsilon_high = 4e-4};
      run_trl(o, c, v, b);
    }
  }
}

TEST_CASE("LUSPO refuses per-token terms and token-level importance [parity]") {
  auto refused = [](const std::string& what, auto edit) {
    GrpoLossOptions o;
    o.loss_type = LossType::luspo;
    o.policy.importance_level = ImportanceLevel::sequence;
    edit(o);
    INFO(what);
    CHECK_THROWS_AS(grpo::GrpoLoss(o), grpo::ConfigError);
  };
  refused("importance_level token", [](GrpoLossOptions& o) { o.policy.importance_level = ImportanceLevel::token; });
  refused("importance_level sequence_token",
          [](GrpoLossOptions& o) { o.policy.importance_level = ImportanceLevel::sequence_token; });
  refused("beta > 0", [](GrpoLossOptions& o) { o.beta = 0.04; });
  refused("top_entropy_quantile < 1", [](GrpoLossOptions& o) { o.top_entropy_quantile = 0.5; });
  refused("sampler correction token_truncate",
          [](GrpoLossOptions& o) { o.sampler_correction.mode = SamplerCorrectionMode::token_truncate; });
  refused("sampler correction token_mask",
          [](GrpoLossOptions& o) { o.sampler_correction.mode = SamplerCorrectionMode::token_mask; });
  GrpoLossOptions ok;
  ok.loss_type = LossType::luspo;
  ok.policy.importance_level = ImportanceLevel::sequence;
  ok.sampler_correction.mode = SamplerCorrectionMode::sequence_mask;
  CHECK_NOTHROW(grpo::GrpoLoss(ok));
}

TEST_CASE("TRL parity: GMPO with advantages of shape B [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  struct G {
    std::string name;
    double eps_low, eps_high, beta, top;
  };
  const std::vector<G> configs{{"eps 0.4", 0.4, 0.4, 0.0, 1.0},
                               {"eps 0.2/0.3", 0.2, 0.3, 0.0, 1.0},
                               {"eps 0.4 beta 0.04", 0.4, 0.4, 0.04, 1.0},
                               {"eps 0.4 top_entropy 0.5", 0.4, 0.4, 0.0, 0.5},
                               {"eps 0.4 top_entropy 0.2 beta 0.1", 0.4, 0.4, 0.1, 0.2}};
  for (const auto& g : configs) {
    for (const auto& b : batches) {
      INFO("GMPO " << g.name << ", batch " << b.name);
      GrpoLossOptions o;
      o.loss_type = LossType::grpo;
      o.policy.type = PolicyLossType::gmpo;
      o.policy.epsilon_low = g.eps_low;
      o.policy.epsilon_high = g.eps_high;
      o.beta = g.beta;
      o.top_entropy_quantile = g.top;
      parity::ref::TrlConfig c{.epsilon_low = g.eps_low, .epsilon_high = g.eps_high, .beta = g.beta,
                               .top_entropy_quantile = g.top};
      parity::check_parity(
          [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
            return parity::library_loss(o, b, lp, entropy, false, false);
          },
          [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
            parity::ref::TrlInputs in;
            in.per_token_logps = lp;
            in.entropies = entropy;
            in.old_per_token_logps = b.old;
            in.ref_per_token_logps = b.ref;
            in.advantages = b.adv;
            in.completion_mask = b.maskf();
            return parity::ref::trl_gmpo_loss(in, c);
          },
          b);
    }
  }
}

TEST_CASE("GMPO requires loss type grpo [parity]") {
  for (const auto type : {LossType::dapo, LossType::bnpo, LossType::seq_mean_token_mean, LossType::token_mean}) {
    GrpoLossOptions o;
    o.loss_type = type;
    o.policy.type = PolicyLossType::gmpo;
    INFO("loss_type " << grpo::to_string(type));
    CHECK_THROWS_AS(grpo::GrpoLoss(o), grpo::ConfigError);
  }
}

TEST_CASE("Default token-level bounds are verl's and differ from TRL beyond 20 [parity]") {
  // The edge batch has log ratios of ±30 and ±100 with A < 0: TRL (no clamp) and the library's default ±20 must
  // differ there, and agree once the bounds are none(). Guards against an edge batch that exercises nothing.
  const auto b = parity::edge_batch();
  GrpoLossOptions o;
  o.loss_type = LossType::dapo;
  parity::ref::TrlConfig c{.loss_type = "dapo"};
  Variant plain{.name = "plain"};
  auto lib = parity::evaluate(
      [&](const torch::Tensor& lp, const torch::Tensor& e) { return parity::library_loss(o, b, lp, e, false, false); },
      b.lp, b.entropy);
  auto trl = parity::evaluate(
      [&](const torch::Tensor& lp, const torch::Tensor& e) {
        return parity::ref::trl_compute_loss(trl_inputs(b, plain, lp, e), c);
      },
      b.lp, b.entropy);
  INFO("library (unset bounds) " << lib.value.item<double>() << ", TRL " << trl.value.item<double>());
  CHECK(std::abs(lib.value.item<double>() - trl.value.item<double>()) > 1e3);
  o.policy.log_ratio_bounds = LogRatioBounds::none();
  run_trl(o, c, plain, b);
}

TEST_CASE("TRL parity: bias-corrected KL weight is unclamped when bounds are unset [parity]") {
  // With unset bounds the token-level surrogate is clamped at ±20 (verl) but TRL's coef_1 on the KL is not. The KL
  // term is additive, so loss(β, KL·w) − loss(β = 0) isolates β·agg(KL·w) on both sides. The reference log-probs
  // are kept near lp here: at lp_ref − lp = 19.5 the gradient of k3·w is a difference of two e^19.5 terms
  // (condition ~1e7), whose rounding differs at 1e-9 once the two sides are assembled differently.
  auto b = parity::edge_batch();
  torch::manual_seed(31);
  b.ref = parity::clean(b.lp + 0.3 * torch::randn(b.lp.sizes(), parity::kF64), b.mask, b.lp);
  parity::add_garbage(b);
  for (const std::string loss_type : {"dapo", "grpo", "bnpo"}) {
    for (const std::string level : {"token", "sequence"}) {
      INFO("loss_type " << loss_type << ", level " << level << ", bounds unset, batch edge");
      GrpoLossOptions o;
      o.loss_type = loss_type_of(loss_type);
      o.policy.importance_level = grpo::parse_importance_level(level);
      o.beta = 0.04;
      o.kl_importance_weighted = true;
      GrpoLossOptions o0 = o;
      o0.beta = 0.0;
      o0.kl_importance_weighted = false;
      parity::ref::TrlConfig c{.loss_type = loss_type, .importance_sampling_level = level, .beta = 0.04,
                               .use_bias_correction_kl = true};
      parity::ref::TrlConfig c0 = c;
      c0.beta = 0.0;
      c0.use_bias_correction_kl = false;
      Variant plain{.name = "plain"};
      parity::check_parity(
          [&](const torch::Tensor& lp, const torch::Tensor& e) {
            return parity::library_loss(o, b, lp, e, false, false) - parity::library_loss(o0, b, lp, e, false, false);
          },
          [&](const torch::Tensor& lp, const torch::Tensor& e) {
            return parity::ref::trl_compute_loss(trl_inputs(b, plain, lp, e), c) -
                   parity::ref::trl_compute_loss(trl_inputs(b, plain, lp, e), c0);
          },
          b);
    }
  }
}
