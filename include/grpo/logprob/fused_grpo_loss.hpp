// SPDX-License-Identifier: Apache-2.0
// FusedGrpoLoss: GrpoLoss (loss/grpo_loss.hpp) for the common configurations, computed in one pass over the tokens
// with a hand-written gradient, instead of ~30 eager tensor operations and a dozen host synchronisations.
//
// Same inputs (LossInputs), same normaliser, same LossOutput (loss and the metrics GrpoLoss reports); values and
// gradients agree with GrpoLoss to rounding (tests/logprob/fused_grpo_loss_test.cpp). Per valid token t of row i:
//   ppo_clip:  w = exp(log w bounded by policy.effective_log_ratio_bounds()), log w = lp − lp_old (token) or
//              Σ_t m·(lp − lp_old)/|o_i| (sequence, GSPO);
//              L = max(−A·w, −A·clip(w, 1 − ε_low, 1 + ε_high))
//   cispo:     L = −sg(min(w, ε_high))·A·lp (TRL)
//   KL:        k1 / abs / k2 / k3 / low_var_kl of lp − lp_ref (kl/kl_penalty.hpp), added as β·KL
//   loss     = Σ coef_t·(L_t + β·KL_t),  coef_t = m_t/N (token sums) or m_t/(|o_i|·N) (sequence means)
// and ∂loss/∂lp_t is formed in the same loop (for GSPO a second sweep over each row spreads the sequence weight's
// gradient over its tokens). Hidden states → loss with bounded memory: either linear_token_log_probs (policy, with
// grad; reference, no grad) followed by this loss, or the hidden-state overload below, which also skips the
// recomputation of the logits in backward.
//
// Supported: every loss_type whose surrogate is ppo_clip or cispo (grpo, bnpo, dr_grpo, dapo, cispo, luspo and
// verl's aggregation modes), importance level token or sequence (GSPO), any KL estimator without clamp or
// straight-through, mask_truncated_completions, entropy as a metric. Anything else (entropy bonus or mask, δ, dual
// clip, sampler correction, off-policy mask, importance-weighted KL, sapo/vespo/gmpo/...) is rejected at
// construction with a ConfigError naming the option: use GrpoLoss for those.
//
// Devices (kernel_path.hpp): the loop above is the CPU kernel, for CPU inputs (every input must then be on the
// CPU). On any other device, or under ForceKernelPath(KernelPath::generic), the generic path computes the same loss,
// metrics and gradient with GrpoLoss's composition of LibTorch operations (GrpoLossOptions::implementation =
// generic); the hidden-state overload's generic path is linear_token_log_probs (generic path) followed by it, so
// there the logits are recomputed in backward. The path is resolved for inputs.log_probs (hidden for the
// hidden-state overload).
#pragma once

#include <grpo/logprob/linear_log_probs.hpp>
#include <grpo/loss/grpo_loss.hpp>

#include <string>

namespace grpo {

class FusedGrpoLoss {
 public:
  /// Validates options (GrpoLossOptions::validate) and throws ConfigError if they need GrpoLoss.
  explicit FusedGrpoLoss(GrpoLossOptions options);

  /// "" when FusedGrpoLoss supports options, else the reason (the first unsupported option and its value).
  static std::string unsupported_reason(const GrpoLossOptions& options);

  const GrpoLossOptions& options() const { return options_; }

  /// As GrpoLoss::local_normaliser.
  Normaliser local_normaliser(const LossInputs& inputs) const;

  /// Loss (0-dim, float32, or float64 for float64 log_probs; differentiable with respect to inputs.log_probs) and
  /// metrics, as GrpoLoss::operator(). Throws grpo::Error naming the input and its shape when inputs do not fit.
  LossOutput operator()(const LossInputs& inputs, const Normaliser& normaliser) const;

  /// Hidden states → loss in one chunked pass with the gradients of hidden and weight formed during the forward
  /// (Liger's fused-linear GRPO design): per chunk of whole sequences, logits = h·Wᵀ into a reused buffer, the
  /// fused row kernel gives log-probs, the loss loop gives ∂loss/∂lp, the buffer is overwritten in place with
  /// ∂loss/∂logits, and grad_hidden = dZ·W, grad_weight += dZᵀ·h. 6·N·H·V GEMM FLOPs (linear_token_log_probs followed
  /// by operator() needs 8: it recomputes the logits in backward); extra memory one [chunk, V] buffer plus the two
  /// gradients, held until backward. hidden [B, T, H], weight [V, H] (same floating dtype), ids [B, T] int64;
  /// inputs as operator() with inputs.log_probs undefined (they are computed here). The loss is differentiable with
  /// respect to hidden and weight (backward only scales the stored gradients, so call backward once).
  LossOutput operator()(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& ids,
                        const LossInputs& inputs, const Normaliser& normaliser,
                        const LinearLogProbOptions& linear = {}) const;

 private:
  GrpoLossOptions options_;
};

}  // namespace grpo
