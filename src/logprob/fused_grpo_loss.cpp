// SPDX-License-Identifier: Apache-2.0
// FusedGrpoLoss: one loop over the tokens computing loss, metrics and ∂loss/∂lp (fused_grpo_loss.hpp).
#include <grpo/core/tensor_checks.hpp>
#include <grpo/logprob/fused_grpo_loss.hpp>

#include <fmt/format.h>
#include <torch/torch.h>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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
    auto grad = ctx->get_saved_variables()[0] * grad_outputs[0];
    return {grad.scalar_type() == dtype ? grad : grad.to(dtype), torch::Tensor(), torch::Tensor()};
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

/// t as a contiguous tensor of dtype (no copy when it already is one).
torch::Tensor as_compute(const torch::Tensor& t, torch::ScalarType dtype) {
  return t.defined() ? t.detach().to(dtype).contiguous() : t;
}

/// Running sums of one range of rows (combined after the parallel loop).
struct Partial {
  double loss = 0, policy = 0, kl = 0, ent = 0, kl_tokens = 0, ent_tokens = 0, ppo_kl = 0;
  double low = 0, high = 0, region = 0, pg = 0, count = 0;
  double r_min = std::numeric_limits<double>::infinity(), r_max = -std::numeric_limits<double>::infinity(), r_sum = 0;
  void add(const Partial& o) {
    loss += o.loss, policy += o.policy, kl += o.kl, ent += o.ent, kl_tokens += o.kl_tokens;
    ent_tokens += o.ent_tokens, ppo_kl += o.ppo_kl, low += o.low, high += o.high, region += o.region, pg += o.pg;
    count += o.count, r_min = std::min(r_min, o.r_min), r_max = std::max(r_max, o.r_max), r_sum += o.r_sum;
  }
};

/// The per-row loop over log-probs of type T (float or double) and a float mask. Arithmetic in double per token.
template <typename T>
struct LossKernel {
  const float* valid;
  const T *lp, *old, *ref, *ent, *adv;
  bool adv_per_token;
  T* grad;
  int64_t time;
  const GrpoLossOptions* options;
  double divisor;
  bool seq_mean;

  Partial rows(int64_t begin, int64_t end) const;
};

template <typename T>
Partial LossKernel<T>::rows(int64_t begin, int64_t end) const {
  const auto& po = options->policy;
  const bool cispo = po.type == PolicyLossType::cispo;
  const bool sequence = po.importance_level == ImportanceLevel::sequence;
  const double c = po.log_ratio_clamp, lo = 1.0 - po.epsilon_low, hi = 1.0 + po.epsilon_high;
  const double beta = options->beta;
  Partial p;
  for (int64_t b = begin; b < end; ++b) {
    const int64_t row = b * time;
    double len = 0, seq_delta = 0;
    for (int64_t t = 0; t < time; ++t) {
      if (valid[row + t] == 0.0f) continue;
      len += 1;
      seq_delta += old != nullptr ? lp[row + t] - old[row + t] : 0.0;
    }
    for (int64_t t = 0; t < time; ++t) grad[row + t] = T(0);
    if (len == 0) continue;
    const double coef = seq_mean ? 1.0 / (len * divisor) : 1.0 / divisor;
    const double seq_log_w = std::clamp(seq_delta / len, -c, c);
    const bool seq_pass = std::abs(seq_delta / len) <= c;
    double seq_grad = 0;  // Σ_t coef·∂L_t/∂w for the sequence weight (GSPO)
    for (int64_t t = 0; t < time; ++t) {
      const int64_t i = row + t;
      if (valid[i] == 0.0f) continue;
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
        p.pg += clipped;
        p.high += clipped && a > 0;
        p.region += clipped && a > 0;
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
        p.pg += clipped > unclipped;
        p.low += low;
        p.high += high;
        p.region += low || high;
      }
      double total = l;
      if (ref != nullptr) {
        const KlTerm k = kl_term(options->kl.estimator, x - ref[i]);
        p.kl += coef * k.value;
        p.kl_tokens += k.value;
        if (beta > 0.0) {
          total += beta * k.value;
          d_lp += beta * k.grad;
        }
      }
      if (ent != nullptr) {
        p.ent += coef * ent[i];
        p.ent_tokens += ent[i];
      }
      grad[i] = static_cast<T>(coef * d_lp);
      p.loss += coef * total;
      p.policy += coef * l;
      p.ppo_kl += o - x;
      p.r_min = std::min(p.r_min, w);
      p.r_max = std::max(p.r_max, w);
      p.r_sum += w;
      p.count += 1;
    }
    if (sequence && seq_pass) {
      const double g = seq_grad * std::exp(seq_log_w) / len;
      for (int64_t t = 0; t < time; ++t) {
        if (valid[row + t] != 0.0f) grad[row + t] = static_cast<T>(static_cast<double>(grad[row + t]) + g);
      }
    }
  }
  return p;
}

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
  const auto out_dtype = in.log_probs.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const auto valid_t = mask.scalar_type() == torch::kFloat ? mask.contiguous() : (mask != 0).to(torch::kFloat);
  const auto lp_t = as_compute(in.log_probs, out_dtype), old_t = as_compute(in.old_log_probs, out_dtype);
  const auto ref_t = as_compute(in.ref_log_probs, out_dtype), ent_t = as_compute(in.entropy, out_dtype);
  const auto adv_t = as_compute(in.advantages, out_dtype);
  auto grad_t = torch::empty({batch, time}, lp_t.options());
  const bool seq_mean = aggregation_rule(options_.loss_type).aggregation == Aggregation::sum_of_sequence_means;
  Partial total;
  AT_DISPATCH_FLOATING_TYPES(out_dtype, "FusedGrpoLoss", [&] {
    auto ptr = [](const torch::Tensor& t) { return t.defined() ? t.data_ptr<scalar_t>() : nullptr; };
    const LossKernel<scalar_t> kernel{valid_t.data_ptr<float>(), ptr(lp_t), ptr(old_t), ptr(ref_t), ptr(ent_t),
                                      ptr(adv_t), adv_t.dim() == 2, grad_t.data_ptr<scalar_t>(), time, &options_,
                                      normaliser.divisor(), seq_mean};
    // Rows in parallel, each range with its own partial sums, combined in range order (deterministic).
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(time, 1));
    const int64_t ranges = (batch + grain - 1) / grain;
    std::vector<Partial> partials(static_cast<size_t>(ranges));
    at::parallel_for(0, ranges, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        partials[static_cast<size_t>(r)] = kernel.rows(r * grain, std::min(batch, (r + 1) * grain));
    });
    for (const auto& p : partials) total.add(p);
  });
  const double loss = total.loss, policy_sum = total.policy, kl_sum = total.kl, ent_sum = total.ent;
  const double kl_tokens = total.kl_tokens, ent_tokens = total.ent_tokens, ppo_kl = total.ppo_kl;
  const double n_low = total.low, n_high = total.high, n_region = total.region, n_pg = total.pg, count = total.count;
  const double r_min = total.r_min, r_max = total.r_max, r_sum = total.r_sum;
  const bool has_ref = ref_t.defined(), has_ent = ent_t.defined();

  LossOutput out;
  out.loss = PrecomputedGradFunction::apply(in.log_probs, torch::scalar_tensor(loss, lp_t.options()), grad_t);
  LossMetrics& m = out.metrics;
  const double denom = std::max(count, 1.0);
  m.loss = loss;
  m.policy_loss = policy_sum;
  m.num_tokens = count;
  if (has_ref) {
    m.kl_loss = kl_sum;
    m.kl_mean = kl_tokens / denom;
  }
  if (has_ent) {
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
