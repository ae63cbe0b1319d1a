// SPDX-License-Identifier: Apache-2.0
// R1-Zero with GRPO: sample G completions per prompt, score them with rule-based rewards, turn the rewards into
// group-relative advantages and take clipped policy-gradient steps. The run is grpo::train::GrpoTrainer over a prompt
// source and a scorer; this file is the flags, the built-in tiny task and the loop (evaluate, save, resume).
//
//   r1_zero                                  the built-in tiny task (learns in minutes on 2 CPU cores)
//   r1_zero --model DIR --data FILE.jsonl    any Qwen2/Qwen3/Llama Hugging Face checkpoint on a real data set
//   r1_zero --config run.yaml --steps 50     settings from a YAML/JSON file (the command line wins)
//
// Every run writes the settings in effect (after recipe, config, --set and flags) to <output-dir>/config.yaml; that
// file given to --config runs the same run again (values the loss recipe supplied are written as comments).
//
// The tiny task asks "max d1 d2 d3 d4 d5 =" and wants "<think> </think> <answer> d </answer>" with d the largest
// digit. Its starting policy is a Qwen2-shaped model built in code and warmed up to speak the format with a digit
// copied from the prompt that is never the largest: it attends to its input but starts near 5% accuracy, and never
// sees a correct answer before GRPO. Two choices keep GRPO from collapsing onto a constant answer: the warm-up answers
// depend on the prompt, and the largest digit is uniform over 1–9, so no constant is right more than 1 time in 9
// (with uniform digits "9" is the maximum 41% of the time and the policy settles there).
#include <grpo/grpo.hpp>

#include "r1_zero_settings.hpp"

#include <fmt/format.h>

#include <limits>
#include <random>
#include <set>
#include <thread>

namespace {

namespace fs = std::filesystem;
using grpo::train::Problem;

// ---------------------------------------------------------------------------------------------------------------
// The tiny task: a PromptSource built in code.

/// "max d1 d2 d3 d4 d5 =" → "<think> </think> <answer> d </answer> <eos>". One problem in eight (by a hash of its
/// digits) is held out and never trained on.
class TinyTask final : public grpo::train::PromptSource {
 public:
  static constexpr std::int64_t kMax = 10, kEquals = 11, kThinkOpen = 12, kThinkClose = 13, kAnswerOpen = 14,
                                kAnswerClose = 15, kEos = 16, kPad = 17, kBos = 18, kVocab = 19, kDigits = 5;

  TinyTask(std::uint64_t seed, std::int64_t held_out) : seed_(seed) {
    std::mt19937_64 rng(seed ^ 0x5eedULL);
    std::set<std::array<std::int64_t, kDigits>> seen;  // distinct problems
    while (static_cast<std::int64_t>(held_out_.size()) < held_out) {
      const auto digits = random_digits(rng);
      if (is_held_out(digits) && seen.insert(digits).second) held_out_.push_back(problem(digits));
    }
  }

  /// Stateless across steps (a function of the seed, the step and the round within it), so a resumed run needs no
  /// saved state: rounds restart at 0 with each step.
  std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) override {
    round_ = step == last_step_ ? round_ + 1 : 0;
    last_step_ = step;
    std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(step) +
                        round_ * 0xbf58476d1ce4e5b9ULL);
    std::vector<Problem> out;
    while (static_cast<std::int64_t>(out.size()) < count) {
      const auto digits = random_digits(rng);
      if (!is_held_out(digits)) out.push_back(problem(digits));
    }
    return out;
  }
  const std::vector<Problem>& held_out() const override { return held_out_; }

  std::string decode(std::span<const std::int64_t> ids) const override {
    static constexpr const char* kWords[] = {"0",       "1",        "2",        "3",         "4",     "5",     "6",
                                             "7",       "8",        "9",        "max",       "=",     "<think>",
                                             "</think>", "<answer>", "</answer>", "<eos>",   "<pad>", "<bos>"};
    std::string text;
    for (const std::int64_t id : ids) {
      if (id == kEos || id == kPad || id == kBos) continue;
      GRPO_CHECK(id >= 0 && id < kVocab, "TinyTask::decode: token id {} is outside the vocabulary", id);
      text += (text.empty() ? "" : " ") + std::string(kWords[id]);
    }
    return text;
  }
  std::vector<std::int64_t> eos_token_ids() const override { return {kEos}; }
  std::int64_t pad_token_id() const override { return kPad; }
  std::vector<std::string> domain_names() const override { return {"tiny"}; }

  /// The format warm-up's target: the completion with a digit of the prompt that is not the largest.
  static std::vector<std::int64_t> wrong_completion(const Problem& p, std::mt19937_64& rng) {
    const auto digits = std::span(p.prompt_ids).subspan(2, kDigits);
    const std::int64_t largest = *std::max_element(digits.begin(), digits.end());
    std::vector<std::int64_t> wrong;
    for (const std::int64_t d : digits) {
      if (d != largest) wrong.push_back(d);
    }
    const std::int64_t pick = wrong[std::uniform_int_distribution<std::size_t>(0, wrong.size() - 1)(rng)];
    return std::vector<std::int64_t>{kThinkOpen, kThinkClose, kAnswerOpen, pick, kAnswerClose, kEos};
  }

 private:
  // The largest digit m is uniform over 1–9 (so no constant answer is right more than 1/9 of the time), at a
  // uniform position; the other four are uniform over 0..m, not all equal to m (there would be no wrong digit).
  static std::array<std::int64_t, kDigits> random_digits(std::mt19937_64& rng) {
    const std::int64_t largest = std::uniform_int_distribution<std::int64_t>(1, 9)(rng);
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, kDigits - 1)(rng);
    std::array<std::int64_t, kDigits> digits{};
    do {
      for (std::size_t i = 0; i < digits.size(); ++i)
        digits[i] = i == at ? largest : std::uniform_int_distribution<std::int64_t>(0, largest)(rng);
    } while (std::count(digits.begin(), digits.end(), largest) == kDigits);
    return digits;
  }
  // One problem in eight, by a hash of its digits (splitmix64's finaliser), so the split does not follow the digits.
  static bool is_held_out(const std::array<std::int64_t, kDigits>& digits) {
    std::uint64_t x = 0;
    for (const std::int64_t d : digits) x = 10 * x + static_cast<std::uint64_t>(d);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return ((x ^ (x >> 31)) & 7) == 0;
  }
  Problem problem(const std::array<std::int64_t, kDigits>& digits) const {
    Problem p;
    p.prompt_ids = {kBos, kMax};
    p.prompt_ids.insert(p.prompt_ids.end(), digits.begin(), digits.end());
    p.prompt_ids.push_back(kEquals);
    p.prompt_text = decode(p.prompt_ids);
    const std::string answer = std::to_string(*std::max_element(digits.begin(), digits.end()));
    p.row = std::make_shared<const grpo::rewards::Row>(grpo::rewards::Row{{"ground_truth", answer}});
    return p;
  }

  std::uint64_t seed_;
  std::vector<Problem> held_out_;
  std::int64_t last_step_ = std::numeric_limits<std::int64_t>::min();
  std::uint64_t round_ = 0;  // generation round within last_step_
};

/// The tiny task's starting policy: a 2-layer Qwen2-shaped model (hidden 64).
grpo::models::CausalLM tiny_model(std::uint64_t seed) {
  torch::manual_seed(seed);
  grpo::models::ModelConfig c;
  c.architecture = grpo::models::Architecture::qwen2;
  c.vocab_size = TinyTask::kVocab;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {TinyTask::kEos};
  return grpo::models::CausalLM(c);
}

/// Supervised warm-up on wrong answers copied from the prompt: the model learns the format and to read its input.
/// The library's SFT stage (train/sft.hpp): loss on the completion tokens only, token mean, the fused log-prob path.
void warm_up(grpo::models::CausalLM& model, TinyTask& task, std::uint64_t seed, std::int64_t steps) {
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  grpo::train::SftTrainer trainer(model, optimizer, {.max_grad_norm = 0.0});
  std::mt19937_64 rng(seed ^ 0xa11ceULL);
  for (std::int64_t step = 1; step <= steps; ++step) {
    std::vector<grpo::train::SftExample> examples;
    for (const Problem& p : task.train_batch(-step, 64)) {  // negative steps: problems GRPO never samples
      const auto completion = TinyTask::wrong_completion(p, rng);
      grpo::train::SftExample example{p.prompt_ids, std::vector<std::uint8_t>(p.prompt_ids.size(), 0)};
      example.ids.insert(example.ids.end(), completion.begin(), completion.end());
      example.loss_mask.resize(example.ids.size(), 1);
      examples.push_back(std::move(example));
    }
    trainer.step(grpo::train::make_sft_batches(examples, {.batch_size = 64, .pad_token_id = TinyTask::kPad}));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Data runs: the prompt source and the scorer from the settings.

/// The R1-Zero prompt (DeepSeek-R1, Table 1) as a system message, for data sets without their own.
constexpr const char* kR1ZeroSystemPrompt =
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.";

std::unique_ptr<grpo::train::MixedPromptSource> data_source(const r1_zero::Settings& s, const r1_zero::RunConfig& run,
                                                             grpo::text::Tokenizer tokenizer,
                                                             std::vector<std::int64_t> eos) {
  grpo::train::MixedPromptSourceOptions o;
  if (!s.data_path.empty()) o.files.push_back(s.data_path);
  for (const auto& d : run.domains) o.domains.push_back(d.prompt_domain());
  o.dataset.format = grpo::io::parse_dataset_format(s.data_format);
  o.dataset.on_bad_row = s.on_bad_row == "skip" ? grpo::io::BadRowPolicy::skip : grpo::io::BadRowPolicy::stop;
  o.dataset.prompt_field = s.prompt_field;
  o.dataset.answer_field = s.answer_field;
  o.dataset.system_prompt = kR1ZeroSystemPrompt;
  o.unknown_tag = s.unknown_tag;
  o.held_out = s.held_out;
  for (const std::string& file : s.validation_data) o.validation_files.emplace_back(file);
  o.seed = s.seed;
  o.curriculum = r1_zero::difficulty_schedule(s);
  o.steps = s.steps;
  if (s.curriculum_filter_window > 0) {
    o.filter = grpo::train::PassRateFilterOptions{.window = s.curriculum_filter_window,
                                                  .retire_unsolved = s.curriculum_filter_retire != "solved",
                                                  .retire_solved = s.curriculum_filter_retire != "unsolved",
                                                  .retire_steps = s.curriculum_filter_retire_steps};
  }
  return std::make_unique<grpo::train::MixedPromptSource>(std::move(o), std::move(tokenizer), std::move(eos));
}

/// The --rewards set, or each domain's own set when the config has domains.
grpo::train::StepScorer make_scorer(const r1_zero::Settings& s, const r1_zero::RunConfig& run) {
  if (run.domains.empty()) return grpo::train::StepScorer(r1_zero::make_rewards(s, run), s.overlap_scoring);
  const auto registry = grpo::rewards::RewardRegistry::with_builtins();
  std::vector<grpo::train::ScoringDomain> domains;
  for (const auto& d : run.domains) {
    if (d.rewards_json.empty()) {  // the run's rewards, whose errors name their own place
      domains.push_back(d.scoring_domain(r1_zero::make_rewards(s, run)));
      continue;
    }
    try {
      domains.push_back(d.scoring_domain(grpo::rewards::RewardSet::from_config(d.rewards_json, registry)));
    } catch (const grpo::ConfigError& e) {
      throw grpo::ConfigError(fmt::format("{}: domains.{}.rewards: {}", d.rewards_source, d.name, e.what()));
    }
  }
  return grpo::train::StepScorer(std::move(domains), s.overlap_scoring);
}

}  // namespace

int main(int argc, char** argv) try {
  grpo::use_passive_omp_wait_policy(argv);  // unless the environment sets OMP_WAIT_POLICY (omp_wait_policy.hpp)
  r1_zero::Settings s;
  CLI::App app{"GRPO R1-Zero training: the built-in tiny task, or a Hugging Face checkpoint on one or several data sets"};
  const auto flags = r1_zero::add_flags(app, s);
  CLI11_PARSE(app, argc, argv);
  r1_zero::RunConfig run = r1_zero::apply_config(app, *flags);
  r1_zero::resolve(s, run);
  // Running a run's own config.yaml again into its own directory would overwrite the run it repeats.
  const fs::path own_config = s.output_dir / "config.yaml";
  GRPO_CHECK_CONFIG(s.resume || flags->config_path.empty() || !fs::exists(own_config) ||
                        !fs::equivalent(flags->config_path, own_config),
                    "--config {} is the config.yaml of --output-dir {}: this run would overwrite the run it repeats; "
                    "give another --output-dir (or --resume to continue it)",
                    flags->config_path.string(), s.output_dir.string());
  const bool tiny = s.task == "tiny";

  // One process, or one rank of scripts/launch.sh -n N (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): each rank
  // samples its share of the P prompts; gradients and metrics are combined so a step equals one process's.
  auto group = grpo::train::ProcessGroup::from_env();
  // Threads: the tiny task's tensors are too small for intra-op threads to pay (measured: 2 threads take 2.5× as
  // long as 1 on 2 cores; use launch.sh -n 2 for both cores); a real model's matrix products want the cores.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(s.threads > 0 ? s.threads : tiny ? 1 : std::max(1, cores / group.world_size()));

  // The policy and the prompts.
  std::unique_ptr<grpo::train::PromptSource> source;
  grpo::models::CausalLM model{nullptr};
  const auto device = r1_zero::model_device(s, group);
  if (tiny) {
    auto task = std::make_unique<TinyTask>(s.seed, s.held_out);
    model = tiny_model(s.seed);
    r1_zero::check_lora_targets(model, s);  // before the warm-up's work
    warm_up(model, *task, s.seed, 150);
    source = std::move(task);
  } else {
    model = grpo::models::from_pretrained(s.model_dir, r1_zero::model_dtype(s.dtype), device);
    auto tokenizer = grpo::text::Tokenizer::from_pretrained(s.model_dir);
    source = data_source(s, run, std::move(tokenizer), model->config().eos_token_ids);
  }
  r1_zero::prepare_model(model, s, device);  // the tiny task warms up on the CPU
  grpo::train::StepScorer scorer = make_scorer(s, run);
  const grpo::train::GrpoTrainerOptions options = r1_zero::trainer_options(s, run);
  grpo::train::GrpoTrainer trainer(model, *source, scorer, group, options);

  // Resume, then the sinks (appending, so a resumed run continues its files). Rank 0 logs, evaluates and writes.
  grpo::train::CheckpointManager checkpoints({.directory = s.output_dir / "checkpoints",
                                              .keep_last = static_cast<std::size_t>(s.keep_last)});
  const std::int64_t first_step = (s.resume ? trainer.restore(checkpoints) : 0) + 1;
  const bool main_rank = group.is_main();
  if (main_rank) {
    if (first_step > 1) fmt::print("resumed from {} (step {})\n", checkpoints.latest()->path.string(), first_step - 1);
    if (!flags->roll_config_path.empty()) {
      fmt::print("--roll-config {}: {} keys not used:\n", flags->roll_config_path.string(), run.roll_unmapped.size());
      for (const std::string& line : run.roll_unmapped) fmt::print("  {}\n", line);
    }
    if (tiny && first_step == 1) fmt::print("tiny task: starting policy warmed up on wrong answers\n");
    std::int64_t total = 0, trainable = 0;
    for (const auto& p : model->parameters()) (p.requires_grad() ? trainable : total) += p.numel();
    total += trainable;
    const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
    fmt::print("model: {} parameters ({} trained{}), {} on {}{}; {} threads, OMP_WAIT_POLICY={}\n", total, trainable,
               model->lora_options() ? fmt::format(": LoRA r={} on {} modules", model->lora_options()->rank,
                                                   grpo::models::lora_modules(model).size())
                                     : "",
               s.dtype == "fp32"                          ? "fp32"
               : s.optimizer_precision == "compensated" ? s.dtype + " with compensated bf16 AdamW"
                                                        : s.dtype + " with fp32 master weights",
               model->lm_head_weight().device().str(),
               model->gradient_checkpointing() ? ", activation checkpointing" : "", at::get_num_threads(),
               wait_policy ? wait_policy : "(default)");
    fs::create_directories(s.output_dir);
    r1_zero::write_config(s.output_dir / "config.yaml", *flags, run);
    const auto mode = s.resume ? grpo::train::OpenMode::append : grpo::train::OpenMode::truncate;
    if (s.resume) {  // steps after the checkpoint run again: their first records go
      for (const char* file : {"metrics.jsonl", "completions.jsonl"}) {
        grpo::train::drop_records_after(s.output_dir / file, first_step - 1);
      }
    }
    trainer.add_callback(std::make_shared<grpo::train::MetricsLog>(
        s.output_dir / "metrics.jsonl", s.tensorboard ? s.output_dir / "tensorboard" : fs::path(), mode, first_step));
    trainer.add_callback(
        std::make_shared<grpo::train::CompletionLog>(s.output_dir / "completions.jsonl", s.log_completions, mode));
    trainer.add_callback(std::make_shared<grpo::train::ProgressLog>(s.log_every, first_step, s.steps));
  }

  std::vector<std::pair<std::int64_t, double>> curve;  // held-out accuracy by step
  if (first_step == 1 && main_rank) curve.emplace_back(0, trainer.evaluate(0).all.mean_accuracy);
  for (std::int64_t step = first_step; step <= s.steps; ++step) {
    trainer.step(step);
    // Evaluate (rank 0; the others wait at the next collective) and checkpoint (rank 0 writes).
    const bool last = step == s.steps;
    if (main_rank && ((s.eval_every > 0 && step % s.eval_every == 0) || last)) {
      curve.emplace_back(step, trainer.evaluate(step).all.mean_accuracy);
    }
    if ((s.save_every > 0 && step % s.save_every == 0) || last) trainer.save(checkpoints, step);
  }
  if (main_rank && model->lora_options()) {  // the adapter alone, as peft saves it
    grpo::models::save_lora_adapter(model, s.output_dir / "adapter", s.model_dir.string());
  }
  if (main_rank) {
    fmt::print("held-out accuracy by step:");
    for (const auto& [step, accuracy] : curve) fmt::print("  {}: {:.3f}", step, accuracy);
    fmt::print("\n");
  }
  return 0;
} catch (const grpo::Error& e) {
  fmt::print(stderr, "r1_zero: {}\n", e.what());
  return 1;
}
