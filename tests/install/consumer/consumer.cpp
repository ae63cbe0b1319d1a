// SPDX-License-Identifier: Apache-2.0
// A downstream program: includes the umbrella header, computes per-token log-probs and checks one value by hand.
#include <grpo/grpo.hpp>

#include <cmath>
#include <cstdio>

int main() {
  // logits (0, ln 3) → softmax (1/4, 3/4); log p(token 1) = ln 0.75.
  auto logits = torch::tensor({0.0, std::log(3.0)}, torch::kFloat64).view({1, 1, 2});
  auto ids = torch::ones({1, 1}, torch::kInt64);
  const double lp = grpo::token_log_probs(logits, ids).log_probs.item<double>();
  if (std::abs(lp - std::log(0.75)) > 1e-12) {
    std::printf("wrong log-prob %.17g\n", lp);
    return 1;
  }
  std::printf("consumer ok: log p = %.6f\n", lp);
  return 0;
}
