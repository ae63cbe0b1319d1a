// SPDX-License-Identifier: Apache-2.0
// Preference pairs in TRL's four formats (texts and conversations, implicit and explicit prompts, margins) with the
// errors a bad line gives; and train_reward_model: a tiny reward model on GPT-2's tokenizer learns to order held-out
// pairs it started out ordering at chance, and does not at learning rate 0.
#include <grpo/core/error.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/text/chat_template.hpp>
#include <grpo/text/tokenizer.hpp>
#include <grpo/train/reward_model_training.hpp>
#include <support/model_testing.hpp>
#include <support/skip.hpp>
#include <text/reference_fixture.hpp>

#include <catch2/catch.hpp>

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
  // bf16 weights are refused (AdamW's steps would be lost to their rounding).
  grpo::models::CausalLM half(grpo::testing::tiny_model_config({.vocab = tokenizer.vocab_size()}), grpo::models::WeightInit::normal,
                              torch::TensorOptions().dtype(torch::kBFloat16));
  auto half_model = grpo::models::value_model_from_policy(half);
  CHECK_THROWS_WITH(grpo::train::train_reward_model(half_model, tokenizer, train), Catch::Contains("load it in float32"));
  const auto control = run(0.0);
  CHECK(std::get<0>(control) == before);
  CHECK(std::get<1>(control).accuracy == before);  // nothing learnt
}
