// SPDX-License-Identifier: Apache-2.0
// Multi-turn tool rollouts as a train::Generator: the model writes an assistant turn, its tool calls are run by the
// trajectory's Environment, the replies are appended, and the model goes on, until it answers without a call or a
// limit ends the trajectory. Token in, token out: a row of the Rollout is the whole trajectory, the sampled ids as
// they were sampled and the reply fragments as TurnCodec encoded them, so the trainer scores exactly the tokens the
// sampler drew, in the context it drew them in.
//
// Rollout fields (rollout.hpp): completion_ids = turn 0, reply 0, turn 1, reply 1, …, the last turn;
// completion_mask = 1 on sampled tokens only (the loss mask: replies are context, never trained on);
// completion_attention_mask = 1 on every real token; completion_turns = each token's turn; sampler_log_probs on the
// sampled tokens; completion_rewards = each turn's environment reward (TrajectoryInfo::turn_rewards: the
// environment's step reward plus failed_call_reward per failed call) on that turn's last sampled token, the tokens
// whose calls earned it; truncated = the trajectory ended without an answer (token budget, turn limit, a turn cut by
// the token limit, a timeout), so GrpoTrainer's mask_truncated drops it.
//
//   grpo::agent::ChatTurnCodec codec(tokenizer, tokenizer.chat_template());
//   auto generator = std::make_shared<grpo::agent::MultiTurnGenerator<Model>>(
//       model, std::make_shared<grpo::agent::ChatTurnCodec>(codec),
//       grpo::agent::EnvironmentRegistry::with_builtins().factory("calculator"), grpo::agent::MultiTurnOptions{});
//   grpo::train::GrpoTrainer trainer(model, source, scorer, group, options, {.generator = generator});
//
// Prompts must announce the tools: render them with ChatRenderOptions::tools = the environment's ToolSet::schemas().
// With a model whose KV cache can be continued (SupportsCacheContinuation: models::CausalLM), each turn continues
// the trajectories' caches from the turn before (Sampler::continue_generation): only the reply fragment and the last
// sampled token are prefilled. Other models re-run the sampler over the whole trajectory each turn.
#pragma once

#include <grpo/agent/environment.hpp>
#include <grpo/agent/multi_turn_options.hpp>
#include <grpo/agent/turn_codec.hpp>
#include <grpo/core/error.hpp>
#include <grpo/core/mix64.hpp>
#include <grpo/policy/sampler.hpp>
#include <grpo/train/generator.hpp>

#include <fmt/format.h>

#include <torch/torch.h>

#include <algorithm>
#include <any>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace grpo::agent {

/// The noise key of turn `turn` of completion `sample` of the prompt with key `prompt_key`: each (prompt, sample,
/// turn) draws its own keyed noise, a pure function of the three (so the split of a batch changes no trajectory).
inline std::uint64_t trajectory_turn_key(std::uint64_t prompt_key, std::int64_t sample, std::int64_t turn) {
  SplitMix64 mix{prompt_key};
  SplitMix64 second{mix.next() ^ (static_cast<std::uint64_t>(sample) * 0xD6E8FEB86659FD93ull)};
  SplitMix64 third{second.next() ^ (static_cast<std::uint64_t>(turn) * 0xA0761D6478BD642Full)};
  return third.next();
}

template <typename ModelType>
class MultiTurnGenerator final : public train::Generator {
 public:
  MultiTurnGenerator(ModelType model, std::shared_ptr<const TurnCodec> codec, EnvironmentFactory environments,
                     MultiTurnOptions options = {})
      : model_(std::move(model)),
        codec_(std::move(codec)),
        environments_(std::move(environments)),
        options_(std::move(options)) {
    GRPO_CHECK_CONFIG(codec_ != nullptr, "MultiTurnGenerator: no turn codec");
    GRPO_CHECK_CONFIG(environments_ != nullptr, "MultiTurnGenerator: no environment factory");
    options_.validate();
  }

  /// A generator with this one's codec, environments and options over `model` (a pipelined run's sampler copy).
  std::shared_ptr<train::Generator> rebind(const std::any& model) const override {
    const auto* other = std::any_cast<ModelType>(&model);
    return other != nullptr ? std::make_shared<MultiTurnGenerator>(*other, codec_, environments_, options_) : nullptr;
  }

  /// problems.size() · group_size trajectories (row p · G + g), each with its own environment. request.max_rows is
  /// ignored (every live trajectory is in each turn's batch).
  Rollout generate(const train::GenerationRequest& request) override {
    torch::NoGradGuard no_grad;
    const auto problems = static_cast<std::int64_t>(request.problems.size());
    const std::int64_t group = request.group_size, rows = problems * group;
    GRPO_CHECK(group >= 1, "MultiTurnGenerator: group_size must be >= 1, got {}", group);
    GRPO_CHECK(request.prompt_keys.empty() || static_cast<std::int64_t>(request.prompt_keys.size()) == problems,
               "GenerationRequest: {} prompt_keys for {} problems", request.prompt_keys.size(), problems);
    const auto started = std::chrono::steady_clock::now();
    std::vector<Trajectory> state(static_cast<std::size_t>(rows));
    Carry carry;
    for (std::int64_t row = 0; row < rows; ++row) {
      Trajectory& t = state[static_cast<std::size_t>(row)];
      t.problem = &request.problems[static_cast<std::size_t>(row / group)];
      t.environment = std::shared_ptr<Environment>(environments_());
      GRPO_CHECK(t.environment != nullptr, "MultiTurnGenerator: the environment factory returned none");
      t.environment->reset(*t.problem);
    }
    for (std::int64_t turn = 0; turn < options_.max_turns; ++turn) {
      std::vector<std::int64_t> live;
      for (std::int64_t row = 0; row < rows; ++row) {
        if (!state[static_cast<std::size_t>(row)].done) live.push_back(row);
      }
      if (live.empty()) break;
      sample_turn(request, state, live, turn, carry);
      answer_calls(state, live, turn, started);
    }
    Rollout out = assemble(state, request.sampling.pad_token_id);
    infos_.clear();
    for (auto& t : state) infos_.push_back(std::move(t.info));
    return out;
  }

  /// multi_turn/turns, tool_calls, reply_tokens (means over trajectories), failed_call_fraction (over calls),
  /// end/<reason> (fraction of trajectories per TrajectoryEnd) and timing_s/tools (the most tool time of a
  /// trajectory).
  std::vector<train::MetricValue> last_metrics() const override {
    using train::MetricReduction;
    const auto rows = static_cast<double>(infos_.size());
    double turns = 0, calls = 0, failed = 0, reply_tokens = 0, tool_seconds = 0;
    std::vector<double> ends(detail::kTrajectoryEndNames.size(), 0.0);
    for (const TrajectoryInfo& t : infos_) {
      turns += static_cast<double>(t.turns);
      calls += static_cast<double>(t.tool_calls);
      failed += static_cast<double>(t.failed_calls);
      reply_tokens += static_cast<double>(t.reply_tokens);
      tool_seconds = std::max(tool_seconds, t.tool_seconds);
      ends[static_cast<std::size_t>(t.end)] += 1.0;
    }
    const auto mean = [&](double total) { return rows > 0 ? total / rows : 0.0; };
    std::vector<train::MetricValue> out{
        {"multi_turn/turns", mean(turns), MetricReduction::weighted_mean, rows},
        {"multi_turn/tool_calls", mean(calls), MetricReduction::weighted_mean, rows},
        {"multi_turn/failed_call_fraction", calls > 0 ? failed / calls : 0.0, MetricReduction::weighted_mean, calls},
        {"multi_turn/reply_tokens", mean(reply_tokens), MetricReduction::weighted_mean, rows},
    };
    for (const auto& entry : detail::kTrajectoryEndNames) {
      out.push_back({fmt::format("multi_turn/end/{}", entry.name), mean(ends[static_cast<std::size_t>(entry.value)]),
                     MetricReduction::weighted_mean, rows});
    }
    out.push_back({"timing_s/tools", tool_seconds, MetricReduction::max, rows});
    return out;
  }

  /// The trajectories of the last generate call, row by row.
  const std::vector<TrajectoryInfo>& trajectories() const { return infos_; }
  const MultiTurnOptions& options() const { return options_; }

 private:
  struct Trajectory {
    const train::Problem* problem = nullptr;
    std::shared_ptr<Environment> environment;
    std::vector<std::int64_t> ids, loss_mask, turns;
    std::vector<float> log_probs;
    std::vector<ParsedToolCall> pending;  // the calls of the turn just sampled
    bool done = false, truncated = false;
    TrajectoryInfo info;
  };

  // The KV cache of the rows sampled in the turn before (cache row i is trajectory rows[i]), for models whose cache
  // continues.
  struct Carry {
    CachedSequences<typename grpo::detail::CacheOf<ModelType>::type> cached;
    std::vector<std::int64_t> rows;
  };

  std::int64_t left(const Trajectory& t) const { return options_.max_total_tokens - static_cast<std::int64_t>(t.ids.size()); }

  void finish(Trajectory& t, TrajectoryEnd end) {
    t.done = true;
    t.info.end = end;
    t.truncated = end != TrajectoryEnd::answer && end != TrajectoryEnd::environment;
  }

  // One assistant turn for each live row: the sampler continues prompt + trajectory so far.
  void sample_turn(const train::GenerationRequest& request, std::vector<Trajectory>& state,
                   const std::vector<std::int64_t>& live, std::int64_t turn, Carry& carry) {
    SamplerOptions sampling = request.sampling;
    std::int64_t most = 0;
    for (const std::int64_t row : live) most = std::max(most, left(state[static_cast<std::size_t>(row)]));
    sampling.max_new_tokens = std::min(request.sampling.max_new_tokens, most);
    std::vector<std::vector<std::int64_t>> sequences;
    std::vector<std::uint64_t> keys;
    for (const std::int64_t row : live) {
      const Trajectory& t = state[static_cast<std::size_t>(row)];
      std::vector<std::int64_t> sequence = t.problem->prompt_ids;
      sequence.insert(sequence.end(), t.ids.begin(), t.ids.end());
      sequences.push_back(std::move(sequence));
      const std::int64_t p = row / request.group_size;
      const std::uint64_t prompt_key =
          request.prompt_keys.empty() ? static_cast<std::uint64_t>(p) : request.prompt_keys[static_cast<std::size_t>(p)];
      keys.push_back(trajectory_turn_key(prompt_key, row % request.group_size, turn));
    }
    Sampler sampler(sampling);
    Rollout out;
    if constexpr (SupportsCacheContinuation<ModelType>) {
      // Every live row was live in the turn before, in the same order: keep its cache rows.
      if (!carry.rows.empty()) {
        std::vector<std::int64_t> keep;
        for (std::size_t i = 0, j = 0; i < live.size(); ++i, ++j) {
          while (carry.rows[j] != live[i]) ++j;
          keep.push_back(static_cast<std::int64_t>(j));
        }
        carry.cached.select_rows(torch::tensor(keep, torch::kInt64));
      }
      out = sampler.continue_generation(model_, sequences, carry.cached, keys);
      carry.rows = live;
    } else {
      out = sampler.generate(model_, sequences, 1, keys);
    }
    const auto ids = out.completion_ids.accessor<std::int64_t, 2>();
    const auto mask = out.completion_mask.accessor<std::int64_t, 2>();
    const auto log_probs = out.sampler_log_probs.to(torch::kFloat32).contiguous();
    const auto lp = log_probs.accessor<float, 2>();
    for (std::size_t i = 0; i < live.size(); ++i) {
      Trajectory& t = state[static_cast<std::size_t>(live[i])];
      const auto k = static_cast<std::int64_t>(i);
      std::int64_t length = 0;
      while (length < out.completion_length() && mask[k][length] != 0) ++length;
      const std::int64_t kept = std::min(length, left(t));  // tokens past this row's budget never enter the rollout
      std::vector<std::int64_t> turn_ids;
      for (std::int64_t j = 0; j < kept; ++j) {
        turn_ids.push_back(ids[k][j]);
        t.ids.push_back(ids[k][j]);
        t.loss_mask.push_back(1);
        t.turns.push_back(turn);
        t.log_probs.push_back(lp[k][j]);
      }
      ++t.info.turns;
      t.info.sampled_tokens += kept;
      t.info.final_turn = codec_->turn_text(turn_ids);
      const bool ended = kept > 0 && std::find(request.sampling.eos_token_ids.begin(),
                                               request.sampling.eos_token_ids.end(),
                                               turn_ids.back()) != request.sampling.eos_token_ids.end();
      t.pending.clear();
      if (!ended) {
        finish(t, kept < length || left(t) <= 0 ? TrajectoryEnd::budget : TrajectoryEnd::length);
        continue;
      }
      t.pending = codec_->parse_calls(t.info.final_turn);
      if (t.pending.empty()) {
        finish(t, TrajectoryEnd::answer);
      } else if (turn + 1 == options_.max_turns) {
        t.info.tool_calls += static_cast<std::int64_t>(t.pending.size());
        finish(t, TrajectoryEnd::turns);
      }
    }
  }

  // Runs the environments of the rows whose turn made calls (concurrently) and appends their replies.
  void answer_calls(std::vector<Trajectory>& state, const std::vector<std::int64_t>& live, std::int64_t turn,
                    std::chrono::steady_clock::time_point started) {
    std::vector<StepJob> jobs;
    std::vector<std::int64_t> stepped;
    for (const std::int64_t row : live) {
      Trajectory& t = state[static_cast<std::size_t>(row)];
      if (t.done) continue;
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - started;
      if (elapsed.count() >= options_.trajectory_timeout_seconds) {
        finish(t, TrajectoryEnd::timeout);
        continue;
      }
      StepJob job;
      job.environment = t.environment;
      job.turn_text = t.info.final_turn;
      job.calls = t.pending;
      // Blocks past the per-turn limit are not run: they are answered with an error below.
      if (static_cast<std::int64_t>(job.calls.size()) > options_.max_calls_per_turn) {
        job.calls.resize(static_cast<std::size_t>(options_.max_calls_per_turn));
      }
      const double seconds = std::min(options_.step_timeout_seconds, options_.trajectory_timeout_seconds - elapsed.count());
      job.timeout = std::chrono::milliseconds(std::max<std::int64_t>(1, static_cast<std::int64_t>(seconds * 1000.0)));
      jobs.push_back(std::move(job));
      stepped.push_back(row);
    }
    if (jobs.empty()) return;
    const std::vector<StepResult> results = run_steps(jobs, options_.tool_threads);
    for (std::size_t i = 0; i < stepped.size(); ++i) {
      Trajectory& t = state[static_cast<std::size_t>(stepped[i])];
      const StepResult& result = results[i];
      std::vector<std::string> replies = result.step.replies;
      std::int64_t failed = 0;
      for (const auto status : result.step.statuses) failed += status != ToolOutcome::Status::ok;
      for (std::size_t extra = replies.size(); extra < t.pending.size(); ++extra, ++failed) {
        replies.push_back(fmt::format("Error: at most {} tool calls per turn", options_.max_calls_per_turn));
      }
      t.info.tool_calls += static_cast<std::int64_t>(t.pending.size());
      t.info.failed_calls += failed;
      t.info.tool_seconds += result.seconds;
      t.info.turn_rewards.resize(static_cast<std::size_t>(turn) + 1, 0.0);
      t.info.turn_rewards[static_cast<std::size_t>(turn)] +=
          result.step.reward + options_.failed_call_reward * static_cast<double>(failed);
      if (result.timed_out) {
        finish(t, TrajectoryEnd::timeout);
        continue;
      }
      if (result.step.done) {
        finish(t, TrajectoryEnd::environment);
        continue;
      }
      for (auto& reply : replies) reply = codec_->cap_reply(reply, options_.max_reply_tokens);
      const std::vector<std::int64_t> fragment = codec_->reply_ids(replies);
      if (static_cast<std::int64_t>(fragment.size()) >= left(t)) {  // no room for the reply and a token after it
        finish(t, TrajectoryEnd::budget);
        continue;
      }
      for (const std::int64_t id : fragment) {
        t.ids.push_back(id);
        t.loss_mask.push_back(0);
        t.turns.push_back(turn);
        t.log_probs.push_back(0.0f);
      }
      t.info.reply_tokens += static_cast<std::int64_t>(fragment.size());
    }
  }

  // The trajectories as one Rollout: prompts left-padded, trajectories right-padded.
  static Rollout assemble(const std::vector<Trajectory>& state, std::int64_t pad) {
    const auto rows = static_cast<std::int64_t>(state.size());
    std::int64_t tp = 1, tc = 1;
    for (const auto& t : state) {
      tp = std::max(tp, static_cast<std::int64_t>(t.problem->prompt_ids.size()));
      tc = std::max(tc, static_cast<std::int64_t>(t.ids.size()));
    }
    Rollout r;
    r.prompt_ids = torch::full({rows, tp}, pad, torch::kInt64);
    r.prompt_mask = torch::zeros({rows, tp}, torch::kInt64);
    r.completion_ids = torch::full({rows, tc}, pad, torch::kInt64);
    r.completion_mask = torch::zeros({rows, tc}, torch::kInt64);
    r.completion_attention_mask = torch::zeros({rows, tc}, torch::kInt64);
    r.completion_turns = torch::full({rows, tc}, -1, torch::kInt64);
    r.sampler_log_probs = torch::zeros({rows, tc}, torch::kFloat32);
    r.completion_rewards = torch::zeros({rows, tc}, torch::kFloat32);
    r.truncated = torch::zeros({rows}, torch::kBool);
    auto pi = r.prompt_ids.accessor<std::int64_t, 2>(), pm = r.prompt_mask.accessor<std::int64_t, 2>();
    auto ci = r.completion_ids.accessor<std::int64_t, 2>(), cm = r.completion_mask.accessor<std::int64_t, 2>();
    auto ca = r.completion_attention_mask.accessor<std::int64_t, 2>(), ct = r.completion_turns.accessor<std::int64_t, 2>();
    auto lp = r.sampler_log_probs.accessor<float, 2>(), rw = r.completion_rewards.accessor<float, 2>();
    auto tr = r.truncated.accessor<bool, 1>();
    for (std::int64_t row = 0; row < rows; ++row) {
      const Trajectory& t = state[static_cast<std::size_t>(row)];
      const auto& prompt = t.problem->prompt_ids;
      const std::int64_t offset = tp - static_cast<std::int64_t>(prompt.size());
      for (std::size_t j = 0; j < prompt.size(); ++j) {
        pi[row][offset + static_cast<std::int64_t>(j)] = prompt[j];
        pm[row][offset + static_cast<std::int64_t>(j)] = 1;
      }
      for (std::size_t j = 0; j < t.ids.size(); ++j) {
        const auto c = static_cast<std::int64_t>(j);
        ci[row][c] = t.ids[j];
        cm[row][c] = t.loss_mask[j];
        ca[row][c] = 1;
        ct[row][c] = t.turns[j];
        lp[row][c] = t.log_probs[j];
      }
      // A turn's reward goes on its last sampled token (a turn that made calls sampled at least the call).
      for (std::size_t j = t.ids.size(); j-- > 0;) {
        const auto turn = static_cast<std::size_t>(t.turns[j]);
        const bool last_sampled_of_turn =
            t.loss_mask[j] != 0 && (j + 1 == t.ids.size() || t.turns[j + 1] != t.turns[j] || t.loss_mask[j + 1] == 0);
        if (last_sampled_of_turn && turn < t.info.turn_rewards.size()) {
          rw[row][static_cast<std::int64_t>(j)] = static_cast<float>(t.info.turn_rewards[turn]);
        }
      }
      tr[row] = t.truncated;
    }
    return r;
  }

  ModelType model_;
  std::shared_ptr<const TurnCodec> codec_;
  EnvironmentFactory environments_;
  MultiTurnOptions options_;
  std::vector<TrajectoryInfo> infos_;
};

}  // namespace grpo::agent
