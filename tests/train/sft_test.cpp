// SPDX-License-Identifier: Apache-2.0
// Cold-start SFT: assistant-only targets (by hand on a byte-level tokenizer, and on the real Qwen / Llama tokenizers
// when installed), the loss against an fp64 reference for padded and packed batches, micro-batch invariance, packed
// rows against examples run alone, a short run that learns, and the errors.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <functional>
#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/core/permutation.hpp>
#include <grpo/train/compensated_adamw.hpp>
#include <grpo/train/sft.hpp>
#include <random>
#include <string>
#include <tuple>
#include <support/model_testing.hpp>
#include <support/tensor_testing.hpp>
#include <support/tokenizer_testing.hpp>
#include <text/reference_fixture.hpp>
#include <vector>
#include <support/skip.hpp>

using grpo::text::ChatMessage;
using grpo::text::ChatTemplate;
using grpo::text::Tokenizer;
using grpo::train::SftBatch;
using grpo::train::SftBatchOptions;
using grpo::train::SftExample;
using grpo::train::SftLayout;

namespace {

constexpr std::int64_t kImStart = 256, kImEnd = 257;

/// A byte-level tokenizer without merges: id = byte value, plus <|im_start|> (256) and <|im_end|> (257).
const Tokenizer& byte_tokenizer() {
  static const Tokenizer tokenizer = [] {
    std::string vocab;
    for (int b = 0; b < 256; ++b)
      vocab += grpo::json_quoted(grpo::testing::byte_spelling(b)) + fmt::format(": {}, ", b);
    vocab += R"("<|im_start|>": 256, "<|im_end|>": 257)";
    return Tokenizer::from_json(fmt::format(R"({{
  "version": "1.0",
  "added_tokens": [
    {{"id": 256, "content": "<|im_start|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}},
    {{"id": 257, "content": "<|im_end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}}
  ],
  "normalizer": null,
  "pre_tokenizer": {{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}},
  "post_processor": null,
  "decoder": {{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}},
  "model": {{"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
    "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {{{}}}, "merges": []}}
}})",
                                            vocab));
  }();
  return tokenizer;
}

grpo::train::SftChatOptions chatml() { return {.chat_template = ChatTemplate::from_name("chatml")}; }

/// Byte ids of `text`.
std::vector<std::int64_t> bytes(std::string_view text) {
  std::vector<std::int64_t> out;
  for (const char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

/// The decoded text of every maximal run of targets, in order.
std::vector<std::string> target_spans(const Tokenizer& tokenizer, const SftExample& example) {
  std::vector<std::string> out;
  std::vector<std::int32_t> run;
  for (std::size_t t = 0; t <= example.size(); ++t) {
    if (t < example.size() && example.loss_mask[t]) {
      run.push_back(static_cast<std::int32_t>(example.ids[t]));
    } else if (!run.empty()) {
      out.push_back(tokenizer.decode(run));
      run.clear();
    }
  }
  return out;
}

std::string decode_all(const Tokenizer& tokenizer, const SftExample& example) {
  return tokenizer.decode(std::vector<std::int32_t>(example.ids.begin(), example.ids.end()));
}

/// Random examples over `vocab`: lengths in [2, max_length], targets anywhere but token 0.
std::vector<SftExample> random_examples(std::size_t count, std::int64_t vocab, std::int64_t max_length,
                                        std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<SftExample> out(count);
  for (auto& e : out) {
    const auto n = std::uniform_int_distribution<std::int64_t>(2, max_length)(rng);
    for (std::int64_t t = 0; t < n; ++t) {
      e.ids.push_back(std::uniform_int_distribution<std::int64_t>(0, vocab - 1)(rng));
      e.loss_mask.push_back(t > 0 && rng() % 3 != 0 ? 1 : 0);
    }
  }
  return out;
}

/// The reference: each example run alone through the model's full logits in float64, log_softmax, the next token's
/// log-prob at every target, summed; divided by the number of targets.
double reference_mean_nll(grpo::models::CausalLM& model, const std::vector<SftExample>& examples) {
  torch::NoGradGuard no_grad;
  double sum = 0.0;
  std::int64_t targets = 0;
  for (const auto& e : examples) {
    const auto ids = torch::tensor(e.ids, torch::kInt64).unsqueeze(0);
    const auto logp = torch::log_softmax(model->forward(ids).to(torch::kFloat64), -1)[0];  // [L, V]
    for (std::size_t t = 1; t < e.size(); ++t) {
      if (!e.loss_mask[t]) continue;
      sum -= logp[static_cast<std::int64_t>(t - 1)][e.ids[t]].item<double>();
      ++targets;
    }
  }
  return sum / static_cast<double>(targets);
}

grpo::models::CausalLM model_from(const grpo::models::ModelConfig& config, std::uint64_t seed) {
  torch::manual_seed(seed);
  return grpo::models::CausalLM(config);
}

grpo::models::CausalLM tiny_model(std::int64_t vocab, std::uint64_t seed) {
  return model_from(grpo::testing::tiny_model_config(
                        {.vocab = vocab, .hidden = 16, .intermediate = 32, .layers = 2, .heads = 4, .kv_heads = 2}),
                    seed);
}

/// Every parameter's gradient after backward() of `loss`, zeroed before.
std::vector<torch::Tensor> gradients(grpo::models::CausalLM& model, const std::function<torch::Tensor()>& loss) {
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  loss().backward();
  std::vector<torch::Tensor> out;
  for (auto& p : model->parameters()) out.push_back(p.grad().clone());
  return out;
}

}  // namespace

TEST_CASE("sft targets: chatml assistant content and <|im_end|>, by hand on byte ids", "[sft]") {
  const std::vector<ChatMessage> messages = {
      {"system", "S", std::nullopt}, {"user", "hi", std::nullopt}, {"assistant", "yo", std::nullopt}};
  const auto example = grpo::train::sft_example_from_chat(byte_tokenizer(), messages, chatml());
  // <|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n | yo<|im_end|> | \n
  std::vector<std::int64_t> ids, mask;
  const auto add = [&](std::vector<std::int64_t> piece, int target) {
    ids.insert(ids.end(), piece.begin(), piece.end());
    mask.insert(mask.end(), piece.size(), target);
  };
  add({kImStart}, 0), add(bytes("system\nS"), 0), add({kImEnd}, 0), add(bytes("\n"), 0);
  add({kImStart}, 0), add(bytes("user\nhi"), 0), add({kImEnd}, 0), add(bytes("\n"), 0);
  add({kImStart}, 0), add(bytes("assistant\n"), 0);
  add(bytes("yo"), 1), add({kImEnd}, 1);
  add(bytes("\n"), 0);
  CHECK(example.ids == ids);
  CHECK(std::vector<std::int64_t>(example.loss_mask.begin(), example.loss_mask.end()) == mask);
  CHECK(example.num_targets() == 3);

  SECTION("multi-turn: both assistant turns; last_assistant: only the last") {
    const std::vector<ChatMessage> turns = {{"user", "a", std::nullopt},
                                            {"assistant", "b", std::nullopt},
                                            {"user", "c", std::nullopt},
                                            {"assistant", "dd", std::nullopt}};
    auto all = grpo::train::sft_example_from_chat(byte_tokenizer(), turns, chatml());
    CHECK(target_spans(byte_tokenizer(), all) == std::vector<std::string>{"b<|im_end|>", "dd<|im_end|>"});
    auto options = chatml();
    options.targets = grpo::train::SftTargets::last_assistant;
    auto last = grpo::train::sft_example_from_chat(byte_tokenizer(), turns, options);
    CHECK(last.ids == all.ids);
    CHECK(target_spans(byte_tokenizer(), last) == std::vector<std::string>{"dd<|im_end|>"});
  }
  SECTION("truncation keeps the start") {
    auto options = chatml();
    options.max_length = static_cast<std::int64_t>(ids.size()) - 2;  // cuts "<|im_end|>\n"
    auto cut = grpo::train::sft_example_from_chat(byte_tokenizer(), messages, options);
    CHECK(cut.ids == std::vector<std::int64_t>(ids.begin(), ids.end() - 2));
    CHECK(cut.num_targets() == 2);
  }
  SECTION("reasoning_content is folded into the content as <think> for chatml") {
    const std::vector<ChatMessage> reasoned = {{"user", "q", std::nullopt}, {"assistant", "A", "r"}};
    auto e = grpo::train::sft_example_from_chat(byte_tokenizer(), reasoned, chatml());
    CHECK(target_spans(byte_tokenizer(), e) == std::vector<std::string>{"<think>\nr\n</think>\n\nA<|im_end|>"});
  }
}

TEST_CASE("sft targets on the real Qwen tokenizer: chatml (Qwen2.5), multi-turn, qwen3 reasoning", "[sft][tokenizer]") {
  const Tokenizer* qwen = grpo::text::testing::shared_tokenizer("qwen3");
  if (qwen == nullptr) GRPO_SKIP(grpo::text::testing::missing_tokenizer("qwen3"));
  SECTION("Qwen2.5 chatml with its default system prompt") {
    const auto qwen25 = ChatTemplate::from_name("qwen2.5");
    const std::vector<ChatMessage> messages = {{"user", "What is 2+3?", std::nullopt},
                                               {"assistant", "2+3 = 5. The answer is 5.", std::nullopt}};
    const auto e = grpo::train::sft_example_from_chat(*qwen, messages, {.chat_template = qwen25});
    CHECK(target_spans(*qwen, e) == std::vector<std::string>{"2+3 = 5. The answer is 5.<|im_end|>"});
    // The pieces encode to what the whole rendered text encodes to.
    const auto whole = qwen->encode(qwen25.render(messages), {.add_special_tokens = false});
    CHECK(e.ids == std::vector<std::int64_t>(whole.begin(), whole.end()));
    CHECK(decode_all(*qwen, e).starts_with("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud."));
  }
  SECTION("multi-turn chatml: every assistant turn, nothing else") {
    const std::vector<ChatMessage> messages = {{"system", "Be brief.", std::nullopt},
                                               {"user", "Hi!", std::nullopt},
                                               {"assistant", "Hello! How can I help?", std::nullopt},
                                               {"user", "Name a prime.", std::nullopt},
                                               {"assistant", "7", std::nullopt}};
    const auto e =
        grpo::train::sft_example_from_chat(*qwen, messages, {.chat_template = ChatTemplate::from_name("qwen2.5")});
    CHECK(target_spans(*qwen, e) == std::vector<std::string>{"Hello! How can I help?<|im_end|>", "7<|im_end|>"});
  }
  SECTION(
      "qwen3 (the tokenizer's own template): reasoning after the last query is a target, earlier reasoning is "
      "dropped") {
    REQUIRE(qwen->chat_template().options().format == grpo::text::ChatFormat::qwen3);
    const std::vector<ChatMessage> messages = {{"user", "1+1?", std::nullopt},
                                               {"assistant", "2", std::string("One plus one.")},
                                               {"user", "2+2?", std::nullopt},
                                               {"assistant", "4", std::string("Two plus two.")}};
    const auto e = grpo::train::sft_example_from_chat(*qwen, messages);
    CHECK(target_spans(*qwen, e) ==
          std::vector<std::string>{"2<|im_end|>", "<think>\nTwo plus two.\n</think>\n\n4<|im_end|>"});
    const auto whole = qwen->encode_chat(messages);
    CHECK(e.ids == std::vector<std::int64_t>(whole.begin(), whole.end()));
    // The same with the reasoning written into the content, as R1-distilled data has it.
    const std::vector<ChatMessage> inline_think = {
        {"user", "1+1?", std::nullopt},
        {"assistant", "<think>\nOne plus one.\n</think>\n\n2", std::nullopt},
        {"user", "2+2?", std::nullopt},
        {"assistant", "<think>\nTwo plus two.\n</think>\n\n4", std::nullopt}};
    CHECK(grpo::train::sft_example_from_chat(*qwen, inline_think).ids == e.ids);
    // A single turn without reasoning gets Qwen3's empty think block, which is a target too.
    const std::vector<ChatMessage> plain = {{"user", "Hi", std::nullopt}, {"assistant", "Hello", std::nullopt}};
    CHECK(target_spans(*qwen, grpo::train::sft_example_from_chat(*qwen, plain)) ==
          std::vector<std::string>{"<think>\n\n</think>\n\nHello<|im_end|>"});
  }
  SECTION("qwen3 with tool turns: reasoning before a later query is dropped in the prefixes too") {
    const std::vector<ChatMessage> messages = {
        {"user", "Weather?", std::nullopt}, {"assistant", "Calling the tool.", std::string("Need the tool.")},
        {"tool", "sunny", std::nullopt},    {"assistant", "It is sunny.", std::string("The tool said sunny.")},
        {"user", "Thanks", std::nullopt},   {"assistant", "You're welcome.", std::string("Be polite.")}};
    const auto e = grpo::train::sft_example_from_chat(*qwen, messages);
    CHECK(target_spans(*qwen, e) ==
          std::vector<std::string>{"Calling the tool.<|im_end|>", "It is sunny.<|im_end|>",
                                   "<think>\nBe polite.\n</think>\n\nYou're welcome.<|im_end|>"});
    const auto whole = qwen->encode_chat(messages);
    CHECK(e.ids == std::vector<std::int64_t>(whole.begin(), whole.end()));
  }
}

TEST_CASE("sft targets on the real Llama 3 tokenizer: <|eot_id|> ends the turn", "[sft][tokenizer]") {
  const Tokenizer* llama = grpo::text::testing::shared_tokenizer("llama3");
  if (llama == nullptr) GRPO_SKIP(grpo::text::testing::missing_tokenizer("llama3"));
  const std::vector<ChatMessage> messages = {{"user", "Hi", std::nullopt},
                                             {"assistant", " Hello there ", std::nullopt}};
  const auto e =
      grpo::train::sft_example_from_chat(*llama, messages, {.chat_template = ChatTemplate::from_name("llama3")});
  CHECK(target_spans(*llama, e) == std::vector<std::string>{"Hello there<|eot_id|>"});
  CHECK(decode_all(*llama, e).starts_with("<|begin_of_text|><|start_header_id|>user<|end_header_id|>"));
}

TEST_CASE("sft batches: padding with length buckets, best-fit packing, targets shifted by one", "[sft]") {
  const std::vector<SftExample> examples = {
      {{1, 2, 3}, {0, 1, 1}}, {{4, 5, 6, 7, 8}, {0, 0, 1, 1, 1}}, {{9, 10}, {0, 1}}, {{11, 12, 13, 14}, {0, 1, 0, 1}}};
  SECTION("padded, no bucketing") {
    const auto batches =
        grpo::train::make_sft_batches(examples, {.batch_size = 2, .bucket_window = 0, .pad_token_id = 99});
    REQUIRE(batches.size() == 2);
    const auto& b = batches[0];
    CHECK(b.rows == std::vector<std::vector<std::size_t>>{{0}, {1}});
    CHECK(torch::equal(b.input_ids, torch::tensor({1, 2, 3, 99, 99, 4, 5, 6, 7, 8}, torch::kInt64).view({2, 5})));
    CHECK(torch::equal(b.attention_mask, torch::tensor({1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, torch::kInt64).view({2, 5})));
    CHECK(torch::equal(b.targets, torch::tensor({2, 3, 0, 0, 0, 0, 6, 7, 8, 0}, torch::kInt64).view({2, 5})));
    CHECK(torch::equal(b.target_mask, torch::tensor({1, 1, 0, 0, 0, 0, 1, 1, 1, 0}).to(torch::kFloat32).view({2, 5})));
    CHECK(b.num_targets == 5);
    CHECK(b.num_tokens == 8);
    CHECK(b.layout == SftLayout::padded);
  }
  SECTION("padded with bucketing: sorted by length, longest first, within a window") {
    const auto batches = grpo::train::make_sft_batches(examples, {.batch_size = 2, .bucket_window = 2});
    REQUIRE(batches.size() == 2);
    CHECK(batches[0].rows == std::vector<std::vector<std::size_t>>{{1}, {3}});
    CHECK(batches[1].rows == std::vector<std::vector<std::size_t>>{{0}, {2}});
    CHECK(batches[1].input_ids.size(1) == 3);
  }
  SECTION("packed: best-fit decreasing into rows of 7, positions restart, no target across examples") {
    const auto batches =
        grpo::train::make_sft_batches(examples, {.layout = SftLayout::packed, .batch_size = 4, .max_tokens = 7});
    REQUIRE(batches.size() == 1);
    const auto& b = batches[0];
    // Lengths 5, 4, 3, 2 → [5 + 2], [4 + 3].
    CHECK(b.rows == std::vector<std::vector<std::size_t>>{{1, 2}, {3, 0}});
    CHECK(torch::equal(b.input_ids[0], torch::tensor({4, 5, 6, 7, 8, 9, 10}, torch::kInt64)));
    CHECK(torch::equal(b.position_ids[0], torch::tensor({0, 1, 2, 3, 4, 0, 1}, torch::kInt64)));
    CHECK(torch::equal(b.sequence_ids[0], torch::tensor({0, 0, 0, 0, 0, 1, 1}, torch::kInt64)));
    CHECK(torch::equal(b.targets[0], torch::tensor({0, 6, 7, 8, 0, 10, 0}, torch::kInt64)));
    CHECK(torch::equal(b.target_mask[0], torch::tensor({0, 1, 1, 1, 0, 1, 0}).to(torch::kFloat32)));
    CHECK(b.num_targets == 8);
    CHECK(b.layout == SftLayout::packed);
    const SftBatchOptions options{.layout = SftLayout::packed, .max_tokens = 7};
    CHECK(grpo::train::plan_sft_rows(examples, options) == b.rows);
    CHECK(torch::equal(grpo::train::collate_sft_rows(examples, b.rows, options).input_ids, b.input_ids));
    CHECK_THROWS_WITH(grpo::train::collate_sft_rows(examples, b.rows, {}),
                      Catch::Contains("row 0 holds 2 examples, which needs SftLayout::packed"));
  }
}

TEST_CASE("sft loss equals an fp64 reference for padded and packed batches, and micro-batch splits do not change it",
          "[sft]") {
  constexpr std::int64_t kVocab = 40;
  auto model = tiny_model(kVocab, 11);
  model->to(torch::kFloat64);
  const auto examples = random_examples(9, kVocab, 12, 5);
  const double reference = reference_mean_nll(model, examples);

  const auto padded = grpo::train::make_sft_batches(examples, {.batch_size = 9});
  const auto packed =
      grpo::train::make_sft_batches(examples, {.layout = SftLayout::packed, .batch_size = 9, .max_tokens = 24});
  REQUIRE(padded.size() == 1);
  REQUIRE(packed.size() == 1);
  CHECK(packed[0].input_ids.size(0) < 9);  // rows do hold several examples
  const auto whole = grpo::train::sft_normaliser(padded);
  CHECK(whole.value() == static_cast<double>(packed[0].num_targets));
  const auto padded_loss = grpo::train::sft_loss(model, padded[0], whole);
  const auto packed_loss = grpo::train::sft_loss(model, packed[0], whole);
  CHECK(padded_loss.loss.scalar_type() == torch::kFloat64);
  CHECK(padded_loss.loss.item<double>() == Approx(reference).epsilon(1e-12));
  CHECK(packed_loss.loss.item<double>() == Approx(reference).epsilon(1e-12));
  CHECK(padded_loss.nll_sum == Approx(reference * whole.value()).epsilon(1e-12));

  // Three micro-batches of three with the whole step's normaliser: the same loss and the same gradients.
  const auto parts = grpo::train::make_sft_batches(examples, {.batch_size = 3, .bucket_window = 0});
  REQUIRE(parts.size() == 3);
  const auto step_normaliser = grpo::train::sft_normaliser(parts);
  CHECK(step_normaliser.value() == whole.value());
  double split_loss = 0.0;
  for (const auto& part : parts) split_loss += grpo::train::sft_loss(model, part, step_normaliser).loss.item<double>();
  CHECK(split_loss == Approx(reference).epsilon(1e-12));
  const auto grad_whole = gradients(model, [&] { return grpo::train::sft_loss(model, padded[0], whole).loss; });
  const auto grad_split = gradients(model, [&] {
    torch::Tensor sum = torch::zeros({}, torch::kFloat64);
    for (const auto& part : parts) sum = sum + grpo::train::sft_loss(model, part, step_normaliser).loss;
    return sum;
  });
  const auto grad_packed = gradients(model, [&] { return grpo::train::sft_loss(model, packed[0], whole).loss; });
  for (std::size_t i = 0; i < grad_whole.size(); ++i) {
    GRPO_REQUIRE_CLOSE(grad_split[i], grad_whole[i], 1e-10, 1e-13);
    GRPO_REQUIRE_CLOSE(grad_packed[i], grad_whole[i], 1e-10, 1e-13);
  }

  SECTION("float32 model: within float tolerance of the fp64 reference") {
    auto model32 = tiny_model(kVocab, 11);
    const double reference32 = [&] {
      auto copy = grpo::models::deep_copy(model32);
      copy->to(torch::kFloat64);
      return reference_mean_nll(copy, examples);
    }();
    CHECK(grpo::train::sft_loss(model32, padded[0], whole).loss.item<double>() == Approx(reference32).epsilon(1e-5));
    CHECK(grpo::train::sft_loss(model32, packed[0], whole).loss.item<double>() == Approx(reference32).epsilon(1e-5));
    CHECK(grpo::train::evaluate_nll(model32, examples).mean_nll == Approx(reference32).epsilon(1e-5));
  }
}

TEST_CASE("sft packed rows: every example's hidden states equal those of the example run alone", "[sft]") {
  using grpo::models::Architecture;
  auto qwen3 = grpo::testing::tiny_model_config(
      {.vocab = 30, .hidden = 16, .intermediate = 32, .layers = 2, .heads = 4, .kv_heads = 2});
  qwen3.architecture = Architecture::qwen3;
  qwen3.head_dim = 8;
  qwen3.attention_bias = false;
  auto llama = grpo::testing::tiny_model_config(
      {.vocab = 30, .hidden = 16, .intermediate = 32, .layers = 2, .heads = 2, .kv_heads = 1});
  llama.architecture = Architecture::llama;
  llama.attention_bias = false;
  llama.tie_word_embeddings = false;
  llama.rope_scaling = grpo::models::Llama3RopeScaling{
      .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position_embeddings = 16};
  const auto qwen2 = grpo::testing::tiny_model_config(
      {.vocab = 30, .hidden = 16, .intermediate = 32, .layers = 2, .heads = 4, .kv_heads = 2});
  for (const auto& [name, config] :
       {std::pair{"qwen2", qwen2}, std::pair{"qwen3", qwen3}, std::pair{"llama3 rope", llama}}) {
    INFO(name);
    auto model = model_from(config, 2);
    model->to(torch::kFloat64);
    const auto examples = random_examples(6, 30, 20, 9);
    const auto batches =
        grpo::train::make_sft_batches(examples, {.layout = SftLayout::packed, .batch_size = 6, .max_tokens = 40});
    REQUIRE(batches.size() == 1);
    const auto& batch = batches[0];
    const auto hidden = grpo::train::sft_hidden_states(model, batch);
    for (std::size_t row = 0; row < batch.rows.size(); ++row) {
      std::int64_t at = 0;
      for (const std::size_t e : batch.rows[row]) {
        const auto n = static_cast<std::int64_t>(examples[e].size());
        const auto alone = model->hidden_states(torch::tensor(examples[e].ids, torch::kInt64).unsqueeze(0))[0];
        GRPO_REQUIRE_CLOSE(hidden[static_cast<std::int64_t>(row)].narrow(0, at, n), alone, 1e-10, 1e-12);
        at += n;
      }
    }
  }
}

namespace {

/// A tiny fp32 model, its bf16 copy, and the fp32 model's starting parameters.
std::tuple<grpo::models::CausalLM, grpo::models::CausalLM, std::vector<torch::Tensor>> fp32_and_bf16_models(
    std::int64_t vocab) {
  auto full = tiny_model(vocab, 6);
  auto half = grpo::models::deep_copy(full);
  half->to(torch::kBFloat16);
  std::vector<torch::Tensor> start;
  for (const auto& p : full->parameters()) start.push_back(p.detach().clone());
  return {full, half, start};
}

}  // namespace

TEST_CASE("sft trainer: a bf16 model trains through fp32 master weights or compensated AdamW as fp32 does, and an "
          "optimizer over bf16 weights is refused", "[sft][precision]") {
  constexpr std::int64_t kVocab = 32;
  const auto batches = grpo::train::make_sft_batches(random_examples(8, kVocab, 10, 5), {.batch_size = 4});
  using grpo::train::OptimizerPrecision;
  for (const auto precision : {OptimizerPrecision::fp32_master, OptimizerPrecision::compensated}) {
    INFO(grpo::train::to_string(precision));
    const auto [full, half, start] = fp32_and_bf16_models(kVocab);
    // lr 1e-4 is far below bf16's spacing at these weights (about 1e-3 at |w| = 0.3): stepped in bf16 directly,
    // most updates would round away.
    grpo::train::SftTrainer fp32(full, torch::optim::AdamWOptions(1e-4), {.max_grad_norm = 0.0});
    grpo::train::SftTrainer bf16(half, torch::optim::AdamWOptions(1e-4),
                                 {.max_grad_norm = 0.0, .optimizer_precision = precision});
    REQUIRE(!fp32.master_weights().mixed());
    REQUIRE(bf16.master_weights().mixed() == (precision == OptimizerPrecision::fp32_master));
    const auto* compensated = dynamic_cast<const grpo::train::CompensatedAdamW*>(&bf16.optimizer());
    REQUIRE((compensated != nullptr) == (precision == OptimizerPrecision::compensated));
    for (int step = 0; step < 5; ++step) {
      fp32.step(batches);
      bf16.step(batches);
    }
    // What the optimizer holds (the fp32 master, or weight + compensation) against the fp32 run, relative to how
    // far the fp32 run moved.
    const auto masters = bf16.master_weights().masters();
    const auto params = half->parameters(), reference = full->parameters();
    REQUIRE(masters.size() == params.size());
    double moved = 0.0, apart = 0.0;
    for (std::size_t i = 0; i < params.size(); ++i) {
      REQUIRE(params[i].scalar_type() == torch::kBFloat16);
      REQUIRE(torch::equal(params[i], masters[i].to(torch::kBFloat16)));  // the parameters are the rounded masters
      const auto held = compensated ? params[i].to(torch::kFloat32) +
                                          compensated->parameter_states()[i].compensation.to(torch::kFloat32)
                                    : masters[i];
      moved += (reference[i] - start[i]).pow(2).sum().item<double>();
      apart += (held - reference[i]).pow(2).sum().item<double>();
    }
    INFO("fp32 run moved the weights by " << std::sqrt(moved) << "; bf16 ends " << std::sqrt(apart)
                                          << " from the fp32 weights");
    CHECK(std::sqrt(apart) < 0.3 * std::sqrt(moved));
  }

  auto other = tiny_model(kVocab, 6);
  other->to(torch::kBFloat16);
  torch::optim::AdamW direct(other->parameters(), torch::optim::AdamWOptions(1e-4));
  REQUIRE_THROWS_AS(grpo::train::SftTrainer(other, direct), grpo::ConfigError);
  REQUIRE_THROWS_WITH(grpo::train::SftTrainer(other, direct),
                      Catch::Contains("construct SftTrainer with torch::optim::AdamWOptions"));
  // The precision belongs to the trainer that builds the optimizer.
  auto full_precision = tiny_model(kVocab, 6);
  torch::optim::AdamW given(full_precision->parameters(), torch::optim::AdamWOptions(1e-4));
  REQUIRE_THROWS_WITH(
      grpo::train::SftTrainer(full_precision, given, {.optimizer_precision = OptimizerPrecision::compensated}),
      Catch::Contains("optimizer_precision compensated"));
}

TEST_CASE(
    "sft trainer: a step over micro-batches equals one step over the whole batch, and a short run lowers held-out NLL",
    "[sft]") {
  SECTION("accumulation") {
    constexpr std::int64_t kVocab = 32;
    const auto examples = random_examples(8, kVocab, 10, 3);
    auto a = tiny_model(kVocab, 4), b = tiny_model(kVocab, 4);
    a->to(torch::kFloat64), b->to(torch::kFloat64);
    torch::optim::AdamW opt_a(a->parameters(), torch::optim::AdamWOptions(1e-2)),
        opt_b(b->parameters(), torch::optim::AdamWOptions(1e-2));
    const grpo::train::LrScheduleOptions schedule{.base_lr = 1e-2, .warmup_steps = 1, .total_steps = 3};
    grpo::train::SftTrainer ta(a, opt_a, {.max_grad_norm = 0.5, .schedule = schedule}),
        tb(b, opt_b, {.max_grad_norm = 0.5, .schedule = schedule});
    const auto whole = grpo::train::make_sft_batches(examples, {.batch_size = 8});
    const auto parts =
        grpo::train::make_sft_batches(examples, {.layout = SftLayout::packed, .batch_size = 1, .max_tokens = 12});
    REQUIRE(parts.size() > 2);
    for (int step = 1; step <= 3; ++step) {
      const auto oa = ta.step(whole), ob = tb.step(parts);
      INFO("step " << step);
      CHECK(oa.step == step);
      CHECK(oa.learning_rate == grpo::train::learning_rate_at(step, schedule));
      CHECK(oa.tokens == ob.tokens);
      CHECK(oa.loss == Approx(ob.loss).epsilon(1e-12));
      CHECK(oa.grad_norm == Approx(ob.grad_norm).epsilon(1e-10));
    }
    CHECK(ta.steps_done() == 3);
    const auto pa = a->parameters(), pb = b->parameters();
    for (std::size_t i = 0; i < pa.size(); ++i) GRPO_REQUIRE_CLOSE(pa[i], pb[i], 1e-9, 1e-12);
  }

  SECTION("learning: copy the user's letters (byte tokenizer, chatml, 48 conversations, 40 steps)") {
    std::mt19937_64 rng(7);
    const auto conversation = [&] {
      std::string word;
      const auto n = std::uniform_int_distribution<int>(3, 5)(rng);
      for (int i = 0; i < n; ++i) word += static_cast<char>('a' + std::uniform_int_distribution<int>(0, 7)(rng));
      return std::vector<ChatMessage>{{"user", "copy " + word, std::nullopt}, {"assistant", word, std::nullopt}};
    };
    std::vector<SftExample> train, held_out;
    for (int i = 0; i < 64; ++i) {
      (i < 48 ? train : held_out)
          .push_back(grpo::train::sft_example_from_chat(byte_tokenizer(), conversation(), chatml()));
    }
    auto model =
        model_from(grpo::testing::tiny_model_config(
                       {.vocab = 258, .hidden = 32, .intermediate = 64, .layers = 2, .heads = 4, .kv_heads = 2}),
                   1);
    const double before = grpo::train::evaluate_nll(model, held_out).mean_nll;
    torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
    grpo::train::SftTrainer trainer(model, optimizer, {.max_grad_norm = 1.0});
    for (int epoch = 0; epoch < 10; ++epoch) {
      auto order = grpo::seeded_permutation(train.size(), epoch);
      std::vector<SftExample> shuffled;
      for (auto i : order) shuffled.push_back(train[i]);
      // Even epochs padded (6 conversations per batch), odd ones packed (2 rows of up to 128 tokens, about 3 each).
      const bool packed = epoch % 2 == 1;
      const auto batches = grpo::train::make_sft_batches(
          shuffled,
          {.layout = packed ? SftLayout::packed : SftLayout::padded, .batch_size = packed ? 2 : 6, .max_tokens = 128});
      for (std::size_t i = 0; i + 1 < batches.size(); i += 2) trainer.step(std::span(batches).subspan(i, 2));
    }
    const double after = grpo::train::evaluate_nll(model, held_out).mean_nll;
    INFO("held-out NLL per target token: before " << before << ", after " << after << " (" << trainer.steps_done()
                                                  << " steps)");
    // A fresh model is near log 258 = 5.55 nats per token. 40 steps learn the format and the letters (uniform over 8:
    // log 8 = 2.08 nats for each letter target, the end-of-turn token almost free); copying needs longer.
    CHECK(before > 5.0);
    CHECK(after < 2.3);
  }
}

TEST_CASE("sft errors: empty conversations, no assistant turn, bad examples and bad data rows", "[sft]") {
  using Catch::Contains;
  const auto& tok = byte_tokenizer();
  CHECK_THROWS_WITH(grpo::train::sft_example_from_chat(tok, std::vector<ChatMessage>{}, chatml()),
                    Contains("no messages"));
  CHECK_THROWS_WITH(
      grpo::train::sft_example_from_chat(
          tok, std::vector<ChatMessage>{{"system", "s", std::nullopt}, {"user", "u", std::nullopt}}, chatml()),
      Contains("no assistant message") && Contains("roles system, user"));
  CHECK_THROWS_WITH(
      grpo::train::sft_example_from_chat(
          tok, std::vector<ChatMessage>{{"user", "u", std::nullopt}, {"assistant", "a<|im_end|>b", std::nullopt}},
          chatml()),
      Contains("assistant message 1 contains the end-of-turn marker '<|im_end|>'"));
  // Qwen3 renders an assistant message that ends the conversation with an empty think block, but not one followed by
  // another assistant message: the prefix before the second one disagrees with the whole text.
  CHECK_THROWS_WITH(grpo::train::sft_example_from_chat(tok,
                                                       std::vector<ChatMessage>{{"user", "u", std::nullopt},
                                                                                {"assistant", "a", std::nullopt},
                                                                                {"assistant", "b", std::nullopt}},
                                                       {.chat_template = ChatTemplate::from_name("qwen3")}),
                    Contains("renders the first 2 messages and an assistant header differently") &&
                        Contains("assistant message 2 cannot be located"));
  auto negative = chatml();
  negative.max_length = -1;
  CHECK_THROWS_AS(
      grpo::train::sft_example_from_chat(tok, std::vector<ChatMessage>{{"assistant", "a", std::nullopt}}, negative),
      grpo::ConfigError);

  const std::vector<SftExample> mismatched = {{{1, 2}, {0, 1}}, {{1, 2, 3}, {0, 1}}};
  CHECK_THROWS_WITH(grpo::train::make_sft_batches(mismatched),
                    Contains("SftExample 1: ids has 3 tokens but loss_mask has 2 entries"));
  const std::vector<SftExample> first_target = {SftExample{{1, 2}, {1, 1}}};
  CHECK_THROWS_WITH(grpo::train::make_sft_batches(first_target), Contains("loss_mask[0] is 1"));
  const std::vector<SftExample> empty = {SftExample{}};
  CHECK_THROWS_WITH(grpo::train::make_sft_batches(empty), Contains("SftExample 0: ids is empty"));
  const std::vector<SftExample> long_one = {SftExample{{1, 2, 3}, {0, 1, 1}}};
  CHECK_THROWS_WITH(grpo::train::make_sft_batches(long_one, {.layout = SftLayout::packed, .max_tokens = 2}),
                    Contains("SftExample 0 has 3 tokens, more than a packed row's max_tokens = 2"));
  CHECK_THROWS_AS(grpo::train::make_sft_batches(mismatched, {.batch_size = 0}), grpo::ConfigError);

  auto model = tiny_model(16, 1);
  CHECK_THROWS_WITH(grpo::train::sft_loss_from_hidden(torch::zeros({2, 3, 8}), model->lm_head_weight(),
                                                      torch::zeros({2, 4}, torch::kInt64), torch::ones({2, 3}),
                                                      grpo::Normaliser::tokens(1)),
                    Contains("targets must be int64 of hidden's leading shape [2, 3, 8], got [2, 4]"));

  SECTION("data rows name file:line and the field") {
    using grpo::train::parse_sft_conversations;
    CHECK_THROWS_WITH(parse_sft_conversations("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n"
                                              "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}\n",
                                              "chat.jsonl"),
                      Contains("chat.jsonl:2: field 'messages[0].content' should be a string"));
    CHECK_THROWS_WITH(
        parse_sft_conversations("\n{\"conversations\": [{\"from\": \"robot\", \"value\": \"x\"}]}", "c.jsonl"),
        Contains("c.jsonl:2: field 'conversations[0].from' is 'robot'"));
    CHECK_THROWS_WITH(parse_sft_conversations("{\"prompt\": \"x\"}", "p.jsonl"),
                      Contains("p.jsonl:1: no field 'messages'"));
    CHECK_THROWS_WITH(parse_sft_conversations("{\"messages\": []}", "e.jsonl"),
                      Contains("e.jsonl:1: the conversation holds no messages"));
    CHECK_THROWS_WITH(parse_sft_conversations("{\"messages\": [}", "j.jsonl"), Contains("j.jsonl:1: invalid JSON"));
  }
  SECTION("the accepted row shapes") {
    const auto rows = grpo::train::parse_sft_conversations(
        R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}]})"
        "\n"
        R"({"messages": "[{\"role\": \"user\", \"content\": \"q2\"}]"})"
        "\n"
        R"({"system": "S", "conversations": [{"from": "human", "value": "q3"}, {"from": "gpt", "value": "a3"}]})"
        "\n",
        "ok.jsonl");
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].messages[1].reasoning_content == std::optional<std::string>("r"));
    CHECK(rows[1].messages[0].content == "q2");
    CHECK(rows[2].source == "ok.jsonl:3");
    REQUIRE(rows[2].messages.size() == 3);
    CHECK(rows[2].messages[0].role == "system");
    CHECK(rows[2].messages[1].role == "user");
    CHECK(rows[2].messages[2].role == "assistant");
    const auto array =
        grpo::train::parse_sft_conversations(R"([{"messages": [{"role": "user", "content": "x"}]}])", "a.json");
    CHECK(array.at(0).source == "a.json[0]");
  }
}
