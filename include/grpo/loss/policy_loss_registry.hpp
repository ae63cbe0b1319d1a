// SPDX-License-Identifier: Apache-2.0
// Surrogates added without editing the library: register a function under a name, then select it by that name
// wherever a policy loss is named (GrpoLossOptions::policy_loss_name, select_policy_loss, r1_zero's --policy-loss).
// GrpoLoss calls it in place of the built-in policy_loss(), with the same inputs, and does everything else as for a
// built-in surrogate (masks, importance correction, KL term, aggregation with the normaliser, entropy bonus, metrics).
//
//   grpo::PolicyLossRegistry::global().add("reinforce", [](const auto& lp, const auto&, const auto& adv,
//                                                          const auto& mask, const grpo::PolicyLossOptions&) {
//     grpo::PolicyLossOutput out;
//     out.per_token_loss = -(adv.dim() == 1 ? adv.unsqueeze(1) : adv) * lp * mask;   // −A·log π
//     return out;
//   });
//   auto options = grpo::recipes::grpo();
//   grpo::select_policy_loss(options, "reinforce");
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>
#include <grpo/core/named_registry.hpp>
#include <grpo/loss/policy_loss.hpp>

#include <torch/torch.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo {

/// A surrogate: called with log_probs [B, T] (compute dtype, with grad, 0 at masked positions), old_log_probs [B, T]
/// (detached, 0 at masked positions), advantages [B] or [B, T] (detached), mask [B, T] bool (true = valid token) and
/// the loss's PolicyLossOptions (ε and the other fields are there for it to read). It returns per_token_loss [B, T]
/// (0 at masked positions, differentiable with respect to log_probs); any statistic it leaves undefined is filled in:
/// log_ratio = (log_probs − old_log_probs) at valid positions, every clip flag false.
using PolicyLossFunction =
    std::function<PolicyLossOutput(const torch::Tensor& log_probs, const torch::Tensor& old_log_probs,
                                   const torch::Tensor& advantages, const torch::Tensor& mask,
                                   const PolicyLossOptions& options)>;

/// Named surrogates beside the built-in PolicyLossType ones (NamedRegistry: add, contains, get, names). Thread-safe.
class PolicyLossRegistry : public NamedRegistry<PolicyLossFunction> {
 public:
  /// The process-wide registry GrpoLoss looks names up in.
  static PolicyLossRegistry& global() {
    static PolicyLossRegistry registry;
    return registry;
  }

 private:
  PolicyLossRegistry()
      : NamedRegistry("policy loss", detail::joined_names(detail::kPolicyLossTypeNames), [](std::string_view name) {
          return detail::find_enum(name, detail::kPolicyLossTypeNames).has_value();
        }) {}
};

/// Fills the statistics a registered surrogate left undefined (see PolicyLossFunction).
inline void complete_policy_loss_output(PolicyLossOutput& out, const torch::Tensor& log_probs,
                                        const torch::Tensor& old_log_probs, const torch::Tensor& mask) {
  GRPO_CHECK(out.per_token_loss.defined() && out.per_token_loss.sizes() == log_probs.sizes(),
             "registered policy loss: per_token_loss must be [B, T] = {}, got {}", shape_str(log_probs),
             out.per_token_loss.defined() ? shape_str(out.per_token_loss) : std::string("undefined"));
  if (!out.log_ratio.defined()) {
    out.log_ratio = detail::masked_where(mask, (log_probs - old_log_probs).detach());
  }
  const auto none = torch::zeros_like(mask);
  for (torch::Tensor* flag : {&out.clipped_low, &out.clipped_high, &out.pg_clipped, &out.dual_clipped, &out.cov_selected}) {
    if (!flag->defined()) *flag = none;
  }
}

}  // namespace grpo
