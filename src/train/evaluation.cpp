// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/evaluation.hpp>

#include <map>

namespace grpo::train {

double pass_at_k(std::int64_t n, std::int64_t c, std::int64_t k) {
  GRPO_CHECK_CONFIG(n >= 1 && c >= 0 && c <= n && k >= 1 && k <= n,
                    "pass_at_k: need 0 <= c <= n and 1 <= k <= n, got n = {}, c = {}, k = {}", n, c, k);
  if (n - c < k) return 1.0;  // every draw of k includes a correct sample
  double all_wrong = 1.0;
  for (std::int64_t i = n - c + 1; i <= n; ++i) all_wrong *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - all_wrong;
}

double majority_vote_correct(std::span<const EvalSample> samples) {
  struct Tally {
    std::size_t votes = 0;
    bool correct = false;  // of the answer's first sample
  };
  std::map<std::string, Tally, std::less<>> tallies;
  const Tally* leader = nullptr;
  for (const EvalSample& sample : samples) {
    if (!sample.answer) continue;
    auto [it, inserted] = tallies.try_emplace(*sample.answer, Tally{0, sample.correct});
    ++it->second.votes;
    if (leader == nullptr || it->second.votes > leader->votes) leader = &it->second;  // a tie keeps the earlier one
  }
  return leader != nullptr && leader->correct ? 1.0 : 0.0;
}

EvalSummary summarize_evaluation(std::span<const EvalSample> samples, std::int64_t n, std::int64_t k) {
  GRPO_CHECK_CONFIG(n >= 1 && k >= 1 && k <= n, "summarize_evaluation: need 1 <= k <= n, got n = {}, k = {}", n, k);
  GRPO_CHECK_CONFIG(samples.size() % static_cast<std::size_t>(n) == 0,
                    "summarize_evaluation: {} samples is not a multiple of n = {}", samples.size(), n);
  EvalSummary summary;
  summary.samples_per_problem = n;
  summary.k = k;
  summary.problems = static_cast<std::int64_t>(samples.size()) / n;
  if (summary.problems == 0) return summary;
  for (std::int64_t p = 0; p < summary.problems; ++p) {
    const auto problem = samples.subspan(static_cast<std::size_t>(p * n), static_cast<std::size_t>(n));
    std::int64_t c = 0;
    for (const EvalSample& s : problem) c += s.correct ? 1 : 0;
    summary.mean_accuracy += static_cast<double>(c) / static_cast<double>(n);
    summary.pass_at_k += pass_at_k(n, c, k);
    summary.maj_at_n += majority_vote_correct(problem);
  }
  const auto problems = static_cast<double>(summary.problems);
  summary.mean_accuracy /= problems;
  summary.pass_at_k /= problems;
  summary.maj_at_n /= problems;
  return summary;
}

}  // namespace grpo::train
