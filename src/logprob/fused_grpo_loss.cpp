// SPDX-License-Identifier: Apache-2.0
// FusedGrpoLoss: one loop over the tokens computing loss, metrics and ∂loss/∂lp (fused_grpo_loss.hpp).
#include <grpo/core/tensor_checks.hpp>
#include <grpo/logprob/fused_grpo_loss.hpp>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace grpo {
namespace {

/// The loss value whose gradient with respect to log_probs was computed in the forward loop: backward scales it.
class PrecomputedGradFunction : public torch::autograd::Function<PrecomputedGradFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& log_probs,
                               const torch::Tensor& value, const torch::Tensor& grad) {
    ctx->save_for_backward({grad});
    ctx->saved_data["dtype"] = static_cast<int64_t>(log_probs.scalar_type());
    return value;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    auto grad = ctx->get_saved_variables()[0] * grad_outputs[0].to(torch::kFloat64);
    return {grad.to(dtype), torch::Tensor(), torch::Tensor()};
  }
};

/// KL estimate of Δ = lp − lp_ref and its derivative with respect to lp (kl/kl_penalty.hpp, without clamp).
struct KlTerm {
  double value, grad;
};
KlTerm kl_term(KlEstimator estimator, double delta) {
  switch (estimator) {
    case KlEstimator::k1:
      return {delta, 1.0};
    case KlEstimator::abs:
      return {std::abs(delta), static_cast<double>((delta > 0) - (delta < 0))};
    case KlEstimator::k2:
      return {0.5 * delta * delta, delta};
    case KlEstimator::k3: {
      const double e = std::exp(-delta);
      return {e + delta - 1.0, 1.0 - e};
    }
    case KlEstimator::low_var_kl: {
      // value = clamp(exp(d) − d − 1, −10, 10), d = clamp(−Δ, −20, 20); torch.clamp passes gradient on the closed
      // interval.
      const double d = std::clamp(-delta, -20.0, 20.0);
      const double v = std::exp(d) - d - 1.0;
      const bool pass = std::abs(delta) <= 20.0 && v >= -10.0 && v <= 10.0;
      return {std::clamp(v, -10.0, 10.0), pass ? 1.0 - std::exp(d) : 0.0};
    }
  }
  return {0.0, 0.0};
}

torch::Tensor as_f64(const torch::Tensor& t) { return t.detach().to(torch::kFloat64).contiguous(); }

}  // namespace

std::string FusedGrpoLoss::unsupported_reason(const GrpoLossOptions& o) {
  const auto& p = o.policy;
  if (p.type != PolicyLossType::ppo_clip && p.type != PolicyLossType::cispo)
    return fmt::format("policy.type '{}' (supported: ppo_clip, cispo)", policy_loss_type_name(p.type));
  if (p.importance_level == ImportanceLevel::sequence_token) return "policy.importance_level 'sequence_token'";
  if (p.delta) return fmt::format("policy.delta = {}", *p.delta);
  if (p.dual_clip_c) return fmt::format("policy.dual_clip_c = {}", *p.dual_clip_c);
  if (o.kl.straight_through) return "kl.straight_through = true";
  if (o.kl.clamp) return fmt::format("kl.clamp = {}", *o.kl.clamp);
  if (o.kl_importance_weighted) return "kl_importance_weighted = true";
  if (o.entropy_coef != 0.0) return fmt::format("entropy_coef = {}", o.entropy_coef);
  if (o.top_entropy_quantile < 1.0) return fmt::format("top_entropy_quantile = {}", o.top_entropy_quantile);
  if (o.off_policy_mask_threshold)
    return fmt::format("off_policy_mask_threshold = {}", *o.off_policy_mask_threshold);
  if (o.sampler_correction.mode != SamplerCorrectionMode::none)
    return fmt::format("sampler_correction.mode = {}", to_string(o.sampler_correction.mode));
  return "";
}

FusedGrpoLoss::FusedGrpoLoss(GrpoLossOptions options) : options_(std::move(options)) {
  options_.validate();
  const auto reason = unsupported_reason(options_);
  GRPO_CHECK_CONFIG(reason.empty(), "FusedGrpoLoss does not support {}; use GrpoLoss", reason);
}

Normaliser FusedGrpoLoss::local_normaliser(const LossInputs& inputs) const {
  return GrpoLoss(options_).local_normaliser(inputs);
}

LossOutput FusedGrpoLoss::operator()(const LossInputs& in, const Normaliser& normaliser) const {
  constexpr const char* kWhat = "FusedGrpoLoss";
  check_normaliser(options_.loss_type, normaliser);
  detail::check_dim(in.log_probs, 2, "log_probs", kWhat);
  detail::check_floating(in.log_probs, "log_probs", kWhat);
  detail::check_same_shape(in.log_probs, "log_probs", in.mask, "mask", kWhat);
  detail::check_advantages(in.advantages, in.log_probs, kWhat);
  auto optional_like = [&](const torch::Tensor& t, const char* name) {
    if (!t.defined()) return;
    detail::check_same_shape(in.log_probs, "log_probs", t, name, kWhat);
    detail::check_floating(t, name, kWhat);
  };
  optional_like(in.old_log_probs, "old_log_probs");
  optional_like(in.ref_log_probs, "ref_log_probs");
  optional_like(in.entropy, "entropy");
  GRPO_CHECK(in.ref_log_probs.defined() || options_.beta == 0.0, "{}: beta = {} needs ref_log_probs of shape {}",
             kWhat, options_.beta, shape_str(in.log_probs));
  torch::Tensor mask = in.mask;
  if (options_.mask_truncated_completions) {
    GRPO_CHECK(in.truncated.defined(), "{}: mask_truncated_completions needs truncated of shape [{}], got undefined",
               kWhat, in.log_probs.size(0));
    mask = truncated_completion_mask(in.mask, in.truncated);
  }

  const int64_t batch = in.log_probs.size(0), time = in.log_probs.size(1);
  const auto valid_t = (mask != 0).contiguous();
  const auto lp_t = as_f64(in.log_probs);
  const auto old_t = in.old_log_probs.defined() ? as_f64(in.old_log_probs) : torch::Tensor();
  const auto ref_t = in.ref_log_probs.defined() ? as_f64(in.ref_log_probs) : torch::Tensor();
  const auto ent_t = in.entropy.defined() ? as_f64(in.entropy) : torch::Tensor();
  const auto adv_t = as_f64(in.advantages);
  auto grad_t = torch::zeros({batch, time}, torch::kFloat64);

  const bool* valid = valid_t.data_ptr<bool>();
  const double* lp = lp_t.data_ptr<double>();
  const double* old = old_t.defined() ? old_t.data_ptr<double>() : nullptr;
  const double* ref = ref_t.defined() ? ref_t.data_ptr<double>() : nullptr;
  const double* ent = ent_t.defined() ? ent_t.data_ptr<double>() : nullptr;
  const double* adv = adv_t.data_ptr<double>();
  const bool adv_per_token = adv_t.dim() == 2;
  double* grad = grad_t.data_ptr<double>();

  const auto& po = options_.policy;
  const bool cispo = po.type == PolicyLossType::cispo;
  const bool sequence = po.importance_level == ImportanceLevel::sequence;
  const double c = po.log_ratio_clamp, lo = 1.0 - po.epsilon_low, hi = 1.0 + po.epsilon_high;
  const double beta = options_.beta, divisor = normaliser.divisor();
  const bool seq_mean = aggregation_rule(options_.loss_type).aggregation == Aggregation::sum_of_sequence_means;

  double loss = 0, policy_sum = 0, kl_sum = 0, ent_sum = 0, kl_tokens = 0, ent_tokens = 0, ppo_kl = 0;
  double n_low = 0, n_high = 0, n_region = 0, n_pg = 0, count = 0;
  double r_min = std::numeric_limits<double>::infinity(), r_max = -r_min, r_sum = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t row = b * time;
    double len = 0, seq_delta = 0;
    for (int64_t t = 0; t < time; ++t) {
      if (!valid[row + t]) continue;
      len += 1;
      seq_delta += old != nullptr ? lp[row + t] - old[row + t] : 0.0;
    }
    if (len == 0) continue;
    const double coef = seq_mean ? 1.0 / (len * divisor) : 1.0 / divisor;
    const double seq_log_w = std::clamp(seq_delta / len, -c, c);
    const bool seq_pass = std::abs(seq_delta / len) <= c;
    double seq_grad = 0;  // Σ_t coef·∂L_t/∂w for the sequence weight (GSPO)
    for (int64_t t = 0; t < time; ++t) {
      const int64_t i = row + t;
      if (!valid[i]) continue;
      const double x = lp[i], o = old != nullptr ? old[i] : x, a = adv_per_token ? adv[i] : adv[b];
      const double delta = x - o;
      const double log_w = sequence ? seq_log_w : std::clamp(delta, -c, c);
      const bool pass = sequence ? seq_pass : std::abs(delta) <= c;
      const double w = std::exp(log_w);
      double l, d_lp = 0;
      if (cispo) {
        const double weight = std::min(w, po.epsilon_high);
        l = -weight * a * x;
        d_lp = -weight * a;
        const bool clipped = w > po.epsilon_high;
        n_pg += clipped;
        n_high += clipped && a > 0;
        n_region += clipped && a > 0;
      } else {
        const double unclipped = -a * w, clipped = -a * std::clamp(w, lo, hi);
        l = std::max(unclipped, clipped);
        const double in_range = (w >= lo && w <= hi) ? 1.0 : 0.0;
        // torch.maximum splits the gradient evenly on ties; torch.clamp passes it on the closed range.
        const double d_w = unclipped > clipped ? -a : (clipped > unclipped ? -a * in_range : -0.5 * a * (1.0 + in_range));
        if (sequence) {
          seq_grad += coef * d_w;
        } else {
          d_lp = pass ? d_w * w : 0.0;
        }
        const bool low = w < lo && a < 0, high = w > hi && a > 0;
        n_pg += clipped > unclipped;
        n_low += low;
        n_high += high;
        n_region += low || high;
      }
      double total = l;
      if (ref != nullptr) {
        const KlTerm k = kl_term(options_.kl.estimator, x - ref[i]);
        kl_sum += coef * k.value;
        kl_tokens += k.value;
        if (beta > 0.0) {
          total += beta * k.value;
          d_lp += beta * k.grad;
        }
      }
      if (ent != nullptr) {
        ent_sum += coef * ent[i];
        ent_tokens += ent[i];
      }
      grad[i] = coef * d_lp;
      loss += coef * total;
      policy_sum += coef * l;
      ppo_kl += o - x;
      r_min = std::min(r_min, w);
      r_max = std::max(r_max, w);
      r_sum += w;
      count += 1;
    }
    if (sequence && seq_pass) {
      const double g = seq_grad * std::exp(seq_log_w) / len;
      for (int64_t t = 0; t < time; ++t) {
        if (valid[row + t]) grad[row + t] += g;
      }
    }
  }

  const auto out_dtype = in.log_probs.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  LossOutput out;
  out.loss = PrecomputedGradFunction::apply(in.log_probs, torch::tensor(loss, torch::kFloat64).to(out_dtype), grad_t);
  LossMetrics& m = out.metrics;
  const double denom = std::max(count, 1.0);
  m.loss = loss;
  m.policy_loss = policy_sum;
  m.num_tokens = count;
  if (ref != nullptr) {
    m.kl_loss = kl_sum;
    m.kl_mean = kl_tokens / denom;
  }
  if (ent != nullptr) {
    m.entropy_loss = ent_sum;
    m.entropy_mean = ent_tokens / denom;
  }
  m.clip_ratio_low_mean = n_low / denom;
  m.clip_ratio_high_mean = n_high / denom;
  m.clip_ratio_region_mean = n_region / denom;
  m.pg_clipfrac = n_pg / denom;
  m.ppo_kl = ppo_kl / denom;
  if (count > 0) {
    m.ratio_min = r_min;
    m.ratio_max = r_max;
    m.ratio_mean = r_sum / count;
  }
  return out;
}

}  // namespace grpo
