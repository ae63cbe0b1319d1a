// SPDX-License-Identifier: Apache-2.0
// Umbrella header: the one include users need.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/logprob/token_log_probs.hpp>
