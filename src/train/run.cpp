// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/run.hpp>

#include <grpo/agent/multi_turn_generator.hpp>
#include <grpo/agent/tiny_lookup_task.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/models/lora.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/rewards/registry.hpp>
#include <grpo/rewards/reward_model_reward.hpp>
#include <grpo/text/tokenizer.hpp>
#include <grpo/train/metrics_writer.hpp>
#include <grpo/train/reward_model_refresh.hpp>
#include <grpo/train/tiny_task.hpp>
#include <grpo/train/trainer_callbacks.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace grpo::train {
namespace {

namespace fs = std::filesystem;

/// The R1-Zero prompt (DeepSeek-R1, Table 1) as a system message, for data sets without their own.
constexpr const char* kR1ZeroSystemPrompt =
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.";

/// Supervised warm-up steps of the tiny lookup task's model (the protocol and reading a reply, on calls for the wrong
/// key: the tiny task's 150 steps, kTinyTaskWarmUpSteps, left it calling keys the prompt does not show and answering
/// digits the reply does not hold, and GRPO did not learn from there).
constexpr std::int64_t kTinyLookupWarmUpSteps = 600;

/// Fails (naming the flag) when the LoRA settings select no module of `model`: checked as soon as the model exists.
void check_lora_targets(const models::CausalLM& model, const RunSettings& s) {
  const auto lora = run_lora(s);
  if (!lora) return;
  try {
    models::lora_targets(model, *lora);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", s.lora_adapter.empty() ? "--lora-r/--lora-target-modules"
                                                                   : "--lora-adapter " + s.lora_adapter.string(),
                                  e.what()));
  }
}

/// The --rewards set (or --reward-config, or the config's entries).
rewards::RewardSet make_rewards(const RunSettings& s) {
  if (!s.reward_config.empty()) return rewards::RewardSet::from_config(io::read_file(s.reward_config));
  if (!s.rewards_json.empty()) {
    try {
      return rewards::RewardSet::from_config(s.rewards_json);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: 'rewards': {}", s.rewards_source, e.what()));
    }
  }
  const auto registry = rewards::RewardRegistry::with_builtins();
  std::vector<rewards::RewardSetEntry> entries;
  for (std::size_t i = 0; i < s.rewards.size(); ++i) {
    rewards::RewardSetEntry entry;
    entry.reward = registry.create(fmt::format(R"({{"name": "{}"}})", s.rewards[i]));
    entry.weight = s.reward_weights[i];
    entries.push_back(std::move(entry));
  }
  return rewards::RewardSet(std::move(entries));
}

DifficultyScheduleOptions difficulty_schedule(const RunSettings& s) {
  DifficultyScheduleOptions o;
  o.kind = parse_difficulty_schedule(s.curriculum_schedule);
  auto range = [](const std::vector<double>& v, const char* flag) {
    GRPO_CHECK_CONFIG(v.size() == 2, "{} needs MIN,MAX", flag);
    return DifficultyRange{v[0], v[1]};
  };
  if (o.kind == DifficultyScheduleKind::linear) {
    o.start = range(s.curriculum_start, "--curriculum-start");
    o.end = range(s.curriculum_end, "--curriculum-end");
    o.start_step = s.curriculum_start_step;
    o.end_step = s.curriculum_end_step;
  }
  for (const std::string& stage : s.curriculum_stages) {
    double step = 0, min = 0, max = 0;
    char tail = 0;
    GRPO_CHECK_CONFIG(std::sscanf(stage.c_str(), "%lf:%lf:%lf%c", &step, &min, &max, &tail) == 3,
                      "--curriculum-stages: '{}' should be STEP:MIN:MAX", stage);
    o.stages.push_back({static_cast<std::int64_t>(step), {min, max}});
  }
  return o;
}

/// The console line that says what is trained, where and how.
void print_model_line(const models::CausalLM& model, const RunSettings& s) {
  std::int64_t total = 0, trainable = 0;
  for (const auto& p : model->parameters()) (p.requires_grad() ? trainable : total) += p.numel();
  total += trainable;
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  const bool compensated = s.trainer.optimizer_precision == OptimizerPrecision::compensated;
  fmt::print("model: {} parameters ({} trained{}), {} on {}{}; {} threads, OMP_WAIT_POLICY={}\n", total, trainable,
             model->lora_options() ? fmt::format(": LoRA r={} on {} modules", model->lora_options()->rank,
                                                 models::lora_modules(model).size())
                                   : "",
             s.dtype == "fp32" ? "fp32"
             : compensated     ? s.dtype + " with compensated bf16 AdamW"
                               : s.dtype + " with fp32 master weights",
             model->lm_head_weight().device().str(), model->gradient_checkpointing() ? ", activation checkpointing" : "",
             at::get_num_threads(), wait_policy ? wait_policy : "(default)");
}

}  // namespace

torch::Device run_device(const RunSettings& s, const ProcessGroup& group) {
  if (s.device == "cpu") return torch::kCPU;
  if (s.device == "cuda") return {torch::kCUDA, static_cast<c10::DeviceIndex>(group.local_rank())};
  GRPO_CHECK_CONFIG(group.world_size() == 1, "--device {} with {} processes: use --device cuda (each rank runs on "
                    "cuda:LOCAL_RANK)", s.device, group.world_size());
  return torch::Device(s.device);
}

torch::ScalarType run_dtype(const RunSettings& s) {
  return s.dtype == "bf16" ? torch::kBFloat16 : s.dtype == "fp16" ? torch::kHalf : torch::kFloat32;
}

std::optional<models::LoraOptions> run_lora(const RunSettings& s) {
  if (!s.lora_adapter.empty()) return models::read_lora_config(s.lora_adapter / "adapter_config.json");
  if (s.lora_r == 0) return std::nullopt;
  models::LoraOptions lora;
  lora.rank = s.lora_r;
  lora.alpha = s.lora_alpha;
  lora.dropout = s.lora_dropout;
  if (!s.lora_target_modules.empty()) lora.target_modules = s.lora_target_modules;
  return lora;
}

void prepare_model(models::CausalLM& model, const RunSettings& s, const torch::Device& device) {
  model->to(device, run_dtype(s));
  check_lora_targets(model, s);
  if (!s.lora_adapter.empty()) {
    models::load_lora_adapter(model, s.lora_adapter);
  } else if (const auto lora = run_lora(s)) {
    models::add_lora(model, *lora);
  }
  std::int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  constexpr std::int64_t kCheckpointingFrom = 100'000'000;
  model->set_gradient_checkpointing(s.gradient_checkpointing == "on" ||
                                    (s.gradient_checkpointing == "auto" && parameters >= kCheckpointingFrom));
}

StepScorer make_scorer(const RunSettings& s) {
  if (s.domains.empty()) return StepScorer(make_rewards(s), s.overlap_scoring);
  const auto registry = rewards::RewardRegistry::with_builtins();
  std::vector<ScoringDomain> domains;
  for (const auto& d : s.domains) {
    if (d.rewards_json.empty()) {  // the run's rewards, whose errors name their own place
      domains.push_back(d.scoring_domain(make_rewards(s)));
      continue;
    }
    try {
      domains.push_back(d.scoring_domain(rewards::RewardSet::from_config(d.rewards_json, registry)));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: domains.{}.rewards: {}", d.rewards_source, d.name, e.what()));
    }
  }
  return StepScorer(std::move(domains), s.overlap_scoring);
}

std::unique_ptr<MixedPromptSource> make_data_source(const RunSettings& s, text::Tokenizer tokenizer,
                                                    std::vector<std::int64_t> eos_token_ids,
                                                    std::vector<std::string> tools) {
  MixedPromptSourceOptions o;
  o.tools = std::move(tools);
  if (!s.data_path.empty()) o.files.push_back(s.data_path);
  for (const auto& d : s.domains) o.domains.push_back(d.prompt_domain());
  o.dataset.format = s.data_format;
  o.dataset.on_bad_row = s.on_bad_row;
  o.dataset.prompt_field = s.prompt_field;
  o.dataset.answer_field = s.answer_field;
  o.dataset.system_prompt = kR1ZeroSystemPrompt;
  o.unknown_tag = s.unknown_tag;
  o.held_out = s.held_out;
  for (const std::string& file : s.validation_data) o.validation_files.emplace_back(file);
  o.seed = s.trainer.seed;
  o.curriculum = difficulty_schedule(s);
  o.steps = s.trainer.steps;
  if (s.curriculum_filter_window > 0) {
    o.filter = PassRateFilterOptions{.window = s.curriculum_filter_window,
                                     .retire_unsolved = s.curriculum_filter_retire != "solved",
                                     .retire_solved = s.curriculum_filter_retire != "unsolved",
                                     .retire_steps = s.curriculum_filter_retire_steps};
  }
  return std::make_unique<MixedPromptSource>(std::move(o), std::move(tokenizer), std::move(eos_token_ids));
}

std::unique_ptr<Run> build_run(RunSettings& s) {
  // Running a run's own config.yaml again into its own directory would overwrite the run it repeats.
  const fs::path own_config = s.output_dir / "config.yaml";
  GRPO_CHECK_CONFIG(s.resume || s.config_path.empty() || !fs::exists(own_config) ||
                        !fs::equivalent(s.config_path, own_config),
                    "--config {} is the config.yaml of --output-dir {}: this run would overwrite the run it repeats; "
                    "give another --output-dir (or --resume to continue it)",
                    s.config_path.string(), s.output_dir.string());
  const bool lookup = s.task == "tiny_lookup", tiny = s.task == "tiny" || lookup;
  // One process, or one rank of scripts/launch.sh -n N: each rank samples its share of the P prompts; gradients and
  // metrics are combined so a step equals one process's.
  std::unique_ptr<Run> run;
  std::optional<RolloutPeer> rollout_peer;
  if (s.rollout_ranks > 0) {  // --rollout-ranks: half the ranks train, half sample and score (rollout_ranks.hpp)
    RolloutRanks ranks = RolloutRanks::join(ProcessGroupOptions::from_env(), s.rollout_ranks);
    run = std::make_unique<Run>(std::move(*ranks.side));
    run->rollout_link = std::move(ranks.link);
    rollout_peer = ranks.peer;
    run->serves_rollouts = ranks.peer.serves;
  } else {
    run = std::make_unique<Run>(ProcessGroup::from_env());
  }
  // Threads: the tiny task's tensors are too small for intra-op threads to pay (measured: 2 threads take 2.5× as
  // long as 1 on 2 cores; use launch.sh -n 2 for both cores); a real model's matrix products want the cores.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int processes = run->rollout_link ? run->rollout_link->world_size() : run->group.world_size();
  at::set_num_threads(s.threads > 0 ? s.threads : tiny ? 1 : std::max(1, cores / processes));

  // Multi-turn tool rollouts: the environment, whose tools the prompts announce, and the turn format.
  agent::EnvironmentFactory environment;
  std::shared_ptr<const agent::TurnCodec> codec;
  if (!s.env.empty()) {
    auto environments = agent::EnvironmentRegistry::with_builtins();
    environments.add("lookup", [] { return std::make_unique<agent::TinyLookupEnvironment>(); });
    const std::vector<std::string> known = environments.names();
    GRPO_CHECK_CONFIG(std::find(known.begin(), known.end(), s.env) != known.end(),
                      "--env: unknown environment '{}' (known: {})", s.env, fmt::join(known, ", "));
    environment = environments.factory(s.env);
  }
  run->device = run_device(s, run->group);
  if (lookup) {
    auto task = std::make_unique<agent::TinyLookupTask>(s.trainer.seed, s.held_out);
    run->model = agent::tiny_lookup_model(s.trainer.seed);
    check_lora_targets(run->model, s);
    agent::warm_up_tiny_lookup_model(run->model, *task, s.trainer.seed, kTinyLookupWarmUpSteps);
    run->source = std::move(task);
    codec = std::make_shared<agent::TinyLookupCodec>();
  } else if (tiny) {
    auto task = std::make_unique<TinyTask>(s.trainer.seed, s.held_out);
    run->model = tiny_task_model(s.trainer.seed);
    check_lora_targets(run->model, s);  // before the warm-up's work
    warm_up_tiny_model(run->model, *task, s.trainer.seed, kTinyTaskWarmUpSteps);
    run->source = std::move(task);
  } else {
    run->model = models::from_pretrained(s.model_dir, run_dtype(s), run->device);
    auto tokenizer = text::Tokenizer::from_pretrained(s.model_dir);
    if (environment) codec = std::make_shared<agent::ChatTurnCodec>(tokenizer, tokenizer.chat_template());
    run->source = make_data_source(s, std::move(tokenizer), run->model->config().eos_token_ids,
                                   environment ? environment()->tool_schemas() : std::vector<std::string>{});
  }
  prepare_model(run->model, s, run->device);  // the tiny task warms up on the CPU
  // --rm-refresh-every: the reward models of the run's one reward set learn from its completions (the checks of the
  // combination are parse_run_settings').
  std::vector<std::shared_ptr<RewardModelRefresh>> refreshes;
  if (s.rm_refresh.every_steps > 0) {
    rewards::RewardSet set = make_rewards(s);
    for (const auto& entry : set.entries()) {
      if (auto rm = std::dynamic_pointer_cast<const rewards::RewardModelReward>(entry.reward)) {
        refreshes.push_back(std::make_shared<RewardModelRefresh>(std::move(rm), s.rm_refresh));
      }
    }
    GRPO_CHECK_CONFIG(!refreshes.empty(), "--rm-refresh-every {}: the run's rewards have no \"reward_model\" entry to "
                      "train (give one in --reward-config)", s.rm_refresh.every_steps);
    run->scorer = std::make_unique<StepScorer>(std::move(set), s.overlap_scoring);
  } else {
    run->scorer = std::make_unique<StepScorer>(make_scorer(s));
  }
  GrpoTrainerParts parts;
  if (environment) {
    parts.generator =
        std::make_shared<agent::MultiTurnGenerator<models::CausalLM>>(run->model, codec, environment, s.multi_turn);
  }
  parts.rollout_peer = rollout_peer;
  const bool gae = s.trainer.token_advantage.estimator == TokenAdvantageEstimator::gae && !run->serves_rollouts;
  GRPO_CHECK_CONFIG(s.trainer.token_advantage.estimator == TokenAdvantageEstimator::gae || s.critic_model.empty(), "--critic-model {}: a critic trains only with --advantage gae",
                    s.critic_model.string());
  if (gae && s.critic_model.empty()) {  // PPO's critic: the policy's weights with a new head, as verl's starts
    parts.critic = models::value_model_from_policy(run->model);
  } else if (gae) {
    try {
      parts.critic = models::value_model_from_pretrained(s.critic_model, run_dtype(s), run->device);
    } catch (const Error& e) {
      throw ConfigError(fmt::format("--critic-model {}: {} (leave --critic-model out to start the critic from the "
                                    "policy with a new head)",
                                    s.critic_model.string(), e.what()));
    }
    parts.critic->backbone()->set_gradient_checkpointing(run->model->gradient_checkpointing());
  }
  // The critic's weights are optimised as the policy's are (--optimizer-precision: fp32 masters or compensated bf16).
  s.trainer.critic.optimizer_precision = s.trainer.optimizer_precision;
  run->trainer = std::make_unique<GrpoTrainer>(run->model, *run->source, *run->scorer, run->group, s.trainer, parts);
  if (run->serves_rollouts) return run;  // its trainer rank resumes, logs and writes

  // Resume, then the sinks (appending, so a resumed run continues its files). Rank 0 logs, evaluates and writes.
  run->checkpoints = std::make_unique<CheckpointManager>(CheckpointOptions{
      .directory = s.output_dir / "checkpoints", .keep_last = static_cast<std::size_t>(s.keep_last)});
  run->first_step = (s.resume ? run->trainer->restore(*run->checkpoints) : 0) + 1;
  for (const auto& refresh : refreshes) {
    run->trainer->add_callback(refresh);
    if (run->first_step > 1) refresh->restore(run->checkpoints->latest()->path);
  }
  if (!run->group.is_main()) return run;
  if (run->first_step > 1) {
    fmt::print("resumed from {} (step {})\n", run->checkpoints->latest()->path.string(), run->first_step - 1);
  }
  if (!s.roll_config.empty()) {
    fmt::print("--roll-config {}: {} keys not used:\n", s.roll_config.string(), s.roll_unmapped.size());
    for (const std::string& line : s.roll_unmapped) fmt::print("  {}\n", line);
  }
  if (tiny && run->first_step == 1) {
    fmt::print("{}\n", lookup ? "tiny_lookup task: starting policy warmed up to call the tool and guess the answer"
                              : "tiny task: starting policy warmed up on wrong answers");
  }
  print_model_line(run->model, s);
  fs::create_directories(s.output_dir);
  write_run_config(own_config, s);
  const auto mode = s.resume ? OpenMode::append : OpenMode::truncate;
  if (s.resume) {  // steps after the checkpoint run again: their first records go
    for (const char* file : {"metrics.jsonl", "completions.jsonl"}) {
      drop_records_after(s.output_dir / file, run->first_step - 1);
    }
  }
  run->trainer->add_callback(std::make_shared<MetricsLog>(
      s.output_dir / "metrics.jsonl", s.tensorboard ? s.output_dir / "tensorboard" : fs::path(), mode,
      run->first_step));
  run->trainer->add_callback(
      std::make_shared<CompletionLog>(s.output_dir / "completions.jsonl", s.log_completions, mode));
  run->trainer->add_callback(std::make_shared<ProgressLog>(s.log_every, run->first_step, s.trainer.steps));
  return run;
}

AccuracyCurve start_accuracy_curve(Run& run) {
  AccuracyCurve curve;
  if (run.first_step == 1 && run.group.is_main()) curve.emplace_back(0, run.trainer->evaluate(0).all.mean_accuracy);
  return curve;
}

void evaluate_and_save(Run& run, const RunSettings& s, std::int64_t step, AccuracyCurve& curve) {
  const bool last = step == s.trainer.steps;
  if (run.group.is_main() && ((s.eval_every > 0 && step % s.eval_every == 0) || last)) {
    curve.emplace_back(step, run.trainer->evaluate(step).all.mean_accuracy);
  }
  if ((s.save_every > 0 && step % s.save_every == 0) || last) run.trainer->save(*run.checkpoints, step);
}

AccuracyCurve train_run(Run& run, const RunSettings& s) {
  if (run.serves_rollouts) {
    run.trainer->serve_rollouts();
    return {};
  }
  AccuracyCurve curve = start_accuracy_curve(run);
  for (std::int64_t step = run.first_step; step <= s.trainer.steps; ++step) {
    run.trainer->step(step);
    evaluate_and_save(run, s, step, curve);
  }
  return curve;
}

void finish_run(Run& run, const RunSettings& s, const AccuracyCurve& curve) {
  if (!run.group.is_main() || run.serves_rollouts) return;
  if (run.model->lora_options()) models::save_lora_adapter(run.model, s.output_dir / "adapter", s.model_dir.string());
  fmt::print("held-out accuracy by step:");
  for (const auto& [step, accuracy] : curve) fmt::print("  {}: {:.3f}", step, accuracy);
  fmt::print("\n");
}

int run_training_command(std::span<const std::string> args, std::string_view program) try {
  RunSettings settings;
  if (!parse_run_settings(settings, args, fmt::format("{} [options]", program))) return 0;
  auto run = build_run(settings);
  finish_run(*run, settings, train_run(*run, settings));
  return 0;
} catch (const Error& e) {
  fmt::print(stderr, "{}: {}\n", program, e.what());
  return 1;
}

}  // namespace grpo::train
