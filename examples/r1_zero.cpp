// SPDX-License-Identifier: Apache-2.0
// R1-Zero with GRPO: sample G completions per prompt, score them with rule-based rewards, turn the rewards into
// group-relative advantages and take clipped policy-gradient steps. Everything below is library parts put together
// in a plain loop; copy it and change what you need.
//
//   r1_zero                                  the built-in tiny task (learns in minutes on 2 CPU cores)
//   r1_zero --model DIR --data FILE.jsonl    any Qwen2/Qwen3/Llama Hugging Face checkpoint on a real data set
//   r1_zero --config run.json --steps 50     flags in a JSON file; the command line wins
//
// The tiny task asks "max d1 d2 d3 d4 d5 =" and wants "<think> </think> <answer> d </answer>" with d the largest
// digit. Its starting policy is a Qwen2-shaped model built in code and warmed up to speak the format with a digit
// copied from the prompt that is never the largest: it attends to its input but starts near 5% accuracy, and never
// sees a correct answer before GRPO. Two choices keep GRPO from collapsing onto a constant answer (DESIGN.md §7):
// the warm-up answers depend on the prompt, and the largest digit is uniform over 1–9, so no constant is right more
// than 1 time in 9 (with uniform digits "9" is the maximum 41% of the time and the policy settles there).
#include <grpo/grpo.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <thread>

namespace {

namespace fs = std::filesystem;
using grpo::rewards::Completion;
using grpo::rewards::Row;

// ---------------------------------------------------------------------------------------------------------------
// Settings: every flag, with its default. A JSON config file sets the same names (with '_' or '-').

struct Settings {
  // What to train.
  std::string task = "tiny";
  fs::path model_dir, data_path;
  std::string data_format = "detect", prompt_field, answer_field, on_bad_row = "stop";
  std::int64_t held_out = 256;  // problems kept out of training for evaluation
  // Rollouts.
  std::int64_t steps = 200, prompts_per_step = 32, group_size = 8, max_new_tokens = 0;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0;
  std::int64_t top_k = 0;
  // Objective.
  std::string loss = "dapo", advantage = "grpo", kl_estimator = "k3";
  double beta = 0.0, epsilon = 0.2, epsilon_high = 0.28, entropy_coef = 0.0;
  std::int64_t mu = 1;              // optimisation passes over each batch (μ); > 1 uses old log-probs
  std::int64_t micro_batches = 1;   // gradient accumulation: the batch is split, one optimizer step per pass
  std::int64_t ref_sync_every = 0;  // TR-DPO: move the reference towards the policy every N steps (0 = never)
  double ref_sync_alpha = 1.0;
  std::vector<std::string> rewards = {"accuracy", "format"};
  std::vector<double> reward_weights = {1.0, 0.2};
  fs::path reward_config;  // a JSON reward list (overrides --rewards)
  // Optimiser.
  double lr = 1e-3, weight_decay = 0.0, max_grad_norm = 1.0;
  std::int64_t warmup_steps = 0;
  std::string lr_decay = "constant";
  // Output.
  fs::path output_dir = "runs/r1_zero";
  std::int64_t log_every = 10, log_completions = 4, save_every = 50, keep_last = 2;
  std::int64_t eval_every = 25, eval_samples = 4, eval_problems = 0;
  bool resume = false, tensorboard = true;
  std::uint64_t seed = 1;
  int threads = 0;
};

void add_flags(CLI::App& app, Settings& s) {
  app.add_option("--task", s.task, "tiny (built-in) or data (--model + --data; implied by --model)")
      ->check(CLI::IsMember({"tiny", "data"}));
  app.add_option("--model", s.model_dir, "Hugging Face model directory (config.json, safetensors, tokenizer.json)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--data", s.data_path, "JSON/JSONL data set (ROLL, TRL/NuminaMath, GSM8K or --data-format fields)")
      ->check(CLI::ExistingFile);
  app.add_option("--data-format", s.data_format, "detect, roll, trl, gsm8k or fields");
  app.add_option("--prompt-field", s.prompt_field, "with --data-format fields: the prompt's field");
  app.add_option("--answer-field", s.answer_field, "with --data-format fields: the gold answer's field");
  app.add_option("--on-bad-row", s.on_bad_row, "stop or skip a malformed data row")->check(CLI::IsMember({"stop", "skip"}));
  app.add_option("--held-out", s.held_out, "problems kept out of training for evaluation")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", s.steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--prompts", s.prompts_per_step, "prompts per step (P)")->check(CLI::PositiveNumber);
  app.add_option("--group-size", s.group_size, "completions per prompt (G)")->check(CLI::Range(2, 1024));
  app.add_option("--max-new-tokens", s.max_new_tokens, "completion length limit (0: 8 tiny, 512 data)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", s.temperature, "sampling temperature (also divides the trainer's logits)")
      ->check(CLI::Range(1e-3, 10.0));
  app.add_option("--top-p", s.top_p, "nucleus sampling")->check(CLI::Range(1e-6, 1.0));
  app.add_option("--top-k", s.top_k, "top-k sampling (0 = off)")->check(CLI::NonNegativeNumber);
  app.add_option("--min-p", s.min_p, "min-p sampling (0 = off)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--loss", s.loss, "loss recipe: grpo, dr_grpo, dapo, gspo or cispo");
  app.add_option("--advantage", s.advantage, "advantage estimator (grpo, dr_grpo, rloo, reinforce_pp_baseline, gpg, pass_at_k, opo, ...)");
  app.add_option("--beta", s.beta, "KL coefficient to the reference policy (0 = no reference)")->check(CLI::NonNegativeNumber);
  app.add_option("--kl-estimator", s.kl_estimator, "k1, k2, k3, low_var_kl, ...");
  app.add_option("--epsilon", s.epsilon, "clip range below (and above, without --epsilon-high)")->check(CLI::NonNegativeNumber);
  app.add_option("--epsilon-high", s.epsilon_high, "clip range above (DAPO clip-higher)")->check(CLI::NonNegativeNumber);
  app.add_option("--entropy-coef", s.entropy_coef, "entropy bonus coefficient");
  app.add_option("--mu", s.mu, "optimisation passes per batch (μ)")->check(CLI::PositiveNumber);
  app.add_option("--micro-batches", s.micro_batches, "gradient accumulation: micro-batches per step")
      ->check(CLI::PositiveNumber);
  app.add_option("--ref-sync-every", s.ref_sync_every, "reference update period in steps (0 = frozen)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ref-sync-alpha", s.ref_sync_alpha, "reference update mix α (1 = copy)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--rewards", s.rewards, "registry reward names")->delimiter(',');
  app.add_option("--reward-weights", s.reward_weights, "one weight per reward")->delimiter(',');
  app.add_option("--reward-config", s.reward_config, "JSON reward list (overrides --rewards)")->check(CLI::ExistingFile);
  app.add_option("--lr", s.lr, "AdamW learning rate")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", s.weight_decay, "AdamW weight decay")->check(CLI::NonNegativeNumber);
  app.add_option("--max-grad-norm", s.max_grad_norm, "gradient clipping (0 = off)")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", s.warmup_steps, "linear learning-rate warm-up")->check(CLI::NonNegativeNumber);
  app.add_option("--lr-decay", s.lr_decay, "constant, linear or cosine")->check(CLI::IsMember({"constant", "linear", "cosine"}));
  app.add_option("--output-dir", s.output_dir, "metrics, TensorBoard events, samples and checkpoints");
  app.add_option("--log-every", s.log_every, "console line period in steps")->check(CLI::PositiveNumber);
  app.add_option("--log-completions", s.log_completions, "completions per step written to completions.jsonl")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--save-every", s.save_every, "checkpoint period in steps (0 = only at the end)")->check(CLI::NonNegativeNumber);
  app.add_option("--keep-last", s.keep_last, "checkpoints kept")->check(CLI::NonNegativeNumber);
  app.add_option("--eval-every", s.eval_every, "evaluation period in steps (0 = start and end only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval-samples", s.eval_samples, "samples per held-out problem (k of pass@k and maj@k)")
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-problems", s.eval_problems, "held-out problems evaluated (0 = all)")->check(CLI::NonNegativeNumber);
  app.add_flag("--resume,!--no-resume", s.resume, "continue from the newest checkpoint in --output-dir");
  app.add_flag("--tensorboard,!--no-tensorboard", s.tensorboard, "write TensorBoard event files");
  app.add_option("--seed", s.seed, "seed of everything random");
  app.add_option("--threads", s.threads, "intra-op threads (0 = 1 for the tiny task, else cores / processes)")->check(CLI::NonNegativeNumber);
}

// Applies a JSON config file to the flags the command line left unset; errors name the file, line and field.
void apply_config_file(CLI::App& app, const fs::path& path) {
  for (const grpo::io::ConfigField& field : grpo::io::read_json_config(path)) {
    std::string flag = "--" + field.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    CLI::Option* option = app.get_option_no_throw(flag);
    if (option == nullptr || flag == "--config") {
      throw grpo::ConfigError(fmt::format("{}: unknown field '{}' (run with --help for the flags)", field.source, field.name));
    }
    if (option->count() > 0) continue;  // given on the command line
    try {
      option->add_result(field.values);
      option->run_callback();
    } catch (const CLI::Error& e) {
      throw grpo::ConfigError(fmt::format("{}: field '{}': {}", field.source, field.name, e.what()));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Tasks: prompts as token ids, the dataset row the rewards judge against, and the text of completions.

struct Problem {
  std::vector<std::int64_t> prompt_ids;
  std::string prompt_text;
  std::shared_ptr<const Row> row;
};

class Task {
 public:
  virtual ~Task() = default;
  /// The P training problems of `step` (a pure function of seed and step, so a resumed run sees the same data).
  virtual std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) const = 0;
  virtual const std::vector<Problem>& held_out() const = 0;
  virtual std::string decode(std::span<const std::int64_t> ids) const = 0;
  virtual std::vector<std::int64_t> eos_token_ids() const = 0;
  virtual std::int64_t pad_token_id() const = 0;
};

std::shared_ptr<const Row> gold_row(std::string answer) {
  return std::make_shared<const Row>(Row{{"ground_truth", std::move(answer)}});
}

/// "max d1 d2 d3 d4 d5 =" → "<think> </think> <answer> d </answer> <eos>". One problem in eight (by a hash of its
/// digits) is held out and never trained on.
class TinyTask final : public Task {
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

  std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) const override {
    std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(step));
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
    p.row = gold_row(std::to_string(*std::max_element(digits.begin(), digits.end())));
    return p;
  }

  std::uint64_t seed_;
  std::vector<Problem> held_out_;
};

/// The R1-Zero prompt (DeepSeek-R1, Table 1) as a system message, for data sets without their own.
constexpr const char* kR1ZeroSystemPrompt =
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.";

/// A JSON/JSONL data set rendered through the model's chat template and tokenizer.
class DatasetTask final : public Task {
 public:
  DatasetTask(const Settings& s, grpo::text::Tokenizer tokenizer, std::vector<std::int64_t> eos_ids)
      : tokenizer_(std::move(tokenizer)), eos_ids_(std::move(eos_ids)), seed_(s.seed) {
    if (eos_ids_.empty() && tokenizer_.special_token_ids().eos) eos_ids_.push_back(*tokenizer_.special_token_ids().eos);
    GRPO_CHECK_CONFIG(!eos_ids_.empty(), "{}: neither config.json (eos_token_id) nor the tokenizer names an EOS token",
                      s.model_dir.string());
    grpo::io::DatasetOptions options;
    options.format = grpo::io::parse_dataset_format(s.data_format);
    options.on_bad_row = s.on_bad_row == "skip" ? grpo::io::BadRowPolicy::skip : grpo::io::BadRowPolicy::stop;
    options.prompt_field = s.prompt_field;
    options.answer_field = s.answer_field;
    options.system_prompt = kR1ZeroSystemPrompt;
    const auto data = grpo::io::Dataset::load(s.data_path, options);
    if (data.skipped_rows() > 0) fmt::print("{}: skipped {} malformed rows\n", s.data_path.string(), data.skipped_rows());
    GRPO_CHECK_CONFIG(data.size() > static_cast<std::size_t>(s.held_out),
                      "{}: {} rows leave none for training after --held-out {}", s.data_path.string(), data.size(),
                      s.held_out);
    auto split = data.split(static_cast<std::size_t>(s.held_out), s.seed);
    train_ = std::move(split.train);
    for (const auto& example : split.held_out.examples()) held_out_.push_back(problem(example));
    pad_ = tokenizer_.special_token_ids().pad.value_or(static_cast<std::int32_t>(eos_ids_.front()));
  }

  std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) const override {
    // Epoch e is the training set shuffled with seed + e; step s takes the next `count` problems.
    std::vector<Problem> out;
    const auto n = static_cast<std::int64_t>(train_.size());
    for (std::int64_t i = (step - 1) * count; i < step * count; ++i) {
      const std::int64_t epoch = i / n;
      if (epoch != cached_epoch_) {
        epoch_order_ = train_.shuffled(seed_ + static_cast<std::uint64_t>(epoch));
        cached_epoch_ = epoch;
      }
      out.push_back(problem(epoch_order_[static_cast<std::size_t>(i % n)]));
    }
    return out;
  }
  const std::vector<Problem>& held_out() const override { return held_out_; }
  std::string decode(std::span<const std::int64_t> ids) const override {
    const std::vector<std::int32_t> narrow(ids.begin(), ids.end());
    return tokenizer_.decode(narrow, {.skip_special_tokens = true});
  }
  std::vector<std::int64_t> eos_token_ids() const override { return eos_ids_; }
  std::int64_t pad_token_id() const override { return pad_; }

 private:
  Problem problem(const grpo::io::Example& example) const {
    Problem p;
    p.prompt_text = tokenizer_.chat_template().render(example.prompt, {.add_generation_prompt = true});
    const auto ids = tokenizer_.encode(p.prompt_text, {.add_special_tokens = false});
    p.prompt_ids.assign(ids.begin(), ids.end());
    p.row = example.row;
    return p;
  }

  grpo::text::Tokenizer tokenizer_;
  std::vector<std::int64_t> eos_ids_;
  std::uint64_t seed_;
  grpo::io::Dataset train_;
  std::vector<Problem> held_out_;
  std::int64_t pad_ = 0;
  mutable grpo::io::Dataset epoch_order_;
  mutable std::int64_t cached_epoch_ = -1;
};

// ---------------------------------------------------------------------------------------------------------------
// The tiny task's starting policy.

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
void warm_up(grpo::models::CausalLM& model, const TinyTask& task, std::uint64_t seed, std::int64_t steps) {
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  std::mt19937_64 rng(seed ^ 0xa11ceULL);
  for (std::int64_t step = 1; step <= steps; ++step) {
    std::vector<torch::Tensor> rows;
    for (const Problem& p : task.train_batch(-step, 64)) {  // negative steps: problems GRPO never samples
      const auto completion = TinyTask::wrong_completion(p, rng);
      auto ids = p.prompt_ids;
      ids.insert(ids.end(), completion.begin(), completion.end());
      rows.push_back(torch::tensor(ids, torch::kInt64));
    }
    const auto ids = torch::stack(rows);
    const int64_t prompt = TinyTask::kDigits + 3, completion = ids.size(1) - prompt;
    const auto logits = model->forward(ids).narrow(1, prompt - 1, completion);
    const auto loss = -grpo::token_log_probs(logits, ids.narrow(1, prompt, completion)).log_probs.mean();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Rollouts, rewards and evaluation.

std::vector<std::vector<std::int64_t>> prompt_ids(const std::vector<Problem>& problems) {
  std::vector<std::vector<std::int64_t>> out;
  for (const Problem& p : problems) out.push_back(p.prompt_ids);
  return out;
}

/// The completions of a rollout as the rewards see them: text, ids, truncation, row, group.
std::vector<Completion> completions_of(const grpo::Rollout& rollout, const std::vector<Problem>& problems,
                                       std::int64_t group_size, const Task& task) {
  const auto ids = grpo::completion_token_ids(rollout);
  const auto truncated_flags = rollout.truncated.to(torch::kCPU).contiguous();
  const auto truncated = truncated_flags.accessor<bool, 1>();
  std::vector<Completion> out(ids.size());
  for (std::size_t b = 0; b < ids.size(); ++b) {
    const auto& problem = problems[b / static_cast<std::size_t>(group_size)];
    out[b].token_ids.assign(ids[b].begin(), ids[b].end());
    out[b].text = task.decode(out[b].token_ids);
    out[b].prompt = problem.prompt_text;
    out[b].truncated = truncated[static_cast<int64_t>(b)];
    out[b].group = b / static_cast<std::size_t>(group_size);
    out[b].row = problem.row;
  }
  return out;
}

/// The text inside the last <answer>…</answer>, normalised, for majority voting.
std::optional<std::string> answer_of(const std::string& text) {
  const auto close = text.rfind("</answer>");
  if (close == std::string::npos) return std::nullopt;
  const auto open = text.rfind("<answer>", close);
  if (open == std::string::npos) return std::nullopt;
  return grpo::math::normalize_latex(text.substr(open + 8, close - open - 8));
}

struct Evaluator {
  const Task& task;
  const Settings& settings;
  grpo::rewards::RewardPtr accuracy = grpo::rewards::RewardRegistry::with_builtins().create(R"({"name": "accuracy"})");
  grpo::rewards::RewardExecutor executor;

  /// k samples per held-out problem at the training temperature: mean accuracy, pass@k, maj@k.
  grpo::train::EvalSummary operator()(grpo::models::CausalLM& model, std::int64_t step) const {
    torch::NoGradGuard no_grad;
    std::vector<Problem> problems = task.held_out();
    if (settings.eval_problems > 0 && static_cast<std::int64_t>(problems.size()) > settings.eval_problems)
      problems.resize(static_cast<std::size_t>(settings.eval_problems));
    grpo::Sampler sampler({.temperature = settings.temperature,
                           .max_new_tokens = settings.max_new_tokens,
                           .eos_token_ids = task.eos_token_ids(),
                           .pad_token_id = task.pad_token_id(),
                           .seed = settings.seed + 7919 * static_cast<std::uint64_t>(step)});
    std::vector<grpo::train::EvalSample> samples;
    const std::int64_t chunk = std::max<std::int64_t>(1, 256 / settings.eval_samples);
    for (std::size_t start = 0; start < problems.size(); start += static_cast<std::size_t>(chunk)) {
      const std::vector<Problem> part(problems.begin() + static_cast<std::ptrdiff_t>(start),
                                      problems.begin() + static_cast<std::ptrdiff_t>(
                                                             std::min(problems.size(), start + chunk)));
      const auto rollout = sampler.generate(model, prompt_ids(part), settings.eval_samples);
      const auto batch = completions_of(rollout, part, settings.eval_samples, task);
      const auto scores = executor.score(accuracy, batch);
      for (std::size_t b = 0; b < batch.size(); ++b)
        samples.push_back({answer_of(batch[b].text), scores.values[b].value_or(0.0f) > 0.5f});
    }
    return grpo::train::summarize_evaluation(samples, settings.eval_samples, settings.eval_samples);
  }
};

grpo::rewards::RewardSet make_rewards(const Settings& s) {
  if (!s.reward_config.empty()) return grpo::rewards::RewardSet::from_config(grpo::io::read_file(s.reward_config));
  GRPO_CHECK_CONFIG(s.reward_weights.empty() || s.reward_weights.size() == s.rewards.size(),
                    "--reward-weights: {} weights for {} rewards", s.reward_weights.size(), s.rewards.size());
  const auto registry = grpo::rewards::RewardRegistry::with_builtins();
  std::vector<grpo::rewards::RewardSetEntry> entries;
  for (std::size_t i = 0; i < s.rewards.size(); ++i) {
    entries.push_back({registry.create(fmt::format(R"({{"name": "{}"}})", s.rewards[i])),
                       s.reward_weights.empty() ? 1.0 : s.reward_weights[i]});
  }
  return grpo::rewards::RewardSet(std::move(entries));
}

grpo::GrpoLoss make_loss(const Settings& s) {
  auto options = grpo::recipes::by_name(s.loss, s.max_new_tokens);
  options.beta = s.beta;
  options.kl = grpo::parse_kl_estimator(s.kl_estimator);
  options.policy.epsilon_low = s.epsilon;
  options.policy.epsilon_high = s.loss == "cispo" ? options.policy.epsilon_high : s.epsilon_high;
  options.entropy_coef = s.entropy_coef;
  return grpo::GrpoLoss(options);
}

}  // namespace

int main(int argc, char** argv) try {
  Settings s;
  CLI::App app{"GRPO R1-Zero training: the built-in tiny task, or a Hugging Face checkpoint on a data set"};
  add_flags(app, s);
  fs::path config_path;
  app.add_option("--config", config_path, "JSON file of flag values {\"steps\": 100, \"loss\": \"grpo\", ...}")
      ->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  if (!config_path.empty()) apply_config_file(app, config_path);
  if (!s.model_dir.empty()) s.task = "data";
  const bool tiny = s.task == "tiny";
  GRPO_CHECK_CONFIG(tiny || (!s.model_dir.empty() && !s.data_path.empty()), "--task data needs --model DIR and --data FILE");
  if (s.max_new_tokens == 0) s.max_new_tokens = tiny ? 8 : 512;
  if (tiny && s.held_out == 0) s.held_out = 256;
  // One process, or one rank of scripts/launch.sh -n N (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): each rank
  // samples its share of the P prompts; gradients and metrics are combined so a step equals one process's.
  auto group = grpo::train::ProcessGroup::from_env();
  // Threads: the tiny task's tensors are too small for intra-op threads to pay (measured: 2 threads take 2.5× as
  // long as 1 on 2 cores; use launch.sh -n 2 for both cores); a real model's matrix products want the cores.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(s.threads > 0 ? s.threads : tiny ? 1 : std::max(1, cores / group.world_size()));
  const bool main_rank = group.is_main();

  // The policy and the task.
  std::unique_ptr<Task> task;
  grpo::models::CausalLM model{nullptr};
  if (tiny) {
    auto tiny_task = std::make_unique<TinyTask>(s.seed, s.held_out);
    model = tiny_model(s.seed);
    warm_up(model, *tiny_task, s.seed, 150);
    task = std::move(tiny_task);
  } else {
    model = grpo::models::from_pretrained(s.model_dir, torch::kFloat32);
    auto tokenizer = grpo::text::Tokenizer::from_pretrained(s.model_dir);
    task = std::make_unique<DatasetTask>(s, std::move(tokenizer), model->config().eos_token_ids);
  }
  grpo::train::broadcast_parameters(group, *model);  // every rank starts from rank 0's weights
  grpo::Policy policy(model, {.temperature = s.temperature});
  std::optional<grpo::Policy<grpo::models::CausalLM>> reference;
  if (s.beta > 0.0) reference = policy.frozen_copy();

  auto rewards = make_rewards(s);
  grpo::GroupAdvantage advantage({.estimator = grpo::parse_advantage_estimator(s.advantage)});
  auto loss = make_loss(s);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
  const grpo::train::LrScheduleOptions schedule{.base_lr = s.lr, .warmup_steps = s.warmup_steps,
                                                .total_steps = s.steps, .decay = grpo::train::parse_lr_decay(s.lr_decay)};
  const Evaluator evaluate{*task, s};

  // Resume, then the sinks (appending, so a resumed run continues its files).
  grpo::train::CheckpointManager checkpoints({.directory = s.output_dir / "checkpoints",
                                              .keep_last = static_cast<std::size_t>(s.keep_last)});
  std::int64_t first_step = 1;
  if (s.resume) {
    if (const auto latest = checkpoints.latest()) {
      const auto state = grpo::train::load_checkpoint(group, latest->path, model, optimizer);
      first_step = state.step + 1;
      // A periodically synced reference is not in the checkpoint: it restarts as a copy of the resumed policy.
      if (reference && s.ref_sync_every > 0) reference->sync_from(policy);
      if (main_rank) fmt::print("resumed from {} (step {})\n", latest->path.string(), state.step);
    }
  }
  // Rank 0 logs, evaluates and writes; the other ranks only train.
  std::optional<grpo::train::MetricsWriter> metrics_file;
  std::optional<grpo::train::CompletionTableWriter> completion_table;
  std::optional<grpo::train::TensorBoardWriter> tensorboard;
  if (main_rank) {
    if (tiny && first_step == 1) fmt::print("tiny task: starting policy warmed up on wrong answers\n");
    const auto mode = s.resume ? grpo::train::OpenMode::append : grpo::train::OpenMode::truncate;
    metrics_file.emplace(s.output_dir / "metrics.jsonl", mode);
    completion_table.emplace(s.output_dir / "completions.jsonl", mode);
    if (s.tensorboard) tensorboard.emplace(s.output_dir / "tensorboard");
  }
  auto log_scalars = [&](std::int64_t step, const grpo::train::Scalars& scalars) {
    metrics_file->write(step, scalars);
    if (tensorboard) tensorboard->write(step, scalars);
  };
  auto run_eval = [&](std::int64_t step) {
    const auto e = evaluate(model, step);
    log_scalars(step, {{"eval/mean_accuracy", e.mean_accuracy},
                       {fmt::format("eval/pass@{}", e.k), e.pass_at_k},
                       {fmt::format("eval/maj@{}", e.samples_per_problem), e.maj_at_n}});
    fmt::print("eval step {:4d}: held-out accuracy {:.3f}  pass@{} {:.3f}  maj@{} {:.3f}  ({} problems)\n", step,
               e.mean_accuracy, e.k, e.pass_at_k, e.samples_per_problem, e.maj_at_n, e.problems);
    std::fflush(stdout);
    return e.mean_accuracy;
  };
  std::vector<std::pair<std::int64_t, double>> curve;
  if (first_step == 1 && main_rank) curve.emplace_back(0, run_eval(0));

  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t step = first_step; step <= s.steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    const double lr = grpo::train::learning_rate_at(step, schedule);
    grpo::train::set_learning_rate(optimizer, lr);

    // 1. Sample G completions per prompt (this rank's share of the P prompts) and score them.
    const auto all_problems = task->train_batch(step, s.prompts_per_step);
    const auto shard = grpo::train::shard_range(s.prompts_per_step, group.rank(), group.world_size());
    const std::vector<Problem> problems(all_problems.begin() + shard.begin, all_problems.begin() + shard.end);
    const std::uint64_t sample_seed = (s.seed * 1000003 + static_cast<std::uint64_t>(step)) * 131 + group.rank();
    grpo::Sampler sampler({.temperature = s.temperature, .max_new_tokens = s.max_new_tokens, .top_k = s.top_k,
                           .top_p = s.top_p, .min_p = s.min_p, .eos_token_ids = task->eos_token_ids(),
                           .pad_token_id = task->pad_token_id(), .seed = sample_seed});
    grpo::Rollout rollout;
    {
      torch::NoGradGuard no_grad;
      rollout = sampler.generate(model, prompt_ids(problems), s.group_size);
    }
    const auto batch = completions_of(rollout, problems, s.group_size, *task);
    const auto scores = rewards.score(batch);

    // 2. Group-relative advantages.
    const auto totals = torch::tensor(grpo::rewards::with_nan(scores.total)).view({shard.size(), s.group_size});
    const auto adv = advantage(totals);

    // 3. Old and reference log-probs (no grad), when μ > 1 and β > 0 need them.
    torch::Tensor old_log_probs, ref_log_probs;
    {
      torch::NoGradGuard no_grad;
      if (s.mu > 1) old_log_probs = policy.token_log_probs(rollout).log_probs;
      if (reference) ref_log_probs = reference->token_log_probs(rollout).log_probs;
    }

    // 4. μ passes; each accumulates the micro-batches' gradients with the whole (all ranks') batch's normaliser.
    const auto normaliser = grpo::train::global_normaliser(
        group, loss.options().loss_type,
        grpo::local_normaliser(loss.options().loss_type, rollout.completion_mask, {.max_completion_length = s.max_new_tokens}));
    const std::int64_t rows = rollout.batch_size();
    const std::int64_t micro = (rows + s.micro_batches - 1) / s.micro_batches;
    std::vector<std::vector<grpo::train::MetricValue>> loss_parts;  // one list per micro-batch of the last pass
    double grad_norm = 0.0;
    for (std::int64_t pass = 0; pass < s.mu; ++pass) {
      optimizer.zero_grad();
      loss_parts.clear();
      for (std::int64_t begin = 0; begin < rows; begin += micro) {
        const std::int64_t count = std::min(micro, rows - begin);
        const auto part = rollout.rows(begin, count);
        const auto lp = policy.token_log_probs(part, /*with_entropy=*/true);
        grpo::LossInputs inputs{.log_probs = lp.log_probs,
                                .old_log_probs = s.mu > 1 ? old_log_probs.narrow(0, begin, count) : torch::Tensor(),
                                .ref_log_probs = reference ? ref_log_probs.narrow(0, begin, count) : torch::Tensor(),
                                .advantages = adv.advantages.narrow(0, begin, count),
                                .mask = part.completion_mask,
                                .entropy = lp.entropy};
        const auto out = loss(inputs, normaliser);
        out.loss.backward();
        loss_parts.push_back(grpo::train::loss_metric_values(out.metrics));
      }
      grpo::train::all_reduce_gradients(group, model->parameters());  // summed: each rank's loss has the global normaliser
      grad_norm = s.max_grad_norm > 0 ? torch::nn::utils::clip_grad_norm_(model->parameters(), s.max_grad_norm)
                                       : torch::nn::utils::clip_grad_norm_(model->parameters(), 1e30);
      optimizer.step();
    }
    if (reference && s.ref_sync_every > 0 && step % s.ref_sync_every == 0) reference->sync_from(policy, s.ref_sync_alpha);

    // 5. Log: metrics file, TensorBoard, sample table, console.
    const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    const auto lengths = rollout.completion_lengths().to(torch::kFloat64);
    const double tokens = lengths.sum().item<double>();
    using grpo::train::MetricReduction;
    const double completions = static_cast<double>(batch.size());
    std::vector<grpo::train::MetricValue> values;  // how each combines over ranks
    for (const auto& [name, value] : scores.metrics()) values.push_back({name, value, MetricReduction::weighted_mean, completions});
    values.push_back({"frac_reward_zero_std", adv.frac_reward_zero_std, MetricReduction::weighted_mean, double(shard.size())});
    for (auto& value : grpo::train::combine_metrics(loss_parts)) values.push_back(std::move(value));
    values.insert(values.end(),
                  {{"completions/mean_length", lengths.mean().item<double>(), MetricReduction::weighted_mean, completions},
                   {"completions/min_length", lengths.min().item<double>(), MetricReduction::min, completions},
                   {"completions/max_length", lengths.max().item<double>(), MetricReduction::max, completions},
                   {"completions/clipped_ratio", rollout.truncated.to(torch::kFloat64).mean().item<double>(),
                    MetricReduction::weighted_mean, completions},
                   {"grad_norm", grad_norm, MetricReduction::max, 1.0},
                   {"learning_rate", lr, MetricReduction::max, 1.0},
                   {"tokens_per_second", tokens / step_seconds, MetricReduction::sum, 1.0},
                   {"step_time", step_seconds, MetricReduction::max, 1.0}});
    const grpo::train::Scalars scalars = grpo::train::reduce_metrics(group, values);
    if (main_rank) log_scalars(step, scalars);
    std::vector<grpo::train::CompletionRecord> records;
    for (std::size_t b = 0; b < batch.size() && static_cast<std::int64_t>(b) < s.log_completions; ++b) {
      grpo::train::CompletionRecord record{batch[b].prompt, batch[b].text, {}, adv.advantages[static_cast<int64_t>(b)].item<double>()};
      for (std::size_t k = 0; k < scores.names.size(); ++k) {
        const auto& v = scores.values[k][b];
        record.rewards.emplace_back(scores.names[k], v ? std::optional<double>(*v) : std::nullopt);
      }
      records.push_back(std::move(record));
    }
    if (main_rank) completion_table->write(step, records);
    if (main_rank && (step % s.log_every == 0 || step == first_step || step == s.steps)) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::map<std::string, double> logged(scalars.begin(), scalars.end());
      const std::string first_reward = "rewards/" + scores.names.front() + "/mean";
      fmt::print("{}\n", grpo::train::format_progress_line(
                             step - first_step + 1, s.steps - first_step + 1, elapsed,
                             {{"reward", logged.at("reward")},
                              {scores.names.front(), logged.at(first_reward)},
                              {"zero_std", logged.at("frac_reward_zero_std")},
                              {"entropy", logged.count("entropy") ? logged.at("entropy") : 0.0},
                              {"len", logged.at("completions/mean_length")}}));
      std::fflush(stdout);
    }

    // 6. Evaluate (rank 0; the others wait at the next collective) and checkpoint (rank 0 writes).
    const bool last = step == s.steps;
    if (main_rank && ((s.eval_every > 0 && step % s.eval_every == 0) || last)) curve.emplace_back(step, run_eval(step));
    if ((s.save_every > 0 && step % s.save_every == 0) || last) {
      grpo::train::save_checkpoint(group, checkpoints, model, optimizer, {.step = step, .seed = s.seed});
    }
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
