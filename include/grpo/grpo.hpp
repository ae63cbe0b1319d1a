// SPDX-License-Identifier: Apache-2.0
// Umbrella header: the one include users need.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/core/omp_wait_policy.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <grpo/logprob/fused_grpo_loss.hpp>
#include <grpo/logprob/kernel_path.hpp>
#include <grpo/logprob/linear_log_probs.hpp>
#include <grpo/logprob/token_log_probs.hpp>

#include <grpo/advantage/advantage_registry.hpp>
#include <grpo/advantage/gae.hpp>
#include <grpo/advantage/group_advantage.hpp>
#include <grpo/advantage/token_advantages.hpp>

#include <grpo/kl/kl_penalty.hpp>

#include <grpo/loss/aggregation.hpp>
#include <grpo/loss/bradley_terry.hpp>
#include <grpo/loss/grpo_loss.hpp>
#include <grpo/loss/importance_correction.hpp>
#include <grpo/loss/policy_loss.hpp>
#include <grpo/loss/policy_loss_registry.hpp>
#include <grpo/loss/recipes.hpp>
#include <grpo/loss/rollout_correction.hpp>
#include <grpo/loss/token_masks.hpp>
#include <grpo/loss/value_loss.hpp>

#include <grpo/policy/causal_lm_concepts.hpp>
#include <grpo/policy/decode.hpp>
#include <grpo/policy/policy.hpp>
#include <grpo/policy/rollout.hpp>
#include <grpo/policy/sampler.hpp>

#include <grpo/models/attention.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/models/gguf_model.hpp>
#include <grpo/models/lora.hpp>
#include <grpo/models/model_config.hpp>
#include <grpo/models/value_model.hpp>

#include <grpo/rewards/accuracy_reward.hpp>
#include <grpo/rewards/code_tests_reward.hpp>
#include <grpo/rewards/domain_rewards.hpp>
#include <grpo/rewards/executor.hpp>
#include <grpo/rewards/format_rewards.hpp>
#include <grpo/rewards/judge_reward.hpp>
#include <grpo/rewards/length_rewards.hpp>
#include <grpo/rewards/math_steps.hpp>
#include <grpo/rewards/registry.hpp>
#include <grpo/rewards/repetition_reward.hpp>
#include <grpo/rewards/reward_function.hpp>
#include <grpo/rewards/reward_model_reward.hpp>
#include <grpo/rewards/reward_prefetch.hpp>
#include <grpo/rewards/reward_set.hpp>
#include <grpo/rewards/tag_router.hpp>
#include <grpo/sandbox/sandbox.hpp>

#include <grpo/math/extract.hpp>
#include <grpo/math/graders.hpp>
#include <grpo/math/verify.hpp>

#include <grpo/text/chat_messages.hpp>
#include <grpo/text/chat_template.hpp>
#include <grpo/text/gguf_tokenizer.hpp>
#include <grpo/text/tokenizer.hpp>

#include <grpo/io/atomic_file.hpp>
#include <grpo/io/dataset.hpp>
#include <grpo/io/ggml_quants.hpp>
#include <grpo/io/gguf.hpp>
#include <grpo/io/json_lines.hpp>
#include <grpo/io/layered_config.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/io/safetensors.hpp>

#include <grpo/train/checkpoint.hpp>
#include <grpo/train/context_schedule.hpp>
#include <grpo/train/critic.hpp>
#include <grpo/train/difficulty_schedule.hpp>
#include <grpo/train/domain_mixer.hpp>
#include <grpo/train/dynamic_sampling.hpp>
#include <grpo/train/evaluation.hpp>
#include <grpo/train/generator.hpp>
#include <grpo/train/group_selection.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/entropy_controller.hpp>
#include <grpo/train/kl_controller.hpp>
#include <grpo/train/lr_schedule.hpp>
#include <grpo/train/compensated_adamw.hpp>
#include <grpo/train/master_weights.hpp>
#include <grpo/train/metrics.hpp>
#include <grpo/train/metrics_writer.hpp>
#include <grpo/train/optimizer_step.hpp>
#include <grpo/train/option_table.hpp>
#include <grpo/train/mixed_prompt_source.hpp>
#include <grpo/train/pass_rate_filter.hpp>
#include <grpo/train/progress.hpp>
#include <grpo/train/prompt_source.hpp>
#include <grpo/train/prompt_stream.hpp>
#include <grpo/train/reward_model_refresh.hpp>
#include <grpo/train/reward_model_training.hpp>
#include <grpo/train/roll_config.hpp>
#include <grpo/train/rollout_pipeline.hpp>
#include <grpo/train/rollout_ranks.hpp>
#include <grpo/train/run.hpp>
#include <grpo/train/run_config.hpp>
#include <grpo/train/run_settings.hpp>
#include <grpo/train/sft.hpp>
#include <grpo/train/step_batch_codec.hpp>
#include <grpo/train/step_scorer.hpp>
#include <grpo/train/tensorboard.hpp>
#include <grpo/train/tiny_task.hpp>
#include <grpo/train/trainer_callbacks.hpp>
#include <grpo/train/distributed.hpp>
