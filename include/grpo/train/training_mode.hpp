// SPDX-License-Identifier: Apache-2.0
// A scope in which a module is in training (dropout, LoRA dropout) or evaluation mode, its previous mode restored on
// leaving, also when the scope throws.
//
//   {
//     grpo::train::TrainingModeScope training(model, /*training=*/true);   // the loss's forward and backward
//     ...
//   }                                                                      // back to the mode it had
#pragma once

#include <torch/torch.h>

namespace grpo::train {

class TrainingModeScope {
 public:
  TrainingModeScope(torch::nn::Module& module, bool training) : module_(module), previous_(module.is_training()) {
    module_.train(training);
  }
  ~TrainingModeScope() { module_.train(previous_); }
  TrainingModeScope(const TrainingModeScope&) = delete;
  TrainingModeScope& operator=(const TrainingModeScope&) = delete;

 private:
  torch::nn::Module& module_;
  bool previous_;
};

}  // namespace grpo::train
