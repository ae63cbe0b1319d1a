// SPDX-License-Identifier: Apache-2.0
// Umbrella header: the one include users need.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <grpo/logprob/token_log_probs.hpp>

#include <grpo/advantage/group_advantage.hpp>

#include <grpo/kl/kl_penalty.hpp>

#include <grpo/loss/aggregation.hpp>
#include <grpo/loss/grpo_loss.hpp>
#include <grpo/loss/importance_correction.hpp>
#include <grpo/loss/policy_loss.hpp>
#include <grpo/loss/recipes.hpp>
#include <grpo/loss/token_masks.hpp>

#include <grpo/io/safetensors.hpp>
