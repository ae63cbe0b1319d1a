// SPDX-License-Identifier: Apache-2.0
// An online prompt filter: a prompt whose pass rate (the fraction of its G completions judged correct) was 0 in each
// of its last `window` appearances is too hard for now, and one that was 1 each time is learnt; both give GRPO no
// signal (every completion gets the same reward, so every advantage is 0), and the filter retires them from sampling,
// for `retire_steps` steps or for the rest of the run. This is the cross-step form of DAPO's dynamic sampling and of
// ROLL's difficulty mask / rLLM's solve_none/solve_all rejection, which filter within a step.
//
// Observations must be fed in step order and identically on every data-parallel rank (the caller gathers the pass
// rates of the whole batch). The state is saved as text (save/load) for checkpoints. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace grpo::train {

struct PassRateFilterOptions {
  std::int64_t window = 2;         ///< consecutive all-wrong (or all-right) appearances that retire a prompt; ≥ 1
  bool retire_unsolved = true;     ///< retire prompts with pass rate 0
  bool retire_solved = true;       ///< retire prompts with pass rate 1
  std::int64_t retire_steps = 0;   ///< steps a prompt stays retired; 0 = for the rest of the run
};

class PassRateFilter {
 public:
  /// Throws ConfigError for window < 1 or retire_steps < 0.
  explicit PassRateFilter(PassRateFilterOptions options = {});

  /// Records that `prompt` was sampled at `step` with `pass_rate` in [0, 1] (NaN: no value could be judged; the
  /// streak is broken). Retires the prompt when its streak reaches `window`, for the next retire_steps steps (step + 1
  /// through step + retire_steps) or forever; a retired prompt that comes back starts a new streak. Throws ConfigError
  /// for a pass rate outside [0, 1].
  void observe(std::string_view prompt, double pass_rate, std::int64_t step);

  /// Whether `prompt` may not be sampled at `step`.
  bool is_retired(std::string_view prompt, std::int64_t step) const;
  /// How many prompts are retired at `step`.
  std::size_t retired_count(std::int64_t step) const;

  /// The state as JSON text, and back; load throws ParseError naming `source` and the entry at fault, and replaces
  /// the whole state.
  std::string save() const;
  void load(std::string_view json, std::string_view source);

  const PassRateFilterOptions& options() const { return options_; }

 private:
  struct PromptState {
    int streak_kind = -1;             ///< 0: unsolved streak, 1: solved streak, -1: none
    std::int64_t streak = 0;
    std::int64_t retired_until = -1;  ///< first step it may be sampled again; -1: not retired; INT64_MAX: never
    bool operator==(const PromptState&) const = default;
  };

  PassRateFilterOptions options_;
  std::map<std::string, PromptState, std::less<>> prompts_;
};

}  // namespace grpo::train
