// SPDX-License-Identifier: Apache-2.0
// PromptSource over JSON/JSONL data sets, rendered through the model's chat template (a ROLL `prompt` row's text
// as it is): one data set, or several domains (ROLL rows routed by their `domain` field, else their `tag`) mixed by
// DomainMixer. Each domain is an endless reshuffled PromptStream
// with its own held-out split; the difficulty curriculum (DifficultySchedule) and the pass-rate filter
// (PassRateFilter) decide which rows a stream may hand out at a step. The domain of a row is decided here, at load,
// from its tag, and travels with the Problem (Problem::domain) from then on.
//
// Sampling state (each domain's stream position, the number of batches drawn, the filter) goes into checkpoints
// under "data/<domain>/position", "data/draws", "curriculum/fallbacks" and texts "curriculum/filter".
#pragma once

#include <grpo/io/dataset.hpp>
#include <grpo/text/tokenizer.hpp>
#include <grpo/train/difficulty_schedule.hpp>
#include <grpo/train/domain_mixer.hpp>
#include <grpo/train/pass_rate_filter.hpp>
#include <grpo/train/prompt_source.hpp>
#include <grpo/train/prompt_stream.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace grpo::train {

/// One domain's data (the run config's `domains.<name>` section).
struct PromptDomain {
  std::string name;
  io::DomainKind kind = io::DomainKind::math;     ///< the fields its rows must carry (io::DomainKind)
  std::vector<std::string> tags;                  ///< row tags routed here; empty = {name}
  std::vector<std::filesystem::path> files;       ///< files holding only (or also) this domain's rows
  double probability = 1.0;                       ///< sampling weight, normalised over the domains
  std::string source;                             ///< "file:line" of the domain's config section, for errors
};

struct MixedPromptSourceOptions {
  /// With no domains: every row of `files` is one domain called "data". With domains: rows of every file (these and
  /// each domain's own) go to the domain claiming their tag.
  std::vector<std::filesystem::path> files;
  std::vector<PromptDomain> domains;
  io::DatasetOptions dataset;         ///< format, bad rows, fields, system prompt; `domains` is filled from above
  /// Rows whose domain is not configured (their tag, or their `domain` field): "" or "error" (a bad row), "skip", or
  /// a domain's name to send them to ("math": the first math domain when none is called so; ROLL's behaviour).
  std::string unknown_tag;
  std::int64_t held_out = 0;          ///< rows of each domain kept out of training for evaluation
  /// A separate validation set (ROLL's `validation.data_args.file_name`): its rows are the held-out problems (routed
  /// to domains like training rows) and every training row trains; held_out is then not used.
  std::vector<std::filesystem::path> validation_files;
  std::uint64_t seed = 1;             ///< the held-out split, the streams' order and the mixer
  DifficultyScheduleOptions curriculum;
  /// Steps the run will take: every step's curriculum range is checked to hold rows of every domain (a range without
  /// any would silently fall back to rows outside it).
  std::int64_t steps = 1;
  std::optional<PassRateFilterOptions> filter;  ///< nullopt = no filter
  /// Tool schemas (agent::Tool::schema_json) every prompt announces through the chat template's `tools` (multi-turn
  /// tool rollouts); empty: none. Not applied to rows that bring their prompt as raw text.
  std::vector<std::string> tools;
};

class MixedPromptSource final : public PromptSource {
 public:
  /// Loads and splits the data. Throws ConfigError (file:line and field for bad rows, the domain and tag otherwise):
  /// no file, a tag claimed by two domains, a row whose tag no domain claims, a domain with no row left after the
  /// held-out split, a curriculum step whose range holds no row of some domain, no EOS token (neither `eos_token_ids`
  /// nor the tokenizer's eos).
  MixedPromptSource(MixedPromptSourceOptions options, text::Tokenizer tokenizer, std::vector<std::int64_t> eos_token_ids);

  std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) override;
  const std::vector<Problem>& held_out() const override { return held_out_; }
  std::string decode(std::span<const std::int64_t> ids) const override;
  std::vector<std::int64_t> eos_token_ids() const override { return eos_ids_; }
  std::int64_t pad_token_id() const override { return pad_; }
  std::vector<std::string> domain_names() const override { return names_; }
  void observe(std::span<const Problem> problems, std::span<const double> pass_rates, std::int64_t step) override;
  /// "curriculum/difficulty_{min,max}" (with a schedule), "curriculum/retired_prompts" (with the filter),
  /// "curriculum/fallbacks" (draws that had to ignore the filter or the schedule), "data/<domain>/epoch".
  std::vector<std::pair<std::string, double>> metrics(std::int64_t step) const override;
  void save_state(TrainerState& state) const override;
  /// grpo::Error naming the missing key when the checkpoint lacks a domain's position or the filter state.
  void load_state(const TrainerState& state) override;

  const text::Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  struct Domain {
    std::vector<io::Example> train;
    PromptStream stream;
  };
  std::string filter_key(std::size_t domain, const io::Example& example) const;
  Problem problem(const io::Example& example, std::size_t domain) const;

  text::Tokenizer tokenizer_;
  std::vector<std::string> tools_;
  std::vector<std::int64_t> eos_ids_;
  std::int64_t pad_ = 0;
  std::vector<std::string> names_;
  std::vector<Domain> domains_;
  std::vector<Problem> held_out_;
  DifficultySchedule schedule_;
  DomainMixer mixer_;
  std::optional<PassRateFilter> filter_;
  std::int64_t fallbacks_ = 0;
  std::int64_t draws_ = 0;  // batches drawn so far
};

}  // namespace grpo::train
