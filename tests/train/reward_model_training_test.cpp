// SPDX-License-Identifier: Apache-2.0
// Preference pairs in TRL's four formats (texts and conversations, implicit and explicit prompts, margins) with the
// errors a bad line gives; and train_reward_model: a tiny reward model on GPT-2's tokenizer learns to order held-out
// pairs it started out ordering at chance, and does not at learning rate 0; pairs made by a verifier or from grades;
// the tiny task's tokenizer (what a reward model of the tiny task reads).
#include <grpo/core/error.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/text/chat_template.hpp>
#include <grpo/text/tokenizer.hpp>
#include <grpo/train/reward_model_training.hpp>
#include <grpo/train/tiny_task.hpp>
#include <support/model_testing.hpp>
#include <support/skip.hpp>
#include <text/reference_fixture.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

using grpo::train::parse_preference_pairs;
using grpo::train::PreferencePair;

TEST_CASE("parse_preference_pairs reads TRL's text and conversational formats, with implicit and explicit prompts",
          "[train][reward_model]") {
  const auto chat = grpo::text::ChatTemplate::from_name("chatml");
  const std::string jsonl = R"({"chosen": "The sky is blue.", "rejected": "The sky is green."}
{"prompt": "Q: 2+2?", "chosen": " 4", "rejected": " 5", "margin": 0.5}

{"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "assistant", "content": "hello"}], "rejected": [{"role": "assistant", "content": "go away"}]}
{"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "no"}]}
)";
  const auto pairs = parse_preference_pairs(jsonl, "prefs.jsonl", &chat);
  REQUIRE(pairs.size() == 4);
  CHECK(pairs[0].prompt.empty());
  CHECK(pairs[0].chosen == "The sky is blue.");
  CHECK(pairs[0].rejected == "The sky is green.");
  CHECK_FALSE(pairs[0].margin);
  CHECK(pairs[1].prompt == "Q: 2+2?");
  CHECK(pairs[1].chosen == " 4");
  CHECK(*pairs[1].margin == 0.5);
  CHECK(pairs[2].source == "prefs.jsonl:4");  // blank lines count
  const std::string header = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  for (const std::size_t i : {2u, 3u}) {  // explicit prompt, and the same prompt found as the common first message
    CHECK(pairs[i].prompt == header);
    CHECK(pairs[i].chosen == "hello<|im_end|>\n");
  }
  CHECK(pairs[2].rejected == "go away<|im_end|>\n");
  CHECK(pairs[3].rejected == "no<|im_end|>\n");
}

TEST_CASE("parse_preference_pairs: a missing side, mixed kinds, a bad margin or a conversation without a template "
          "are errors naming the line and field",
          "[train][reward_model][errors]") {
  const auto chat = grpo::text::ChatTemplate::from_name("chatml");
  CHECK_THROWS_WITH(parse_preference_pairs("{\"chosen\": \"a\", \"rejected\": \"b\"}\n{\"chosen\": \"a\"}", "p.jsonl"),
                    Catch::Contains("p.jsonl:2: missing field \"rejected\""));
  CHECK_THROWS_WITH(parse_preference_pairs(R"({"rejected": "b"})", "p.jsonl"),
                    Catch::Contains("p.jsonl:1: missing field \"chosen\""));
  CHECK_THROWS_WITH(parse_preference_pairs(R"({"chosen": 3, "rejected": "b"})", "p.jsonl"),
                    Catch::Contains("field \"chosen\" must be a string or a list of messages"));
  CHECK_THROWS_WITH(
      parse_preference_pairs(R"({"chosen": "a", "rejected": [{"role": "assistant", "content": "b"}]})", "p.jsonl", &chat),
      Catch::Contains("must all be texts or all be lists of messages"));
  CHECK_THROWS_WITH(parse_preference_pairs(R"({"chosen": "a", "rejected": "b", "margin": "big"})", "p.jsonl"),
                    Catch::Contains("p.jsonl:1: field \"margin\" must be a finite number"));
  CHECK_THROWS_AS(parse_preference_pairs(R"({"chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]})",
                                         "p.jsonl"),
                  grpo::ConfigError);
  CHECK_THROWS_WITH(parse_preference_pairs(R"({"chosen": [{"role": "assistant"}], "rejected": []})", "p.jsonl", &chat),
                    Catch::Contains("p.jsonl:1") && Catch::Contains("chosen[0].content"));
  CHECK_THROWS_WITH(parse_preference_pairs("not json", "p.jsonl"), Catch::Contains("p.jsonl:1: not a JSON object"));
}

TEST_CASE("train_reward_model: a tiny reward model learns to order held-out preference pairs (accuracy from chance "
          "to 0.95 and more), and at learning rate 0 it does not",
          "[train][reward_model][needs-tokenizer]") {
  const auto dir = grpo::text::testing::find_tokenizer_dir("gpt2");
  if (!dir) GRPO_SKIP(grpo::text::testing::missing_tokenizer("gpt2"));
  const auto tokenizer = grpo::text::Tokenizer::from_file(*dir / "tokenizer.json");
  // A review is preferred when it ends with a good word: 10 good and 10 bad words (one GPT-2 token each after a
  // space), after one of four prompts. Train on 60 of the 100 (good, bad) combinations, hold out the other 40.
  const std::vector<std::string> good{"great", "good", "nice", "fine", "lovely", "superb", "fun", "happy", "best", "cool"};
  const std::vector<std::string> bad{"awful", "bad", "poor", "sad", "worst", "ugly", "dull", "weak", "boring", "rude"};
  const std::vector<std::string> prompts{"Review:", "The film was", "Our stay was", "Verdict:"};
  std::vector<PreferencePair> train, held_out;
  for (std::size_t g = 0; g < good.size(); ++g) {
    for (std::size_t b = 0; b < bad.size(); ++b) {
      PreferencePair pair{.prompt = prompts[(g + 3 * b) % prompts.size()], .chosen = " " + good[g],
                          .rejected = " " + bad[b]};
      ((g + b) % 5 < 3 ? train : held_out).push_back(pair);
    }
  }
  REQUIRE(train.size() == 60);
  const auto run = [&](double lr) {
    torch::manual_seed(21);
    grpo::models::CausalLM backbone(grpo::testing::tiny_model_config({.vocab = tokenizer.vocab_size(), .hidden = 16}));
    auto model = grpo::models::value_model_from_policy(backbone, grpo::models::ScalarHeadLayout::sequence_classification);
    const double before = grpo::train::evaluate_reward_model(model, tokenizer, held_out).accuracy;
    const auto epochs = grpo::train::train_reward_model(model, tokenizer, train,
                                                        {.epochs = 8, .batch_size = 12, .learning_rate = lr, .seed = 3});
    const auto after = grpo::train::evaluate_reward_model(model, tokenizer, held_out);
    return std::tuple{before, after, epochs};
  };
  const auto [before, after, epochs] = run(1e-2);
  INFO("held-out accuracy before " << before << ", after " << after.accuracy << ", loss " << after.loss);
  CHECK(before <= 0.8);
  CHECK(after.accuracy >= 0.95);
  CHECK(epochs.back().loss < epochs.front().loss);
  CHECK(after.pairs == 40);
  const auto control = run(0.0);
  CHECK(std::get<0>(control) == before);
  CHECK(std::get<1>(control).accuracy == before);  // nothing learnt
}

TEST_CASE("train_reward_model on bf16 weights: fp32 master weights (and compensated) keep steps below bf16's "
          "resolution, so the model moves as its float32 copy does, where without masters it would not move",
          "[train][reward_model][precision][needs-tokenizer]") {
  const auto dir = grpo::text::testing::find_tokenizer_dir("gpt2");
  if (!dir) GRPO_SKIP(grpo::text::testing::missing_tokenizer("gpt2"));
  const auto tokenizer = grpo::text::Tokenizer::from_file(*dir / "tokenizer.json");
  std::vector<PreferencePair> pairs;
  for (const char* word : {"great", "good", "nice", "fine", "lovely", "fun"}) {
    pairs.push_back({.prompt = "Review:", .chosen = std::string(" ") + word, .rejected = " awful"});
  }
  torch::manual_seed(5);
  grpo::models::CausalLM backbone(grpo::testing::tiny_model_config({.vocab = tokenizer.vocab_size(), .hidden = 16}));
  auto full = grpo::models::value_model_from_policy(backbone, grpo::models::ScalarHeadLayout::sequence_classification);
  std::map<std::string, torch::Tensor> start;  // hf_state() holds the parameters themselves: copies
  for (const auto& [name, w] : full->hf_state()) start.emplace(name, w.clone());
  const auto half_copy = [&] {
    auto m = grpo::models::value_model_from_policy(backbone, grpo::models::ScalarHeadLayout::sequence_classification);
    m->to(torch::kBFloat16);
    torch::NoGradGuard no_grad;
    m->head_weight().copy_(full->head_weight());  // the same head, rounded
    return m;
  };
  auto master = half_copy(), compensated = half_copy();
  // 3e-6 a step, 1/25 of half a bf16 spacing at |w| = 0.02 (the weights' scale): stepped on bf16 weights alone, almost
  // every update would round away. 300 steps move a float32 weight up to 9e-4, several spacings.
  const grpo::train::RewardModelTrainingOptions options{.epochs = 300, .batch_size = 6, .learning_rate = 3e-6,
                                                        .max_grad_norm = 0.0, .seed = 1};
  grpo::train::train_reward_model(full, tokenizer, pairs, options);
  grpo::train::train_reward_model(master, tokenizer, pairs, options);
  auto in_place = options;
  in_place.optimizer_precision = grpo::train::OptimizerPrecision::compensated;
  grpo::train::train_reward_model(compensated, tokenizer, pairs, in_place);
  const auto trained = full->hf_state();
  for (const auto& [label, model] : {std::pair{"fp32 masters", &master}, std::pair{"compensated", &compensated}}) {
    const auto state = (*model)->hf_state();
    // Squared norms over the weights fp32 training moved (the embeddings of tokens no pair has stay): fp32's move, the
    // bf16 model from fp32, and bf16's rounding of fp32.
    double moved = 0, apart = 0, rounding = 0;
    for (const auto& [name, w] : trained) {
      CHECK(state.at(name).scalar_type() == torch::kBFloat16);
      const torch::Tensor changed = w != start.at(name);
      const auto sum = [&](const torch::Tensor& d) { return d.masked_select(changed).pow(2).sum().item<double>(); };
      moved += sum(w - start.at(name));
      apart += sum(state.at(name).to(torch::kFloat32) - w);
      rounding += sum(w.to(torch::kBFloat16).to(torch::kFloat32) - w);
    }
    INFO(label << ": fp32 moved " << std::sqrt(moved) << ", bf16 from fp32 " << std::sqrt(apart) << ", bf16 rounding of "
               "fp32 " << std::sqrt(rounding));
    // A bf16 model whose updates rounded away would stay at the start, sqrt(moved) from where fp32 ends. With masters
    // it follows fp32, up to the final rounding and its bf16 gradients' differences. Measured: moved 0.038, apart 0.0069
    // (both precisions), rounding 0.0065; AdamW on the bf16 weights alone ends 0.037 apart.
    CHECK(std::sqrt(rounding) < 0.3 * std::sqrt(moved));
    CHECK(std::sqrt(apart) < 0.5 * std::sqrt(moved));
  }
  // float16 is refused: its gradients would need loss scaling.
  auto fp16 = half_copy();
  fp16->to(torch::kHalf);
  CHECK_THROWS_WITH(grpo::train::train_reward_model(fp16, tokenizer, pairs, options), Catch::Contains("float16"));
}

namespace {

/// A verifier that calls "right" correct (1), "wrong" wrong (0) and anything else unjudgeable.
class WordVerifier final : public grpo::rewards::RewardFunction {
 public:
  std::string name() const override { return "word"; }
  std::vector<std::optional<float>> score(std::span<const grpo::rewards::Completion> batch,
                                          const grpo::rewards::ScoringContext&) const override {
    std::vector<std::optional<float>> out;
    for (const auto& c : batch) {
      out.push_back(c.text.starts_with("right") ? std::optional<float>(1.0f)
                    : c.text.starts_with("wrong") ? std::optional<float>(0.0f)
                                                  : std::nullopt);
    }
    return out;
  }
};

grpo::rewards::Completion graded(std::size_t group, std::string text) {
  grpo::rewards::Completion c;
  c.prompt = "prompt " + std::to_string(group);
  c.text = std::move(text);
  c.group = group;
  return c;
}

}  // namespace

TEST_CASE("verifier_preference_pairs: a right completion preferred to a wrong one of the same prompt, distinct pairs, "
          "prompts with one kind left out",
          "[train][reward_model]") {
  // Group 4 comes first; group 0 has 2 right × 3 wrong; group 1 only right ones; group 2 only an unjudgeable one
  // beside a wrong one; group 3 one of each.
  const std::vector<grpo::rewards::Completion> completions{
      graded(4, "right a"), graded(0, "right a"), graded(0, "wrong a"), graded(1, "right a"), graded(0, "wrong b"),
      graded(2, "unsure"),  graded(0, "right b"), graded(2, "wrong a"), graded(0, "wrong c"), graded(3, "wrong a"),
      graded(3, "right a"), graded(1, "right b"), graded(4, "wrong a")};
  const WordVerifier verifier;
  for (const std::int64_t per_prompt : {1, 4, 6, 50}) {
    INFO("pairs_per_prompt " << per_prompt);
    const auto pairs = grpo::train::verifier_preference_pairs(completions, verifier, 1.0, per_prompt, 7);
    std::vector<std::string> sources;
    std::set<std::tuple<std::string, std::string, std::string>> distinct;
    for (const auto& p : pairs) {
      CHECK(p.chosen.starts_with("right"));
      CHECK(p.rejected.starts_with("wrong"));
      CHECK(p.prompt == "prompt " + p.source.substr(6));  // "group G"
      CHECK_FALSE(p.margin.has_value());
      if (sources.empty() || sources.back() != p.source) sources.push_back(p.source);
      distinct.insert({p.prompt, p.chosen, p.rejected});
    }
    CHECK(sources == std::vector<std::string>{"group 4", "group 0", "group 3"});  // by first completion
    const std::size_t group0 = std::min<std::size_t>(static_cast<std::size_t>(per_prompt), 6);  // 2 × 3 combinations
    CHECK(pairs.size() == 1 + group0 + 1);
    CHECK(distinct.size() == pairs.size());
  }
  // The same seed draws the same pairs; the threshold decides what is right.
  CHECK(grpo::train::verifier_preference_pairs(completions, verifier, 1.0, 2, 7).at(1).rejected ==
        grpo::train::verifier_preference_pairs(completions, verifier, 1.0, 2, 7).at(1).rejected);
  CHECK(grpo::train::verifier_preference_pairs(completions, verifier, 1.5, 2, 7).empty());  // nothing is right
  CHECK_THROWS_WITH(grpo::train::verifier_preference_pairs(completions, verifier, 1.0, 0),
                    Catch::Contains("pairs_per_prompt"));
}

TEST_CASE("graded_preference_pairs: each group's right completions preferred to its wrong ones, ungraded ones left out",
          "[train][reward_model]") {
  const std::vector<grpo::rewards::Completion> completions{graded(1, "a"), graded(0, "b"), graded(1, "c"),
                                                           graded(1, "d"), graded(0, "e"), graded(1, "f"),
                                                           graded(2, "g")};
  //                                           a     b      c      d             e     f      g
  const std::vector<std::optional<bool>> correct{true, true, false, std::nullopt, true, false, false};
  const auto pairs = grpo::train::graded_preference_pairs(completions, correct, 5, 3);
  // Group 1 (first seen): a over c and a over f, in a drawn order; group 0 has only right ones, group 2 a wrong one.
  REQUIRE(pairs.size() == 2);
  for (const auto& p : pairs) {
    CHECK(p.prompt == "prompt 1");
    CHECK(p.chosen == "a");
    CHECK(p.source == "group 1");
  }
  CHECK(((pairs[0].rejected == "c" && pairs[1].rejected == "f") || (pairs[0].rejected == "f" && pairs[1].rejected == "c")));
  CHECK(grpo::train::graded_preference_pairs(completions, correct, 1, 3).size() == 1);
  CHECK_THROWS_WITH(grpo::train::graded_preference_pairs(completions, std::vector<std::optional<bool>>(3), 1),
                    Catch::Contains("3 grades for 7 completions"));
  CHECK_THROWS_AS(grpo::train::graded_preference_pairs(completions, correct, 0), grpo::ConfigError);
}

TEST_CASE("The tiny task's tokenizer encodes its texts back to the task's own ids", "[train][reward_model]") {
  const auto tokenizer = grpo::text::Tokenizer::from_json(grpo::train::TinyTask::tokenizer_json(), "tiny");
  grpo::train::TinyTask task(5, 16);
  CHECK(tokenizer.vocab_size() == grpo::train::TinyTask::kVocab);
  const auto encode = [&](const std::string& text) {
    const auto ids = tokenizer.encode(text, {.add_special_tokens = false});
    return std::vector<std::int64_t>(ids.begin(), ids.end());
  };
  for (const auto& problem : task.held_out()) {
    // The prompt without its <bos> (decode drops it), then each answer candidate as a reward model reads it:
    // prompt + completion with no space between.
    const std::vector<std::int64_t> prompt(problem.prompt_ids.begin() + 1, problem.prompt_ids.end());
    CHECK(encode(problem.prompt_text) == prompt);
    std::mt19937_64 rng(3);
    for (auto ids : grpo::train::TinyTask::answer_candidates(rng, 20, 8)) {
      CHECK(ids.size() <= 8);
      if (ids.back() == grpo::train::TinyTask::kEos) ids.pop_back();  // decode drops it
      std::vector<std::int64_t> whole = prompt;
      whole.insert(whole.end(), ids.begin(), ids.end());
      CHECK(encode(task.decode(ids)) == ids);
      CHECK(encode(problem.prompt_text + task.decode(ids)) == whole);
    }
  }
  // Hugging Face's tokenizers (0.23.3) reads the same file to the same ids, text it has no token for dropped.
  CHECK(encode("max 1 7 3 0 2 =<think> </think> <answer> 7 </answer>") ==
        std::vector<std::int64_t>{10, 1, 7, 3, 0, 2, 11, 12, 13, 14, 7, 15});
  CHECK(encode("<answer></answer>") == std::vector<std::int64_t>{14, 15});
  CHECK(encode("max 1 x 2") == std::vector<std::int64_t>{10, 1, 2});
  CHECK(encode("").empty());
  // The special words are special, the others not; every id names its word.
  for (std::int64_t id = 0; id < grpo::train::TinyTask::kVocab; ++id) {
    CHECK(tokenizer.id_to_token(static_cast<std::int32_t>(id)) == grpo::train::TinyTask::kWords[static_cast<std::size_t>(id)]);
    CHECK(tokenizer.is_special(static_cast<std::int32_t>(id)) ==
          (id == grpo::train::TinyTask::kEos || id == grpo::train::TinyTask::kPad || id == grpo::train::TinyTask::kBos));
    CHECK(encode(std::string("  ") + grpo::train::TinyTask::kWords[static_cast<std::size_t>(id)]) ==
          std::vector<std::int64_t>{id});
  }
}
