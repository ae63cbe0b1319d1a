// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <torch/torch.h>
namespace grpo {
/// Eager reference: log_softmax(logits / temperature) gathered at ids. logits [B, T, V], ids [B, T] int64 → [B, T].
torch::Tensor token_log_probs_reference(const torch::Tensor& logits, const torch::Tensor& ids, double temperature = 1.0);
}  // namespace grpo
