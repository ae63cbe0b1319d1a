// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/models/attention.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/models/cpu_kernels.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>
#include <support/kernel_path_testing.hpp>
#include <support/tensor_testing.hpp>

#include <cmath>
#include <vector>

using grpo::models::blocked_attention;
using grpo::models::eager_attention;

namespace {

/// Attention by its definition, one query at a time in fp64 loops: query t (position past + t) of head h reads
/// key/value head h / (Hq / Hkv) at every key s ≤ past + t with no label change between s and past + t.
torch::Tensor loop_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& segments) {
  const int64_t batch = q.size(0), heads = q.size(1), time = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k.size(1), total = k.size(2), past = total - time;
  auto out = torch::zeros({batch, heads, time, dim}, torch::kFloat64);
  auto qa = q.accessor<double, 4>(), ka = k.accessor<double, 4>(), va = v.accessor<double, 4>();
  auto sa = segments.accessor<int64_t, 2>();
  auto oa = out.accessor<double, 4>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv = h / (heads / kv_heads);
      for (int64_t t = 0; t < time; ++t) {
        std::vector<double> score;
        std::vector<int64_t> keys;
        int64_t run_start = past + t;
        while (run_start > 0 && sa[b][run_start - 1] == sa[b][past + t]) --run_start;
        for (int64_t s = run_start; s <= past + t; ++s) {
          double dot = 0.0;
          for (int64_t d = 0; d < dim; ++d) dot += qa[b][h][t][d] * ka[b][kv][s][d];
          score.push_back(dot / std::sqrt(static_cast<double>(dim)));
          keys.push_back(s);
        }
        double top = -INFINITY, total_weight = 0.0;
        for (double x : score) top = std::max(top, x);
        for (double& x : score) total_weight += (x = std::exp(x - top));
        for (size_t i = 0; i < keys.size(); ++i) {
          for (int64_t d = 0; d < dim; ++d) oa[b][h][t][d] += score[i] / total_weight * va[b][kv][keys[i]][d];
        }
      }
    }
  }
  return out;
}

struct Case {
  const char* name;
  int64_t heads, kv_heads, time, total;
  torch::Tensor segments;  // [B, total]
};

/// Ragged rows: left padding, right padding, a packed row of three examples, both paddings (two runs of 0: the
/// right padding does not see the left), and no padding; and with a cache.
std::vector<Case> cases() {
  const auto segments = torch::tensor({{0, 0, 0, 1, 1, 1, 1, 1, 1, 1},
                                       {1, 1, 1, 1, 1, 1, 1, 0, 0, 0},
                                       {1, 1, 1, 2, 2, 2, 2, 3, 3, 0},
                                       {0, 0, 1, 1, 1, 1, 1, 1, 0, 0},
                                       {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
                                      torch::kInt64);
  return {{"grouped-query, no cache", 4, 2, 10, 10, segments},
          {"multi-head, no cache", 3, 3, 10, 10, segments},
          {"grouped-query, 6 cached keys", 6, 2, 4, 10, segments},
          {"one query after 9 cached keys (decoding)", 4, 1, 1, 10, segments}};
}

struct Inputs {
  torch::Tensor q, k, v;
};

Inputs random_inputs(const Case& c, int64_t dim, torch::ScalarType dtype, int seed) {
  torch::manual_seed(seed);
  const int64_t batch = c.segments.size(0);
  auto make = [&](int64_t heads, int64_t time) {
    return torch::randn({batch, heads, time, dim}, torch::kFloat64).to(dtype).requires_grad_(true);
  };
  return {make(c.heads, c.time), make(c.kv_heads, c.total), make(c.kv_heads, c.total)};
}

/// A bound on the float32 attention's error (Higham, Accuracy and Stability of Numerical Algorithms, §3.1): each score
/// s = scale·Σ_d q_d·k_d is within γ_(D+2) = (D + 2)·2⁻²⁴ of scale·Σ_d |q_d·k_d|; the softmax weights are then within
/// 2·max|δs| + (S + 4)·2⁻²⁴ relative (exp, the sum of S terms, the division), and the output Σ_s p_s·v_s is within that
/// times max|v|. Independent of how a kernel or BLAS blocks its sums, so it holds on every CPU path.
double fp32_attention_bound(const Inputs& in) {
  const auto q = in.q.detach().to(torch::kFloat64).abs(), k = in.k.detach().to(torch::kFloat64).abs();
  const int64_t dim = q.size(3), keys = k.size(2), group = q.size(1) / k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const double products = torch::matmul(q, k.repeat_interleave(group, 1).transpose(2, 3)).max().item<double>();
  const double u = std::ldexp(1.0, -24);
  const double score_error = static_cast<double>(dim + 2) * u * scale * products;
  return (2 * score_error + static_cast<double>(keys + 4) * u) * in.v.detach().abs().max().item<double>();
}

/// Gradients of Σ out·w with respect to q, k, v.
std::vector<torch::Tensor> gradients(const torch::Tensor& out, const Inputs& in, const torch::Tensor& weights) {
  return torch::autograd::grad({(out.to(torch::kFloat64) * weights).sum()}, {in.q, in.k, in.v});
}

}  // namespace

TEST_CASE("eager_attention equals attention computed query by query from its definition (fp64)",
          "[models][attention]") {
  for (const auto& c : cases()) {
    INFO(c.name);
    const auto in = random_inputs(c, 5, torch::kFloat64, 1);
    torch::NoGradGuard no_grad;
    GRPO_REQUIRE_CLOSE(eager_attention(in.q, in.k, in.v, c.segments), loop_attention(in.q, in.k, in.v, c.segments),
                       1e-12, 1e-13);
  }
}

TEST_CASE("blocked_attention equals eager attention in values and gradients (fp64, ragged and packed masks)",
          "[models][attention]") {
  for (const auto& c : cases()) {
    for (int64_t block_rows : {0, 1, 3, 64}) {
      INFO(c.name << ", block_rows " << block_rows);
      const auto in = random_inputs(c, 5, torch::kFloat64, 2);
      const auto weights = torch::randn({c.segments.size(0), c.heads, c.time, 5}, torch::kFloat64);
      const auto eager = eager_attention(in.q, in.k, in.v, c.segments);
      const auto blocked = blocked_attention(in.q, in.k, in.v, c.segments, block_rows);
      GRPO_REQUIRE_CLOSE(blocked, eager, 1e-12, 1e-13);
      const auto expected = gradients(eager, in, weights);
      const auto actual = gradients(blocked, in, weights);
      for (size_t i = 0; i < 3; ++i) {
        INFO("gradient of " << "qkv"[i]);
        REQUIRE(expected[i].abs().sum().item<double>() > 0.0);
        GRPO_REQUIRE_CLOSE(actual[i], expected[i], 1e-11, 1e-12);
      }
    }
  }
}

TEST_CASE("blocked_attention's gradient equals central finite differences (fp64)", "[models][attention]") {
  const auto c = cases()[2];
  const auto in = random_inputs(c, 4, torch::kFloat64, 3);
  const auto weights = torch::randn({c.segments.size(0), c.heads, c.time, 4}, torch::kFloat64);
  const auto grads = gradients(blocked_attention(in.q, in.k, in.v, c.segments, 2), in, weights);
  const std::vector<torch::Tensor> inputs{in.q, in.k, in.v};
  for (size_t which = 0; which < 3; ++which) {
    INFO("input " << "qkv"[which]);
    auto numeric = grpo::testing::finite_difference_grad(
        [&](const torch::Tensor& x) {
          auto args = inputs;
          for (auto& a : args) a = a.detach();
          args[which] = x;
          return (blocked_attention(args[0], args[1], args[2], c.segments, 2) * weights).sum();
        },
        inputs[which].detach());
    GRPO_REQUIRE_CLOSE(grads[which], numeric, 1e-6, 1e-8);
  }
}

TEST_CASE("blocked_attention in bf16 stays within bf16 rounding of the fp64 result, and its gradients too",
          "[models][attention]") {
  const auto c = cases()[0];
  const auto exact = random_inputs(c, 16, torch::kFloat64, 4);
  const Inputs half{exact.q.detach().to(torch::kBFloat16).requires_grad_(true),
                    exact.k.detach().to(torch::kBFloat16).requires_grad_(true),
                    exact.v.detach().to(torch::kBFloat16).requires_grad_(true)};
  const auto weights = torch::randn({c.segments.size(0), c.heads, c.time, 16}, torch::kFloat64);
  const auto reference = eager_attention(half.q.detach().to(torch::kFloat64), half.k.detach().to(torch::kFloat64),
                                         half.v.detach().to(torch::kFloat64), c.segments);
  const auto out = blocked_attention(half.q, half.k, half.v, c.segments, 3);
  REQUIRE(out.scalar_type() == torch::kBFloat16);
  GRPO_REQUIRE_CLOSE(out.to(torch::kFloat64), reference, 2e-2, 2e-2);
  const Inputs widened{half.q.detach().to(torch::kFloat64).requires_grad_(true),
                       half.k.detach().to(torch::kFloat64).requires_grad_(true),
                       half.v.detach().to(torch::kFloat64).requires_grad_(true)};
  const auto expected = gradients(eager_attention(widened.q, widened.k, widened.v, c.segments), widened, weights);
  const auto actual = gradients(out, half, weights);
  for (size_t i = 0; i < 3; ++i) {
    INFO("gradient of " << "qkv"[i]);
    REQUIRE(actual[i].scalar_type() == torch::kBFloat16);
    GRPO_REQUIRE_CLOSE(actual[i].to(torch::kFloat64), expected[i], 3e-2, 3e-2);
  }
}

TEST_CASE("blocked_attention without gradient (the few-queries CPU kernel when decoding) equals the fp64 definition "
          "on both kernel paths, in fp32 and bf16",
          "[models][attention]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  if (!grpo::models::avx512_bf16_kernels_available()) WARN("no AVX-512 here: both paths run LibTorch's composition");
  auto all = cases();
  all.push_back({"7 query heads per key/value head, one query", 14, 2, 1, 10, all[0].segments});
  for (const auto& c : all) {
    for (int64_t dim : {5, 16, 40, 64}) {
      for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        INFO(c.name << ", D " << dim << ", " << c10::toString(dtype));
        const auto in = random_inputs(c, dim, dtype, 6);
        torch::NoGradGuard no_grad;
        const auto out = blocked_attention(in.q, in.k, in.v, c.segments);
        REQUIRE(out.scalar_type() == dtype);
        const auto expected = loop_attention(in.q.to(torch::kFloat64), in.k.to(torch::kFloat64),
                                             in.v.to(torch::kFloat64), c.segments);
        // bf16: the scores stay in fp32; the weights and the output are rounded to bf16 (2⁻⁸ relative each), within
        // 2⁻⁸·max|v| + 2⁻⁸·|o| (max|v| < 5 for these inputs).
        if (dtype == torch::kFloat32) {
          const double bound = fp32_attention_bound(in);
          GRPO_REQUIRE_CLOSE(out.to(torch::kFloat64), expected, 0, bound);
        } else {
          GRPO_REQUIRE_CLOSE(out.to(torch::kFloat64), expected, 2e-2, 2e-2);
        }
      }
    }
  }
  // Huge scores and a row of padding only: finite, and a padding query sees only itself.
  Case c{"all padding and huge scores", 2, 1, 1, 6, torch::tensor({{0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}})};
  auto in = random_inputs(c, 4, torch::kFloat32, 7);
  torch::NoGradGuard no_grad;
  const auto out = blocked_attention(in.q * 1e4, in.k, in.v, c.segments);
  REQUIRE(torch::isfinite(out).all().item<bool>());
  Case first{"the first position alone", 2, 1, 1, 1, torch::tensor({{0}, {1}})};
  in = random_inputs(first, 4, torch::kFloat32, 8);
  GRPO_REQUIRE_CLOSE(blocked_attention(in.q * 1e4, in.k, in.v, first.segments).select(1, 0),
                     in.v.select(1, 0), 1e-6, 1e-6);
}

TEST_CASE("blocked_attention stays finite for all-padding rows and huge scores", "[models][attention]") {
  Case c{"all padding and huge scores", 2, 1, 6, 6, torch::tensor({{0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}})};
  auto in = random_inputs(c, 4, torch::kFloat32, 5);
  const auto q = (in.q.detach() * 1e4).requires_grad_(true);
  const auto out = blocked_attention(q, in.k, in.v, c.segments, 2);
  const auto grads = torch::autograd::grad({out.sum()}, {q, in.k, in.v});
  REQUIRE(torch::isfinite(out).all().item<bool>());
  for (const auto& g : grads) REQUIRE(torch::isfinite(g).all().item<bool>());
  // A padding query sees only padding: the first row's first query sees only its own key.
  GRPO_REQUIRE_CLOSE(out[0][0][0], in.v[0][0][0].detach(), 1e-6, 1e-6);
}

TEST_CASE("blocked_attention names the shapes that do not fit", "[models][attention]") {
  const auto q = torch::zeros({2, 4, 3, 8}), k = torch::zeros({2, 3, 5, 8}), segments = torch::ones({2, 5}, torch::kInt64);
  REQUIRE_THROWS_WITH(blocked_attention(q, k, k, segments), Catch::Contains("Hq a multiple of Hkv"));
  const auto k2 = torch::zeros({2, 2, 5, 8});
  REQUIRE_THROWS_WITH(blocked_attention(q, k2, k2, torch::ones({2, 4}, torch::kInt64)),
                      Catch::Contains("segments must be [B, S] = [2, 5] int64, got [2, 4]"));
  REQUIRE_THROWS_WITH(blocked_attention(q, k2, k2.to(torch::kFloat64), segments),
                      Catch::Contains("must share one dtype"));
}

TEST_CASE("A model with blocked attention gives eager attention's logits and gradients (fp64, ragged masks)",
          "[models][attention]") {
  const auto config = grpo::testing::tiny_model_config(
      {.vocab = 19, .hidden = 16, .intermediate = 20, .layers = 2, .heads = 4, .kv_heads = 2});
  auto model = grpo::testing::random_fp64_model(config, 6);
  REQUIRE(model->attention_implementation() == grpo::models::AttentionImplementation::blocked);
  const auto ids = torch::tensor({{0, 0, 3, 7, 1, 4}, {2, 5, 6, 1, 8, 9}, {0, 11, 2, 2, 3, 0}}, torch::kInt64);
  const auto mask = torch::tensor({{0, 0, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1}, {0, 1, 1, 1, 1, 0}}, torch::kInt64);
  const auto weights = torch::randn({3, 6, config.vocab_size}, torch::kFloat64) * mask.unsqueeze(-1);
  auto run = [&](grpo::models::AttentionImplementation implementation) {
    model->set_attention_implementation(implementation);
    model->zero_grad();
    const auto logits = model->forward(ids, mask);
    (logits * weights).sum().backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return std::pair{logits.detach() * mask.unsqueeze(-1), grads};
  };
  const auto [eager_logits, eager_grads] = run(grpo::models::AttentionImplementation::eager);
  const auto [blocked_logits, blocked_grads] = run(grpo::models::AttentionImplementation::blocked);
  GRPO_REQUIRE_CLOSE(blocked_logits, eager_logits, 1e-12, 1e-12);
  for (size_t i = 0; i < eager_grads.size(); ++i) GRPO_REQUIRE_CLOSE(blocked_grads[i], eager_grads[i], 1e-10, 1e-12);
}
