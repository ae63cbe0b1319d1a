// SPDX-License-Identifier: Apache-2.0
// Per-domain reward routing (see tag_router.hpp).
#include <grpo/core/error.hpp>
#include <grpo/rewards/tag_router.hpp>

#include <utility>

namespace grpo::rewards {
TagRouter::TagRouter(std::string name, std::map<std::string, RewardPtr, std::less<>> routes, TagRouterOptions options)
    : name_(std::move(name)), routes_(std::move(routes)), options_(std::move(options)) {
  GRPO_CHECK_CONFIG(!name_.empty(), "TagRouter: the name must not be empty");
  GRPO_CHECK_CONFIG(!routes_.empty(), "TagRouter '{}': needs at least one route", name_);
  for (const auto& [tag, reward] : routes_) {
    GRPO_CHECK_CONFIG(reward != nullptr, "TagRouter '{}': the route for tag '{}' is null", name_, tag);
  }
}

RewardScope TagRouter::scope() const {
  if (options_.fallback && options_.fallback->scope() == RewardScope::batch) return RewardScope::batch;
  for (const auto& [tag, reward] : routes_) {
    if (reward->scope() == RewardScope::batch) return RewardScope::batch;
  }
  return RewardScope::completion;
}

const RewardFunction* TagRouter::route_of(const Completion& completion) const {
  if (completion.row) {
    if (const auto tag = completion.row->text(options_.tag_field)) {
      if (auto it = routes_.find(*tag); it != routes_.end()) return it->second.get();
    }
  }
  return options_.fallback.get();
}

std::vector<std::optional<float>> TagRouter::score(std::span<const Completion> batch,
                                                   const ScoringContext& context) const {
  std::vector<const RewardFunction*> route(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) route[i] = route_of(batch[i]);

  std::vector<std::optional<float>> values(batch.size());
  std::vector<char> done(batch.size(), 0);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const RewardFunction* reward = route[i];
    if (done[i] || reward == nullptr) continue;
    if (reward->scope() == RewardScope::batch) {
      std::vector<std::size_t> members;
      std::vector<Completion> subset;
      for (std::size_t j = i; j < batch.size(); ++j) {
        if (route[j] == reward) {
          members.push_back(j);
          subset.push_back(batch[j]);
        }
      }
      const auto scored = reward->score(subset, context);
      detail::check_result_size(*reward, scored.size(), subset.size());
      for (std::size_t k = 0; k < members.size(); ++k) {
        values[members[k]] = scored[k];
        done[members[k]] = 1;
      }
    } else {
      std::size_t end = i + 1;
      while (end < batch.size() && route[end] == reward) ++end;
      const auto scored = reward->score(batch.subspan(i, end - i), context);
      detail::check_result_size(*reward, scored.size(), end - i);
      for (std::size_t k = i; k < end; ++k) {
        values[k] = scored[k - i];
        done[k] = 1;
      }
    }
  }
  return values;
}

}  // namespace grpo::rewards
