// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/policy/decode.hpp>
#include <grpo/policy/policy.hpp>
#include <grpo/policy/sampler.hpp>
#include <support/model_testing.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include <cstdlib>
#include <filesystem>
#include <support/skip.hpp>
#include <text/reference_fixture.hpp>

using grpo::models::CausalLM;

namespace {

CausalLM tiny_model(int seed = 1) {
  torch::manual_seed(seed);
  CausalLM model(grpo::testing::tiny_model_config(
      {.vocab = 17, .hidden = 8, .intermediate = 12, .layers = 2, .rope_theta = 50.0}));
  model->to(torch::kFloat64);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) {
    if (p.dim() == 2) p.normal_(0.0, 0.5);  // peaked enough that sampling and EOS both happen
  }
  return model;
}

/// The same network seen only through forward(): no hidden states, no KV cache.
struct PlainModelImpl : torch::nn::Module {
  explicit PlainModelImpl(CausalLM inner_) : inner(register_module("inner", inner_)) {}
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& mask) { return inner->forward(ids, mask); }
  CausalLM inner;
};
TORCH_MODULE(PlainModel);

static_assert(grpo::CausalLanguageModel<CausalLM> && grpo::ExposesHiddenStates<CausalLM> &&
              grpo::SupportsKvCache<CausalLM>);
static_assert(grpo::CausalLanguageModel<PlainModel> && !grpo::ExposesHiddenStates<PlainModel> &&
              !grpo::SupportsKvCache<PlainModel>);
static_assert(!grpo::CausalLanguageModel<torch::nn::Linear>);

grpo::Rollout rollout_by_hand() {
  grpo::Rollout r;
  r.prompt_ids = torch::tensor({{0, 5, 6}, {7, 8, 9}}, torch::kInt64);
  r.prompt_mask = torch::tensor({{0, 1, 1}, {1, 1, 1}}, torch::kInt64);
  r.completion_ids = torch::tensor({{3, 4, 0}, {1, 2, 11}}, torch::kInt64);
  r.completion_mask = torch::tensor({{1, 1, 0}, {1, 1, 1}}, torch::kInt64);
  return r;
}

}  // namespace

TEST_CASE("Policy log-probs are log softmax(logits / T) at the completion tokens, by either path", "[policy]") {
  auto model = tiny_model();
  auto r = rollout_by_hand();
  const double temperature = 0.7;
  auto logits = model->forward(r.input_ids(), r.attention_mask()) / temperature;  // [2, 6, 17]
  auto expected = torch::empty({2, 3}, torch::kFloat64);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 3; ++t) {
      auto row = logits[b][2 + t];  // position Tp + t − 1 predicts completion token t
      expected[b][t] = row[r.completion_ids[b][t].item<int64_t>()] - torch::logsumexp(row, 0);
    }
  }
  grpo::Policy policy(model, {.temperature = temperature, .chunk_sequences = 1});
  auto out = policy.token_log_probs(r, /*with_entropy=*/true);
  GRPO_REQUIRE_CLOSE(out.log_probs, expected, 1e-10, 1e-10);
  REQUIRE(out.entropy.sizes() == torch::IntArrayRef({2, 3}));
  grpo::Policy plain(PlainModel(model), {.temperature = temperature, .chunk_sequences = 0});
  GRPO_REQUIRE_CLOSE(plain.token_log_probs(r).log_probs, expected, 1e-10, 1e-10);
  out.log_probs.sum().backward();
  REQUIRE(model->lm_head_weight().grad().defined());
}

TEST_CASE("frozen_copy is independent and frozen, sync_from mixes parameters", "[policy]") {
  auto model = tiny_model();
  grpo::Policy policy(model);
  auto reference = policy.frozen_copy();
  auto r = rollout_by_hand();
  GRPO_REQUIRE_CLOSE(reference.token_log_probs(r).log_probs, policy.token_log_probs(r).log_probs, 0, 0);
  for (const auto& p : reference.model()->parameters()) REQUIRE_FALSE(p.requires_grad());
  REQUIRE_FALSE(reference.model()->is_training());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(0.1);
  }
  auto w_policy = model->lm_head_weight().clone();
  auto w_ref = reference.model()->lm_head_weight().clone();
  REQUIRE_FALSE(torch::equal(w_policy, w_ref));
  reference.sync_from(policy, 0.25);
  GRPO_REQUIRE_CLOSE(reference.model()->lm_head_weight(), 0.25 * w_policy + 0.75 * w_ref, 1e-12, 1e-12);
  reference.sync_from(policy);
  GRPO_REQUIRE_CLOSE(reference.model()->lm_head_weight(), w_policy, 0, 0);
  REQUIRE_THROWS_AS(reference.sync_from(policy, 1.5), grpo::ConfigError);
}

TEST_CASE("Sampler with a KV cache draws exactly what the cache-free path draws", "[policy][sampler]") {
  auto model = tiny_model(3);
  const std::vector<std::vector<int64_t>> prompts{{1, 2, 3}, {4}, {5, 6}};
  grpo::SamplerOptions options{.temperature = 0.9, .max_new_tokens = 6, .top_k = 8, .top_p = 0.95,
                               .eos_token_ids = {0, 16}, .pad_token_id = 0, .seed = 42};
  grpo::Sampler cached(options), plain(options);
  PlainModel plain_model(model);
  auto a = cached.generate(model, prompts, 4);
  auto b = plain.generate(plain_model, prompts, 4);
  REQUIRE(a.batch_size() == 12);
  REQUIRE(torch::equal(a.prompt_ids, b.prompt_ids));
  REQUIRE(torch::equal(a.completion_ids, b.completion_ids));
  REQUIRE(torch::equal(a.completion_mask, b.completion_mask));
  GRPO_REQUIRE_CLOSE(a.sampler_log_probs, b.sampler_log_probs, 1e-6, 1e-6);
  // prompts are left-padded and repeated G times
  REQUIRE(torch::equal(a.prompt_ids[4], torch::tensor({0, 0, 4}, torch::kInt64)));
  REQUIRE(torch::equal(a.prompt_mask[4], torch::tensor({0, 0, 1}, torch::kInt64)));
  // the same seed gives the same rollout; the sampler log-probs are the policy's (fp32 vs fp64)
  grpo::Sampler again(options);
  REQUIRE(torch::equal(again.generate(model, prompts, 4).completion_ids, a.completion_ids));
  grpo::Policy policy(model, {.temperature = 0.9});
  auto lp = policy.token_log_probs(a).log_probs * a.completion_mask;
  GRPO_REQUIRE_CLOSE(a.sampler_log_probs, lp.to(torch::kFloat32), 1e-5, 1e-5);
}

TEST_CASE("Shared prompt prefill and finished rows leaving the batch draw what torch::multinomial over the whole "
          "batch draws (the sampler before either, with the generator's noise)", "[policy][sampler]") {
  auto model = tiny_model(4);
  const std::vector<std::vector<int64_t>> prompts{{1, 2, 3}, {5, 6}};
  const int64_t group = 3, steps = 10, pad = 0;
  const std::vector<int64_t> eos{2, 7, 11};
  grpo::Sampler sampler({.temperature = 1.0, .max_new_tokens = steps, .eos_token_ids = eos, .pad_token_id = pad,
                         .seed = 5, .noise = grpo::SamplingNoise::generator});
  const auto r = sampler.generate(model, prompts, group);
  // By hand: the whole batch every step through the full forward, one multinomial draw per row.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  auto ids = r.prompt_ids.clone(), mask = r.prompt_mask.clone();
  auto finished = torch::zeros({ids.size(0)}, torch::kBool);
  std::vector<torch::Tensor> expected;
  int64_t ended_early = 0;
  torch::NoGradGuard no_grad;
  for (int64_t step = 0; step < steps && !finished.all().item<bool>(); ++step) {
    const auto probs = torch::softmax(model->forward(ids, mask).select(1, -1).to(torch::kFloat32), -1);
    auto token = torch::multinomial(probs, 1, /*replacement=*/false, generator).squeeze(1);
    const auto real = finished.logical_not();
    token = torch::where(real, token, torch::full_like(token, pad));
    expected.push_back(token);
    for (int64_t id : eos) finished = finished | (token == id);
    if (step + 2 < steps) ended_early += (finished & real).sum().item<int64_t>();
    ids = torch::cat({ids, token.unsqueeze(1)}, 1);
    mask = torch::cat({mask, real.to(torch::kInt64).unsqueeze(1)}, 1);
  }
  CHECK(ended_early > 0);                          // rows left the batch while others decoded
  CHECK(finished.logical_not().any().item<bool>());  // and some decoded to the limit
  REQUIRE(torch::equal(r.completion_ids, torch::stack(expected, 1)));
}

TEST_CASE("Completions stop at EOS: the EOS is kept and masked in, the rest is padding", "[policy][sampler]") {
  auto model = tiny_model(5);
  grpo::Sampler sampler({.temperature = 1.0, .max_new_tokens = 8, .eos_token_ids = {2, 3, 4}, .pad_token_id = 0,
                         .seed = 1});
  auto r = sampler.generate(model, {{1, 5}, {6, 7, 8}}, 8);
  auto ids = r.completion_ids.accessor<int64_t, 2>();
  auto mask = r.completion_mask.accessor<int64_t, 2>();
  int ended = 0;
  for (int64_t b = 0; b < r.batch_size(); ++b) {
    bool done = false;
    for (int64_t t = 0; t < r.completion_length(); ++t) {
      REQUIRE(mask[b][t] == (done ? 0 : 1));
      if (done) REQUIRE(ids[b][t] == 0);
      if (!done && ids[b][t] >= 2 && ids[b][t] <= 4) done = true;
    }
    ended += done;
    REQUIRE(r.truncated[b].item<bool>() == !done);
  }
  REQUIRE(ended > 0);  // with 3 of 17 tokens ending a completion, some end within 8 steps
  REQUIRE(r.num_completion_tokens() == r.completion_mask.sum().item<int64_t>());
}

TEST_CASE("Greedy decoding follows the argmax chain, top_k = 1 is greedy", "[policy][sampler]") {
  auto model = tiny_model(9);
  grpo::Sampler greedy({.temperature = 0.0, .max_new_tokens = 5});
  auto r = greedy.generate(model, {{3, 1, 4}}, 2);
  auto ids = torch::tensor({{3, 1, 4}}, torch::kInt64);
  for (int64_t t = 0; t < 5; ++t) {
    auto next = model->forward(ids).select(1, -1).argmax(-1);
    REQUIRE(next.item<int64_t>() == r.completion_ids[0][t].item<int64_t>());
    ids = torch::cat({ids, next.unsqueeze(0)}, 1);
  }
  REQUIRE(torch::equal(r.completion_ids[0], r.completion_ids[1]));
  grpo::Sampler top1({.temperature = 1.3, .max_new_tokens = 5, .top_k = 1, .seed = 7});
  REQUIRE(torch::equal(top1.generate(model, {{3, 1, 4}}, 1).completion_ids[0], r.completion_ids[0]));
}

TEST_CASE("Sampler and Policy reject bad options and inputs", "[policy][errors]") {
  REQUIRE_THROWS_WITH(grpo::Sampler({.top_p = 0.0}), Catch::Contains("top_p must be in (0, 1]"));
  REQUIRE_THROWS_WITH(grpo::Sampler({.max_new_tokens = 0}), Catch::Contains("max_new_tokens must be >= 1"));
  auto model = tiny_model();
  grpo::Sampler sampler;
  REQUIRE_THROWS_WITH(sampler.generate(model, {{1}, {}}, 2), Catch::Contains("prompt 1 is empty"));
  REQUIRE_THROWS_WITH(sampler.generate(model, {{1}}, 0), Catch::Contains("group_size must be >= 1"));
  REQUIRE_THROWS_AS(grpo::Policy(model, {.temperature = 0.0}), grpo::ConfigError);
  grpo::Policy policy(model);
  auto r = rollout_by_hand();
  r.completion_mask = torch::ones({2, 4}, torch::kInt64);
  REQUIRE_THROWS_WITH(policy.token_log_probs(r), Catch::Contains("rollout.completion_ids has shape [2, 3] but rollout.completion_mask has shape [2, 4]"));
}

TEST_CASE("min_p = 1 keeps only the most likely token, sampling-distribution log-probs are renormalised",
          "[policy][sampler]") {
  auto model = tiny_model(9);
  grpo::Sampler greedy({.temperature = 0.0, .max_new_tokens = 5});
  auto expected = greedy.generate(model, {{3, 1, 4}}, 1).completion_ids;
  grpo::Sampler min_p({.temperature = 1.3, .max_new_tokens = 5, .min_p = 1.0, .seed = 3});
  REQUIRE(torch::equal(min_p.generate(model, {{3, 1, 4}}, 1).completion_ids, expected));

  // top_k = 3: the sampled token's log-prob in the renormalised distribution is log p − log S, with S the mass of the
  // three most likely tokens, computed here from a full forward of the model.
  const double temperature = 0.8;
  grpo::Sampler top3({.temperature = temperature, .max_new_tokens = 4, .top_k = 3, .seed = 11,
                      .log_probs = grpo::SamplerLogProbs::sampling_distribution});
  auto r = top3.generate(model, {{2, 7}, {5}}, 3);
  auto logits = model->forward(r.input_ids(), r.attention_mask()) / temperature;
  const int64_t tp = r.prompt_length();
  for (int64_t b = 0; b < r.batch_size(); ++b) {
    for (int64_t t = 0; t < r.completion_length(); ++t) {
      if (r.completion_mask[b][t].item<int64_t>() == 0) continue;
      auto log_p = torch::log_softmax(logits[b][tp - 1 + t], 0);
      const double mass = std::get<0>(log_p.exp().topk(3)).sum().item<double>();
      const double expected_lp = log_p[r.completion_ids[b][t].item<int64_t>()].item<double>() - std::log(mass);
      REQUIRE(r.sampler_log_probs[b][t].item<double>() == Approx(expected_lp).margin(1e-5));
    }
  }
  REQUIRE_THROWS_WITH(grpo::Sampler({.min_p = 1.5}), Catch::Contains("min_p must be in [0, 1]"));
}

TEST_CASE("decode_completions decodes each row's valid tokens with the real Qwen tokenizer",
          "[policy][needs-tokenizer]") {
  const auto dir = grpo::text::testing::find_tokenizer_dir("qwen3");
  if (!dir) GRPO_SKIP(grpo::text::testing::missing_tokenizer("qwen3"));
  auto tokenizer = grpo::text::Tokenizer::from_file(*dir / "tokenizer.json");
  grpo::Rollout r;
  // "Hello, world!" then <|im_end|> (151645) then padding; HF ids from tests/text/data/qwen3_reference.jsonl
  r.completion_ids = torch::tensor({{9707, 11, 1879, 0, 151645, 0}, {2585, 525, 498, 0, 0, 0}}, torch::kInt64);
  r.completion_mask = torch::tensor({{1, 1, 1, 1, 1, 0}, {1, 1, 1, 0, 0, 0}}, torch::kInt64);
  REQUIRE(grpo::completion_token_ids(r)[1] == std::vector<int32_t>{2585, 525, 498});
  REQUIRE(grpo::decode_completions(r, tokenizer) == std::vector<std::string>{"Hello, world!", " How are you"});
  REQUIRE(grpo::decode_completions(r, tokenizer, {.skip_special_tokens = false})[0] == "Hello, world!<|im_end|>");
}

TEST_CASE("Rollout::rows is a micro-batch of views of the same rows", "[policy][rollout]") {
  grpo::Rollout r{torch::arange(6).view({3, 2}),  torch::ones({3, 2}, torch::kInt64),
                  torch::arange(9).view({3, 3}),  torch::tensor({1, 1, 0, 1, 0, 0, 1, 1, 1}).view({3, 3}),
                  torch::tensor({false, false, true}), torch::rand({3, 3})};
  const auto part = r.rows(1, 2);
  CHECK(part.batch_size() == 2);
  CHECK(part.prompt_ids.equal(torch::tensor({2, 3, 4, 5}).view({2, 2})));
  CHECK(part.completion_mask.equal(torch::tensor({1, 0, 0, 1, 1, 1}).view({2, 3})));
  CHECK(part.truncated.equal(torch::tensor({false, true})));
  CHECK(part.sampler_log_probs.data_ptr() == r.sampler_log_probs[1].data_ptr());  // a view, not a copy
  CHECK(r.rows(3, 0).batch_size() == 0);
  CHECK_THROWS_WITH(r.rows(2, 2), Catch::Contains("rows [2, 4) are outside a batch of 3"));
}

TEST_CASE("continue_generation: a KV cache carried across calls draws what a fresh prefill of the whole sequences "
          "draws, with the same logits", "[policy][sampler]") {
  auto model = tiny_model(5);
  static_assert(grpo::SupportsCacheContinuation<CausalLM> && !grpo::SupportsCacheContinuation<PlainModel>);
  const grpo::SamplerOptions options{.temperature = 1.0, .max_new_tokens = 5, .eos_token_ids = {2, 11},
                                     .pad_token_id = 0, .seed = 9};
  std::vector<std::vector<int64_t>> sequences{{1, 3, 4, 5}, {6}, {7, 8}};
  grpo::CachedSequences<grpo::models::KvCache> cached;
  grpo::Sampler sampler(options);
  // The real tokens of row b of a rollout's completions.
  auto real_tokens = [](const grpo::Rollout& r, int64_t b) {
    std::vector<int64_t> out;
    for (int64_t j = 0; j < r.completion_length(); ++j) {
      if (r.completion_mask[b][j].item<int64_t>() != 0) out.push_back(r.completion_ids[b][j].item<int64_t>());
    }
    return out;
  };
  // Three calls: all rows, then rows 0 and 2 with fragments of different lengths appended (the middle row leaves),
  // then row 2 alone. Each call against a fresh sampler's generate over the whole sequences, with the same keys.
  const std::vector<std::vector<int64_t>> fragments{{9, 10}, {}, {12, 13, 14, 3}};
  std::vector<int64_t> rows{0, 1, 2};
  int64_t drawn = 0;
  for (int call = 0; call < 3; ++call) {
    INFO("call " << call);
    std::vector<std::vector<int64_t>> batch;
    std::vector<std::uint64_t> keys;
    for (const int64_t row : rows) {
      batch.push_back(sequences[static_cast<size_t>(row)]);
      keys.push_back(static_cast<std::uint64_t>(100 * call + row));
    }
    const auto carried = sampler.continue_generation(model, batch, cached, keys);
    const auto fresh = grpo::Sampler(options).generate(model, batch, 1, keys);
    REQUIRE(torch::equal(carried.prompt_ids, fresh.prompt_ids));
    REQUIRE(torch::equal(carried.completion_ids, fresh.completion_ids));
    REQUIRE(torch::equal(carried.completion_mask, fresh.completion_mask));
    GRPO_REQUIRE_CLOSE(carried.sampler_log_probs, fresh.sampler_log_probs, 1e-6, 1e-6);  // float32 log-probs
    drawn += carried.completion_mask.sum().item<int64_t>();
    // The cache now holds each row's sequence and completion, but for the last token drawn in the call (never fed):
    // a row that ended before it had its end token fed while the others decoded.
    for (size_t i = 0; i < rows.size(); ++i) {
      auto& s = sequences[static_cast<size_t>(rows[i])];
      const auto completion = real_tokens(carried, static_cast<int64_t>(i));
      const bool last_drawn = static_cast<int64_t>(completion.size()) == carried.completion_length();
      CHECK(cached.mask[static_cast<int64_t>(i)].sum().item<int64_t>() ==
            static_cast<int64_t>(s.size() + completion.size()) - (last_drawn ? 1 : 0));
      s.insert(s.end(), completion.begin(), completion.end());
      const auto& fragment = fragments[static_cast<size_t>(rows[i])];
      s.insert(s.end(), fragment.begin(), fragment.end());
    }
    // The next call continues rows 0 and 2 (cache rows 0 and 2), then row 2 (cache row 1 of those two).
    if (call == 2) break;
    cached.select_rows(torch::tensor(call == 0 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{1}, torch::kInt64));
    rows = call == 0 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{2};
  }
  CHECK(drawn > 8);
  // Logits: one token more through the carried cache equals the whole sequence run from scratch (fp64).
  const auto& s = sequences[2];
  const int64_t cached_tokens = cached.mask[0].sum().item<int64_t>(), n = static_cast<int64_t>(s.size());
  REQUIRE(cached_tokens < n);
  grpo::CachedSequences<grpo::models::KvCache> one = cached;
  auto ids = torch::tensor(std::vector<int64_t>(s.begin() + cached_tokens, s.end()), torch::kInt64).unsqueeze(0);
  // Row 2 decoded alone in the last call, so its run of cached tokens ends the cache: the rest follows it directly.
  torch::NoGradGuard no_grad;
  const auto mask = torch::cat({one.mask, torch::ones({1, n - cached_tokens}, torch::kInt64)}, 1);
  const auto last = model->forward_step(ids, mask, one.cache).select(1, -1);
  const auto whole = model->forward(torch::tensor(s, torch::kInt64).unsqueeze(0), torch::ones({1, n}, torch::kInt64));
  GRPO_REQUIRE_CLOSE(last, whole.select(1, -1), 1e-10, 1e-10);
}

TEST_CASE("continue_generation rejects a sequence with nothing uncached and a cache of other rows", "[policy][errors]") {
  auto model = tiny_model(5);
  grpo::Sampler sampler({.max_new_tokens = 2, .eos_token_ids = {2}, .pad_token_id = 0, .seed = 1});
  grpo::CachedSequences<grpo::models::KvCache> cached;
  const auto first = sampler.continue_generation(model, {{1, 3}, {4}}, cached);
  REQUIRE(first.batch_size() == 2);
  // The cache holds 2 tokens of row 0 at least (1, 3): a sequence of those alone has nothing to continue from.
  REQUIRE_THROWS_WITH(sampler.continue_generation(model, {{1, 3}, {4, 5, 6, 7, 8}}, cached),
                      Catch::Contains("all of them cached"));
  REQUIRE_THROWS_WITH(sampler.continue_generation(model, {{1, 3, 5, 6, 7}}, cached),
                      Catch::Contains("the cache holds 2 rows for 1 sequences"));
}
