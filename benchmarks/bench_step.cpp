// SPDX-License-Identifier: Apache-2.0
// One whole GRPO step at Qwen2.5-0.5B's shape (494 M parameters, random weights in a checkpoint this program writes
// and loads back), as the R1 tutorial runs it: one prompt of 128 tokens, G = 8 completions of 512 tokens, rewards,
// the rollout policy's and the reference's log-probs, the loss (DAPO clip + β·k3 KL), backward in two micro-batches
// of 4 sequences (8 at once without checkpointing needs more than this machine's 24 GB in fp32), AdamW.
//
//   eager_fp32   the plain LibTorch composition a PyTorch user writes: KV-cache decoding with full [B, V] logits and
//                torch::multinomial, log-probs as log_softmax of the full [B, T, V] logits, the loss, backward,
//                AdamW over an fp32 model and a deep-copied fp32 reference
//   fp32         GrpoTrainer::step on the fp32 model (fused log-prob kernels, chunked, no [B, T, V] tensor)
//   bf16         the same with the model in bf16: fp32 master weights and AdamW state (MasterWeights)
//   bf16_ckpt    bf16 with activation checkpointing
//   bf16_lora    bf16 with LoRA r = 16 on every projection (the reference is the base: no copy)
//   bf16_lora_ckpt  the same with activation checkpointing
//   bf16_compensated  bf16 without fp32 masters: CompensatedAdamW (bf16 moments, Kahan-compensated weights)
// then, for memory at longer completions, the update phase alone (policy_update on a batch of random completions of
// --memory-completion tokens, bf16, two micro-batches of 4) without and with activation checkpointing, with fp32
// master weights and with CompensatedAdamW, measured on the second update (the first creates AdamW's state, which is
// then part of every later step's resident memory).
//
// Each row: the phase times the trainer logs (timing_s/...), the step's peak resident memory (VmHWM after
// malloc_trim and a reset of the kernel's high-water mark just before the step) and how much of it was added during
// the step (+GB: peak minus the resident memory at its start: activations, gradients, temporaries), tokens/s of
// generation and of the update, and the update's achieved FLOP/s against this machine's matrix-product peak for the dtype measured in the same run (6·N·tokens for
// forward + backward, 8·N·tokens with checkpointing's recomputation; attention's T² terms left out).
//
// A whole step's row is followed by the sampler's probabilities against the trainer's recomputation of them (the KL
// in the reward makes the trainer recompute the rollout policy's log-probs): verl's training/rollout_probs_diff_*.
//
// The bound of each row is the machine's matrix-product rate for its dtype at the model's own projection shapes
// (q, k, v, o, gate, up, down and the lm_head over 4096 tokens), measured in the same run; the last lines set the
// bf16/fp32 step ratio beside that bf16/fp32 matrix-product ratio (the goal: a step ratio >= 0.8 x the GEMM ratio).
//
// --device cuda runs every row on the GPU (cuda:0; a CUDA build, GRPO_CUDA): the model, the sampler and the update
// there, the process group NCCL with world size 1, memory as the CUDA allocator's peak, the bound as the GPU's
// matrix-product rate. scripts/gpu-check.sh runs it so.
//
//   bench_step [--layers 24] [--completion 512] [--memory-completion 1024] [--only NAME,...] [--device cpu|cuda]
#include <grpo/grpo.hpp>

#include <support/bench_support.hpp>

#include <fmt/format.h>

#ifdef GRPO_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif
#include <torch/cuda.h>
#include <torch/version.h>

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Shape {
  int64_t layers = 24, prompt = 128, group = 8, completion = 512, memory_completion = 1024;
  torch::Device device{torch::kCPU};
};

/// Waits for the GPU's queued work, so that a wall-clock time covers it.
void sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

/// Prompt tokens are fixed; a completion's reward is the fraction of its tokens that are even, so rewards spread.
struct SyntheticSource final : grpo::train::PromptSource {
  explicit SyntheticSource(int64_t prompt_tokens) {
    for (int64_t i = 0; i < prompt_tokens; ++i) prompt.push_back(1000 + (i * 7919) % 50000);
  }
  std::vector<grpo::train::Problem> train_batch(int64_t, int64_t count) override {
    std::vector<grpo::train::Problem> out;
    for (int64_t i = 0; i < count; ++i) {
      out.push_back({.prompt_ids = prompt,
                     .prompt_text = "synthetic",
                     .row = std::make_shared<const grpo::rewards::Row>(grpo::rewards::Row{{"ground_truth", "0"}})});
    }
    return out;
  }
  const std::vector<grpo::train::Problem>& held_out() const override { return held; }
  std::string decode(std::span<const int64_t> ids) const override {
    std::string text;
    for (int64_t id : ids) text += id % 2 == 0 ? 'e' : 'o';
    return text;
  }
  std::vector<int64_t> eos_token_ids() const override { return {}; }  // every completion runs to the limit
  int64_t pad_token_id() const override { return 0; }
  std::vector<int64_t> prompt;
  std::vector<grpo::train::Problem> held;
};

grpo::train::StepScorer even_token_scorer() {
  return grpo::train::StepScorer{grpo::rewards::RewardSet(
      {{grpo::rewards::make_reward("even_tokens",
                                   [](const grpo::rewards::Completion& c) {
                                     if (c.text.empty()) return 0.0;
                                     return static_cast<double>(std::count(c.text.begin(), c.text.end(), 'e')) /
                                            static_cast<double>(c.text.size());
                                   }),
        1.0}})};
}

grpo::train::GrpoTrainerOptions trainer_options(const Shape& shape) {
  grpo::train::GrpoTrainerOptions o;
  o.steps = 10;
  o.prompts_per_step = 1;
  o.group_size = shape.group;
  o.sampling.max_new_tokens = shape.completion;
  o.loss = grpo::recipes::dapo();
  o.loss.beta = 0.04;          // the reference's log-probs (TRL's former default β)
  o.kl_in_reward.beta = 1e-3;  // and the rollout policy's (verl's KL in the reward needs both)
  o.learning_rate = 1e-6;
  o.micro_batches = 2;  // 4 sequences per forward + backward: fp32 without checkpointing exceeds 24 GB at 8
  return o;
}

/// The device's matrix-product rate (FLOP/s) for `dtype` at the model's projection shapes over 4096 tokens: every
/// [4096, in] x [in, out] product of one layer and the lm_head, each timed at its best of 3, their FLOPs over their
/// summed times.
double matmul_peak(const grpo::models::ModelConfig& c, torch::ScalarType dtype, const torch::Device& device) {
  const int64_t tokens = 4096, kv = c.num_key_value_heads * c.head_dimension();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {c.hidden_size, c.num_attention_heads * c.head_dimension()}, {c.hidden_size, kv}, {c.hidden_size, kv},
      {c.num_attention_heads * c.head_dimension(), c.hidden_size}, {c.hidden_size, c.intermediate_size},
      {c.hidden_size, c.intermediate_size}, {c.intermediate_size, c.hidden_size}, {c.hidden_size, c.vocab_size}};
  double flops = 0, seconds = 0;
  for (const auto& [in, out] : shapes) {
    auto a = torch::randn({tokens, in}).to(device, dtype), b = torch::randn({in, out}).to(device, dtype);
    flops += 2.0 * static_cast<double>(tokens * in * out);
    seconds += grpo::bench::best_seconds([&] {
      benchmark::DoNotOptimize(torch::mm(a, b).data_ptr());
      sync(device);
    }, 3);
  }
  return flops / seconds;
}

struct Row {
  std::string name;
  std::map<std::string, double> timing;  // phase → seconds
  std::map<std::string, double> mismatch;  // training/rollout_*: the sampler's probabilities against the trainer's
  double step_seconds = 0, peak_gib = 0, added_gib = 0, generated_tokens = 0, trained_tokens = 0, update_flops = 0;
  torch::ScalarType dtype = torch::kFloat32;
};

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

/// CPU: returns the heap's free memory to the system (what earlier rows and the first update freed but glibc kept),
/// then resets the kernel's high-water mark; returns the resident memory at that point (GiB). GPU: the same with the
/// CUDA caching allocator's allocated bytes. The peak after it is what the measured phase needs on top of what is
/// live.
double reset_peak(const torch::Device& device) {
  if (device.is_cuda()) {
#ifdef GRPO_WITH_CUDA
    sync(device);
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return gib(c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].current);
#endif
  }
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
  return gib(grpo::bench::proc_status_bytes("VmRSS"));
}
double peak_gib(const torch::Device& device) {
  if (device.is_cuda()) {
#ifdef GRPO_WITH_CUDA
    sync(device);
    return gib(c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak);
#endif
  }
  return gib(grpo::bench::proc_status_bytes("VmHWM"));
}

int64_t parameter_count(const grpo::models::CausalLM& model, bool trainable_only) {
  int64_t n = 0;
  for (const auto& p : model->parameters()) {
    if (!trainable_only || p.requires_grad()) n += p.numel();
  }
  return n;
}

struct Variant {
  std::string name;
  torch::ScalarType dtype;
  bool checkpointing = false, lora = false;
  grpo::train::OptimizerPrecision precision = grpo::train::OptimizerPrecision::fp32_master;
};

/// Matrix-product FLOPs of the update: the forward is 2·N_decoder per token of every sequence plus 2·V·H per
/// completion token (lm_head); backward twice the forward (gradients of inputs and of weights), once with LoRA (frozen
/// weights need no gradient; the adapters' are negligible); checkpointing adds one forward.
double update_flops(const grpo::models::CausalLM& model, int64_t batch, int64_t prompt, int64_t completion,
                    const Variant& v) {
  const auto& c = model->config();
  const double embedding = static_cast<double>(c.vocab_size * c.hidden_size);
  const double decoder = static_cast<double>(parameter_count(model, false)) - embedding -
                         (c.tie_word_embeddings ? 0.0 : embedding);
  const double forward = static_cast<double>(batch) * (2.0 * decoder * static_cast<double>(prompt + completion) +
                                                       2.0 * embedding * static_cast<double>(completion));
  return forward * (1.0 + (v.lora ? 1.0 : 2.0) + (v.checkpointing ? 1.0 : 0.0));
}

grpo::models::CausalLM load(const fs::path& checkpoint, const Variant& v, const torch::Device& device) {
  auto model = grpo::models::from_pretrained(checkpoint, v.dtype);
  if (v.lora) grpo::models::add_lora(model, {.rank = 16, .alpha = 32, .target_modules = {"all-linear"}});
  model->to(device);
  model->set_gradient_checkpointing(v.checkpointing);
  return model;
}

/// One process; on a GPU its group is NCCL (world size 1: the NCCL group is built and its collectives run).
grpo::train::ProcessGroupOptions group_options(const torch::Device& device) {
  grpo::train::ProcessGroupOptions o;
  if (device.is_cuda()) o.backend = grpo::train::DistributedBackend::nccl;
  return o;
}

/// GrpoTrainer::step, with the trainer's own phase times.
/// A trainer over the checkpoint loaded as `v` asks, with everything it refers to.
struct Run {
  Run(const fs::path& checkpoint, const Shape& shape, const Variant& v, grpo::train::GrpoTrainerOptions options)
      : model(load(checkpoint, v, shape.device)), source(shape.prompt), group(group_options(shape.device)),
        trainer(model, source, scorer, group, with_precision(std::move(options), v)) {}
  static grpo::train::GrpoTrainerOptions with_precision(grpo::train::GrpoTrainerOptions options, const Variant& v) {
    options.optimizer_precision = v.precision;
    return options;
  }
  grpo::models::CausalLM model;
  SyntheticSource source;
  grpo::train::StepScorer scorer = even_token_scorer();
  grpo::train::ProcessGroup group;
  grpo::train::GrpoTrainer trainer;
};

Row trainer_step(const fs::path& checkpoint, const Shape& shape, const Variant& v) {
  Run run(checkpoint, shape, v, trainer_options(shape));
  auto& model = run.model;
  const double before = reset_peak(shape.device);
  const auto report = run.trainer.step(1);
  Row row{.name = v.name, .dtype = v.dtype};
  row.peak_gib = peak_gib(shape.device);
  row.added_gib = row.peak_gib - before;
  row.step_seconds = report.seconds;
  for (const auto& [name, value] : report.scalars) {
    if (name.starts_with("timing_s/")) row.timing[name.substr(9)] = value;
    if (name.starts_with("training/rollout_")) row.mismatch[name.substr(17)] = value;
  }
  row.generated_tokens = static_cast<double>(shape.group * shape.completion);
  row.trained_tokens = static_cast<double>(shape.group * (shape.prompt + shape.completion));
  row.update_flops = update_flops(model, shape.group, shape.prompt, shape.completion, v);
  return row;
}

/// The update phase alone on a batch of random completions: policy_update's memory at longer completions.
Row update_only(const fs::path& checkpoint, const Shape& shape, const Variant& v) {
  auto options = trainer_options(shape);
  options.loss.beta = 0.0;
  options.kl_in_reward.beta = 0.0;
  Run run(checkpoint, shape, v, options);
  auto& model = run.model;
  auto& source = run.source;
  auto& trainer = run.trainer;
  torch::manual_seed(3);
  grpo::train::StepBatch batch;
  batch.step = 1;
  batch.group_size = shape.group;
  batch.max_new_tokens = shape.memory_completion;
  batch.problems = source.train_batch(1, 1);
  auto& r = batch.rollout;
  r.prompt_ids = torch::tensor(source.prompt).unsqueeze(0).repeat({shape.group, 1});
  r.prompt_mask = torch::ones_like(r.prompt_ids);
  r.completion_ids = torch::randint(0, model->config().vocab_size, {shape.group, shape.memory_completion}, torch::kInt64);
  r.completion_mask = torch::ones_like(r.completion_ids);
  r.truncated = torch::zeros({shape.group}, torch::kBool);
  r.sampler_log_probs = torch::zeros({shape.group, shape.memory_completion});
  for (int64_t g = 0; g < shape.group; ++g) {
    batch.completions.push_back({.group = 0});
    batch.totals.push_back(static_cast<float>(g % 2));
  }
  const auto advantages = trainer.advantages(batch);
  trainer.policy_update(batch, advantages);  // creates AdamW's state
  const double before = reset_peak(shape.device);
  const auto start = Clock::now();
  const auto update = trainer.policy_update(batch, advantages);
  sync(shape.device);
  Row row{.name = v.name, .dtype = v.dtype};
  row.step_seconds = since(start);
  row.peak_gib = peak_gib(shape.device);
  row.added_gib = row.peak_gib - before;
  row.timing = {{"update_actor", row.step_seconds},
                {"update_actor/forward", update.forward_seconds},
                {"update_actor/backward", update.backward_seconds},
                {"update_actor/optimizer", update.optimizer_seconds}};
  row.trained_tokens = static_cast<double>(shape.group * (shape.prompt + shape.memory_completion));
  row.update_flops = update_flops(model, shape.group, shape.prompt, shape.memory_completion, v);
  return row;
}

/// The plain eager composition of the same step (fp32).
Row eager_step(const fs::path& checkpoint, const Shape& shape) {
  const torch::Device device = shape.device;
  auto model = grpo::models::from_pretrained(checkpoint, torch::kFloat32);
  model->to(device);
  model->set_attention_implementation(grpo::models::AttentionImplementation::eager);
  auto reference = grpo::models::deep_copy(model);
  for (auto& p : reference->parameters()) p.set_requires_grad(false);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-6).weight_decay(0.0));
  SyntheticSource source(shape.prompt);
  const int64_t batch = shape.group, tp = shape.prompt, tc = shape.completion;
  const double before = reset_peak(device);
  Row row{.name = "eager_fp32", .dtype = torch::kFloat32};
  const auto step_start = Clock::now();
  // Seconds since `start`, the device's queued work included.
  auto elapsed = [&](Clock::time_point start) {
    sync(device);
    return since(start);
  };
  // Generation: KV cache, full logits of the last position, softmax, multinomial.
  auto start = Clock::now();
  auto prompt = torch::tensor(source.prompt).unsqueeze(0).repeat({batch, 1}).to(device);
  const auto on_device = torch::TensorOptions().dtype(torch::kInt64).device(device);
  torch::Tensor completion;
  {
    torch::NoGradGuard no_grad;
    grpo::models::KvCache cache;
    auto mask = torch::ones({batch, tp}, on_device);
    auto input = prompt;
    std::vector<torch::Tensor> tokens;
    for (int64_t t = 0; t < tc; ++t) {
      auto logits = model->forward_step(input, mask, cache).select(1, -1);
      auto token = torch::multinomial(torch::softmax(logits, -1), 1);
      tokens.push_back(token);
      input = token;
      mask = torch::cat({mask, torch::ones({batch, 1}, on_device)}, 1);
    }
    completion = torch::cat(tokens, 1);
  }
  row.timing["gen"] = elapsed(start);
  start = Clock::now();
  auto rewards = (completion.remainder(2) == 0).to(torch::kFloat32).mean(1);
  auto advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-4);
  row.timing["reward"] = elapsed(start);
  const auto ids = torch::cat({prompt, completion}, 1);
  auto completion_log_probs = [&](grpo::models::CausalLM& m) {
    auto logits = m->forward(ids).narrow(1, tp - 1, tc);
    return torch::log_softmax(logits, -1).gather(-1, completion.unsqueeze(-1)).squeeze(-1);
  };
  torch::Tensor old, ref;
  {
    torch::NoGradGuard no_grad;
    start = Clock::now();
    old = completion_log_probs(model);
    row.timing["old_log_prob"] = elapsed(start);
    start = Clock::now();
    ref = completion_log_probs(reference);
    row.timing["ref"] = elapsed(start);
  }
  // Two micro-batches of 4 sequences (gradient accumulation), as the trainer runs.
  const int64_t micro = batch / 2;
  for (int64_t begin = 0; begin < batch; begin += micro) {
    start = Clock::now();
    auto part = ids.narrow(0, begin, micro);
    auto logits = model->forward(part).narrow(1, tp - 1, tc);
    auto log_probs = torch::log_softmax(logits, -1).gather(-1, completion.narrow(0, begin, micro).unsqueeze(-1)).squeeze(-1);
    auto loss = grpo::bench::eager_dapo_loss(log_probs, old.narrow(0, begin, micro), ref.narrow(0, begin, micro),
                                             advantages.narrow(0, begin, micro), torch::ones_like(log_probs), 0.2,
                                             0.28, 0.04) * 0.5;
    row.timing["update_actor/forward"] += elapsed(start);
    start = Clock::now();
    loss.backward();
    row.timing["update_actor/backward"] += elapsed(start);
  }
  start = Clock::now();
  torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
  optimizer.step();
  row.timing["update_actor/optimizer"] = elapsed(start);
  row.timing["update_actor"] =
      row.timing["update_actor/forward"] + row.timing["update_actor/backward"] + row.timing["update_actor/optimizer"];
  row.step_seconds = elapsed(step_start);
  row.peak_gib = peak_gib(device);
  row.added_gib = row.peak_gib - before;
  row.generated_tokens = static_cast<double>(batch * tc);
  row.trained_tokens = static_cast<double>(batch * (tp + tc));
  row.update_flops = update_flops(model, batch, tp, tc, {"eager_fp32", torch::kFloat32});
  return row;
}

void print(const Row& row, const std::map<torch::ScalarType, double>& peak) {
  auto t = [&](const char* phase) {
    auto it = row.timing.find(phase);
    return it == row.timing.end() ? std::string("-") : fmt::format("{:.1f}", it->second);
  };
  const double update = row.timing.count("update_actor") ? row.timing.at("update_actor") : 0.0;
  const double gen = row.timing.count("gen") ? row.timing.at("gen") : 0.0;
  const double achieved = update > 0 ? row.update_flops / update : 0.0;
  fmt::print("{:<22} {:>7.1f} {:>6} {:>6} {:>6} {:>6} {:>7} {:>6} {:>6} {:>6} {:>7.2f} {:>6.2f} {:>8} {:>8} {:>6.1f}%\n",
             row.name, row.step_seconds, t("gen"), t("reward"), t("old_log_prob"), t("ref"), t("update_actor"),
             t("update_actor/forward"), t("update_actor/backward"), t("update_actor/optimizer"), row.peak_gib,
             row.added_gib,
             gen > 0 ? fmt::format("{:.1f}", row.generated_tokens / gen) : "-",
             update > 0 ? fmt::format("{:.0f}", row.trained_tokens / update) : "-",
             100.0 * achieved / peak.at(row.dtype));
}

}  // namespace

int main(int argc, char** argv) {
  Shape shape;
  std::set<std::string> only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--layers") shape.layers = std::stoll(value);
    else if (flag == "--completion") shape.completion = std::stoll(value);
    else if (flag == "--memory-completion") shape.memory_completion = std::stoll(value);
    else if (flag == "--device") shape.device = torch::Device(value);
    else if (flag == "--only") {
      for (const std::string& name : grpo::bench::split_commas(value)) only.insert(name);
    } else {
      fmt::print(stderr, "bench_step: unknown flag {} (--layers, --completion, --memory-completion, --only, --device)\n", flag);
      return 2;
    }
  }
  if (shape.device.is_cuda()) {
#ifndef GRPO_WITH_CUDA
    fmt::print(stderr, "bench_step: --device {}: this build has no CUDA code paths (configure a CUDA LibTorch with "
               "-DGRPO_TORCH=pip; GRPO_CUDA)\n", shape.device.str());
    return 2;
#endif
    if (!torch::cuda::is_available()) {
      fmt::print(stderr, "bench_step: --device {}: no GPU is visible to this process\n", shape.device.str());
      return 2;
    }
    if (!shape.device.has_index()) shape.device.set_index(0);
  }
  grpo::bench::use_all_hardware_threads();
  const fs::path checkpoint = fs::temp_directory_path() / fmt::format("grpo_bench_step_{}", ::getpid());
  grpo::models::ModelConfig config;  // Qwen2.5-0.5B's shape
  config.num_hidden_layers = shape.layers;
  {
    torch::manual_seed(0);
    grpo::models::CausalLM model(config, grpo::models::WeightInit::normal, torch::kBFloat16);
    grpo::models::save_pretrained(model, checkpoint);
  }
  const std::map<torch::ScalarType, double> peak = {{torch::kFloat32, matmul_peak(config, torch::kFloat32, shape.device)},
                                                   {torch::kBFloat16, matmul_peak(config, torch::kBFloat16, shape.device)}};
  fmt::print("Qwen2.5-0.5B shape, {} layers; prompt {}, G = {} × {} tokens; {} on {} ({} CPU threads); matrix "
             "products at the model's shapes: fp32 {:.0f} GFLOP/s, bf16 {:.0f} GFLOP/s\n",
             shape.layers, shape.prompt, shape.group, shape.completion, TORCH_VERSION, shape.device.str(),
             at::get_num_threads(), peak.at(torch::kFloat32) / 1e9, peak.at(torch::kBFloat16) / 1e9);
  fmt::print("{:<22} {:>7} {:>6} {:>6} {:>6} {:>6} {:>7} {:>6} {:>6} {:>6} {:>7} {:>6} {:>8} {:>8} {:>7}\n", "config",
             "step_s", "gen", "reward", "old_lp", "ref", "update", "fwd", "bwd", "optim", "peak_GB", "+GB", "gen_tok/s",
             "upd_tok/s", "of_peak");
  auto wanted = [&](const std::string& name) { return only.empty() || only.count(name); };
  std::map<std::string, Row> rows;
  auto keep = [&](Row row) {
    print(row, peak);
    if (!row.mismatch.empty()) {
      fmt::print("  {:<20} sampler vs trainer probabilities (verl's debug metrics): |diff| max {:.2e}, mean {:.2e}, "
                 "std {:.2e}; pearson {:.6f}\n", "", row.mismatch["probs_diff_max"], row.mismatch["probs_diff_mean"],
                 row.mismatch["probs_diff_std"], row.mismatch["actor_probs_pearson_corr"]);
    }
    std::fflush(stdout);
    rows.emplace(row.name, std::move(row));
  };
  if (wanted("eager_fp32")) keep(eager_step(checkpoint, shape));
  for (const Variant& v : {Variant{"fp32", torch::kFloat32}, Variant{"bf16", torch::kBFloat16},
                           Variant{"bf16_ckpt", torch::kBFloat16, true}, Variant{"bf16_lora", torch::kBFloat16, false, true},
                           Variant{"bf16_lora_ckpt", torch::kBFloat16, true, true},
                           Variant{"bf16_compensated", torch::kBFloat16, false, false,
                                   grpo::train::OptimizerPrecision::compensated}}) {
    if (wanted(v.name)) keep(trainer_step(checkpoint, shape, v));
  }
  const std::string update_plain = fmt::format("update_bf16_{}", shape.memory_completion);
  const std::string update_ckpt = fmt::format("update_bf16_ckpt_{}", shape.memory_completion);
  const std::string update_plain_compensated = update_plain + "_compensated";
  const std::string update_ckpt_compensated = update_ckpt + "_compensated";
  constexpr auto compensated = grpo::train::OptimizerPrecision::compensated;
  if (wanted(update_plain)) keep(update_only(checkpoint, shape, {update_plain, torch::kBFloat16}));
  if (wanted(update_ckpt)) keep(update_only(checkpoint, shape, {update_ckpt, torch::kBFloat16, true}));
  if (wanted(update_plain_compensated)) {
    keep(update_only(checkpoint, shape, {update_plain_compensated, torch::kBFloat16, false, false, compensated}));
  }
  if (wanted(update_ckpt_compensated)) {
    keep(update_only(checkpoint, shape, {update_ckpt_compensated, torch::kBFloat16, true, false, compensated}));
  }
  fs::remove_all(checkpoint);

  auto ratio = [&](const std::string& a, const std::string& b, auto field, const char* what) {
    if (rows.count(a) && rows.count(b)) fmt::print("{:<60} {:.2f}\n", what, field(rows.at(a)) / field(rows.at(b)));
  };
  auto seconds = [](const Row& r) { return r.step_seconds; };
  auto memory = [](const Row& r) { return r.peak_gib; };
  auto added = [](const Row& r) { return r.added_gib; };
  const double gemm_ratio = peak.at(torch::kBFloat16) / peak.at(torch::kFloat32);
  fmt::print("{:<60} {:.2f}\n", "matrix-product speed-up, bf16 over fp32, at the model's shapes", gemm_ratio);
  ratio("fp32", "bf16", seconds, "step speed-up, bf16 mixed precision over fp32");
  if (rows.count("fp32") && rows.count("bf16")) {
    fmt::print("{:<60} {:.2f}\n", "  as a share of the matrix-product speed-up (goal >= 0.8)",
               rows.at("fp32").step_seconds / rows.at("bf16").step_seconds / gemm_ratio);
  }
  ratio("eager_fp32", "fp32", seconds, "step speed-up, fp32 library over eager fp32");
  ratio("eager_fp32", "bf16", seconds, "step speed-up, bf16 library over eager fp32");
  ratio(update_ckpt, update_plain, memory,
        fmt::format("peak memory, checkpointing / none at {} tokens (target <= 0.5)", shape.memory_completion).c_str());
  ratio(update_ckpt, update_plain, added,
        fmt::format("memory added by the update, checkpointing / none at {} tokens", shape.memory_completion).c_str());
  ratio(update_ckpt_compensated, update_plain_compensated, memory,
        fmt::format("peak memory, checkpointing / none at {} tokens, compensated AdamW (target <= 0.5)",
                    shape.memory_completion).c_str());
  ratio(update_ckpt_compensated, update_ckpt, memory,
        fmt::format("peak memory, compensated AdamW / fp32 masters, checkpointed, {} tokens", shape.memory_completion)
            .c_str());
  ratio(update_ckpt_compensated, update_plain, memory,
        fmt::format("peak memory, checkpointed compensated / plain fp32-master bf16 at {} tokens",
                    shape.memory_completion).c_str());
  ratio("bf16", "bf16_compensated", seconds, "step speed, compensated AdamW against fp32 masters (bf16)");
  ratio("bf16_lora", "bf16", memory, "peak memory, LoRA / full fine-tuning, bf16 (target <= 0.4)");
  ratio("bf16_lora_ckpt", "bf16_ckpt", memory, "peak memory, LoRA / full fine-tuning, bf16, both checkpointed");
  ratio("bf16_lora", "fp32", memory, "peak memory, bf16 LoRA / fp32 full fine-tuning");
  return 0;
}
