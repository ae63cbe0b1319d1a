// SPDX-License-Identifier: Apache-2.0
// Held-out evaluation from k samples per problem: mean accuracy, unbiased pass@k and majority-vote maj@k.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace grpo::train {

/// Unbiased pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"): from n samples of which
/// c are correct, the probability that at least one of k samples drawn without replacement is correct,
/// 1 − C(n−c, k) / C(n, k), computed as the product 1 − Π_{i=n−c+1}^{n} (1 − k/i) (no large binomials).
/// Throws ConfigError unless 0 ≤ c ≤ n and 1 ≤ k ≤ n.
double pass_at_k(std::int64_t n, std::int64_t c, std::int64_t k);

/// One sample of an evaluation: its extracted answer (nullopt = none) and whether it was judged correct.
struct EvalSample {
  std::optional<std::string> answer;
  bool correct = false;
};

/// maj@k of one problem from its samples: 1 when the answer given most often is correct, else 0. Samples without an
/// answer do not vote; ties go to the answer that reached the top count first; 0 when no sample has an answer.
/// Answers are compared as strings, so pass them normalised (e.g. math::normalize_latex).
double majority_vote_correct(std::span<const EvalSample> samples);

/// Averages over problems of n samples each.
struct EvalSummary {
  std::int64_t problems = 0;
  std::int64_t samples_per_problem = 0;  ///< n
  std::int64_t k = 0;                    ///< the k of pass@k
  double mean_accuracy = 0.0;            ///< mean over all samples of `correct` (= mean pass@1 = mean c / n)
  double pass_at_k = 0.0;                ///< mean over problems of pass_at_k(n, c, k)
  double maj_at_n = 0.0;                 ///< mean over problems of majority_vote_correct of all n samples
};

/// Summary of `samples`, problem-major: samples[p·n + j] is sample j of problem p. Throws ConfigError unless
/// 1 ≤ k ≤ n and the size is a multiple of n.
EvalSummary summarize_evaluation(std::span<const EvalSample> samples, std::int64_t n, std::int64_t k);

}  // namespace grpo::train
