// SPDX-License-Identifier: Apache-2.0
// Fused linear log-probs: chunked GEMM + fused row kernel, recomputing each chunk in backward (linear_log_probs.hpp).
#include "row_stats.hpp"

#include <grpo/core/tensor_checks.hpp>
#include <grpo/logprob/linear_log_probs.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <vector>

namespace grpo {
namespace {

constexpr int64_t kMinChunkRows = 64;

struct Saved {
  torch::Tensor hidden, weight, ids;  // [N, H], [V, H], [N]
  detail::RowStats stats;             // lse, entropy: [N]
  double temperature = 1.0;
  int64_t chunk_rows = 1;
  KernelPath path = KernelPath::cpu;  // of the row computation (resolve_kernel_path)
};

/// logits of rows [start, start + rows) into buffer[0:rows] as a [1, rows, V] view.
torch::Tensor chunk_logits(const Saved& s, torch::Tensor& buffer, int64_t start, int64_t rows) {
  auto z = buffer.narrow(0, 0, rows);
  at::mm_out(z, s.hidden.narrow(0, start, rows), s.weight.t());
  return z.unsqueeze(0);
}

/// The forward's per-row results, and Σ softmax² per row when asked (undefined otherwise).
struct LinearForward {
  detail::RowStats stats;
  torch::Tensor sum_pi_squared;
};

LinearForward linear_forward(const Saved& s, bool with_entropy, bool with_sum_pi_squared) {
  const int64_t n = s.hidden.size(0), vocab = s.weight.size(0);
  const auto opts = s.hidden.options().dtype(detail::log_prob_compute_dtype(s.hidden));
  LinearForward result;
  detail::RowStats& out = result.stats;
  out.log_probs = torch::empty({n}, opts);
  out.lse = torch::empty({n}, opts);
  if (with_entropy) out.entropy = torch::empty({n}, opts);
  if (with_sum_pi_squared) result.sum_pi_squared = torch::empty({n}, opts);
  if (n == 0) return result;
  auto buffer = torch::empty({std::min(s.chunk_rows, n), vocab}, s.hidden.options());
  for (int64_t start = 0; start < n; start += s.chunk_rows) {
    const int64_t rows = std::min(s.chunk_rows, n - start);
    auto z = chunk_logits(s, buffer, start, rows);
    auto part =
        detail::rows_forward(z, s.ids.narrow(0, start, rows).unsqueeze(0), s.temperature, with_entropy, s.path);
    out.log_probs.narrow(0, start, rows).copy_(part.log_probs);
    out.lse.narrow(0, start, rows).copy_(part.lse);
    if (with_entropy) out.entropy.narrow(0, start, rows).copy_(part.entropy);
    if (with_sum_pi_squared) {  // Σ exp(2·(z/τ − lse)), in the compute dtype
      const auto log_p = z.squeeze(0).to(opts.dtype()).div(s.temperature).sub(part.lse.unsqueeze(1));
      result.sum_pi_squared.narrow(0, start, rows).copy_(log_p.mul(2.0).exp().sum(1));
    }
  }
  return result;
}

struct LinearGrads {
  torch::Tensor hidden, weight;
};

LinearGrads linear_backward(const Saved& s, const torch::Tensor& grad_log_probs, const torch::Tensor& grad_entropy,
                            bool need_hidden, bool need_weight) {
  const int64_t n = s.hidden.size(0), vocab = s.weight.size(0);
  const auto dtype = s.stats.lse.scalar_type();
  const bool use_entropy = grad_entropy.defined() && s.stats.entropy.defined();
  auto g_lp = grad_log_probs.defined() ? grad_log_probs.reshape({-1}).to(dtype) : torch::zeros({n}, s.stats.lse.options());
  auto g_h = use_entropy ? grad_entropy.reshape({-1}).to(dtype) : torch::Tensor();
  LinearGrads grads;
  // grad_weight is accumulated over chunks: in float32 when the weight is in half precision.
  const auto acc_dtype = detail::log_prob_compute_dtype(s.weight);
  if (need_hidden) grads.hidden = torch::zeros(s.hidden.sizes(), s.hidden.options());
  if (need_weight) grads.weight = torch::zeros(s.weight.sizes(), s.weight.options().dtype(acc_dtype));
  if (n == 0 || (!need_hidden && !need_weight)) return grads;
  auto buffer = torch::empty({std::min(s.chunk_rows, n), vocab}, s.hidden.options());
  for (int64_t start = 0; start < n; start += s.chunk_rows) {
    const int64_t rows = std::min(s.chunk_rows, n - start);
    auto g_lp_c = g_lp.narrow(0, start, rows);
    auto g_h_c = use_entropy ? g_h.narrow(0, start, rows) : torch::Tensor();
    // A chunk of masked tokens (all incoming gradients 0) contributes nothing: skip its three GEMMs.
    const bool active = g_lp_c.ne(0).any().item<bool>() || (use_entropy && g_h_c.ne(0).any().item<bool>());
    if (!active) continue;
    auto z = chunk_logits(s, buffer, start, rows);
    detail::RowStats stats{torch::Tensor(), s.stats.lse.narrow(0, start, rows),
                           use_entropy ? s.stats.entropy.narrow(0, start, rows) : torch::Tensor()};
    detail::rows_backward(z, s.ids.narrow(0, start, rows).unsqueeze(0), stats, g_lp_c, g_h_c, s.temperature, z,
                          s.path);
    auto dz = z.squeeze(0);
    auto h = s.hidden.narrow(0, start, rows);
    if (need_hidden) {
      auto gh = grads.hidden.narrow(0, start, rows);
      at::mm_out(gh, dz, s.weight);
    }
    if (need_weight) {
      if (acc_dtype == dz.scalar_type()) {
        grads.weight.addmm_(dz.t(), h);
      } else {
        // A half-precision product (fp32 accumulation inside the GEMM, about 4× the fp32 rate on CPUs with bf16
        // units), rounded once per chunk and summed over chunks in fp32.
        grads.weight.add_(torch::mm(dz.t(), h));
      }
    }
  }
  if (need_weight) grads.weight = grads.weight.to(s.weight.scalar_type());
  return grads;
}

class LinearLogProbFunction : public torch::autograd::Function<LinearLogProbFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                                                const torch::Tensor& weight, const torch::Tensor& ids,
                                                double temperature, int64_t chunk_rows, bool with_entropy,
                                                bool with_sum_pi_squared, KernelPath path) {
    Saved s{hidden, weight, ids, {}, temperature, chunk_rows, path};
    auto forward = linear_forward(s, with_entropy, with_sum_pi_squared);
    const detail::RowStats& stats = forward.stats;
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["with_entropy"] = with_entropy;
    ctx->saved_data["path"] = static_cast<int64_t>(path);
    ctx->save_for_backward({hidden, weight, ids, stats.lse, with_entropy ? stats.entropy : torch::Tensor()});
    torch::autograd::variable_list outputs{stats.log_probs};
    if (with_entropy) outputs.push_back(stats.entropy);
    if (with_sum_pi_squared) {
      ctx->mark_non_differentiable({forward.sum_pi_squared});
      outputs.push_back(forward.sum_pi_squared);
    }
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    Saved s{saved[0],
            saved[1],
            saved[2],
            {torch::Tensor(), saved[3], saved[4]},
            ctx->saved_data["temperature"].toDouble(),
            ctx->saved_data["chunk_rows"].toInt(),
            static_cast<KernelPath>(ctx->saved_data["path"].toInt())};
    auto grad_entropy = ctx->saved_data["with_entropy"].toBool() ? grad_outputs[1] : torch::Tensor();
    auto grads = linear_backward(s, grad_outputs[0], grad_entropy, ctx->needs_input_grad(0), ctx->needs_input_grad(1));
    return {grads.hidden,     grads.weight,     torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

int64_t linear_log_prob_chunk_rows(const LinearLogProbOptions& options, int64_t vocab, int64_t element_bytes) {
  if (options.chunk_rows > 0) return options.chunk_rows;
  return std::max(kMinChunkRows, detail::kLogitChunkBytes / (std::max<int64_t>(vocab, 1) * element_bytes));
}

TokenLogProbs linear_token_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& ids, const LinearLogProbOptions& options) {
  constexpr const char* kWhat = "linear_token_log_probs";
  GRPO_CHECK(hidden.defined() && (hidden.dim() == 3 || hidden.dim() == 2),
             "{}: hidden must be [B, T, H] or [N, H], got shape {}", kWhat, shape_str(hidden));
  detail::check_floating(hidden, "hidden", kWhat);
  GRPO_CHECK(weight.defined() && weight.dim() == 2 && weight.size(1) == hidden.size(-1),
             "{}: weight must be [V, H] with H = {} like hidden {}, got shape {}", kWhat, hidden.size(-1),
             shape_str(hidden), shape_str(weight));
  GRPO_CHECK(weight.scalar_type() == hidden.scalar_type(), "{}: weight dtype {} differs from hidden dtype {}", kWhat,
             c10::toString(weight.scalar_type()), c10::toString(hidden.scalar_type()));
  GRPO_CHECK(weight.size(0) > 0, "{}: weight must have at least one vocabulary row, got shape {}", kWhat,
             shape_str(weight));
  GRPO_CHECK(options.temperature > 0.0, "{}: temperature must be > 0, got {}", kWhat, options.temperature);
  GRPO_CHECK(options.chunk_rows >= 0, "{}: chunk_rows must be >= 0, got {}", kWhat, options.chunk_rows);
  const auto lead = hidden.sizes().slice(0, hidden.dim() - 1);
  GRPO_CHECK(ids.defined() && ids.sizes() == lead,
             "{}: ids must have the leading shape of hidden {} (without H), got shape {}", kWhat, shape_str(hidden),
             shape_str(ids));
  detail::check_same_device(weight, "weight", hidden, "hidden", kWhat);
  detail::check_same_device(ids, "ids", hidden, "hidden", kWhat);
  detail::check_token_ids(ids, weight.size(0), kWhat);
  const KernelPath path = resolve_kernel_path(hidden, "hidden", kWhat);
  const int64_t chunk_rows = linear_log_prob_chunk_rows(options, weight.size(0), hidden.element_size());
  auto outs = LinearLogProbFunction::apply(hidden.reshape({-1, hidden.size(-1)}).contiguous(), weight.contiguous(),
                                           ids.reshape({-1}).contiguous(), options.temperature, chunk_rows,
                                           options.with_entropy, options.with_sum_pi_squared, path);
  TokenLogProbs result;
  result.log_probs = outs[0].view(lead);
  if (options.with_entropy) result.entropy = outs[1].view(lead);
  if (options.with_sum_pi_squared) result.sum_pi_squared = outs.back().view(lead);
  return result;
}

}  // namespace grpo
