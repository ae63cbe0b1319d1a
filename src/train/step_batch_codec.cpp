// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/step_batch_codec.hpp>

#include <grpo/core/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <type_traits>

namespace grpo::train {
namespace {

constexpr std::string_view kBatchMagic = "grpo.StepBatch.1";
constexpr std::string_view kStateMagic = "grpo.TrainerState.1";

class Writer {
 public:
  template <typename T>
    requires std::is_arithmetic_v<T>
  void number(T value) {
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void size(std::size_t n) { number(static_cast<std::uint64_t>(n)); }
  void text(std::string_view s) {
    size(s.size());
    out_.append(s);
  }
  void tensor(const torch::Tensor& t) {
    number<std::uint8_t>(t.defined());
    if (!t.defined()) return;
    const torch::Tensor cpu = t.detach().to(torch::kCPU).contiguous();
    number(static_cast<std::int32_t>(cpu.scalar_type()));
    size(static_cast<std::size_t>(cpu.dim()));
    for (const std::int64_t s : cpu.sizes()) number(s);
    out_.append(static_cast<const char*>(cpu.data_ptr()), cpu.nbytes());
  }
  template <typename T>
  void optional(const std::optional<T>& value) {
    number<std::uint8_t>(value.has_value());
    if (value) number(*value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view bytes, std::string_view what) : in_(bytes), what_(what) {}

  template <typename T>
    requires std::is_arithmetic_v<T>
  T number() {
    T value;
    std::memcpy(&value, take(sizeof(T)).data(), sizeof(T));
    return value;
  }
  /// A count of items that take at least `min_bytes` each: more than the bytes left can hold is refused before
  /// anything is allocated for them.
  std::size_t size(std::size_t min_bytes = 1) {
    const auto n = number<std::uint64_t>();
    if (n > in_.size() / min_bytes) fail(fmt::format("a count of {} with {} bytes left", n, in_.size()));
    return static_cast<std::size_t>(n);
  }
  /// A one-byte code in [0, max].
  std::uint8_t code(std::uint8_t max, std::string_view what) {
    const auto value = number<std::uint8_t>();
    if (value > max) fail(fmt::format("{} code {}", what, value));
    return value;
  }
  std::string text() { return std::string(take(size())); }
  torch::Tensor tensor() {
    if (number<std::uint8_t>() == 0) return {};
    const auto type = number<std::int32_t>();
    const auto dtype = static_cast<c10::ScalarType>(type);
    constexpr c10::ScalarType kTypes[] = {torch::kUInt8, torch::kInt8,    torch::kInt16,   torch::kInt32,
                                          torch::kInt64, torch::kFloat16, torch::kFloat32, torch::kFloat64,
                                          torch::kBool,  torch::kBFloat16};
    if (std::find(std::begin(kTypes), std::end(kTypes), dtype) == std::end(kTypes)) {
      fail(fmt::format("tensor dtype code {}", type));
    }
    std::vector<std::int64_t> sizes(size(sizeof(std::int64_t)));
    std::size_t bytes = c10::elementSize(dtype);
    for (auto& s : sizes) {
      s = number<std::int64_t>();
      if (s < 0) fail(fmt::format("tensor size {}", s));
      // The payload must be in what is left: checked before allocating, without overflow.
      if (s > 0 && bytes > in_.size() / static_cast<std::size_t>(s)) {
        fail(fmt::format("a tensor of shape [{}] with {} bytes left", fmt::join(sizes, ", "), in_.size()));
      }
      bytes *= static_cast<std::size_t>(s);
    }
    torch::Tensor out = torch::empty(sizes, torch::TensorOptions().dtype(dtype));
    const std::string_view data = take(out.nbytes());
    if (!data.empty()) std::memcpy(out.data_ptr(), data.data(), data.size());
    return out;
  }
  template <typename T>
  std::optional<T> optional() {
    if (number<std::uint8_t>() == 0) return std::nullopt;
    return number<T>();
  }
  void magic(std::string_view expected) {
    if (in_.size() < expected.size() || in_.substr(0, expected.size()) != expected) {
      fail(fmt::format("it does not start with \"{}\"", expected));
    }
    in_.remove_prefix(expected.size());
  }
  void end() const {
    if (!in_.empty()) fail(fmt::format("{} bytes after the end", in_.size()));
  }

 private:
  std::string_view take(std::size_t n) {
    if (n > in_.size()) fail(fmt::format("cut short ({} bytes wanted, {} left)", n, in_.size()));
    const std::string_view out = in_.substr(0, n);
    in_.remove_prefix(n);
    return out;
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw ParseError(fmt::format("{}: not one encoded by this grpo: {}", what_, why));
  }

  std::string_view in_;
  std::string_view what_;
};

void write_row(Writer& w, const rewards::Row& row) {
  w.size(row.fields().size());
  for (const auto& [key, value] : row.fields()) {
    w.text(key);
    w.number(static_cast<std::uint8_t>(value.index()));
    if (const auto* s = std::get_if<std::string>(&value)) {
      w.text(*s);
    } else if (const auto* d = std::get_if<double>(&value)) {
      w.number(*d);
    } else {
      const auto& list = std::get<std::vector<std::string>>(value);
      w.size(list.size());
      for (const auto& item : list) w.text(item);
    }
  }
}

std::shared_ptr<const rewards::Row> read_row(Reader& r) {
  auto row = std::make_shared<rewards::Row>();
  for (std::size_t n = r.size(), i = 0; i < n; ++i) {
    std::string key = r.text();
    switch (r.code(2, "row field type")) {
      case 0:
        row->set(std::move(key), r.text());
        break;
      case 1:
        row->set(std::move(key), r.number<double>());
        break;
      default: {
        std::vector<std::string> list(r.size(8));
        for (auto& item : list) item = r.text();
        row->set(std::move(key), std::move(list));
      }
    }
  }
  return row;
}

void write_ids(Writer& w, const std::vector<std::int64_t>& ids) {
  w.size(ids.size());
  for (const auto id : ids) w.number(id);
}

std::vector<std::int64_t> read_ids(Reader& r) {
  std::vector<std::int64_t> ids(r.size(sizeof(std::int64_t)));
  for (auto& id : ids) id = r.number<std::int64_t>();
  return ids;
}

void write_metrics(Writer& w, const std::vector<MetricValue>& metrics) {
  w.size(metrics.size());
  for (const auto& m : metrics) {
    w.text(m.name);
    w.number(m.value);
    w.number(static_cast<std::uint8_t>(m.reduction));
    w.number(m.weight);
  }
}

std::vector<MetricValue> read_metrics(Reader& r) {
  std::vector<MetricValue> out(r.size(8 + 8 + 1 + 8));
  for (auto& m : out) {
    m.name = r.text();
    m.value = r.number<double>();
    m.reduction = static_cast<MetricReduction>(r.code(static_cast<std::uint8_t>(MetricReduction::max), "metric reduction"));
    m.weight = r.number<double>();
  }
  return out;
}

void write_pairs(Writer& w, const std::vector<std::pair<std::string, double>>& pairs) {
  w.size(pairs.size());
  for (const auto& [name, value] : pairs) {
    w.text(name);
    w.number(value);
  }
}

std::vector<std::pair<std::string, double>> read_pairs(Reader& r) {
  std::vector<std::pair<std::string, double>> out(r.size(8 + 8));
  for (auto& [name, value] : out) {
    name = r.text();
    value = r.number<double>();
  }
  return out;
}

void write_rollout(Writer& w, const Rollout& rollout) {
  for (const torch::Tensor* t : {&rollout.prompt_ids, &rollout.prompt_mask, &rollout.completion_ids,
                                 &rollout.completion_mask, &rollout.truncated, &rollout.sampler_log_probs,
                                 &rollout.completion_attention_mask, &rollout.completion_turns,
                                 &rollout.completion_rewards}) {
    w.tensor(*t);
  }
}

Rollout read_rollout(Reader& r) {
  Rollout out;
  for (torch::Tensor* t : {&out.prompt_ids, &out.prompt_mask, &out.completion_ids, &out.completion_mask,
                           &out.truncated, &out.sampler_log_probs, &out.completion_attention_mask,
                           &out.completion_turns, &out.completion_rewards}) {
    *t = r.tensor();
  }
  return out;
}

// How a completion's row is written: none, its problem's (shared), or its own.
enum class RowRef : std::uint8_t { none, problem, own };

}  // namespace

std::string encode_step_batch(const StepBatch& b) {
  Writer w;
  for (const char c : kBatchMagic) w.number(c);
  w.number(b.step);
  w.number(b.group_size);
  w.number(b.max_new_tokens);
  w.number<std::uint8_t>(b.mask_truncated);
  w.optional(b.weights_version);
  w.number<std::uint8_t>(b.train);
  write_rollout(w, b.rollout);
  w.size(b.problems.size());
  for (const Problem& p : b.problems) {
    write_ids(w, p.prompt_ids);
    w.text(p.prompt_text);
    w.number<std::uint8_t>(p.row != nullptr);
    if (p.row) write_row(w, *p.row);
    w.size(p.domain);
    w.text(p.id);
  }
  w.size(b.completions.size());
  for (const rewards::Completion& c : b.completions) {
    w.text(c.prompt);
    w.text(c.text);
    write_ids(w, c.token_ids);
    w.number<std::uint8_t>(c.truncated);
    w.size(c.group);
    const bool shared = c.row != nullptr && c.group < b.problems.size() && b.problems[c.group].row == c.row;
    const RowRef ref = c.row == nullptr ? RowRef::none : shared ? RowRef::problem : RowRef::own;
    w.number(static_cast<std::uint8_t>(ref));
    if (ref == RowRef::own) write_row(w, *c.row);
    w.number<std::uint8_t>(c.domain.has_value());
    if (c.domain) w.size(*c.domain);
  }
  w.size(b.totals.size());
  for (const auto& total : b.totals) w.optional(total);
  w.size(b.reward_values.size());
  for (const auto& values : b.reward_values) {
    w.size(values.size());
    for (const auto& [name, value] : values) {
      w.text(name);
      w.optional(value);
    }
  }
  w.size(b.correct.size());
  for (const auto& correct : b.correct) w.number<std::uint8_t>(correct ? (*correct ? 2 : 1) : 0);
  w.tensor(b.in_loss_groups);
  write_metrics(w, b.score_metrics);
  write_metrics(w, b.generation_metrics);
  write_pairs(w, b.sampling_metrics);
  write_pairs(w, b.source_metrics);
  for (const torch::Tensor* t : {&b.sampled_lengths, &b.sampled_truncated, &b.old_log_probs, &b.ref_log_probs,
                                 &b.sum_pi_squared, &b.reward_kl, &b.greedy_baselines, &b.old_values}) {
    w.tensor(*t);
  }
  for (const double s : {b.generation_seconds, b.scoring_seconds, b.old_log_prob_seconds, b.ref_log_prob_seconds,
                         b.values_seconds}) {
    w.number(s);
  }
  return w.take();
}

StepBatch decode_step_batch(std::string_view bytes) {
  Reader r(bytes, "a step batch");
  r.magic(kBatchMagic);
  StepBatch b;
  b.step = r.number<std::int64_t>();
  b.group_size = r.number<std::int64_t>();
  b.max_new_tokens = r.number<std::int64_t>();
  b.mask_truncated = r.number<std::uint8_t>() != 0;
  b.weights_version = r.optional<std::int64_t>();
  b.train = r.number<std::uint8_t>() != 0;
  b.rollout = read_rollout(r);
  b.problems.resize(r.size(8 + 8 + 1 + 8 + 8));
  for (Problem& p : b.problems) {
    p.prompt_ids = read_ids(r);
    p.prompt_text = r.text();
    if (r.number<std::uint8_t>() != 0) p.row = read_row(r);
    p.domain = static_cast<std::size_t>(r.number<std::uint64_t>());
    p.id = r.text();
  }
  b.completions.resize(r.size(8 * 3 + 1 + 8 + 1 + 1));
  for (rewards::Completion& c : b.completions) {
    c.prompt = r.text();
    c.text = r.text();
    c.token_ids = read_ids(r);
    c.truncated = r.number<std::uint8_t>() != 0;
    c.group = static_cast<std::size_t>(r.number<std::uint64_t>());
    const auto ref = static_cast<RowRef>(r.code(static_cast<std::uint8_t>(RowRef::own), "completion row"));
    if (ref == RowRef::problem) {
      GRPO_CHECK(c.group < b.problems.size(), "a step batch: a completion of group {} with {} problems", c.group,
                 b.problems.size());
      c.row = b.problems[c.group].row;
    } else if (ref == RowRef::own) {
      c.row = read_row(r);
    }
    if (r.number<std::uint8_t>() != 0) c.domain = static_cast<std::size_t>(r.number<std::uint64_t>());
  }
  b.totals.resize(r.size());
  for (auto& total : b.totals) total = r.optional<float>();
  b.reward_values.resize(r.size(8));
  for (auto& values : b.reward_values) {
    values.resize(r.size(8 + 1));
    for (auto& [name, value] : values) {
      name = r.text();
      value = r.optional<double>();
    }
  }
  b.correct.resize(r.size());
  for (auto& correct : b.correct) {
    const auto code = r.code(2, "correct");
    if (code != 0) correct = code == 2;
  }
  b.in_loss_groups = r.tensor();
  b.score_metrics = read_metrics(r);
  b.generation_metrics = read_metrics(r);
  b.sampling_metrics = read_pairs(r);
  b.source_metrics = read_pairs(r);
  for (torch::Tensor* t : {&b.sampled_lengths, &b.sampled_truncated, &b.old_log_probs, &b.ref_log_probs,
                           &b.sum_pi_squared, &b.reward_kl, &b.greedy_baselines, &b.old_values}) {
    *t = r.tensor();
  }
  for (double* s : {&b.generation_seconds, &b.scoring_seconds, &b.old_log_prob_seconds, &b.ref_log_prob_seconds,
                    &b.values_seconds}) {
    *s = r.number<double>();
  }
  r.end();
  return b;
}

std::string encode_trainer_state(const TrainerState& state) {
  Writer w;
  for (const char c : kStateMagic) w.number(c);
  w.number(state.step);
  w.number(state.seed);
  w.size(state.values.size());
  for (const auto& [key, value] : state.values) {
    w.text(key);
    w.number(value);
  }
  w.size(state.texts.size());
  for (const auto& [key, value] : state.texts) {
    w.text(key);
    w.text(value);
  }
  return w.take();
}

TrainerState decode_trainer_state(std::string_view bytes) {
  Reader r(bytes, "a trainer state");
  r.magic(kStateMagic);
  TrainerState state;
  state.step = r.number<std::int64_t>();
  state.seed = r.number<std::uint64_t>();
  for (std::size_t n = r.size(), i = 0; i < n; ++i) {
    std::string key = r.text();
    state.values[std::move(key)] = r.number<double>();
  }
  for (std::size_t n = r.size(), i = 0; i < n; ++i) {
    std::string key = r.text();
    state.texts[std::move(key)] = r.text();
  }
  r.end();
  return state;
}

}  // namespace grpo::train
