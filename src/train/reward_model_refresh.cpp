// SPDX-License-Identifier: Apache-2.0
// RewardModelRefresh: the run's reward model trained on the policy's own samples (see reward_model_refresh.hpp).
#include <grpo/train/reward_model_refresh.hpp>

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/rewards/reward_model_reward.hpp>
#include <grpo/text/tokenizer.hpp>
#include <grpo/train/distributed.hpp>

#include "seconds_since.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>

namespace grpo::train {
namespace {

// The buffer as two tensors: every text's bytes, one after the other (prompt, chosen, rejected of each pair), and the
// offsets where each starts ([3·P + 1] int64). Bytes, not JSON: a completion may be any bytes, invalid UTF-8 too.
constexpr const char* kTextName = "buffer/text";
constexpr const char* kOffsetsName = "buffer/offsets";
constexpr const char* kParameterPrefix = "parameter/";

std::pair<torch::Tensor, torch::Tensor> pack(const std::deque<PreferencePair>& pairs) {
  std::vector<std::int64_t> offsets{0};
  std::string bytes;
  for (const PreferencePair& pair : pairs) {
    for (const std::string* text : {&pair.prompt, &pair.chosen, &pair.rejected}) {
      bytes += *text;
      offsets.push_back(static_cast<std::int64_t>(bytes.size()));
    }
  }
  torch::Tensor text = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(text.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  return {text, torch::tensor(offsets, torch::kInt64)};
}

std::deque<PreferencePair> unpack(const torch::Tensor& text, const torch::Tensor& offsets,
                                  const std::filesystem::path& file) {
  GRPO_CHECK(text.dim() == 1 && text.scalar_type() == torch::kUInt8 && offsets.dim() == 1 &&
                 offsets.scalar_type() == torch::kInt64 && offsets.size(0) % 3 == 1,
             "{}: '{}' must be uint8 [bytes] and '{}' int64 [3·pairs + 1]", file.string(), kTextName, kOffsetsName);
  const auto* bytes = reinterpret_cast<const char*>(text.data_ptr<std::uint8_t>());
  const auto* at = offsets.data_ptr<std::int64_t>();
  std::deque<PreferencePair> out;
  const std::int64_t pairs = (offsets.size(0) - 1) / 3;
  for (std::int64_t p = 0; p < pairs; ++p) {
    std::string parts[3];
    for (int k = 0; k < 3; ++k) {
      const std::int64_t begin = at[3 * p + k], end = at[3 * p + k + 1];
      GRPO_CHECK(0 <= begin && begin <= end && end <= text.size(0), "{}: '{}' is not increasing within the text",
                 file.string(), kOffsetsName);
      parts[k].assign(bytes + begin, static_cast<std::size_t>(end - begin));
    }
    out.push_back({.prompt = std::move(parts[0]), .chosen = std::move(parts[1]), .rejected = std::move(parts[2]),
                   .margin = std::nullopt, .source = fmt::format("{} pair {}", file.string(), p)});
  }
  return out;
}

}  // namespace

StepBatch gather_graded(ProcessGroup& group, const StepBatch& batch) {
  const std::size_t n = batch.completions.size();
  GRPO_CHECK(batch.correct.size() == n && (batch.totals.empty() || batch.totals.size() == n),
             "gather_graded: {} completions, {} correct values and {} totals", n, batch.correct.size(),
             batch.totals.size());
  // Per row: rank, group, the prompt's and the text's byte counts, correct (-1: no value); the totals (NaN: none);
  // the bytes one after the other, one int64 each (all_gather_rows sums zero-filled slots, in any backend).
  torch::Tensor rows = torch::empty({static_cast<std::int64_t>(n), 5}, torch::kInt64);
  torch::Tensor totals = torch::full({static_cast<std::int64_t>(n)}, std::nan(""), torch::kFloat64);
  auto row = rows.accessor<std::int64_t, 2>();
  auto total = totals.accessor<double, 1>();
  std::string bytes;
  for (std::size_t i = 0; i < n; ++i) {
    const rewards::Completion& c = batch.completions[i];
    const auto r = static_cast<std::int64_t>(i);
    row[r][0] = group.rank();
    row[r][1] = static_cast<std::int64_t>(c.group);
    row[r][2] = static_cast<std::int64_t>(c.prompt.size());
    row[r][3] = static_cast<std::int64_t>(c.text.size());
    row[r][4] = batch.correct[i] ? (*batch.correct[i] ? 1 : 0) : -1;
    if (!batch.totals.empty() && batch.totals[i]) total[r] = *batch.totals[i];
    bytes += c.prompt;
    bytes += c.text;
  }
  torch::Tensor text = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kInt64);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    text.data_ptr<std::int64_t>()[i] = static_cast<unsigned char>(bytes[i]);
  }
  const torch::Tensor all_rows = all_gather_rows(group, rows).whole;
  const torch::Tensor all_totals = all_gather_rows(group, totals).whole;
  const torch::Tensor all_text = all_gather_rows(group, text).whole;
  StepBatch out;
  out.step = batch.step;
  out.group_size = batch.group_size;
  auto every = all_rows.accessor<std::int64_t, 2>();
  auto every_total = all_totals.accessor<double, 1>();
  const std::int64_t* at = all_text.data_ptr<std::int64_t>();
  std::int64_t offset = 0;
  const auto take = [&](std::int64_t count) {
    std::string s(static_cast<std::size_t>(count), '\0');
    for (std::int64_t k = 0; k < count; ++k) s[static_cast<std::size_t>(k)] = static_cast<char>(at[offset + k]);
    offset += count;
    return s;
  };
  std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> groups;  // (rank, group) → the whole batch's group
  for (std::int64_t r = 0; r < all_rows.size(0); ++r) {
    rewards::Completion c;
    c.prompt = take(every[r][2]);
    c.text = take(every[r][3]);
    c.group = groups.try_emplace({every[r][0], every[r][1]}, groups.size()).first->second;
    out.completions.push_back(std::move(c));
    out.correct.push_back(every[r][4] < 0 ? std::nullopt : std::optional<bool>(every[r][4] == 1));
    out.totals.push_back(std::isnan(every_total[r]) ? std::nullopt
                                                    : std::optional<float>(static_cast<float>(every_total[r])));
  }
  return out;
}

CorrectShare correct_variance_share(const std::vector<rewards::Completion>& completions,
                                    const std::vector<std::optional<float>>& totals,
                                    const std::vector<std::optional<bool>>& correct) {
  GRPO_CHECK(totals.size() == completions.size() && correct.size() == completions.size(),
             "correct_variance_share: {} completions, {} totals and {} correct values", completions.size(),
             totals.size(), correct.size());
  std::map<std::size_t, std::vector<std::pair<double, bool>>> groups;  // (total, correct) by group
  for (std::size_t i = 0; i < completions.size(); ++i) {
    if (totals[i] && correct[i]) groups[completions[i].group].emplace_back(*totals[i], *correct[i]);
  }
  CorrectShare out;
  double shares = 0.0;
  for (const auto& [group, rows] : groups) {
    double n[2] = {0.0, 0.0}, sum[2] = {0.0, 0.0};
    for (const auto& [x, right] : rows) {
      n[right] += 1.0;
      sum[right] += x;
    }
    const double mean = (sum[0] + sum[1]) / (n[0] + n[1]);
    double spread = 0.0;
    for (const auto& row : rows) spread += (row.first - mean) * (row.first - mean);
    if (!(spread > 0.0)) continue;  // equal totals: no advantage to explain
    double between = 0.0;
    for (int c = 0; c < 2; ++c) {
      if (n[c] > 0) between += n[c] * (sum[c] / n[c] - mean) * (sum[c] / n[c] - mean);
    }
    shares += std::min(1.0, between / spread);
    ++out.groups;
  }
  if (out.groups > 0) out.share = shares / static_cast<double>(out.groups);
  return out;
}

RewardModelRefresh::RewardModelRefresh(std::shared_ptr<const rewards::RewardModelReward> reward,
                                       RewardModelRefreshOptions options)
    : reward_(std::move(reward)), options_(std::move(options)) {
  GRPO_CHECK_CONFIG(reward_ != nullptr, "reward model refresh: no reward model");
  options_.validate();
  GRPO_CHECK_CONFIG(options_.every_steps >= 1, "reward model refresh: every_steps must be >= 1, got {}",
                    options_.every_steps);
  GRPO_CHECK_CONFIG(reward_->options().step_separator.empty(),
                    "reward model refresh: '{}' is a process reward model (step_separator set); pairs of whole "
                    "completions train an outcome model's last-token score, not its step scores",
                    reward_->name());
}

void RewardModelRefresh::on_step_metrics(const GrpoTrainer& trainer, const StepBatch& batch,
                                         std::vector<MetricValue>& values) {
  ProcessGroup& group = trainer.process_group();
  if (group.world_size() == 1) {
    const std::vector<MetricValue> mine = observe(batch);
    values.insert(values.end(), mine.begin(), mine.end());
    return;
  }
  // Every rank learns the whole step's pairs, so every rank's copy scores alike.
  const StepBatch whole = gather_graded(group, batch);
  const bool refreshes = whole.step % options_.every_steps == 0;
  const std::vector<MetricValue> mine = observe(whole);
  values.insert(values.end(), mine.begin(), mine.end());
  if (refreshes && !buffer_.empty()) {
    // The ranks trained alike from equal weights on equal pairs; rank 0's weights are sent all the same, so that no
    // rank's kernels (another CPU, another thread count) can part the copies.
    reward_->update_model([&](models::ValueModel& model, const text::Tokenizer&) {
      torch::NoGradGuard no_grad;
      broadcast_parameters(group, *model, 0);
    });
  }
}

std::vector<MetricValue> RewardModelRefresh::observe(const StepBatch& batch) {
  std::vector<MetricValue> values;
  const std::string name = reward_->name();
  const std::string& suffix = reward_->options().completion_suffix;
  std::vector<PreferencePair> fresh = graded_preference_pairs(
      batch.completions, batch.correct, options_.pairs_per_prompt,
      options_.training.seed + static_cast<std::uint64_t>(batch.step));
  for (PreferencePair& pair : fresh) {  // as the reward reads them
    pair.chosen += suffix;
    pair.rejected += suffix;
  }
  const std::int64_t max_length = reward_->options().max_length;
  if (!fresh.empty()) {
    PreferenceMetrics before;
    reward_->update_model([&](models::ValueModel& model, const text::Tokenizer& tokenizer) {
      before = evaluate_reward_model(model, tokenizer, fresh, options_.training.batch_size, max_length);
    });
    values.push_back({name + "/policy_pair_accuracy", before.accuracy, MetricReduction::weighted_mean,
                      static_cast<double>(before.pairs)});
  }
  // max, not sum: with several ranks every rank counts the whole step's pairs (gather_graded).
  values.push_back({name + "/policy_pairs", static_cast<double>(fresh.size()), MetricReduction::max, 1.0});
  if (!batch.totals.empty()) {
    const CorrectShare share = correct_variance_share(batch.completions, batch.totals, batch.correct);
    if (share.groups > 0) {
      values.push_back({name + "/correct_share", share.share, MetricReduction::weighted_mean,
                        static_cast<double>(share.groups)});
    }
  }
  for (PreferencePair& pair : fresh) buffer_.push_back(std::move(pair));
  while (static_cast<std::int64_t>(buffer_.size()) > options_.buffer_pairs) buffer_.pop_front();
  values.push_back({name + "/buffer_pairs", static_cast<double>(buffer_.size()), MetricReduction::max, 1.0});

  if (batch.step % options_.every_steps != 0 || buffer_.empty()) return values;
  const auto started = std::chrono::steady_clock::now();
  RewardModelTrainingOptions training = options_.training;
  training.seed += static_cast<std::uint64_t>(batch.step);
  training.max_length = max_length;
  const std::vector<PreferencePair> pairs(buffer_.begin(), buffer_.end());
  std::vector<PreferenceMetrics> epochs;
  reward_->update_model([&](models::ValueModel& model, const text::Tokenizer& tokenizer) {
    epochs = train_reward_model(model, tokenizer, pairs, training);
  });
  values.push_back({name + "/refresh_loss", epochs.back().loss, MetricReduction::max, 1.0});
  values.push_back({name + "/refresh_accuracy", epochs.back().accuracy, MetricReduction::max, 1.0});
  values.push_back({"timing_s/" + name + "_refresh", seconds_since(started), MetricReduction::max, 1.0});
  return values;
}

std::string RewardModelRefresh::file_name() const { return reward_->name() + "_refresh.safetensors"; }

void RewardModelRefresh::on_save(const GrpoTrainer& /*trainer*/, std::int64_t /*step*/,
                                 const std::optional<std::filesystem::path>& path) {
  if (path) save(*path);
}

void RewardModelRefresh::save(const std::filesystem::path& checkpoint) const {
  std::map<std::string, torch::Tensor> tensors;
  reward_->update_model([&](models::ValueModel& model, const text::Tokenizer&) {
    for (const auto& item : model->named_parameters()) {
      if (item.value().requires_grad()) tensors[kParameterPrefix + item.key()] = item.value().detach().to(torch::kCPU).clone();
    }
  });
  auto [text, offsets] = pack(buffer_);
  tensors[kTextName] = text;
  tensors[kOffsetsName] = offsets;
  io::save_safetensors(checkpoint / file_name(), tensors);
}

void RewardModelRefresh::restore(const std::filesystem::path& checkpoint) {
  const std::filesystem::path file = checkpoint / file_name();
  GRPO_CHECK(std::filesystem::exists(file), "{}: missing: the checkpoint was written by a run without the reward "
             "model refresh (--rm-refresh-every)", file.string());
  const auto tensors = io::SafetensorsFile(file).tensors();
  const auto find = [&](const std::string& key) {
    const auto it = tensors.find(key);
    GRPO_CHECK(it != tensors.end(), "{}: no tensor '{}'", file.string(), key);
    return it->second;
  };
  reward_->update_model([&](models::ValueModel& model, const text::Tokenizer&) {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      const torch::Tensor saved = find(kParameterPrefix + item.key());
      GRPO_CHECK(saved.sizes() == item.value().sizes() && saved.scalar_type() == item.value().scalar_type(),
                 "{}: '{}' is {} {}, the reward model's parameter is {} {}", file.string(), item.key(),
                 c10::toString(saved.scalar_type()), shape_str(saved), c10::toString(item.value().scalar_type()),
                 shape_str(item.value()));
      item.value().copy_(saved);
    }
  });
  buffer_ = unpack(find(kTextName), find(kOffsetsName), file);
}

}  // namespace grpo::train
