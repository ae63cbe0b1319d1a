// SPDX-License-Identifier: Apache-2.0
// The generation stage of a GRPO step: what produces the completions GrpoTrainer scores and trains on. The trainer
// asks a Generator for G completions of each prompt (a sampling round, one chunk of it, ReMax's greedy completion
// per prompt, an evaluation) and never samples by itself, so another way of producing completions — multi-turn tool
// rollouts, a pipelined sampler with its own copy of the weights, a remote inference server — is another Generator
// passed to the trainer (GrpoTrainerParts), with the rest of the step unchanged.
//
//   struct EchoGenerator final : grpo::train::Generator {   // completions from anywhere: here, the prompt again
//     grpo::Rollout generate(const grpo::train::GenerationRequest& request) override { ... }
//   };
//   grpo::train::GrpoTrainer trainer(model, source, scorer, group, options,
//                                    {.generator = std::make_shared<EchoGenerator>()});
#pragma once

#include <grpo/policy/rollout.hpp>
#include <grpo/policy/sampler.hpp>
#include <grpo/train/metrics.hpp>
#include <grpo/train/prompt_source.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <any>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace grpo::train {

/// One generation call: `group_size` completions of each problem, sampled as `sampling` says. The trainer fills
/// every field of `sampling` (the run's temperature — 0 for ReMax's greedy completions — and filters, the stage's
/// completion limit, the prompt source's stop ids and padding id, and a seed that depends on the step, rank, round
/// and round, the same on every rank and for every chunk) and the problems' keys; a generator honours what it can and
/// documents what it does not.
struct GenerationRequest {
  std::span<const Problem> problems;
  std::int64_t group_size = 1;
  SamplerOptions sampling;
  /// problems[p]'s key for keyed sampling noise (SamplingNoise::keyed): its index in the step's whole batch over all
  /// ranks (or in the held-out set), so that how the batch is split into ranks, chunks and calls changes no
  /// completion. Empty: 0 … problems.size() − 1.
  std::vector<std::uint64_t> prompt_keys;
  /// > 0: generate at most this many rows at a time (a memory bound, as evaluation sets it); the pieces draw what one
  /// call would (keyed noise by the problems' keys; the generator's one stream continuing across them). 0: all rows
  /// at once.
  std::int64_t max_rows = 0;
};

class Generator {
 public:
  virtual ~Generator() = default;
  /// A Rollout of problems.size() · group_size rows, row p · G + g being completion g of problems[p] (rollout.hpp:
  /// prompt ids left-padded, completion ids right-padded with sampling.pad_token_id, the completion mask covering each
  /// completion up to and including its stop token, `truncated` where the limit cut it, and sampler_log_probs [rows,
  /// T] when the loss compares the trainer's log-probs with the sampler's). On the CPU. Called without gradients.
  virtual Rollout generate(const GenerationRequest& request) = 0;
  /// Metrics of the last generate call (a multi-turn generator's turns, tool calls and why trajectories ended),
  /// logged with the step's: the same names, reductions and order after every call (the trainer combines a step's
  /// calls and ranks with combine_metrics / reduce_metrics). Default: none.
  virtual std::vector<MetricValue> last_metrics() const { return {}; }
  /// The same generator over another model of the policy's type: a pipelined run's sampler copy (`model` holds the
  /// model type the trainer was given, e.g. models::CausalLM), sharing no state that generate() changes with this
  /// one, as the copy samples on the pipeline's worker thread. Null (the default) when this generator cannot be
  /// rebuilt so; a pipelined run refuses such a generator.
  virtual std::shared_ptr<Generator> rebind(const std::any& /*model*/) const { return nullptr; }
};

/// The prompts' token ids, in order.
inline std::vector<std::vector<std::int64_t>> prompt_ids(std::span<const Problem> problems) {
  std::vector<std::vector<std::int64_t>> out;
  out.reserve(problems.size());
  for (const Problem& p : problems) out.push_back(p.prompt_ids);
  return out;
}

/// The default generator: the library's Sampler (KV cache when the model has one) on the policy model itself, so
/// every request sees the weights as they are now.
template <typename ModelType>
class SamplerGenerator final : public Generator {
 public:
  explicit SamplerGenerator(ModelType model) : model_(std::move(model)) {}

  std::shared_ptr<Generator> rebind(const std::any& model) const override {
    const auto* other = std::any_cast<ModelType>(&model);
    return other != nullptr ? std::make_shared<SamplerGenerator>(*other) : nullptr;
  }

  Rollout generate(const GenerationRequest& request) override {
    torch::NoGradGuard no_grad;
    Sampler sampler(request.sampling);
    const auto problems = static_cast<std::int64_t>(request.problems.size());
    GRPO_CHECK(request.prompt_keys.empty() || static_cast<std::int64_t>(request.prompt_keys.size()) == problems,
               "GenerationRequest: {} prompt_keys for {} problems", request.prompt_keys.size(), problems);
    std::vector<std::uint64_t> keys = request.prompt_keys;
    if (keys.empty()) {
      for (std::int64_t p = 0; p < problems; ++p) keys.push_back(static_cast<std::uint64_t>(p));
    }
    const std::int64_t per_piece =
        request.max_rows > 0 ? std::max<std::int64_t>(1, request.max_rows / request.group_size) : problems;
    if (per_piece >= problems) return sampler.generate(model_, prompt_ids(request.problems), request.group_size, keys);
    std::vector<Rollout> pieces;
    for (std::int64_t start = 0; start < problems; start += per_piece) {
      const auto size = static_cast<std::size_t>(std::min(per_piece, problems - start));
      const auto piece = request.problems.subspan(static_cast<std::size_t>(start), size);
      pieces.push_back(sampler.generate(model_, prompt_ids(piece), request.group_size,
                                        std::span<const std::uint64_t>(keys).subspan(static_cast<std::size_t>(start), size)));
    }
    return concat_rollouts(pieces, request.sampling.pad_token_id);
  }

 private:
  ModelType model_;
};

}  // namespace grpo::train
