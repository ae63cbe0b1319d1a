// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/trainer_callbacks.hpp>

#include <grpo/train/progress.hpp>

#include <fmt/format.h>

#include <cstdio>

namespace grpo::train {

MetricsLog::MetricsLog(const std::filesystem::path& jsonl, const std::filesystem::path& tensorboard_dir, OpenMode mode,
                       std::int64_t first_step)
    : metrics_(jsonl, mode) {
  // A fresh run hides whatever an earlier run left in the directory, as it truncates the JSON-lines file.
  if (!tensorboard_dir.empty()) tensorboard_.emplace(tensorboard_dir, mode == OpenMode::append ? first_step : 0);
}

void MetricsLog::write(std::int64_t step, const Scalars& scalars) {
  metrics_.write(step, scalars);
  if (tensorboard_) tensorboard_->write(step, scalars);
}

void MetricsLog::on_step_end(const GrpoTrainer& /*trainer*/, const StepReport& report) {
  write(report.step, report.scalars);
}

void MetricsLog::on_evaluation(const GrpoTrainer& /*trainer*/, const EvaluationReport& report) {
  write(report.step, report.scalars());
}

CompletionLog::CompletionLog(const std::filesystem::path& path, std::int64_t per_step, OpenMode mode)
    : table_(path, mode), per_step_(per_step) {
  GRPO_CHECK_CONFIG(per_step >= 0, "log_completions must be >= 0, got {}", per_step);
}

void CompletionLog::on_step_end(const GrpoTrainer& trainer, const StepReport& report) {
  const StepBatch& batch = *report.batch;
  const auto names = trainer.prompts().domain_names();
  std::vector<CompletionRecord> records;
  for (std::size_t b = 0; b < batch.completions.size() && static_cast<std::int64_t>(b) < per_step_; ++b) {
    const auto& completion = batch.completions[b];
    // A token-level estimator's advantages are [rows, T]: its first token's is the whole completion's return less
    // the baseline.
    const torch::Tensor advantage = report.advantages->advantages[static_cast<std::int64_t>(b)];
    records.push_back({completion.prompt, completion.text, batch.reward_values[b],
                       advantage.dim() == 0 ? advantage.item<double>()
                       : advantage.numel() > 0 ? advantage[0].item<double>()
                                               : 0.0,
                       trainer.scorer().per_domain() ? names[batch.problems[completion.group].domain] : std::string()});
  }
  table_.write(report.step, records);
}

ProgressLog::ProgressLog(std::int64_t every, std::int64_t first_step, std::int64_t total_steps)
    : every_(every), first_step_(first_step), total_steps_(total_steps) {
  GRPO_CHECK_CONFIG(every >= 1, "log_every must be >= 1, got {}", every);
}

void ProgressLog::on_step_end(const GrpoTrainer& trainer, const StepReport& report) {
  const auto now = std::chrono::steady_clock::now();
  if (!start_) start_ = now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(report.seconds));
  const std::int64_t step = report.step;
  if (step % every_ != 0 && step != first_step_ && step != total_steps_) return;
  const double elapsed = std::chrono::duration<double>(now - *start_).count();
  const auto& logged = report.by_name;
  const auto names = trainer.prompts().domain_names();
  const bool per_domain = trainer.scorer().per_domain();
  Scalars shown{{"reward", logged.at("reward")}};
  if (per_domain) {
    for (const std::string& name : names) shown.emplace_back(name + "_acc", logged.at("domains/" + name + "/accuracy"));
  } else {
    const std::string first = trainer.scorer().headline_reward();
    shown.emplace_back(first, logged.at("rewards/" + first + "/mean"));
  }
  shown.insert(shown.end(), {{"zero_std", logged.at("frac_reward_zero_std")},
                             {"entropy", logged.count("entropy") ? logged.at("entropy") : 0.0},
                             {"len", logged.at("completions/mean_length")}});
  if (logged.count("dynamic_sampling/rounds")) shown.emplace_back("rounds", logged.at("dynamic_sampling/rounds"));
  shown.insert(shown.end(), {{"gen_s", logged.at("timing_s/gen")}, {"update_s", logged.at("timing_s/update_actor")},
                             {"rss_gb", logged.at("perf/peak_rss_gb")}});
  if (trainer.kl_controller().options().type == KlControl::adaptive) shown.emplace_back("beta", logged.at("kl_coef"));
  fmt::print("{}{}\n", format_progress_line(step - first_step_ + 1, total_steps_ - first_step_ + 1, elapsed, shown),
             report.trained ? "" : " | step skipped: too few groups with reward spread");
  if (per_domain) {  // each domain's line: which one learns, which one stalls
    for (const std::string& name : names) {
      const auto metric = [&](const std::string& key) { return logged.at("domains/" + name + "/" + key); };
      fmt::print("{:>14}: reward {:.4g} ± {:.4g} | accuracy {:.4g} | zero_std {:.4g} | len {:.4g} | {} completions\n",
                 name, metric("reward/mean"), metric("reward/std"), metric("accuracy"), metric("frac_reward_zero_std"),
                 metric("completion_length"), metric("completions"));
    }
  }
  std::fflush(stdout);
}

void ProgressLog::on_evaluation(const GrpoTrainer& /*trainer*/, const EvaluationReport& e) {
  fmt::print("eval step {:4d}: held-out accuracy {:.3f}  pass@{} {:.3f}  maj@{} {:.3f}  ({} problems)\n", e.step,
             e.all.mean_accuracy, e.all.k, e.all.pass_at_k, e.all.samples_per_problem, e.all.maj_at_n, e.all.problems);
  if (e.greedy) fmt::print("eval step {:4d}: greedy accuracy {:.3f}\n", e.step, e.greedy->mean_accuracy);
  if (e.per_domain_rewards) {
    for (std::size_t d = 0; d < e.domain_names.size(); ++d) {
      const auto& de = e.per_domain[d];
      fmt::print("  {:>12}: held-out accuracy {:.3f}  pass@{} {:.3f}  ({} problems)\n", e.domain_names[d],
                 de.mean_accuracy, de.k, de.pass_at_k, de.problems);
    }
  }
  std::fflush(stdout);
}

void ProgressLog::on_stage_switch(const GrpoTrainer& trainer, const StageSwitch& change) {
  const auto& stage = trainer.context().stages()[change.to];
  fmt::print("context stage {} -> {} from step {} ({}): max_new_tokens {}{}{}{}\n", change.from, change.to, change.step,
             change.reason, stage.max_new_tokens,
             stage.group_size ? fmt::format(", group size {}", *stage.group_size) : "",
             stage.learning_rate ? fmt::format(", lr {}", *stage.learning_rate) : "",
             stage.mask_truncated ? ", truncated completions masked" : "");
  std::fflush(stdout);
}

}  // namespace grpo::train
