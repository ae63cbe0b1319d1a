// SPDX-License-Identifier: Apache-2.0
// kl_penalty against verl kl_penalty / kl_penalty_forward (volcengine/verl @ b178a3c) and TRL's unclamped k3
// (huggingface/trl @ f2cd577); sampler_correction_weights, top_entropy_mask and off_policy_sequence_mask against
// TRL's vLLM importance sampling ratio, get_high_entropy_mask and get_off_policy_mask.
#include <grpo/kl/kl_penalty.hpp>
#include <grpo/loss/importance_correction.hpp>
#include <grpo/loss/token_masks.hpp>

#include <optional>
#include <string>
#include <vector>

#include "parity/parity_support.hpp"
#include "parity/references.hpp"

namespace {

using grpo::KlEstimator;
using grpo::KlOptions;
namespace ref = parity::ref;

/// lp and lp_ref [4, 9]: random pairs plus Δ = lp − lp_ref of ±19.99, ±20.01, ±30, ±100 and 0.
std::pair<torch::Tensor, torch::Tensor> kl_inputs() {
  torch::manual_seed(5);
  auto lp = -torch::rand({4, 9}, parity::kF64) * 3 - 0.05;
  auto ref_lp = lp + 0.7 * torch::randn({4, 9}, parity::kF64);
  const std::vector<double> deltas{19.99, -19.99, 20.01, -20.01, 30.0, -30.0, 100.0, -100.0, 0.0};
  for (int64_t t = 0; t < 9; ++t) ref_lp[3][t] = lp[3][t].item<double>() - deltas[t];
  return {lp, ref_lp};
}

}  // namespace

TEST_CASE("kl_penalty matches verl kl_penalty_forward and TRL k3 [parity]") {
  auto [lp0, ref_lp] = kl_inputs();
  torch::manual_seed(6);
  auto weights = torch::randn(lp0.sizes(), parity::kF64);
  struct C {
    std::string name;  // verl kl_loss_type, or "trl k3"
    KlEstimator estimator;
  };
  const std::vector<C> cases{{"k1", KlEstimator::k1},       {"kl", KlEstimator::k1},
                             {"abs", KlEstimator::abs},     {"k2", KlEstimator::k2},
                             {"mse", KlEstimator::k2},      {"low_var_kl", KlEstimator::low_var_kl},
                             {"k3", KlEstimator::low_var_kl}, {"trl k3", KlEstimator::k3}};
  for (const auto& c : cases) {
    INFO("estimator " << c.name);
    parity::Batch dummy;
    dummy.entropy = torch::zeros_like(lp0);
    parity::check_parity(
        [&](const torch::Tensor& lp, const torch::Tensor&) {
          return (grpo::kl_penalty(lp, ref_lp, KlOptions{.estimator = c.estimator}) * weights).sum();
        },
        [&](const torch::Tensor& lp, const torch::Tensor&) {
          auto kl = c.name == "trl k3" ? ref::trl_per_token_kl(lp, ref_lp) : ref::verl_kl_penalty(lp, ref_lp, c.name);
          return (kl * weights).sum();
        },
        [&] {
          dummy.lp = lp0;
          return dummy;
        }());
  }
}

TEST_CASE("kl_penalty straight-through matches verl kl_penalty plus forms [parity]") {
  auto [lp0, ref_lp] = kl_inputs();
  torch::manual_seed(7);
  auto weights = torch::randn(lp0.sizes(), parity::kF64);
  for (const std::string name : {"k1+", "kl+", "abs+", "low_var_kl+", "k3+", "k2+", "mse+"}) {
    INFO("verl kl_loss_type " << name << " (parsed by parse_kl_estimator; verl's k3 is low_var_kl)");
    KlOptions options;
    if (name == "k3+") {
      options = KlOptions{.estimator = KlEstimator::low_var_kl, .straight_through = true};
    } else {
      options = grpo::parse_kl_estimator(name);
    }
    parity::Batch dummy;
    dummy.lp = lp0;
    dummy.entropy = torch::zeros_like(lp0);
    parity::check_parity(
        [&](const torch::Tensor& lp, const torch::Tensor&) {
          return (grpo::kl_penalty(lp, ref_lp, options) * weights).sum();
        },
        [&](const torch::Tensor& lp, const torch::Tensor&) {
          return (ref::verl_kl_penalty(lp, ref_lp, name) * weights).sum();
        },
        dummy);
  }
}

TEST_CASE("parse_kl_estimator maps verl and TRL names [parity]") {
  CHECK(grpo::parse_kl_estimator("kl").estimator == KlEstimator::k1);
  CHECK(grpo::parse_kl_estimator("mse").estimator == KlEstimator::k2);
  CHECK(grpo::parse_kl_estimator("low_var_kl").estimator == KlEstimator::low_var_kl);
  CHECK(grpo::parse_kl_estimator("k3").estimator == KlEstimator::k3);  // TRL's unclamped k3 (documented clash)
  CHECK(grpo::parse_kl_estimator("low_var_kl+").straight_through);
  CHECK_FALSE(grpo::parse_kl_estimator("low_var_kl").straight_through);
}

TEST_CASE("sampler_correction_weights match TRL vLLM importance sampling ratio [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  for (const std::string mode : {"token_truncate", "token_mask", "sequence_truncate", "sequence_mask"}) {
    for (const auto& [lo, hi] : std::vector<std::pair<std::optional<double>, double>>{
             {std::nullopt, 3.0}, {0.5, 1.5}, {0.9, 1.1}, {std::nullopt, 1.01}}) {
      for (const auto& b : batches) {
        INFO("mode " << mode << ", clip_min " << (lo ? std::to_string(*lo) : "None") << ", clip_max " << hi
                     << ", batch " << b.name);
        grpo::SamplerCorrectionOptions options{
            .mode = grpo::parse_sampler_correction_mode(mode), .clip_min = lo, .clip_max = hi};
        auto lib = grpo::sampler_correction_weights(b.old_lib, b.sampler_lib, b.mask, options);
        auto expected = ref::trl_vllm_importance_sampling_ratio(b.old, b.sampler, b.maskf(), mode, lo, hi)
                            .expand({b.B(), b.T()});
        // Compared where the loss uses them (valid tokens).
        PARITY_CHECK_CLOSE(lib * b.maskf(), expected * b.maskf());
      }
    }
  }
}

TEST_CASE("top_entropy_mask matches TRL get_high_entropy_mask [parity]") {
  auto batches = parity::standard_batches();
  batches.push_back(parity::all_masked_batch());
  batches.push_back(parity::random_batch(16, 33, 8));
  for (const double rho : {1.0, 0.8, 0.6, 0.5, 0.2, 0.05}) {
    for (const auto& b : batches) {
      INFO("top_entropy_quantile " << rho << ", batch " << b.name);
      const double threshold = grpo::top_entropy_threshold(b.entropy, b.mask, rho);
      auto lib = grpo::top_entropy_mask(b.entropy, b.mask, threshold);
      auto expected = ref::trl_get_high_entropy_mask(b.entropy, b.maskf(), 1 - rho).to(torch::kFloat64);
      PARITY_CHECK_CLOSE(lib.to(torch::kFloat64), expected);
    }
  }
}

TEST_CASE("off_policy_sequence_mask matches TRL get_off_policy_mask [parity]") {
  for (const auto& b : parity::standard_batches()) {
    for (const double threshold : {-0.05, 0.0, 0.02, 0.1, 1.0}) {
      for (const bool per_token : {false, true}) {
        for (const bool sampler : {true, false}) {
          INFO("threshold " << threshold << ", advantages " << (per_token ? "[B, T]" : "[B]") << ", "
                            << (sampler ? "sampler" : "old") << " log-probs, batch " << b.name);
          const auto& s_lib = sampler ? b.sampler_lib : b.old_lib;
          const auto& s = sampler ? b.sampler : b.old;
          auto adv = per_token ? b.adv_tok : b.adv;
          auto lib = grpo::off_policy_sequence_mask(b.lp, s_lib, adv, b.mask, threshold);
          auto expected = ref::trl_get_off_policy_mask(per_token ? adv : adv.unsqueeze(1), b.lp, s, b.maskf(),
                                                       threshold)
                              .expand({b.B(), b.T()});
          PARITY_CHECK_CLOSE(lib * b.maskf(), expected * b.maskf());
        }
      }
    }
  }
}
