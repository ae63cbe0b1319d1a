// SPDX-License-Identifier: Apache-2.0
// r1_zero's settings: one table declares every setting once (flag names, help, check), and that table makes the
// command-line flags, reads the config file's keys (a key is the flag's name with '_' for '-'; a nested section joins
// its keys: kl: {target: 0.1} is --kl-target, loss: {type: dapo, epsilon_high: 0.28} is --loss-type and
// --loss-epsilon-high) and writes the resolved config.yaml. Loss settings left unset take the recipe's values.
#pragma once

#include <grpo/grpo.hpp>

#include "r1_zero_roll_config.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace r1_zero {

namespace fs = std::filesystem;

struct Settings {
  // What to train.
  std::string task = "tiny";
  fs::path model_dir, data_path;
  std::string data_format = "detect", prompt_field, answer_field, on_bad_row = "stop", unknown_tag = "error";
  std::int64_t held_out = 256;  // problems kept out of training for evaluation
  // The model's precision, memory and adapters.
  std::string dtype = "fp32", device = "cpu", gradient_checkpointing = "auto";
  bool fp32_lm_head = false;
  std::string optimizer_precision = "fp32_master";
  bool pack_sequences = false;
  std::int64_t lora_r = 0;  // 0 = full fine-tuning
  double lora_alpha = 32.0, lora_dropout = 0.05;
  std::vector<std::string> lora_target_modules;
  fs::path lora_adapter;
  // Rollouts.
  std::int64_t steps = 200, prompts_per_step = 32, group_size = 8, max_new_tokens = 0;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0;
  std::int64_t top_k = 0;
  // Objective: the recipe, and overrides of its values (unset: the recipe's).
  std::string loss = "dapo", advantage = "grpo";
  std::optional<std::string> kl_estimator, policy_loss;
  std::optional<double> beta, epsilon, epsilon_high, entropy_coef;
  std::int64_t mu = 1, micro_batches = 1, ref_sync_every = 0;
  double ref_sync_alpha = 1.0;
  std::int64_t dynamic_sampling_max_rounds = 0, dynamic_sampling_prompts = 0;
  std::string dynamic_sampling_at_cap = "train", dynamic_sampling_metric = "total";
  bool dynamic_sampling_per_domain = false;
  double dynamic_sampling_min_std = 1e-8;
  std::optional<double> dynamic_sampling_mean_above, dynamic_sampling_mean_below;
  std::vector<double> difficulty_mask;
  std::int64_t generation_chunks = 1;
  bool overlap_scoring = false;
  std::string kl_control = "fixed";
  double kl_target = 0.1, kl_horizon = 10000;
  double gamma = 1.0;
  bool otb_handle_zero_tail = false;
  double advantage_clip = 0.0, reward_clip = 0.0, dual_clip = 0.0;  // 0 = off
  bool whiten_advantages = false;
  // KL in the reward (off while its coefficient is 0).
  double kl_in_reward_coef = 0.0, kl_in_reward_target = 0.1, kl_in_reward_horizon = 10000;
  std::string kl_in_reward_control = "fixed", kl_in_reward_estimator = "k1";
  bool adaptive_entropy = false;
  double entropy_target = 0.2, entropy_coef_delta = 0.005, entropy_coef_min = 0.0, entropy_coef_max = 1.0;
  // verl rollout correction (the sampler's log-probs against the trainer's).
  std::string rollout_is = "none", rollout_rs;
  double rollout_is_threshold = 2.0;
  bool rollout_is_batch_normalize = false;
  std::string rollout_rs_threshold;
  // Curriculum (data sets).
  std::string curriculum_schedule = "none";
  std::vector<double> curriculum_start, curriculum_end;
  std::int64_t curriculum_start_step = 1, curriculum_end_step = 1;
  std::vector<std::string> curriculum_stages;
  std::int64_t curriculum_filter_window = 0, curriculum_filter_retire_steps = 0;
  std::string curriculum_filter_retire = "both";
  // Rewards: the default list weighs format at 0.2; a list the user gives weighs each reward 1 unless weighted.
  std::vector<std::string> rewards = {"accuracy", "format"};
  std::vector<double> reward_weights;
  fs::path reward_config;
  // Optimiser.
  double lr = 1e-3, weight_decay = 0.0, max_grad_norm = 1.0;
  std::int64_t warmup_steps = 0;
  std::string lr_decay = "constant";
  // Output.
  fs::path output_dir = "runs/r1_zero";
  std::int64_t log_every = 10, log_completions = 4, save_every = 50, keep_last = 2;
  std::int64_t eval_every = 25, eval_samples = 4, eval_problems = 0, eval_top_k = 0;
  std::optional<double> eval_temperature;
  double eval_top_p = 1.0, eval_min_p = 0.0;
  std::vector<std::string> validation_data;
  bool resume = false, tensorboard = true;
  std::uint64_t seed = 1;
  int threads = 0;
};

/// The weights of the default reward list (accuracy, format).
inline const std::vector<double> kDefaultRewardWeights = {1.0, 0.2};

using FieldValue = std::variant<std::string*, fs::path*, std::int64_t*, std::uint64_t*, int*, double*, bool*,
                                std::optional<double>*, std::optional<std::string>*, std::vector<std::string>*,
                                std::vector<double>*>;

/// One setting: its flag names (the first long one is the config key), where it lives, its help and its check.
struct Field {
  std::string names;
  FieldValue value;
  std::string help;
  std::function<void(CLI::Option&)> check = nullptr;
  bool written = true;  ///< part of config.yaml (not --resume, an action, nor --output-dir: a rerun must not overwrite)
};

inline auto member_of(std::vector<std::string> names) {
  return [names](CLI::Option& o) { o.check(CLI::IsMember(names)); };
}
/// The whole text as a number (strtod's syntax), or nullopt.
inline std::optional<double> number_in(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}
/// A check that the value is a number for which `ok` holds; the error says what was expected and what was given.
inline auto number_check(std::string expected, std::function<bool(double)> ok) {
  return [expected, ok](CLI::Option& o) {
    o.check(CLI::Validator(
        [expected, ok](std::string& value) -> std::string {
          const auto x = number_in(value);
          return x && ok(*x) ? std::string() : fmt::format("expected {}, got '{}'", expected, value);
        },
        ""));
  };
}
inline auto at_least_zero() {
  return number_check("a number >= 0", [](double x) { return x >= 0; });
}
inline auto positive() {
  return number_check("a number > 0", [](double x) { return x > 0; });
}
inline auto within(double lo, double hi) {
  return number_check(fmt::format("a number in [{}, {}]", lo, hi), [lo, hi](double x) { return x >= lo && x <= hi; });
}
/// The type check every numeric setting gets before its own: an integer, a non-negative integer or a number.
template <typename T>
void check_number_type(CLI::Option& option) {
  if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, int>) {
    number_check("an integer", [](double x) { return std::floor(x) == x; })(option);
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    number_check("an integer >= 0", [](double x) { return std::floor(x) == x && x >= 0; })(option);
  } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::optional<double>> ||
                       std::is_same_v<T, std::vector<double>>) {
    number_check("a number", [](double x) { return !std::isnan(x); })(option);
  }
}
/// A check that `parse` accepts the value (its ConfigError, listing the valid names, becomes the flag's error).
template <typename Parse>
auto accepted_by(Parse parse) {
  return [parse](CLI::Option& o) {
    o.check(CLI::Validator(
        [parse](std::string& value) -> std::string {
          try {
            parse(value);
            return {};
          } catch (const grpo::ConfigError& e) {
            return e.what();
          }
        },
        "NAME"));
  };
}
inline auto pair_list() {
  return [](CLI::Option& o) { o.delimiter(',')->expected(2); };
}

inline std::vector<Field> fields(Settings& s) {
  return {
      {"--task", &s.task, "tiny (built-in) or data (--model + --data; implied by --model)", member_of({"tiny", "data"})},
      {"--model,--model-dir", &s.model_dir, "Hugging Face model directory (config.json, safetensors, tokenizer.json)",
       [](CLI::Option& o) { o.check(CLI::ExistingDirectory); }},
      {"--data", &s.data_path, "JSON/JSONL data set (ROLL, TRL/NuminaMath, GSM8K or --data-format fields)",
       [](CLI::Option& o) { o.check(CLI::ExistingFile); }},
      {"--data-format", &s.data_format, "detect, roll, trl, gsm8k or fields",
       accepted_by([](const std::string& v) { grpo::io::parse_dataset_format(v); })},
      {"--prompt-field", &s.prompt_field, "with --data-format fields: the prompt's field"},
      {"--answer-field", &s.answer_field, "with --data-format fields: the gold answer's field"},
      {"--on-bad-row", &s.on_bad_row, "stop or skip a malformed data row (skipped rows are counted, the first few "
       "reasons printed)", member_of({"stop", "skip"})},
      {"--unknown-tag", &s.unknown_tag,
       "multi-domain data: a row whose tag (or 'domain' field) names no configured domain is an error, skipped "
       "(skip), or sent to the domain named here (math: the first math domain, as ROLL sends such rows to math_rule)"},
      {"--dtype", &s.dtype,
       "the model's dtype: fp32, or bf16 (bf16 compute; the weights optimised as --optimizer-precision says); "
       "fp16 needs a CUDA device", member_of({"fp32", "bf16", "fp16"})},
      {"--device", &s.device, "cpu, or cuda[:N] (needs a CUDA build of LibTorch; with several processes cuda, each "
       "rank on cuda:LOCAL_RANK)"},
      {"--gradient-checkpointing", &s.gradient_checkpointing,
       "recompute each decoder layer in backward instead of keeping its activations: on, off, or auto (on for "
       "models of 100 M parameters or more)", member_of({"auto", "on", "off"})},
      {"--optimizer-precision", &s.optimizer_precision,
       "with --dtype bf16: fp32_master (fp32 master weights and AdamW state) or compensated (the bf16 weights stepped "
       "in place with Kahan compensation and stochastically rounded bf16 moments: half the optimizer memory)",
       accepted_by([](const std::string& v) { grpo::train::parse_optimizer_precision(v); })},
      {"--fp32-lm-head", &s.fp32_lm_head, "log-probs from fp32 logits when the model is bf16/fp16 (the aim of TRL's "
       "cast_lm_head_to_fp32)"},
      {"--pack-sequences", &s.pack_sequences, "log-prob passes without padding: each micro-batch's sequences packed "
       "into one row, each attending to itself"},
      {"--lora-r", &s.lora_r, "LoRA rank (0 = full fine-tuning); only the adapters train, the reference is the base",
       at_least_zero()},
      {"--lora-alpha", &s.lora_alpha, "LoRA alpha (scaling alpha / r)", positive()},
      {"--lora-dropout", &s.lora_dropout, "dropout on the LoRA adapters' input", within(0.0, 0.999)},
      {"--lora-target-modules", &s.lora_target_modules,
       "modules that get adapters: names (q_proj,v_proj), a regular expression, or all-linear (default: q_proj,v_proj)"},
      {"--lora-adapter", &s.lora_adapter, "start from this peft LoRA adapter directory (adapter_config.json)",
       [](CLI::Option& o) { o.check(CLI::ExistingDirectory); }},
      {"--held-out", &s.held_out, "problems kept out of training for evaluation (per domain)", at_least_zero()},
      {"--steps", &s.steps, "optimizer steps", positive()},
      {"--prompts", &s.prompts_per_step, "prompts per step (P)", positive()},
      {"--group-size", &s.group_size, "completions per prompt (G)", within(2, 1024)},
      {"--max-new-tokens", &s.max_new_tokens, "completion length limit (0: 8 tiny, 512 data)", at_least_zero()},
      {"--temperature", &s.temperature, "sampling temperature (also divides the trainer's logits)", within(1e-3, 10.0)},
      {"--top-p", &s.top_p, "nucleus sampling", within(1e-6, 1.0)},
      {"--top-k", &s.top_k, "top-k sampling (0 = off)", at_least_zero()},
      {"--min-p", &s.min_p, "min-p sampling (0 = off)", within(0.0, 1.0)},
      {"--loss,--loss-type", &s.loss, "loss recipe: grpo, dr_grpo, dapo, gspo or cispo (recipes.hpp)",
       accepted_by([](const std::string& v) { grpo::recipes::by_name(v, 1); })},
      {"--policy-loss,--loss-policy", &s.policy_loss,
       "surrogate: a built-in policy loss type (ppo_clip, cispo, sapo, gmpo, ...) or a registered name (unset: the recipe's)",
       accepted_by([](const std::string& v) {
         grpo::GrpoLossOptions o;
         grpo::select_policy_loss(o, v);
       })},
      {"--advantage", &s.advantage,
       "advantage estimator: group-relative (grpo, verl_grpo, dr_grpo, rloo, reinforce_pp_baseline, gpg, pass_at_k, "
       "opo, or a registered name) or token-level (reinforce_pp, remax: a greedy completion per prompt is the "
       "baseline, optimal_token_baseline)",
       accepted_by([](const std::string& v) {
         grpo::train::GrpoTrainerOptions o;
         grpo::train::select_advantage(o, v);
       })},
      {"--gamma", &s.gamma, "reinforce_pp: discount of the token returns", within(0.0, 1.0)},
      {"--whiten-advantages", &s.whiten_advantages,
       "whiten the advantages over the batch's completion tokens after the estimator (ROLL whiten_advantages)"},
      {"--advantage-clip", &s.advantage_clip, "clamp group-relative advantages to [-C, C] (ROLL advantage_clip; 0 = off)",
       at_least_zero()},
      {"--reward-clip", &s.reward_clip, "clamp each reward total to [-C, C] before the estimator (ROLL reward_clip; "
       "0 = off)", at_least_zero()},
      {"--dual-clip", &s.dual_clip, "dual clip c > 1 of ppo_clip for negative advantages (verl clip_ratio_c 3; ROLL "
       "dual_clip_loss 1 + 2·pg_clip; 0 = off)", at_least_zero()},
      {"--otb-handle-zero-tail", &s.otb_handle_zero_tail,
       "optimal_token_baseline: a group's longest completion, when alone that long, gets baseline 0 past the "
       "second-longest (verl handle_zero_tail)"},
      {"--beta,--loss-beta", &s.beta, "KL coefficient to the reference policy (0 = no reference; unset: the recipe's)",
       at_least_zero()},
      {"--kl-estimator,--loss-kl-estimator", &s.kl_estimator, "k1, k2, k3, low_var_kl, ... (unset: the recipe's)",
       accepted_by([](const std::string& v) { grpo::parse_kl_estimator(v); })},
      {"--epsilon,--loss-epsilon", &s.epsilon, "clip range below (unset: the recipe's)", at_least_zero()},
      {"--epsilon-high,--loss-epsilon-high", &s.epsilon_high,
       "clip range above (unset: the recipe's; with a symmetric recipe and --epsilon, --epsilon)", at_least_zero()},
      {"--entropy-coef,--loss-entropy-coef", &s.entropy_coef, "entropy bonus coefficient (unset: the recipe's)"},
      {"--mu", &s.mu, "optimisation passes per batch (μ)", positive()},
      {"--micro-batches", &s.micro_batches, "gradient accumulation: micro-batches per step", positive()},
      {"--ref-sync-every", &s.ref_sync_every, "reference update period in steps (0 = frozen)", at_least_zero()},
      {"--ref-sync-alpha", &s.ref_sync_alpha, "reference update mix α (1 = copy)", within(0.0, 1.0)},
      {"--dynamic-sampling-max-rounds", &s.dynamic_sampling_max_rounds,
       "DAPO dynamic sampling: drop groups without reward spread and sample up to this many rounds of prompts until "
       "P groups have spread (0 = off)",
       at_least_zero()},
      {"--dynamic-sampling-prompts", &s.dynamic_sampling_prompts, "prompts per round (0 = --prompts)", at_least_zero()},
      {"--dynamic-sampling-at-cap", &s.dynamic_sampling_at_cap,
       "when the rounds run out: train on the groups found (none: skip), or skip the step", member_of({"train", "skip"})},
      {"--dynamic-sampling-metric", &s.dynamic_sampling_metric,
       "what must spread within a kept group: total (the reward total), accuracy (DAPO's acc: the correctness of the "
       "judged completions) or a reward's label"},
      {"--dynamic-sampling-per-domain", &s.dynamic_sampling_per_domain,
       "each domain keeps its share of the step's groups (ROLL filters per domain)"},
      {"--dynamic-sampling-min-std", &s.dynamic_sampling_min_std,
       "a kept group's metric std must exceed this (DAPO 1e-8; ROLL std_filter std_threshold)", at_least_zero()},
      {"--dynamic-sampling-mean-above", &s.dynamic_sampling_mean_above,
       "a kept group's metric mean must exceed this (ROLL mean_filter threshold_down)"},
      {"--dynamic-sampling-mean-below", &s.dynamic_sampling_mean_below,
       "a kept group's metric mean must be below this (ROLL mean_filter threshold_up)"},
      {"--difficulty-mask", &s.difficulty_mask,
       "LOW,HIGH: groups whose mean reward total is not strictly inside leave the loss (ROLL difficulty_mask)",
       pair_list()},
      {"--generation-chunks", &s.generation_chunks, "sample each round's prompts in this many chunks (each with its own seed)",
       positive()},
      {"--overlap-scoring", &s.overlap_scoring,
       "score each chunk's completions (completion-scoped rewards) while the next chunk is sampled; the numbers equal "
       "--no-overlap-scoring with the same chunks"},
      {"--kl-control", &s.kl_control, "KL coefficient control: fixed or adaptive (β from --beta, moved towards --kl-target)",
       member_of({"fixed", "adaptive"})},
      {"--kl-target", &s.kl_target, "adaptive KL: target KL per token", positive()},
      {"--kl-horizon", &s.kl_horizon, "adaptive KL: horizon in sequences", positive()},
      {"--kl-in-reward-coef", &s.kl_in_reward_coef,
       "KL in the reward (verl use_kl_in_reward, ROLL add_token_level_kl): each token's reward gets -coef * KL to the "
       "reference (0 = off)",
       at_least_zero()},
      {"--kl-in-reward-estimator", &s.kl_in_reward_estimator, "KL in the reward: per-token estimator (k1, abs, k2, "
       "k3, low_var_kl; verl's '+' forms have the same value)",
       accepted_by([](const std::string& v) { grpo::parse_kl_estimator(v); })},
      {"--kl-in-reward-control", &s.kl_in_reward_control,
       "KL in the reward: fixed or adaptive (the coefficient moves towards --kl-in-reward-target)",
       member_of({"fixed", "adaptive"})},
      {"--kl-in-reward-target", &s.kl_in_reward_target, "KL in the reward, adaptive: target KL (sequence mean of "
       "token-mean KL)", positive()},
      {"--kl-in-reward-horizon", &s.kl_in_reward_horizon, "KL in the reward, adaptive: horizon in sequences",
       positive()},
      {"--adaptive-entropy,--use-adaptive-entropy", &s.adaptive_entropy,
       "adaptive entropy bonus (TRL use_adaptive_entropy): the coefficient starts at --entropy-coef and moves by "
       "--entropy-coef-delta per optimizer step, up while the entropy is at or below --entropy-target, down otherwise, "
       "within [--entropy-coef-min, --entropy-coef-max]; the bonus applies only while the entropy is at or below the "
       "target"},
      {"--entropy-target", &s.entropy_target, "adaptive entropy: target token-mean entropy (nats)", at_least_zero()},
      {"--entropy-coef-delta", &s.entropy_coef_delta, "adaptive entropy: coefficient step per optimizer step",
       at_least_zero()},
      {"--entropy-coef-min", &s.entropy_coef_min, "adaptive entropy: lower bound of the coefficient", at_least_zero()},
      {"--entropy-coef-max", &s.entropy_coef_max, "adaptive entropy: upper bound of the coefficient", at_least_zero()},
      {"--rollout-is", &s.rollout_is,
       "verl rollout correction: weigh the policy loss by the trainer/sampler ratio per token or per sequence, "
       "truncated at --rollout-is-threshold (none = off)",
       member_of({"none", "token", "sequence"})},
      {"--rollout-is-threshold", &s.rollout_is_threshold, "rollout correction: upper bound of the IS weights",
       positive()},
      {"--rollout-is-batch-normalize", &s.rollout_is_batch_normalize,
       "rollout correction: divide the IS weights by their batch mean"},
      {"--rollout-rs", &s.rollout_rs,
       "verl rejection sampling: drop tokens or sequences by trainer/sampler mismatch, e.g. token_k1 or "
       "seq_mean_k3,token_k1 (empty = off; thresholds in --rollout-rs-threshold)"},
      {"--rollout-rs-threshold", &s.rollout_rs_threshold,
       "rejection thresholds, one per --rollout-rs option or one shared: LOWER_UPPER ratio band for k1, an upper "
       "bound for k2/k3"},
      {"--curriculum-schedule", &s.curriculum_schedule, "difficulty curriculum: none, linear or staged",
       member_of({"none", "linear", "staged"})},
      {"--curriculum-start", &s.curriculum_start, "linear: difficulty MIN,MAX at --curriculum-start-step", pair_list()},
      {"--curriculum-end", &s.curriculum_end, "linear: difficulty MIN,MAX at --curriculum-end-step", pair_list()},
      {"--curriculum-start-step", &s.curriculum_start_step, "linear: step where the range starts widening"},
      {"--curriculum-end-step", &s.curriculum_end_step, "linear: step where it reaches --curriculum-end"},
      {"--curriculum-stages", &s.curriculum_stages, "staged: STEP:MIN:MAX,... (from STEP on, difficulties MIN..MAX)"},
      {"--curriculum-filter-window", &s.curriculum_filter_window,
       "retire a prompt after this many consecutive all-wrong or all-right groups (0 = off)", at_least_zero()},
      {"--curriculum-filter-retire", &s.curriculum_filter_retire, "which prompts the filter retires: both, unsolved or solved",
       member_of({"both", "unsolved", "solved"})},
      {"--curriculum-filter-retire-steps", &s.curriculum_filter_retire_steps,
       "steps a retired prompt stays out (0 = for the rest of the run)", at_least_zero()},
      {"--rewards", &s.rewards, "registry reward names (in a config also a list of entries: [{name: accuracy}, ...])"},
      {"--reward-weights", &s.reward_weights, "one weight per reward (default: 1 each; 1,0.2 for the default list)"},
      {"--reward-config", &s.reward_config, "JSON reward list (overrides --rewards)",
       [](CLI::Option& o) { o.check(CLI::ExistingFile); }},
      {"--lr", &s.lr, "AdamW learning rate", at_least_zero()},
      {"--weight-decay", &s.weight_decay, "AdamW weight decay", at_least_zero()},
      {"--max-grad-norm", &s.max_grad_norm, "gradient clipping (0 = off)", at_least_zero()},
      {"--warmup-steps", &s.warmup_steps, "linear learning-rate warm-up", at_least_zero()},
      {"--lr-decay", &s.lr_decay, "constant, linear or cosine", member_of({"constant", "linear", "cosine"})},
      {"--output-dir", &s.output_dir, "metrics, TensorBoard events, samples, checkpoints and the resolved config.yaml",
       nullptr, false},
      {"--log-every", &s.log_every, "console line period in steps", positive()},
      {"--log-completions", &s.log_completions, "completions per step written to completions.jsonl", at_least_zero()},
      {"--save-every", &s.save_every, "checkpoint period in steps (0 = only at the end)", at_least_zero()},
      {"--keep-last", &s.keep_last, "checkpoints kept", at_least_zero()},
      {"--eval-every", &s.eval_every, "evaluation period in steps (0 = start and end only)", at_least_zero()},
      {"--eval-samples", &s.eval_samples, "samples per held-out problem (k of pass@k and maj@k)", positive()},
      {"--eval-problems", &s.eval_problems, "held-out problems evaluated (0 = all)", at_least_zero()},
      {"--eval-temperature", &s.eval_temperature, "evaluation sampling temperature (unset: --temperature)", positive()},
      {"--eval-top-p", &s.eval_top_p, "evaluation nucleus sampling", within(1e-6, 1.0)},
      {"--eval-top-k", &s.eval_top_k, "evaluation top-k sampling (0 = off)", at_least_zero()},
      {"--eval-min-p", &s.eval_min_p, "evaluation min-p sampling (0 = off)", within(0.0, 1.0)},
      {"--validation-data", &s.validation_data,
       "files whose rows are the held-out problems (ROLL's validation set), routed to domains like training rows; "
       "every training row then trains (--held-out is not used)"},
      {"--resume", &s.resume, "continue from the newest checkpoint in --output-dir", nullptr, false},
      {"--tensorboard", &s.tensorboard, "write TensorBoard event files"},
      {"--seed", &s.seed, "seed of everything random"},
      {"--threads", &s.threads, "intra-op threads (0 = 1 for the tiny task, else cores / processes)", at_least_zero()},
  };
}

/// The config file's key of a field: its first long name with '_' for '-'.
inline std::string config_key(const Field& field) {
  std::string key = field.names.substr(2, field.names.find(',') - 2);
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

/// Adds every field as a flag (booleans as --x / --no-x, lists comma-separated) plus --config and --set; returns the
/// table.
struct Flags {
  std::vector<Field> fields;
  fs::path config_path, roll_config_path;
  std::vector<std::string> overrides;
};

inline std::unique_ptr<Flags> add_flags(CLI::App& app, Settings& s) {
  auto flags = std::make_unique<Flags>(Flags{fields(s), {}, {}});  // at a fixed address: CLI11 writes into it
  for (const Field& field : flags->fields) {
    CLI::Option* option = std::visit(
        [&](auto* value) -> CLI::Option* {
          using T = std::remove_pointer_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) {
            const std::string name = field.names.substr(2);
            return app.add_flag(field.names + ",!--no-" + name, *value, field.help)->default_str(*value ? "true" : "false");
          } else if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<double>>) {
            CLI::Option* list = app.add_option(field.names, *value, field.help)->delimiter(',');
            check_number_type<T>(*list);
            return list;
          } else {
            CLI::Option* option = app.add_option(field.names, *value, field.help);
            check_number_type<T>(*option);
            return option;
          }
        },
        field.value);
    if (field.check) field.check(*option);
  }
  app.add_option("--config", flags->config_path,
                 "YAML or JSON run config: settings by name (nested sections join: kl: {target: 0.1} is --kl-target), "
                 "'extends: base.yaml' to inherit, 'domains:' for a multi-domain run, 'stages:' for context stages")
      ->check(CLI::ExistingFile);
  app.add_option("--set", flags->overrides, "override one config key, e.g. --set kl.target=0.05 (repeatable)");
  app.add_option("--roll-config", flags->roll_config_path,
                 "a ROLL rlvr_config.yaml read as these settings (keys ROLL and this run share; every other key is "
                 "listed with the reason it is not used); flags and --config win over it")
      ->check(CLI::ExistingFile);
  return flags;
}

/// What a config file adds beyond the flags.
struct RunConfig {
  std::vector<grpo::train::DomainConfig> domains;
  std::vector<grpo::train::ContextStage> stages;
  std::string domains_json, stages_json;  // the sections as given, for config.yaml
  std::string rewards_json;               // `rewards` given as a list of entries ({name, weight, options})
  std::string rewards_source;             // "file:line" of that list, for errors
  bool rewards_given = false;             // --rewards (or a config's rewards) was given
  std::set<std::string> derived;          // keys whose value came from the recipe or the default reward list
  std::vector<std::string> roll_unmapped;  // --roll-config keys not used, each with its reason
};

/// Applies a config tree to the flags the command line left unset. Nested maps name flags by their joined keys.
/// Which options the command line gave (they win over the config) and which config key set each other option. Two
/// keys naming one setting (beta and loss.beta) are an error, except that a --set override wins over a file's key.
struct ConfigApplication {
  std::set<const CLI::Option*> from_command_line;
  std::map<const CLI::Option*, const grpo::io::ConfigNode*> from_config;
};

inline void apply_config_tree(CLI::App& app, const grpo::io::ConfigNode& map, const std::string& prefix, RunConfig& run,
                              ConfigApplication& applied) {
  for (const auto& [key, node] : map.entries()) {
    if (prefix.empty() && (key == "domains" || key == "stages")) continue;
    std::string flag_name = prefix + key;
    std::replace(flag_name.begin(), flag_name.end(), '_', '-');
    node.mark_read();
    if (node.is_map()) {
      apply_config_tree(app, node, flag_name + "-", run, applied);
      continue;
    }
    const std::string flag = "--" + flag_name;
    CLI::Option* option = app.get_option_no_throw(flag);
    if (option == nullptr || flag == "--config" || flag == "--set") {
      throw grpo::ConfigError(
          fmt::format("{}: unknown field '{}' (run with --help for the flags)", node.source(), node.path()));
    }
    GRPO_CHECK_CONFIG(!node.is_null(), "{}: field '{}' is null", node.source(), node.path());
    GRPO_CHECK_CONFIG(!flag_name.starts_with("no-") || option->get_lnames().front() == flag_name,
                      "{}: field '{}': write '{}: false' (a config names a setting, not its --no- flag)", node.source(),
                      node.path(), option->get_lnames().front());
    if (applied.from_command_line.count(option)) continue;  // the command line wins
    if (flag == "--rewards" && node.is_list() && !node.items().empty() && node.items().front().is_map()) {
      run.rewards_json = grpo::io::to_json(node);  // entries: RewardSet::from_config reads and checks them
      run.rewards_source = node.source();
      run.rewards_given = true;
      continue;
    }
    if (const auto it = applied.from_config.find(option); it != applied.from_config.end()) {
      const grpo::io::ConfigNode& earlier = *it->second;
      const bool node_is_set = node.source().starts_with("--set"), earlier_is_set = earlier.source().starts_with("--set");
      if (earlier_is_set && !node_is_set) continue;  // the --set override stands
      GRPO_CHECK_CONFIG(node_is_set && !earlier_is_set,
                        "{}: '{}' and {}: '{}' set the same setting (--{}); keep one of them", node.source(),
                        node.path(), earlier.source(), earlier.path(), option->get_lnames().front());
      option->clear();  // --set replaces the file's value
    }
    applied.from_config[option] = &node;
    const std::vector<std::string> values = node.texts();  // its ConfigError names the place already
    try {
      option->add_result(values);
      option->run_callback();
    } catch (const CLI::Error& e) {
      throw grpo::ConfigError(fmt::format("{}: field '{}': {}", node.source(), node.path(), e.what()));
    }
  }
}

/// Reads --config (YAML or JSON, with `extends`/`defaults` bases) and the --set overrides into the flags; returns the
/// sections that are not flags.
/// --roll-config: the ROLL file's settings for the options nothing else set, and its domains when there are none.
inline void apply_roll_config(CLI::App& app, const fs::path& path, const ConfigApplication& applied, RunConfig& run) {
  const grpo::io::ConfigNode root = grpo::io::parse_config(grpo::io::read_file(path), path.string());
  const RollConversion conversion = convert_roll_config(root);
  for (const RollSetting& setting : conversion.settings) {
    std::string flag = "--" + setting.key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    CLI::Option* option = app.get_option(flag);
    if (applied.from_command_line.count(option) || applied.from_config.count(option)) continue;
    try {
      option->add_result(setting.values);
      option->run_callback();
    } catch (const CLI::Error& e) {
      throw grpo::ConfigError(fmt::format("{}: {}", setting.source, e.what()));
    }
  }
  if (!conversion.unknown_tag.empty()) {
    CLI::Option* option = app.get_option("--unknown-tag");
    if (!applied.from_command_line.count(option) && !applied.from_config.count(option)) {
      option->add_result(conversion.unknown_tag);
      option->run_callback();
    }
  }
  if (run.domains.empty() && !conversion.domains_yaml.empty()) {
    const grpo::io::ConfigNode converted =
        grpo::io::parse_config(conversion.domains_yaml, path.string() + " (converted domains)");
    run.domains = grpo::train::read_domains(converted.at("domains"));
    run.domains_json = grpo::io::to_json(converted.at("domains"));
  }
  run.roll_unmapped = conversion.unmapped;
}

inline RunConfig apply_config(CLI::App& app, const Flags& flags) {
  RunConfig run;
  run.rewards_given = app.get_option("--rewards")->count() > 0;
  ConfigApplication applied;
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() > 0) applied.from_command_line.insert(option);
  }
  if (!flags.config_path.empty() || !flags.overrides.empty()) {
    grpo::io::ConfigNode root = flags.config_path.empty() ? grpo::io::parse_config("{}", "--set")
                                                          : grpo::io::load_layered_config(flags.config_path);
    for (const std::string& assignment : flags.overrides) grpo::io::apply_config_override(root, assignment);
    apply_config_tree(app, root, "", run, applied);
    if (const auto* domains = root.find("domains")) {
      run.domains = grpo::train::read_domains(*domains);
      run.domains_json = grpo::io::to_json(*domains);
    }
    if (const auto* stages = root.find("stages")) {
      run.stages = grpo::train::read_context_stages(*stages);
      run.stages_json = grpo::io::to_json(*stages);
    }
    grpo::io::reject_unread_keys(root);
  }
  if (!flags.roll_config_path.empty()) apply_roll_config(app, flags.roll_config_path, applied, run);
  run.rewards_given = run.rewards_given || app.get_option("--rewards")->count() > 0;
  return run;
}

/// --device for this rank: cpu; cuda is cuda:LOCAL_RANK (one GPU per process); cuda:N only with one process (NCCL
/// gives each rank the GPU of its local rank).
inline torch::Device model_device(const Settings& s, const grpo::train::ProcessGroup& group) {
  if (s.device == "cpu") return torch::kCPU;
  if (s.device == "cuda") return {torch::kCUDA, static_cast<c10::DeviceIndex>(group.local_rank())};
  GRPO_CHECK_CONFIG(group.world_size() == 1, "--device {} with {} processes: use --device cuda (each rank runs on "
                    "cuda:LOCAL_RANK)", s.device, group.world_size());
  return torch::Device(s.device);
}

/// --dtype as a torch dtype.
inline torch::ScalarType model_dtype(const std::string& name) {
  return name == "bf16" ? torch::kBFloat16 : name == "fp16" ? torch::kHalf : torch::kFloat32;
}

/// Checks --device, --dtype and the LoRA flags together, before anything is loaded.
inline void check_model_flags(const Settings& s) {
  const bool cuda = s.device == "cuda" || s.device.starts_with("cuda:");
  GRPO_CHECK_CONFIG(s.device == "cpu" || cuda, "--device {}: expected cpu or cuda[:N]", s.device);
  if (cuda) {
    GRPO_CHECK_CONFIG(torch::cuda::is_available(), "--device {}: this LibTorch has no CUDA support or sees no GPU "
                      "(Debian's libtorch-dev is CPU-only)", s.device);
    const std::string index = s.device == "cuda" ? "0" : s.device.substr(5);
    GRPO_CHECK_CONFIG(!index.empty() && index.size() <= 3 &&
                          index.find_first_not_of("0123456789") == std::string::npos &&
                          std::stoi(index) < static_cast<int>(torch::cuda::device_count()),
                      "--device {}: expected cuda or cuda:N with N below the {} GPUs visible", s.device,
                      torch::cuda::device_count());
  }
  GRPO_CHECK_CONFIG(cuda || s.dtype != "fp16", "--dtype fp16: half-precision matrix products need a CUDA device; on "
                    "a CPU use --dtype bf16");
  GRPO_CHECK_CONFIG(!s.fp32_lm_head || s.dtype != "fp32", "--fp32-lm-head: the model is already fp32 (--dtype fp32)");
  if (grpo::train::parse_optimizer_precision(s.optimizer_precision) == grpo::train::OptimizerPrecision::compensated) {
    GRPO_CHECK_CONFIG(s.dtype == "bf16", "--optimizer-precision compensated steps bf16 weights in place; it needs "
                      "--dtype bf16 (got --dtype {})", s.dtype);
    GRPO_CHECK_CONFIG(s.lora_r == 0 && s.lora_adapter.empty(), "--optimizer-precision compensated: LoRA adapters "
                      "train in fp32 (only the frozen base is bf16); drop it or LoRA");
  }
  GRPO_CHECK_CONFIG(s.lora_adapter.empty() || s.lora_r == 0,
                    "--lora-adapter {} brings its own r, alpha and target modules (adapter_config.json): drop --lora-r",
                    s.lora_adapter.string());
  GRPO_CHECK_CONFIG(s.lora_target_modules.empty() || s.lora_r > 0,
                    "--lora-target-modules needs --lora-r > 0 (LoRA is off)");
}

/// The LoRA configuration the flags ask for: --lora-adapter's adapter_config.json, --lora-r's, or none.
inline std::optional<grpo::models::LoraOptions> lora_of(const Settings& s) {
  if (!s.lora_adapter.empty()) return grpo::models::read_lora_config(s.lora_adapter / "adapter_config.json");
  if (s.lora_r == 0) return std::nullopt;
  grpo::models::LoraOptions lora{.rank = s.lora_r, .alpha = s.lora_alpha, .dropout = s.lora_dropout};
  if (!s.lora_target_modules.empty()) lora.target_modules = s.lora_target_modules;
  return lora;
}

/// Fails (naming the flag) when the LoRA flags select no module of `model`: checked as soon as the model exists.
inline void check_lora_targets(const grpo::models::CausalLM& model, const Settings& s) {
  const auto lora = lora_of(s);
  if (!lora) return;
  try {
    grpo::models::lora_targets(model, *lora);
  } catch (const grpo::ConfigError& e) {
    throw grpo::ConfigError(fmt::format("{}: {}", s.lora_adapter.empty() ? "--lora-r/--lora-target-modules"
                                                                         : "--lora-adapter " + s.lora_adapter.string(),
                                        e.what()));
  }
}

/// The run's model as the flags ask: --dtype (a checkpoint is loaded in it; the tiny task's model is converted after
/// its warm-up), LoRA adapters (--lora-r or --lora-adapter; a target matching nothing is an error naming the flag),
/// activation checkpointing.
inline void prepare_model(grpo::models::CausalLM& model, const Settings& s, const torch::Device& device) {
  model->to(device, model_dtype(s.dtype));
  check_lora_targets(model, s);
  if (!s.lora_adapter.empty()) {
    grpo::models::load_lora_adapter(model, s.lora_adapter);
  } else if (const auto lora = lora_of(s)) {
    grpo::models::add_lora(model, *lora);
  }
  std::int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  constexpr std::int64_t kCheckpointingFrom = 100'000'000;
  model->set_gradient_checkpointing(s.gradient_checkpointing == "on" ||
                                    (s.gradient_checkpointing == "auto" && parameters >= kCheckpointingFrom));
}

/// Fills in what depends on other settings: the task, the completion limit, the recipe's loss values, the reward
/// weights. Throws ConfigError for combinations that cannot run.
inline void resolve(Settings& s, RunConfig& run) {
  check_model_flags(s);
  if (!s.model_dir.empty()) s.task = "data";
  const bool tiny = s.task == "tiny";
  GRPO_CHECK_CONFIG(tiny || (!s.model_dir.empty() && (!s.data_path.empty() || !run.domains.empty())),
                    "--task data needs --model DIR and --data FILE (or a config with domains)");
  GRPO_CHECK_CONFIG(!tiny || run.domains.empty(), "a config with domains needs --model DIR");
  GRPO_CHECK_CONFIG(!tiny || s.validation_data.empty(), "--validation-data needs --task data (--model and --data)");
  if (s.max_new_tokens == 0) s.max_new_tokens = tiny ? 8 : 512;
  if (tiny && s.held_out == 0) s.held_out = 256;
  const auto recipe = grpo::recipes::by_name(s.loss, s.max_new_tokens);
  // Unset overrides take the recipe's values; config.yaml writes those as comments, so that a rerun with another
  // recipe takes that recipe's.
  const bool symmetric = recipe.policy.epsilon_low == recipe.policy.epsilon_high;
  auto derive = [&](auto& value, auto recipe_value, const char* key) {
    if (value) return;
    value = recipe_value;
    run.derived.insert(key);
  };
  derive(s.epsilon_high, symmetric && s.epsilon ? *s.epsilon : recipe.policy.epsilon_high, "epsilon_high");
  derive(s.epsilon, recipe.policy.epsilon_low, "epsilon");
  derive(s.beta, recipe.beta, "beta");
  derive(s.entropy_coef, recipe.entropy_coef, "entropy_coef");
  derive(s.kl_estimator, std::string(grpo::to_string(recipe.kl.estimator)) + (recipe.kl.straight_through ? "+" : ""),
         "kl_estimator");
  derive(s.policy_loss, std::string(grpo::policy_loss_type_name(recipe.policy.type)), "policy_loss");
  GRPO_CHECK_CONFIG(s.reward_weights.empty() || (run.rewards_json.empty() && s.reward_config.empty()),
                    "--reward-weights weighs --rewards names; with reward entries ({}) give each entry its 'weight'",
                    run.rewards_json.empty() ? "--reward-config" : run.rewards_source);
  if (run.rewards_json.empty() && s.reward_config.empty()) {
    if (s.reward_weights.empty()) {
      s.reward_weights = run.rewards_given ? std::vector<double>(s.rewards.size(), 1.0) : kDefaultRewardWeights;
      run.derived.insert("reward_weights");
      if (!run.rewards_given) run.derived.insert("rewards");  // the default list and its weights go together
    }
    GRPO_CHECK_CONFIG(s.reward_weights.size() == s.rewards.size(), "--reward-weights: {} weights for {} rewards ({})",
                      s.reward_weights.size(), s.rewards.size(), fmt::join(s.rewards, ", "));
  }
}

/// The run's reward set: --reward-config, the config's list of entries, or --rewards with --reward-weights.
inline grpo::rewards::RewardSet make_rewards(const Settings& s, const RunConfig& run) {
  if (!s.reward_config.empty()) return grpo::rewards::RewardSet::from_config(grpo::io::read_file(s.reward_config));
  if (!run.rewards_json.empty()) {
    try {
      return grpo::rewards::RewardSet::from_config(run.rewards_json);
    } catch (const grpo::ConfigError& e) {
      throw grpo::ConfigError(fmt::format("{}: 'rewards': {}", run.rewards_source, e.what()));
    }
  }
  const auto registry = grpo::rewards::RewardRegistry::with_builtins();
  std::vector<grpo::rewards::RewardSetEntry> entries;
  for (std::size_t i = 0; i < s.rewards.size(); ++i) {
    entries.push_back({registry.create(fmt::format(R"({{"name": "{}"}})", s.rewards[i])), s.reward_weights[i]});
  }
  return grpo::rewards::RewardSet(std::move(entries));
}

inline grpo::train::DifficultyScheduleOptions difficulty_schedule(const Settings& s) {
  grpo::train::DifficultyScheduleOptions o;
  o.kind = grpo::train::parse_difficulty_schedule(s.curriculum_schedule);
  auto range = [](const std::vector<double>& v, const char* flag) {
    GRPO_CHECK_CONFIG(v.size() == 2, "{} needs MIN,MAX", flag);
    return grpo::train::DifficultyRange{v[0], v[1]};
  };
  if (o.kind == grpo::train::DifficultyScheduleKind::linear) {
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

/// The trainer's options from the resolved settings.
inline grpo::train::GrpoTrainerOptions trainer_options(const Settings& s, const RunConfig& run) {
  grpo::train::GrpoTrainerOptions o;
  o.steps = s.steps;
  o.prompts_per_step = s.prompts_per_step;
  o.group_size = s.group_size;
  o.sampling = {.temperature = s.temperature, .max_new_tokens = s.max_new_tokens, .top_k = s.top_k, .top_p = s.top_p,
                .min_p = s.min_p};
  o.stages = run.stages;
  o.loss = grpo::recipes::by_name(s.loss, s.max_new_tokens);
  o.loss.policy.epsilon_low = *s.epsilon;
  o.loss.policy.epsilon_high = *s.epsilon_high;
  o.loss.kl = grpo::parse_kl_estimator(*s.kl_estimator);
  o.loss.entropy_coef = *s.entropy_coef;
  grpo::select_policy_loss(o.loss, *s.policy_loss);
  grpo::train::select_advantage(o, s.advantage);  // a token-level, built-in group or registered estimator
  o.token_advantage.gamma = s.gamma;
  o.whiten_advantages = s.whiten_advantages;
  if (s.advantage_clip > 0) o.advantage.advantage_clip = std::pair(-s.advantage_clip, s.advantage_clip);
  if (s.reward_clip > 0) o.advantage.reward_clip = std::pair(-s.reward_clip, s.reward_clip);
  if (s.dual_clip > 0) o.loss.policy.dual_clip_c = s.dual_clip;
  o.token_advantage.handle_zero_tail = s.otb_handle_zero_tail;
  o.kl_in_reward = {.beta = s.kl_in_reward_coef,
                    .control = {.type = grpo::train::parse_kl_control(s.kl_in_reward_control),
                                .target = s.kl_in_reward_target,
                                .horizon = s.kl_in_reward_horizon},
                    .estimator = grpo::parse_kl_estimator(s.kl_in_reward_estimator).estimator};
  o.loss.beta = *s.beta;
  o.kl = {.type = grpo::train::parse_kl_control(s.kl_control), .target = s.kl_target, .horizon = s.kl_horizon};
  if (s.rollout_is != "none") {
    o.loss.sampler_correction = {.mode = s.rollout_is == "token" ? grpo::SamplerCorrectionMode::token_truncate
                                                                  : grpo::SamplerCorrectionMode::sequence_truncate,
                                 .clip_max = s.rollout_is_threshold,
                                 .log_ratio_bound = 20.0,  // verl's SAFETY_BOUND
                                 .batch_normalize = s.rollout_is_batch_normalize};
  }
  if (!s.rollout_rs.empty()) o.loss.rollout_rejection = grpo::parse_rollout_rejection(s.rollout_rs, s.rollout_rs_threshold);
  if (s.adaptive_entropy) {
    o.adaptive_entropy = grpo::train::AdaptiveEntropyOptions{
        .target = s.entropy_target, .delta = s.entropy_coef_delta, .min = s.entropy_coef_min, .max = s.entropy_coef_max};
  }
  o.mu = s.mu;
  o.fp32_lm_head = s.fp32_lm_head;
  o.optimizer_precision = grpo::train::parse_optimizer_precision(s.optimizer_precision);
  o.pack_sequences = s.pack_sequences;
  o.micro_batches = s.micro_batches;
  o.ref_sync_every = s.ref_sync_every;
  o.ref_sync_alpha = s.ref_sync_alpha;
  o.dynamic_sampling_max_rounds = s.dynamic_sampling_max_rounds;
  o.dynamic_sampling_prompts = s.dynamic_sampling_prompts;
  o.dynamic_sampling_at_cap = grpo::train::parse_dynamic_sampling_cap(s.dynamic_sampling_at_cap);
  o.dynamic_sampling_metric = s.dynamic_sampling_metric;
  o.dynamic_sampling_per_domain = s.dynamic_sampling_per_domain;
  o.dynamic_sampling_filter = {.min_std = s.dynamic_sampling_min_std,
                               .mean_above = s.dynamic_sampling_mean_above,
                               .mean_below = s.dynamic_sampling_mean_below};
  for (const auto& domain : run.domains) {
    if (domain.dynamic_sampling_filter) o.dynamic_sampling_domain_filters[domain.name] = *domain.dynamic_sampling_filter;
  }
  if (!s.difficulty_mask.empty()) {
    GRPO_CHECK_CONFIG(s.difficulty_mask.size() == 2, "--difficulty-mask needs LOW,HIGH");
    o.difficulty_mask = std::pair(s.difficulty_mask[0], s.difficulty_mask[1]);
  }
  o.generation_chunks = s.generation_chunks;
  o.learning_rate = s.lr;
  o.weight_decay = s.weight_decay;
  o.warmup_steps = s.warmup_steps;
  o.lr_decay = grpo::train::parse_lr_decay(s.lr_decay);
  o.max_grad_norm = s.max_grad_norm;
  o.eval_samples = s.eval_samples;
  o.eval_problems = s.eval_problems;
  o.eval_temperature = s.eval_temperature;
  o.eval_top_p = s.eval_top_p;
  o.eval_top_k = s.eval_top_k;
  o.eval_min_p = s.eval_min_p;
  o.seed = s.seed;
  return o;
}

/// A value as YAML flow text (JSON strings, numbers, lists): what --config reads back as the same value.
inline std::string yaml_value(const FieldValue& value) {
  auto quote = [](const std::string& text) { return grpo::json_quoted(text); };
  return std::visit(
      [&](auto* v) -> std::string {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) return quote(*v);
        else if constexpr (std::is_same_v<T, fs::path>) return quote(v->string());
        else if constexpr (std::is_same_v<T, bool>) return *v ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::optional<double>>) return v->has_value() ? fmt::format("{}", **v) : "";
        else if constexpr (std::is_same_v<T, std::optional<std::string>>) return v->has_value() ? quote(**v) : "";
        else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::vector<std::string> items;
          for (const auto& item : *v) items.push_back(quote(item));
          return fmt::format("[{}]", fmt::join(items, ", "));
        } else if constexpr (std::is_same_v<T, std::vector<double>>) return fmt::format("[{}]", fmt::join(*v, ", "));
        else return fmt::format("{}", *v);
      },
      value);
}

/// config.yaml: every setting with the value in effect, then the domains and stages sections; --config reads it back.
inline void write_config(const fs::path& path, const Flags& flags, const RunConfig& run) {
  std::string text =
      "# The settings of this run as they took effect (config, --set and flags resolved); `r1_zero --config` on this\n"
      "# file runs the same run (give it an --output-dir). Commented lines are values the run did not set (its loss\n"
      "# recipe's, or the default reward list's): a rerun with another recipe takes that recipe's.\n";
  for (const Field& field : flags.fields) {
    const std::string key = config_key(field);
    if (!field.written) continue;
    if (!run.rewards_json.empty() && (key == "rewards" || key == "reward_weights")) continue;
    const std::string value = yaml_value(field.value);
    if (value.empty() || value == "[]" || value == "\"\"") continue;  // unset: the default applies
    // A value the recipe (or the default reward list) gave is a comment: a rerun with another recipe takes its own.
    text += fmt::format("{}{}: {}{}\n", run.derived.count(key) ? "# " : "", key, value,
                        run.derived.count(key) ? "  # not set: the recipe's or the default list's" : "");
  }
  if (!run.rewards_json.empty()) text += fmt::format("rewards: {}\n", run.rewards_json);
  if (!run.domains_json.empty()) text += fmt::format("domains: {}\n", run.domains_json);
  if (!run.stages_json.empty()) text += fmt::format("stages: {}\n", run.stages_json);
  grpo::io::write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

}  // namespace r1_zero
