// SPDX-License-Identifier: Apache-2.0
// Training checkpoints: one directory per step, written atomically, the last K kept, the newest found for resume.
//
//   <directory>/checkpoint-<step>/
//     config.json, model.safetensors   the model in Hugging Face layout (models::save_pretrained): loadable by
//                                      transformers and by models::from_pretrained; another model type's every
//                                      named parameter and buffer in model.safetensors (module_checkpoint)
//     optimizer.pt                     the optimizer state (torch::serialize::OutputArchive via Optimizer::save)
//     rng_state.pt                     the default CPU generator's state (torch::manual_seed streams continue)
//     trainer_state.json               {"step": N, "seed": S, "values": {"name": number, ...},
//                                       "texts": {"name": "text", ...}}
//     reference/                       optional: a second model (the KL reference when it is synced to the policy
//                                      during the run, so a resumed run continues with the same reference), in the
//                                      same Hugging Face layout
//     adapter/                         a LoRA model's adapters (models::save_lora_adapter: peft's
//                                      adapter_config.json + adapter_model.safetensors); the files above hold the
//                                      base model
//     master_weights.safetensors       mixed precision: the fp32 master copies of the half-precision trainable
//                                      parameters (MasterWeights), by parameter name
//     <part>/                          optional: a further trained model with its own optimizer (a PPO critic in
//                                      critic/: CheckpointPart), its weights, optimizer.pt and master weights as
//                                      above
//
// A checkpoint is first written to "checkpoint-<step>.tmp" and renamed when complete, so a crash leaves either the
// previous set of checkpoints or a ".tmp" directory that latest() ignores and the next save() removes. One writer
// per directory is assumed.
#pragma once

#include <grpo/models/causal_lm.hpp>
#include <grpo/train/master_weights.hpp>

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace grpo::train {

/// The loop's own counters, saved as trainer_state.json beside the model.
struct TrainerState {
  std::int64_t step = 0;
  std::uint64_t seed = 0;
  /// Further numbers the loop needs to resume (epoch, samples seen, best score, ...). Doubles: integers are exact
  /// up to 2^53.
  std::map<std::string, double> values;
  /// Further state as text (a filter's JSON, names, ...). Absent from checkpoints written before it existed.
  std::map<std::string, std::string> texts;

  bool operator==(const TrainerState&) const = default;
};

struct CheckpointOptions {
  std::filesystem::path directory;  ///< holds the checkpoint-<step> directories (created when missing)
  std::size_t keep_last = 3;        ///< complete checkpoints kept after each save, newest first; 0 = keep all
};

/// A model as a checkpoint writes and reads its weights: `save` writes them into a new directory, `load` reads them
/// back into the same (already built) model in place, so an optimizer built on its parameters stays valid; `device`
/// is where the optimizer's saved state is loaded to. models::CausalLM converts implicitly (the Hugging Face layout
/// of models::save_pretrained and load_hf_state; a LoRA model's adapters in adapter/); module_checkpoint serves any
/// other module.
struct CheckpointedModel {
  CheckpointedModel(const models::CausalLM& model);  // NOLINT(google-explicit-constructor): a model is one
  CheckpointedModel(std::function<void(const std::filesystem::path&)> save,
                    std::function<void(const std::filesystem::path&)> load, torch::Device device)
      : save(std::move(save)), load(std::move(load)), device(device) {}

  std::function<void(const std::filesystem::path& directory)> save;
  std::function<void(const std::filesystem::path& directory)> load;
  torch::Device device;
};

/// Any module's weights: every named parameter and buffer in directory/model.safetensors (CPU copies, same dtype),
/// loaded back by name into the module in place. Loading throws grpo::Error naming the file and the tensor that is
/// missing or has another shape or dtype than the module's (a checkpoint of another architecture).
CheckpointedModel module_checkpoint(std::shared_ptr<torch::nn::Module> module);

/// A further model a checkpoint carries, with its own optimizer (a PPO critic) or without one (weights only: a pipelined
/// run's weights in flight): saved in the subdirectory `name` as the main model is (its weights, optimizer.pt when
/// there is an optimizer, the masters of a mixed-precision `master_weights`), loaded back in place. The optimizer
/// (and the masters, when given) must outlive the call.
struct CheckpointPart {
  std::string name;  ///< the subdirectory: one path component, not one of the checkpoint's own names
  CheckpointedModel model;
  torch::optim::Optimizer* optimizer = nullptr;  ///< null: weights only
  MasterWeights* master_weights = nullptr;
};

/// A complete checkpoint on disk.
struct CheckpointInfo {
  std::int64_t step = 0;
  std::filesystem::path path;
};

class CheckpointManager {
 public:
  /// Throws ConfigError for an empty directory option.
  explicit CheckpointManager(CheckpointOptions options);

  /// Writes checkpoint-<state.step> (model, optimizer, the default CPU generator's state, `state` and, when
  /// given, `reference` in reference/; a LoRA model's adapters in adapter/; the masters of mixed-precision
  /// `master_weights`; each of `parts` in its subdirectory), replacing one of the same step, then deletes stray ".tmp" directories and all
  /// but the newest keep_last checkpoints. Returns the checkpoint's path. Throws grpo::Error naming the path when it
  /// cannot be written (the previous checkpoints stay as they were) or for a negative step.
  std::filesystem::path save(const CheckpointedModel& model, const torch::optim::Optimizer& optimizer,
                             const TrainerState& state, const std::optional<CheckpointedModel>& reference = std::nullopt,
                             const MasterWeights* master_weights = nullptr, std::span<const CheckpointPart> parts = {});

  /// Complete checkpoints (directories "checkpoint-<digits>" holding trainer_state.json), oldest first.
  std::vector<CheckpointInfo> list() const;
  /// The newest complete checkpoint, for resume; nullopt when there is none.
  std::optional<CheckpointInfo> latest() const;

  /// Loads a checkpoint written by save into an existing model (same architecture; parameters are copied in
  /// place, so an optimizer built on them stays valid) and optimizer, restores the default CPU generator's state,
  /// and returns the trainer state. With `reference`, also loads reference/ into it (grpo::Error when the checkpoint
  /// was saved without one). A LoRA model's adapters are loaded from adapter/; with mixed-precision
  /// `master_weights`, the fp32 masters from master_weights.safetensors (grpo::Error when either is missing); each
  /// of `parts` from its subdirectory (grpo::Error naming it when the checkpoint was saved without it).
  /// Throws grpo::Error / ParseError naming the file that is missing or malformed.
  static TrainerState load(const std::filesystem::path& checkpoint, const CheckpointedModel& model,
                           torch::optim::Optimizer& optimizer,
                           const std::optional<CheckpointedModel>& reference = std::nullopt,
                           MasterWeights* master_weights = nullptr, std::span<const CheckpointPart> parts = {});

  const CheckpointOptions& options() const { return options_; }

 private:
  CheckpointOptions options_;
};

/// trainer_state.json text for `state`, and back (ParseError naming `source` and the field).
std::string trainer_state_to_json(const TrainerState& state);
TrainerState trainer_state_from_json(std::string_view json, std::string_view source = "trainer_state.json");

// ---------------------------------------------------------------------------------------------------------------
// Checkpoints of data-parallel runs (ProcessGroup: train/distributed.hpp).

class ProcessGroup;

/// Rank 0 writes the checkpoint (CheckpointManager::save); then every rank learns whether it succeeded (a
/// broadcast that doubles as the barrier), so no rank reads or resumes from a half-written checkpoint. Returns the
/// path on rank 0, nullopt elsewhere. When rank 0 fails, throws grpo::Error on every rank (rank 0's own error on
/// rank 0). Collective.
std::optional<std::filesystem::path> save_checkpoint(ProcessGroup& group, CheckpointManager& manager,
                                                     const CheckpointedModel& model,
                                                     const torch::optim::Optimizer& optimizer,
                                                     const TrainerState& state,
                                                     const std::optional<CheckpointedModel>& reference = std::nullopt,
                                                     const MasterWeights* master_weights = nullptr,
                                                     std::span<const CheckpointPart> parts = {});

/// Every rank loads the same checkpoint (CheckpointManager::load: the path must be readable by all ranks, e.g. a
/// shared file system), then meets the others at a barrier. The saved generator state is rank 0's; with world size
/// > 1 each rank then reseeds the default CPU generator from (state.seed, state.step, rank) so that ranks do not
/// sample identical streams. Returns the trainer state. Collective.
TrainerState load_checkpoint(ProcessGroup& group, const std::filesystem::path& checkpoint,
                             const CheckpointedModel& model, torch::optim::Optimizer& optimizer,
                             const std::optional<CheckpointedModel>& reference = std::nullopt,
                             MasterWeights* master_weights = nullptr, std::span<const CheckpointPart> parts = {});

}  // namespace grpo::train
