// SPDX-License-Identifier: Apache-2.0
// Batches and comparison helpers of the parity tests: every comparison is value and autograd gradient (w.r.t. the
// log-probs, and the entropy when it is used) of the library against a reference of references.hpp, both float64.
#pragma once

#include <grpo/loss/grpo_loss.hpp>

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/loss_testing.hpp"
#include "support/tensor_testing.hpp"

namespace parity {

inline const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);
inline constexpr double kRtol = 1e-9;
inline constexpr double kAtol = 1e-12;

/// One micro-batch, with clean tensors for the references (padding = a harmless copy) and garbage-padded tensors
/// (−inf/NaN at masked positions) for the library.
struct Batch {
  std::string name;
  torch::Tensor lp;                   // [B, T] clean (no grad)
  torch::Tensor old, ref, sampler;    // clean
  torch::Tensor old_lib, ref_lib, sampler_lib;  // garbage at padded positions
  torch::Tensor adv;                  // [B]
  torch::Tensor adv_tok;              // [B, T] per-token advantages (0 at padding)
  torch::Tensor mask;                 // [B, T] bool
  torch::Tensor entropy;              // [B, T], float32-representable values (TRL takes its quantile in float32)
  torch::Tensor truncated;            // [B] bool
  int64_t B() const { return lp.size(0); }
  int64_t T() const { return lp.size(1); }
  torch::Tensor maskf() const { return mask.to(torch::kFloat64); }
};

/// Replaces masked positions of x by fill (a tensor of x's shape).
inline torch::Tensor clean(const torch::Tensor& x, const torch::Tensor& mask, const torch::Tensor& fill) {
  return torch::where(mask, x, fill);
}

inline void add_garbage(Batch& b) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  b.old_lib = b.old.masked_fill(~b.mask, -inf);
  b.ref_lib = b.ref.masked_fill(~b.mask, nan);
  b.sampler_lib = b.sampler.masked_fill(~b.mask, inf);
}

/// random_loss_batch (tests/support/loss_testing.hpp) made clean for the references: B ≥ 2, row 1 empty, row B − 1
/// truncated.
inline Batch random_batch(int64_t B, int64_t T, uint64_t seed) {
  auto r = grpo::testing::random_loss_batch(B, T, seed);
  Batch b;
  b.name = "random(seed=" + std::to_string(seed) + ")";
  b.mask = r.mask.to(torch::kBool);
  b.lp = r.lp;
  b.old = clean(r.old, b.mask, r.lp);
  b.ref = clean(r.ref, b.mask, r.lp);
  b.sampler = clean(r.sampler, b.mask, b.old);
  b.adv = r.adv;
  torch::manual_seed(seed + 1000);
  b.adv_tok = (r.adv.unsqueeze(1) + 0.5 * torch::randn({B, T}, kF64)) * b.mask.to(torch::kFloat64);
  b.entropy = r.entropy.to(torch::kFloat32).to(torch::kFloat64);
  b.truncated = r.truncated.to(torch::kBool);
  add_garbage(b);
  return b;
}

/// Hand-made edge batch [7, 5]: row 0 full; row 1 fully masked; row 2 a single token; row 3 log ratios +30, −30,
/// +100 (A > 0); row 4 −100, +100, +30, −30, small (A < 0); row 5 three tokens with log ratio ≈ 25 (sequence mean
/// > 20) and A < 0; row 6 three tokens with log ratio ≈ −25 and A > 0. Reference log-probs 30 away on some tokens,
/// sampler log-probs 5 away on one.
inline Batch edge_batch() {
  const int64_t B = 7, T = 5;
  torch::manual_seed(4242);
  Batch b;
  b.name = "edge";
  const std::vector<int64_t> lengths{5, 0, 1, 4, 5, 3, 3};
  b.mask = torch::zeros({B, T}, torch::kBool);
  for (int64_t i = 0; i < B; ++i) b.mask[i].slice(0, 0, lengths[i]).fill_(true);
  b.lp = -torch::rand({B, T}, kF64) * 2.0 - 0.1;
  auto delta = 0.2 * torch::randn({B, T}, kF64);
  auto set = [&](int64_t i, int64_t t, double v) { delta[i][t] = v; };
  set(3, 0, 30.0), set(3, 1, -30.0), set(3, 2, 100.0);
  set(4, 0, -100.0), set(4, 1, 100.0), set(4, 2, 30.0), set(4, 3, -30.0);
  for (int64_t t = 0; t < 3; ++t) set(5, t, 25.0 + 0.3 * t), set(6, t, -25.0 - 0.2 * t);
  b.old = b.lp - delta;
  auto ref_delta = 0.4 * torch::randn({B, T}, kF64);
  ref_delta[3][0] = 30.0, ref_delta[4][1] = -30.0, ref_delta[0][2] = 19.5;
  b.ref = b.lp + ref_delta;
  b.sampler = b.old + 0.1 * torch::randn({B, T}, kF64);
  b.sampler[0][1] = b.old[0][1].item<double>() - 5.0;
  b.sampler[2][0] = b.old[2][0].item<double>() + 5.0;
  b.adv = torch::tensor({0.7, 1.1, -0.4, 1.3, -0.9, -1.3, 0.8}, kF64);
  b.adv_tok = (b.adv.unsqueeze(1) + 0.3 * torch::randn({B, T}, kF64)) * b.mask.to(torch::kFloat64);
  b.entropy = (torch::rand({B, T}, kF64) * 2.0).to(torch::kFloat32).to(torch::kFloat64);
  b.truncated = torch::zeros({B}, torch::kBool);
  b.truncated[0] = true;
  // Clean padding.
  b.old = clean(b.old, b.mask, b.lp);
  b.ref = clean(b.ref, b.mask, b.lp);
  b.sampler = clean(b.sampler, b.mask, b.old);
  add_garbage(b);
  return b;
}

/// Every row masked.
inline Batch all_masked_batch() {
  Batch b = random_batch(4, 5, 77);
  b.name = "all-masked";
  b.mask = torch::zeros_like(b.mask);
  b.adv_tok = torch::zeros_like(b.adv_tok);
  b.old = b.lp.clone(), b.ref = b.lp.clone(), b.sampler = b.lp.clone();
  add_garbage(b);
  return b;
}

/// Random batches with seeds 1..3 and the edge batch.
inline std::vector<Batch> standard_batches() {
  return {random_batch(6, 7, 1), random_batch(5, 4, 2), random_batch(8, 6, 3), edge_batch()};
}

/// Value and gradients of a scalar function of (log_probs, entropy).
struct Evaluation {
  torch::Tensor value, grad_lp, grad_entropy;
};

using LossFn = std::function<torch::Tensor(const torch::Tensor& lp, const torch::Tensor& entropy)>;

inline Evaluation evaluate(const LossFn& f, const torch::Tensor& lp0, const torch::Tensor& entropy0) {
  auto lp = lp0.detach().clone().requires_grad_(true);
  auto entropy = entropy0.detach().clone().requires_grad_(true);
  Evaluation e;
  e.value = f(lp, entropy);
  e.grad_lp = torch::zeros_like(lp);
  e.grad_entropy = torch::zeros_like(entropy);
  if (e.value.requires_grad()) {
    auto grads = torch::autograd::grad({e.value}, {lp, entropy}, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                       /*allow_unused=*/true);
    if (grads[0].defined()) e.grad_lp = grads[0];
    if (grads[1].defined()) e.grad_entropy = grads[1];
  }
  e.value = e.value.detach();
  return e;
}

/// Non-fatal closeness check (CHECK, so a loop reports every failing combination with its INFO context).
#define PARITY_CHECK_CLOSE(actual, expected)                                                                \
  do {                                                                                                      \
    const std::string parity_mismatch_ =                                                                    \
        ::grpo::testing::tensor_mismatch((actual), (expected), ::parity::kRtol, ::parity::kAtol);           \
    INFO(#actual << " vs " << #expected << ": " << parity_mismatch_);                                       \
    CHECK(parity_mismatch_.empty());                                                                        \
  } while (false)

/// Library vs reference: value, ∂/∂lp and ∂/∂entropy.
inline void check_parity(const LossFn& library, const LossFn& reference, const Batch& b) {
  Evaluation lib, ref;
  try {
    lib = evaluate(library, b.lp, b.entropy);
  } catch (const std::exception& e) {
    FAIL_CHECK("library threw: " << e.what());
    return;
  }
  ref = evaluate(reference, b.lp, b.entropy);
  INFO("library value " << lib.value.item<double>() << ", reference value " << ref.value.item<double>());
  PARITY_CHECK_CLOSE(lib.value, ref.value);
  PARITY_CHECK_CLOSE(lib.grad_lp, ref.grad_lp);
  PARITY_CHECK_CLOSE(lib.grad_entropy, ref.grad_entropy);
}

/// GrpoLoss(options) on the batch (garbage-padded old/ref/sampler), with the unsplit batch's own normaliser.
inline torch::Tensor library_loss(const grpo::GrpoLossOptions& options, const Batch& b, const torch::Tensor& lp,
                                  const torch::Tensor& entropy, bool per_token_adv = false, bool with_sampler = true) {
  grpo::GrpoLoss loss(options);
  grpo::LossInputs inputs{.log_probs = lp,
                          .old_log_probs = b.old_lib,
                          .ref_log_probs = b.ref_lib,
                          .advantages = per_token_adv ? b.adv_tok : b.adv,
                          .mask = b.mask,
                          .entropy = entropy,
                          .sampler_log_probs = with_sampler ? b.sampler_lib : torch::Tensor(),
                          .truncated = b.truncated};
  return loss(inputs, loss.local_normaliser(inputs)).loss;
}

}  // namespace parity
