// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer::evaluate: the held-out problems sampled with the evaluation options (one generation request) and
// graded by each domain's judge, the scorer's own correctness rule; the majority vote counts the answers that judge
// grades (RewardFunction::graded_answer). With eval_greedy, a second request decodes each problem greedily once.
#include <grpo/train/grpo_trainer.hpp>

#include <grpo/rewards/executor.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace grpo::train {
namespace {

using rewards::Completion;

}  // namespace

Scalars EvaluationReport::scalars() const {
  Scalars out{{"eval/mean_accuracy", all.mean_accuracy},
              {fmt::format("eval/pass@{}", all.k), all.pass_at_k},
              {fmt::format("eval/maj@{}", all.samples_per_problem), all.maj_at_n}};
  if (per_domain_rewards) {
    for (std::size_t d = 0; d < domain_names.size(); ++d) {
      out.emplace_back(fmt::format("eval/{}/mean_accuracy", domain_names[d]), per_domain[d].mean_accuracy);
      out.emplace_back(fmt::format("eval/{}/pass@{}", domain_names[d], per_domain[d].k), per_domain[d].pass_at_k);
    }
  }
  if (greedy) {
    out.emplace_back("eval/greedy_accuracy", greedy->mean_accuracy);
    if (per_domain_rewards) {
      for (std::size_t d = 0; d < domain_names.size(); ++d) {
        out.emplace_back(fmt::format("eval/{}/greedy_accuracy", domain_names[d]), greedy_per_domain[d].mean_accuracy);
      }
    }
  }
  return out;
}

EvaluationReport GrpoTrainer::evaluate(std::int64_t step, std::int64_t max_new_tokens) {
  torch::NoGradGuard no_grad;
  // A worker thread shares the scorer and the prompt source: it waits while the held-out set is graded. A rollout
  // rank has its own and goes on sampling.
  std::unique_lock<std::mutex> worker_waits;
  if (pipeline_ && pipeline_->shares_trainer_parts()) worker_waits = pipeline_->quiesce();
  const std::vector<std::string> names = prompts_.domain_names();
  std::vector<CorrectnessJudge> judges;
  for (std::size_t d = 0; d < names.size(); ++d) judges.push_back(scorer_.judge(d));
  std::vector<Problem> problems = prompts_.held_out();
  if (options_.eval_problems > 0 && static_cast<std::int64_t>(problems.size()) > options_.eval_problems) {
    problems.resize(static_cast<std::size_t>(options_.eval_problems));
  }
  SamplerOptions sampling =
      sampling_options(max_new_tokens > 0 ? max_new_tokens : context_.current().max_new_tokens,
                       options_.seed + 7919 * static_cast<std::uint64_t>(step));
  sampling.temperature = options_.eval_temperature.value_or(options_.sampling.temperature);
  sampling.top_k = options_.eval_top_k;
  sampling.top_p = options_.eval_top_p;
  sampling.min_p = options_.eval_min_p;
  const rewards::RewardExecutor executor{rewards::RewardExecutorOptions{}};
  // k samples of every problem, graded: problem-major over all problems, and per domain.
  const auto sample_and_grade = [&](std::int64_t k, const SamplerOptions& with) {
    std::pair<std::vector<EvalSample>, std::vector<std::vector<EvalSample>>> out;
    auto& [samples, by_domain] = out;
    by_domain.resize(names.size());
    // Problems are generated (at most 256 rows at a time, one random stream) and graded in chunks of that size.
    constexpr std::int64_t kEvaluationRows = 256;
    const std::int64_t chunk = std::max<std::int64_t>(1, kEvaluationRows / k);
    const Rollout all = problems.empty() ? Rollout{}
                                         : generator_->generate({.problems = problems, .group_size = k,
                                                                 .sampling = with, .prompt_keys = {}, .max_rows = kEvaluationRows});
    for (std::size_t start = 0; start < problems.size(); start += static_cast<std::size_t>(chunk)) {
      const std::size_t count = std::min(problems.size() - start, static_cast<std::size_t>(chunk));
      const std::span<const Problem> part = std::span<const Problem>(problems).subspan(start, count);
      const auto batch = completions_of(
          all.rows(static_cast<std::int64_t>(start) * k, static_cast<std::int64_t>(count) * k), part, k);
      // Each domain's completions by its own judge, one call per domain.
      std::vector<std::optional<float>> values(batch.size());
      for (std::size_t d = 0; d < judges.size(); ++d) {
        std::vector<Completion> mine;
        std::vector<std::size_t> where;
        for (std::size_t b = 0; b < batch.size(); ++b) {
          if (part[batch[b].group].domain != d) continue;
          mine.push_back(batch[b]);
          where.push_back(b);
        }
        if (mine.empty()) continue;
        const auto scores = executor.score(judges[d].reward, mine);
        for (std::size_t i = 0; i < where.size(); ++i) values[where[i]] = scores.values[i];
      }
      for (std::size_t b = 0; b < batch.size(); ++b) {
        const std::size_t d = part[batch[b].group].domain;
        const bool correct = values[b].has_value() && *values[b] >= judges[d].threshold;
        const EvalSample sample{judges[d].reward->graded_answer(batch[b]), correct};
        samples.push_back(sample);
        by_domain[d].push_back(sample);
      }
    }
    return out;
  };
  const std::int64_t k = options_.eval_samples;
  const auto [samples, by_domain] = sample_and_grade(k, sampling);
  EvaluationReport out;
  out.step = step;
  out.all = summarize_evaluation(samples, k, k);
  out.domain_names = names;
  out.per_domain_rewards = scorer_.per_domain();
  for (const auto& domain_samples : by_domain) out.per_domain.push_back(summarize_evaluation(domain_samples, k, k));
  if (options_.eval_greedy) {
    SamplerOptions greedy = sampling;
    greedy.temperature = 0.0;
    const auto [greedy_samples, greedy_by_domain] = sample_and_grade(1, greedy);
    out.greedy = summarize_evaluation(greedy_samples, 1, 1);
    for (const auto& domain_samples : greedy_by_domain) {
      out.greedy_per_domain.push_back(summarize_evaluation(domain_samples, 1, 1));
    }
  }
  for (const auto& callback : callbacks_) callback->on_evaluation(*this, out);
  return out;
}

}  // namespace grpo::train
