// SPDX-License-Identifier: Apache-2.0
// RewardModelReward: a models::ValueModel run in-process as a reward (see reward_model_reward.hpp). Its header stays
// torch-free.
#include <grpo/rewards/reward_model_reward.hpp>

#include <grpo/core/error.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/text/tokenizer.hpp>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>

namespace grpo::rewards {

void RewardModelOptions::validate() const {
  GRPO_CHECK_CONFIG(!name.empty(), "reward model: name must not be empty");
  GRPO_CHECK_CONFIG(batch_size >= 1, "reward model: batch_size must be >= 1, got {}", batch_size);
  GRPO_CHECK_CONFIG(max_length >= 1, "reward model: max_length must be >= 1, got {}", max_length);
  GRPO_CHECK_CONFIG(std::isfinite(shift), "reward model: shift must be finite, got {}", shift);
  GRPO_CHECK_CONFIG(std::isfinite(scale) && scale > 0.0, "reward model: scale must be finite and > 0, got {}", scale);
}

struct RewardModelReward::State {
  models::ValueModel model;
  text::Tokenizer tokenizer;
  RewardModelOptions options;
  std::mutex mutex;  // one model: one forward at a time

  State(const models::ValueModel& m, const text::Tokenizer& t, RewardModelOptions o)
      : model(m), tokenizer(t), options(std::move(o)) {}
};

RewardModelReward::RewardModelReward(const models::ValueModel& model, const text::Tokenizer& tokenizer,
                                     RewardModelOptions options) {
  options.validate();
  state_ = std::make_unique<State>(model, tokenizer, std::move(options));
  state_->model->eval();
}

RewardModelReward::~RewardModelReward() = default;

std::string RewardModelReward::name() const { return state_->options.name; }

namespace {

std::vector<std::int64_t> ids_of(const text::Tokenizer& tokenizer, const std::string& text) {
  const auto ids = tokenizer.encode(text, {.add_special_tokens = false});  // a templated prompt carries its own
  return std::vector<std::int64_t>(ids.begin(), ids.end());
}

}  // namespace

RewardModelInput encode_for_reward_model(const text::Tokenizer& tokenizer, const Completion& completion,
                                         const RewardModelOptions& o) {
  RewardModelInput out;
  if (o.step_separator.empty()) {
    out.ids = ids_of(tokenizer, completion.prompt + completion.text + o.completion_suffix);
    if (!out.ids.empty()) out.score_positions.push_back(static_cast<std::int64_t>(out.ids.size()) - 1);
  } else {
    // Each step with the separator after it, encoded on its own so that its last token is the separator's.
    out.ids = ids_of(tokenizer, completion.prompt);
    std::size_t begin = 0;
    const std::string& text = completion.text;
    while (begin < text.size()) {
      const std::size_t at = text.find(o.step_separator, begin);
      const std::size_t end = at == std::string::npos ? text.size() : at;
      const std::string step = text.substr(begin, end - begin);
      begin = at == std::string::npos ? text.size() : at + o.step_separator.size();
      if (step.find_first_not_of(" \t\r\n") == std::string::npos) continue;  // no step between two separators
      const auto piece = ids_of(tokenizer, step + o.step_separator);
      out.ids.insert(out.ids.end(), piece.begin(), piece.end());
      if (!piece.empty()) out.score_positions.push_back(static_cast<std::int64_t>(out.ids.size()) - 1);
    }
  }
  // Keep the last max_length tokens: the scores are read at the end.
  const auto excess = static_cast<std::int64_t>(out.ids.size()) - o.max_length;
  if (excess > 0) {
    out.ids.erase(out.ids.begin(), out.ids.begin() + excess);
    std::vector<std::int64_t> kept;
    for (const std::int64_t p : out.score_positions) {
      if (p >= excess) kept.push_back(p - excess);
    }
    out.score_positions = std::move(kept);
  }
  return out;
}

RewardModelInput RewardModelReward::encode(const Completion& completion) const {
  return encode_for_reward_model(state_->tokenizer, completion, state_->options);
}

const RewardModelOptions& RewardModelReward::options() const { return state_->options; }

void RewardModelReward::update_model(
    const std::function<void(models::ValueModel& model, const text::Tokenizer& tokenizer)>& update) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  struct EvalAfter {
    models::ValueModel& model;
    ~EvalAfter() { model->eval(); }
  } eval_after{state_->model};
  update(state_->model, state_->tokenizer);
}

std::vector<std::optional<float>> RewardModelReward::score(std::span<const Completion> batch,
                                                           const ScoringContext& context) const {
  const RewardModelOptions& o = state_->options;
  std::vector<RewardModelInput> encoded;
  encoded.reserve(batch.size());
  for (const Completion& c : batch) encoded.push_back(encode(c));
  std::vector<std::optional<float>> out(batch.size());
  const auto transform = [&](double x) {
    x = (x - o.shift) / o.scale;
    return o.sigmoid ? 1.0 / (1.0 + std::exp(-x)) : x;
  };
  std::lock_guard<std::mutex> lock(state_->mutex);
  torch::NoGradGuard no_grad;
  const torch::Device device = state_->model->head_weight().device();
  for (std::size_t first = 0; first < batch.size(); first += static_cast<std::size_t>(o.batch_size)) {
    if (context.expired()) break;  // the rest get no value
    const std::size_t last = std::min(batch.size(), first + static_cast<std::size_t>(o.batch_size));
    std::int64_t width = 1;
    for (std::size_t b = first; b < last; ++b) width = std::max<std::int64_t>(width, encoded[b].ids.size());
    const auto rows = static_cast<std::int64_t>(last - first);
    torch::Tensor ids = torch::zeros({rows, width}, torch::kInt64), mask = torch::zeros({rows, width}, torch::kInt64);
    for (std::int64_t r = 0; r < rows; ++r) {  // right-padded: no real token sees a pad
      const auto& e = encoded[first + static_cast<std::size_t>(r)];
      const auto n = static_cast<std::int64_t>(e.ids.size());
      if (n == 0) continue;
      ids[r].narrow(0, 0, n).copy_(torch::tensor(e.ids, torch::kInt64));
      mask[r].narrow(0, 0, n).fill_(1);
    }
    mask.select(1, 0).fill_(1);  // an empty text reads its pad token, and gets no score below
    const torch::Tensor values =
        state_->model->forward(ids.to(device), mask.to(device)).to(torch::kCPU, torch::kFloat64).contiguous();
    const auto v = values.accessor<double, 2>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& positions = encoded[first + static_cast<std::size_t>(r)].score_positions;
      if (positions.empty()) continue;
      std::vector<double> steps;
      for (const std::int64_t p : positions) steps.push_back(transform(v[r][p]));
      double value = steps.back();
      if (o.step_aggregation == StepAggregation::min) value = *std::min_element(steps.begin(), steps.end());
      if (o.step_aggregation == StepAggregation::mean) {
        value = 0.0;
        for (const double s : steps) value += s / static_cast<double>(steps.size());
      }
      out[first + static_cast<std::size_t>(r)] = static_cast<float>(value);
    }
  }
  return out;
}

std::shared_ptr<RewardModelReward> reward_model_from_pretrained(const std::filesystem::path& directory,
                                                                RewardModelOptions options,
                                                                const RewardModelPlacement& placement) {
  options.validate();  // before the load's work
  std::optional<torch::ScalarType> dtype;
  if (placement.dtype == "float32") dtype = torch::kFloat32;
  if (placement.dtype == "bfloat16") dtype = torch::kBFloat16;
  if (placement.dtype == "float16") dtype = torch::kFloat16;
  GRPO_CHECK_CONFIG(dtype.has_value(), "reward model: dtype must be one of float32, bfloat16, float16, got '{}'",
                    placement.dtype);
  std::optional<torch::Device> device;
  try {
    device.emplace(placement.device);
  } catch (const c10::Error&) {
    throw ConfigError(fmt::format("reward model: device '{}' is not a device (cpu, cuda, cuda:N)", placement.device));
  }
  GRPO_CHECK_CONFIG(!device->is_cuda() || (torch::cuda::is_available() &&
                                           device->index() < static_cast<int>(torch::cuda::device_count())),
                    "reward model: device '{}': this build or machine has no such CUDA device", placement.device);
  try {
    models::ValueModel model = models::value_model_from_pretrained(directory, dtype, *device);
    const text::Tokenizer tokenizer = text::Tokenizer::from_pretrained(directory);
    return std::make_shared<RewardModelReward>(model, tokenizer, std::move(options));
  } catch (const Error& e) {  // a missing file, a checkpoint without a head, a tokenizer outside the supported set
    throw ConfigError(fmt::format("reward model: model_dir {}: {}", directory.string(), e.what()));
  }
}

}  // namespace grpo::rewards
