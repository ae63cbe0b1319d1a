// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/run_settings.hpp>

#include <grpo/core/json_quote.hpp>
#include <grpo/io/atomic_file.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/loss/recipes.hpp>
#include <grpo/train/roll_config.hpp>

#include <torch/cuda.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace grpo::train {
namespace {

namespace fs = std::filesystem;

/// Options bound inside trainer.loss apply after the recipe fills it (parse_run_settings).
constexpr int kOverRecipe = 1;

/// The options a loss recipe supplies when they are not given (config.yaml writes those as comments).
const std::set<std::string> kRecipeKeys = {"beta", "kl_estimator", "epsilon", "epsilon_high", "entropy_coef",
                                           "policy_loss"};

/// A path option whose value must name an existing directory (or file).
OptionSpec existing(OptionSpec option, bool directory) {
  option.assign = [assign = option.assign, directory](const std::vector<std::string>& v) {
    const bool ok = directory ? fs::is_directory(v.at(0)) : fs::is_regular_file(v.at(0));
    GRPO_CHECK_CONFIG(ok, "expected an existing {}, got '{}'", directory ? "directory" : "file", v.at(0));
    assign(v);
  };
  return option;
}

/// The model option: a Hugging Face directory or a GGUF file (models::from_pretrained reads both).
OptionSpec existing_model(OptionSpec option) {
  option.assign = [assign = option.assign](const std::vector<std::string>& v) {
    const fs::path path = v.at(0);
    GRPO_CHECK_CONFIG(fs::is_directory(path) || (fs::is_regular_file(path) && path.extension() == ".gguf"),
                      "expected a model directory or a .gguf file, got '{}'", v.at(0));
    assign(v);
  };
  return option;
}

/// A string option whose value `accept` must take (its ConfigError, listing the valid names, is the error).
template <typename AcceptType>
OptionSpec named(std::string key, std::string& value, std::string help, AcceptType accept) {
  OptionSpec option = make_option(std::move(key), value, std::move(help), OptionCheck<std::string>{});
  option.assign = [&value, accept](const std::vector<std::string>& v) {
    accept(v.at(0));
    value = v.at(0);
  };
  return option;
}

/// An option for a symmetric clip C (0 = off) held as the range [-C, C].
OptionSpec symmetric_clip(std::string key, std::optional<std::pair<double, double>>& range, std::string help) {
  OptionSpec option = custom_option(std::move(key), std::move(help), "NUMBER");
  option.assign = [&range](const std::vector<std::string>& v) {
    const double c = option_number(v.at(0), at_least_zero());
    range = c > 0 ? std::optional(std::pair(-c, c)) : std::nullopt;
  };
  option.yaml = [&range] { return range ? fmt::format("{}", range->second) : std::string(); };
  return option;
}

OptionSpec with_aliases(OptionSpec option, std::vector<std::string> aliases, int phase) {
  option.aliases = std::move(aliases);
  option.phase = phase;
  return option;
}

}  // namespace

OptionTable run_option_table(RunSettings& s) {
  GrpoTrainerOptions& t = s.trainer;
  OptionTable table;
  auto add = [&table](OptionSpec option) { table.add(std::move(option)); };
  auto over_recipe = [](OptionSpec option, std::vector<std::string> aliases = {}) {
    return with_aliases(std::move(option), std::move(aliases), kOverRecipe);
  };

  // What to train.
  add(make_option("task", s.task,
                  "tiny (built-in), tiny_lookup (built-in; needs its lookup tool: --env lookup) or data (--model + "
                  "--data; implied by --model)",
                  one_of({"tiny", "tiny_lookup", "data"})));
  add(with_aliases(existing_model(make_option("model", s.model_dir,
                                              "Hugging Face model directory (config.json, safetensors, "
                                              "tokenizer.json), or a GGUF file (weights, tokenizer and chat template)")),
                   {"model_dir"}, 0));
  add(existing(make_option("data", s.data_path, "JSON/JSONL data set (ROLL, TRL/NuminaMath, GSM8K or --data-format fields)"),
               false));
  add(enum_option("data_format", s.data_format, "detect, roll, trl, gsm8k or fields"));
  add(make_option("prompt_field", s.prompt_field, "with --data-format fields: the prompt's field"));
  add(make_option("answer_field", s.answer_field, "with --data-format fields: the gold answer's field"));
  add(enum_option("on_bad_row", s.on_bad_row,
                  "stop or skip a malformed data row (skipped rows are counted, the first few reasons printed)"));
  add(make_option("unknown_tag", s.unknown_tag,
           "multi-domain data: a row whose tag (or 'domain' field) names no configured domain is an error, skipped "
           "(skip), or sent to the domain named here (math: the first math domain, as ROLL sends such rows to "
           "math_rule)"));
  add(make_option("dtype", s.dtype,
           "the model's dtype: fp32, or bf16 (bf16 compute; the weights optimised as --optimizer-precision says); "
           "fp16 needs a CUDA device",
           one_of({"fp32", "bf16", "fp16"})));
  add(make_option("device", s.device, "cpu, or cuda[:N] (needs a CUDA build of LibTorch; with several processes cuda, each "
                               "rank on cuda:LOCAL_RANK)"));
  add(make_option("gradient_checkpointing", s.gradient_checkpointing,
           "recompute each decoder layer in backward instead of keeping its activations: on, off, or auto (on for "
           "models of 100 M parameters or more)",
           one_of({"auto", "on", "off"})));
  add(enum_option("optimizer_precision", t.optimizer_precision,
                "with --dtype bf16: fp32_master (fp32 master weights and AdamW state) or compensated (the bf16 weights "
                "stepped in place with Kahan compensation and stochastically rounded bf16 moments: half the optimizer "
                "memory)"));
  add(make_option("fp32_lm_head", t.fp32_lm_head,
           "log-probs from fp32 logits when the model is bf16/fp16 (the aim of TRL's cast_lm_head_to_fp32)"));
  add(make_option("pack_sequences", t.pack_sequences, "log-prob passes without padding: each micro-batch's sequences packed "
                                               "into one row, each attending to itself"));
  add(make_option("lora_r", s.lora_r, "LoRA rank (0 = full fine-tuning); only the adapters train, the reference is the base",
           at_least_zero()));
  add(make_option("lora_alpha", s.lora_alpha, "LoRA alpha (scaling alpha / r)", positive()));
  add(make_option("lora_dropout", s.lora_dropout, "dropout on the LoRA adapters' input", within(0.0, 0.999)));
  add(make_option("lora_target_modules", s.lora_target_modules,
           "modules that get adapters: names (q_proj,v_proj), a regular expression, or all-linear (default: "
           "q_proj,v_proj)"));
  add(existing(make_option("lora_adapter", s.lora_adapter, "start from this peft LoRA adapter directory (adapter_config.json)"),
               true));
  add(make_option("held_out", s.held_out, "problems kept out of training for evaluation (per domain)", at_least_zero()));
  // Rollouts.
  add(make_option("steps", t.steps, "optimizer steps", positive()));
  add(make_option("prompts", t.prompts_per_step, "prompts per step (P)", positive()));
  add(make_option("group_size", t.group_size, "completions per prompt (G)", within(2, 1024)));
  add(make_option("max_new_tokens", s.max_new_tokens, "completion length limit (0: 8 tiny, 512 data)", at_least_zero()));
  add(make_option("temperature", t.sampling.temperature, "sampling temperature (also divides the trainer's logits)",
           within(1e-3, 10.0)));
  add(make_option("top_p", t.sampling.top_p, "nucleus sampling", within(1e-6, 1.0)));
  add(make_option("top_k", t.sampling.top_k, "top-k sampling (0 = off)", at_least_zero()));
  add(make_option("min_p", t.sampling.min_p, "min-p sampling (0 = off)", within(0.0, 1.0)));
  add(enum_option("sampling_noise", t.sampling.noise,
                  "keyed (a completion depends only on its seed, step, prompt and sample: the same with any number of "
                  "ranks, chunks or device) or generator (one noise tensor per batch and step, the draws before keyed "
                  "noise)"));
  // The objective: the recipe, then the values that override it.
  add(with_aliases(named("loss", s.loss, "loss recipe: grpo, dr_grpo, dapo, gspo or cispo (recipes.hpp)",
                         [](const std::string& v) { recipes::by_name(v, 1); }),
                   {"loss_type"}, 0));
  OptionSpec policy_loss = custom_option("policy_loss", "surrogate: a built-in policy loss type (ppo_clip, cispo, sapo, gmpo, ...) or a "
                                 "registered name (unset: the recipe's)", "NAME");
  policy_loss.assign = [&t](const std::vector<std::string>& v) { select_policy_loss(t.loss, v.at(0)); };
  policy_loss.yaml = [&t] {
    return json_quoted(t.loss.policy_loss_name.empty() ? std::string(to_string(t.loss.policy.type))
                                                       : t.loss.policy_loss_name);
  };
  add(over_recipe(std::move(policy_loss), {"loss_policy"}));
  add(named("advantage", s.advantage,
            "advantage estimator: group-relative (grpo, verl_grpo, dr_grpo, rloo, reinforce_pp_baseline, gpg, "
            "pass_at_k, opo, or a registered name) or token-level (reinforce_pp, remax: a greedy completion per "
            "prompt is the baseline, optimal_token_baseline, gae: PPO with a critic)",
            [&t](const std::string& v) { select_advantage(t, v); }));
  add(make_option("gamma", t.token_advantage.gamma, "reinforce_pp and gae: discount of the token returns",
                  within(0.0, 1.0)));
  add(make_option("gae_lambda", t.token_advantage.lambda,
                  "gae: GAE's lambda (1 = Monte-Carlo returns less the value, 0 = one-step TD)", within(0.0, 1.0)));
  // The PPO critic (advantage gae).
  add(existing(make_option("critic_model", s.critic_model,
                           "gae: start the critic from this checkpoint (…ForTokenClassification, "
                           "…ForSequenceClassification or a TRL value head; default: the policy with a new head)"),
               true));
  add(make_option("critic_lr", t.critic.learning_rate, "gae: the critic's AdamW learning rate (verl critic.optim.lr)",
                  at_least_zero()));
  add(make_option("critic_weight_decay", t.critic.weight_decay, "gae: the critic's AdamW weight decay",
                  at_least_zero()));
  add(make_option("critic_max_grad_norm", t.critic.max_grad_norm, "gae: the critic's gradient clipping (0 = off)",
                  at_least_zero()));
  add(make_option("critic_epochs", t.critic.epochs, "gae: the critic's optimizer steps per batch (verl ppo_epochs)",
                  positive()));
  add(make_option("critic_micro_batches", t.critic.micro_batches, "gae: the critic's micro-batches per step",
                  positive()));
  add(make_option("critic_warmup", t.critic_warmup, "gae: the first N steps train only the critic (ROLL critic_warmup)",
                  at_least_zero()));
  OptionSpec value_clip = custom_option("value_clip", "gae: the value loss's clip range around the old values (verl "
                                        "cliprange_value; 0 = off)", "NUMBER");
  value_clip.assign = [&t](const std::vector<std::string>& v) {
    const double c = option_number(v.at(0), at_least_zero());
    t.critic.loss.clip_range = c > 0 ? std::optional(c) : std::nullopt;
  };
  value_clip.yaml = [&t] { return fmt::format("{}", t.critic.loss.clip_range.value_or(0.0)); };
  add(std::move(value_clip));
  add(make_option("whiten_advantages", t.whiten_advantages,
           "whiten the advantages over the batch's completion tokens after the estimator (ROLL whiten_advantages)"));
  add(symmetric_clip("advantage_clip", t.advantage.advantage_clip,
                     "clamp group-relative advantages to [-C, C] (ROLL advantage_clip; 0 = off)"));
  add(symmetric_clip("reward_clip", t.advantage.reward_clip,
                     "clamp each reward total to [-C, C] before the estimator (ROLL reward_clip; 0 = off)"));
  OptionSpec dual_clip = custom_option("dual_clip", "dual clip c > 1 of ppo_clip for negative advantages (verl clip_ratio_c 3; ROLL "
                               "dual_clip_loss 1 + 2·pg_clip; 0 = off)", "NUMBER");
  dual_clip.assign = [&t](const std::vector<std::string>& v) {
    const double c = option_number(v.at(0), at_least_zero());
    t.loss.policy.dual_clip_c = c > 0 ? std::optional(c) : std::nullopt;
  };
  dual_clip.yaml = [&t] { return t.loss.policy.dual_clip_c ? fmt::format("{}", *t.loss.policy.dual_clip_c) : ""; };
  add(over_recipe(std::move(dual_clip)));
  add(make_option("otb_handle_zero_tail", t.token_advantage.handle_zero_tail,
           "optimal_token_baseline: a group's longest completion, when alone that long, gets baseline 0 past the "
           "second-longest (verl handle_zero_tail)"));
  add(over_recipe(make_option("beta", t.loss.beta, "KL coefficient to the reference policy (0 = no reference; unset: the "
                                            "recipe's)",
                       at_least_zero()),
                  {"loss_beta"}));
  OptionSpec kl_estimator = custom_option("kl_estimator", "k1, k2, k3, low_var_kl, ... (unset: the recipe's)", "NAME");
  kl_estimator.assign = [&t](const std::vector<std::string>& v) { t.loss.kl = parse_kl_estimator(v.at(0)); };
  kl_estimator.yaml = [&t] {
    return json_quoted(std::string(to_string(t.loss.kl.estimator)) + (t.loss.kl.straight_through ? "+" : ""));
  };
  add(over_recipe(std::move(kl_estimator), {"loss_kl_estimator"}));
  add(over_recipe(make_option("epsilon", t.loss.policy.epsilon_low, "clip range below (unset: the recipe's)", at_least_zero()),
                  {"loss_epsilon"}));
  add(over_recipe(make_option("epsilon_high", t.loss.policy.epsilon_high,
                       "clip range above (unset: the recipe's; with a symmetric recipe and --epsilon, --epsilon)",
                       at_least_zero()),
                  {"loss_epsilon_high"}));
  add(over_recipe(make_option("entropy_coef", t.loss.entropy_coef, "entropy bonus coefficient (unset: the recipe's)"),
                  {"loss_entropy_coef"}));
  add(make_option("mu", t.mu, "optimisation passes per batch (μ)", positive()));
  add(make_option("micro_batches", t.micro_batches, "gradient accumulation: micro-batches per step", positive()));
  add(make_option("ref_sync_every", t.ref_sync_every, "reference update period in steps (0 = frozen)", at_least_zero()));
  add(make_option("ref_sync_alpha", t.ref_sync_alpha, "reference update mix α (1 = copy)", within(0.0, 1.0)));
  // Which groups train.
  add(make_option("dynamic_sampling_max_rounds", t.dynamic_sampling_max_rounds,
           "DAPO dynamic sampling: drop groups without reward spread and sample up to this many rounds of prompts "
           "until P groups have spread (0 = off)",
           at_least_zero()));
  add(make_option("dynamic_sampling_prompts", t.dynamic_sampling_prompts, "prompts per round (0 = --prompts)",
           at_least_zero()));
  add(enum_option("dynamic_sampling_at_cap", t.dynamic_sampling_at_cap,
                "when the rounds run out: train on the groups found (none: skip), or skip the step"));
  add(make_option("dynamic_sampling_metric", t.dynamic_sampling_metric,
           "what must spread within a kept group: total (the reward total), accuracy (DAPO's acc: the correctness of "
           "the judged completions) or a reward's label"));
  add(make_option("dynamic_sampling_per_domain", t.dynamic_sampling_per_domain,
           "each domain keeps its share of the step's groups (ROLL filters per domain)"));
  add(make_option("dynamic_sampling_min_std", t.dynamic_sampling_filter.min_std,
           "a kept group's metric std must exceed this (DAPO 1e-8; ROLL std_filter std_threshold)", at_least_zero()));
  add(make_option("dynamic_sampling_mean_above", t.dynamic_sampling_filter.mean_above,
           "a kept group's metric mean must exceed this (ROLL mean_filter threshold_down)"));
  add(make_option("dynamic_sampling_mean_below", t.dynamic_sampling_filter.mean_below,
           "a kept group's metric mean must be below this (ROLL mean_filter threshold_up)"));
  OptionSpec difficulty_mask = custom_option("difficulty_mask", "LOW,HIGH: groups whose mean reward total is not strictly inside leave the loss "
                                     "(ROLL difficulty_mask)", "LOW,HIGH", OptionSpec::Arity::list);
  difficulty_mask.assign = [&t](const std::vector<std::string>& v) {
    std::vector<double> bounds;
    for (const std::string& text : v) bounds.push_back(option_number(text));
    GRPO_CHECK_CONFIG(bounds.size() == 2, "expected LOW,HIGH, got {} numbers", bounds.size());
    t.difficulty_mask = std::pair(bounds[0], bounds[1]);
  };
  difficulty_mask.yaml = [&t] {
    return t.difficulty_mask ? fmt::format("[{}, {}]", t.difficulty_mask->first, t.difficulty_mask->second) : "";
  };
  add(std::move(difficulty_mask));
  add(make_option("generation_chunks", t.generation_chunks,
           "sample each round's prompts in this many chunks (each with its own seed)", positive()));
  add(make_option("overlap_scoring", s.overlap_scoring,
           "score each chunk's completions (completion-scoped rewards) while the next chunk is sampled; the numbers "
           "equal --no-overlap-scoring with the same chunks"));
  // Pipelined rollouts (rollout_pipeline.hpp).
  OptionSpec max_staleness = custom_option(
      "max_staleness",
      "pipelined rollouts: a worker with its own copy of the weights samples and scores the next steps' batches "
      "while this one trains, each at most N updates behind (1 = verl-pipe's one step off; 0 = the pipeline on the "
      "synchronous schedule; unset = the synchronous trainer). Needs --off-policy-correction when N > 0",
      "N");
  max_staleness.assign = [&t](const std::vector<std::string>& v) {
    const double n = option_number(v.at(0), [](const double& x) {
      return x >= 0 && x == std::floor(x) ? std::string() : std::string("an integer >= 0");
    });
    t.max_staleness = static_cast<std::int64_t>(n);
  };
  max_staleness.yaml = [&t] { return t.max_staleness ? fmt::format("{}", *t.max_staleness) : std::string(); };
  add(std::move(max_staleness));
  add(enum_option("off_policy_correction", t.off_policy_correction,
                  "pipelined rollouts: decoupled (the trainer's log-probs recomputed as the proximal policy, "
                  "--rollout-is weighs by proximal/behaviour) or bypass (the PPO ratio against the sampler's "
                  "log-probs)"));
  add(make_option("generation_threads", t.generation_threads,
                  "pipelined rollouts: the worker's intra-op threads (0 = LibTorch's default)", at_least_zero()));
  add(make_option("rollout_ranks", s.rollout_ranks,
                  "pipelined rollouts on processes of their own: of scripts/launch.sh -n 2N, N ranks train and N "
                  "sample and score, each for one trainer rank, the weights sent over c10d after each update "
                  "(0 = every rank does both). Needs --max-staleness",
                  at_least_zero()));
  // KL.
  add(enum_option("kl_control", t.kl.type,
                "KL coefficient control: fixed or adaptive (β from --beta, moved towards --kl-target)"));
  add(make_option("kl_target", t.kl.target, "adaptive KL: target KL per token", positive()));
  add(make_option("kl_horizon", t.kl.horizon, "adaptive KL: horizon in sequences", positive()));
  add(make_option("kl_in_reward_coef", t.kl_in_reward.beta,
           "KL in the reward (verl use_kl_in_reward, ROLL add_token_level_kl): each token's reward gets -coef * KL "
           "to the reference (0 = off)",
           at_least_zero()));
  OptionSpec reward_estimator = custom_option("kl_in_reward_estimator", "KL in the reward: per-token estimator (k1, abs, k2, k3, low_var_kl; verl's '+' "
                                      "forms have the same value)", "NAME");
  reward_estimator.assign = [&t](const std::vector<std::string>& v) {
    t.kl_in_reward.estimator = parse_kl_estimator(v.at(0)).estimator;
  };
  reward_estimator.yaml = [&t] { return json_quoted(std::string(to_string(t.kl_in_reward.estimator))); };
  add(std::move(reward_estimator));
  add(enum_option("kl_in_reward_control", t.kl_in_reward.control.type,
                "KL in the reward: fixed or adaptive (the coefficient moves towards --kl-in-reward-target)"));
  add(make_option("kl_in_reward_target", t.kl_in_reward.control.target,
           "KL in the reward, adaptive: target KL (sequence mean of token-mean KL)", positive()));
  add(make_option("kl_in_reward_horizon", t.kl_in_reward.control.horizon, "KL in the reward, adaptive: horizon in sequences",
           positive()));
  // Entropy.
  add(with_aliases(make_option("adaptive_entropy", s.adaptive_entropy,
                        "adaptive entropy bonus (TRL use_adaptive_entropy): the coefficient starts at --entropy-coef "
                        "and moves by --entropy-coef-delta per optimizer step, up while the entropy is at or below "
                        "--entropy-target, down otherwise, within [--entropy-coef-min, --entropy-coef-max]; the bonus "
                        "applies only while the entropy is at or below the target"),
                   {"use_adaptive_entropy"}, 0));
  add(make_option("entropy_target", s.entropy_control.target, "adaptive entropy: target token-mean entropy (nats)",
           at_least_zero()));
  add(make_option("entropy_coef_delta", s.entropy_control.delta, "adaptive entropy: coefficient step per optimizer step",
           at_least_zero()));
  add(make_option("entropy_coef_min", s.entropy_control.min, "adaptive entropy: lower bound of the coefficient",
           at_least_zero()));
  add(make_option("entropy_coef_max", s.entropy_control.max, "adaptive entropy: upper bound of the coefficient",
           at_least_zero()));
  // verl rollout correction.
  OptionSpec rollout_is = make_option("rollout_is", s.rollout_is,
                               "verl rollout correction: weigh the policy loss by the trainer/sampler ratio per token "
                               "or per sequence, truncated at --rollout-is-threshold (none = off)",
                               one_of({"none", "token", "sequence"}));
  rollout_is.assign = [assign = rollout_is.assign, &s, &t](const std::vector<std::string>& v) {
    assign(v);  // checks and stores the name
    t.loss.sampler_correction = s.rollout_is == "none"    ? SamplerCorrectionOptions{}
                                : s.rollout_is == "token" ? verl_rollout_correction(SamplerCorrectionMode::token_truncate)
                                                          : verl_rollout_correction(SamplerCorrectionMode::sequence_truncate);
  };
  add(over_recipe(std::move(rollout_is)));
  OptionSpec threshold = make_option("rollout_is_threshold", t.loss.sampler_correction.clip_max,
                              "rollout correction: upper bound of the IS weights (default: verl's 2)", positive());
  threshold.yaml = [&s, &t] {
    return s.rollout_is == "none" ? std::string() : fmt::format("{}", t.loss.sampler_correction.clip_max);
  };
  add(over_recipe(std::move(threshold)));
  add(over_recipe(make_option("rollout_is_batch_normalize", t.loss.sampler_correction.batch_normalize,
                       "rollout correction: divide the IS weights by their batch mean")));
  add(make_option("rollout_rs", s.rollout_rs,
           "verl rejection sampling: drop tokens or sequences by trainer/sampler mismatch, e.g. token_k1 or "
           "seq_mean_k3,token_k1 (empty = off; thresholds in --rollout-rs-threshold)"));
  add(make_option("rollout_rs_threshold", s.rollout_rs_threshold,
           "rejection thresholds, one per --rollout-rs option or one shared: LOWER_UPPER ratio band for k1, an upper "
           "bound for k2/k3"));
  // Curriculum.
  add(make_option("curriculum_schedule", s.curriculum_schedule, "difficulty curriculum: none, linear or staged",
           one_of({"none", "linear", "staged"})));
  add(make_option("curriculum_start", s.curriculum_start, "linear: difficulty MIN,MAX at --curriculum-start-step"));
  add(make_option("curriculum_end", s.curriculum_end, "linear: difficulty MIN,MAX at --curriculum-end-step"));
  add(make_option("curriculum_start_step", s.curriculum_start_step, "linear: step where the range starts widening"));
  add(make_option("curriculum_end_step", s.curriculum_end_step, "linear: step where it reaches --curriculum-end"));
  add(make_option("curriculum_stages", s.curriculum_stages, "staged: STEP:MIN:MAX,... (from STEP on, difficulties MIN..MAX)"));
  add(make_option("curriculum_filter_window", s.curriculum_filter_window,
           "retire a prompt after this many consecutive all-wrong or all-right groups (0 = off)", at_least_zero()));
  add(make_option("curriculum_filter_retire", s.curriculum_filter_retire,
           "which prompts the filter retires: both, unsolved or solved", one_of({"both", "unsolved", "solved"})));
  add(make_option("curriculum_filter_retire_steps", s.curriculum_filter_retire_steps,
           "steps a retired prompt stays out (0 = for the rest of the run)", at_least_zero()));
  // Rewards.
  // Multi-turn tool rollouts.
  add(make_option("env", s.env,
                  "multi-turn tool rollouts: the environment whose tools the model calls between turns (calculator, "
                  "python, tools = both, no_tools; lookup with --task tiny_lookup); '' = single-turn completions"));
  add(make_option("max_turns", s.multi_turn.max_turns, "with --env: assistant turns per trajectory (default 2 for "
                  "--task tiny_lookup)", positive()));
  add(make_option("max_tool_calls_per_turn", s.multi_turn.max_calls_per_turn,
                  "with --env: tool calls answered per turn (later ones get an error reply)", positive()));
  add(make_option("max_tool_reply_tokens", s.multi_turn.max_reply_tokens,
                  "with --env: a tool reply's tokens (longer replies are cut)", positive()));
  add(make_option("max_trajectory_tokens", s.multi_turn.max_total_tokens,
                  "with --env: completion tokens of a trajectory, sampled turns and tool replies together (default 24 "
                  "for --task tiny_lookup)", positive()));
  add(make_option("tool_step_timeout", s.multi_turn.step_timeout_seconds,
                  "with --env: seconds for the tool calls of one turn (over it the trajectory ends)", positive()));
  add(make_option("trajectory_timeout", s.multi_turn.trajectory_timeout_seconds,
                  "with --env: seconds of a trajectory's wall time", positive()));
  add(make_option("tool_threads", s.multi_turn.tool_threads,
                  "with --env: trajectories whose tools run at the same time", positive()));
  add(make_option("failed_tool_call_reward", s.multi_turn.failed_call_reward,
                  "with --env: added to a turn's reward per failed tool call (negative: a penalty; logged per turn)"));
  add(make_option("rewards", s.rewards, "registry reward names (in a config also a list of entries: [{name: accuracy}, ...])"));
  add(make_option("reward_weights", s.reward_weights, "one weight per reward (default: 1 each; 1,0.2 for the default list)"));
  add(existing(make_option("reward_config", s.reward_config, "JSON reward list (overrides --rewards)"), false));
  // Training a "reward_model" reward on the policy's own samples (reward_model_refresh.hpp).
  add(make_option("rm_refresh_every", s.rm_refresh.every_steps,
                  "train each reward_model reward every N steps on pairs of the policy's completions (right preferred to "
                  "wrong by the run's rule for correct: iterated RLHF; 0 = off)",
                  at_least_zero()));
  add(make_option("rm_refresh_pairs_per_prompt", s.rm_refresh.pairs_per_prompt,
                  "reward-model refresh: pairs drawn from each prompt's group every step", positive()));
  add(make_option("rm_refresh_buffer", s.rm_refresh.buffer_pairs,
                  "reward-model refresh: the newest pairs kept and trained on", positive()));
  add(make_option("rm_refresh_epochs", s.rm_refresh.training.epochs,
                  "reward-model refresh: passes over the pairs at each refresh", positive()));
  add(make_option("rm_refresh_batch_size", s.rm_refresh.training.batch_size,
                  "reward-model refresh: pairs per AdamW step", positive()));
  add(make_option("rm_refresh_lr", s.rm_refresh.training.learning_rate,
                  "reward-model refresh: AdamW learning rate", at_least_zero()));
  // Optimiser.
  add(make_option("lr", t.learning_rate, "AdamW learning rate", at_least_zero()));
  add(make_option("weight_decay", t.weight_decay, "AdamW weight decay", at_least_zero()));
  add(make_option("max_grad_norm", t.max_grad_norm, "gradient clipping (0 = off)", at_least_zero()));
  add(make_option("warmup_steps", t.warmup_steps, "linear learning-rate warm-up", at_least_zero()));
  add(enum_option("lr_decay", t.lr_decay, "constant, linear or cosine"));
  // Output.
  OptionSpec output = make_option("output_dir", s.output_dir,
                           "metrics, TensorBoard events, samples, checkpoints and the resolved config.yaml");
  output.written = false;  // a rerun of config.yaml must not write into the run it repeats
  add(std::move(output));
  add(make_option("log_every", s.log_every, "console line period in steps", positive()));
  add(make_option("log_completions", s.log_completions, "completions per step written to completions.jsonl",
           at_least_zero()));
  add(make_option("save_every", s.save_every, "checkpoint period in steps (0 = only at the end)", at_least_zero()));
  add(make_option("keep_last", s.keep_last, "checkpoints kept", at_least_zero()));
  add(make_option("eval_every", s.eval_every, "evaluation period in steps (0 = start and end only)", at_least_zero()));
  add(make_option("eval_samples", t.eval_samples, "samples per held-out problem (k of pass@k and maj@k)", positive()));
  add(make_option("eval_problems", t.eval_problems, "held-out problems evaluated (0 = all)", at_least_zero()));
  add(make_option("eval_temperature", t.eval_temperature,
                  "evaluation sampling temperature (0 = greedy; unset: --temperature)", at_least_zero()));
  add(make_option("eval_top_p", t.eval_top_p, "evaluation nucleus sampling", within(1e-6, 1.0)));
  add(make_option("eval_top_k", t.eval_top_k, "evaluation top-k sampling (0 = off)", at_least_zero()));
  add(make_option("eval_min_p", t.eval_min_p, "evaluation min-p sampling (0 = off)", within(0.0, 1.0)));
  add(make_option("eval_greedy", t.eval_greedy,
                  "each evaluation also decodes every held-out problem once greedily (eval/greedy_accuracy beside "
                  "pass@1 at the evaluation temperature)"));
  add(make_option("validation_data", s.validation_data,
           "files whose rows are the held-out problems (ROLL's validation set), routed to domains like training "
           "rows; every training row then trains (--held-out is not used)"));
  OptionSpec resume = make_option("resume", s.resume, "continue from the newest checkpoint in --output-dir");
  resume.written = false;
  add(std::move(resume));
  add(make_option("tensorboard", s.tensorboard, "write TensorBoard event files"));
  add(make_option("seed", t.seed, "seed of everything random"));
  add(make_option("threads", s.threads, "intra-op threads (0 = 1 for the tiny task, else cores / processes)",
           at_least_zero()));
  OptionSpec roll = existing(make_option("roll_config", s.roll_config,
                         "a ROLL rlvr_config.yaml read as these settings (keys ROLL and this run share; every other "
                         "key is listed with the reason it is not used); flags and --config win over it"),
                             false);
  roll.written = false;
  add(std::move(roll));
  return table;
}

namespace {

/// --device, --dtype and the LoRA flags together, before anything is loaded.
void check_model_settings(const RunSettings& s) {
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
  GRPO_CHECK_CONFIG(!s.trainer.fp32_lm_head || s.dtype != "fp32",
                    "--fp32-lm-head: the model is already fp32 (--dtype fp32)");
  if (s.trainer.optimizer_precision == OptimizerPrecision::compensated) {
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

/// --roll-config: the ROLL file's settings for the options nothing else gives, and its domains when there are none.
void add_roll_config(const OptionTable& table, const fs::path& path, std::map<std::string, GivenValue>& given,
                     RunSettings& s) {
  const io::ConfigNode root = io::parse_config(io::read_file(path), path.string());
  const RollConversion conversion = convert_roll_config(root);
  for (const RollSetting& setting : conversion.settings) {
    table.add_fallback(given, setting.key, setting.values, setting.source);
  }
  if (!conversion.unknown_tag.empty()) {
    table.add_fallback(given, "unknown_tag", {conversion.unknown_tag}, path.string() + " (converted domains)");
  }
  if (s.domains.empty() && !conversion.domains_yaml.empty()) {
    const io::ConfigNode converted = io::parse_config(conversion.domains_yaml, path.string() + " (converted domains)");
    s.domains = read_domains(converted.at("domains"));
    s.domains_json = io::to_json(converted.at("domains"));
  }
  s.roll_unmapped = conversion.unmapped;
}

/// What depends on other settings: the task, the completion limit, the recipe and the options over it, the reward
/// weights, the controllers. Throws ConfigError for combinations that cannot run.
void resolve(RunSettings& s, const OptionTable& table, const std::map<std::string, GivenValue>& given) {
  check_model_settings(s);
  if (!s.model_dir.empty()) s.task = "data";
  const bool lookup = s.task == "tiny_lookup", tiny = s.task == "tiny" || lookup;
  if (lookup && s.env.empty()) s.env = "lookup";
  GRPO_CHECK_CONFIG(s.task != "tiny" || s.env.empty(), "--env needs --task tiny_lookup or data (the tiny task has no tools)");
  GRPO_CHECK_CONFIG(!lookup || s.env == "lookup" || s.env == "no_tools",
                    "--task tiny_lookup: --env must be lookup (its tool) or no_tools (the control run), got '{}'", s.env);
  GRPO_CHECK_CONFIG(s.env != "lookup" || lookup, "--env lookup needs --task tiny_lookup");
  if (lookup) {  // the tiny model has 32 positions: prompt 8 + call 4 + reply 3 + answer 4 fit with room
    if (!given.contains("max_turns")) s.multi_turn.max_turns = 2;
    if (!given.contains("max_trajectory_tokens")) s.multi_turn.max_total_tokens = 24;
    if (!given.contains("rewards") && s.rewards_json.empty() && s.reward_config.empty()) {
      s.rewards = {"accuracy"};  // its answers have no <think> block for the format reward
      s.reward_weights = {1.0};
    }
  }
  s.multi_turn.validate();
  GRPO_CHECK_CONFIG(tiny || (!s.model_dir.empty() && (!s.data_path.empty() || !s.domains.empty())),
                    "--task data needs --model DIR and --data FILE (or a config with domains)");
  GRPO_CHECK_CONFIG(!tiny || s.domains.empty(), "a config with domains needs --model DIR");
  GRPO_CHECK_CONFIG(!tiny || s.validation_data.empty(), "--validation-data needs --task data (--model and --data)");
  if (s.max_new_tokens == 0) s.max_new_tokens = tiny ? 8 : 512;
  if (tiny && s.held_out == 0) s.held_out = 256;
  GrpoTrainerOptions& t = s.trainer;
  t.sampling.max_new_tokens = s.max_new_tokens;
  // The recipe, then the options given over it; those not given keep the recipe's values (config.yaml writes them
  // as comments, so that a rerun with another recipe takes that recipe's).
  t.loss = recipes::by_name(s.loss, s.max_new_tokens);
  const bool symmetric = t.loss.policy.epsilon_low == t.loss.policy.epsilon_high;
  table.apply(given, kOverRecipe);
  if (symmetric && given.contains("epsilon") && !given.contains("epsilon_high")) {
    t.loss.policy.epsilon_high = t.loss.policy.epsilon_low;
  }
  for (const std::string& key : kRecipeKeys) {
    if (!given.contains(key)) s.derived.insert(key);
  }
  if (!s.rollout_rs.empty()) t.loss.rollout_rejection = parse_rollout_rejection(s.rollout_rs, s.rollout_rs_threshold);
  t.adaptive_entropy = s.adaptive_entropy ? std::optional(s.entropy_control) : std::nullopt;
  for (const auto& domain : s.domains) {
    if (domain.dynamic_sampling_filter) t.dynamic_sampling_domain_filters[domain.name] = *domain.dynamic_sampling_filter;
  }
  GRPO_CHECK_CONFIG(s.rollout_ranks == 0 || t.max_staleness,
                    "--rollout-ranks {}: rollout ranks collect a pipelined run's batches; give --max-staleness",
                    s.rollout_ranks);
  s.rm_refresh.validate();
  if (s.rm_refresh.every_steps > 0) {
    GRPO_CHECK_CONFIG(s.domains.empty(), "--rm-refresh-every: not with domains (each domain's reward set would train its "
                      "own copy on every domain's completions); give the run one reward list");
    GRPO_CHECK_CONFIG(!t.max_staleness, "--rm-refresh-every with --max-staleness: the pipeline's worker scores the next "
                      "batches while the reward model trains, so which weights score them would depend on timing");
  }
  GRPO_CHECK_CONFIG(s.reward_weights.empty() || (s.rewards_json.empty() && s.reward_config.empty()),
                    "--reward-weights weighs --rewards names; with reward entries ({}) give each entry its 'weight'",
                    s.rewards_json.empty() ? "--reward-config" : s.rewards_source);
  if (s.rewards_json.empty() && s.reward_config.empty()) {
    if (s.reward_weights.empty()) {
      s.reward_weights = s.rewards_given ? std::vector<double>(s.rewards.size(), 1.0) : kDefaultRewardWeights;
      s.derived.insert("reward_weights");
      if (!s.rewards_given) s.derived.insert("rewards");  // the default list and its weights go together
    }
    GRPO_CHECK_CONFIG(s.reward_weights.size() == s.rewards.size(), "--reward-weights: {} weights for {} rewards ({})",
                      s.reward_weights.size(), s.rewards.size(), fmt::join(s.rewards, ", "));
  }
  t.validate();
}

}  // namespace

bool parse_run_settings(RunSettings& s, std::span<const std::string> args, std::string_view usage) {
  const OptionTable table = run_option_table(s);
  CommandLine command_line = table.parse_command_line(args);
  if (command_line.help) {
    std::cout << table.help(usage);
    return false;
  }
  std::map<std::string, GivenValue>& given = command_line.given;
  s.rewards_given = given.contains("rewards");
  if (command_line.config || !command_line.overrides.empty()) {
    if (command_line.config) {
      GRPO_CHECK_CONFIG(fs::is_regular_file(*command_line.config), "--config: expected an existing file, got '{}'",
                        command_line.config->string());
      s.config_path = *command_line.config;
    }
    io::ConfigNode root =
        command_line.config ? io::load_layered_config(*command_line.config) : io::parse_config("{}", "--set");
    for (const std::string& assignment : command_line.overrides) io::apply_config_override(root, assignment);
    // The sections that are not options: domains, stages, and a reward list of entries.
    table.add_config(root, given, [&](const std::string& key, const io::ConfigNode& node) {
      if (key == "domains" || key == "stages") return true;
      if (key != "rewards" || !node.is_list() || node.items().empty() || !node.items().front().is_map()) return false;
      node.mark_read();  // RewardSet::from_config reads and checks the entries
      s.rewards_given = true;
      if (given.contains("rewards")) return true;  // the command line's --rewards wins
      s.rewards_json = io::to_json(node);  // entries: RewardSet::from_config reads and checks them
      s.rewards_source = node.source();
      return true;
    });
    s.rewards_given = s.rewards_given || given.contains("rewards");
    if (const auto* domains = root.find("domains")) {
      s.domains = read_domains(*domains);
      s.domains_json = io::to_json(*domains);
    }
    if (const auto* stages = root.find("stages")) {
      s.trainer.stages = read_context_stages(*stages);
      s.stages_json = io::to_json(*stages);
    }
    io::reject_unread_keys(root);
  }
  if (const auto roll = given.find("roll_config"); roll != given.end()) {
    table.apply({{"roll_config", roll->second}});
    add_roll_config(table, s.roll_config, given, s);
  }
  table.apply(given, 0);
  resolve(s, table, given);
  return true;
}

void write_run_config(const fs::path& path, RunSettings& s) {
  const OptionTable table = run_option_table(s);
  std::string text =
      "# The settings of this run as they took effect (config, --set and flags resolved); `--config` on this file\n"
      "# runs the same run (give it an --output-dir). Commented lines are values the run did not set (its loss\n"
      "# recipe's, or the default reward list's): a rerun with another recipe takes that recipe's.\n";
  for (const OptionSpec& option : table.options()) {
    if (!option.written) continue;
    if (!s.rewards_json.empty() && (option.key == "rewards" || option.key == "reward_weights")) continue;
    const std::string value = option.yaml();
    if (value.empty() || value == "[]" || value == "\"\"") continue;  // unset: the default applies
    const bool derived = s.derived.contains(option.key);
    text += fmt::format("{}{}: {}{}\n", derived ? "# " : "", option.key, value,
                        derived ? "  # not set: the recipe's or the default list's" : "");
  }
  if (!s.rewards_json.empty()) text += fmt::format("rewards: {}\n", s.rewards_json);
  if (!s.domains_json.empty()) text += fmt::format("domains: {}\n", s.domains_json);
  if (!s.stages_json.empty()) text += fmt::format("stages: {}\n", s.stages_json);
  io::write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

}  // namespace grpo::train
