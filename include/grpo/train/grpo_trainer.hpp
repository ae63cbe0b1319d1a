// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer: one GRPO run as library parts, with its step split into public phases so that the caller owns the
// loop. A step is
//
//   begin_step(step)        the context stage of the step (completion limit, G, learning rate) and the learning rate
//   collect_groups(step)    rounds of prompts from the PromptSource → G completions each from the Generator (this
//                           rank's shard, in chunks) → scored and shaped by the StepScorer (overlapped with sampling
//                           when it prefetches) → pass rates to the source → the GroupSelection: dynamic sampling keeps
//                           groups with spread, the difficulty mask marks which kept groups reach the loss
//                           → ReMax's greedy completion per prompt (a generation request at temperature 0, scored by
//                           the same scorer) → the log-prob pass: the rollout policy's and the reference's log-probs
//                           of the kept completions, when anything needs them (μ > 1, rollout rejection, KL in the
//                           reward, the optimal token baseline, β > 0), and the critic's values (PPO)
//   advantages(batch)       group-relative advantages of the kept groups, or a token-level estimator's (GAE on the
//                           critic's values, with its returns); with KL in the reward, on the KL-shaped rewards
//   policy_update(...)      the critic's update towards the returns (PPO); μ passes × micro-batches with the whole
//                           (all ranks') batch's normaliser, gradient all-reduce, clipping, AdamW, TR-DPO reference
//                           sync (not during the critic's warm-up)
//   finish_step(...)        step metrics reduced over ranks (TRL/verl names), adaptive KL (of the loss term and of
//                           the reward), metric-triggered stage switches, on_step_end callbacks
//
// step(step) runs the five in order. The generator (default: the KV-cache Sampler on the model), the optimizer
// (default: AdamW) and PPO's value model are parts the caller may pass in (GrpoTrainerParts). evaluate(step) samples
// the held-out problems and grades them by the scorer's correctness rule (the one training and the pass-rate filter
// use); save/restore write and read a checkpoint with everything a bit-exact resume needs (model, optimizer, RNG,
// reference when synced, critic, KL coefficient, context stage, the prompt source's state). Every rank calls every phase (they hold collectives) except evaluate, which needs none.
//
//   grpo::train::GrpoTrainer trainer(model, source, scorer, group, options);
//   trainer.add_callback(std::make_shared<grpo::train::MetricsLog>(dir / "metrics.jsonl", dir / "tensorboard"));
//   for (std::int64_t step = trainer.restore(checkpoints) + 1; step <= options.steps; ++step) {
//     trainer.step(step);
//     if (step % 50 == 0) trainer.save(checkpoints, step);
//   }
#pragma once

#include <grpo/advantage/group_advantage.hpp>
#include <grpo/core/enum_names.hpp>
#include <grpo/advantage/token_advantages.hpp>
#include <grpo/kl/kl_penalty.hpp>
#include <grpo/loss/grpo_loss.hpp>
#include <grpo/policy/policy.hpp>
#include <grpo/policy/rollout.hpp>
#include <grpo/policy/sampler.hpp>
#include <grpo/train/checkpoint.hpp>
#include <grpo/train/context_schedule.hpp>
#include <grpo/train/critic.hpp>
#include <grpo/train/distributed.hpp>
#include <grpo/train/dynamic_sampling.hpp>
#include <grpo/train/evaluation.hpp>
#include <grpo/train/generator.hpp>
#include <grpo/train/group_selection.hpp>
#include <grpo/train/entropy_controller.hpp>
#include <grpo/train/kl_controller.hpp>
#include <grpo/train/lr_schedule.hpp>
#include <grpo/train/master_weights.hpp>
#include <grpo/train/metrics_writer.hpp>
#include <grpo/train/prompt_source.hpp>
#include <grpo/train/rollout_pipeline.hpp>
#include <grpo/train/rollout_ranks.hpp>
#include <grpo/train/step_scorer.hpp>
#include <grpo/train/trained_model.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace grpo::train {

/// KL in the reward (verl algorithm.use_kl_in_reward with kl_ctrl and kl_penalty; ROLL add_token_level_kl with
/// init_kl_coef, target_kl and kl_horizon; TRL RLOO's β·KL in the reward): every completion token's reward gets
/// −β_r·KL_t, KL_t the estimator on the rollout policy's log-probs (the old ones, before this step's update) against
/// the reference's. A token-level estimator takes these token rewards; a group-relative one takes their sum,
/// total − β_r·Σ_t KL_t, as verl's grpo and rloo sum the token rewards. With adaptive control β_r moves after each
/// step by kl_controller.hpp's rule, the measured KL being the mean over sequences of each sequence's token-mean KL
/// (verl and ROLL apply_kl_penalty); sequences without tokens are left out of that mean (verl and ROLL count them as
/// 0), and a step with none leaves β_r as it was. Independent of the KL loss term (GrpoTrainerOptions::kl).
struct KlInRewardOptions {
  double beta = 0.0;                        ///< β_r's initial value (0 = off; > 0 builds the frozen reference)
  KlControlOptions control;                 ///< how β_r moves (fixed, or adaptive towards a target KL)
  KlEstimator estimator = KlEstimator::k1;  ///< verl and ROLL kl_penalty default "kl" (k1)

  bool enabled() const { return beta > 0.0; }
};

/// What a pipelined run (GrpoTrainerOptions::max_staleness > 0) does about batches sampled by older weights than the
/// ones that train on them. The behaviour log-probs are the sampler's (Rollout::sampler_log_probs, recorded at the
/// trainer's temperature from the full distribution, before top-k/top-p filtering).
///   decoupled  the decoupled PPO objective (Hilton et al. 2022, "Batch size-invariance for policy optimization"; AReaL,
///              verl's rollout correction): the proximal policy is the trainer's weights when the batch trains (its
///              log-probs recomputed then: the old log-prob pass), the PPO ratio π_θ/π_prox clipped as usual, and each
///              token's loss weighed by π_prox/π_behave through loss.sampler_correction (truncated or masked), or
///              filtered by loss.rollout_rejection; one of the two must be set.
///   bypass     the behaviour policy is the proximal one: the old log-probs are the sampler's, so the PPO ratio is
///              π_θ/π_behave and its clipping bounds the whole drift (verl's bypass mode); no recomputation.
///   none       no correction: refused with max_staleness > 0 (TRL's async GRPO without one, trl#6945).
enum class OffPolicyCorrection { none, decoupled, bypass };

namespace detail {
inline constexpr ::grpo::detail::EnumNames<OffPolicyCorrection, 3> kOffPolicyCorrectionNames{{
    {OffPolicyCorrection::none, "none"},
    {OffPolicyCorrection::decoupled, "decoupled"},
    {OffPolicyCorrection::bypass, "bypass"},
}};
}  // namespace detail
GRPO_ENUM_NAMES(OffPolicyCorrection, detail::kOffPolicyCorrectionNames, "off-policy correction",
                parse_off_policy_correction);

struct GrpoTrainerOptions {
  std::int64_t steps = 200;             ///< the run's length: the learning-rate schedule's total
  std::int64_t prompts_per_step = 32;   ///< P: groups one step trains on (over all ranks)
  std::int64_t group_size = 8;          ///< G: completions per prompt (a context stage may change it)
  /// temperature (also divides the trainer's logits: one temperature for sampler and policy), top_k, top_p, min_p
  /// and max_new_tokens (the limit when `stages` is empty). eos_token_ids, pad_token_id and seed are set by the
  /// trainer from the PromptSource and `seed`.
  SamplerOptions sampling;
  /// DeepScaleR-style context stages (context_schedule.hpp); empty = one stage of sampling.max_new_tokens.
  std::vector<ContextStage> stages;
  /// The loss (a recipe, e.g. recipes::dapo(), with any changes). loss.beta is the KL term's coefficient, its one
  /// owner: the KL controller starts there (`kl` says how it moves) and each step's loss uses the controller's β;
  /// β > 0 makes a frozen copy of the starting policy the reference. For dr_grpo, its max_completion_length is the
  /// stage's limit.
  GrpoLossOptions loss;
  GroupAdvantageOptions advantage;
  /// A token-level estimator instead of `advantage` (token_advantages.hpp): on the token rewards, each completion's
  /// total on its last token (minus β_r·KL per token with kl_in_reward). Completions without a total get 0.
  /// reinforce_pp whitens over every rank's completion tokens; remax generates and scores one greedy completion per prompt
  /// (scored alone, by the same scorer); optimal_token_baseline computes Σπ² in the log-prob pass. `advantage`
  /// still gives the logged group statistics (frac_reward_zero_std). gae (PPO) needs a critic (GrpoTrainerParts::
  /// critic): GAE on its values, whitened over every rank's tokens (verl always whitens GAE's advantages), and its
  /// returns the critic's targets.
  TokenAdvantageOptions token_advantage;
  /// The PPO critic's optimiser, clip range and loss (critic.hpp), with advantage gae.
  CriticOptions critic;
  /// The first critic_warmup steps train only the critic (ROLL critic_warmup; verl's trainer.critic_warmup counts
  /// from step 1, so its N is N − 1 critic-only steps): the policy, its optimizer, the KL loss term's and the entropy
  /// controllers stay as they are. KL in the reward is measured and its adaptive β_r moves, as verl's apply_kl_penalty
  /// does every step; the learning-rate schedule counts these steps too (verl and ROLL step the actor's scheduler
  /// only when the actor trains: give warmup_steps and steps counting them).
  std::int64_t critic_warmup = 0;
  /// ROLL whiten_advantages (roll/utils/functionals.py compute_advantage): the advantages whitened over the batch's
  /// completion tokens (masked_whiten.hpp) after the estimator; a sequence's advantage counts once per token. Every
  /// rank's completions, as REINFORCE++'s and GAE's whitening.
  bool whiten_advantages = false;
  KlInRewardOptions kl_in_reward;
  /// How loss.beta moves over the run: fixed, or adaptive towards a target KL.
  KlControlOptions kl;
  /// Adaptive entropy control (TRL use_adaptive_entropy): the entropy bonus coefficient starts at
  /// loss.entropy_coef and follows entropy_controller.hpp's rule, applied only while the entropy is at or below the
  /// target. Unset: loss.entropy_coef is fixed.
  std::optional<AdaptiveEntropyOptions> adaptive_entropy;
  std::int64_t mu = 1;                  ///< optimisation passes over each batch; > 1 uses the old log-probs
  std::int64_t micro_batches = 1;       ///< gradient accumulation: micro-batches per pass (one optimizer step each pass)
  std::int64_t ref_sync_every = 0;      ///< TR-DPO: move the reference towards the policy every N steps (0 = never)
  double ref_sync_alpha = 1.0;          ///< ... by this mix (1 = copy)
  /// DAPO dynamic sampling: rounds of `dynamic_sampling_prompts` (0 = P) prompts until P groups have reward spread,
  /// at most this many rounds (0 = off: one round, every group kept).
  std::int64_t dynamic_sampling_max_rounds = 0;
  std::int64_t dynamic_sampling_prompts = 0;
  DynamicSamplingCap dynamic_sampling_at_cap = DynamicSamplingCap::train;
  /// What must spread within a group: "total" (the final reward total, penalties included), "accuracy" (the
  /// scorer's correctness of each judged completion: DAPO's and verl's `metric: acc`; alias "acc"), or a reward's
  /// label (its value; a completion without it has none).
  std::string dynamic_sampling_metric = "total";
  /// Each domain keeps its share of the step's groups (dynamic_sampling.hpp), as ROLL filters per domain.
  bool dynamic_sampling_per_domain = false;
  /// Which groups count as informative (dynamic_sampling.hpp GroupFilter): DAPO's std > 1e-8 by default; ROLL's
  /// std_filter and mean_filter thresholds.
  GroupFilter dynamic_sampling_filter;
  /// A domain's own filter (by domain name; ROLL's per-domain rewards.<domain>.query_filter_config); domains not
  /// listed use dynamic_sampling_filter. A name that is not one of the prompt source's domains is a ConfigError.
  std::map<std::string, GroupFilter> dynamic_sampling_domain_filters;
  /// ROLL difficulty_mask (roll/utils/functionals.py): the completions of a group whose mean reward total is not
  /// strictly inside (low, high) leave the loss and its normaliser (they stay in the metrics). Unset: off.
  std::optional<std::pair<double, double>> difficulty_mask;
  /// Each round's prompts (this rank's share) are sampled in this many chunks, each with its own seed; the scorer
  /// scores chunk k while chunk k + 1 is sampled when it prefetches.
  std::int64_t generation_chunks = 1;
  /// Log-probs (and their gradient) from an fp32 copy of the hidden states and the lm_head weight when the model is
  /// in half precision (PolicyOptions::fp32_lm_head; the aim of TRL's cast_lm_head_to_fp32).
  bool fp32_lm_head = false;
  /// Every log-prob pass (old, reference, and the update's forward) runs padding-free: the real tokens of its
  /// sequences packed into one row, each attending to itself (PolicyOptions::pack_sequences).
  bool pack_sequences = false;
  /// How a bf16 model's weights are optimised: fp32 master weights and AdamW state (fp32_master), or in place in
  /// bf16 with Kahan compensation and stochastically rounded moments (compensated: half the optimizer's memory).
  OptimizerPrecision optimizer_precision = OptimizerPrecision::fp32_master;
  double learning_rate = 1e-3;          ///< AdamW's base rate (a context stage may change it)
  double weight_decay = 0.0;
  std::int64_t warmup_steps = 0;
  LrDecay lr_decay = LrDecay::constant;
  double max_grad_norm = 1.0;           ///< global-norm clipping (0 = off; the norm is still logged)
  std::int64_t eval_samples = 4;        ///< samples per held-out problem (k of pass@k, n of maj@n)
  std::int64_t eval_problems = 0;       ///< held-out problems evaluate() samples (0 = all)
  /// Evaluation sampling (ROLL's validation generating_args): temperature (unset: the training temperature; 0: greedy,
  /// every sample the same), top-p, top-k and min-p (off by default).
  std::optional<double> eval_temperature;
  double eval_top_p = 1.0;
  std::int64_t eval_top_k = 0;
  double eval_min_p = 0.0;
  /// evaluate() also decodes each held-out problem once greedily (temperature 0, the same length limit), besides
  /// the eval_samples samples: greedy accuracy next to pass@1 at the evaluation temperature.
  bool eval_greedy = false;
  std::uint64_t seed = 1;               ///< sampling seeds (by step, rank, round and chunk) and the checkpoint's seed
  /// Pipelined rollouts (rollout_pipeline.hpp): set, a worker thread with a sampler copy of the policy collects
  /// (samples and scores) the batches of later steps while the trainer trains; batch j is sampled with the weights
  /// after step j − 1 − s (the starting weights for the first s + 1 batches), so it is at most s = max_staleness
  /// updates behind the weights that train on it. 0 runs the pipeline's machinery on the synchronous schedule (the
  /// same numbers as unset); 1 is verl-pipe's one-step-off schedule. Unset: the synchronous trainer. With several
  /// ranks every rank pipelines its share, the workers meeting in a process group of their own (Gloo, a subgroup of
  /// the trainer's: ProcessGroup::subgroup). The worker's generator is the run's rebuilt over the copy (Generator::rebind: the
  /// library's sampler and multi-turn generator can be; a generator that cannot is refused).
  std::optional<std::int64_t> max_staleness;
  /// With max_staleness > 0: how the loss corrects for the older weights (required).
  OffPolicyCorrection off_policy_correction = OffPolicyCorrection::none;
  /// The pipeline worker's intra-op threads (its own at::set_num_threads); 0 = LibTorch's default for a new thread.
  std::int64_t generation_threads = 0;

  /// Throws ConfigError naming the field: steps, P, mu, micro_batches, generation_chunks, eval_samples < 1, G < 2,
  /// negative counts or rates, ref_sync_alpha outside [0, 1], and the sampling, loss and advantage options' own checks.
  void validate() const;
};

/// The groups one step trains on (this rank's share) and what was measured while sampling them.
struct StepBatch {
  std::int64_t step = 0;
  std::int64_t group_size = 0;
  std::int64_t max_new_tokens = 0;
  bool mask_truncated = false;                ///< the stage's DAPO overlong filtering (ContextStage::mask_truncated)
  /// A pipelined run's: the weights that sampled the batch, as the step whose update made them (0: the starting
  /// weights); the batch trains on the weights after step − 1. Unset in a synchronous run (the current weights).
  std::optional<std::int64_t> weights_version;
  bool train = true;                          ///< false: dynamic sampling found too few groups and skips the step
  Rollout rollout;                            ///< [rows, ...], rows = problems.size() · group_size (may be 0)
  std::vector<Problem> problems;              ///< this rank's kept prompts
  std::vector<rewards::Completion> completions;  ///< [rows] their completions (Completion::group indexes `problems`)
  std::vector<std::optional<float>> totals;   ///< [rows] final reward totals
  /// [rows] each reward's value by label (and "soft_overlong" when the stage has an overlong buffer)
  std::vector<std::vector<std::pair<std::string, std::optional<double>>>> reward_values;
  /// [rows] correct by the scorer's rule (StepScorer::judge: the one evaluation counts by); nullopt where the judge
  /// gave no value
  std::vector<std::optional<bool>> correct;
  /// [problems] bool: which kept groups reach the loss (GroupSelection::in_loss, ROLL's difficulty mask); undefined:
  /// all of them.
  torch::Tensor in_loss_groups;
  /// Reward metrics of every completion sampled (all rounds), dynamic-sampling metrics, completion lengths [N] and
  /// truncation flags [N] (float64) of every completion sampled this step: the policy's numbers, not the filter's.
  std::vector<MetricValue> score_metrics;
  /// The generator's metrics (Generator::last_metrics) over every generate call of the step.
  std::vector<MetricValue> generation_metrics;
  std::vector<std::pair<std::string, double>> sampling_metrics;
  /// The prompt source's metrics after it observed this batch (PromptSource::metrics).
  std::vector<std::pair<std::string, double>> source_metrics;
  torch::Tensor sampled_lengths, sampled_truncated;
  /// The log-prob pass, [rows, T] (float32; float64 for a float64 model), undefined unless needed: the rollout
  /// policy's log-probs before the update (μ > 1, rollout rejection, KL in the reward, the optimal token baseline),
  /// the reference's (when there is one) and Σ_v π_v² of the rollout policy (the optimal token baseline). On the CPU
  /// like the rollout, whatever the model's device.
  torch::Tensor old_log_probs, ref_log_probs, sum_pi_squared;
  /// KL in the reward: [rows, T] float64 per-token KL of old vs reference log-probs by the configured estimator (0 at
  /// masked positions); undefined without KL in the reward. Shapes the rewards (advantages) and is logged.
  torch::Tensor reward_kl;
  /// ReMax: [rows] float64, the total reward of the greedy completion of each row's prompt (NaN: nothing judged it).
  torch::Tensor greedy_baselines;
  /// PPO: [rows, T] float32 on the CPU, the critic's values before this step's update (Critic::values; 0 at masked
  /// positions), GAE's baseline and the value loss's clipping centre; undefined without a critic.
  torch::Tensor old_values;
  /// Wall-clock seconds of this rank's phases: sampling (every round, and ReMax's greedy completions), the scoring
  /// that did not overlap it, the old-policy and reference log-prob passes and the critic's values.
  double generation_seconds = 0.0, scoring_seconds = 0.0, old_log_prob_seconds = 0.0, ref_log_prob_seconds = 0.0,
         values_seconds = 0.0;

  std::int64_t rows() const { return static_cast<std::int64_t>(completions.size()); }
  /// The kept groups the difficulty mask keeps out of the loss (0 without a mask).
  std::int64_t difficulty_masked_groups() const {
    return in_loss_groups.defined() ? (~in_loss_groups).sum().item<std::int64_t>() : 0;
  }
};

/// What policy_update measured: GrpoLoss's metrics of the last pass (micro-batches combined) and the gradient norm.
struct UpdateResult {
  std::vector<MetricValue> loss_metrics;
  double grad_norm = 0.0;
  double beta = 0.0;  ///< the KL coefficient the loss used
  double entropy_coef = 0.0;  ///< the entropy-bonus coefficient after this step's update(s) (TRL logs it)
  /// The measured token-mean KL to the reference of the last pass, this rank's (weight: its tokens), when there is a
  /// reference: what adaptive KL control reads (reduced over ranks), as the logged `kl` is.
  std::optional<MetricValue> kl;
  /// Wall-clock seconds of this rank's update, over every pass: the loss forwards (log-probs and loss), the backward
  /// passes, and the gradient all-reduce with clipping and the optimizer step.
  double forward_seconds = 0.0, backward_seconds = 0.0, optimizer_seconds = 0.0;
  /// false during the critic's warm-up (the policy did not train: no loss metrics).
  bool actor_updated = false;
  /// PPO: the critic's update (its metrics, critic/*) and its wall-clock seconds.
  std::optional<CriticUpdate> critic;
  double critic_seconds = 0.0;
};

/// Sets `name` as the run's advantage estimator: a token-level one (reinforce_pp, remax, optimal_token_baseline, gae
/// and their verl spellings) in options.token_advantage, otherwise a group-relative or registered one in options.advantage
/// (select_advantage_estimator; its ConfigError lists the names). One name, one estimator: the other is reset.
void select_advantage(GrpoTrainerOptions& options, std::string_view name);

/// What a step did. In callbacks, `batch` and `advantages` point at the step's data (valid during the call); the
/// report step() and finish_step() return has them null once the step's data is gone (step()) or as the caller's.
struct StepReport {
  std::int64_t step = 0;
  bool trained = true;
  Scalars scalars;                      ///< reduced over ranks, in logging order (TRL/verl names)
  std::map<std::string, double> by_name;
  double seconds = 0.0;
  const StepBatch* batch = nullptr;
  const AdvantageOutput* advantages = nullptr;
};

/// Held-out results of evaluate(): over every problem and per domain (PromptSource::domain_names() order).
struct EvaluationReport {
  std::int64_t step = 0;
  EvalSummary all;
  std::vector<EvalSummary> per_domain;
  std::vector<std::string> domain_names;
  bool per_domain_rewards = false;  ///< the scorer has per-domain reward sets (StepScorer::per_domain())
  /// With TrainerOptions::eval_greedy: one greedy decode per problem (k = n = 1), over all and per domain.
  std::optional<EvalSummary> greedy;
  std::vector<EvalSummary> greedy_per_domain;
  /// "eval/mean_accuracy", "eval/pass@k", "eval/maj@n" and, with per-domain rewards, "eval/<d>/mean_accuracy" and
  /// "eval/<d>/pass@k"; with a greedy pass "eval/greedy_accuracy" (and "eval/<d>/greedy_accuracy").
  Scalars scalars() const;
};

/// Builds the optimizer over the parameters it steps (fp32 master copies of a half-precision model's trainable
/// parameters, else the trainable parameters themselves). Its learning rate is set before every step (the schedule's),
/// through each param group's options (torch::optim::OptimizerOptions::set_lr).
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<torch::Tensor>& parameters)>;

/// The parts of a run a caller may replace; each left empty is the library's.
struct GrpoTrainerParts {
  /// What produces completions (generator.hpp); null: SamplerGenerator over the model (the KV-cache sampler).
  std::shared_ptr<Generator> generator;
  /// null: AdamW(learning_rate, weight_decay), or CompensatedAdamW with optimizer_precision compensated (which a
  /// custom optimizer cannot be combined with: ConfigError).
  OptimizerFactory optimizer;
  /// PPO's value model (models::value_model_from_policy, or value_model_from_pretrained), which the trainer trains
  /// as its Critic (options.critic); required by advantage gae and refused by every other estimator (ConfigError).
  models::ValueModel critic{nullptr};
  /// Dedicated rollout ranks (rollout_ranks.hpp: RolloutRanks::join). On a trainer rank, a pipelined run's batches
  /// come from this partner instead of a worker thread; on a rollout rank (serves), the trainer builds no optimizer,
  /// masters, reference, critic or pipeline, and serve_rollouts() answers the partner. Needs max_staleness.
  std::optional<RolloutPeer> rollout_peer;
};

class GrpoTrainer;

/// Hooks at the named points of a run. Called on every rank that added the callback (add sinks on rank 0 only).
class TrainerCallback {
 public:
  virtual ~TrainerCallback() = default;
  /// Before a step's metrics are reduced over ranks and reported: a callback adds its own measurements of the step
  /// to `values` (then in StepReport::scalars, metrics.jsonl and TensorBoard). Every rank must add the same names in
  /// the same order (reduce_metrics), so a callback that adds metrics is added on every rank.
  virtual void on_step_metrics(const GrpoTrainer& /*trainer*/, const StepBatch& /*batch*/,
                               std::vector<MetricValue>& /*values*/) {}
  virtual void on_step_end(const GrpoTrainer& /*trainer*/, const StepReport& /*report*/) {}
  virtual void on_evaluation(const GrpoTrainer& /*trainer*/, const EvaluationReport& /*report*/) {}
  virtual void on_save(const GrpoTrainer& /*trainer*/, std::int64_t /*step*/,
                       const std::optional<std::filesystem::path>& /*path*/) {}
  /// A context stage switch: at begin_step (a stage starting at a step) or finish_step (a metric condition held).
  virtual void on_stage_switch(const GrpoTrainer& /*trainer*/, const StageSwitch& /*change*/) {}
};

class GrpoTrainer {
 public:
  /// Keeps references to `prompts`, `scorer` and `group`, which must outlive the trainer; shares `model` (the trainer
  /// trains it in place): models::CausalLM, or any model type that gives logits (grpo::CausalLanguageModel; see
  /// trained_model.hpp for what each model type gets). Builds the policy (at sampling.temperature), the frozen
  /// reference when loss.beta > 0 or kl_in_reward is on (a LoRA model's is the base model under its adapters), AdamW
  /// over the parameters that require grad (a LoRA model's adapters; through fp32 master copies when they are in
  /// half precision: MasterWeights; or CompensatedAdamW with optimizer_precision compensated, its rounding seeded
  /// with `seed` so every rank rounds alike), the context schedule and the KL controller; `parts` replaces the
  /// generator or the optimizer. Throws ConfigError for invalid options.
  template <typename ModelType>
  GrpoTrainer(ModelType model, PromptSource& prompts, StepScorer& scorer, ProcessGroup& group,
              GrpoTrainerOptions options, GrpoTrainerParts parts = {})
      : GrpoTrainer(
            ModelFactory{[model = std::move(model)](const PolicyOptions& policy) { return trained_model(model, policy); }},
            prompts, scorer, group, std::move(options), std::move(parts)) {}

  void add_callback(std::shared_ptr<TrainerCallback> callback);

  /// The whole step: begin_step, collect_groups, advantages, policy_update, finish_step. The report's batch and
  /// advantages are null (the step's data is gone); call the phases to keep them.
  StepReport step(std::int64_t step);

  // The phases, in order.
  /// Enters the step's context stage (on_stage_switch when it changes) and sets the learning rate.
  void begin_step(std::int64_t step);
  /// The step's batch. A pipelined run (max_staleness set) takes it from the pipeline's worker, which sampled and
  /// scored it at its weights version (submitting the step and the next s first when they are not pending: at the
  /// start, or after a checkpoint without batches in flight), then runs the log-prob pass on the current weights.
  StepBatch collect_groups(std::int64_t step);
  /// advantages [rows] (group-relative) or [rows, T] float64 (token-level; 0 at masked positions). With KL in the
  /// reward, the optimal token baseline or ReMax it reads the batch's log-prob pass and greedy baselines (a batch
  /// collect_groups made has them; grpo::Error otherwise). A batch that does not train gets the plain group ones.
  AdvantageOutput advantages(const StepBatch& batch) const;
  /// Nothing (and no collective) when the step does not train; every rank must agree, which collect_groups ensures.
  UpdateResult policy_update(const StepBatch& batch, const AdvantageOutput& advantages);
  /// A pipelined run also admits batch step + 1 + s here, with the weights this step's update made.
  StepReport finish_step(const StepBatch& batch, const AdvantageOutput& advantages, const UpdateResult& update,
                         double seconds);

  /// k = eval_samples samples per held-out problem with the evaluation sampling options, graded by the scorer's judges:
  /// mean accuracy, pass@k, maj@k. Calls on_evaluation. `max_new_tokens` = 0: the current stage's limit. A pipelined
  /// run's worker thread finishes the batches admitted and waits meanwhile (it shares the scorer and the prompt
  /// source); a rollout rank goes on sampling.
  EvaluationReport evaluate(std::int64_t step, std::int64_t max_new_tokens = 0);

  /// Writes checkpoint `step` (rank 0 writes, every rank takes part) and calls on_save. A pipelined run's checkpoint
  /// also holds its batches in flight, to regenerate them exactly: their steps, stages and weights versions
  /// (pipeline/: the trained weights of each version) and the prompt source's state before the oldest of them.
  std::optional<std::filesystem::path> save(CheckpointManager& checkpoints, std::int64_t step);
  /// A rollout rank's whole work (GrpoTrainerParts::rollout_peer with serves): collects the batches its trainer rank
  /// asks for, with the weights it sends, until the trainer is destroyed; the collect's collectives run among the
  /// rollout ranks (this trainer's group). A batch that fails is reported to the trainer (its step throws) and the
  /// rank goes on waiting. Returns when the trainer says stop; throws grpo::Error when the link fails or waits past
  /// its collective_timeout for a request.
  void serve_rollouts();

  /// Loads the newest checkpoint of `checkpoints`, if any: model, optimizer, RNG, synced reference, the critic (its
  /// weights, optimizer and masters in critic/), KL coefficient (adaptive control only: a fixed β is the options'),
  /// context stage and the prompt source's state. Returns the step it was saved at (0 when there is none).
  std::int64_t restore(CheckpointManager& checkpoints);

  const GrpoTrainerOptions& options() const { return options_; }
  /// The trained model's module (its parameters, train()/eval()).
  torch::nn::Module& module() { return model_->module(); }
  /// The optimizer (grpo::Error on a rollout rank, which has none).
  torch::optim::Optimizer& optimizer() {
    GRPO_CHECK(optimizer_ != nullptr, "GrpoTrainer::optimizer: a rollout rank's trainer has no optimizer");
    return *optimizer_;
  }
  const ContextSchedule& context() const { return context_; }
  const KlController& kl_controller() const { return kl_; }
  const KlController& reward_kl_controller() const { return reward_kl_; }
  const EntropyController& entropy_controller() const { return entropy_; }
  const StepScorer& scorer() const { return scorer_; }
  Generator& generator() { return *generator_; }
  const GroupSelection& group_selection() const { return selection_; }
  const PromptSource& prompts() const { return prompts_; }
  ProcessGroup& process_group() const { return group_; }
  /// The PPO critic; null without one.
  Critic* critic() { return critic_.get(); }

 private:
  /// The model behind TrainedModel, built with the policy options of the validated trainer options (a struct, so
  /// that no model converts to it).
  struct ModelFactory {
    std::function<std::unique_ptr<TrainedModel>(const PolicyOptions&)> build;
  };
  GrpoTrainer(const ModelFactory& model, PromptSource& prompts, StepScorer& scorer, ProcessGroup& group,
              GrpoTrainerOptions options, GrpoTrainerParts parts);

  std::vector<rewards::Completion> completions_of(const Rollout& rollout, std::span<const Problem> problems,
                                                  std::int64_t group_size) const;
  /// The sampling options of every generation request: the run's, with `max_new_tokens`, the prompt source's stop
  /// and padding ids and `seed`.
  SamplerOptions sampling_options(std::int64_t max_new_tokens, std::uint64_t seed) const;
  /// The scorer's shaping at a context stage (its overlong punishment).
  ScoreShaping shaping(const ContextStage& stage) const;
  /// Prompts, sampling (with `generator`) and scoring of step `step`'s groups at `stage`, the group selection and
  /// ReMax's greedy completions: the part of collect_groups that needs no trainer weights (the pipeline's worker
  /// runs it with its own generator).
  StepBatch collect_rollouts(std::int64_t step, Generator& generator, const ContextStage& stage, ProcessGroup& group);
  /// The context stage (its index) that begin_step(step) would enter from the current one.
  std::size_t stage_at(std::int64_t step) const;
  /// Admits batches first … last to the pipeline with the current weights as version `version`.
  void submit_batches(std::int64_t first, std::int64_t last, std::int64_t version);
  /// The pipeline's metrics of a step: staleness, importance weights of the decoupled correction, idle fractions.
  void add_pipeline_metrics(const StepBatch& batch, std::vector<MetricValue>& values) const;
  void check_stage_metrics(const std::map<std::string, double>& logged);
  /// With loss.top_entropy_quantile < 1: the entropy quantile over the loss tokens (kept_mask) of the whole batch of
  /// every rank, from a forward without gradients in micro-batches of `micro` rows; nullopt otherwise.
  std::optional<double> whole_batch_entropy_threshold(const StepBatch& batch, const torch::Tensor& kept_mask,
                                                      std::int64_t micro);
  /// The log-prob pass and ReMax's greedy baselines of the kept groups (collect_groups' last part).
  void add_log_probs(StepBatch& batch);
  /// Whether collect_groups computes the rollout policy's log-probs (μ > 1, rollout rejection, KL in the reward, the
  /// optimal token baseline): then finish_step reports the sampler's mismatch with them.
  bool old_log_prob_pass() const;
  void add_greedy_baselines(StepBatch& batch, Generator& generator, const ContextStage& stage);
  /// [rows, T] bool: the completion tokens the token-level estimators and the critic train on: completion_mask of
  /// the rows with a reward total (and, for ReMax, a greedy baseline).
  torch::Tensor estimator_mask(const StepBatch& batch) const;

  PromptSource& prompts_;
  StepScorer& scorer_;
  ProcessGroup& group_;
  GrpoTrainerOptions options_;
  std::unique_ptr<TrainedModel> model_;
  std::unique_ptr<TrainedModel> reference_;  // null when no term needs one
  bool synced_reference_ = false;
  std::shared_ptr<Generator> generator_;
  GroupSelection selection_;
  GroupAdvantage advantage_;
  MasterWeights master_;  // fp32 masters of a half-precision model's trainable parameters (the optimizer's)
  std::unique_ptr<torch::optim::Optimizer> optimizer_;  // AdamW, or CompensatedAdamW (make_adamw)
  std::unique_ptr<Critic> critic_;  // PPO's critic (advantage gae); null otherwise
  ContextSchedule context_;
  KlController kl_;
  KlController reward_kl_;
  EntropyController entropy_;
  LrScheduleOptions lr_schedule_;
  double learning_rate_ = 0.0;  // of the current step
  bool stage_metrics_checked_ = false;
  std::vector<std::shared_ptr<TrainerCallback>> callbacks_;
  // A rollout rank's partner (GrpoTrainerParts::rollout_peer with serves); its trainer holds no optimizer.
  std::optional<RolloutPeer> serving_;
  // A pipelined run with several ranks: the workers' own process group (Gloo, a subgroup of group_), so that their
  // collectives never interleave with the trainers'.
  std::unique_ptr<ProcessGroup> worker_group_;
  // The pipelined run's worker (max_staleness set); last, so that it stops before the members it uses go.
  std::unique_ptr<RolloutPipeline> pipeline_;
  double pipeline_step_start_ = 0.0;  // steady-clock seconds when the previous batch was taken
  double pipeline_busy_before_ = 0.0;  // the worker's busy seconds as of then
  double pipeline_period_ = 0.0, pipeline_worker_busy_ = 0.0;  // of the last step
};

}  // namespace grpo::train
