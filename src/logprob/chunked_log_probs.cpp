// SPDX-License-Identifier: Apache-2.0
// Chunked per-token log-probs and entropy with a custom autograd backward (see token_log_probs.hpp).
#include <grpo/core/tensor_checks.hpp>
#include <grpo/logprob/token_log_probs.hpp>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

namespace grpo {
namespace {

constexpr int64_t kTargetChunkBytes = int64_t{4} << 20;

torch::ScalarType compute_dtype(const torch::Tensor& logits) {
  return logits.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

/// A run of rows [t0, t0 + rows) of batch element b of a [B, T, V] tensor.
struct RowChunk {
  int64_t b, t0, rows;
};

std::vector<RowChunk> make_chunks(int64_t batch, int64_t time, int64_t chunk_rows) {
  std::vector<RowChunk> chunks;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < time; t += chunk_rows) chunks.push_back({b, t, std::min(chunk_rows, time - t)});
  }
  return chunks;
}

int64_t resolve_chunk_rows(const TokenLogProbOptions& options, int64_t vocab) {
  if (options.chunk_rows > 0) return options.chunk_rows;
  return std::max<int64_t>(1, kTargetChunkBytes / (std::max<int64_t>(vocab, 1) * 4));
}

/// Per-thread scratch: the scaled logits z (when a copy is needed) and exp(z − m) / softmax.
struct Scratch {
  torch::Tensor z, e;
  torch::Tensor prepare(const torch::Tensor& x, double temperature, torch::ScalarType dtype) {
    if (temperature == 1.0 && x.scalar_type() == dtype) return x;
    if (!z.defined() || z.size(0) < x.size(0)) z = torch::empty(x.sizes(), x.options().dtype(dtype));
    auto zc = z.narrow(0, 0, x.size(0));
    zc.copy_(x);
    if (temperature != 1.0) zc.div_(temperature);
    return zc;
  }
  torch::Tensor exp_buffer(const torch::Tensor& z) {
    if (!e.defined() || e.size(0) < z.size(0)) e = torch::empty(z.sizes(), z.options());
    return e.narrow(0, 0, z.size(0));
  }
};

/// Runs fn(chunk, scratch) over all row chunks in parallel, one scratch per worker range.
template <typename Fn>
void for_each_chunk(const std::vector<RowChunk>& chunks, Fn&& fn) {
  at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    for (int64_t i = begin; i < end; ++i) fn(chunks[static_cast<size_t>(i)], scratch);
  });
}

struct Forward {
  torch::Tensor log_probs, entropy, lse;  // [B, T] each; entropy undefined unless requested
};

Forward chunked_forward(const torch::Tensor& logits, const torch::Tensor& ids, double temperature, int64_t chunk_rows,
                        bool with_entropy) {
  const auto dtype = compute_dtype(logits);
  const int64_t batch = logits.size(0), time = logits.size(1);
  auto opts = logits.options().dtype(dtype);
  Forward out;
  out.log_probs = torch::empty({batch, time}, opts);
  out.lse = torch::empty({batch, time}, opts);
  if (with_entropy) out.entropy = torch::empty({batch, time}, opts);
  torch::NoGradGuard no_grad;
  for_each_chunk(make_chunks(batch, time, chunk_rows), [&](const RowChunk& c, Scratch& scratch) {
    auto z = scratch.prepare(logits[c.b].narrow(0, c.t0, c.rows), temperature, dtype);
    auto m = std::get<0>(z.max(1, /*keepdim=*/true));
    auto e = scratch.exp_buffer(z);
    at::sub_out(e, z, m).exp_();
    auto sum = e.sum(1);
    auto lse = sum.log().add_(m.squeeze(1));
    out.lse[c.b].narrow(0, c.t0, c.rows).copy_(lse);
    auto target = z.gather(1, ids[c.b].narrow(0, c.t0, c.rows).unsqueeze(1)).squeeze(1);
    out.log_probs[c.b].narrow(0, c.t0, c.rows).copy_(target - lse);
    if (with_entropy) {
      // Σ softmax(z)·z as a batched dot product of e and z (no [rows, V] temporary), divided by Σ e.
      auto ez = torch::bmm(e.unsqueeze(1), z.unsqueeze(2)).view({c.rows});
      out.entropy[c.b].narrow(0, c.t0, c.rows).copy_(lse - ez / sum);
    }
  });
  return out;
}

/// grad_x = [ g_lp·onehot(y) − softmax(z)·(g_lp + g_H·(log softmax(z) + H)) ] / temperature
torch::Tensor chunked_backward(const torch::Tensor& logits, const torch::Tensor& ids, const torch::Tensor& lse,
                               const torch::Tensor& entropy, const torch::Tensor& grad_log_probs,
                               const torch::Tensor& grad_entropy, double temperature, int64_t chunk_rows) {
  const auto dtype = compute_dtype(logits);
  const int64_t batch = logits.size(0), time = logits.size(1);
  auto grad = torch::empty(logits.sizes(), logits.options());
  torch::NoGradGuard no_grad;
  auto g_lp = grad_log_probs.defined() ? grad_log_probs.to(dtype) : torch::zeros_like(lse);
  const bool use_entropy = grad_entropy.defined() && entropy.defined();
  auto g_h = use_entropy ? grad_entropy.to(dtype) : torch::Tensor();
  for_each_chunk(make_chunks(batch, time, chunk_rows), [&](const RowChunk& c, Scratch& scratch) {
    auto z = scratch.prepare(logits[c.b].narrow(0, c.t0, c.rows), temperature, dtype);
    auto row_lse = lse[c.b].narrow(0, c.t0, c.rows).unsqueeze(1);
    auto row_g = g_lp[c.b].narrow(0, c.t0, c.rows).unsqueeze(1);
    auto p = scratch.exp_buffer(z);
    at::sub_out(p, z, row_lse).exp_();
    torch::Tensor d;
    if (use_entropy) {
      // (log p + H)·g_H + g_lp, times −p
      auto row_h = entropy[c.b].narrow(0, c.t0, c.rows).unsqueeze(1);
      auto row_gh = g_h[c.b].narrow(0, c.t0, c.rows).unsqueeze(1);
      d = (z - (row_lse - row_h)).mul_(row_gh).add_(row_g).mul_(p).neg_();
    } else {
      d = p.mul_(row_g).neg_();
    }
    d.scatter_add_(1, ids[c.b].narrow(0, c.t0, c.rows).unsqueeze(1), row_g);
    if (temperature != 1.0) d.div_(temperature);
    grad[c.b].narrow(0, c.t0, c.rows).copy_(d);
  });
  return grad;
}

class ChunkedLogProbFunction : public torch::autograd::Function<ChunkedLogProbFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                                                const torch::Tensor& ids, double temperature, int64_t chunk_rows,
                                                bool with_entropy) {
    auto fwd = chunked_forward(logits, ids, temperature, chunk_rows, with_entropy);
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->save_for_backward({logits, ids, fwd.lse, with_entropy ? fwd.entropy : torch::Tensor()});
    ctx->mark_non_differentiable({fwd.lse});
    if (with_entropy) return {fwd.log_probs, fwd.entropy};
    return {fwd.log_probs};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    auto grad_entropy = grad_outputs.size() > 1 ? grad_outputs[1] : torch::Tensor();
    auto grad = chunked_backward(saved[0], saved[1], saved[2], saved[3], grad_outputs[0], grad_entropy, temperature,
                                 chunk_rows);
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
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
  GRPO_CHECK(ids.scalar_type() == torch::kInt64, "{}: ids must be int64, got {}", what,
             c10::toString(ids.scalar_type()));
  const int64_t vocab = logits.size(-1);
  if (ids.numel() > 0) {
    auto bad = (ids < 0).logical_or_(ids >= vocab).reshape({-1});
    if (bad.any().item<bool>()) {
      int64_t flat = bad.nonzero()[0][0].item<int64_t>();
      const int64_t value = ids.reshape({-1})[flat].item<int64_t>();
      std::string index;
      for (int64_t d = ids.dim() - 1; d >= 0; --d) {
        index = std::to_string(flat % ids.size(d)) + (index.empty() ? "" : ", ") + index;
        flat /= ids.size(d);
      }
      GRPO_CHECK(false, "{}: ids[{}] = {} is outside the vocabulary [0, {})", what, index, value, vocab);
    }
  }
  p.ids = ids.dim() == 1 ? ids.unsqueeze(0) : ids;
  return p;
}

}  // namespace

TokenLogProbs token_log_probs(const torch::Tensor& logits, const torch::Tensor& ids,
                              const TokenLogProbOptions& options) {
  auto p = prepare(logits, ids, "token_log_probs", /*need_ids=*/true, options.temperature);
  const int64_t chunk_rows = resolve_chunk_rows(options, logits.size(-1));
  auto outs = ChunkedLogProbFunction::apply(p.logits, p.ids, options.temperature, chunk_rows, options.with_entropy);
  TokenLogProbs result;
  result.log_probs = outs[0].view(p.lead_shape);
  if (options.with_entropy) result.entropy = outs[1].view(p.lead_shape);
  return result;
}

torch::Tensor token_entropy(const torch::Tensor& logits, const TokenLogProbOptions& options) {
  auto p = prepare(logits, {}, "token_entropy", /*need_ids=*/false, options.temperature);
  // Entropy alone still runs the shared kernel; target id 0 is always valid and its log-prob is discarded.
  auto ids = torch::zeros({p.logits.size(0), p.logits.size(1)}, logits.options().dtype(torch::kInt64));
  const int64_t chunk_rows = resolve_chunk_rows(options, logits.size(-1));
  auto outs = ChunkedLogProbFunction::apply(p.logits, ids, options.temperature, chunk_rows, /*with_entropy=*/true);
  return outs[1].view(p.lead_shape);
}

torch::Tensor token_log_probs_reference(const torch::Tensor& logits, const torch::Tensor& ids, double temperature) {
  auto p = prepare(logits, ids, "token_log_probs_reference", /*need_ids=*/true, temperature);
  auto z = logits.to(compute_dtype(logits)) / temperature;
  return torch::log_softmax(z, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1);
}

torch::Tensor token_entropy_reference(const torch::Tensor& logits, double temperature) {
  prepare(logits, {}, "token_entropy_reference", /*need_ids=*/false, temperature);
  auto log_p = torch::log_softmax(logits.to(compute_dtype(logits)) / temperature, -1);
  return -(log_p.exp() * log_p).sum(-1);
}

}  // namespace grpo
