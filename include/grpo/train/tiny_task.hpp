// SPDX-License-Identifier: Apache-2.0
// The built-in tiny task of `grpo train` and examples/r1_zero (--task tiny): a PromptSource built in code that learns in
// minutes on two CPU cores. It asks "max d1 d2 d3 d4 d5 =" and wants "<think> </think> <answer> d </answer>" with d
// the largest digit. Its starting policy is a Qwen2-shaped model built in code and warmed up to speak the format with
// a digit copied from the prompt that is never the largest: it attends to its input but starts near 5% accuracy, and
// never sees a correct answer before GRPO. Two choices keep GRPO from collapsing onto a constant answer: the warm-up
// answers depend on the prompt, and the largest digit is uniform over 1–9, so no constant is right more than 1 time in
// 9 (with uniform digits "9" is the maximum 41% of the time and the policy settles there).
//
//   grpo::train::TinyTask task(seed, /*held_out=*/256);
//   auto model = grpo::train::tiny_task_model(seed);
//   grpo::train::warm_up_tiny_model(model, task, seed, 150);   // SFT on wrong answers: the format, not the task
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/train/prompt_source.hpp>
#include <grpo/train/sft.hpp>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace grpo::train {

/// "max d1 d2 d3 d4 d5 =" → "<think> </think> <answer> d </answer> <eos>". One problem in eight (by a hash of its
/// digits) is held out and never trained on.
class TinyTask final : public PromptSource {
 public:
  static constexpr std::int64_t kMax = 10, kEquals = 11, kThinkOpen = 12, kThinkClose = 13, kAnswerOpen = 14,
                                kAnswerClose = 15, kEos = 16, kPad = 17, kBos = 18, kVocab = 19, kDigits = 5;

  TinyTask(std::uint64_t seed, std::int64_t held_out) : seed_(seed) {
    std::mt19937_64 rng(seed ^ 0x5eedULL);
    std::set<std::array<std::int64_t, kDigits>> seen;  // distinct problems
    while (static_cast<std::int64_t>(held_out_.size()) < held_out) {
      const auto digits = random_digits(rng);
      if (is_held_out(digits) && seen.insert(digits).second) held_out_.push_back(problem(digits));
    }
  }

  /// Stateless across steps (a function of the seed, the step and the round within it), so a resumed run needs no
  /// saved state: rounds restart at 0 with each step.
  std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) override {
    round_ = step == last_step_ ? round_ + 1 : 0;
    last_step_ = step;
    std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(step) +
                        round_ * 0xbf58476d1ce4e5b9ULL);
    std::vector<Problem> out;
    while (static_cast<std::int64_t>(out.size()) < count) {
      const auto digits = random_digits(rng);
      if (!is_held_out(digits)) out.push_back(problem(digits));
    }
    return out;
  }
  const std::vector<Problem>& held_out() const override { return held_out_; }

  /// Each token's text, by id.
  static constexpr std::array<const char*, kVocab> kWords = {
      "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "max", "=", "<think>", "</think>", "<answer>", "</answer>",
      "<eos>", "<pad>", "<bos>"};

  /// The words of `ids` separated by spaces, <eos>, <pad> and <bos> left out.
  std::string decode(std::span<const std::int64_t> ids) const override {
    std::string text;
    for (const std::int64_t id : ids) {
      if (id == kEos || id == kPad || id == kBos) continue;
      GRPO_CHECK(id >= 0 && id < kVocab, "TinyTask::decode: token id {} is outside the vocabulary", id);
      if (!text.empty()) text += ' ';
      text += kWords[static_cast<std::size_t>(id)];
    }
    return text;
  }
  /// A Hugging Face tokenizer.json for this vocabulary (text::Tokenizer::from_json reads it): every word an added
  /// token of its own id that swallows the whitespace before it (lstrip), <eos> <pad> <bos> special, in a byte-level
  /// BPE without merges (any other text has no token and is dropped, as Hugging Face's BPE drops it). It encodes
  /// decode(ids) back to ids (with or without spaces between the words), so models that read text (a reward model
  /// scoring the task's completions) see the task's own ids.
  static std::string tokenizer_json() {
    std::string added, vocab;
    for (std::int64_t id = 0; id < kVocab; ++id) {
      const bool special = id == kEos || id == kPad || id == kBos;
      added += fmt::format(R"({}{{"id": {}, "content": "{}", "single_word": false, "lstrip": true, "rstrip": false, )"
                           R"("normalized": false, "special": {}}})",
                           id == 0 ? "" : ",\n    ", id, kWords[static_cast<std::size_t>(id)], special);
      vocab += fmt::format(R"({}"{}": {})", id == 0 ? "" : ", ", kWords[static_cast<std::size_t>(id)], id);
    }
    return fmt::format(R"({{"version": "1.0", "truncation": null, "padding": null,)"
                       "\n  \"added_tokens\": [\n    {}],\n"
                       R"(  "normalizer": null, "post_processor": null,)"
                       "\n"
                       R"(  "pre_tokenizer": {{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, )"
                       R"("use_regex": true}},)"
                       "\n"
                       R"(  "decoder": {{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, )"
                       R"("use_regex": true}},)"
                       "\n"
                       R"(  "model": {{"type": "BPE", "vocab": {{{}}}, "merges": []}}}})"
                       "\n",
                       added, vocab);
  }

  /// Completions to grade for any of the task's problems (verifier_preference_pairs builds reward-model pairs from
  /// them): the answer block with each digit 0-9 and with none, then `random` completions of 0 to `max_tokens` words
  /// drawn uniformly from every word but <eos> <pad> <bos>, an <eos> after those shorter than max_tokens (as a sampler
  /// stops). A reward model that only ever saw well-formed answers scores text unlike them at random, and a policy
  /// trained on it finds such text (measured: GRPO on one drifted to "3 3 3 3 3 3 3 3", scored above every right
  /// answer); the random ones close the widest of those holes, not all of them (docs/reward_models.md).
  static std::vector<std::vector<std::int64_t>> answer_candidates(std::mt19937_64& rng, std::int64_t random,
                                                                  std::int64_t max_tokens) {
    std::vector<std::vector<std::int64_t>> out;
    for (std::int64_t d = 0; d <= 9; ++d) out.push_back({kThinkOpen, kThinkClose, kAnswerOpen, d, kAnswerClose, kEos});
    out.push_back({kThinkOpen, kThinkClose, kAnswerOpen, kAnswerClose, kEos});
    for (std::int64_t k = 0; k < random; ++k) {
      std::vector<std::int64_t> ids(rng() % (static_cast<std::uint64_t>(max_tokens) + 1));
      for (std::int64_t& id : ids) id = static_cast<std::int64_t>(rng() % kEos);
      if (static_cast<std::int64_t>(ids.size()) < max_tokens) ids.push_back(kEos);
      out.push_back(std::move(ids));
    }
    return out;
  }

  std::vector<std::int64_t> eos_token_ids() const override { return {kEos}; }
  std::int64_t pad_token_id() const override { return kPad; }
  std::vector<std::string> domain_names() const override { return {"tiny"}; }

  /// The format warm-up's target: the completion with a digit of the prompt that is not the largest.
  static std::vector<std::int64_t> wrong_completion(const Problem& p, std::mt19937_64& rng) {
    const auto digits = std::span(p.prompt_ids).subspan(2, kDigits);
    const std::int64_t largest = *std::max_element(digits.begin(), digits.end());
    std::vector<std::int64_t> wrong;
    for (const std::int64_t d : digits) {
      if (d != largest) wrong.push_back(d);
    }
    const std::int64_t pick = wrong[std::uniform_int_distribution<std::size_t>(0, wrong.size() - 1)(rng)];
    return std::vector<std::int64_t>{kThinkOpen, kThinkClose, kAnswerOpen, pick, kAnswerClose, kEos};
  }

 private:
  // The largest digit m is uniform over 1–9 (so no constant answer is right more than 1/9 of the time), at a
  // uniform position; the other four are uniform over 0..m, not all equal to m (there would be no wrong digit).
  static std::array<std::int64_t, kDigits> random_digits(std::mt19937_64& rng) {
    const std::int64_t largest = std::uniform_int_distribution<std::int64_t>(1, 9)(rng);
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, kDigits - 1)(rng);
    std::array<std::int64_t, kDigits> digits{};
    do {
      for (std::size_t i = 0; i < digits.size(); ++i)
        digits[i] = i == at ? largest : std::uniform_int_distribution<std::int64_t>(0, largest)(rng);
    } while (std::count(digits.begin(), digits.end(), largest) == kDigits);
    return digits;
  }
  // One problem in eight, by a hash of its digits (splitmix64's finaliser), so the split does not follow the digits.
  static bool is_held_out(const std::array<std::int64_t, kDigits>& digits) {
    std::uint64_t x = 0;
    for (const std::int64_t d : digits) x = 10 * x + static_cast<std::uint64_t>(d);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return ((x ^ (x >> 31)) & 7) == 0;
  }
  Problem problem(const std::array<std::int64_t, kDigits>& digits) const {
    Problem p;
    p.prompt_ids = {kBos, kMax};
    p.prompt_ids.insert(p.prompt_ids.end(), digits.begin(), digits.end());
    p.prompt_ids.push_back(kEquals);
    p.prompt_text = decode(p.prompt_ids);
    const std::string answer = std::to_string(*std::max_element(digits.begin(), digits.end()));
    p.row = std::make_shared<const rewards::Row>(rewards::Row{{"ground_truth", answer}});
    return p;
  }

  std::uint64_t seed_;
  std::vector<Problem> held_out_;
  std::int64_t last_step_ = std::numeric_limits<std::int64_t>::min();
  std::uint64_t round_ = 0;  // generation round within last_step_
};

/// A tiny task's model: a 2-layer Qwen2-shaped model (hidden 64, 32 positions) over `vocab` tokens ending at
/// `eos`, random weights from `seed`.
inline models::CausalLM tiny_model(std::uint64_t seed, std::int64_t vocab, std::int64_t eos) {
  torch::manual_seed(seed);
  models::ModelConfig c;
  c.architecture = models::Architecture::qwen2;
  c.vocab_size = vocab;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {eos};
  return models::CausalLM(c);
}

/// The tiny task's model: tiny_model over its vocabulary.
inline models::CausalLM tiny_task_model(std::uint64_t seed) { return tiny_model(seed, TinyTask::kVocab, TinyTask::kEos); }

/// The supervised warm-up steps of the tiny task's starting policy (grpo train --task tiny, grpo train-rm --task tiny).
inline constexpr std::int64_t kTinyTaskWarmUpSteps = 150;

/// Supervised warm-up on wrong answers copied from the prompt: the model learns the format and to read its input.
/// The library's SFT stage (train/sft.hpp): loss on the completion tokens only, token mean, the fused log-prob path.
inline void warm_up_tiny_model(models::CausalLM& model, TinyTask& task, std::uint64_t seed, std::int64_t steps) {
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  SftTrainerOptions options;
  options.max_grad_norm = 0.0;
  SftTrainer trainer(model, optimizer, options);
  std::mt19937_64 rng(seed ^ 0xa11ceULL);
  for (std::int64_t step = 1; step <= steps; ++step) {
    std::vector<SftExample> examples;
    for (const Problem& p : task.train_batch(-step, 64)) {  // negative steps: problems GRPO never samples
      const auto completion = TinyTask::wrong_completion(p, rng);
      SftExample example{p.prompt_ids, std::vector<std::uint8_t>(p.prompt_ids.size(), 0)};
      example.ids.insert(example.ids.end(), completion.begin(), completion.end());
      example.loss_mask.resize(example.ids.size(), 1);
      examples.push_back(std::move(example));
    }
    trainer.step(make_sft_batches(examples, {.batch_size = 64, .pad_token_id = TinyTask::kPad}));
  }
}

}  // namespace grpo::train
