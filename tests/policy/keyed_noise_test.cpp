// SPDX-License-Identifier: Apache-2.0
// Keyed sampling noise: Philox4x32-10 equals LibTorch's own Philox engine and Random123's known answer; the tensor
// form draws the scalar one's bits; the CPU's fused race equals the tensor form's argmax; the sampler's tokens
// follow the target distribution (chi-square, with temperature, top-k, top-p and min-p); and a completion depends
// only on its key: the same with other rows beside it, split into several calls, or through the KV cache.
#include <grpo/core/mix64.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/policy/keyed_noise.hpp>
#include <grpo/policy/sampler.hpp>
#include <support/model_testing.hpp>

#include <ATen/core/PhiloxRNGEngine.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

namespace {

std::array<std::uint32_t, 4> torch_philox(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) {
  // LibTorch's engine: key = seed, counter = (offset lo, offset hi, subsequence lo, subsequence hi).
  at::Philox4_32 engine(static_cast<std::uint64_t>(key[1]) << 32 | key[0],
                        static_cast<std::uint64_t>(counter[3]) << 32 | counter[2],
                        static_cast<std::uint64_t>(counter[1]) << 32 | counter[0]);
  return {engine(), engine(), engine(), engine()};
}

float uniform_by_hand(std::uint32_t bits) {  // (2·(bits >> 9) + 1) / 2^24, in double then exact in float
  return static_cast<float>((2.0 * static_cast<double>(bits >> 9) + 1.0) / 16777216.0);
}

/// A model whose next-token logits are always `logits` (any prompt, any position).
struct FixedLogitsImpl : torch::nn::Module {
  explicit FixedLogitsImpl(torch::Tensor l) : logits(std::move(l)) {}
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor&) {
    return logits.view({1, 1, -1}).expand({ids.size(0), ids.size(1), -1}).clone();
  }
  torch::Tensor logits;
};
TORCH_MODULE(FixedLogits);

/// The filtered target distribution in fp64, by the rules of transformers' warpers in their order (top-k, top-p,
/// min-p) on logits / temperature.
std::vector<double> target_distribution(const std::vector<double>& logits, const grpo::SamplerOptions& o) {
  const auto V = logits.size();
  std::vector<double> p(V);
  double z = 0;
  for (std::size_t v = 0; v < V; ++v) z += std::exp(logits[v] / o.temperature);
  for (std::size_t v = 0; v < V; ++v) p[v] = std::exp(logits[v] / o.temperature) / z;
  std::vector<std::size_t> order(V);
  for (std::size_t v = 0; v < V; ++v) order[v] = v;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] > p[b]; });
  std::vector<bool> keep(V, true);
  if (o.top_k > 0) {
    for (std::size_t i = static_cast<std::size_t>(o.top_k); i < V; ++i) keep[order[i]] = false;
  }
  const auto renormalised = [&] {
    std::vector<double> q(V, 0.0);
    double s = 0;
    for (std::size_t v = 0; v < V; ++v) s += keep[v] ? p[v] : 0.0;
    for (std::size_t v = 0; v < V; ++v) q[v] = keep[v] ? p[v] / s : 0.0;
    return q;
  };
  if (o.top_p < 1.0) {
    const auto q = renormalised();
    double before = 0;
    for (std::size_t i = 0; i < V; ++i) {
      if (before >= o.top_p) keep[order[i]] = false;
      before += q[order[i]];
    }
  }
  if (o.min_p > 0) {
    const auto q = renormalised();
    const double top = *std::max_element(q.begin(), q.end());
    for (std::size_t v = 0; v < V; ++v) {
      if (q[v] < o.min_p * top) keep[v] = false;
    }
  }
  return renormalised();
}

}  // namespace

TEST_CASE("philox4x32_10 equals LibTorch's Philox engine and Random123's known answers", "[policy][sampler]") {
  // Random123 kat_vectors, philox4x32 10 rounds: zero counter and key; all ones; the digits of pi.
  CHECK(grpo::philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        std::array<std::uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(grpo::philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        std::array<std::uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(grpo::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        std::array<std::uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
  std::uint64_t state = 12345;
  for (int i = 0; i < 200; ++i) {
    const std::uint64_t a = grpo::SplitMix64{state++}.next(), b = grpo::SplitMix64{state++}.next(),
                        c = grpo::SplitMix64{state++}.next();
    const std::array<std::uint32_t, 4> counter{static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(a >> 32),
                                               static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32)};
    const std::array<std::uint32_t, 2> key{static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32)};
    REQUIRE(grpo::philox4x32_10(counter, key) == torch_philox(counter, key));
  }
}

TEST_CASE("keyed_exponential is −log u of Philox at (v / 4, position, sample, 0) under each row's key",
          "[policy][sampler]") {
  const std::vector<std::uint64_t> keys{grpo::prompt_noise_key(7, 0), grpo::prompt_noise_key(7, 1),
                                        0xFFFFFFFFFFFFFFFFull, 0};
  std::vector<std::int64_t> key_values;
  for (auto k : keys) key_values.push_back(static_cast<std::int64_t>(k));
  const auto key_tensor = torch::tensor(key_values, torch::kInt64);
  const auto samples = torch::tensor({0, 3, 1, 70000}, torch::kInt64);
  const std::int64_t vocab = 1003, position = 17;  // not a multiple of 4
  const torch::Tensor e = grpo::keyed_exponential(key_tensor, samples, position, vocab, torch::kCPU);
  REQUIRE(e.sizes() == torch::IntArrayRef({4, vocab}));
  REQUIRE(e.scalar_type() == torch::kFloat32);
  for (std::int64_t a = 0; a < 4; ++a) {
    for (const std::int64_t v : {0L, 1L, 2L, 3L, 4L, 517L, 1001L, 1002L}) {
      const auto bits = grpo::philox4x32_10(
          {static_cast<std::uint32_t>(v / 4), static_cast<std::uint32_t>(position),
           static_cast<std::uint32_t>(samples[a].item<std::int64_t>()), 0},
          {static_cast<std::uint32_t>(keys[a]), static_cast<std::uint32_t>(keys[a] >> 32)})[v % 4];
      INFO("row " << a << ", v " << v);
      // The bits exactly; the float32 logs (LibTorch's vectorised one, the C library's) to an ulp.
      const double expected = -std::log(static_cast<double>(uniform_by_hand(bits)));
      REQUIRE(std::abs(e[a][v].item<float>() - expected) <= 1.2e-7 * expected + 1e-12);
    }
  }
  // Exp(1): mean 1 and variance 1 over the 4012 draws (standard error of the mean ≈ 0.016).
  CHECK(std::abs(e.mean().item<double>() - 1.0) < 0.08);
  CHECK(std::abs(e.var().item<double>() - 1.0) < 0.2);
  // A prompt key is a function of both stream and key.
  CHECK(grpo::prompt_noise_key(7, 0) != grpo::prompt_noise_key(8, 0));
  CHECK(grpo::prompt_noise_key(7, 0) != grpo::prompt_noise_key(7, 1));
}

TEST_CASE("keyed_race on the CPU equals argmax(probs / keyed_exponential), filtered zeros included",
          "[policy][sampler]") {
  torch::manual_seed(3);
  const std::int64_t rows = 64, vocab = 50;
  torch::Tensor probs = torch::softmax(torch::randn({rows, vocab}) * 3.0, -1);
  probs.masked_fill_(torch::rand({rows, vocab}) < 0.3, 0.0);  // filtered tokens
  probs[5].zero_();
  probs[5][7] = 1.0f;  // a one-token row
  probs[6].zero_();    // an all-zero row: the first index, as argmax of zeros
  std::vector<std::int64_t> keys;
  for (std::int64_t a = 0; a < rows; ++a) keys.push_back(static_cast<std::int64_t>(grpo::prompt_noise_key(1, a / 4)));
  const auto key_tensor = torch::tensor(keys, torch::kInt64);
  const auto samples = torch::arange(rows, torch::kInt64).remainder(4);
  for (const std::int64_t position : {0L, 1L, 99L}) {
    const auto fused = grpo::keyed_race(probs, key_tensor, samples, position);
    const auto by_tensors = probs.div(grpo::keyed_exponential(key_tensor, samples, position, vocab, torch::kCPU)).argmax(-1);
    REQUIRE(torch::equal(fused, by_tensors));
    REQUIRE(fused[5].item<std::int64_t>() == 7);
    REQUIRE(fused[6].item<std::int64_t>() == 0);
  }
  REQUIRE_THROWS_WITH(grpo::keyed_race(probs.to(torch::kFloat64), key_tensor, samples, 0),
                      Catch::Matchers::Contains("probs must be [A, V] float32"));
  REQUIRE_THROWS_WITH(grpo::keyed_race(probs, key_tensor.narrow(0, 0, 3), samples, 0),
                      Catch::Matchers::Contains("keys must be [A] = [64] int64"));
}

TEST_CASE("the keyed sampler's token frequencies follow the filtered distribution (chi-square, 16000 draws each)",
          "[policy][sampler]") {
  const std::vector<double> logits{2.0, 1.5, 1.2, 1.0, 0.4, 0.1, -0.3, -0.5, -1.0, -2.0, -3.0, -4.0};
  FixedLogits model(torch::tensor(logits, torch::kFloat32));
  struct Case {
    const char* name;
    grpo::SamplerOptions options;
  };
  const std::vector<Case> cases{
      {"T 1", {.temperature = 1.0}},
      {"T 0.7, top-k 6", {.temperature = 0.7, .top_k = 6}},
      {"top-p 0.8", {.temperature = 1.0, .top_p = 0.8}},
      {"min-p 0.1", {.temperature = 1.0, .min_p = 0.1}},
      {"T 1.3, top-k 9, top-p 0.9, min-p 0.05", {.temperature = 1.3, .top_k = 9, .top_p = 0.9, .min_p = 0.05}},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    grpo::SamplerOptions options = c.options;
    options.max_new_tokens = 4;  // four positions of 4000 completions: 16000 draws
    options.seed = 2026;
    grpo::Sampler sampler(options);
    const auto rollout = sampler.generate(model, {{1}}, 4000);
    const auto tokens = rollout.completion_ids.reshape({-1});
    const auto counts = torch::bincount(tokens, {}, static_cast<std::int64_t>(logits.size()));
    const std::vector<double> p = target_distribution(logits, options);
    double chi2 = 0;
    int support = 0;
    for (std::size_t v = 0; v < logits.size(); ++v) {
      const double observed = counts[static_cast<std::int64_t>(v)].item<double>();
      if (p[v] == 0) {
        REQUIRE(observed == 0);  // a filtered token is never drawn
        continue;
      }
      const double expected = p[v] * static_cast<double>(tokens.numel());
      chi2 += (observed - expected) * (observed - expected) / expected;
      ++support;
    }
    // The 1 − 1e-4 quantile of chi-square with support − 1 degrees of freedom (Wilson–Hilferty).
    const double df = support - 1, z = 3.719;
    const double critical = df * std::pow(1.0 - 2.0 / (9.0 * df) + z * std::sqrt(2.0 / (9.0 * df)), 3.0);
    INFO("chi-square " << chi2 << " on " << df << " degrees of freedom, critical " << critical);
    CHECK(support >= 2);
    CHECK(chi2 < critical);
  }
}

TEST_CASE("a keyed completion depends only on its key: other rows beside it, split calls and the KV cache change "
          "nothing", "[policy][sampler]") {
  torch::manual_seed(5);
  grpo::models::CausalLM model(grpo::testing::tiny_model_config({.vocab = 17, .hidden = 8, .intermediate = 12}));
  model->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
      if (p.dim() == 2) p.normal_(0.0, 0.5);
    }
  }
  const std::vector<std::vector<std::int64_t>> prompts{{1, 2, 3}, {4}, {5, 6}, {7, 8, 9, 10}};
  const grpo::SamplerOptions options{.temperature = 1.0, .max_new_tokens = 8, .top_p = 0.95, .eos_token_ids = {0},
                                     .seed = 99};
  grpo::Sampler sampler(options);
  const grpo::Rollout whole = sampler.generate(model, prompts, 3);
  // The same prompts in two calls, keyed by their index in the whole list.
  const std::vector<std::uint64_t> first_keys{0, 1}, second_keys{2, 3};
  const grpo::Rollout first = sampler.generate(model, {prompts[0], prompts[1]}, 3, first_keys);
  const grpo::Rollout second = sampler.generate(model, {prompts[2], prompts[3]}, 3, second_keys);
  const auto width = [](const grpo::Rollout& r, std::int64_t row) {
    return r.completion_ids[row].narrow(0, 0, r.completion_mask[row].sum().item<std::int64_t>());
  };
  for (std::int64_t row = 0; row < 12; ++row) {
    INFO("row " << row);
    const grpo::Rollout& part = row < 6 ? first : second;
    REQUIRE(torch::equal(width(whole, row), width(part, row % 6)));
  }
  // One prompt alone (no padding, no other rows), keyed 3.
  const std::vector<std::uint64_t> alone_key{3};
  const grpo::Rollout alone = sampler.generate(model, {prompts[3]}, 3, alone_key);
  for (std::int64_t g = 0; g < 3; ++g) REQUIRE(torch::equal(width(alone, g), width(whole, 9 + g)));
  // The completions are not all alike: the keys differ per prompt and per sample.
  CHECK(!torch::equal(whole.completion_ids[0], whole.completion_ids[1]));
  // Calls without keys draw fresh noise each time (a loop's steps); the first one is keyed 0 … P − 1.
  grpo::Sampler looping(options);
  const grpo::Rollout first_call = looping.generate(model, prompts, 3);
  REQUIRE(torch::equal(first_call.completion_ids, whole.completion_ids));
  CHECK(!torch::equal(looping.generate(model, prompts, 3).completion_ids, whole.completion_ids));
  // Another seed, other completions.
  grpo::SamplerOptions other = options;
  other.seed = 100;
  CHECK(!torch::equal(grpo::Sampler(other).generate(model, prompts, 3).completion_ids, whole.completion_ids));
  REQUIRE_THROWS_WITH(sampler.generate(model, prompts, 3, first_keys),
                      Catch::Matchers::Contains("2 prompt keys for 4 prompts"));
}
