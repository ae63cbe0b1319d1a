// SPDX-License-Identifier: Apache-2.0
#include "few_queries_attention.hpp"

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/models/attention.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace grpo::models {
namespace {

/// Scores per block when block_rows is 0: 4 Mi (16 MiB in fp32; backward holds four such blocks).
constexpr int64_t kBlockScores = int64_t{1} << 22;

void check_arguments(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& segments, const char* what) {
  GRPO_CHECK(q.defined() && k.defined() && v.defined() && q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes(),
             "{}: q must be [B, Hq, T, D] and k, v [B, Hkv, S, D], got q {}, k {}, v {}", what, shape_str(q),
             shape_str(k), shape_str(v));
  const int64_t batch = q.size(0), heads = q.size(1), time = q.size(2), kv_heads = k.size(1), total = k.size(2);
  GRPO_CHECK(k.size(0) == batch && k.size(3) == q.size(3) && kv_heads > 0 && heads % kv_heads == 0 && total >= time,
             "{}: k, v {} do not fit q {} (same B and D, Hq a multiple of Hkv, S >= T)", what, shape_str(k),
             shape_str(q));
  GRPO_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
             "{}: q, k, v must share one dtype, got {}, {}, {}", what, c10::toString(q.scalar_type()),
             c10::toString(k.scalar_type()), c10::toString(v.scalar_type()));
  GRPO_CHECK(segments.defined() && segments.dim() == 2 && segments.size(0) == batch && segments.size(1) == total &&
                 segments.scalar_type() == torch::kInt64,
             "{}: segments must be [B, S] = [{}, {}] int64, got {} {}", what, batch, total, shape_str(segments),
             segments.defined() ? c10::toString(segments.scalar_type()) : "");
}

/// The runs of equal labels: run ids [B, S] (the number of label changes up to each position) and each position's
/// run start [B, S] (the position of the last change at or before it).
struct Runs {
  torch::Tensor ids, starts;
};

Runs runs_of(const torch::Tensor& segments) {
  const int64_t batch = segments.size(0), total = segments.size(1);
  auto change = torch::zeros({batch, total}, segments.options().dtype(torch::kBool));
  if (total > 1) {
    change.narrow(1, 1, total - 1).copy_(segments.narrow(1, 1, total - 1) != segments.narrow(1, 0, total - 1));
  }
  const auto position = torch::arange(total, segments.options()).expand({batch, total});
  const auto changes = change.to(torch::kInt64);
  return {changes.cumsum(1), std::get<0>((position * changes).cummax(1))};
}

/// Which keys [k0, k1) the queries t0 .. t0 + n − 1 see: [B, 1, 1, n, k1 − k0] bool (broadcast over heads).
torch::Tensor visible_keys(const torch::Tensor& run_ids, int64_t past, int64_t t0, int64_t n, int64_t k0, int64_t k1) {
  const auto index = torch::TensorOptions().dtype(torch::kInt64).device(run_ids.device());
  const auto query_position = torch::arange(past + t0, past + t0 + n, index).view({n, 1});
  const auto causal = torch::arange(k0, k1, index).view({1, k1 - k0}) <= query_position;  // [n, k1 − k0]
  const auto same = run_ids.narrow(1, past + t0, n).unsqueeze(2) == run_ids.narrow(1, k0, k1 - k0).unsqueeze(1);
  return (same & causal.unsqueeze(0)).view({run_ids.size(0), 1, 1, n, k1 - k0});
}

/// The query blocks of a call: block b covers queries [t0, t0 + n) and reads keys [k0, k1): from the earliest run
/// start among its first queries (no query of the block sees a key before it) to its last query.
struct Block {
  int64_t t0, n, k0, k1;
};

std::vector<Block> plan_blocks(const Runs& runs, int64_t rows, int64_t time, int64_t total) {
  const int64_t past = total - time;
  std::vector<Block> blocks;
  std::vector<int64_t> firsts;
  for (int64_t t0 = 0; t0 < time; t0 += rows) {
    blocks.push_back({t0, std::min(rows, time - t0), 0, 0});
    firsts.push_back(past + t0);
  }
  if (blocks.empty()) return blocks;
  const auto first_queries = torch::tensor(firsts, torch::kInt64).to(runs.starts.device());
  const auto starts = std::get<0>(runs.starts.index_select(1, first_queries).min(0)).cpu();  // one transfer per call
  const auto* start = starts.data_ptr<int64_t>();
  for (size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].k0 = start[i];
    blocks[i].k1 = past + blocks[i].t0 + blocks[i].n;
  }
  return blocks;
}

int64_t rows_per_block(int64_t block_rows, int64_t batch, int64_t heads, int64_t time, int64_t total) {
  if (block_rows <= 0) block_rows = kBlockScores / std::max<int64_t>(1, batch * heads * total);
  return std::clamp<int64_t>(block_rows, 1, std::max<int64_t>(time, 1));
}

/// One block's scaled, masked scores [B, Hkv, G, n, k1 − k0] in the score dtype, from q5 [B, Hkv, G, T, D].
torch::Tensor block_scores(const torch::Tensor& q5, const torch::Tensor& k_up, const torch::Tensor& run_ids,
                           int64_t past, const Block& block, double scale) {
  const int64_t batch = q5.size(0), kv_heads = q5.size(1), groups = q5.size(2), dim = q5.size(4);
  const int64_t n = block.n, keys = block.k1 - block.k0;
  const auto q_block = q5.narrow(3, block.t0, n).to(k_up.scalar_type()).reshape({batch, kv_heads, groups * n, dim});
  auto scores = torch::matmul(q_block, k_up.narrow(2, block.k0, keys).transpose(2, 3)).mul_(scale);
  return scores.view({batch, kv_heads, groups, n, keys})
      .masked_fill_(visible_keys(run_ids, past, block.t0, n, block.k0, block.k1).logical_not(),
                    -std::numeric_limits<double>::infinity());
}

struct ForwardResult {
  torch::Tensor out;  // [B, Hq, T, D], q's dtype
  torch::Tensor lse;  // [B, Hkv, G, T], score dtype
};

ForwardResult blocked_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& segments, int64_t block_rows) {
  const int64_t batch = q.size(0), heads = q.size(1), time = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k.size(1), groups = heads / kv_heads, total = k.size(2), past = total - time;
  const auto score_dtype = at::promote_types(q.scalar_type(), torch::kFloat32);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const auto q5 = q.reshape({batch, kv_heads, groups, time, dim});
  const auto k_up = k.to(score_dtype);
  auto out = torch::empty({batch, kv_heads, groups, time, dim}, q.options());
  auto lse = torch::empty({batch, kv_heads, groups, time}, q.options().dtype(score_dtype));
  const auto runs = runs_of(segments);
  for (const Block& block : plan_blocks(runs, rows_per_block(block_rows, batch, heads, time, total), time, total)) {
    const int64_t t0 = block.t0, n = block.n, keys = block.k1 - block.k0;
    auto scores = block_scores(q5, k_up, runs.ids, past, block, scale);  // [B, Hkv, G, n, keys]
    auto block_lse = torch::logsumexp(scores, -1, /*keepdim=*/true);
    lse.narrow(3, t0, n).copy_(block_lse.squeeze(-1));
    const auto probs = scores.sub_(block_lse).exp_().to(v.scalar_type()).view({batch, kv_heads, groups * n, keys});
    out.narrow(3, t0, n).copy_(
        torch::matmul(probs, v.narrow(2, block.k0, keys)).view({batch, kv_heads, groups, n, dim}));
  }
  return {out.view({batch, heads, time, dim}), lse};
}

/// blocked_forward with the backward of FlashAttention-2 over query blocks: with P = exp(scores − lse) recomputed
/// per block, dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(dO ⊙ O)) · scale, dQ = dS·K, dK += dSᵀ·Q.
class BlockedAttentionFunction : public torch::autograd::Function<BlockedAttentionFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                                                const torch::Tensor& k, const torch::Tensor& v,
                                                const torch::Tensor& segments, int64_t block_rows) {
    auto result = blocked_forward(q, k, v, segments, block_rows);
    ctx->saved_data["block_rows"] = block_rows;
    ctx->save_for_backward({q, k, v, segments, result.out, result.lse});
    return {result.out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &segments = saved[3], &out = saved[4], &lse = saved[5];
    const int64_t batch = q.size(0), heads = q.size(1), time = q.size(2), dim = q.size(3);
    const int64_t kv_heads = k.size(1), groups = heads / kv_heads, total = k.size(2), past = total - time;
    const auto score_dtype = lse.scalar_type();
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
    const auto q5 = q.reshape({batch, kv_heads, groups, time, dim});
    const auto k_up = k.to(score_dtype), v_up = v.to(score_dtype);
    const auto grad_out = grad_outputs[0].to(score_dtype).reshape({batch, kv_heads, groups, time, dim});
    // rowsum(dO ⊙ O) = rowsum(P ⊙ dP), the softmax backward's subtracted term, per query.
    const auto delta = (grad_out * out.to(score_dtype).view({batch, kv_heads, groups, time, dim})).sum(-1);
    auto grad_q = torch::empty({batch, kv_heads, groups, time, dim}, lse.options());
    auto grad_k = torch::zeros({batch, kv_heads, total, dim}, lse.options());
    auto grad_v = torch::zeros({batch, kv_heads, total, dim}, lse.options());
    const int64_t rows = rows_per_block(ctx->saved_data["block_rows"].toInt(), batch, heads, time, total);
    const auto runs = runs_of(segments);
    for (const Block& block : plan_blocks(runs, rows, time, total)) {
      const int64_t t0 = block.t0, n = block.n, k0 = block.k0, keys = block.k1 - block.k0;
      auto probs = block_scores(q5, k_up, runs.ids, past, block, scale)
                       .sub_(lse.narrow(3, t0, n).unsqueeze(-1))
                       .exp_()
                       .view({batch, kv_heads, groups * n, keys});
      const auto d_out = grad_out.narrow(3, t0, n).reshape({batch, kv_heads, groups * n, dim});
      grad_v.narrow(2, k0, keys).add_(torch::matmul(probs.transpose(2, 3), d_out));
      auto d_scores = torch::matmul(d_out, v_up.narrow(2, k0, keys).transpose(2, 3));
      d_scores.sub_(delta.narrow(3, t0, n).reshape({batch, kv_heads, groups * n, 1})).mul_(probs).mul_(scale);
      const auto q_block = q5.narrow(3, t0, n).to(score_dtype).reshape({batch, kv_heads, groups * n, dim});
      grad_q.narrow(3, t0, n).copy_(
          torch::matmul(d_scores, k_up.narrow(2, k0, keys)).view({batch, kv_heads, groups, n, dim}));
      grad_k.narrow(2, k0, keys).add_(torch::matmul(d_scores.transpose(2, 3), q_block));
    }
    return {grad_q.view({batch, heads, time, dim}).to(q.scalar_type()), grad_k.to(k.scalar_type()),
            grad_v.to(v.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor attention_segments(const torch::Tensor& attention_mask) {
  return attention_mask.ne(0).to(torch::kInt64);
}

torch::Tensor blocked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& segments, int64_t block_rows) {
  check_arguments(q, k, v, segments, "blocked_attention");
  const bool differentiable =
      torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  if (!differentiable) {
    if (detail::use_few_queries_attention(q, k, v)) return detail::few_queries_attention(q, k, v, segments);
    return blocked_forward(q, k, v, segments, block_rows).out;
  }
  return BlockedAttentionFunction::apply(q, k, v, segments, block_rows)[0];
}

torch::Tensor eager_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& segments) {
  check_arguments(q, k, v, segments, "eager_attention");
  const int64_t batch = q.size(0), heads = q.size(1), time = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k.size(1), groups = heads / kv_heads, total = k.size(2);
  const auto score_dtype = at::promote_types(q.scalar_type(), torch::kFloat32);
  // The G query heads of a key/value head are stacked along time and share one product with it.
  const auto grouped_q = q.reshape({batch, kv_heads, groups * time, dim}).to(score_dtype);
  auto scores = torch::matmul(grouped_q, k.to(score_dtype).transpose(2, 3)) / std::sqrt(static_cast<double>(dim));
  scores = scores.view({batch, kv_heads, groups, time, total})
               .masked_fill(visible_keys(runs_of(segments).ids, total - time, 0, time, 0, total).logical_not(),
                            -std::numeric_limits<double>::infinity());
  const auto probs = torch::softmax(scores, -1).to(v.scalar_type()).view({batch, kv_heads, groups * time, total});
  return torch::matmul(probs, v).view({batch, heads, time, dim});
}

torch::Tensor attention(AttentionImplementation implementation, const torch::Tensor& q, const torch::Tensor& k,
                        const torch::Tensor& v, const torch::Tensor& segments) {
  return implementation == AttentionImplementation::eager ? eager_attention(q, k, v, segments)
                                                          : blocked_attention(q, k, v, segments);
}

}  // namespace grpo::models
