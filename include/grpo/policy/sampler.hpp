// SPDX-License-Identifier: Apache-2.0
// Sampler: G completions per prompt from any causal LM, with a KV cache when the model offers one.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>
#include <grpo/core/seeded_generator.hpp>
#include <grpo/policy/causal_lm_concepts.hpp>
#include <grpo/policy/keyed_noise.hpp>
#include <grpo/policy/rollout.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace grpo {

namespace detail {
/// The model's KV-cache type, or a placeholder for models without one.
template <typename ModelType, bool = SupportsKvCache<ModelType>>
struct CacheOf {
  using type = int;
};
template <typename ModelType>
struct CacheOf<ModelType, true> {
  using type = typename ModuleOf<ModelType>::Cache;
};
}  // namespace detail

/// Which distribution Rollout::sampler_log_probs is taken from.
enum class SamplerLogProbs {
  /// log softmax(logits / temperature) over the full vocabulary: what Policy recomputes, so the importance ratio
  /// between trainer and sampler is 1 when the weights are equal (the default).
  full_distribution,
  /// log-prob under the distribution actually sampled from, after top-k / top-p / min-p filtering and
  /// renormalisation (what vLLM reports with processed log-probs); differs from the trainer's by log S, S the kept
  /// probability mass (TRL #6789).
  sampling_distribution,
};

/// Where the race's exponential noise comes from (the draw itself, argmax p / E with E ~ Exp(1), is the same).
enum class SamplingNoise {
  /// A pure function of (seed, prompt key, sample index, position, vocabulary index) (keyed_noise.hpp): a completion
  /// depends only on its key and its logits, whatever else is in the batch, on any rank, chunk or device (default).
  keyed,
  /// One [B, V] exponential tensor per decode step from a generator seeded with SamplerOptions::seed (the sampler's
  /// draws before keyed noise): a completion depends on the rows that share its batch.
  generator,
};

namespace detail {
inline constexpr EnumNames<SamplingNoise, 2> kSamplingNoiseNames{{
    {SamplingNoise::keyed, "keyed"},
    {SamplingNoise::generator, "generator"},
}};
}  // namespace detail

/// "keyed" or "generator".
GRPO_ENUM_NAMES(SamplingNoise, detail::kSamplingNoiseNames, "sampling noise", parse_sampling_noise);

struct SamplerOptions {
  /// Logits are divided by it before sampling (the same division Policy applies). 0 = greedy decoding.
  double temperature = 1.0;
  int64_t max_new_tokens = 256;
  /// Keep only the k most likely tokens (0 = off).
  int64_t top_k = 0;
  /// Keep the smallest set of most likely tokens whose probability reaches top_p (1 = off).
  double top_p = 1.0;
  /// Keep tokens whose probability is at least min_p times the most likely one's (0 = off; transformers' MinP).
  /// Filters apply in transformers' order: top-k, then top-p, then min-p.
  double min_p = 0.0;
  /// A completion ends at the first of these (the EOS is part of the completion and of its mask).
  std::vector<int64_t> eos_token_ids;
  /// Fills prompt left-padding and completion right-padding.
  int64_t pad_token_id = 0;
  /// The noise's stream: with keyed noise, the Philox keys are prompt_noise_key(seed, prompt key).
  uint64_t seed = 0;
  /// See SamplingNoise.
  SamplingNoise noise = SamplingNoise::keyed;
  /// See SamplerLogProbs.
  SamplerLogProbs log_probs = SamplerLogProbs::full_distribution;

  /// Throws ConfigError naming the option.
  void validate() const {
    GRPO_CHECK_CONFIG(temperature >= 0, "SamplerOptions: temperature must be >= 0, got {}", temperature);
    GRPO_CHECK_CONFIG(max_new_tokens >= 1, "SamplerOptions: max_new_tokens must be >= 1, got {}", max_new_tokens);
    GRPO_CHECK_CONFIG(top_k >= 0, "SamplerOptions: top_k must be >= 0, got {}", top_k);
    GRPO_CHECK_CONFIG(top_p > 0 && top_p <= 1, "SamplerOptions: top_p must be in (0, 1], got {}", top_p);
    GRPO_CHECK_CONFIG(min_p >= 0 && min_p <= 1, "SamplerOptions: min_p must be in [0, 1], got {}", min_p);
    GRPO_CHECK_CONFIG(pad_token_id >= 0, "SamplerOptions: pad_token_id must be >= 0, got {}", pad_token_id);
  }
};

/// The KV cache of B sequences between Sampler::continue_generation calls (a multi-turn rollout's trajectories between
/// turns): the cache's rows and its attention mask [B, S] int64 (undefined: nothing cached yet). Row b's cached tokens
/// are one run of mask-1 columns, after left padding and possibly before mask-0 columns: its sequence's first tokens.
template <typename Cache>
struct CachedSequences {
  Cache cache{};
  torch::Tensor mask;
  /// Keeps the rows `rows` ([K] int64), in that order.
  void select_rows(const torch::Tensor& rows) {
    if (!mask.defined()) return;
    cache.select_rows(rows);
    mask = mask.index_select(0, rows.to(mask.device()));
  }
};

/// Samples completions token by token. Rollout::sampler_log_probs holds the log-prob of each sampled token under
/// the distribution chosen by SamplerOptions::log_probs (after temperature; with temperature 0 — greedy — it is the
/// temperature-1 log-prob of the chosen token).
class Sampler {
 public:
  explicit Sampler(SamplerOptions options = {})
      : options_(std::move(options)), generator_(seeded_generator(torch::kCPU, options_.seed)) {
    options_.validate();
  }

  const SamplerOptions& options() const { return options_; }

  /// prompts: P token-id lists (each non-empty, ids in [0, V)); returns B = P·G completions, row p·G + g.
  /// prompt_keys: with keyed noise, prompt p's key (completion g of it draws the noise of (key, g)): give each prompt
  /// of a larger batch its index there, and any split of that batch into calls draws the same completions (the same
  /// keys and seed draw the same noise again). Empty: call c of this sampler without keys uses c·2^40 + p, so
  /// successive calls (a loop's steps) draw fresh noise and the first call's keys are 0 … P − 1.
  ///
  /// With a KV-cache model each prompt is prefilled once and its cache shared by its G completions (when the cache
  /// type has select_rows, as models::KvCache does), and a row that has finished leaves the decoding batch (its cache
  /// rows dropped), so finished completions cost nothing. Neither changes what is drawn (see sample), so the
  /// completions equal the cache-free path's for a seed.
  template <typename ModelType>
  Rollout generate(ModelType& model, const std::vector<std::vector<int64_t>>& prompts, int64_t group_size,
                   std::span<const std::uint64_t> prompt_keys = {}) {
    static_assert(CausalLanguageModel<ModelType>,
                  "grpo::Sampler::generate: Model must have forward(input_ids [B, T] int64, attention_mask [B, T]) "
                  "returning logits [B, T, V]");
    GRPO_CHECK(group_size >= 1, "Sampler::generate: group_size must be >= 1, got {}", group_size);
    GRPO_CHECK(!prompts.empty(), "Sampler::generate: no prompts");
    GRPO_CHECK(prompt_keys.empty() || prompt_keys.size() == prompts.size(),
               "Sampler::generate: {} prompt keys for {} prompts", prompt_keys.size(), prompts.size());
    torch::NoGradGuard no_grad;
    Rollout r;
    left_pad(prompts, group_size, r);
    const int64_t batch = r.prompt_ids.size(0);
    set_row_keys(prompt_keys, static_cast<int64_t>(prompts.size()), group_size);
    Draws draws(batch);

    if constexpr (SupportsKvCache<ModelType>) {
      using Cache = typename ModuleOf<ModelType>::Cache;
      constexpr bool compacts = requires(Cache& c, const torch::Tensor& rows) { c.select_rows(rows); };
      Cache cache{};
      auto mask = r.prompt_mask.clone();
      torch::Tensor logits;  // [B, V]
      if (compacts && group_size > 1) {  // one prefill per prompt, its cache rows repeated for the group
        const auto firsts = torch::arange(0, batch, group_size, torch::kInt64);
        const auto per_row = torch::arange(batch, torch::kInt64).div(group_size, "floor");
        const auto prefill =
            last_logits(model, r.prompt_ids.index_select(0, firsts), mask.index_select(0, firsts), cache);
        logits = prefill.index_select(0, per_row.to(prefill.device()));
        if constexpr (compacts) cache.select_rows(per_row);
      } else {
        logits = last_logits(model, r.prompt_ids, mask, cache);
      }
      decode(model, cache, mask, std::move(logits), compacts, draws);
    } else {
      auto mask = r.prompt_mask.clone();
      const auto all = torch::arange(batch, torch::kInt64);
      for (int64_t step = 0; step < options_.max_new_tokens; ++step) {
        auto ids = step == 0 ? r.prompt_ids : torch::cat({r.prompt_ids, torch::stack(draws.tokens, 1)}, 1);
        auto logits = model->forward(ids, mask).select(1, -1);
        const auto real = draws.finished.logical_not();
        auto [token, log_prob] = sample(logits.to(torch::kFloat32), all, batch, step);
        if (record(draws, token, log_prob)) break;
        mask = torch::cat({mask, real.to(torch::kInt64).unsqueeze(1).to(mask.device())}, 1);
      }
    }
    draws.into(r);
    return r;
  }

  /// One completion for each of B `sequences` (as generate with group_size 1 and `keys` as its prompt keys), where the
  /// keys and values of each row's leading tokens may already be in `cached` from the call before (a multi-turn
  /// rollout continuing its trajectories after a tool reply): only the tokens the cache lacks are run, so a sequence
  /// that grew by a fragment costs a prefill of the fragment, not of the whole sequence. `cached` holds B rows in the
  /// order of `sequences` (empty on the first call: every token is run), and each row's cached tokens must be the
  /// first tokens of its sequence; it is updated to hold every row's sequence and completion (up to the last token
  /// fed to the model). Rows that finish stay in the decoding batch, masked, so that their cache rows are kept.
  ///
  /// The cached positions are moved (gathered) so that each row is left padding and then its tokens, the uncached
  /// ones run as one block of the longest row's count (a shorter row runs its last cached tokens again to fill it):
  /// every row's positions and attention are then a fresh prefill's, and the logits equal it to rounding.
  /// Returns prompt_ids / prompt_mask = the sequences left-padded, and the completions as generate does.
  template <typename ModelType>
    requires SupportsCacheContinuation<ModelType>
  Rollout continue_generation(ModelType& model, const std::vector<std::vector<int64_t>>& sequences,
                              CachedSequences<typename ModuleOf<ModelType>::Cache>& cached,
                              std::span<const std::uint64_t> keys = {}) {
    GRPO_CHECK(!sequences.empty(), "Sampler::continue_generation: no sequences");
    GRPO_CHECK(keys.empty() || keys.size() == sequences.size(), "Sampler::continue_generation: {} keys for {} sequences",
               keys.size(), sequences.size());
    const auto batch = static_cast<int64_t>(sequences.size());
    GRPO_CHECK(!cached.mask.defined() || cached.mask.size(0) == batch,
               "Sampler::continue_generation: the cache holds {} rows for {} sequences", cached.mask.size(0), batch);
    torch::NoGradGuard no_grad;
    Rollout r;
    left_pad(sequences, 1, r);
    set_row_keys(keys, batch, 1);
    // Each row's cached run: columns [first, first + count) of the cache hold its first `count` tokens.
    std::vector<int64_t> first(static_cast<size_t>(batch), 0), count(static_cast<size_t>(batch), 0);
    if (cached.mask.defined() && cached.mask.size(1) > 0) {
      const torch::Tensor mask = cached.mask.to(torch::kCPU).contiguous();
      const auto m = mask.accessor<int64_t, 2>();
      for (int64_t b = 0; b < batch; ++b) {
        int64_t j = 0;
        while (j < mask.size(1) && m[b][j] == 0) ++j;
        first[static_cast<size_t>(b)] = j;
        while (j < mask.size(1) && m[b][j] != 0) ++j;
        count[static_cast<size_t>(b)] = j - first[static_cast<size_t>(b)];
      }
    }
    int64_t block = 1;  // the uncached tokens of the row that has most
    for (int64_t b = 0; b < batch; ++b) {
      const auto n = static_cast<int64_t>(sequences[static_cast<size_t>(b)].size());
      GRPO_CHECK(count[static_cast<size_t>(b)] < n,
                 "Sampler::continue_generation: sequence {} has {} tokens, all of them cached (nothing to continue from)",
                 b, n);
      block = std::max(block, n - count[static_cast<size_t>(b)]);
    }
    // Row b keeps its first kept[b] = max(0, n − block) cached tokens, right-aligned in `width` columns, and runs the
    // rest (left-padded to `block` when the whole sequence is shorter).
    std::vector<int64_t> kept(static_cast<size_t>(batch));
    int64_t width = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const auto n = static_cast<int64_t>(sequences[static_cast<size_t>(b)].size());
      kept[static_cast<size_t>(b)] = std::max<int64_t>(0, n - block);
      width = std::max(width, kept[static_cast<size_t>(b)]);
    }
    auto columns = torch::zeros({batch, width}, torch::kInt64);
    auto mask = torch::zeros({batch, width + block}, torch::kInt64);
    auto input = torch::full({batch, block}, options_.pad_token_id, torch::kInt64);
    {
      auto c = columns.accessor<int64_t, 2>();
      auto m = mask.accessor<int64_t, 2>();
      auto in = input.accessor<int64_t, 2>();
      for (int64_t b = 0; b < batch; ++b) {
        const auto& s = sequences[static_cast<size_t>(b)];
        const int64_t k = kept[static_cast<size_t>(b)], n = static_cast<int64_t>(s.size());
        for (int64_t j = 0; j < k; ++j) {
          c[b][width - k + j] = first[static_cast<size_t>(b)] + j;
          m[b][width - k + j] = 1;
        }
        for (int64_t j = k; j < n; ++j) {
          in[b][block - (n - j)] = s[static_cast<size_t>(j)];
          m[b][width + block - (n - j)] = 1;
        }
      }
    }
    using Cache = typename ModuleOf<ModelType>::Cache;
    if (width == 0) {
      cached.cache = Cache{};
    } else {
      cached.cache.gather_positions(columns);
    }
    Draws draws(batch);
    auto logits = last_logits(model, input, mask, cached.cache);
    decode(model, cached.cache, mask, std::move(logits), /*compact=*/false, draws);
    cached.mask = std::move(mask);
    draws.into(r);
    return r;
  }

 private:
  /// The draws of one call: each step's [B] tokens, masks and log-probs, and which rows have finished.
  struct Draws {
    explicit Draws(int64_t batch) : finished(torch::zeros({batch}, torch::kBool)) {}
    std::vector<torch::Tensor> tokens, masks, log_probs;
    torch::Tensor finished;  // [B] bool
    /// The completions [B, steps] into `r`.
    void into(Rollout& r) const {
      r.completion_ids = torch::stack(tokens, 1);
      r.completion_mask = torch::stack(masks, 1);
      r.sampler_log_probs = torch::stack(log_probs, 1);
      r.truncated = finished.logical_not();
    }
  };

  /// Keeps a step's draws ([B] tokens and log-probs; rows finished before it get pad, mask 0 and log-prob 0) and
  /// returns whether every row has now finished.
  bool record(Draws& draws, torch::Tensor token, const torch::Tensor& log_prob) const {
    auto real = draws.finished.logical_not();
    token = torch::where(real, token, torch::full_like(token, options_.pad_token_id));
    draws.tokens.push_back(token);
    draws.masks.push_back(real.to(torch::kInt64));
    draws.log_probs.push_back(log_prob * real);
    draws.finished = draws.finished | is_eos(token);
    return draws.finished.all().item<bool>();
  }

  /// The decoding loop of a KV-cache model from the logits [B, V] of the position before the first new token, with
  /// `cache` and `mask` [B, S] covering the B rows. With `compact`, rows that have finished leave the batch (their
  /// cache rows dropped); without it they stay, masked, and on return `cache` and `mask` hold every row up to the
  /// last token fed (the last token drawn is not fed).
  template <typename ModelType, typename Cache>
  void decode(ModelType& model, Cache& cache, torch::Tensor& mask, torch::Tensor logits, bool compact, Draws& draws) {
    const int64_t batch = draws.finished.size(0);
    auto active = torch::arange(batch, torch::kInt64);  // rows of the batch still decoding (indices into the B rows)
    for (int64_t step = 0; step < options_.max_new_tokens; ++step) {
      const auto real = draws.finished.index_select(0, active).logical_not();  // the decoding rows not yet finished
      auto [token, log_prob] = sample(logits.to(torch::kFloat32), active, batch, step);
      if (record(draws, token, log_prob) || step + 1 == options_.max_new_tokens) break;
      // A row keeps decoding: its new token is real (a row that just ended leaves below, or is masked out).
      mask = torch::cat({mask, real.to(torch::kInt64).unsqueeze(1).to(mask.device())}, 1);
      if constexpr (requires(const torch::Tensor& rows) { cache.select_rows(rows); }) {
        const auto still = draws.finished.index_select(0, active).logical_not();
        if (compact && !still.all().item<bool>()) {  // rows that finished leave the batch
          const auto keep = still.nonzero().squeeze(1);
          active = active.index_select(0, keep);
          mask = mask.index_select(0, keep);
          cache.select_rows(keep);
        }
      }
      logits = last_logits(model, token.index_select(0, active).unsqueeze(1), mask, cache);
    }
  }

  /// Logits [rows, V] of the last new position (forward_step_last when the model has it: lm_head on that position
  /// only).
  template <typename ModelType, typename Cache>
  static torch::Tensor last_logits(ModelType& model, const torch::Tensor& input, const torch::Tensor& mask,
                                   Cache& cache) {
    if constexpr (requires { model->forward_step_last(input, mask, cache); }) {
      return model->forward_step_last(input, mask, cache);
    } else {
      return model->forward_step(input, mask, cache).select(1, -1);
    }
  }

  void left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t group_size, Rollout& r) const {
    size_t longest = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      GRPO_CHECK(!prompts[p].empty(), "Sampler::generate: prompt {} is empty", p);
      longest = std::max(longest, prompts[p].size());
    }
    const int64_t batch = static_cast<int64_t>(prompts.size()) * group_size, tp = static_cast<int64_t>(longest);
    r.prompt_ids = torch::full({batch, tp}, options_.pad_token_id, torch::kInt64);
    r.prompt_mask = torch::zeros({batch, tp}, torch::kInt64);
    auto ids = r.prompt_ids.accessor<int64_t, 2>();
    auto mask = r.prompt_mask.accessor<int64_t, 2>();
    for (size_t p = 0; p < prompts.size(); ++p) {
      const int64_t offset = tp - static_cast<int64_t>(prompts[p].size());
      for (int64_t g = 0; g < group_size; ++g) {
        const int64_t row = static_cast<int64_t>(p) * group_size + g;
        for (size_t t = 0; t < prompts[p].size(); ++t) {
          ids[row][offset + static_cast<int64_t>(t)] = prompts[p][t];
          mask[row][offset + static_cast<int64_t>(t)] = 1;
        }
      }
    }
  }

  /// The Philox key and sample index of each of the B rows (keyed noise).
  void set_row_keys(std::span<const std::uint64_t> prompt_keys, int64_t prompts, int64_t group_size) {
    row_keys_ = torch::empty({prompts * group_size}, torch::kInt64);
    row_samples_ = torch::arange(group_size, torch::kInt64).repeat({prompts});
    auto keys = row_keys_.accessor<int64_t, 1>();
    const std::uint64_t unkeyed_call = prompt_keys.empty() ? unkeyed_calls_++ : 0;
    for (int64_t p = 0; p < prompts; ++p) {
      const std::uint64_t key = prompt_noise_key(
          options_.seed, prompt_keys.empty() ? (unkeyed_call << 40) + static_cast<std::uint64_t>(p) : prompt_keys[p]);
      for (int64_t g = 0; g < group_size; ++g) keys[p * group_size + g] = static_cast<int64_t>(key);
    }
  }

  torch::Tensor is_eos(const torch::Tensor& token) const {
    auto eos = torch::zeros_like(token, torch::kBool);
    for (int64_t id : options_.eos_token_ids) eos = eos | (token == id);
    return eos;
  }

  struct Sample {
    torch::Tensor token, log_prob;  // [B] int64, [B] float32
  };

  /// One token for each of the `rows` ([A] int64 CPU indices into the batch of B) at decode position `position` from
  /// their logits [A, V] (fp32, on the model's device, where all of the filtering and drawing runs); returns [B]
  /// tokens and log-probs on the CPU (the only per-token transfer: A tokens and A log-probs), pad and 0 for the rows
  /// not drawn. Drawing is torch::multinomial's for one sample without replacement: argmax(p / q), q ~ Exp(1). With
  /// keyed noise q is the row's keyed_exponential at this position (keyed_race); with the generator it is drawn over
  /// [B, V] in row order for the whole batch. Either way a row's token does not depend on which rows are still
  /// decoding.
  Sample sample(const torch::Tensor& logits, const torch::Tensor& cpu_rows, int64_t batch, int64_t position) {
    const auto rows = cpu_rows.to(logits.device());
    const double t = options_.temperature > 0 ? options_.temperature : 1.0;
    auto scaled = logits / t;
    auto full_log_probs = torch::log_softmax(scaled, -1);
    auto scatter = [&](const torch::Tensor& values, const torch::Tensor& fill) {
      return fill.index_copy(0, cpu_rows, values.to(torch::kCPU));
    };
    auto tokens = torch::full({batch}, options_.pad_token_id, torch::kInt64);
    auto zeros = torch::zeros({batch}, torch::kFloat32);
    if (options_.temperature == 0) {
      auto token = scaled.argmax(-1);
      return {scatter(token, tokens), scatter(full_log_probs.gather(-1, token.unsqueeze(-1)).squeeze(-1), zeros)};
    }
    const auto minus_inf = -std::numeric_limits<float>::infinity();
    auto filtered = scaled.clone();
    const int64_t vocab = filtered.size(-1);
    if (options_.top_k > 0 && options_.top_k < vocab) {
      auto kth = std::get<0>(filtered.topk(options_.top_k, -1)).select(-1, -1).unsqueeze(-1);
      filtered.masked_fill_(filtered < kth, minus_inf);
    }
    if (options_.top_p < 1.0) {
      auto [sorted, order] = filtered.sort(-1, /*descending=*/true);
      auto probs = torch::softmax(sorted, -1);
      // drop a token when the tokens before it already reach top_p (the first token is always kept)
      auto drop_sorted = (probs.cumsum(-1) - probs) >= options_.top_p;
      filtered.masked_fill_(torch::zeros_like(drop_sorted).scatter(-1, order, drop_sorted), minus_inf);
    }
    if (options_.min_p > 0.0) {
      auto probs = torch::softmax(filtered, -1);
      auto threshold = std::get<0>(probs.max(-1, /*keepdim=*/true)) * options_.min_p;
      filtered.masked_fill_(probs < threshold, minus_inf);
    }
    torch::Tensor token;
    if (options_.noise == SamplingNoise::keyed) {
      token = keyed_race(torch::softmax(filtered, -1), row_keys_.index_select(0, cpu_rows),
                         row_samples_.index_select(0, cpu_rows), position);
    } else {
      auto noise = exponential_noise(batch, vocab, logits.device()).index_select(0, rows);
      token = torch::softmax(filtered, -1).div(noise).argmax(-1);
    }
    const auto& source =
        options_.log_probs == SamplerLogProbs::full_distribution ? full_log_probs : torch::log_softmax(filtered, -1);
    return {scatter(token, tokens), scatter(source.gather(-1, token.unsqueeze(-1)).squeeze(-1), zeros)};
  }

  /// q ~ Exp(1) of shape [B, V] on `device`, from the sampler's generator: the CPU generator seeded with
  /// SamplerOptions::seed, or on another device a copy of that device's generator seeded with it (another engine,
  /// so a seed draws other completions there than on the CPU).
  torch::Tensor exponential_noise(int64_t batch, int64_t vocab, const torch::Device& device) {
    const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    if (device.is_cpu()) return torch::empty({batch, vocab}, options).exponential_(1, generator_);
    if (!device_generator_.defined() || device_generator_.device() != device) {
      device_generator_ = seeded_generator(device, options_.seed);
    }
    return torch::empty({batch, vocab}, options).exponential_(1, device_generator_);
  }

  SamplerOptions options_;
  at::Generator generator_;
  at::Generator device_generator_;  // for a model on another device than the CPU, made on first use
  torch::Tensor row_keys_, row_samples_;  // [B] int64 each: the Philox key and sample index of each row
  std::uint64_t unkeyed_calls_ = 0;       // generate calls without prompt keys so far
};

}  // namespace grpo
