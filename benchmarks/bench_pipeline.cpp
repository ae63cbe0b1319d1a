// SPDX-License-Identifier: Apache-2.0
// Pipelined rollouts (GrpoTrainerOptions::max_staleness, rollout_pipeline.hpp) beside the synchronous trainer, on the
// tiny task of `r1_zero --task tiny` (its options, model and warm-up), same seed, in one run:
//   rule     the tiny task's accuracy reward (scoring takes microseconds: the worker overlaps sampling with training)
//   sandbox  the same answers graded by a Python program in the bubblewrap sandbox (grpo::sandbox), one run per
//            completion: the answer goes in as stdin, the program computes max(digits) and compares (reward time
//            is real: process start-up, namespaces, Python)
//   delay    the rule reward with an injected delay per completion (--delay-ms), the judge sleeping
// For each: the synchronous trainer, then max_staleness 1 (verl-pipe's one step off) with the decoupled correction
// (--rollout-is token, verl's threshold 2). It prints, per run, the held-out accuracy every --eval-every steps, the
// training seconds (steps only, evaluation left out) to the first evaluation at or above --target, the mean step time
// and its parts: the worker's side (timing_s/gen + timing_s/reward, sampled and scored) and the trainer's (the
// log-prob pass and the update), and their max, the step time a perfect overlap would give. Then the ratios sync /
// pipelined. Thread split: --threads for the trainer, --generation-threads for the worker (1 and 1 by default: the
// tiny model's tensors are too small for intra-op threads to pay).
//
// --hidden H and --layers L widen and deepen the policy (the tiny task's: hidden 64, intermediate 2H, 2 layers, 4
// heads), warmed up the same way: a policy whose update costs what it costs beside a sandbox at the scale people
// train, where the tiny one's 0.1 s update hides in any real reward.
//
//   build/benchmarks/bench_pipeline [--steps 160] [--target 0.9] [--eval-every 10] [--seed 1] [--only rule,sandbox,delay]
//                                   [--delay-ms 2] [--threads 1] [--generation-threads 1] [--prompts P] [--group G]
//                                   [--hidden 64] [--layers 2]
#include <grpo/rewards/accuracy_reward.hpp>
#include <grpo/rewards/reward_set.hpp>
#include <grpo/sandbox/sandbox.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/run.hpp>
#include <grpo/train/run_settings.hpp>
#include <grpo/train/tiny_task.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace grpo;
using Clock = std::chrono::steady_clock;

struct Args {
  std::int64_t steps = 160, eval_every = 10, threads = 1, generation_threads = 1, prompts = 0, group = 0;
  std::int64_t hidden = 0, layers = 0;  ///< 0: the tiny task's model
  std::uint64_t seed = 1;
  double target = 0.9, delay_ms = 2.0;
  std::vector<std::string> only = {"rule", "sandbox", "delay"};
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw ConfigError(fmt::format("{} needs a value", flag));
    const std::string value = argv[++i];
    if (flag == "--steps") a.steps = std::stoll(value);
    else if (flag == "--eval-every") a.eval_every = std::stoll(value);
    else if (flag == "--threads") a.threads = std::stoll(value);
    else if (flag == "--generation-threads") a.generation_threads = std::stoll(value);
    else if (flag == "--prompts") a.prompts = std::stoll(value);
    else if (flag == "--group") a.group = std::stoll(value);
    else if (flag == "--hidden") a.hidden = std::stoll(value);
    else if (flag == "--layers") a.layers = std::stoll(value);
    else if (flag == "--seed") a.seed = std::stoull(value);
    else if (flag == "--target") a.target = std::stod(value);
    else if (flag == "--delay-ms") a.delay_ms = std::stod(value);
    else if (flag == "--only") {
      a.only.clear();
      for (std::size_t start = 0; start <= value.size();) {
        const std::size_t comma = std::min(value.find(',', start), value.size());
        a.only.push_back(value.substr(start, comma - start));
        start = comma + 1;
      }
    } else {
      throw ConfigError(fmt::format("unknown flag {}", flag));
    }
  }
  return a;
}

/// The answer between <answer> and </answer>, trimmed ("" when there is none).
std::string answer_text(const std::string& text) {
  const auto open = text.rfind("<answer>");
  if (open == std::string::npos) return "";
  const auto start = open + 8;
  const auto close = text.find("</answer>", start);
  std::string out = text.substr(start, close == std::string::npos ? std::string::npos : close - start);
  out.erase(0, out.find_first_not_of(' '));
  out.erase(out.find_last_not_of(' ') + 1);
  return out;
}

/// Grades a tiny-task completion by a Python program in the sandbox: the prompt's digits in the program, the answer
/// on stdin (never pasted into code).
rewards::CorrectnessJudge sandbox_judge(std::shared_ptr<const sandbox::Sandbox> box) {
  return [box](const rewards::Completion& c, const rewards::ScoringContext&) {
    std::string digits;  // "max 3 1 4 1 5 =" -> "3,1,4,1,5"
    for (const char ch : c.prompt) {
      if (ch >= '0' && ch <= '9') digits += digits.empty() ? std::string(1, ch) : std::string(",") + ch;
    }
    sandbox::RunRequest request;
    request.argv = {"/usr/bin/python3", "-S", "/box/grade.py"};
    request.stdin_data = answer_text(c.text);
    request.files = {{.path = "/box/grade.py",
                      .contents = fmt::format("import sys\nd = [{}]\na = sys.stdin.read().strip()\n"
                                              "print('right' if a.isdigit() and int(a) == max(d) else 'wrong')\n",
                                              digits)}};
    const sandbox::RunResult result = box->run(request);
    return result.success() && result.stdout_text == "right\n" ? rewards::Correctness::correct
                                                                : rewards::Correctness::wrong;
  };
}

/// The math judge after a sleep of `delay_ms`.
rewards::CorrectnessJudge slow_judge(double delay_ms) {
  return [inner = rewards::math_correctness(), delay_ms](const rewards::Completion& c, const rewards::ScoringContext& context) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
    return inner(c, context);
  };
}

/// The tiny task's model, or one of its shape widened to --hidden and deepened to --layers (random weights from `seed`).
models::CausalLM bench_policy(const Args& a, std::uint64_t seed) {
  models::CausalLM tiny = train::tiny_task_model(seed);
  if (a.hidden == 0 && a.layers == 0) return tiny;
  models::ModelConfig config = tiny->config();
  if (a.hidden > 0) {
    config.hidden_size = a.hidden;
    config.intermediate_size = 2 * a.hidden;
  }
  if (a.layers > 0) config.num_hidden_layers = a.layers;
  torch::manual_seed(seed);
  return models::CausalLM(config);
}

struct Result {
  std::vector<std::pair<std::int64_t, double>> curve;  // (step, held-out accuracy)
  std::optional<double> seconds_to_target;
  std::optional<std::int64_t> step_at_target;
  double train_seconds = 0.0, worker_side = 0.0, trainer_side = 0.0, wait = 0.0;
  std::int64_t steps = 0;
};

double value(const train::StepReport& report, const std::string& name) {
  const auto it = report.by_name.find(name);
  return it == report.by_name.end() ? 0.0 : it->second;
}

Result run(const Args& a, const std::string& scenario, bool pipelined,
           const std::shared_ptr<const sandbox::Sandbox>& box) {
  std::vector<std::string> flags = {"--task", "tiny", "--steps", std::to_string(a.steps), "--seed",
                                    std::to_string(a.seed)};
  if (a.prompts > 0) flags.insert(flags.end(), {"--prompts", std::to_string(a.prompts)});
  if (a.group > 0) flags.insert(flags.end(), {"--group-size", std::to_string(a.group)});
  if (pipelined) {
    flags.insert(flags.end(), {"--max-staleness", "1", "--off-policy-correction", "decoupled", "--rollout-is",
                               "token", "--generation-threads", std::to_string(a.generation_threads)});
  }
  train::RunSettings s;
  train::parse_run_settings(s, flags, "bench_pipeline");
  at::set_num_threads(static_cast<int>(a.threads));
  train::TinyTask task(s.trainer.seed, s.held_out);
  models::CausalLM model = bench_policy(a, s.trainer.seed);
  train::warm_up_tiny_model(model, task, s.trainer.seed, train::kTinyTaskWarmUpSteps);
  std::unique_ptr<train::StepScorer> scorer;
  if (scenario == "rule") {
    scorer = std::make_unique<train::StepScorer>(train::make_scorer(s));
  } else {
    auto judge = scenario == "sandbox" ? sandbox_judge(box) : slow_judge(a.delay_ms);
    rewards::RewardSet set({{std::make_shared<const rewards::AccuracyReward>(rewards::AccuracyOptions{}, judge), 1.0}});
    scorer = std::make_unique<train::StepScorer>(std::move(set));
  }
  train::ProcessGroup group{train::ProcessGroupOptions{}};
  train::GrpoTrainer trainer(model, task, *scorer, group, s.trainer);
  Result out;
  out.curve.emplace_back(0, trainer.evaluate(0).all.mean_accuracy);
  for (std::int64_t step = 1; step <= a.steps; ++step) {
    const auto started = Clock::now();
    const train::StepReport report = trainer.step(step);
    out.train_seconds += std::chrono::duration<double>(Clock::now() - started).count();
    out.worker_side += value(report, "timing_s/gen") + value(report, "timing_s/reward");
    out.trainer_side += value(report, "timing_s/old_log_prob") + value(report, "timing_s/ref") +
                        value(report, "timing_s/update_actor");
    out.wait += value(report, "pipeline/trainer_wait_s");
    out.steps = step;
    if (step % a.eval_every == 0 || step == a.steps) {
      const double accuracy = trainer.evaluate(step).all.mean_accuracy;
      out.curve.emplace_back(step, accuracy);
      if (!out.seconds_to_target && accuracy >= a.target) {
        out.seconds_to_target = out.train_seconds;
        out.step_at_target = step;
      }
    }
  }
  return out;
}

void print(const std::string& label, const Result& r) {
  const double n = static_cast<double>(r.steps);
  fmt::print("  {:<10} to target: {:>8}  training {:7.2f} s  step {:6.3f} s = worker {:6.3f} (sample + score) | trainer "
             "{:6.3f} (log-probs + update) | max {:6.3f} | waited {:6.3f}\n",
             label,
             r.seconds_to_target ? fmt::format("{:.2f} s @{}", *r.seconds_to_target, *r.step_at_target) : "not reached",
             r.train_seconds, r.train_seconds / n, r.worker_side / n, r.trainer_side / n,
             std::max(r.worker_side, r.trainer_side) / n, r.wait / n);
  std::string curve;
  for (const auto& [step, accuracy] : r.curve) curve += fmt::format(" {}:{:.3f}", step, accuracy);
  fmt::print("  {:<10} held-out:{}\n", "", curve);
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  std::shared_ptr<const sandbox::Sandbox> box;
  std::string unavailable;
  try {
    box = std::make_shared<const sandbox::Sandbox>();
  } catch (const sandbox::SandboxError& e) {
    unavailable = e.what();
  }
  const auto config = bench_policy(a, a.seed)->config();
  fmt::print("bench_pipeline: tiny task, {} steps, seed {}, target {:.2f}; policy hidden {}, {} layers; threads: "
             "trainer {}, worker {}; {} cores\n",
             a.steps, a.seed, a.target, config.hidden_size, config.num_hidden_layers, a.threads, a.generation_threads,
             std::thread::hardware_concurrency());
  for (const std::string& scenario : a.only) {
    if (scenario == "sandbox" && !box) {
      fmt::print("{}: skipped, the sandbox cannot run here: {}\n", scenario, unavailable);
      continue;
    }
    fmt::print("{}{}:\n", scenario, scenario == "delay" ? fmt::format(" ({} ms per completion)", a.delay_ms) : "");
    const Result sync = run(a, scenario, false, box);
    print("sync", sync);
    const Result piped = run(a, scenario, true, box);
    print("s = 1", piped);
    fmt::print("  speed-up (sync / s = 1): training time (the mean step's) {:.2f}x", sync.train_seconds / piped.train_seconds);
    if (sync.seconds_to_target && piped.seconds_to_target) {
      fmt::print(", time to target {:.2f}x", *sync.seconds_to_target / *piped.seconds_to_target);
    }
    fmt::print("; s = 1's step against a perfect overlap: {:.2f}x of max(worker, trainer)\n",
               piped.train_seconds / std::max(piped.worker_side, piped.trainer_side));
  }
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "bench_pipeline: {}\n", e.what());
  return 1;
}
