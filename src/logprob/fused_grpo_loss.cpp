// SPDX-License-Identifier: Apache-2.0
// FusedGrpoLoss: one loop over the tokens computing loss, metrics and ∂loss/∂lp (fused_grpo_loss.hpp).
#include "loss_kernel.hpp"
#include "row_stats.hpp"

#include <grpo/core/tensor_checks.hpp>

#include <grpo/logprob/fused_grpo_loss.hpp>
#include <grpo/logprob/kernel_path.hpp>
#include <grpo/logprob/linear_log_probs.hpp>

#include <fmt/format.h>
#include <torch/torch.h>

#include <ATen/Dispatch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
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
/// The exps run in T (float for float inputs: glibc's expf is several times cheaper than exp, and it is the precision
/// GrpoLoss computes in); everything else in double.
template <typename T>
KlTerm kl_term(KlEstimator estimator, double delta) {
  switch (estimator) {
    case KlEstimator::k1:
      return {delta, 1.0};
    case KlEstimator::abs:
      return {std::abs(delta), static_cast<double>((delta > 0) - (delta < 0))};
    case KlEstimator::k2:
      return {0.5 * delta * delta, delta};
    case KlEstimator::k3: {
      const double e = std::exp(static_cast<T>(-delta));
      return {e + delta - 1.0, 1.0 - e};
    }
    case KlEstimator::low_var_kl: {
      // value = clamp(exp(d) − d − 1, −10, 10), d = clamp(−Δ, −20, 20); torch.clamp passes gradient on the closed
      // interval.
      const double d = std::clamp(-delta, -20.0, 20.0);
      const double e = std::exp(static_cast<T>(d));
      const double v = e - d - 1.0;
      const bool pass = std::abs(delta) <= 20.0 && v >= -10.0 && v <= 10.0;
      return {std::clamp(v, -10.0, 10.0), pass ? 1.0 - e : 0.0};
    }
  }
  return {0.0, 0.0};
}

detail::FusedKl fused_kl(KlEstimator estimator) {
  switch (estimator) {
    case KlEstimator::k1:
      return detail::FusedKl::k1;
    case KlEstimator::abs:
      return detail::FusedKl::abs;
    case KlEstimator::k2:
      return detail::FusedKl::k2;
    case KlEstimator::k3:
      return detail::FusedKl::k3;
    case KlEstimator::low_var_kl:
      return detail::FusedKl::low_var_kl;
  }
  return detail::FusedKl::none;
}

/// The generic path: GrpoLoss's composition of LibTorch operations for the same options (it computes the same
/// loss, metrics and gradient, tests/logprob/fused_grpo_loss_test.cpp; any device).
LossOutput generic_loss(GrpoLossOptions options, const LossInputs& in, const Normaliser& normaliser) {
  options.implementation = LossImplementation::generic;
  return GrpoLoss(std::move(options))(in, normaliser);
}

/// Throws unless every defined tensor of `in` is on the CPU, which the CPU kernel path reads, naming the first that
/// is not.
void check_inputs_on_cpu(const LossInputs& in, const char* what) {
  const std::pair<const torch::Tensor*, const char*> tensors[] = {
      {&in.log_probs, "log_probs"}, {&in.old_log_probs, "old_log_probs"},         {&in.ref_log_probs, "ref_log_probs"},
      {&in.advantages, "advantages"}, {&in.mask, "mask"},                         {&in.entropy, "entropy"},
      {&in.sampler_log_probs, "sampler_log_probs"}, {&in.truncated, "truncated"}};
  for (const auto& [t, name] : tensors) {
    GRPO_CHECK(!t->defined() || t->device().is_cpu(),
               "{}: {} is on {}, but the CPU kernel path reads CPU tensors only (put every input on one device)", what,
               name, t->device().str());
  }
}

/// t as a contiguous tensor of dtype (no copy when it already is one).
torch::Tensor as_compute(const torch::Tensor& t, torch::ScalarType dtype) {
  return t.defined() ? t.detach().to(dtype).contiguous() : t;
}

using detail::LossPartial;

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
  bool seq_mean;      // average each sequence's tokens first
  bool seq_mean_eps;  // ... dividing by |o| + 1e-8 (verl) instead of |o|

  LossPartial rows(int64_t begin, int64_t end) const;

  /// The vectorised float kernel's arguments (token-level weights), log w bounded to [c_low, c_high].
  detail::TokenLossArgs float_args(double c_low, double c_high) const {
    const auto& po = options->policy;
    detail::TokenLossArgs a;
    if constexpr (std::is_same_v<T, float>) {
      a.lp = lp, a.old = old, a.ref = ref, a.ent = ent, a.adv = adv, a.grad = grad;
    }
    a.valid = valid;
    a.adv_per_token = adv_per_token;
    a.time = time;
    a.cispo = po.type == PolicyLossType::cispo;
    a.log_w_low = c_low, a.log_w_high = c_high;
    a.ratio_low = 1.0 - po.epsilon_low, a.ratio_high = 1.0 + po.epsilon_high, a.cispo_cap = po.epsilon_high;
    a.kl = ref == nullptr ? detail::FusedKl::none : fused_kl(options->kl.estimator);
    a.beta = options->beta;
    a.divisor = divisor;
    a.seq_mean = seq_mean;
    a.seq_mean_eps = seq_mean_eps;
    return a;
  }
};

template <typename T>
LossPartial LossKernel<T>::rows(int64_t begin, int64_t end) const {
  const auto& po = options->policy;
  const bool cispo = po.type == PolicyLossType::cispo;
  const bool sequence = po.importance_level == ImportanceLevel::sequence;
  // The surrogate's bounds on log w, intersected with the overflow guard of T (policy_loss.hpp).
  const LogRatioBounds bounds = po.effective_log_ratio_bounds();
  const double guard = detail::log_ratio_overflow_guard(std::is_same_v<T, double> ? torch::kDouble : torch::kFloat);
  const double c_low = std::max(bounds.low, -guard), c_high = std::min(bounds.high, guard);
  const double lo = 1.0 - po.epsilon_low, hi = 1.0 + po.epsilon_high;
  const double beta = options->beta;
  if constexpr (std::is_same_v<T, float>) {
    if (!sequence) return detail::token_loss_rows_float(float_args(c_low, c_high), begin, end);
  }
  LossPartial p;
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
    const double coef = seq_mean ? 1.0 / ((seq_mean_eps ? len + 1e-8 : len) * divisor) : 1.0 / divisor;
    const double seq_log_w = std::clamp(seq_delta / len, c_low, c_high);
    const bool seq_pass = seq_delta / len >= c_low && seq_delta / len <= c_high;
    double seq_grad = 0;  // Σ_t coef·∂L_t/∂w for the sequence weight (GSPO)
    for (int64_t t = 0; t < time; ++t) {
      const int64_t i = row + t;
      if (valid[i] == 0.0f) continue;
      const double x = lp[i], o = old != nullptr ? old[i] : x, a = adv_per_token ? adv[i] : adv[b];
      const double delta = x - o;
      const double log_w = sequence ? seq_log_w : std::clamp(delta, c_low, c_high);
      const bool pass = sequence ? seq_pass : (delta >= c_low && delta <= c_high);
      const double w = std::exp(static_cast<T>(log_w));
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
        const KlTerm k = kl_term<T>(options->kl.estimator, x - ref[i]);
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
  if (!o.policy_loss_name.empty()) return fmt::format("registered policy loss '{}'", o.policy_loss_name);
  if (p.type != PolicyLossType::ppo_clip && p.type != PolicyLossType::cispo)
    return fmt::format("policy.type '{}' (supported: ppo_clip, cispo)", to_string(p.type));
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
  if (!o.rollout_rejection.empty()) return "rollout_rejection";
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

namespace {

/// The inputs of one call, checked against `like` ([B, T]: log_probs, or ids for the hidden-state form) and
/// converted to the compute dtype (contiguous; no copies when they already are).
struct Prepared {
  torch::Tensor valid, old, ref, ent, adv;  // valid: float mask after truncation
  int64_t batch = 0, time = 0;
  bool seq_mean = false, seq_mean_eps = false;
};

Prepared prepare(const GrpoLossOptions& options, const LossInputs& in, const torch::Tensor& like, const char* like_name,
                 torch::ScalarType dtype, const char* what) {
  detail::check_same_shape(like, like_name, in.mask, "mask", what);
  detail::check_advantages(in.advantages, like, what);
  auto optional_like = [&](const torch::Tensor& t, const char* name) {
    if (!t.defined()) return;
    detail::check_same_shape(like, like_name, t, name, what);
    detail::check_floating(t, name, what);
  };
  optional_like(in.old_log_probs, "old_log_probs");
  optional_like(in.ref_log_probs, "ref_log_probs");
  optional_like(in.entropy, "entropy");
  GRPO_CHECK(in.ref_log_probs.defined() || options.beta == 0.0,
             "{}: beta = {} needs ref_log_probs of shape {}, got undefined", what, options.beta, shape_str(like));
  torch::Tensor mask = in.mask;
  if (options.mask_truncated_completions) {
    GRPO_CHECK(in.truncated.defined(), "{}: mask_truncated_completions needs truncated of shape [{}], got undefined",
               what, like.size(0));
    mask = truncated_completion_mask(in.mask, in.truncated);
  }
  Prepared p;
  p.valid = mask.scalar_type() == torch::kFloat ? mask.contiguous() : (mask != 0).to(torch::kFloat);
  p.old = as_compute(in.old_log_probs, dtype);
  p.ref = as_compute(in.ref_log_probs, dtype);
  p.ent = as_compute(in.entropy, dtype);
  p.adv = as_compute(in.advantages, dtype);
  p.batch = like.size(0);
  p.time = like.size(1);
  const Aggregation aggregation = aggregation_rule(options.loss_type).aggregation;
  p.seq_mean = averages_sequences(aggregation);
  p.seq_mean_eps = aggregation == Aggregation::sum_of_sequence_means_eps;
  return p;
}

template <typename T>
LossKernel<T> make_kernel(const Prepared& p, const torch::Tensor& lp, const torch::Tensor& grad,
                          const GrpoLossOptions& options, const Normaliser& normaliser) {
  auto ptr = [](const torch::Tensor& t) { return t.defined() ? t.data_ptr<T>() : nullptr; };
  return LossKernel<T>{p.valid.data_ptr<float>(), ptr(lp),     ptr(p.old),        ptr(p.ref),
                       ptr(p.ent),                ptr(p.adv),  p.adv.dim() == 2,  grad.data_ptr<T>(),
                       p.time,                    &options,    normaliser.divisor(), p.seq_mean,
                       p.seq_mean_eps};
}

/// `total` as LossMetrics. entropy_share: for GrpoLossOptions::entropy_aggregation token_mean on a loss type that is
/// not token-normalised (or bnpo), the micro-batch's share of the normaliser, by which its mean entropy is weighted
/// (GrpoLoss::entropy_bonus_term); unset when the entropy is aggregated like the loss.
LossMetrics metrics_of(const LossPartial& total, bool has_ref, bool has_ent, std::optional<double> entropy_share) {
  LossMetrics m;
  const double denom = std::max(total.count, 1.0);
  m.loss = total.loss;
  m.policy_loss = total.policy;
  m.num_tokens = total.count;
  if (has_ref) {
    m.kl_loss = total.kl;
    m.kl_mean = total.kl_tokens / denom;
  }
  if (has_ent) {
    m.entropy_loss = entropy_share ? total.ent_tokens / denom * *entropy_share : total.ent;
    m.entropy_mean = total.ent_tokens / denom;
    m.bonus_entropy_sum = total.ent_tokens;  // no top-entropy mask here: every loss token
    m.bonus_tokens = total.count;
  }
  m.clip_ratio_low_mean = total.low / denom;
  m.clip_ratio_high_mean = total.high / denom;
  m.clip_ratio_region_mean = total.region / denom;
  m.pg_clipfrac = total.pg / denom;
  m.ppo_kl = total.ppo_kl / denom;
  if (total.count > 0) {
    m.ratio_min = total.r_min;
    m.ratio_max = total.r_max;
    m.ratio_mean = total.r_sum / total.count;
  }
  return m;
}

/// Returns the loss computed in forward; backward scales the gradients of hidden and weight computed there too.
class PrecomputedLinearGradFunction : public torch::autograd::Function<PrecomputedLinearGradFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& /*hidden*/,
                               const torch::Tensor& /*weight*/, const torch::Tensor& value,
                               const torch::Tensor& grad_hidden,
                               const torch::Tensor& grad_weight) {
    ctx->save_for_backward({grad_hidden, grad_weight});
    return value;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    // Scaled in place: the stored gradients belong to this node and are used once, and a copy of grad_weight
    // ([V, H]) would double the peak memory.
    auto scale = [&](torch::Tensor g) { return g.defined() ? g.mul_(grad_outputs[0]) : g; };
    return {scale(saved[0]), scale(saved[1]), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

LossOutput FusedGrpoLoss::operator()(const LossInputs& in, const Normaliser& normaliser) const {
  return detail::fused_loss(options_, in, normaliser, "FusedGrpoLoss");
}

bool detail::fused_loss_supports(const GrpoLossOptions& options) {
  return FusedGrpoLoss::unsupported_reason(options).empty();
}

LossOutput detail::fused_loss(const GrpoLossOptions& options, const LossInputs& in, const Normaliser& normaliser,
                              const char* what) {
  check_normaliser(options.loss_type, normaliser);
  detail::check_dim(in.log_probs, 2, "log_probs", what);
  detail::check_floating(in.log_probs, "log_probs", what);
  const auto dtype = in.log_probs.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const Prepared p = prepare(options, in, in.log_probs, "log_probs", dtype, what);
  if (resolve_kernel_path(in.log_probs, "log_probs", what) == KernelPath::generic)
    return generic_loss(options, in, normaliser);
  check_inputs_on_cpu(in, what);
  const auto lp = as_compute(in.log_probs, dtype);
  auto grad = torch::empty({p.batch, p.time}, lp.options());
  LossPartial total;
  AT_DISPATCH_FLOATING_TYPES(dtype, "FusedGrpoLoss", [&] {
    const auto kernel = make_kernel<scalar_t>(p, lp, grad, options, normaliser);
    // Ranges of ~16 K tokens, each with its own partial sums, combined in range order (deterministic whatever the
    // thread count); a thread takes at least 8 of them (~128 K tokens), below which starting it costs more than the
    // few nanoseconds per token it would save.
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(p.time, 1));
    const int64_t ranges = (p.batch + grain - 1) / grain;
    std::vector<LossPartial> partials(static_cast<size_t>(ranges));
    detail::parallel_ranges(ranges, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        partials[static_cast<size_t>(r)] = kernel.rows(r * grain, std::min(p.batch, (r + 1) * grain));
    });
    for (const auto& part : partials) total.add(part);
  });
  LossOutput out;
  out.loss = PrecomputedGradFunction::apply(in.log_probs, torch::scalar_tensor(total.loss, lp.options()), grad);
  out.metrics = metrics_of(total, p.ref.defined(), p.ent.defined(),
                           detail::entropy_mean_share(options, p.valid, normaliser));
  return out;
}

LossOutput FusedGrpoLoss::operator()(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& ids, const LossInputs& in, const Normaliser& normaliser,
                                     const LinearLogProbOptions& linear) const {
  constexpr const char* kWhat = "FusedGrpoLoss (hidden states)";
  check_normaliser(options_.loss_type, normaliser);
  GRPO_CHECK(hidden.defined() && hidden.dim() == 3, "{}: hidden must be [B, T, H], got shape {}", kWhat,
             shape_str(hidden));
  detail::check_floating(hidden, "hidden", kWhat);
  GRPO_CHECK(weight.defined() && weight.dim() == 2 && weight.size(1) == hidden.size(2) && weight.size(0) > 0,
             "{}: weight must be [V, H] with H = {} like hidden {}, got shape {}", kWhat, hidden.size(2),
             shape_str(hidden), shape_str(weight));
  GRPO_CHECK(weight.scalar_type() == hidden.scalar_type(), "{}: weight dtype {} differs from hidden dtype {}", kWhat,
             c10::toString(weight.scalar_type()), c10::toString(hidden.scalar_type()));
  GRPO_CHECK(ids.defined() && ids.sizes() == hidden.sizes().slice(0, 2),
             "{}: ids must have the leading shape of hidden {} (without H), got shape {}", kWhat, shape_str(hidden),
             shape_str(ids));
  GRPO_CHECK(!in.log_probs.defined(), "{}: inputs.log_probs must be undefined (they are computed from hidden)",
             kWhat);
  GRPO_CHECK(linear.temperature > 0.0, "{}: temperature must be > 0, got {}", kWhat, linear.temperature);
  detail::check_same_device(weight, "weight", hidden, "hidden", kWhat);
  detail::check_same_device(ids, "ids", hidden, "hidden", kWhat);
  detail::check_token_ids(ids, weight.size(0), kWhat);
  const auto dtype = detail::log_prob_compute_dtype(hidden);
  const Prepared p = prepare(options_, in, ids, "ids", dtype, kWhat);
  if (resolve_kernel_path(hidden, "hidden", kWhat) == KernelPath::generic) {
    // linear_token_log_probs (which takes the generic path too) then the generic loss; autograd recomputes the
    // logits in backward (8·N·H·V FLOPs instead of 6).
    LossInputs with_log_probs = in;
    const LinearLogProbOptions log_prob_options{.temperature = linear.temperature, .chunk_rows = linear.chunk_rows};
    with_log_probs.log_probs = linear_token_log_probs(hidden, weight, ids, log_prob_options).log_probs;
    return generic_loss(options_, with_log_probs, normaliser);
  }
  check_inputs_on_cpu(in, kWhat);
  const int64_t vocab = weight.size(0), n = p.batch * p.time;
  const auto h = hidden.detach().reshape({n, hidden.size(2)}).contiguous();
  const auto w = weight.detach().contiguous();
  const auto flat_ids = ids.reshape({-1}).contiguous();
  const bool need_hidden = hidden.requires_grad() && torch::GradMode::is_enabled();
  const bool need_weight = weight.requires_grad() && torch::GradMode::is_enabled();
  // Whole sequences per chunk, so that the loss kernel (GSPO's sequence weight) sees complete rows.
  const int64_t rows_wanted = linear_log_prob_chunk_rows(linear, vocab, hidden.element_size());
  const int64_t seqs = std::max<int64_t>(1, rows_wanted / std::max<int64_t>(p.time, 1));
  auto lp = torch::empty({p.batch, p.time}, h.options().dtype(dtype));
  auto g_lp = torch::empty({p.batch, p.time}, lp.options());
  torch::Tensor grad_hidden, grad_weight;
  if (need_hidden) grad_hidden = torch::empty({n, hidden.size(2)}, h.options());
  if (need_weight) grad_weight = torch::zeros(w.sizes(), w.options().dtype(dtype));
  auto buffer = torch::empty({std::min(seqs * p.time, std::max<int64_t>(n, 1)), vocab}, h.options());
  LossPartial total;
  for (int64_t b0 = 0; b0 < p.batch; b0 += seqs) {
    const int64_t b1 = std::min(p.batch, b0 + seqs), r0 = b0 * p.time, rows = (b1 - b0) * p.time;
    if (rows == 0) continue;
    auto z = buffer.narrow(0, 0, rows);
    auto h_c = h.narrow(0, r0, rows);
    at::mm_out(z, h_c, w.t());
    auto ids_c = flat_ids.narrow(0, r0, rows).unsqueeze(0);
    auto stats = detail::rows_forward(z.unsqueeze(0), ids_c, linear.temperature, false, KernelPath::cpu);
    lp.view({-1}).narrow(0, r0, rows).copy_(stats.log_probs);
    AT_DISPATCH_FLOATING_TYPES(dtype, "FusedGrpoLoss", [&] {
      total.add(make_kernel<scalar_t>(p, lp, g_lp, options_, normaliser).rows(b0, b1));
    });
    if (!need_hidden && !need_weight) continue;
    detail::rows_backward(z.unsqueeze(0), ids_c, stats, g_lp.view({-1}).narrow(0, r0, rows), torch::Tensor(),
                          linear.temperature, z.unsqueeze(0), KernelPath::cpu);
    if (need_hidden) {
      auto gh = grad_hidden.narrow(0, r0, rows);
      at::mm_out(gh, z, w);
    }
    if (need_weight) {
      if (z.scalar_type() == dtype) {
        grad_weight.addmm_(z.t(), h_c);
      } else {
        grad_weight.addmm_(z.t().to(dtype), h_c.to(dtype));
      }
    }
  }
  LossOutput out;
  auto value = torch::scalar_tensor(total.loss, lp.options());
  if (need_hidden || need_weight) {
    out.loss = PrecomputedLinearGradFunction::apply(
        hidden, weight, value, need_hidden ? grad_hidden.view(hidden.sizes()) : torch::Tensor(),
        need_weight ? grad_weight.to(weight.scalar_type()) : torch::Tensor());
  } else {
    out.loss = value;
  }
  out.metrics = metrics_of(total, p.ref.defined(), p.ent.defined(),
                           detail::entropy_mean_share(options_, p.valid, normaliser));
  return out;
}

}  // namespace grpo
