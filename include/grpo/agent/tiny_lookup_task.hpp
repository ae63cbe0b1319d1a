// SPDX-License-Identifier: Apache-2.0
// A task only a tool can solve, small enough to learn on two CPU cores: `grpo train --task tiny_lookup --env lookup`.
// Each problem shows the values of two other keys and asks for a third, "a 3 f 5 get c =", keys of eight; the values
// (digits) are drawn afresh for every problem into the episode's table, so nothing in the prompt or in earlier
// problems predicts the one asked for: without the tool the best policy is right 1 time in 10. The `lookup` tool reads
// the table:
//
//   prompt    <bos> a 3 f 5 get c =
//   turn 0    <call> c </call> <eos>                 sampled (loss mask 1)
//   reply     <reply> 7 </reply>                     the environment's (loss mask 0)
//   turn 1    <answer> 7 </answer> <eos>             sampled; rewarded when it is the table's value
//
// The starting policy is warmed up (SFT) on trajectories that mostly look up one of the keys the prompt shows (whose
// value it already has), 1 in 10 the asked one (kWarmUpAskedShare), and answer with the reply. It speaks the protocol
// and reads the tool's reply; its most likely call is a shown key's, so near-greedily it answers another key's value,
// right about 1 time in 10, the no-tool level, while at temperature 1 it looks up the asked key now and then: GRPO has
// to learn which key to look up. (Measured: a warm-up that never looks up the asked key leaves GRPO almost nothing to
// reinforce, 0.34 after 150 steps; one that calls any of the eight keys, whatever the prompt, gives the model no way
// yet to read the asked key, 0.22; this one reaches 1.0, docs/agents.md.) The "no_tools" environment
// (environment.hpp) answers every call with an error instead, so the same run cannot learn.
#pragma once

#include <grpo/agent/environment.hpp>
#include <grpo/agent/turn_codec.hpp>
#include <grpo/core/error.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/train/prompt_source.hpp>
#include <grpo/train/sft.hpp>
#include <grpo/train/tiny_task.hpp>

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace grpo::agent {

class TinyLookupTask final : public train::PromptSource {
 public:
  static constexpr std::int64_t kGet = 10, kEquals = 11, kFirstKey = 12, kKeys = 8, kCall = 20, kCallEnd = 21,
                                kReply = 22, kReplyEnd = 23, kAnswer = 24, kAnswerEnd = 25, kError = 26, kEos = 27,
                                kPad = 28, kBos = 29, kVocab = 30;
  /// Where the prompt holds the two keys it shows (each followed by its value), and the key it asks for.
  static constexpr std::size_t kShownKeysAt[2] = {1, 3}, kAskedKeyAt = 6;
  /// The share of warm-up trajectories that look up the asked key (the others look up a shown key).
  static constexpr double kWarmUpAskedShare = 0.1;

  /// `held_out` evaluation problems, drawn from `seed` apart from the training stream.
  TinyLookupTask(std::uint64_t seed, std::int64_t held_out) : seed_(seed) {
    std::mt19937_64 rng(seed ^ 0x100cu);
    for (std::int64_t i = 0; i < held_out; ++i) held_out_.push_back(problem(rng));
  }

  /// Stateless across steps, as TinyTask: a function of the seed, the step and the round within it.
  std::vector<train::Problem> train_batch(std::int64_t step, std::int64_t count) override {
    round_ = step == last_step_ ? round_ + 1 : 0;
    last_step_ = step;
    std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(step) +
                        round_ * 0xbf58476d1ce4e5b9ULL);
    std::vector<train::Problem> out;
    for (std::int64_t i = 0; i < count; ++i) out.push_back(problem(rng));
    return out;
  }
  const std::vector<train::Problem>& held_out() const override { return held_out_; }

  std::string decode(std::span<const std::int64_t> ids) const override {
    std::string text;
    for (const std::int64_t id : ids) {
      if (id == kEos || id == kPad || id == kBos) continue;
      GRPO_CHECK(id >= 0 && id < kVocab, "TinyLookupTask::decode: token id {} is outside the vocabulary", id);
      if (!text.empty()) text += ' ';
      text += word(id);
    }
    return text;
  }
  std::vector<std::int64_t> eos_token_ids() const override { return {kEos}; }
  std::int64_t pad_token_id() const override { return kPad; }
  std::vector<std::string> domain_names() const override { return {"tiny_lookup"}; }

  /// A token's spelling: digits, "get", "=", keys "a" … "h", and the tags.
  static std::string word(std::int64_t id) {
    static constexpr const char* kTags[] = {"<call>", "</call>", "<reply>", "</reply>", "<answer>", "</answer>",
                                            "<err>",  "<eos>",   "<pad>",   "<bos>"};
    if (id >= 0 && id <= 9) return std::to_string(id);
    if (id == kGet) return "get";
    if (id == kEquals) return "=";
    if (id >= kFirstKey && id < kFirstKey + kKeys) return std::string(1, static_cast<char>('a' + (id - kFirstKey)));
    GRPO_CHECK(id >= kCall && id < kVocab, "TinyLookupTask: token id {} is outside the vocabulary", id);
    return kTags[id - kCall];
  }

  /// The episode table of `problem` (row field "table": one digit per key, "a" first).
  static std::string table(const train::Problem& problem) {
    const auto text = problem.row ? problem.row->text("table") : std::nullopt;
    GRPO_CHECK(text && static_cast<std::int64_t>(text->size()) == kKeys,
               "TinyLookupTask: problem '{}' has no lookup table", problem.id);
    return *text;
  }

  /// The warm-up's target trajectory for `problem`: the call for the asked key (kWarmUpAskedShare of the time) or else
  /// for one of the two keys the prompt shows (drawn uniformly), the tool's reply (that key's value), and the reply as
  /// the answer. Returns ids and loss mask (0 on the reply).
  static std::pair<std::vector<std::int64_t>, std::vector<std::uint8_t>> warm_up_trajectory(
      const train::Problem& problem, std::mt19937_64& rng) {
    const bool asked = std::uniform_real_distribution<double>(0, 1)(rng) < kWarmUpAskedShare;
    const std::size_t at = asked ? kAskedKeyAt : kShownKeysAt[std::uniform_int_distribution<std::size_t>(0, 1)(rng)];
    const std::int64_t key = problem.prompt_ids.at(at);
    const std::int64_t value = table(problem)[static_cast<std::size_t>(key - kFirstKey)] - '0';
    std::vector<std::int64_t> ids{kCall, key, kCallEnd, kEos, kReply, value, kReplyEnd, kAnswer, value, kAnswerEnd, kEos};
    std::vector<std::uint8_t> mask{1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1};
    return {ids, mask};
  }

 private:
  train::Problem problem(std::mt19937_64& rng) {
    std::string values;
    for (std::int64_t k = 0; k < kKeys; ++k) {
      values += static_cast<char>('0' + std::uniform_int_distribution<int>(0, 9)(rng));
    }
    // The asked key and two other keys, distinct, whose values the prompt shows.
    std::array<std::int64_t, kKeys> keys{};
    for (std::int64_t k = 0; k < kKeys; ++k) keys[static_cast<std::size_t>(k)] = k;
    for (std::size_t k = 0; k < 3; ++k) {
      std::swap(keys[k], keys[std::uniform_int_distribution<std::size_t>(k, kKeys - 1)(rng)]);
    }
    const std::int64_t key = keys[0];
    auto shown = [&](std::size_t i) { return values[static_cast<std::size_t>(keys[i])] - '0'; };
    train::Problem p;
    p.prompt_ids = {kBos, kFirstKey + keys[1], shown(1), kFirstKey + keys[2], shown(2), kGet, kFirstKey + key, kEquals};
    p.prompt_text = decode(p.prompt_ids);
    p.row = std::make_shared<const rewards::Row>(
        rewards::Row{{"ground_truth", std::string(1, values[static_cast<std::size_t>(key)])}, {"table", values}});
    p.id = fmt::format("lookup-{}", serial_++);
    return p;
  }

  std::uint64_t seed_;
  std::vector<train::Problem> held_out_;
  std::int64_t last_step_ = std::numeric_limits<std::int64_t>::min();
  std::uint64_t round_ = 0;
  std::uint64_t serial_ = 0;
};

/// The tiny task's turn format: a call is "<call> KEY </call>" (the lookup tool with {"key": KEY}); a reply is
/// "<reply> D </reply>" for a one-digit reply and "<reply> <err> </reply>" for anything else (errors).
class TinyLookupCodec final : public TurnCodec {
 public:
  std::string turn_text(std::span<const std::int64_t> turn_ids) const override {
    std::string text;
    for (const std::int64_t id : turn_ids) {
      if (!text.empty()) text += ' ';
      text += TinyLookupTask::word(id);
    }
    return text;
  }
  std::vector<ParsedToolCall> parse_calls(const std::string& turn_text) const override {
    std::istringstream words(turn_text);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    std::vector<ParsedToolCall> out;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (w[i] != "<call>") continue;
      if (i + 2 < w.size() && w[i + 2] == "</call>") {
        out.push_back({ToolCall{"lookup", fmt::format(R"({{"key": "{}"}})", w[i + 1])}, {}});
        i += 2;
      } else {
        out.push_back({std::nullopt, "Error: a call is <call> KEY </call>"});
      }
    }
    return out;
  }
  std::vector<std::int64_t> reply_ids(std::span<const std::string> replies) const override {
    std::vector<std::int64_t> ids{TinyLookupTask::kReply};
    for (const std::string& reply : replies) {
      const bool digit = reply.size() == 1 && reply[0] >= '0' && reply[0] <= '9';
      ids.push_back(digit ? reply[0] - '0' : TinyLookupTask::kError);
    }
    ids.push_back(TinyLookupTask::kReplyEnd);
    return ids;
  }
  std::string cap_reply(const std::string& reply, std::int64_t /*max_tokens*/) const override { return reply; }
};

/// The "lookup" environment: a tool reading the episode's table (TinyLookupTask::table), reset from each problem.
class TinyLookupEnvironment final : public ToolEnvironment {
 public:
  TinyLookupEnvironment() : ToolEnvironment(ToolSet()) {
    auto table = table_;
    tools_.add(std::make_shared<FunctionTool>(
        ToolSpec{.name = "lookup",
                 .description = "The value stored under a key.",
                 .parameters = R"({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]})"},
        [table](const ToolArguments& arguments) {
          const std::string key = arguments.string("key");
          if (key.size() != 1 || key[0] < 'a' || key[0] >= 'a' + TinyLookupTask::kKeys) {
            return ToolReply::failure(fmt::format("Error: no key '{}'", key));
          }
          return ToolReply::ok(std::string(1, (*table)[static_cast<std::size_t>(key[0] - 'a')]));
        }));
  }
  void reset(const train::Problem& problem) override { *table_ = TinyLookupTask::table(problem); }

 private:
  std::shared_ptr<std::string> table_ = std::make_shared<std::string>();
};

/// The tiny lookup task's model (train::tiny_model over its vocabulary).
inline models::CausalLM tiny_lookup_model(std::uint64_t seed) {
  return train::tiny_model(seed, TinyLookupTask::kVocab, TinyLookupTask::kEos);
}

/// Supervised warm-up on TinyLookupTask::warm_up_trajectory (the library's SFT stage; the replies are not trained on).
inline void warm_up_tiny_lookup_model(models::CausalLM& model, TinyLookupTask& task, std::uint64_t seed,
                                      std::int64_t steps) {
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  train::SftTrainerOptions options;
  options.max_grad_norm = 0.0;
  train::SftTrainer trainer(model, optimizer, options);
  std::mt19937_64 rng(seed ^ 0x100c0ffeULL);
  for (std::int64_t step = 1; step <= steps; ++step) {
    std::vector<train::SftExample> examples;
    for (const train::Problem& p : task.train_batch(-step, 64)) {  // negative steps: problems GRPO never samples
      auto [ids, mask] = TinyLookupTask::warm_up_trajectory(p, rng);
      train::SftExample example{p.prompt_ids, std::vector<std::uint8_t>(p.prompt_ids.size(), 0)};
      example.ids.insert(example.ids.end(), ids.begin(), ids.end());
      example.loss_mask.insert(example.loss_mask.end(), mask.begin(), mask.end());
      examples.push_back(std::move(example));
    }
    trainer.step(train::make_sft_batches(examples, {.batch_size = 64, .pad_token_id = TinyLookupTask::kPad}));
  }
}

}  // namespace grpo::agent
