// SPDX-License-Identifier: Apache-2.0
// Every group-level filter of a GRPO step in one place. A step first decides which sampled groups it keeps (DAPO's
// dynamic sampling: a group whose chosen metric has no spread carries no signal; ROLL's per-domain query filters), then
// which kept groups reach the loss (ROLL's difficulty mask: groups the policy finds too easy or too hard stay in the
// metrics but leave the loss and its normaliser). GrpoTrainer::collect_groups asks both questions while it collects,
// so a StepBatch says by itself what trains; the filters are unit-testable without a trainer.
//
//   grpo::train::GroupSelection selection({.metric = "accuracy", .difficulty_mask = std::pair(0.1, 0.9)},
//                                         source.domain_names());
//   auto spread = selection.informative(scores, problems, group_size);   // [P] 1 = counts towards the step's P groups
//   auto in_loss = selection.in_loss(totals, group_size);                // [P] bool tensor, undefined without a mask
#pragma once

#include <grpo/train/dynamic_sampling.hpp>
#include <grpo/train/prompt_source.hpp>
#include <grpo/train/step_scorer.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace grpo::train {

struct GroupSelectionOptions {
  /// What must spread within a kept group: "total" (the final reward total, penalties included), "accuracy" (the
  /// scorer's correctness of each judged completion: DAPO's and verl's `metric: acc`; alias "acc"), or a reward's
  /// label (its value; a completion without it has none).
  std::string metric = "total";
  /// Which groups count as informative: DAPO's std > 1e-8 by default; ROLL's std_filter and mean_filter thresholds.
  GroupFilter filter;
  /// A domain's own filter, by domain name (ROLL's rewards.<domain>.query_filter_config); others use `filter`.
  std::map<std::string, GroupFilter> domain_filters;
  /// ROLL difficulty_mask (roll/utils/functionals.py): a group whose mean reward total is not strictly inside
  /// (low, high) leaves the loss. Unset: every kept group trains.
  std::optional<std::pair<double, double>> difficulty_mask;
};

class GroupSelection {
 public:
  /// `domain_names`: the prompt source's (PromptSource::domain_names()). ConfigError for a domain filter naming no
  /// domain, an invalid filter or an empty band (low >= high), each naming the setting.
  GroupSelection(GroupSelectionOptions options, std::vector<std::string> domain_names);

  /// [P] for `scores` of P · group_size completions (group p = rows p·G … p·G + G − 1, of `problems[p]`): 1 where
  /// the group's metric passes the filter of its problem's domain (informative_groups). ConfigError when the metric
  /// is neither total, accuracy nor a label of the scores' rewards.
  std::vector<std::uint8_t> informative(const StepScores& scores, std::span<const Problem> problems,
                                        std::int64_t group_size) const;

  /// [groups] bool: whether each group of `totals` ([groups · group_size], nullopt = no value; a group's mean is over
  /// its values) reaches the loss under the difficulty mask; undefined without one (every group does).
  torch::Tensor in_loss(std::span<const std::optional<float>> totals, std::int64_t group_size) const;

  const GroupSelectionOptions& options() const { return options_; }

 private:
  GroupSelectionOptions options_;
  std::vector<GroupFilter> filters_;  // of each domain, in domain_names order
};

}  // namespace grpo::train
