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
#include <utility>
#include <vector>

int main(int argc, char** argv) try {
  grpo::use_passive_omp_wait_policy(argv);  // unless the environment sets OMP_WAIT_POLICY (omp_wait_policy.hpp)
  const std::vector<std::string> args(argv + 1, argv + argc);
  grpo::train::RunSettings settings;
  if (!grpo::train::parse_run_settings(settings, args, "r1_zero [options]")) return 0;  // --help was printed
  const auto run = grpo::train::build_run(settings);
  grpo::train::GrpoTrainer& trainer = *run->trainer;
  const bool main_rank = run->group.is_main();

  std::vector<std::pair<std::int64_t, double>> curve;  // held-out accuracy by step
  if (run->first_step == 1 && main_rank) curve.emplace_back(0, trainer.evaluate(0).all.mean_accuracy);
  const std::int64_t last = settings.trainer.steps;
  for (std::int64_t step = run->first_step; step <= last; ++step) {
    const auto started = std::chrono::steady_clock::now();
    trainer.begin_step(step);                                // the context stage and the learning rate
    const grpo::train::StepBatch batch = trainer.collect_groups(step);  // generate, score, select, log-prob passes
    const grpo::AdvantageOutput advantages = trainer.advantages(batch);
    const grpo::train::UpdateResult update = trainer.policy_update(batch, advantages);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    trainer.finish_step(batch, advantages, update, seconds);  // metrics, controllers, callbacks (the logs)
    if (main_rank && batch.difficulty_masked_groups() > 0) {
      fmt::print("step {}: the difficulty mask kept {} of {} groups out of the loss\n", step,
                 batch.difficulty_masked_groups(), batch.problems.size());
    }
    // Evaluate on rank 0 (the others wait at the next collective); every rank takes part in a checkpoint.
    if (main_rank && ((settings.eval_every > 0 && step % settings.eval_every == 0) || step == last)) {
      curve.emplace_back(step, trainer.evaluate(step).all.mean_accuracy);
    }
    if ((settings.save_every > 0 && step % settings.save_every == 0) || step == last) {
      trainer.save(*run->checkpoints, step);
    }
  }
  if (main_rank && run->model->lora_options()) {  // the adapter alone, as peft saves it
    grpo::models::save_lora_adapter(run->model, settings.output_dir / "adapter", settings.model_dir.string());
  }
  if (main_rank) {
    fmt::print("held-out accuracy by step:");
    for (const auto& [step, accuracy] : curve) fmt::print("  {}: {:.3f}", step, accuracy);
    fmt::print("\n");
  }
  return 0;
} catch (const grpo::Error& e) {
  fmt::print(stderr, "r1_zero: {}\n", e.what());
  return 1;
}
