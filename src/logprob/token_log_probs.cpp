// SPDX-License-Identifier: Apache-2.0
// Fused per-token log-probs and entropy from logits with a custom autograd backward (see token_log_probs.hpp).
#include "row_stats.hpp"

#include <grpo/core/tensor_checks.hpp>
#include <grpo/logprob/token_log_probs.hpp>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

namespace grpo {
namespace detail {

void check_token_ids(const torch::Tensor& ids, int64_t vocab, const char* what) {
  GRPO_CHECK(ids.scalar_type() == torch::kInt64, "{}: ids must be int64, got {}", what,
             c10::toString(ids.scalar_type()));
  if (ids.numel() == 0) return;
  auto bad = (ids < 0).logical_or_(ids >= vocab).reshape({-1});
  if (!bad.any().item<bool>()) return;
  int64_t flat = bad.nonzero()[0][0].item<int64_t>();
  const int64_t value = ids.reshape({-1})[flat].item<int64_t>();
  std::string index;
  for (int64_t d = ids.dim() - 1; d >= 0; --d) {
    index = std::to_string(flat % ids.size(d)) + (index.empty() ? "" : ", ") + index;
    flat /= ids.size(d);
  }
  GRPO_CHECK(false, "{}: ids[{}] = {} is outside the vocabulary [0, {})", what, index, value, vocab);
}

LogitsRows view_logits_rows(const torch::Tensor& logits) {
  LogitsRows r;
  r.rows = logits.size(0) * logits.size(1);
  r.layout.rows_per_batch = std::max<int64_t>(logits.size(1), 1);
  r.layout.batch_stride = logits.stride(0);
  r.layout.row_stride = logits.stride(1);
  return r;
}

int64_t row_grain(int64_t vocab) { return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(vocab, 1)); }

namespace {

/// Where p = exp(log p) multiplies log p, log p is clamped here: exp underflows to exactly 0 below about −745 in
/// float64 (−104 in float32), so the clamp changes no finite term and turns 0·(−inf) (a −inf logit) into 0.
constexpr double kLogProbFloor = -1000.0;

/// Sequences [b0, b0 + nb) × positions [t0, t0 + nt) of a [B, T, ...] tensor: the flat rows [row0, row0 + nb·nt)
/// of B·T (whole sequences, or a run of positions of one sequence).
struct RowChunk {
  int64_t b0, nb, t0, nt, row0;
  /// The chunk of a [B, T, ...] tensor.
  torch::Tensor of(const torch::Tensor& x) const { return x.narrow(0, b0, nb).narrow(1, t0, nt); }
  /// The chunk of a flat [B·T] tensor, as [nb, nt].
  torch::Tensor rows_of(const torch::Tensor& flat) const { return flat.narrow(0, row0, nb * nt).view({nb, nt}); }
};

/// Chunks of at most about kLogitChunkBytes of compute-dtype logits covering the rows of logits [B, T, V].
std::vector<RowChunk> row_chunks(const torch::Tensor& logits) {
  const int64_t batch = logits.size(0), time = logits.size(1), vocab = std::max<int64_t>(logits.size(2), 1);
  const int64_t element = c10::elementSize(log_prob_compute_dtype(logits));
  const int64_t max_rows = std::max<int64_t>(1, kLogitChunkBytes / (vocab * element));
  std::vector<RowChunk> chunks;
  if (time == 0) return chunks;
  if (max_rows >= time) {
    const int64_t seqs = max_rows / time;
    for (int64_t b = 0; b < batch; b += seqs) chunks.push_back({b, std::min(seqs, batch - b), 0, time, b * time});
    return chunks;
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < time; t += max_rows)
      chunks.push_back({b, 1, t, std::min(max_rows, time - t), b * time + t});
  }
  return chunks;
}

/// The generic forward: per chunk z = logits / temperature in the compute dtype, lse = logsumexp(z),
/// log p(y) = z[y] − lse, H = −Σ softmax(z)·log softmax(z).
void generic_rows_forward(const torch::Tensor& logits, const torch::Tensor& ids, double temperature,
                          const RowStats& out) {
  const auto dtype = out.lse.scalar_type();
  for (const RowChunk& c : row_chunks(logits)) {
    auto z = c.of(logits).to(dtype).div(temperature);  // a new tensor: updated in place below
    const auto lse = z.logsumexp(-1);
    c.rows_of(out.lse).copy_(lse);
    c.rows_of(out.log_probs).copy_(z.gather(-1, c.of(ids).unsqueeze(-1)).squeeze(-1) - lse);
    if (!out.entropy.defined()) continue;
    auto log_p = z.sub_(lse.unsqueeze(-1));
    auto p = log_p.exp();
    c.rows_of(out.entropy).copy_(p.mul_(log_p.clamp_min_(kLogProbFloor)).sum(-1).neg_());
  }
}

/// The generic backward, row_backward's formula per chunk:
///   grad = [g_lp·(onehot(y) − p) − g_H·p·(log p + H)] / temperature
///        = −p·(c0 + c1·log p) + onehot(y)·g_lp / temperature
/// with c0 = (g_lp + g_H·H) / temperature, c1 = g_H / temperature and p = exp(z − lse); rows whose gradients are
/// both 0 are written as zeros. g_lp, g_h: [B·T] in the compute dtype, g_h undefined without an entropy gradient.
void generic_rows_backward(const torch::Tensor& logits, const torch::Tensor& ids, const RowStats& stats,
                           const torch::Tensor& g_lp, const torch::Tensor& g_h, double temperature,
                           const torch::Tensor& grad) {
  const auto dtype = stats.lse.scalar_type();
  for (const RowChunk& c : row_chunks(logits)) {
    auto log_p = c.of(logits).to(dtype).div(temperature).sub_(c.rows_of(stats.lse).unsqueeze(-1));
    const auto g = c.rows_of(g_lp);
    auto d = log_p.exp();
    torch::Tensor active = g.ne(0);
    if (g_h.defined()) {
      const auto gh = c.rows_of(g_h);
      const auto c0 = (g + gh * c.rows_of(stats.entropy)).div_(temperature);
      d.mul_(log_p.clamp_min_(kLogProbFloor).mul_((gh / temperature).unsqueeze(-1)).add_(c0.unsqueeze(-1)));
      active.logical_or_(gh.ne(0));
    } else {
      d.mul_((g / temperature).unsqueeze(-1));
    }
    d.neg_().scatter_add_(-1, c.of(ids).unsqueeze(-1), (g / temperature).unsqueeze(-1));
    d.masked_fill_(active.logical_not().unsqueeze(-1), 0);
    c.of(grad).copy_(d);  // after every read of this chunk of logits, which grad may alias
  }
}

}  // namespace

RowStats rows_forward(const torch::Tensor& logits, const torch::Tensor& ids, double temperature, bool with_entropy,
                      KernelPath path) {
  const auto dtype = log_prob_compute_dtype(logits);
  const auto rows = view_logits_rows(logits);
  auto opts = logits.options().dtype(dtype);
  RowStats out;
  out.log_probs = torch::empty({rows.rows}, opts);
  out.lse = torch::empty({rows.rows}, opts);
  if (with_entropy) out.entropy = torch::empty({rows.rows}, opts);
  if (rows.rows == 0) return out;
  if (path == KernelPath::generic) {
    generic_rows_forward(logits, ids, temperature, out);
    return out;
  }
  const auto ids_c = ids.contiguous();
  RowForwardArgs args;
  args.logits = logits.data_ptr();
  args.dtype = logits.scalar_type();
  args.layout = rows.layout;
  args.vocab = logits.size(2);
  args.ids = ids_c.data_ptr<int64_t>();
  args.inv_temperature = 1.0 / temperature;
  args.lse = out.lse.data_ptr();
  args.log_probs = out.log_probs.data_ptr();
  args.entropy = with_entropy ? out.entropy.data_ptr() : nullptr;
  parallel_ranges(rows.rows, row_grain(args.vocab), [&](int64_t b, int64_t e) { row_forward(args, b, e); });
  return out;
}

void rows_backward(const torch::Tensor& logits, const torch::Tensor& ids, const RowStats& stats,
                   const torch::Tensor& grad_log_probs, const torch::Tensor& grad_entropy, double temperature,
                   const torch::Tensor& grad, KernelPath path) {
  const auto rows = view_logits_rows(logits);
  if (rows.rows == 0) return;
  const auto dtype = stats.lse.scalar_type();
  torch::Tensor g_lp, g_h;
  if (grad_log_probs.defined()) g_lp = grad_log_probs.reshape({-1}).to(dtype).contiguous();
  const bool use_entropy = grad_entropy.defined() && stats.entropy.defined();
  if (use_entropy) g_h = grad_entropy.reshape({-1}).to(dtype).contiguous();
  if (path == KernelPath::generic) {
    if (!g_lp.defined()) g_lp = torch::zeros({rows.rows}, stats.lse.options());
    return generic_rows_backward(logits, ids, stats, g_lp, g_h, temperature, grad);
  }
  const auto ids_c = ids.contiguous();
  RowBackwardArgs args;
  args.logits = logits.data_ptr();
  args.dtype = logits.scalar_type();
  args.layout = rows.layout;
  args.vocab = logits.size(2);
  args.ids = ids_c.data_ptr<int64_t>();
  args.inv_temperature = 1.0 / temperature;
  args.lse = stats.lse.data_ptr();
  args.entropy = use_entropy ? stats.entropy.data_ptr() : nullptr;
  args.grad_log_probs = g_lp.defined() ? g_lp.data_ptr() : nullptr;
  args.grad_entropy = use_entropy ? g_h.data_ptr() : nullptr;
  args.grad = grad.data_ptr();
  args.grad_layout = view_logits_rows(grad).layout;
  parallel_ranges(rows.rows, row_grain(args.vocab), [&](int64_t b, int64_t e) { row_backward(args, b, e); });
}

}  // namespace detail

namespace {

class FusedLogProbFunction : public torch::autograd::Function<FusedLogProbFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                                                const torch::Tensor& ids, double temperature, bool with_entropy,
                                                bool overwrite_logits, KernelPath path) {
    auto stats = detail::rows_forward(logits, ids, temperature, with_entropy, path);
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["overwrite_logits"] = overwrite_logits;
    ctx->saved_data["path"] = static_cast<int64_t>(path);
    ctx->save_for_backward({logits, ids, stats.lse, with_entropy ? stats.entropy : torch::Tensor()});
    const auto lead = logits.sizes().slice(0, 2);
    if (with_entropy) return {stats.log_probs.view(lead), stats.entropy.view(lead)};
    return {stats.log_probs.view(lead)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto& logits = saved[0];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const bool overwrite = ctx->saved_data["overwrite_logits"].toBool();
    detail::RowStats stats;
    stats.lse = saved[2];
    stats.entropy = saved[3];
    auto grad_entropy = grad_outputs.size() > 1 ? grad_outputs[1] : torch::Tensor();
    torch::Tensor grad;
    if (overwrite) {
      grad = logits;
      // Anything else that saved these logits for its backward now fails loudly instead of reading gradients.
      grad.unsafeGetTensorImpl()->bump_version();
    } else {
      grad = torch::empty(logits.sizes(), logits.options());
    }
    detail::rows_backward(logits, saved[1], stats, grad_outputs[0], grad_entropy, temperature, grad,
                          static_cast<KernelPath>(ctx->saved_data["path"].toInt()));
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

/// Validates and views logits as [B, T, V] (last dim contiguous) and ids as [B, T].
struct Prepared {
  torch::Tensor logits, ids;
  std::vector<int64_t> lead_shape;
};

Prepared prepare(const torch::Tensor& logits, const torch::Tensor& ids, const char* what, bool need_ids,
                 double temperature) {
  GRPO_CHECK(logits.defined() && (logits.dim() == 3 || logits.dim() == 2),
             "{}: logits must be [B, T, V] or [N, V], got shape {}", what, shape_str(logits));
  detail::check_floating(logits, "logits", what);
  GRPO_CHECK(temperature > 0.0, "{}: temperature must be > 0, got {}", what, temperature);
  Prepared p;
  p.logits = logits.dim() == 2 ? logits.unsqueeze(0) : logits;
  if (p.logits.stride(2) != 1) p.logits = p.logits.contiguous();
  p.lead_shape.assign(logits.sizes().begin(), logits.sizes().end() - 1);
  if (!need_ids) return p;
  GRPO_CHECK(ids.defined() && ids.sizes() == logits.sizes().slice(0, logits.dim() - 1),
             "{}: ids must have the leading shape of logits {} (without V), got shape {}", what, shape_str(logits),
             shape_str(ids));
  detail::check_same_device(ids, "ids", logits, "logits", what);
  detail::check_token_ids(ids, logits.size(-1), what);
  p.ids = ids.dim() == 1 ? ids.unsqueeze(0) : ids;
  return p;
}

}  // namespace

TokenLogProbs token_log_probs(const torch::Tensor& logits, const torch::Tensor& ids,
                              const TokenLogProbOptions& options) {
  auto p = prepare(logits, ids, "token_log_probs", /*need_ids=*/true, options.temperature);
  auto outs = FusedLogProbFunction::apply(p.logits, p.ids, options.temperature, options.with_entropy,
                                         options.overwrite_logits_in_backward,
                                         resolve_kernel_path(logits, "logits", "token_log_probs"));
  TokenLogProbs result;
  result.log_probs = outs[0].view(p.lead_shape);
  if (options.with_entropy) result.entropy = outs[1].view(p.lead_shape);
  return result;
}

torch::Tensor token_entropy(const torch::Tensor& logits, const TokenLogProbOptions& options) {
  auto p = prepare(logits, {}, "token_entropy", /*need_ids=*/false, options.temperature);
  // Entropy alone still runs the shared kernel; target id 0 is always valid and its log-prob is discarded.
  auto ids = torch::zeros({p.logits.size(0), p.logits.size(1)}, logits.options().dtype(torch::kInt64));
  auto outs = FusedLogProbFunction::apply(p.logits, ids, options.temperature, /*with_entropy=*/true,
                                         options.overwrite_logits_in_backward,
                                         resolve_kernel_path(logits, "logits", "token_entropy"));
  return outs[1].view(p.lead_shape);
}

torch::Tensor token_log_probs_reference(const torch::Tensor& logits, const torch::Tensor& ids, double temperature) {
  auto p = prepare(logits, ids, "token_log_probs_reference", /*need_ids=*/true, temperature);
  auto z = logits.to(detail::log_prob_compute_dtype(logits)) / temperature;
  return torch::log_softmax(z, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1);
}

torch::Tensor token_entropy_reference(const torch::Tensor& logits, double temperature) {
  prepare(logits, {}, "token_entropy_reference", /*need_ids=*/false, temperature);
  auto log_p = torch::log_softmax(logits.to(detail::log_prob_compute_dtype(logits)) / temperature, -1);
  return -(log_p.exp() * log_p).sum(-1);
}

}  // namespace grpo
