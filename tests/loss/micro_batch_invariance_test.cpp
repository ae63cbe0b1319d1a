// SPDX-License-Identifier: Apache-2.0
// The acceptance test of the explicit normaliser: a batch split into 1, 2 or 4 micro-batches, each given the
// whole batch's normaliser, yields the same summed loss and gradient for every loss type and aggregation mode,
// with and without KL, entropy bonus, masks and sampler correction.
#include <grpo/loss/grpo_loss.hpp>
#include <string>
#include <vector>

#include "support/loss_testing.hpp"
#include "support/tensor_testing.hpp"

namespace {

using grpo::GrpoLoss;
using grpo::GrpoLossOptions;
using grpo::LossInputs;
using grpo::LossType;
using grpo::Normaliser;
using grpo::PolicyLossType;

constexpr int64_t kB = 8, kT = 6;

const std::vector<LossType> kAllLossTypes = {LossType::grpo,
                                             LossType::bnpo,
                                             LossType::dr_grpo,
                                             LossType::dapo,
                                             LossType::cispo,
                                             LossType::sapo,
                                             LossType::luspo,
                                             LossType::vespo,
                                             LossType::token_mean,
                                             LossType::seq_mean_token_sum,
                                             LossType::seq_mean_token_mean,
                                             LossType::seq_mean_token_sum_norm};

struct Case {
  std::string name;
  GrpoLossOptions options;
};

GrpoLossOptions base(LossType type) {
  GrpoLossOptions o;
  o.loss_type = type;
  o.max_completion_length = kT;
  if (type == LossType::cispo) o.policy.type = PolicyLossType::cispo;
  if (type == LossType::sapo) o.policy.type = PolicyLossType::sapo;
  if (type == LossType::vespo) o.policy.type = PolicyLossType::vespo;
  if (type == LossType::luspo) o.policy.importance_level = grpo::ImportanceLevel::sequence;
  return o;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (auto type : kAllLossTypes) {
    const std::string name(grpo::to_string(type));
    out.push_back({name, base(type)});
    // luspo refuses per-token terms (a KL, the top-entropy mask; grpo_loss.hpp): only its entropy bonus.
    auto kl = base(type);  // β > 0 (importance-weighted k3) and an entropy bonus
    kl.beta = type == LossType::luspo ? 0.0 : 0.04;
    kl.kl_importance_weighted = true;
    kl.entropy_coef = 0.01;
    // verl's entropy term, aggregated like the loss, is split-invariant; TRL's token mean is not for the
    // sequence-normalised types (it is the micro-batch's own mean, ÷ GA).
    kl.entropy_aggregation = grpo::EntropyAggregation::like_loss;
    out.push_back({name + (type == LossType::luspo ? " + entropy" : " + kl + entropy"), kl});
    if (type == LossType::luspo) continue;
    auto all = kl;  // ... and every mask and the sampler correction
    all.top_entropy_quantile = 0.5;
    all.off_policy_mask_threshold = 0.02;
    all.mask_truncated_completions = true;
    if (all.policy.type != PolicyLossType::vespo)
      all.sampler_correction.mode = grpo::SamplerCorrectionMode::sequence_mask;
    out.push_back({name + " + all masks", all});
  }
  // Other surrogates under a token and a sequence aggregation.
  for (auto type : {LossType::dapo, LossType::grpo}) {
    const std::string name(grpo::to_string(type));
    for (auto policy : {PolicyLossType::cispo_two_sided, PolicyLossType::gpg, PolicyLossType::gmpo}) {
      if (policy == PolicyLossType::gmpo && type == LossType::dapo) continue;  // gmpo needs a sequence mean
      auto o = base(type);
      o.policy.type = policy;
      out.push_back({name + " / " + std::string(grpo::to_string(policy)), o});
    }
    auto gspo_token = base(type);
    gspo_token.policy.importance_level = grpo::ImportanceLevel::sequence_token;
    gspo_token.policy.dual_clip_c = 3.0;
    out.push_back({name + " / gspo_token + dual clip", gspo_token});
  }
  return out;
}

LossInputs slice(const LossInputs& in, int64_t begin, int64_t end) {
  LossInputs out = in;
  for (auto* t : {&out.log_probs, &out.old_log_probs, &out.ref_log_probs, &out.advantages, &out.mask, &out.entropy,
                  &out.sampler_log_probs, &out.truncated}) {
    *t = t->slice(0, begin, end);
  }
  return out;
}

struct Result {
  double loss;
  torch::Tensor grad_log_probs, grad_entropy;
};

// Sum of the micro-batch losses and of their gradients, every micro-batch given `normaliser`.
Result run(const GrpoLoss& loss, const LossInputs& data, int64_t splits, const Normaliser& normaliser) {
  auto lp = data.log_probs.detach().clone().requires_grad_(true);
  auto h = data.entropy.detach().clone().requires_grad_(true);
  LossInputs in = data;
  in.log_probs = lp;
  in.entropy = h;
  double total = 0.0;
  const int64_t size = kB / splits;
  for (int64_t s = 0; s < splits; ++s) {
    auto out = loss(slice(in, s * size, (s + 1) * size), normaliser);
    total += out.loss.item<double>();
    out.loss.backward();
  }
  // Without an entropy bonus the entropy only feeds the metrics and gets no gradient.
  return {total, lp.grad().clone(), h.grad().defined() ? h.grad().clone() : torch::zeros_like(h)};
}

// The shared random batch (empty row 1, truncated row 7, garbage at padded positions).
LossInputs random_inputs() { return grpo::testing::random_loss_batch(kB, kT, 61).inputs(); }

}  // namespace

TEST_CASE("micro-batch invariance: 1, 2 and 4 splits give the same summed loss and gradient for every mode",
          "[loss][invariance]") {
  const LossInputs data = random_inputs();
  for (const auto& c : cases()) {
    INFO("case " << c.name);
    GrpoLoss loss(c.options);
    LossInputs in = data;
    if (c.options.top_entropy_quantile < 1.0) {
      // What TRL gathers across ranks: the threshold over the whole batch's valid tokens.
      in.entropy_threshold = grpo::top_entropy_threshold(
          in.entropy, grpo::truncated_completion_mask(in.mask, in.truncated), c.options.top_entropy_quantile);
    }
    const Normaliser global = loss.local_normaliser(in);
    // Counts of the whole batch are the sums of the micro-batches' own counts (dr_grpo's B·L_max too);
    // verl's loss_scale_factor is a fixed constant.
    double summed = 0.0;
    for (int64_t s = 0; s < 4; ++s) summed += loss.local_normaliser(slice(in, 2 * s, 2 * s + 2)).value();
    if (c.options.loss_type == LossType::seq_mean_token_sum_norm) {
      REQUIRE(global.value() == static_cast<double>(kT));
    } else {
      REQUIRE(summed == global.value());
    }
    const Result whole = run(loss, in, 1, global);
    REQUIRE(whole.grad_log_probs.abs().sum().item<double>() > 0.0);
    for (int64_t splits : {2, 4}) {
      INFO("splits " << splits);
      const Result parts = run(loss, in, splits, global);
      REQUIRE(parts.loss == Approx(whole.loss).margin(1e-12));
      GRPO_REQUIRE_CLOSE(parts.grad_log_probs, whole.grad_log_probs, 0, 1e-6);
      GRPO_REQUIRE_CLOSE(parts.grad_entropy, whole.grad_entropy, 0, 1e-6);
      // Far tighter than the acceptance bound: the same terms, summed in another order.
      GRPO_REQUIRE_CLOSE(parts.grad_log_probs, whole.grad_log_probs, 0, 1e-13);
    }
  }
}

TEST_CASE("micro-batch invariance: bnpo with each micro-batch's own token count is TRL's bnpo, not invariant",
          "[loss][invariance]") {
  // bnpo normalises by the micro-batch's own token count (TRL); that weights micro-batches with fewer tokens
  // more, so the summed gradient of a split batch differs from the whole one (here by the split's token counts).
  const LossInputs in = random_inputs();
  GrpoLoss loss(base(LossType::bnpo));
  const Result whole = run(loss, in, 1, loss.local_normaliser(in));
  auto lp = in.log_probs.detach().clone().requires_grad_(true);
  LossInputs with_grad = in;
  with_grad.log_probs = lp;
  for (int64_t s = 0; s < 2; ++s) {
    auto part = slice(with_grad, 4 * s, 4 * s + 4);
    // TRL: Σ m·L / max(Σ m, 1) / GA with GA = 2 micro-batches.
    (loss(part, loss.local_normaliser(part)).loss / 2.0).backward();
  }
  const double first = in.mask.slice(0, 0, 4).sum().item<double>();
  const double second = in.mask.slice(0, 4, 8).sum().item<double>();
  REQUIRE(first != second);
  REQUIRE((lp.grad() - whole.grad_log_probs).abs().max().item<double>() > 1e-6);
  // The gradient of the first half is scaled by total/(2·first) relative to the invariant one.
  const double total = first + second;
  GRPO_REQUIRE_CLOSE(lp.grad().slice(0, 0, 4), whole.grad_log_probs.slice(0, 0, 4) * (total / (2.0 * first)), 1e-10,
                     1e-14);
}
