// SPDX-License-Identifier: Apache-2.0
// R1-Zero with GRPO, as a user's own loop over the library's parts: sample G completions per prompt, score them with
// rule-based rewards, turn the rewards into group-relative advantages and take clipped policy-gradient steps.
//
//   r1_zero                                  the built-in tiny task (train/tiny_task.hpp; learns in minutes on 2 cores)
//   r1_zero --model DIR --data FILE.jsonl    any Qwen2/Qwen3/Llama Hugging Face checkpoint on a real data set
//   r1_zero --config run.yaml --steps 50     settings from a YAML/JSON file (the command line wins)
//   r1_zero --help                           every setting, from the library's option table (train/run_settings.hpp)
//
// The settings, the model, the prompts, the scorer and the trainer come from the library (the same parts `grpo train`
// runs); what this file shows is the loop a user owns, at the grain of the trainer's phases: a step is
// begin_step → collect_groups → advantages → policy_update → finish_step, and between them the caller may look at or
// change what flows (here: a line when a step drops groups, and the held-out accuracy curve). Every run writes the
// settings in effect to <output-dir>/config.yaml; that file given to --config runs the same run again.
#include <grpo/grpo.hpp>

#include <fmt/format.h>

#include <chrono>
#include <string>
#include <vector>

int main(int argc, char** argv) try {
  grpo::use_passive_omp_wait_policy(argv);  // unless the environment sets OMP_WAIT_POLICY (omp_wait_policy.hpp)
  const std::vector<std::string> args(argv + 1, argv + argc);
  grpo::train::RunSettings settings;
  if (!grpo::train::parse_run_settings(settings, args, "r1_zero [options]")) return 0;  // --help was printed
  const auto run = grpo::train::build_run(settings);
  grpo::train::GrpoTrainer& trainer = *run->trainer;
  if (run->serves_rollouts) {  // --rollout-ranks: this process samples and scores the batches of its trainer rank
    trainer.serve_rollouts();
    return 0;
  }

  grpo::train::AccuracyCurve curve = grpo::train::start_accuracy_curve(*run);  // step 0 on a fresh run
  for (std::int64_t step = run->first_step; step <= settings.trainer.steps; ++step) {
    const auto started = std::chrono::steady_clock::now();
    trainer.begin_step(step);                                // the context stage and the learning rate
    const grpo::train::StepBatch batch = trainer.collect_groups(step);  // generate, score, select, log-prob passes
    const grpo::AdvantageOutput advantages = trainer.advantages(batch);
    const grpo::train::UpdateResult update = trainer.policy_update(batch, advantages);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    trainer.finish_step(batch, advantages, update, seconds);  // metrics, controllers, callbacks (the logs)
    if (run->group.is_main() && batch.difficulty_masked_groups() > 0) {
      fmt::print("step {}: the difficulty mask kept {} of {} groups out of the loss\n", step,
                 batch.difficulty_masked_groups(), batch.problems.size());
    }
    grpo::train::evaluate_and_save(*run, settings, step, curve);  // every eval_every / save_every, and at the end
  }
  grpo::train::finish_run(*run, settings, curve);  // a LoRA run's adapter, and the curve printed
  return 0;
} catch (const grpo::Error& e) {
  fmt::print(stderr, "r1_zero: {}\n", e.what());
  return 1;
}
