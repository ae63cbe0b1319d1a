// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/grpo_trainer.hpp>

#include <torch/cuda.h>

#include <grpo/core/mix64.hpp>
#include <grpo/policy/decode.hpp>
#include <grpo/train/optimizer_step.hpp>
#include <grpo/train/training_mode.hpp>

#include "seconds_since.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

namespace grpo::train {
namespace {

/// Waits for `device`'s queued work, so that a phase's wall-clock time covers the GPU work it started (CUDA runs
/// asynchronously; without this the time moves to the next phase that reads a result).
void wait_for(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

/// The process's peak resident set so far, in GiB (getrusage; Linux reports kilobytes).
double peak_rss_gib() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  return static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0);
}

/// The generator's rewards on completion tokens into `scores` (add_environment_rewards: each row's sum joins its
/// total); nothing when the rollout has none.
void add_rollout_rewards(StepScores& scores, const Rollout& rollout) {
  if (!rollout.completion_rewards.defined()) return;
  const torch::Tensor sums =
      rollout.completion_rewards.to(torch::kFloat64).masked_fill(rollout.completion_mask == 0, 0.0).sum(1).contiguous();
  add_environment_rewards(scores, std::span<const double>(sums.data_ptr<double>(), static_cast<std::size_t>(sums.numel())));
}

}  // namespace

namespace {

using rewards::Completion;

/// The loss options of a step: `base` with the KL controller's β, the entropy controller's coefficient and, for
/// dr_grpo, the stage's completion limit as its max_completion_length (its constant normaliser).
GrpoLossOptions step_loss_options(GrpoLossOptions base, double beta, double entropy_coef,
                                  std::int64_t max_new_tokens) {
  base.beta = beta;
  base.entropy_coef = entropy_coef;
  if (base.loss_type == LossType::dr_grpo) base.max_completion_length = max_new_tokens;
  return base;
}

LocalNormaliserOptions normaliser_options(std::int64_t max_completion_length) {
  LocalNormaliserOptions options;
  options.max_completion_length = max_completion_length;
  return options;
}

/// verl's rollout-vs-actor metrics (verl/utils/debug/metrics.py calculate_debug_metrics): over the valid completion
/// tokens of every rank, the probabilities the sampler recorded, a = exp(sampler log-prob), against the trainer's
/// recomputation before the update, b = exp(old log-prob): |a − b|'s max, mean and std (n − 1), and the Pearson
/// correlation of a and b (left out when either has no spread). Added when `enabled` (the same on every rank); a
/// rank without the tensors contributes nothing.
void add_sampler_mismatch(ProcessGroup& group, const StepBatch& batch, bool enabled, std::vector<MetricValue>& values) {
  if (!enabled) return;
  torch::Tensor sums = torch::zeros({8}, torch::kFloat64);  // n, Σd, Σd², Σa, Σb, Σa², Σb², Σab
  double max_diff = 0.0;
  const auto& rollout = batch.rollout;
  if (batch.train && batch.rows() > 0 && batch.old_log_probs.defined() && rollout.sampler_log_probs.defined()) {
    const auto valid = rollout.completion_mask != 0;
    const auto a = rollout.sampler_log_probs.to(torch::kFloat64).exp().masked_select(valid);
    const auto b = batch.old_log_probs.to(torch::kFloat64).exp().masked_select(valid);
    const auto d = (a - b).abs();
    sums = torch::stack({torch::scalar_tensor(static_cast<double>(a.numel()), torch::kFloat64), d.sum(),
                         d.square().sum(), a.sum(), b.sum(), a.square().sum(), b.square().sum(), (a * b).sum()});
    if (d.numel() > 0) max_diff = d.max().item<double>();
  }
  group.all_reduce_(sums);
  max_diff = group.all_reduce(max_diff, ReduceOp::max);
  const auto s = sums.accessor<double, 1>();
  const double n = s[0];
  if (n < 1) return;
  const double mean = s[1] / n;
  values.push_back({"training/rollout_probs_diff_max", max_diff, MetricReduction::max, 1.0});
  values.push_back({"training/rollout_probs_diff_mean", mean, MetricReduction::max, 1.0});
  if (n >= 2) {
    const double variance = std::max(0.0, (s[2] - n * mean * mean) / (n - 1));
    values.push_back({"training/rollout_probs_diff_std", std::sqrt(variance), MetricReduction::max, 1.0});
    const double var_a = s[5] - s[3] * s[3] / n, var_b = s[6] - s[4] * s[4] / n, cov = s[7] - s[3] * s[4] / n;
    if (var_a > 0.0 && var_b > 0.0) {
      values.push_back({"training/rollout_actor_probs_pearson_corr", std::clamp(cov / std::sqrt(var_a * var_b), -1.0, 1.0),
                        MetricReduction::max, 1.0});
    }
  }
}

/// verl's critic data metrics (verl/trainer/ppo/metric_utils.py compute_data_metrics) over the tokens of `mask` of
/// every rank: critic/values/mean and critic/returns/mean, and critic/vf_explained_var = 1 − Var(R − V) / (Var(R) +
/// 1e-5) (Bessel variances). values, returns and mask [rows, T]; a rank without rows passes undefined tensors.
void add_value_metrics(ProcessGroup& group, const torch::Tensor& values, const torch::Tensor& returns,
                       const torch::Tensor& mask, std::vector<MetricValue>& out) {
  torch::Tensor sums = torch::zeros({6}, torch::kFloat64);  // n, ΣV, ΣR, ΣR², Σ(R − V), Σ(R − V)²
  if (values.defined() && values.numel() > 0) {
    const torch::Tensor valid = mask != 0;
    const torch::Tensor v = values.to(torch::kFloat64).masked_select(valid);
    const torch::Tensor r = returns.to(torch::kFloat64).masked_select(valid);
    const torch::Tensor d = r - v;
    sums = torch::stack({torch::scalar_tensor(static_cast<double>(v.numel()), torch::kFloat64), v.sum(), r.sum(),
                         r.square().sum(), d.sum(), d.square().sum()});
  }
  group.all_reduce_(sums);
  const auto s = sums.accessor<double, 1>();
  const double n = s[0];
  if (n < 1) return;
  out.push_back({"critic/values/mean", s[1] / n, MetricReduction::max, 1.0});
  out.push_back({"critic/returns/mean", s[2] / n, MetricReduction::max, 1.0});
  if (n >= 2) {
    const auto variance = [n](double sum, double squares) { return std::max(0.0, (squares - sum * sum / n) / (n - 1)); };
    out.push_back({"critic/vf_explained_var", 1.0 - variance(s[4], s[5]) / (variance(s[2], s[3]) + 1e-5),
                   MetricReduction::max, 1.0});
  }
}

std::vector<ContextStage> stages_of(const GrpoTrainerOptions& o) {
  if (!o.stages.empty()) return o.stages;
  ContextStage only;
  only.max_new_tokens = o.sampling.max_new_tokens;
  return {only};
}

}  // namespace

void GrpoTrainerOptions::validate() const {
  GRPO_CHECK_CONFIG(steps >= 1, "steps must be >= 1, got {}", steps);
  GRPO_CHECK_CONFIG(prompts_per_step >= 1, "prompts must be >= 1, got {}", prompts_per_step);
  GRPO_CHECK_CONFIG(group_size >= 2, "group_size must be >= 2 (a group needs two completions to compare), got {}",
                    group_size);
  GRPO_CHECK_CONFIG(mu >= 1, "mu must be >= 1, got {}", mu);
  GRPO_CHECK_CONFIG(micro_batches >= 1, "micro_batches must be >= 1, got {}", micro_batches);
  GRPO_CHECK_CONFIG(ref_sync_every >= 0, "ref_sync_every must be >= 0, got {}", ref_sync_every);
  GRPO_CHECK_CONFIG(ref_sync_alpha >= 0.0 && ref_sync_alpha <= 1.0, "ref_sync_alpha must be in [0, 1], got {}",
                    ref_sync_alpha);
  GRPO_CHECK_CONFIG(dynamic_sampling_max_rounds >= 0, "dynamic_sampling_max_rounds must be >= 0, got {}",
                    dynamic_sampling_max_rounds);
  GRPO_CHECK_CONFIG(dynamic_sampling_prompts >= 0, "dynamic_sampling_prompts must be >= 0, got {}",
                    dynamic_sampling_prompts);
  GRPO_CHECK_CONFIG(generation_chunks >= 1, "generation_chunks must be >= 1, got {}", generation_chunks);
  dynamic_sampling_filter.validate("dynamic_sampling");
  for (const auto& [domain, filter] : dynamic_sampling_domain_filters) {
    filter.validate(fmt::format("domains.{}.dynamic_sampling_filter", domain));
  }
  GRPO_CHECK_CONFIG(!difficulty_mask || difficulty_mask->first < difficulty_mask->second,
                    "difficulty_mask: low ({}) must be below high ({})", difficulty_mask ? difficulty_mask->first : 0.0,
                    difficulty_mask ? difficulty_mask->second : 0.0);
  GRPO_CHECK_CONFIG(!dynamic_sampling_metric.empty(),
                    "dynamic_sampling_metric must be total, accuracy (acc) or a reward's label, got ''");
  GRPO_CHECK_CONFIG(std::isfinite(learning_rate) && learning_rate >= 0.0, "lr must be >= 0, got {}", learning_rate);
  GRPO_CHECK_CONFIG(std::isfinite(weight_decay) && weight_decay >= 0.0, "weight_decay must be >= 0, got {}",
                    weight_decay);
  GRPO_CHECK_CONFIG(warmup_steps >= 0, "warmup_steps must be >= 0, got {}", warmup_steps);
  GRPO_CHECK_CONFIG(std::isfinite(max_grad_norm) && max_grad_norm >= 0.0, "max_grad_norm must be >= 0, got {}",
                    max_grad_norm);
  GRPO_CHECK_CONFIG(eval_samples >= 1, "eval_samples must be >= 1, got {}", eval_samples);
  GRPO_CHECK_CONFIG(eval_problems >= 0, "eval_problems must be >= 0, got {}", eval_problems);
  GRPO_CHECK_CONFIG(!eval_temperature || (std::isfinite(*eval_temperature) && *eval_temperature >= 0.0),
                    "eval_temperature must be >= 0 (0 = greedy), got {}", eval_temperature.value_or(0.0));
  SamplerOptions evaluation = sampling;
  evaluation.top_p = eval_top_p;
  evaluation.top_k = eval_top_k;
  evaluation.min_p = eval_min_p;
  try {
    evaluation.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("evaluation sampling (eval_top_p, eval_top_k, eval_min_p): {}", e.what()));
  }
  GRPO_CHECK_CONFIG(sampling.temperature > 0.0, "temperature must be > 0, got {}", sampling.temperature);
  sampling.validate();
  kl.validate(loss.beta);
  advantage.validate();
  token_advantage.validate();
  try {
    kl_in_reward.control.validate(kl_in_reward.beta);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("kl_in_reward (KL in the reward; beta is its coef): {}", e.what()));
  }
  step_loss_options(loss, loss.beta, loss.entropy_coef, sampling.max_new_tokens).validate();
  critic.validate();
  GRPO_CHECK_CONFIG(critic_warmup >= 0, "critic_warmup must be >= 0, got {}", critic_warmup);
  GRPO_CHECK_CONFIG(critic_warmup == 0 || token_advantage.estimator == TokenAdvantageEstimator::gae,
                    "critic_warmup {} needs a critic: advantage gae (this run's advantage has none)", critic_warmup);
  (void)EntropyController(loss.entropy_coef, adaptive_entropy);  // validates the adaptive settings
  GRPO_CHECK_CONFIG(!max_staleness || *max_staleness >= 0, "max_staleness must be >= 0, got {}",
                    max_staleness.value_or(0));
  GRPO_CHECK_CONFIG(generation_threads >= 0, "generation_threads must be >= 0, got {}", generation_threads);
  GRPO_CHECK_CONFIG(max_staleness || generation_threads == 0,
                    "generation_threads {} sets the pipeline worker's threads: it needs max_staleness",
                    generation_threads);
  const auto correction = to_string(off_policy_correction);
  GRPO_CHECK_CONFIG(max_staleness || off_policy_correction == OffPolicyCorrection::none,
                    "off_policy_correction {} corrects a pipelined run's older batches: it needs max_staleness",
                    correction);
  GRPO_CHECK_CONFIG(!max_staleness || *max_staleness == 0 || off_policy_correction != OffPolicyCorrection::none,
                    "max_staleness {}: a batch trains on weights up to {} updates newer than the ones that sampled it; "
                    "choose off_policy_correction decoupled (with rollout_is or rollout_rs: the proximal policy "
                    "recomputed, π_prox/π_behave truncated) or bypass (the PPO ratio against the sampler's log-probs)",
                    max_staleness.value_or(0), max_staleness.value_or(0));
  const bool weighs = loss.sampler_correction.mode != SamplerCorrectionMode::none || !loss.rollout_rejection.empty();
  GRPO_CHECK_CONFIG(off_policy_correction != OffPolicyCorrection::decoupled || weighs,
                    "off_policy_correction decoupled weighs each token by π_prox/π_behave: set rollout_is (token or "
                    "sequence; rollout_is_threshold bounds the weight) or rollout_rs");
  GRPO_CHECK_CONFIG(off_policy_correction != OffPolicyCorrection::bypass || !weighs,
                    "off_policy_correction bypass takes the sampler's log-probs as the old ones, so rollout_is and "
                    "rollout_rs would compare them with themselves: leave both off, or use decoupled");
}

void select_advantage(GrpoTrainerOptions& options, std::string_view name) {
  if (const auto token = find_token_advantage_estimator(name)) {
    options.token_advantage.estimator = *token;
    options.advantage = GroupAdvantageOptions{};
    return;
  }
  try {
    select_advantage_estimator(options.advantage, name);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}; token-level: reinforce_pp (reinforce_plus_plus), remax, optimal_token_baseline "
                                  "(otb), gae (PPO, with a critic)",
                                  e.what()));
  }
  options.token_advantage.estimator = TokenAdvantageEstimator::none;
}

GrpoTrainer::GrpoTrainer(const ModelFactory& model, PromptSource& prompts, StepScorer& scorer, ProcessGroup& group,
                         GrpoTrainerOptions options, GrpoTrainerParts parts)
    : prompts_(prompts), scorer_(scorer), group_(group), options_((options.validate(), std::move(options))),
      model_(model.build({.temperature = options_.sampling.temperature,
                          .fp32_lm_head = options_.fp32_lm_head,
                          .pack_sequences = options_.pack_sequences})),
      generator_(parts.generator ? parts.generator : model_->sampler_generator()),
      selection_({.metric = options_.dynamic_sampling_metric,
                  .filter = options_.dynamic_sampling_filter,
                  .domain_filters = options_.dynamic_sampling_domain_filters,
                  .difficulty_mask = options_.difficulty_mask},
                 prompts_.domain_names()),
      advantage_(options_.advantage),
      // A rollout rank trains nothing: no masters (nor optimizer state).
      master_(parts.rollout_peer && parts.rollout_peer->serves
                  ? std::vector<std::pair<std::string, torch::Tensor>>{}
                  : trainable_parameters(model_->module()),
              parts.rollout_peer && parts.rollout_peer->serves ? OptimizerPrecision::fp32_master
                                                               : options_.optimizer_precision),
      context_(stages_of(options_)), kl_(options_.loss.beta, options_.kl),
      reward_kl_(options_.kl_in_reward.beta, options_.kl_in_reward.control),
      entropy_(options_.loss.entropy_coef, options_.adaptive_entropy),
      lr_schedule_{.base_lr = options_.learning_rate, .warmup_steps = options_.warmup_steps,
                   .total_steps = options_.steps, .decay = options_.lr_decay} {
  if (parts.rollout_peer) {
    GRPO_CHECK_CONFIG(options_.max_staleness.has_value(),
                      "rollout ranks (GrpoTrainerParts::rollout_peer, --rollout-ranks) collect a pipelined run's "
                      "batches: they need max_staleness (--max-staleness)");
    GRPO_CHECK(parts.rollout_peer->link != nullptr && parts.rollout_peer->rank >= 0 &&
                   parts.rollout_peer->rank < parts.rollout_peer->link->world_size() &&
                   parts.rollout_peer->rank != parts.rollout_peer->link->rank(),
               "GrpoTrainerParts::rollout_peer: rank {} is not another rank of the link group",
               parts.rollout_peer->rank);
  }
  if (parts.rollout_peer && parts.rollout_peer->serves) {
    serving_ = parts.rollout_peer;
    model_->module().eval();
    return;
  }
  GRPO_CHECK_CONFIG(!master_.masters().empty(), "GrpoTrainer: the model has no parameter that requires grad");
  if (parts.optimizer) {
    GRPO_CHECK_CONFIG(options_.optimizer_precision != OptimizerPrecision::compensated,
                      "optimizer_precision compensated is the library's CompensatedAdamW; a custom optimizer "
                      "(GrpoTrainerParts::optimizer) needs optimizer_precision fp32_master");
    optimizer_ = parts.optimizer(master_.masters());
    GRPO_CHECK(optimizer_ != nullptr, "GrpoTrainerParts::optimizer returned no optimizer");
  } else {
    optimizer_ = make_adamw(master_, torch::optim::AdamWOptions(options_.learning_rate).weight_decay(options_.weight_decay),
                            options_.seed);
  }
  const bool gae = options_.token_advantage.estimator == TokenAdvantageEstimator::gae;
  GRPO_CHECK_CONFIG(!gae || !parts.critic.is_empty(),
                    "advantage gae (PPO) needs a critic: a value model in GrpoTrainerParts::critic "
                    "(models::value_model_from_policy, or value_model_from_pretrained)");
  GRPO_CHECK_CONFIG(gae || parts.critic.is_empty(),
                    "GrpoTrainerParts::critic: a critic trains only with advantage gae (this run's advantage uses none)");
  if (gae) critic_ = std::make_unique<Critic>(std::move(parts.critic), group_, options_.critic, options_.seed);
  model_->module().eval();  // sampling and the log-prob pass; policy_update switches to training mode (dropout)
  broadcast_parameters(group_, model_->module());  // every rank starts from rank 0's weights
  master_.parameters_to_masters();  // the masters of rank 0's weights
  GRPO_CHECK_CONFIG(!model_->reference_shares_weights() || options_.ref_sync_every == 0,
                    "ref_sync_every: a LoRA run's reference is the base model without adapters; TR-DPO reference "
                    "syncing would need a second copy of the weights (use a full fine-tune, or ref_sync_every 0)");
  if (options_.loss.beta > 0.0 || options_.kl_in_reward.enabled()) {
    // LoRA: the base model is the reference, computed with the adapters off (no second copy of the weights).
    reference_ = model_->reference();
  }
  // A reference synced during the run is part of the state a checkpoint saves; a frozen one is rebuilt at start.
  synced_reference_ = reference_ && options_.ref_sync_every > 0;
  if (options_.max_staleness && parts.rollout_peer) {  // the batches come from the partner rollout rank
    pipeline_ = std::make_unique<RolloutPipeline>(std::make_unique<RemoteRolloutWorker>(*parts.rollout_peer), 0);
  } else if (options_.max_staleness) {
    if (group_.world_size() > 1) {  // the workers exchange pass rates: CPU tensors, in a group of their own
      worker_group_ = std::make_unique<ProcessGroup>(
          group_.subgroup("pipeline_workers", group_.rank(), group_.world_size(), DistributedBackend::gloo));
    }
    std::unique_ptr<TrainedModel> sampler = model_->sampler_copy();
    std::shared_ptr<Generator> worker_generator = sampler->rebind_generator(*generator_);
    GRPO_CHECK_CONFIG(worker_generator != nullptr,
                      "max_staleness: the pipeline samples on its own copy of the weights, and this run's generator "
                      "(GrpoTrainerParts::generator) cannot be rebuilt over it (Generator::rebind returns null)");
    pipeline_ = std::make_unique<RolloutPipeline>(
        std::make_unique<LocalRolloutWorker>(
            std::move(sampler), std::move(worker_generator),
            [this](std::int64_t step, std::size_t stage, Generator& generator) {
              return collect_rollouts(step, generator, context_.stages()[stage],
                                      worker_group_ ? *worker_group_ : group_);
            },
            [this] {
              TrainerState state;
              prompts_.save_state(state);
              return state;
            }),
        options_.generation_threads);
  }
}

void GrpoTrainer::add_callback(std::shared_ptr<TrainerCallback> callback) {
  GRPO_CHECK(callback != nullptr, "GrpoTrainer::add_callback: null callback");
  callbacks_.push_back(std::move(callback));
}

StepReport GrpoTrainer::step(std::int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  begin_step(step);
  const StepBatch batch = collect_groups(step);
  const AdvantageOutput adv = advantages(batch);
  const UpdateResult update = policy_update(batch, adv);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  StepReport report = finish_step(batch, adv, update, seconds);
  report.batch = nullptr;  // the step's data ends here
  report.advantages = nullptr;
  return report;
}

void GrpoTrainer::begin_step(std::int64_t step) {
  GRPO_CHECK(!serving_, "GrpoTrainer::begin_step: this is a rollout rank's trainer, which only serves rollouts "
             "(serve_rollouts)");
  if (const auto change = context_.begin_step(step)) {
    for (const auto& callback : callbacks_) callback->on_stage_switch(*this, *change);
  }
  lr_schedule_.base_lr = context_.current().learning_rate.value_or(options_.learning_rate);
  learning_rate_ = learning_rate_at(step, lr_schedule_);
  set_learning_rate(*optimizer_, learning_rate_);
}

SamplerOptions GrpoTrainer::sampling_options(std::int64_t max_new_tokens, std::uint64_t seed) const {
  SamplerOptions sampling = options_.sampling;
  sampling.max_new_tokens = max_new_tokens;
  sampling.eos_token_ids = prompts_.eos_token_ids();
  sampling.pad_token_id = prompts_.pad_token_id();
  sampling.seed = seed;
  return sampling;
}

ScoreShaping GrpoTrainer::shaping(const ContextStage& stage) const {
  return {.max_new_tokens = stage.max_new_tokens,
          .overlong_buffer = stage.overlong_buffer,
          .overlong_factor = stage.overlong_factor};
}

std::vector<Completion> GrpoTrainer::completions_of(const Rollout& rollout, std::span<const Problem> problems,
                                                    std::int64_t group_size) const {
  const auto ids = completion_token_ids(rollout);
  const auto truncated_flags = rollout.truncated.to(torch::kCPU).contiguous();
  const auto truncated = truncated_flags.accessor<bool, 1>();
  std::vector<Completion> out(ids.size());
  for (std::size_t b = 0; b < ids.size(); ++b) {
    const auto& problem = problems[b / static_cast<std::size_t>(group_size)];
    out[b].token_ids.assign(ids[b].begin(), ids[b].end());
    out[b].text = prompts_.decode(out[b].token_ids);
    out[b].prompt = problem.prompt_text;
    out[b].truncated = truncated[static_cast<std::int64_t>(b)];
    out[b].group = b / static_cast<std::size_t>(group_size);
    out[b].row = problem.row;
    out[b].domain = problem.domain;
  }
  return out;
}

StepBatch GrpoTrainer::collect_groups(std::int64_t step) {
  if (!pipeline_) {
    StepBatch out = collect_rollouts(step, *generator_, context_.current(), group_);
    if (out.train && out.rows() > 0) add_log_probs(out);
    return out;
  }
  // The batches of this step and the next s, when none is in flight (the run's start, a resume without them).
  if (!pipeline_->pending(step)) {
    pipeline_->clear();
    submit_batches(step, step + *options_.max_staleness, step - 1);
  }
  StepBatch out = pipeline_->take(step);
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  pipeline_period_ = pipeline_step_start_ > 0.0 ? now - pipeline_step_start_ : 0.0;
  pipeline_worker_busy_ = pipeline_->busy_seconds_taken() - pipeline_busy_before_;
  pipeline_step_start_ = now;
  pipeline_busy_before_ = pipeline_->busy_seconds_taken();
  if (out.train && out.rows() > 0) add_log_probs(out);
  return out;
}

std::size_t GrpoTrainer::stage_at(std::int64_t step) const {
  ContextSchedule ahead = context_;
  ahead.begin_step(step);
  return ahead.index();
}

void GrpoTrainer::submit_batches(std::int64_t first, std::int64_t last, std::int64_t version) {
  // Not past the run's last step, except the one asked for (a loop may run on past options.steps). One snapshot:
  // the batches share its tensors.
  const WeightsSnapshot weights = snapshot_trained_weights(model_->module());
  for (std::int64_t j = first; j <= std::max(first, std::min(last, options_.steps)); ++j) {
    pipeline_->submit(j, stage_at(j), version, weights);
  }
}

StepBatch GrpoTrainer::collect_rollouts(std::int64_t step, Generator& generator, const ContextStage& stage,
                                        ProcessGroup& group) {
  StepBatch out;
  out.step = step;
  out.group_size = stage.group_size.value_or(options_.group_size);
  out.max_new_tokens = stage.max_new_tokens;
  out.mask_truncated = stage.mask_truncated;
  const std::int64_t group_size = out.group_size;
  const bool dynamic_sampling = options_.dynamic_sampling_max_rounds > 0;
  GroupCollector collector({.target_groups = options_.prompts_per_step,
                            .max_rounds = dynamic_sampling ? options_.dynamic_sampling_max_rounds : 1,
                            .at_cap = options_.dynamic_sampling_at_cap,
                            .per_domain = options_.dynamic_sampling_per_domain});
  const std::int64_t round_prompts = dynamic_sampling && options_.dynamic_sampling_prompts > 0
                                         ? options_.dynamic_sampling_prompts
                                         : options_.prompts_per_step;
  std::vector<Rollout> kept_rollouts;
  std::vector<std::vector<MetricValue>> score_parts;  // one list per round
  std::vector<std::vector<MetricValue>> generation_parts;  // one list per generate call
  std::vector<torch::Tensor> lengths, truncation;     // every completion sampled this step
  do {
    const auto round = static_cast<std::uint64_t>(collector.rounds());
    const auto all_problems = prompts_.train_batch(step, round_prompts);
    GRPO_CHECK(static_cast<std::int64_t>(all_problems.size()) == round_prompts,
               "PromptSource::train_batch returned {} prompts for {} asked", all_problems.size(), round_prompts);
    const auto shard = shard_range(round_prompts, group.rank(), group.world_size());
    const std::vector<Problem> problems(all_problems.begin() + shard.begin, all_problems.begin() + shard.end);
    // Keyed noise: one stream per step and round, each prompt keyed by its index in the round's global batch, so
    // neither the ranks nor the chunks change a completion. The generator: a seed per rank and chunk (chunk 0's is
    // the unchunked run's).
    const bool keyed = options_.sampling.noise == SamplingNoise::keyed;
    const std::uint64_t sample_seed =
        keyed ? SplitMix64{(options_.seed * 1000003 + static_cast<std::uint64_t>(step)) ^
                           (round * 0x9E3779B97F4A7C15ULL)}
                    .next()
              : ((options_.seed * 1000003 + static_cast<std::uint64_t>(step)) * 131 +
                 static_cast<std::uint64_t>(group.rank())) ^
                    (round * 0x9E3779B97F4A7C15ULL);
    // Chunks of the shard's prompts; a prefetching scorer scores chunk k while chunk k + 1 is sampled.
    ScoringRound scoring = scorer_.round();
    std::vector<Rollout> chunks;
    std::vector<Completion> round_batch;
    const auto chunk_count = std::min<std::int64_t>(options_.generation_chunks, std::max<std::int64_t>(1, shard.size()));
    for (std::int64_t c = 0; c < chunk_count; ++c) {
      const auto begin = static_cast<std::size_t>(shard.size() * c / chunk_count);
      const auto end = static_cast<std::size_t>(shard.size() * (c + 1) / chunk_count);
      const std::span<const Problem> part = std::span<const Problem>(problems).subspan(begin, end - begin);
      std::vector<std::uint64_t> keys(part.size());
      std::iota(keys.begin(), keys.end(), static_cast<std::uint64_t>(shard.begin) + begin);
      const auto sampling_started = std::chrono::steady_clock::now();
      chunks.push_back(generator.generate(
          {.problems = part,
           .group_size = group_size,
           .sampling = sampling_options(stage.max_new_tokens,
                                        keyed ? sample_seed
                                              : sample_seed ^ (static_cast<std::uint64_t>(c) * 0xD1B54A32D192ED03ULL)),
           .prompt_keys = std::move(keys)}));
      out.generation_seconds += seconds_since(sampling_started);
      generation_parts.push_back(generator.last_metrics());
      auto chunk_batch = completions_of(chunks.back(), part, group_size);
      for (Completion& completion : chunk_batch) completion.group += begin;  // index into this round's problems
      scoring.add(chunk_batch);
      round_batch.insert(round_batch.end(), std::make_move_iterator(chunk_batch.begin()),
                         std::make_move_iterator(chunk_batch.end()));
    }
    const Rollout rollout = chunks.size() == 1 ? chunks.front() : concat_rollouts(chunks, prompts_.pad_token_id());
    const auto scoring_started = std::chrono::steady_clock::now();
    StepScores scores = scoring.scores(round_batch, shaping(stage));
    add_rollout_rewards(scores, rollout);
    out.scoring_seconds += seconds_since(scoring_started);
    lengths.push_back(rollout.completion_lengths().to(torch::kFloat64));
    truncation.push_back(rollout.truncated.to(torch::kFloat64));
    score_parts.push_back(scores.metrics);

    // Pass rates (for the source's curriculum) and reward spread (for dynamic sampling) of every prompt of the round,
    // summed over the ranks so that every rank sees the whole round.
    torch::Tensor flags = torch::zeros({2, round_prompts}, torch::kFloat64);
    auto flag = flags.accessor<double, 2>();
    const auto informative = selection_.informative(scores, problems, group_size);
    for (std::int64_t i = 0; i < shard.size(); ++i) {
      double correct = 0.0, judged = 0.0;
      for (std::int64_t g = 0; g < group_size; ++g) {
        correct += scores.correct[static_cast<std::size_t>(i * group_size + g)];
        judged += scores.judged[static_cast<std::size_t>(i * group_size + g)];
      }
      // Over the completions the judge could score; NaN (the filter's "unknown") when it scored none, so a failing
      // judge endpoint does not retire prompts as unsolved.
      flag[0][shard.begin + i] = judged > 0 ? correct / judged : NAN;
      flag[1][shard.begin + i] = dynamic_sampling ? informative[static_cast<std::size_t>(i)] : 1.0;
    }
    group.all_reduce_(flags);
    const torch::Tensor pass_rates = flags[0].contiguous();
    prompts_.observe(all_problems, std::span<const double>(pass_rates.data_ptr<double>(), all_problems.size()), step);
    std::vector<std::uint8_t> spread(static_cast<std::size_t>(round_prompts));
    std::vector<std::size_t> domains(static_cast<std::size_t>(round_prompts));
    for (std::int64_t p = 0; p < round_prompts; ++p) {
      spread[static_cast<std::size_t>(p)] = flag[1][p] > 0.5;
      domains[static_cast<std::size_t>(p)] = all_problems[static_cast<std::size_t>(p)].domain;
    }
    const std::vector<std::uint8_t> keep = collector.add_round(spread, domains);

    // This rank's kept groups.
    std::vector<std::int64_t> rows;
    for (std::int64_t i = 0; i < shard.size(); ++i) {
      if (!keep[static_cast<std::size_t>(shard.begin + i)]) continue;
      for (std::int64_t g = 0; g < group_size; ++g) {
        const auto b = static_cast<std::size_t>(i * group_size + g);
        rows.push_back(static_cast<std::int64_t>(b));
        Completion completion = round_batch[b];
        completion.group = out.problems.size();
        out.completions.push_back(std::move(completion));
        out.totals.push_back(scores.total[b]);
        out.reward_values.push_back(scores.rewards[b]);
        out.correct.push_back(scores.judged[b] ? std::optional<bool>(scores.correct[b] != 0) : std::nullopt);
      }
      out.problems.push_back(problems[static_cast<std::size_t>(i)]);
    }
    kept_rollouts.push_back(rollout.select(torch::tensor(rows, torch::kInt64)));
  } while (!collector.done());
  out.train = collector.train();
  out.rollout = concat_rollouts(kept_rollouts, prompts_.pad_token_id());
  out.score_metrics = combine_metrics(score_parts);
  out.generation_metrics = combine_metrics(generation_parts);
  if (dynamic_sampling) {
    out.sampling_metrics = collector.metrics();
    const std::vector<std::string> names = prompts_.domain_names();
    if (names.size() > 1) {  // kept and dropped groups of each domain
      for (std::size_t d = 0; d < names.size(); ++d) {
        const auto at = [d](const std::vector<std::int64_t>& v) { return d < v.size() ? v[d] : 0; };
        const std::int64_t kept = at(collector.kept_by_domain()), generated = at(collector.generated_by_domain());
        out.sampling_metrics.emplace_back(fmt::format("dynamic_sampling/{}/kept_groups", names[d]),
                                          static_cast<double>(kept));
        out.sampling_metrics.emplace_back(fmt::format("dynamic_sampling/{}/dropped_groups", names[d]),
                                          static_cast<double>(generated - kept));
      }
    }
  }
  out.sampled_lengths = torch::cat(lengths);
  out.sampled_truncated = torch::cat(truncation);
  out.in_loss_groups = selection_.in_loss(out.totals, group_size);
  out.source_metrics = prompts_.metrics(step);
  if (out.train && out.rows() > 0) {
    const auto greedy_started = std::chrono::steady_clock::now();
    add_greedy_baselines(out, generator, stage);
    out.generation_seconds += seconds_since(greedy_started);
  }
  return out;
}

bool GrpoTrainer::old_log_prob_pass() const {
  return options_.mu > 1 || options_.off_policy_correction == OffPolicyCorrection::decoupled || !options_.loss.rollout_rejection.empty() || options_.kl_in_reward.enabled() ||
         options_.token_advantage.estimator == TokenAdvantageEstimator::optimal_token_baseline;
}

void GrpoTrainer::add_log_probs(StepBatch& batch) {
  const bool otb = options_.token_advantage.estimator == TokenAdvantageEstimator::optimal_token_baseline;
  torch::NoGradGuard no_grad;
  if (old_log_prob_pass()) {
    const auto started = std::chrono::steady_clock::now();
    auto old = model_->token_log_probs(batch.rollout, /*with_entropy=*/false, /*with_sum_pi_squared=*/otb);
    // The batch lives on the CPU with its rollout (rewards, advantages and masks are host-side); only the update's
    // forward runs on the model's device, and the loss takes its inputs there.
    batch.old_log_probs = old.log_probs.to(torch::kCPU);
    if (otb) batch.sum_pi_squared = old.sum_pi_squared.to(torch::kCPU);
    batch.old_log_prob_seconds = seconds_since(started);
  }
  if (reference_) {
    const auto started = std::chrono::steady_clock::now();
    batch.ref_log_probs = reference_->token_log_probs(batch.rollout).log_probs.to(torch::kCPU);
    batch.ref_log_prob_seconds = seconds_since(started);
  }
  if (critic_) {
    const auto started = std::chrono::steady_clock::now();
    batch.old_values = critic_->values(batch.rollout);
    batch.values_seconds = seconds_since(started);
  }
  if (options_.kl_in_reward.enabled()) {
    KlOptions estimator;
    estimator.estimator = options_.kl_in_reward.estimator;
    batch.reward_kl =
        kl_penalty(batch.old_log_probs.to(torch::kFloat64), batch.ref_log_probs.to(torch::kFloat64), estimator)
            .masked_fill(batch.rollout.completion_mask == 0, 0.0);
  }
}

void GrpoTrainer::add_greedy_baselines(StepBatch& batch, Generator& generator, const ContextStage& stage) {
  if (options_.token_advantage.estimator != TokenAdvantageEstimator::remax) return;
  // verl remax: one greedy (do_sample=False) completion per prompt, scored by the same reward, is the baseline of
  // every completion of that prompt.
  SamplerOptions sampling = sampling_options(stage.max_new_tokens, options_.sampling.seed);
  sampling.temperature = 0.0;
  const Rollout greedy =
      generator.generate({.problems = batch.problems, .group_size = 1, .sampling = sampling, .prompt_keys = {}});
  const std::vector<Completion> completions = completions_of(greedy, batch.problems, 1);
  StepScores scores = scorer_.round().scores(completions, shaping(stage));
  add_rollout_rewards(scores, greedy);
  std::vector<double> baselines(static_cast<std::size_t>(batch.rows()));
  double sum = 0.0, judged = 0.0;
  for (std::size_t b = 0; b < baselines.size(); ++b) {
    const auto& total = scores.total[b / static_cast<std::size_t>(batch.group_size)];
    baselines[b] = total ? static_cast<double>(*total) : std::numeric_limits<double>::quiet_NaN();
  }
  for (const auto& total : scores.total) {
    if (!total) continue;
    sum += *total;
    judged += 1.0;
  }
  batch.greedy_baselines = torch::tensor(baselines, torch::kFloat64);
  batch.score_metrics.push_back({"rewards/greedy_baseline/mean", judged > 0 ? sum / judged : 0.0,
                                 MetricReduction::weighted_mean, judged});
}

UpdateResult GrpoTrainer::policy_update(const StepBatch& batch, const AdvantageOutput& adv) {
  GRPO_CHECK(!serving_, "GrpoTrainer::policy_update: this is a rollout rank's trainer, which holds no optimizer");
  UpdateResult out;
  // Training mode while the loss is computed (LoRA dropout), then back to the evaluation mode the constructor set, for
  // sampling and the log-prob pass.
  const TrainingModeScope training(model_->module(), /*training=*/true);
  const Rollout& rollout = batch.rollout;
  const std::int64_t rows = batch.rows();  // may be 0 on a rank whose groups were all dropped
  // The loss mask: without the truncated completions when the batch's stage filters them (DAPO overlong filtering).
  torch::Tensor loss_mask =
      batch.mask_truncated ? truncated_completion_mask(rollout.completion_mask, rollout.truncated) : rollout.completion_mask;
  // The groups the batch's selection keeps out of the loss (ROLL's difficulty mask).
  if (batch.in_loss_groups.defined() && rows > 0) {
    const torch::Tensor rows_kept = batch.in_loss_groups.repeat_interleave(batch.group_size).unsqueeze(1);
    loss_mask = loss_mask * rows_kept.to(loss_mask.scalar_type());
  }
  torch::Tensor kept_mask = loss_mask;  // ... and without the tokens rollout rejection drops

  // The loss takes the old log-probs (from collect_groups' log-prob pass) when μ > 1 and for rollout rejection
  // (verl compares the old log-probs with the sampler's); the reference's when there is a reference.
  const bool rejection = !options_.loss.rollout_rejection.empty();
  // Decoupled off-policy correction: the proximal policy's log-probs, recomputed now. Bypass: the sampler's.
  const bool bypass = options_.off_policy_correction == OffPolicyCorrection::bypass;
  const bool needs_old =
      options_.mu > 1 || rejection || bypass || options_.off_policy_correction == OffPolicyCorrection::decoupled;
  const torch::Tensor& old_log_probs = bypass ? rollout.sampler_log_probs : batch.old_log_probs;
  const torch::Tensor& ref_log_probs = batch.ref_log_probs;
  if (batch.train && rows > 0 && rejection) {
    // Rejected tokens do not count in the normaliser (verl's modified response mask); GrpoLoss, given the mask
    // before rejection and the same old and sampler log-probs, rejects the same tokens and weighs the others on it.
    kept_mask = rollout_rejection_mask(old_log_probs, rollout.sampler_log_probs, loss_mask,
                                       options_.loss.rollout_rejection);
  }
  out.beta = kl_.beta();
  out.entropy_coef = entropy_.coef();
  if (!batch.train) return out;
  if (critic_) {
    // verl updates the critic before the actor, both on the values before either update. The critic learns on the
    // tokens the policy's loss sees (before rollout rejection) of the rows with a return.
    const auto started = std::chrono::steady_clock::now();
    const torch::Tensor none = torch::zeros(loss_mask.sizes(), torch::kFloat32);
    const torch::Tensor critic_mask = rows > 0 ? loss_mask * estimator_mask(batch).to(loss_mask.scalar_type()) : none;
    out.critic = critic_->update(rollout, rows > 0 ? batch.old_values : none, rows > 0 ? adv.returns : none,
                                 critic_mask);
    out.critic_seconds = seconds_since(started);
  }
  if (batch.step <= options_.critic_warmup) return out;  // the critic's warm-up: the policy waits
  out.actor_updated = true;

  // μ passes; each accumulates the micro-batches' gradients with the whole (all ranks') batch's normaliser.
  const auto type = options_.loss.loss_type;
  const auto normaliser = global_normaliser(
      group_, type,
      rows > 0 ? std::optional(local_normaliser(type, kept_mask, normaliser_options(batch.max_new_tokens))) : std::nullopt);
  const std::int64_t micro = (rows + options_.micro_batches - 1) / options_.micro_batches;
  // The sampler's own log-probs, for the options that compare them with the trainer's (they differ by the sampler's
  // arithmetic: KV cache, batch shape).
  const bool needs_sampler_log_probs = options_.loss.sampler_correction.mode != SamplerCorrectionMode::none ||
                                       !options_.loss.rollout_rejection.empty();
  std::vector<std::vector<MetricValue>> parts;  // one list per micro-batch of the last pass
  std::vector<std::vector<MetricValue>> kl_parts;  // the measured KL of each, for adaptive KL control
  for (std::int64_t pass = 0; pass < options_.mu; ++pass) {
    // Each pass is one optimizer step: the entropy coefficient is the controller's as of the previous one.
    const GrpoLoss loss(step_loss_options(options_.loss, out.beta, entropy_.applied(), batch.max_new_tokens));
    const std::optional<double> entropy_threshold = whole_batch_entropy_threshold(batch, kept_mask, micro);
    double bonus_entropy = 0.0, bonus_tokens = 0.0;
    optimizer_->zero_grad();
    parts.clear();
    kl_parts.clear();
    for (std::int64_t begin = 0; begin < rows; begin += micro) {
      const std::int64_t count = std::min(micro, rows - begin);
      const auto part = rollout.rows(begin, count);
      const auto forward_started = std::chrono::steady_clock::now();
      const auto lp = model_->token_log_probs(part, /*with_entropy=*/true);
      // The batch is on the CPU; the loss runs where the log-probs are (the model's device).
      const auto on_device = [&](const torch::Tensor& t) { return t.narrow(0, begin, count).to(lp.log_probs.device()); };
      LossInputs inputs;
      inputs.log_probs = lp.log_probs;
      if (needs_old) inputs.old_log_probs = on_device(old_log_probs);
      if (reference_) inputs.ref_log_probs = on_device(ref_log_probs);
      inputs.advantages = on_device(adv.advantages);
      inputs.mask = on_device(loss_mask);
      inputs.entropy = lp.entropy;
      inputs.entropy_threshold = entropy_threshold;
      if (needs_sampler_log_probs) inputs.sampler_log_probs = on_device(rollout.sampler_log_probs);
      const auto result = loss(inputs, normaliser);
      wait_for(lp.log_probs.device());
      out.forward_seconds += seconds_since(forward_started);
      const auto backward_started = std::chrono::steady_clock::now();
      result.loss.backward();
      master_.accumulate_gradients();  // half-precision gradients summed in fp32
      wait_for(lp.log_probs.device());
      out.backward_seconds += seconds_since(backward_started);
      parts.push_back(loss_metric_values(result.metrics));
      if (result.metrics.kl_mean) kl_parts.push_back({{"kl", *result.metrics.kl_mean, MetricReduction::weighted_mean,
                                                        result.metrics.num_tokens}});
      bonus_entropy += result.metrics.bonus_entropy_sum;
      bonus_tokens += result.metrics.bonus_tokens;
    }
    if (rows == 0) {  // nothing kept on this rank: zero gradients and metrics that weigh nothing
      LossMetrics none;
      if (reference_) none.kl_mean = 0.0;
      if (reference_) kl_parts.push_back({{"kl", 0.0, MetricReduction::weighted_mean, 0.0}});
      none.entropy_mean = 0.0;
      parts.push_back(loss_metric_values(none));
    }
    const auto optimizer_started = std::chrono::steady_clock::now();
    all_reduce_gradients(group_, master_.masters());  // summed: each rank's loss has the global normaliser
    out.grad_norm = clip_and_step(*optimizer_, master_.masters(), options_.max_grad_norm);
    master_.masters_to_parameters();
    if (!master_.masters().empty()) wait_for(master_.masters().front().device());
    out.optimizer_seconds += seconds_since(optimizer_started);
    if (entropy_.adaptive()) {  // the window's entropy over every rank's loss tokens
      entropy_.update(group_.all_reduce(bonus_entropy), group_.all_reduce(bonus_tokens));
    }
  }
  out.entropy_coef = entropy_.coef();
  out.loss_metrics = combine_metrics(parts);
  if (!kl_parts.empty()) out.kl = combine_metrics(kl_parts).front();
  if (synced_reference_ && batch.step % options_.ref_sync_every == 0) {
    reference_->sync_from(*model_, options_.ref_sync_alpha);
  }
  return out;
}

std::optional<double> GrpoTrainer::whole_batch_entropy_threshold(const StepBatch& batch, const torch::Tensor& kept_mask,
                                                                 std::int64_t micro) {
  if (options_.loss.top_entropy_quantile >= 1.0) return std::nullopt;
  // TRL takes the quantile over one micro-batch of every process; over the whole step's batch of every rank, the
  // mask depends neither on micro_batches nor on the number of ranks. One forward without gradients first.
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> valid;
  for (std::int64_t begin = 0; begin < batch.rows(); begin += micro) {
    const std::int64_t count = std::min(micro, batch.rows() - begin);
    const auto entropy = model_->token_log_probs(batch.rollout.rows(begin, count), /*with_entropy=*/true).entropy;
    valid.push_back(entropy.to(torch::kCPU, torch::kFloat64).masked_select(kept_mask.narrow(0, begin, count) != 0));
  }
  const torch::Tensor local = valid.empty() ? torch::zeros({0}, torch::kFloat64) : torch::cat(valid);
  const torch::Tensor whole = all_gather_rows(group_, local).whole;
  return top_entropy_threshold(whole.unsqueeze(0), torch::ones_like(whole).unsqueeze(0),
                               options_.loss.top_entropy_quantile);
}

void GrpoTrainer::check_stage_metrics(const std::map<std::string, double>& logged) {
  // A stage condition on a metric this run never logs would never fire: stop at the first step that trains.
  for (std::size_t i = 0; i < context_.stages().size(); ++i) {
    const std::string& metric = context_.stages()[i].metric;
    GRPO_CHECK_CONFIG(metric.empty() || logged.contains(metric),
                      "stages[{}]: 'when' names metric '{}', which this run does not log (e.g. "
                      "completions/clipped_ratio, completions/mean_length, reward, kl; see metrics.jsonl)",
                      i, metric);
  }
  stage_metrics_checked_ = true;
}

void GrpoTrainer::add_pipeline_metrics(const StepBatch& batch, std::vector<MetricValue>& values) const {
  const double staleness = static_cast<double>(batch.step - 1 - batch.weights_version.value_or(batch.step - 1));
  values.push_back({"pipeline/staleness", staleness, MetricReduction::max, 1.0});
  values.push_back({"pipeline/weights_version", static_cast<double>(batch.weights_version.value_or(batch.step - 1)),
                    MetricReduction::max, 1.0});
  values.push_back({"pipeline/trainer_wait_s", pipeline_->last_wait_seconds(), MetricReduction::max, 1.0});
  if (pipeline_period_ > 0.0) {  // from the second step on: the time between two batches taken
    values.push_back({"pipeline/trainer_idle_frac", std::min(1.0, pipeline_->last_wait_seconds() / pipeline_period_),
                      MetricReduction::max, 1.0});
    values.push_back({"pipeline/sampler_idle_frac",
                      std::clamp(1.0 - pipeline_worker_busy_ / pipeline_period_, 0.0, 1.0), MetricReduction::max, 1.0});
  }
  // The decoupled correction's importance weights π_prox / π_behave before truncation, at the loss's granularity
  // (per token, or per sequence for the sequence modes), over the loss tokens; "clipped": outside the correction's
  // [clip_min, clip_max]. Log-ratios are bounded by ±50 for the report.
  if (!batch.train || batch.rows() == 0 || !batch.old_log_probs.defined() ||
      options_.off_policy_correction != OffPolicyCorrection::decoupled) {
    return;
  }
  const SamplerCorrectionOptions& correction = options_.loss.sampler_correction;
  const torch::Tensor valid = batch.rollout.completion_mask != 0;
  const torch::Tensor log_ratio =
      (batch.old_log_probs.to(torch::kFloat64) - batch.rollout.sampler_log_probs.to(torch::kFloat64))
          .masked_fill(~valid, 0.0);
  const torch::Tensor weights = sampler_correction_is_per_sequence(correction.mode)
                                    ? log_ratio.sum(1).masked_select(valid.any(1)).clamp(-50.0, 50.0).exp()
                                    : log_ratio.masked_select(valid).clamp(-50.0, 50.0).exp();
  if (weights.numel() == 0) return;
  const double lower = correction.clip_min.value_or(0.0);
  const torch::Tensor clipped = (weights > correction.clip_max) | (weights < lower);
  const double n = static_cast<double>(weights.numel());
  values.push_back({"pipeline/importance_weight/mean", weights.mean().item<double>(), MetricReduction::weighted_mean, n});
  values.push_back({"pipeline/importance_weight/max", weights.max().item<double>(), MetricReduction::max, 1.0});
  values.push_back({"pipeline/importance_weight/clipped_frac", clipped.to(torch::kFloat64).mean().item<double>(),
                    MetricReduction::weighted_mean, n});
}

StepReport GrpoTrainer::finish_step(const StepBatch& batch, const AdvantageOutput& adv, const UpdateResult& update,
                                    double seconds) {
  // Reward and length metrics cover every completion sampled this step (all rounds: the policy, not the filter); the
  // loss metrics cover the kept groups.
  const torch::Tensor& lengths = batch.sampled_lengths;
  const double tokens = lengths.sum().item<double>();
  const double sampled = static_cast<double>(lengths.numel());
  std::vector<MetricValue> values = batch.score_metrics;
  values.insert(values.end(), batch.generation_metrics.begin(), batch.generation_metrics.end());
  values.push_back({"frac_reward_zero_std", adv.frac_reward_zero_std, MetricReduction::weighted_mean,
                    static_cast<double>(batch.rows() / batch.group_size)});
  values.insert(values.end(), update.loss_metrics.begin(), update.loss_metrics.end());
  if (update.critic) {
    const std::vector<MetricValue> critic = update.critic->metrics();
    values.insert(values.end(), critic.begin(), critic.end());
  }
  if (critic_ && batch.train) {
    const bool here = batch.rows() > 0 && adv.returns.defined();
    add_value_metrics(group_, here ? batch.old_values : torch::Tensor(), here ? adv.returns : torch::Tensor(),
                      here ? estimator_mask(batch) : torch::Tensor(), values);
  }
  if (options_.difficulty_mask) {
    values.push_back({"difficulty_mask/masked_groups", static_cast<double>(batch.difficulty_masked_groups()),
                      MetricReduction::sum, 1.0});
  }
  values.insert(values.end(),
                {{"completions/mean_length", lengths.mean().item<double>(), MetricReduction::weighted_mean, sampled},
                 {"completions/min_length", lengths.min().item<double>(), MetricReduction::min, sampled},
                 {"completions/max_length", lengths.max().item<double>(), MetricReduction::max, sampled},
                 {"completions/clipped_ratio", batch.sampled_truncated.mean().item<double>(),
                  MetricReduction::weighted_mean, sampled},
                 {"grad_norm", update.grad_norm, MetricReduction::max, 1.0},
                 {"learning_rate", learning_rate_, MetricReduction::max, 1.0},
                 {"kl_coef", update.beta, MetricReduction::max, 1.0},
                 {"entropy_coef", update.entropy_coef, MetricReduction::max, 1.0},
                 {"context/stage", static_cast<double>(context_.index()), MetricReduction::max, 1.0},
                 {"context/max_new_tokens", static_cast<double>(batch.max_new_tokens), MetricReduction::max, 1.0},
                 {"tokens_per_second", tokens / seconds, MetricReduction::sum, 1.0},
                 {"step_time", seconds, MetricReduction::max, 1.0},
                 // verl's timing_s/* names (the slowest rank's), the update split into its parts, and peak memory.
                 {"timing_s/gen", batch.generation_seconds, MetricReduction::max, 1.0},
                 {"timing_s/reward", batch.scoring_seconds, MetricReduction::max, 1.0},
                 {"timing_s/old_log_prob", batch.old_log_prob_seconds, MetricReduction::max, 1.0},
                 {"timing_s/ref", batch.ref_log_prob_seconds, MetricReduction::max, 1.0},
                 {"timing_s/update_actor", update.forward_seconds + update.backward_seconds + update.optimizer_seconds,
                  MetricReduction::max, 1.0},
                 {"timing_s/update_actor/forward", update.forward_seconds, MetricReduction::max, 1.0},
                 {"timing_s/update_actor/backward", update.backward_seconds, MetricReduction::max, 1.0},
                 {"timing_s/update_actor/optimizer", update.optimizer_seconds, MetricReduction::max, 1.0},
                 {"perf/peak_rss_gb", peak_rss_gib(), MetricReduction::max, 1.0}});
  if (critic_) {
    values.push_back({"timing_s/values", batch.values_seconds, MetricReduction::max, 1.0});
    values.push_back({"timing_s/update_critic", update.critic_seconds, MetricReduction::max, 1.0});
  }
  for (const auto& [name, value] : batch.sampling_metrics) values.push_back({name, value, MetricReduction::max, 1.0});
  for (const auto& [name, value] : batch.source_metrics) values.push_back({name, value, MetricReduction::max, 1.0});
  if (pipeline_) add_pipeline_metrics(batch, values);
  for (const auto& callback : callbacks_) callback->on_step_metrics(*this, batch, values);

  StepReport report;
  report.step = batch.step;
  report.trained = batch.train;
  report.seconds = seconds;
  report.batch = &batch;
  report.advantages = &adv;
  // KL in the reward: the KL that shaped this step's rewards (mean over sequences of the token-mean KL, over every
  // rank) and the β_r that weighed it; the measurement moves an adaptive β_r for the next step.
  const double sequences = group_.all_reduce(static_cast<double>(batch.rows()));
  std::optional<double> reward_kl_measured;
  if (options_.kl_in_reward.enabled()) {
    double kl_sum = 0.0, kl_rows = 0.0;
    if (batch.train && batch.rows() > 0) {
      const torch::Tensor tokens = (batch.rollout.completion_mask != 0).sum(1).to(torch::kFloat64);
      const torch::Tensor measured = tokens > 0;
      kl_sum = (batch.reward_kl.sum(1) / tokens.clamp_min(1.0)).masked_select(measured).sum().item<double>();
      kl_rows = measured.sum().item<double>();
    }
    kl_sum = group_.all_reduce(kl_sum);
    kl_rows = group_.all_reduce(kl_rows);
    if (kl_rows > 0) {
      reward_kl_measured = kl_sum / kl_rows;
      values.push_back({"actor/reward_kl_penalty", *reward_kl_measured, MetricReduction::max, 1.0});
    }
    values.push_back({"actor/reward_kl_penalty_coeff", reward_kl_.beta(), MetricReduction::max, 1.0});
  }
  add_sampler_mismatch(group_, batch, old_log_prob_pass(), values);
  report.scalars = reduce_metrics(group_, values);
  report.by_name = std::map<std::string, double>(report.scalars.begin(), report.scalars.end());
  if (update.actor_updated && !stage_metrics_checked_) check_stage_metrics(report.by_name);
  // Adaptive KL: the step's measured KL (token mean over every rank, as the logged `kl`) sets β for the next step.
  if (update.kl) kl_.update(reduce_metrics(group_, {*update.kl}).front().second, static_cast<std::int64_t>(sequences));
  if (reward_kl_measured) reward_kl_.update(*reward_kl_measured, static_cast<std::int64_t>(sequences));
  for (const auto& callback : callbacks_) callback->on_step_end(*this, report);
  // A metric-triggered context stage starts with the next step.
  if (const auto change = context_.end_step(batch.step, report.by_name)) {
    for (const auto& callback : callbacks_) callback->on_stage_switch(*this, *change);
  }
  // The batch s steps ahead may start now: its version (this step's weights) exists.
  if (const std::int64_t next = batch.step + 1 + options_.max_staleness.value_or(0);
      pipeline_ && next <= options_.steps && !pipeline_->pending(next)) {
    submit_batches(next, next, batch.step);
  }
  return report;
}

}  // namespace grpo::train
