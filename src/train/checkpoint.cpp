// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/io/atomic_file.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/lora.hpp>
#include <grpo/train/checkpoint.hpp>
#include <grpo/train/distributed.hpp>

#include <grpo/core/mix64.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <mutex>

namespace grpo::train {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kPrefix = "checkpoint-";
constexpr std::string_view kTmpSuffix = ".tmp";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kReferenceDir = "reference";
constexpr const char* kAdapterDir = "adapter";
constexpr const char* kMasterWeightsFile = "master_weights.safetensors";

// The step of a directory named exactly "checkpoint-<digits>".
std::optional<std::int64_t> checkpoint_step(const std::string& name) {
  if (!name.starts_with(kPrefix) || name.size() == kPrefix.size()) return std::nullopt;
  std::int64_t step = 0;
  const char* begin = name.data() + kPrefix.size();
  const char* end = name.data() + name.size();
  if (*begin < '0' || *begin > '9') return std::nullopt;
  const auto [next, error] = std::from_chars(begin, end, step);
  if (error != std::errc() || next != end) return std::nullopt;
  return step;
}

[[noreturn]] void state_error(std::string_view source, std::string_view what) {
  ::grpo::detail::throw_formatted<ParseError>("{}: {}", source, what);
}

// A trained model's files in `directory`: its weights, the masters of mixed-precision `master_weights`, optimizer.pt.
void save_trained(const fs::path& directory, const CheckpointedModel& model, const torch::optim::Optimizer* optimizer,
                  const MasterWeights* master_weights) {
  model.save(directory);
  if (master_weights != nullptr && master_weights->mixed()) {
    io::save_safetensors(directory / kMasterWeightsFile, master_weights->state());
  }
  if (optimizer == nullptr) return;  // a part of weights only
  torch::serialize::OutputArchive archive;
  optimizer->save(archive);
  archive.save_to((directory / "optimizer.pt").string());
}

// save_trained's files back, in place.
void load_trained(const fs::path& directory, const CheckpointedModel& model, torch::optim::Optimizer* optimizer,
                  MasterWeights* master_weights) {
  model.load(directory);
  if (master_weights != nullptr && master_weights->mixed()) {
    const fs::path path = directory / kMasterWeightsFile;
    GRPO_CHECK(fs::is_regular_file(path),
               "checkpoint {} has no {} but the model trains in half precision with fp32 master weights (it was "
               "saved by a full-precision run, or with optimizer_precision compensated)",
               directory.string(), kMasterWeightsFile);
    master_weights->load_state(io::SafetensorsFile(path).tensors(), path.string());
  }
  if (optimizer == nullptr) return;
  GRPO_CHECK(fs::is_regular_file(directory / "optimizer.pt"), "checkpoint {} has no optimizer.pt", directory.string());
  torch::serialize::InputArchive archive;
  // The optimizer's state onto the model's device (rank 0 saved it from its own).
  archive.load_from((directory / "optimizer.pt").string(), model.device);
  try {
    optimizer->load(archive);
  } catch (const c10::Error& e) {  // another optimizer's state: AdamW's where CompensatedAdamW's is read, or back
    throw Error(fmt::format("checkpoint {}: optimizer.pt holds another optimizer's state than this run's (was it "
                            "saved with another optimizer_precision?): {}",
                            directory.string(), e.what_without_backtrace()));
  }
}

void check_parts(std::span<const CheckpointPart> parts) {
  // The names of a checkpoint's own files and directories (the model's: save_pretrained's and module_checkpoint's).
  static const std::vector<std::string_view> taken = {kReferenceDir, kAdapterDir,   kStateFile,    kMasterWeightsFile,
                                                      "optimizer.pt", "rng_state.pt", "config.json", "model.safetensors"};
  std::vector<std::string_view> seen;
  for (const CheckpointPart& part : parts) {
    const fs::path name(part.name);
    GRPO_CHECK(!part.name.empty() && name.filename() == name && name != "." && name != ".." &&
                   std::find(taken.begin(), taken.end(), part.name) == taken.end(),
               "CheckpointPart: '{}' is not a name a checkpoint can hold as its own subdirectory (one path "
               "component, none of the checkpoint's own names: {})",
               part.name, fmt::join(taken, ", "));
    GRPO_CHECK(std::find(seen.begin(), seen.end(), part.name) == seen.end(), "CheckpointPart: '{}' twice", part.name);
    seen.push_back(part.name);
  }
}

}  // namespace

std::string trainer_state_to_json(const TrainerState& state) {
  std::string out = fmt::format("{{\n  \"step\": {},\n  \"seed\": {},\n  \"values\": {{", state.step, state.seed);
  bool first = true;
  for (const auto& [name, value] : state.values) {
    GRPO_CHECK(std::isfinite(value), "TrainerState: value '{}' is {}; only finite numbers can be saved", name, value);
    out += first ? "\n    " : ",\n    ";
    first = false;
    append_json_quoted(out, name);
    fmt::format_to(std::back_inserter(out), ": {}", value);  // shortest round-trip text
  }
  out += first ? "}" : "\n  }";
  if (!state.texts.empty()) {
    out += ",\n  \"texts\": {";
    first = true;
    for (const auto& [name, text] : state.texts) {
      out += first ? "\n    " : ",\n    ";
      first = false;
      append_json_quoted(out, name);
      out += ": ";
      append_json_quoted(out, text);
    }
    out += "\n  }";
  }
  out += "\n}\n";
  return out;
}

TrainerState trainer_state_from_json(std::string_view json, std::string_view source) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (const auto error = parser.parse(simdjson::padded_string(json)).get(root)) {
    state_error(source, fmt::format("invalid JSON ({})", simdjson::error_message(error)));
  }
  TrainerState state;
  if (root["step"].get_int64().get(state.step)) state_error(source, "field 'step' should be an integer");
  if (root["seed"].get_uint64().get(state.seed)) state_error(source, "field 'seed' should be a non-negative integer");
  simdjson::dom::object values;
  if (root["values"].get_object().get(values)) state_error(source, "field 'values' should be an object");
  for (const auto field : values) {
    double value = 0.0;
    if (field.value.get_double().get(value)) {
      std::int64_t integer = 0;
      std::uint64_t unsigned_integer = 0;
      if (!field.value.get_int64().get(integer)) {
        value = static_cast<double>(integer);
      } else if (!field.value.get_uint64().get(unsigned_integer)) {
        value = static_cast<double>(unsigned_integer);
      } else {
        state_error(source, fmt::format("field 'values.{}' should be a number", field.key));
      }
    }
    state.values.emplace(std::string(field.key), value);
  }
  simdjson::dom::element texts_field;
  if (!root["texts"].get(texts_field)) {
    simdjson::dom::object texts;
    if (texts_field.get_object().get(texts)) state_error(source, "field 'texts' should be an object");
    for (const auto field : texts) {
      std::string_view text;
      if (field.value.get_string().get(text)) state_error(source, fmt::format("field 'texts.{}' should be a string", field.key));
      state.texts.emplace(std::string(field.key), std::string(text));
    }
  }
  return state;
}

CheckpointManager::CheckpointManager(CheckpointOptions options) : options_(std::move(options)) {
  GRPO_CHECK_CONFIG(!options_.directory.empty(), "CheckpointOptions: directory must not be empty");
}

CheckpointedModel::CheckpointedModel(const models::CausalLM& model)
    : save([model](const fs::path& directory) {
        models::save_pretrained(model, directory);
        if (model->lora_options()) models::save_lora_adapter(model, directory / kAdapterDir);
      }),
      load([model = models::CausalLM(model)](const fs::path& directory) mutable {
        model->load_hf_state(io::load_checkpoint_tensors(directory));
        if (model->lora_options()) {
          GRPO_CHECK(fs::is_directory(directory / kAdapterDir),
                     "checkpoint {} has no {}/ but the model has LoRA adapters (it was saved without them)",
                     directory.string(), kAdapterDir);
          models::load_lora_adapter(model, directory / kAdapterDir);
        }
      }),
      device(model->lm_head_weight().device()) {}

CheckpointedModel module_checkpoint(std::shared_ptr<torch::nn::Module> module) {
  GRPO_CHECK(module != nullptr, "module_checkpoint: null module");
  const auto parameters = module->parameters();
  const torch::Device device = parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
  auto state = [](torch::nn::Module& m) {
    std::map<std::string, torch::Tensor> tensors;
    for (const auto& p : m.named_parameters()) tensors.emplace(p.key(), p.value());
    for (const auto& b : m.named_buffers()) tensors.emplace(b.key(), b.value());
    return tensors;
  };
  return CheckpointedModel(
      [module, state](const fs::path& directory) {
        std::map<std::string, torch::Tensor> cpu;
        for (const auto& [name, tensor] : state(*module)) cpu.emplace(name, tensor.detach().to(torch::kCPU).contiguous());
        io::save_checkpoint_tensors(directory, cpu);
      },
      [module, state](const fs::path& directory) {
        const std::map<std::string, torch::Tensor> saved = io::load_checkpoint_tensors(directory);
        const std::string file = (directory / "model.safetensors").string();
        const auto own = state(*module);
        for (const auto& [name, target] : own) {
          const auto it = saved.find(name);
          GRPO_CHECK(it != saved.end(), "{}: no tensor '{}' (the checkpoint is of another model)", file, name);
          GRPO_CHECK(it->second.sizes() == target.sizes() && it->second.scalar_type() == target.scalar_type(),
                     "{}: tensor '{}' is {} {} but the model's is {} {}", file, name,
                     c10::toString(it->second.scalar_type()), fmt::join(it->second.sizes(), "x"),
                     c10::toString(target.scalar_type()), fmt::join(target.sizes(), "x"));
        }
        GRPO_CHECK(saved.size() == own.size(), "{}: {} tensors, but the model has {} (another model's checkpoint)",
                   file, saved.size(), own.size());
        torch::NoGradGuard no_grad;
        for (const auto& [name, target] : own) target.copy_(saved.at(name));
      },
      device);
}

fs::path CheckpointManager::save(const CheckpointedModel& model, const torch::optim::Optimizer& optimizer,
                                 const TrainerState& state, const std::optional<CheckpointedModel>& reference,
                                 const MasterWeights* master_weights, std::span<const CheckpointPart> parts) {
  GRPO_CHECK(state.step >= 0, "CheckpointManager::save: step must be ≥ 0, got {}", state.step);
  check_parts(parts);
  const fs::path final_dir = options_.directory / fmt::format("{}{}", kPrefix, state.step);
  fs::path tmp_dir = final_dir;
  tmp_dir += kTmpSuffix;
  fs::create_directories(options_.directory);
  fs::remove_all(tmp_dir);
  try {
    fs::create_directories(tmp_dir);
    save_trained(tmp_dir, model, &optimizer, master_weights);
    if (reference) reference->save(tmp_dir / kReferenceDir);
    for (const CheckpointPart& part : parts) {
      fs::create_directories(tmp_dir / part.name);
      save_trained(tmp_dir / part.name, part.model, part.optimizer, part.master_weights);
    }
    {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      torch::Tensor rng_state;
      {
        std::lock_guard<std::mutex> lock(generator.mutex());
        rng_state = generator.get_state();
      }
      torch::serialize::OutputArchive archive;
      archive.write("cpu_rng_state", rng_state);
      archive.save_to((tmp_dir / "rng_state.pt").string());
    }
    // Written last: its presence marks the directory as complete.
    io::write_file_atomically(tmp_dir / kStateFile,
                              [&](std::ostream& out) { out << trainer_state_to_json(state); });
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    throw;
  }
  // rename(2) cannot replace a non-empty directory: an old checkpoint of the same step goes first.
  fs::remove_all(final_dir);
  std::error_code error;
  fs::rename(tmp_dir, final_dir, error);
  GRPO_CHECK(!error, "cannot rename {} to {}: {}", tmp_dir.string(), final_dir.string(), error.message());

  // Leftovers of crashed saves, then the oldest complete checkpoints beyond keep_last.
  for (const auto& entry : fs::directory_iterator(options_.directory)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.starts_with(kPrefix) && name.ends_with(kTmpSuffix)) {
      fs::remove_all(entry.path());
    }
  }
  if (options_.keep_last > 0) {
    const std::vector<CheckpointInfo> all = list();
    for (std::size_t i = 0; i + options_.keep_last < all.size(); ++i) fs::remove_all(all[i].path);
  }
  return final_dir;
}

std::vector<CheckpointInfo> CheckpointManager::list() const {
  std::vector<CheckpointInfo> out;
  if (!fs::is_directory(options_.directory)) return out;
  for (const auto& entry : fs::directory_iterator(options_.directory)) {
    if (!entry.is_directory()) continue;
    const std::optional<std::int64_t> step = checkpoint_step(entry.path().filename().string());
    if (step && fs::is_regular_file(entry.path() / kStateFile)) out.push_back({*step, entry.path()});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointInfo> CheckpointManager::latest() const {
  std::vector<CheckpointInfo> all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

TrainerState CheckpointManager::load(const fs::path& checkpoint, const CheckpointedModel& model,
                                     torch::optim::Optimizer& optimizer, const std::optional<CheckpointedModel>& reference,
                                     MasterWeights* master_weights, std::span<const CheckpointPart> parts) {
  check_parts(parts);
  const fs::path state_path = checkpoint / kStateFile;
  TrainerState state = trainer_state_from_json(io::read_file(state_path), state_path.string());
  load_trained(checkpoint, model, &optimizer, master_weights);
  if (reference) {
    GRPO_CHECK(fs::is_directory(checkpoint / kReferenceDir),
               "checkpoint {} has no {}/ (it was saved without a reference model)", checkpoint.string(), kReferenceDir);
    reference->load(checkpoint / kReferenceDir);
  }
  for (const CheckpointPart& part : parts) {
    GRPO_CHECK(fs::is_directory(checkpoint / part.name), "checkpoint {} has no {}/ (it was saved by a run without it)",
               checkpoint.string(), part.name);
    load_trained(checkpoint / part.name, part.model, part.optimizer, part.master_weights);
  }
  GRPO_CHECK(fs::is_regular_file(checkpoint / "rng_state.pt"), "checkpoint {} has no rng_state.pt", checkpoint.string());
  {
    torch::serialize::InputArchive archive;
    archive.load_from((checkpoint / "rng_state.pt").string());
    torch::Tensor rng_state;
    archive.read("cpu_rng_state", rng_state);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng_state);
  }
  return state;
}

std::optional<std::filesystem::path> save_checkpoint(ProcessGroup& group, CheckpointManager& manager,
                                                     const CheckpointedModel& model,
                                                     const torch::optim::Optimizer& optimizer,
                                                     const TrainerState& state,
                                                     const std::optional<CheckpointedModel>& reference,
                                                     const MasterWeights* master_weights,
                                                     std::span<const CheckpointPart> parts) {
  std::optional<std::filesystem::path> path;
  std::exception_ptr failure;
  if (group.is_main()) {
    try {
      path = manager.save(model, optimizer, state, reference, master_weights, parts);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  torch::Tensor ok = torch::tensor({failure ? int64_t{0} : int64_t{1}}, torch::kInt64);
  group.broadcast_(ok, 0);
  if (failure) std::rethrow_exception(failure);
  GRPO_CHECK(ok.item<int64_t>() == 1, "save_checkpoint (rank {}): rank 0 failed to write checkpoint step {} in {}",
             group.rank(), state.step, manager.options().directory.string());
  return path;
}

TrainerState load_checkpoint(ProcessGroup& group, const std::filesystem::path& checkpoint,
                             const CheckpointedModel& model, torch::optim::Optimizer& optimizer,
                             const std::optional<CheckpointedModel>& reference, MasterWeights* master_weights,
                             std::span<const CheckpointPart> parts) {
  TrainerState state;
  std::exception_ptr failure;
  try {
    state = CheckpointManager::load(checkpoint, model, optimizer, reference, master_weights, parts);
  } catch (...) {
    failure = std::current_exception();
  }
  // All ranks learn whether every rank loaded; the minimum doubles as the barrier.
  const double loaded = group.all_reduce(failure ? 0.0 : 1.0, ReduceOp::min);
  if (failure) std::rethrow_exception(failure);
  GRPO_CHECK(loaded == 1.0, "load_checkpoint (rank {}): another rank failed to load {}", group.rank(),
             checkpoint.string());
  if (group.world_size() > 1) {
    SplitMix64 mix{state.seed ^ (static_cast<uint64_t>(state.step) * 0x9E3779B97F4A7C15ull) ^
                   (static_cast<uint64_t>(group.rank()) << 48)};
    torch::manual_seed(mix.next());
  }
  return state;
}

}  // namespace grpo::train
