// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/metrics.hpp>

#include <grpo/loss/grpo_loss.hpp>
#include <grpo/train/distributed.hpp>

#include <grpo/core/mix64.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace grpo::train {

std::vector<std::pair<std::string, double>> reduce_metrics(ProcessGroup& group,
                                                           const std::vector<MetricValue>& metrics) {
  std::vector<std::pair<std::string, double>> out;
  out.reserve(metrics.size());
  if (group.world_size() == 1) {
    for (const auto& m : metrics) out.emplace_back(m.name, m.value);
    return out;
  }
  // 1. Same names and reductions everywhere (else the packed tensors below would not line up).
  std::string signature;
  for (const auto& m : metrics) signature += fmt::format("{}:{};", m.name, static_cast<int>(m.reduction));
  torch::Tensor check = torch::tensor({string_hash(signature), ~string_hash(signature)}, torch::kInt64);
  group.all_reduce_(check, ReduceOp::max);
  GRPO_CHECK(check[0].item<int64_t>() == ~check[1].item<int64_t>(),
             "reduce_metrics (rank {}): the ranks passed different metric names or reductions (this rank: {})",
             group.rank(), signature);
  // 2. Sums and weighted sums in one float64 all-reduce; 3. maxima (and minima as maxima of −v) in another.
  std::vector<double> sums, maxima;
  for (const auto& m : metrics) {
    const double inf = std::numeric_limits<double>::infinity();
    switch (m.reduction) {
      case MetricReduction::sum:
        sums.push_back(m.value);
        break;
      case MetricReduction::weighted_mean:
        sums.push_back(m.weight * m.value);
        sums.push_back(m.weight);
        break;
      case MetricReduction::min:
        maxima.push_back(m.weight > 0 ? -m.value : -inf);
        break;
      case MetricReduction::max:
        maxima.push_back(m.weight > 0 ? m.value : -inf);
        break;
    }
  }
  torch::Tensor sum_tensor = torch::tensor(sums.empty() ? std::vector<double>{0.0} : sums, torch::kFloat64);
  torch::Tensor max_tensor = torch::tensor(maxima.empty() ? std::vector<double>{0.0} : maxima, torch::kFloat64);
  group.all_reduce_(sum_tensor, ReduceOp::sum);
  group.all_reduce_(max_tensor, ReduceOp::max);
  const double* s = sum_tensor.data_ptr<double>();
  const double* x = max_tensor.data_ptr<double>();
  for (const auto& m : metrics) {
    double value = m.value;
    switch (m.reduction) {
      case MetricReduction::sum:
        value = *s++;
        break;
      case MetricReduction::weighted_mean: {
        const double weighted = *s++, weight = *s++;
        if (weight > 0) value = weighted / weight;
        break;
      }
      case MetricReduction::min: {
        const double v = *x++;
        if (std::isfinite(v)) value = -v;
        break;
      }
      case MetricReduction::max: {
        const double v = *x++;
        if (std::isfinite(v)) value = v;
        break;
      }
    }
    out.emplace_back(m.name, value);
  }
  return out;
}

std::vector<MetricValue> combine_metrics(std::span<const std::vector<MetricValue>> parts) {
  if (parts.empty()) return {};
  std::vector<MetricValue> out = parts.front();
  for (std::size_t p = 1; p < parts.size(); ++p) {
    GRPO_CHECK(parts[p].size() == out.size(), "combine_metrics: part {} has {} metrics, part 0 has {}", p,
               parts[p].size(), out.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      MetricValue& total = out[i];
      const MetricValue& m = parts[p][i];
      GRPO_CHECK(m.name == total.name && m.reduction == total.reduction,
                 "combine_metrics: part {} has metric '{}' where part 0 has '{}' (or another reduction)", p, m.name,
                 total.name);
      switch (m.reduction) {
        case MetricReduction::sum:
          total.value += m.value;
          break;
        case MetricReduction::weighted_mean:
          if (total.weight + m.weight > 0)
            total.value = (total.weight * total.value + m.weight * m.value) / (total.weight + m.weight);
          break;
        case MetricReduction::min:  // parts with weight 0 measured nothing
          if (m.weight > 0) total.value = total.weight > 0 ? std::min(total.value, m.value) : m.value;
          break;
        case MetricReduction::max:
          if (m.weight > 0) total.value = total.weight > 0 ? std::max(total.value, m.value) : m.value;
          break;
      }
      total.weight += m.weight;
    }
  }
  return out;
}

std::vector<MetricValue> loss_metric_values(const LossMetrics& metrics) {
  std::vector<MetricValue> out;
  for (auto& [name, value] : metrics.items()) {
    MetricValue m{name, value, MetricReduction::weighted_mean, metrics.num_tokens};
    if (name == "loss" || name == "policy_loss" || name == "kl_loss" || name == "entropy_loss" ||
        name == "num_tokens") {
      m.reduction = MetricReduction::sum;
    } else if (name.ends_with("/min")) {
      m.reduction = MetricReduction::min;
    } else if (name.ends_with("/max")) {
      m.reduction = MetricReduction::max;
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace grpo::train
