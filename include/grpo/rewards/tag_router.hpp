// SPDX-License-Identifier: Apache-2.0
// Per-domain routing (ROLL style, roll/pipeline/rlvr): each completion is scored by the reward registered for its
// dataset row's tag ("math" → accuracy, "code" → tests, ...), so one reward column serves a mixed-domain batch.
#pragma once

#include <grpo/rewards/reward_function.hpp>

#include <functional>
#include <map>
#include <string>

namespace grpo::rewards {

struct TagRouterOptions {
  std::string tag_field = "tag";  ///< the row field naming the domain (ROLL's `tag`)
  RewardPtr fallback;             ///< scores tags without a route and rows without the field; null = no value
};

/// Routes each completion to the reward of its row's tag. Completion-scoped routes are called once per run of
/// consecutive completions with the same route (no copies); a batch-scoped route is called once with all its
/// completions (copied together), so group statistics stay within the domain. The router is batch-scoped when
/// any route is.
class TagRouter final : public RewardFunction {
 public:
  /// Throws ConfigError for an empty name, no routes, or a null route.
  TagRouter(std::string name, std::map<std::string, RewardPtr, std::less<>> routes, TagRouterOptions options = {});

  std::string name() const override { return name_; }
  RewardScope scope() const override;
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;

  const std::map<std::string, RewardPtr, std::less<>>& routes() const { return routes_; }

 private:
  const RewardFunction* route_of(const Completion& completion) const;

  std::string name_;
  std::map<std::string, RewardPtr, std::less<>> routes_;
  TagRouterOptions options_;
};

}  // namespace grpo::rewards
