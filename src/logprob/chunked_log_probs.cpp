// SPDX-License-Identifier: Apache-2.0
#include <grpo/logprob/token_log_probs.hpp>
namespace grpo {
torch::Tensor token_log_probs_reference(const torch::Tensor& logits, const torch::Tensor& ids, double temperature) {
  auto lsm = torch::log_softmax(logits.to(torch::kFloat32) / temperature, -1);
  return lsm.gather(-1, ids.unsqueeze(-1)).squeeze(-1);
}
}  // namespace grpo
