// SPDX-License-Identifier: Apache-2.0
// Step metrics with their reductions: a metric carries how it combines over micro-batches (combine_metrics) and over
// data-parallel ranks (reduce_metrics), so that the logged number equals that of one process on the whole batch.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

namespace grpo {
struct LossMetrics;
}

namespace grpo::train {

class ProcessGroup;

/// How one metric combines over ranks so that the result is that of one process on the whole batch.
enum class MetricReduction {
  sum,            ///< Σ_r v_r: counts, and losses computed with the global normaliser (L = Σ_r L_r)
  weighted_mean,  ///< Σ_r w_r·v_r / Σ_r w_r: means over tokens (w = tokens) or completions (w = completions)
  min,            ///< min over ranks with w_r > 0
  max,            ///< max over ranks with w_r > 0
};

struct MetricValue {
  std::string name;
  double value = 0.0;
  MetricReduction reduction = MetricReduction::weighted_mean;
  /// weighted_mean: the weight; min/max: a rank with weight 0 (nothing measured, e.g. no valid token) is left out.
  double weight = 1.0;
};

/// Combines each metric over the ranks (every rank gets the result; log it on rank 0). All ranks must pass the
/// same names in the same order (checked: throws grpo::Error otherwise). A weighted mean with total weight 0, or
/// a min/max no rank measured, is this rank's own value. Three small collectives whatever the number of metrics.
std::vector<std::pair<std::string, double>> reduce_metrics(ProcessGroup& group,
                                                           const std::vector<MetricValue>& metrics);

/// The same reductions within one process: combines the metrics of several parts (micro-batches) into one list, as
/// if measured on their union. Each result keeps its reduction, with weight Σ w (so it can go on to reduce_metrics).
/// Every part must list the same names with the same reductions in the same order (grpo::Error otherwise); no
/// parts gives an empty list.
std::vector<MetricValue> combine_metrics(std::span<const std::vector<MetricValue>> parts);

/// GrpoLoss's metrics with their reductions: loss, policy_loss, kl_loss, entropy_loss and num_tokens are sums (the
/// losses carry the global normaliser); */min and */max are min and max over ranks with tokens; every other metric
/// is a token mean weighted by num_tokens. Names as in LossMetrics::items().
std::vector<MetricValue> loss_metric_values(const LossMetrics& metrics);

}  // namespace grpo::train
