// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/mixed_prompt_source.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace grpo::train {

namespace {

DomainMixerOptions mixer_options(const MixedPromptSourceOptions& o) {
  DomainMixerOptions out{.probabilities = {1.0}, .seed = o.seed};
  if (!o.domains.empty()) {
    out.probabilities.clear();
    for (const auto& d : o.domains) out.probabilities.push_back(d.probability);
  }
  return out;
}

}  // namespace

MixedPromptSource::MixedPromptSource(MixedPromptSourceOptions options, text::Tokenizer tokenizer,
                                     std::vector<std::int64_t> eos_token_ids)
    : tokenizer_(std::move(tokenizer)), tools_(options.tools), eos_ids_(std::move(eos_token_ids)),
      schedule_(options.curriculum), mixer_(mixer_options(options)) {
  if (eos_ids_.empty() && tokenizer_.special_token_ids().eos) eos_ids_.push_back(*tokenizer_.special_token_ids().eos);
  GRPO_CHECK_CONFIG(!eos_ids_.empty(), "neither the model's config.json (eos_token_id) nor the tokenizer names an EOS token");
  pad_ = tokenizer_.special_token_ids().pad.value_or(static_cast<std::int32_t>(eos_ids_.front()));
  if (options.filter) filter_.emplace(*options.filter);
  io::DatasetOptions dataset = options.dataset;
  std::vector<std::vector<io::Example>> rows(std::max<std::size_t>(1, options.domains.size()));
  auto load = [&](const std::filesystem::path& path) {
    auto data = io::Dataset::load(path, dataset);
    if (data.skipped_rows() > 0) {  // why, for the first few; then how many more
      constexpr std::size_t kShown = 5;
      fmt::print("{}: skipped {} malformed rows\n", path.string(), data.skipped_rows());
      const auto& reasons = data.skip_reasons();
      for (std::size_t i = 0; i < std::min(kShown, reasons.size()); ++i) fmt::print("  skipped {}\n", reasons[i]);
      if (reasons.size() > kShown) fmt::print("  ... and {} more\n", reasons.size() - kShown);
    }
    return data;
  };
  std::map<std::string, std::size_t, std::less<>> index_of_name;  // domain name → index
  if (options.domains.empty()) {
    names_ = {"data"};
    GRPO_CHECK_CONFIG(!options.files.empty(), "a data run needs --data FILE");
    for (const auto& file : options.files) {
      const auto data = load(file);
      rows[0].insert(rows[0].end(), data.examples().begin(), data.examples().end());
    }
  } else {
    dataset.domains.clear();  // the data set routes rows to them (and rejects a tag two domains claim)
    for (std::size_t d = 0; d < options.domains.size(); ++d) {
      const PromptDomain& domain = options.domains[d];
      names_.push_back(domain.name);
      index_of_name.emplace(domain.name, d);
      dataset.domains.push_back({domain.name, domain.kind, domain.tags, domain.source});
    }
    if (!options.unknown_tag.empty()) io::set_unknown_tag(dataset, options.unknown_tag);
    std::vector<std::filesystem::path> files = options.files;
    for (const auto& d : options.domains) files.insert(files.end(), d.files.begin(), d.files.end());
    GRPO_CHECK_CONFIG(!files.empty(), "a multi-domain run needs --data or a 'data' file in some domain");
    for (const auto& file : files) {
      const auto data = load(file);
      // The data set gave every row a configured domain (its `domain` field, its tag's, or unknown_tag's).
      for (const auto& example : data.examples()) rows[index_of_name.at(example.domain)].push_back(example);
    }
  }
  // A validation set: its rows are the held-out problems, in file order, each in its own domain.
  const bool validation = !options.validation_files.empty();
  for (const auto& file : options.validation_files) {
    const auto data = load(file);
    for (const auto& example : data.examples()) {
      held_out_.push_back(problem(example, options.domains.empty() ? 0 : index_of_name.at(example.domain)));
    }
  }
  const auto held_out = static_cast<std::size_t>(validation ? 0 : options.held_out);
  for (std::size_t d = 0; d < rows.size(); ++d) {
    GRPO_CHECK_CONFIG(rows[d].size() > held_out, "domain '{}': {} rows leave none for training after --held-out {}",
                      names_[d], rows[d].size(), held_out);
    const auto split = io::Dataset(std::move(rows[d])).split(held_out, options.seed);
    Domain domain{split.train.examples(), PromptStream(split.train.size(), options.seed)};
    for (const auto& example : split.held_out.examples()) held_out_.push_back(problem(example, d));
    // Every step's curriculum range must hold rows of every domain, or sampling would fall back to rows outside it
    // mid-run. A row without a difficulty is always admitted.
    std::vector<double> difficulties;
    for (const io::Example& e : domain.train) difficulties.push_back(e.difficulty.value_or(NAN));
    if (std::none_of(difficulties.begin(), difficulties.end(), [](double x) { return std::isnan(x); })) {
      std::sort(difficulties.begin(), difficulties.end());
      for (std::int64_t step = 1; step <= options.steps; ++step) {
        const auto range = schedule_.range_at(step);
        const auto first = std::lower_bound(difficulties.begin(), difficulties.end(), range.min);
        GRPO_CHECK_CONFIG(first != difficulties.end() && range.contains(*first),
                          "domain '{}' has no training row with a difficulty in [{}, {}], the curriculum's range at "
                          "step {}", names_[d], range.min, range.max, step);
      }
    }
    domains_.push_back(std::move(domain));
  }
}

std::vector<Problem> MixedPromptSource::train_batch(std::int64_t step, std::int64_t count) {
  std::vector<Problem> out;
  // The mix of the n-th batch drawn (one per step, more with dynamic sampling's rounds).
  for (const std::size_t d : mixer_.assignment(++draws_, count)) {
    Domain& domain = domains_[d];
    auto admitted = [&](std::size_t i) { return schedule_.admits(domain.train[i].difficulty, step); };
    auto available = [&](std::size_t i) {
      return admitted(i) && !(filter_ && filter_->is_retired(filter_key(d, domain.train[i]), step));
    };
    std::optional<std::size_t> item = domain.stream.next_accepted(available);
    if (!item) {  // every admitted row is retired: recycle them rather than stall
      item = domain.stream.next_accepted(admitted);
      ++fallbacks_;
    }
    if (!item) {
      item = domain.stream.next();
      ++fallbacks_;
    }
    out.push_back(problem(domain.train[*item], d));
  }
  return out;
}

std::string MixedPromptSource::decode(std::span<const std::int64_t> ids) const {
  const std::vector<std::int32_t> narrow(ids.begin(), ids.end());
  return tokenizer_.decode(narrow, {.skip_special_tokens = true, .skip_unknown_ids = true});
}

void MixedPromptSource::observe(std::span<const Problem> problems, std::span<const double> pass_rates,
                                std::int64_t step) {
  if (!filter_) return;
  for (std::size_t i = 0; i < problems.size(); ++i) filter_->observe(problems[i].id, pass_rates[i], step);
}

std::vector<std::pair<std::string, double>> MixedPromptSource::metrics(std::int64_t step) const {
  std::vector<std::pair<std::string, double>> out;
  const bool curriculum = schedule_.options().kind != DifficultyScheduleKind::none;
  if (curriculum) {
    const auto range = schedule_.range_at(step);
    out.insert(out.end(), {{"curriculum/difficulty_min", range.min}, {"curriculum/difficulty_max", range.max}});
  }
  if (filter_) out.emplace_back("curriculum/retired_prompts", static_cast<double>(filter_->retired_count(step)));
  if (filter_ || curriculum) out.emplace_back("curriculum/fallbacks", static_cast<double>(fallbacks_));
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    out.emplace_back(fmt::format("data/{}/epoch", names_[d]), static_cast<double>(domains_[d].stream.epoch()));
  }
  return out;
}

void MixedPromptSource::save_state(TrainerState& state) const {
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    state.values[fmt::format("data/{}/position", names_[d])] = static_cast<double>(domains_[d].stream.position());
  }
  state.values["curriculum/fallbacks"] = static_cast<double>(fallbacks_);
  state.values["data/draws"] = static_cast<double>(draws_);
  if (filter_) state.texts["curriculum/filter"] = filter_->save();
}

void MixedPromptSource::load_state(const TrainerState& state) {
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    const auto it = state.values.find(fmt::format("data/{}/position", names_[d]));
    GRPO_CHECK(it != state.values.end(), "the checkpoint of step {} has no position for domain '{}'", state.step,
               names_[d]);
    domains_[d].stream.set_position(static_cast<std::uint64_t>(it->second));
  }
  const auto draws = state.values.find("data/draws");
  draws_ = draws != state.values.end() ? static_cast<std::int64_t>(draws->second) : state.step;
  if (const auto it = state.values.find("curriculum/fallbacks"); it != state.values.end()) {
    fallbacks_ = static_cast<std::int64_t>(it->second);
  }
  if (filter_) {
    const auto it = state.texts.find("curriculum/filter");
    GRPO_CHECK(it != state.texts.end(), "the checkpoint of step {} has no pass-rate filter state", state.step);
    filter_->load(it->second, "trainer_state.json texts.curriculum/filter");
  }
}

std::string MixedPromptSource::filter_key(std::size_t domain, const io::Example& example) const {
  return names_[domain] + "/" + example.id;
}

Problem MixedPromptSource::problem(const io::Example& example, std::size_t domain) const {
  Problem p;
  text::ChatRenderOptions render;
  render.add_generation_prompt = true;
  render.tools = tools_;
  p.prompt_text = example.raw_prompt ? *example.raw_prompt : tokenizer_.chat_template().render(example.prompt, render);
  const auto ids = tokenizer_.encode(p.prompt_text, {.add_special_tokens = false});
  p.prompt_ids.assign(ids.begin(), ids.end());
  p.row = example.row;
  p.domain = domain;
  p.id = filter_key(domain, example);
  return p;
}

}  // namespace grpo::train
