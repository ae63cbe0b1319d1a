// SPDX-License-Identifier: Apache-2.0
#include "train_rm.hpp"

#include <grpo/grpo.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;

/// --task tiny's training rate, epochs and batch unless the flags are given: its backbone is 76k parameters, not the
/// billions TRL's 1e-5 is set for. At 1e-3 for 3 epochs the held-out accuracy moved from 0.92 to 0.97 with the CPU's
/// kernels; 3e-4 for 8 epochs gives 0.97-0.98 on each (docs/reward_models.md has the accuracy over seeds).
constexpr double kTinyLearningRate = 3e-4;
constexpr std::int64_t kTinyEpochs = 8, kTinyBatchSize = 32;

/// --task tiny: random completions beside the eleven well-formed answers of each prompt (TinyTask::answer_candidates),
/// as many as those, of at most grpo train's 8 completion tokens for the task.
constexpr std::int64_t kTinyRandomCandidates = 11, kTinyCompletionTokens = 8;

/// Pairs for `problems` of the tiny task: each problem's answer candidates graded by the accuracy reward (the tiny
/// run's verifier, by the correctness rule of the trainer: train::correct_threshold), `pairs_per_prompt` pairs a
/// problem.
std::vector<grpo::train::PreferencePair> tiny_task_pairs(const grpo::train::TinyTask& task,
                                                         std::span<const grpo::train::Problem> problems,
                                                         std::int64_t pairs_per_prompt, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<grpo::rewards::Completion> completions;
  for (std::size_t g = 0; g < problems.size(); ++g) {
    for (const auto& ids :
         grpo::train::TinyTask::answer_candidates(rng, kTinyRandomCandidates, kTinyCompletionTokens)) {
      grpo::rewards::Completion c;
      c.prompt = problems[g].prompt_text;
      c.text = task.decode(ids);
      c.token_ids = ids;
      c.group = g;
      c.row = problems[g].row;
      completions.push_back(std::move(c));
    }
  }
  const grpo::rewards::AccuracyReward verifier;
  return grpo::train::verifier_preference_pairs(completions, verifier, grpo::train::correct_threshold(verifier),
                                                pairs_per_prompt, seed);
}

std::string metrics_json(const grpo::train::PreferenceMetrics& m) {
  return fmt::format(R"({{"loss": {}, "accuracy": {}, "pairs": {}}})", m.loss, m.accuracy, m.pairs);
}

}  // namespace

CLI::App* add_train_rm_command(CLI::App& app, TrainRmArgs& a) {
  auto* c = app.add_subcommand("train-rm", "Train a reward model on preference pairs (TRL's RewardTrainer loss) and "
                                           "write it where the \"reward_model\" reward reads it");
  c->add_option("--task", a.task, "tiny: the built-in tiny task, pairs made by its verifier (instead of --model and "
                                  "--pairs)")
      ->check(CLI::IsMember({"tiny"}));
  c->add_option("--model", a.model, "a causal LM checkpoint directory: the reward model is its weights with a new "
                                    "score head (in --dtype)");
  c->add_option("--reward-model", a.reward_model, "a reward model checkpoint directory (score.weight or TRL's "
                                                  "v_head) to train further, instead of --model");
  c->add_option("--pairs", a.pairs, "training pairs: JSON lines in TRL's preference formats (prompt/chosen/rejected, "
                                    "texts or messages)");
  c->add_option("--eval-pairs", a.eval_pairs, "held-out pairs, the same format: accuracy before and after training");
  c->add_option("--out", a.out, "the directory to write (model, tokenizer, train_rm_results.json)")->required();
  c->add_option("--epochs", a.training.epochs, fmt::format("passes over the pairs (default {}; {} with --task tiny)",
                                                           a.training.epochs, kTinyEpochs));
  c->add_option("--batch-size", a.training.batch_size,
                fmt::format("pairs per optimizer step (default {}; {} with --task tiny)", a.training.batch_size,
                            kTinyBatchSize));
  c->add_option("--lr", a.training.learning_rate, fmt::format("AdamW learning rate (default {}; {} with --task tiny)",
                                                              a.training.learning_rate, kTinyLearningRate));
  c->add_option("--weight-decay", a.training.weight_decay,
                fmt::format("AdamW weight decay (default {})", a.training.weight_decay));
  c->add_option("--max-grad-norm", a.training.max_grad_norm,
                fmt::format("gradient clipping norm, 0 = off (default {})", a.training.max_grad_norm));
  c->add_option("--max-length", a.training.max_length,
                fmt::format("tokens of prompt + side kept, the last ones (default {})", a.training.max_length));
  c->add_option("--center-rewards-coefficient", a.center_rewards_coefficient,
                "TRL's centring term on (r_chosen + r_rejected)² (default: off)");
  grpo::train::RunSettings& m = a.model_settings;
  c->add_option("--dtype", m.dtype, "fp32, or bf16: bf16 weights, stepped as --optimizer-precision says (default fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  c->add_option("--optimizer-precision", a.optimizer_precision,
                "with --dtype bf16: fp32_master (fp32 master weights and AdamW state) or compensated (bf16 weights "
                "stepped in place, Kahan-compensated; default fp32_master)")
      ->check(CLI::IsMember({"fp32_master", "compensated"}));
  c->add_option("--gradient-checkpointing", m.gradient_checkpointing,
                fmt::format("recompute each decoder layer in backward: on, off, or auto (on from 100 M parameters; "
                            "default {})", m.gradient_checkpointing))
      ->check(CLI::IsMember({"auto", "on", "off"}));
  c->add_option("--lora-r", m.lora_r, "LoRA rank: adapters on the backbone and the whole score head train, merged into "
                                      "the weights written (default 0: every weight trains)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--lora-alpha", m.lora_alpha, fmt::format("LoRA alpha (scaling alpha / r; default {})", m.lora_alpha))
      ->check(CLI::PositiveNumber);
  c->add_option("--lora-dropout", m.lora_dropout,
                fmt::format("dropout on the adapters' input (default {})", m.lora_dropout))
      ->check(CLI::Range(0.0, 0.999));
  c->add_option("--lora-target-modules", m.lora_target_modules,
                "modules that get adapters: names (q_proj,v_proj), a regular expression, or all-linear (default: "
                "q_proj,v_proj)")
      ->delimiter(',');
  c->add_option("--seed", a.seed, fmt::format("the pairs' order each epoch; with --task tiny also the task, its "
                                              "policy and its pairs (default {})", a.seed));
  c->add_option("--train-prompts", a.train_prompts,
                fmt::format("--task tiny: training prompts, --pairs-per-prompt pairs each (default {})",
                            a.train_prompts));
  c->add_option("--pairs-per-prompt", a.pairs_per_prompt,
                fmt::format("--task tiny: pairs of each training prompt's graded candidates (default {})",
                            a.pairs_per_prompt));
  c->add_option("--eval-prompts", a.eval_prompts,
                fmt::format("--task tiny: held-out problems, one pair each (default {})", a.eval_prompts));
  return c;
}

int run_train_rm(TrainRmArgs a, const CLI::App& command) {
  namespace train = grpo::train;
  const bool tiny = a.task == "tiny";
  GRPO_CHECK_CONFIG(tiny + !a.model.empty() + !a.reward_model.empty() == 1,
                    "grpo train-rm: give one of --task tiny, --model DIR or --reward-model DIR");
  GRPO_CHECK_CONFIG(tiny || !a.pairs.empty(), "grpo train-rm: --pairs FILE is required with --model/--reward-model");
  GRPO_CHECK_CONFIG(!tiny || (a.pairs.empty() && a.eval_pairs.empty()),
                    "grpo train-rm: --task tiny makes its own pairs: leave out --pairs and --eval-pairs");
  GRPO_CHECK_CONFIG(tiny || (command.count("--train-prompts") == 0 && command.count("--eval-prompts") == 0 &&
                              command.count("--pairs-per-prompt") == 0),
                    "grpo train-rm: --train-prompts, --pairs-per-prompt and --eval-prompts are for --task tiny");
  GRPO_CHECK_CONFIG(a.pairs_per_prompt >= 1, "grpo train-rm: --pairs-per-prompt must be >= 1, got {}",
                    a.pairs_per_prompt);
  GRPO_CHECK_CONFIG(a.train_prompts >= 1, "grpo train-rm: --train-prompts must be >= 1, got {}", a.train_prompts);
  GRPO_CHECK_CONFIG(a.eval_prompts >= 0, "grpo train-rm: --eval-prompts must be >= 0, got {}", a.eval_prompts);
  if (command.count("--center-rewards-coefficient") > 0) {
    a.training.center_rewards_coefficient = a.center_rewards_coefficient;
  }
  if (tiny && command.count("--lr") == 0) a.training.learning_rate = kTinyLearningRate;
  if (tiny && command.count("--epochs") == 0) a.training.epochs = kTinyEpochs;
  if (tiny && command.count("--batch-size") == 0) a.training.batch_size = kTinyBatchSize;
  a.training.seed = a.seed;
  a.training.optimizer_precision = grpo::train::parse_optimizer_precision(a.optimizer_precision);
  GRPO_CHECK_CONFIG(a.model_settings.dtype == "bf16" || command.count("--optimizer-precision") == 0,
                    "grpo train-rm --optimizer-precision {}: for --dtype bf16 (fp32 weights are stepped as they are)",
                    a.optimizer_precision);
  GRPO_CHECK_CONFIG(a.model_settings.lora_r > 0 || (command.count("--lora-alpha") == 0 &&
                                                     command.count("--lora-dropout") == 0 &&
                                                     command.count("--lora-target-modules") == 0),
                    "grpo train-rm: --lora-alpha, --lora-dropout and --lora-target-modules need --lora-r");
  torch::manual_seed(a.seed);  // a new head's initial weights
  try {
    a.training.validate();
  } catch (const grpo::ConfigError& e) {  // the option's flag
    constexpr std::pair<std::string_view, std::string_view> kFlags[] = {
        {"epochs", "--epochs"},           {"batch_size", "--batch-size"},       {"learning_rate", "--lr"},
        {"weight_decay", "--weight-decay"}, {"max_grad_norm", "--max-grad-norm"}, {"max_length", "--max-length"},
        {"center_rewards_coefficient", "--center-rewards-coefficient"}};
    const std::string_view message = e.what();
    std::string_view flag = "its flags";
    for (const auto& [field, name] : kFlags) {
      if (message.find(field) != std::string_view::npos) flag = name;
    }
    throw grpo::ConfigError(fmt::format("grpo train-rm {}: {}", flag, message));
  }

  const std::string source_dir = a.model.empty() ? a.reward_model : a.model;  // "" with --task tiny
  const torch::ScalarType dtype = grpo::train::run_dtype(a.model_settings);  // read in it: no float32 copy of 7B weights
  grpo::models::ValueModel model{nullptr};
  std::optional<grpo::text::Tokenizer> tokenizer;
  std::vector<train::PreferencePair> pairs, held_out;
  if (tiny) {
    at::set_num_threads(1);  // the tiny model's tensors are too small for intra-op threads (grpo train's rule)
    train::TinyTask task(a.seed, a.eval_prompts);
    auto policy = train::tiny_task_model(a.seed);
    train::warm_up_tiny_model(policy, task, a.seed, train::kTinyTaskWarmUpSteps);
    model = grpo::models::value_model_from_policy(policy, grpo::models::ScalarHeadLayout::sequence_classification);
    model->set_pad_token_id(train::TinyTask::kPad);
    tokenizer = grpo::text::Tokenizer::from_json(train::TinyTask::tokenizer_json(), "the tiny task's tokenizer");
    // Step −1000: a batch neither GRPO (steps ≥ 1) nor the warm-up (steps −1 … −150) draws.
    pairs = tiny_task_pairs(task, task.train_batch(-1000, a.train_prompts), a.pairs_per_prompt, a.seed);
    held_out = tiny_task_pairs(task, task.held_out(), 1, a.seed + 1);
  } else {
    const std::string& dir = source_dir;
    const char* flag = a.model.empty() ? "--reward-model" : "--model";
    GRPO_CHECK_CONFIG(fs::is_directory(dir), "grpo train-rm {} {}: not a directory (a Hugging Face checkpoint "
                      "directory with its tokenizer; `grpo convert` writes one from a .gguf file)", flag, dir);
    try {
      tokenizer = grpo::text::Tokenizer::from_pretrained(dir);
      if (!a.model.empty()) {
        model = grpo::models::value_model_from_policy(grpo::models::from_pretrained(dir, dtype),
                                                      grpo::models::ScalarHeadLayout::sequence_classification);
        const auto pad = tokenizer->special_token_ids().pad;
        model->set_pad_token_id(pad ? std::optional<std::int64_t>(*pad) : std::nullopt);
      } else {
        model = grpo::models::value_model_from_pretrained(dir, dtype);
      }
    } catch (const grpo::Error& e) {
      throw grpo::ConfigError(fmt::format("grpo train-rm {} {}: {}", flag, dir, e.what()));
    }
    const grpo::text::ChatTemplate* chat = nullptr;
    try {
      chat = &tokenizer->chat_template();
    } catch (const grpo::ConfigError&) {
      // None: conversational pairs are then an error that says so.
    }
    pairs = train::read_preference_pairs(a.pairs, chat);
    if (!a.eval_pairs.empty()) held_out = train::read_preference_pairs(a.eval_pairs, chat);
  }
  GRPO_CHECK_CONFIG(!pairs.empty(), "grpo train-rm: {} holds no pairs", tiny ? "the tiny task" : a.pairs);
  // --dtype for the head and the backbone, then (fp32) adapters and checkpointing on the backbone, as grpo train does.
  model->to(dtype);  // the tiny task's and a new head
  grpo::train::prepare_model(model->backbone(), a.model_settings, torch::kCPU);  // errors name the --lora flags

  std::int64_t parameters = 0, trained = 0;
  for (const auto& p : model->parameters()) {
    parameters += p.numel();
    if (p.requires_grad()) trained += p.numel();
  }
  const auto lora = model->backbone()->lora_options();
  fmt::print("train-rm: {} training pairs, {} held out; a {}-parameter reward model ({}{}{}), {} trained, lr {}, {} "
             "epochs\n",
             pairs.size(), held_out.size(), parameters, a.model_settings.dtype,
             lora ? fmt::format(", LoRA r={} on {} modules", lora->rank, grpo::models::lora_modules(model->backbone()).size())
                  : "",
             model->backbone()->gradient_checkpointing() ? ", activation checkpointing" : "", trained,
             a.training.learning_rate, a.training.epochs);
  const auto evaluate = [&] {
    return train::evaluate_reward_model(model, *tokenizer, held_out, a.training.batch_size, a.training.max_length);
  };
  std::optional<train::PreferenceMetrics> before, after;
  if (!held_out.empty()) {
    before = evaluate();
    fmt::print("held out before training: loss {:.4f}, accuracy {:.4f}\n", before->loss, before->accuracy);
  }
  const auto epochs = train::train_reward_model(model, *tokenizer, pairs, a.training);
  std::vector<std::string> epoch_lines;
  for (std::size_t e = 0; e < epochs.size(); ++e) {
    fmt::print("epoch {}: loss {:.4f}, accuracy {:.4f}\n", e + 1, epochs[e].loss, epochs[e].accuracy);
    epoch_lines.push_back(metrics_json(epochs[e]));
  }
  // The model written is evaluated: LoRA merged first (in bf16 the merge rounds W + B·A·scaling once).
  if (lora) grpo::models::merge_lora(model->backbone());  // a full checkpoint, as peft's merge_and_unload
  if (!held_out.empty()) {
    after = evaluate();
    fmt::print("held out after training: loss {:.4f}, accuracy {:.4f}\n", after->loss, after->accuracy);
  }

  const fs::path out(a.out);
  grpo::models::save_pretrained(model, out);
  if (tiny) {
    grpo::io::write_file_atomically(out / "tokenizer.json",
                                    [](std::ostream& o) { o << train::TinyTask::tokenizer_json(); });
  } else {
    const fs::path dir = source_dir;
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
      if (fs::exists(dir / file) && !(fs::exists(out / file) && fs::equivalent(dir / file, out / file))) {
        fs::copy_file(dir / file, out / file, fs::copy_options::overwrite_existing);
      }
    }
  }
  grpo::io::write_file_atomically(out / "train_rm_results.json", [&](std::ostream& o) {
    o << fmt::format("{{\"before\": {}, \"epochs\": [{}], \"after\": {}}}\n", before ? metrics_json(*before) : "null",
                     fmt::join(epoch_lines, ", "), after ? metrics_json(*after) : "null");
  });
  fmt::print("wrote {} (use it as {{\"name\": \"reward_model\", \"model_dir\": \"{}\"}})\n", out.string(),
             out.string());
  return 0;
}
