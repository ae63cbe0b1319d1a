// SPDX-License-Identifier: Apache-2.0
// Cold-start SFT, the first stage of the DeepSeek-R1 recipe: supervised fine-tuning on chat data with reasoning,
// whose output checkpoint is where GRPO (examples/r1_zero.cpp) starts. Library parts in a plain loop:
//
//   sft --model DIR --data chat.jsonl --output OUT [--epochs 2 --lr 2e-5 --max-length 2048 --packing
//       --batch-size 4 --micro-batches 4 --held-out 64]
//   r1_zero --model OUT --data math.jsonl ...           # the GRPO stage, from the SFT checkpoint
//
// Data: JSON lines (or a JSON array) with `messages` [{role, content[, reasoning_content]}] or `conversations`
// [{from, value}] plus an optional `system` (Bespoke-Stratos / OpenThoughts / ShareGPT). Each conversation is rendered
// by the tokenizer's chat template; only assistant messages (reasoning and the end-of-turn token included) are
// targets. The loss is the token-mean NLL over every target of an optimizer step (all micro-batches), through the
// same fused linear log-prob path as GRPO. The result is a Hugging Face directory: config.json, model.safetensors and
// the tokenizer files of --model. With --save-every N, OUTPUT/checkpoints/checkpoint-<step> (Hugging Face model,
// optimizer, RNG, step) every N steps; --resume continues from the newest one exactly where it stopped.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <grpo/grpo.hpp>
#include <thread>

namespace {

namespace fs = std::filesystem;
using grpo::train::SftBatch;
using grpo::train::SftExample;

struct Settings {
  fs::path model_dir, data_path, output_dir;
  std::int64_t epochs = 1, max_steps = 0;
  double lr = 2e-5, weight_decay = 0.0, max_grad_norm = 1.0;
  std::int64_t warmup_steps = 0;
  std::string lr_decay = "linear";
  std::int64_t max_length = 2048, batch_size = 4, micro_batches = 1, max_tokens = 0, bucket_window = 16;
  bool packing = false, last_turn_only = false;
  std::int64_t held_out = 0, eval_every = 0, log_every = 1;
  std::int64_t save_every = 0, keep_last = 2;
  bool resume = false;
  std::uint64_t seed = 1;
  int threads = 0;
};

void add_flags(CLI::App& app, Settings& s) {
  app.add_option("--model", s.model_dir, "Hugging Face model directory (config.json, safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--data", s.data_path, "chat data: JSONL or JSON array of {messages} or {conversations} rows")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--output", s.output_dir, "directory for the fine-tuned model (Hugging Face layout)")->required();
  app.add_option("--epochs", s.epochs, "passes over the training conversations")->check(CLI::PositiveNumber);
  app.add_option("--max-steps", s.max_steps, "stop after this many optimizer steps (0 = all epochs)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--lr", s.lr, "AdamW learning rate")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", s.weight_decay, "AdamW weight decay")->check(CLI::NonNegativeNumber);
  app.add_option("--max-grad-norm", s.max_grad_norm, "gradient clipping (0 = off)")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", s.warmup_steps, "linear learning-rate warm-up")->check(CLI::NonNegativeNumber);
  app.add_option("--lr-decay", s.lr_decay, "constant, linear or cosine")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}));
  app.add_option("--max-length", s.max_length, "tokens kept per conversation, from the start (0 = all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", s.batch_size, "conversations per micro-batch (with --packing: packed rows)")
      ->check(CLI::PositiveNumber);
  app.add_option("--micro-batches", s.micro_batches, "gradient accumulation: micro-batches per optimizer step")
      ->check(CLI::PositiveNumber);
  app.add_flag("--packing,!--no-packing", s.packing,
               "pack several conversations per row (each attends only to itself) instead of padding");
  app.add_option("--max-tokens", s.max_tokens, "with --packing: tokens per packed row (0 = --max-length)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bucket-window", s.bucket_window,
                 "without --packing: sort by length within windows of this many batches (0 = off)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--last-turn-only", s.last_turn_only, "train on the last assistant message only (others are context)");
  app.add_option("--held-out", s.held_out, "conversations kept out of training to measure the NLL on")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval-every", s.eval_every, "held-out NLL period in steps (0 = before and after training)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", s.log_every, "console line period in steps")->check(CLI::PositiveNumber);
  app.add_option("--save-every", s.save_every,
                 "checkpoint period in steps, in OUTPUT/checkpoints (model, optimizer, RNG, step; 0 = none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--keep-last", s.keep_last, "checkpoints kept (0 = all)")->check(CLI::NonNegativeNumber);
  app.add_flag("--resume", s.resume, "continue from the newest checkpoint in OUTPUT/checkpoints (same data and flags)");
  app.add_option("--seed", s.seed, "seed of the split and the data order");
  app.add_option("--threads", s.threads, "intra-op threads (0 = all cores)")->check(CLI::NonNegativeNumber);
}

/// The tokenizer and chat-template files GRPO needs beside the weights (those present are copied).
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "added_tokens.json",     "generation_config.json",  "chat_template.jinja"};

template <typename ItemType>
std::vector<ItemType> in_order(const std::vector<ItemType>& items, const std::vector<std::size_t>& order) {
  std::vector<ItemType> out;
  out.reserve(order.size());
  for (const std::size_t i : order) out.push_back(items[i]);
  return out;
}

void print_evaluation(const char* when, const grpo::train::SftEvaluation& e) {
  fmt::print("held-out NLL {}: {:.4f} per token over {} target tokens (perplexity {:.4g})\n", when, e.mean_nll,
             e.tokens, std::exp(e.mean_nll));
}

}  // namespace

int main(int argc, char** argv) try {
  grpo::use_passive_omp_wait_policy(argv);  // unless the environment sets OMP_WAIT_POLICY (omp_wait_policy.hpp)
  Settings s;
  CLI::App app{
      "Cold-start SFT on chat data (assistant-only loss); the output checkpoint starts GRPO (r1_zero --model)"};
  add_flags(app, s);
  CLI11_PARSE(app, argc, argv);
  GRPO_CHECK_CONFIG(!fs::exists(s.output_dir) || !fs::equivalent(s.output_dir, s.model_dir),
                    "--output {} is the --model directory; write the fine-tuned model elsewhere",
                    s.output_dir.string());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(s.threads > 0 ? s.threads : cores);

  auto tokenizer = grpo::text::Tokenizer::from_pretrained(s.model_dir);
  auto model = grpo::models::from_pretrained(s.model_dir, torch::kFloat32);
  model->train();

  // Conversations → examples; a seeded split keeps the first --held-out of a shuffled order out of training.
  const auto conversations = grpo::train::read_sft_conversations(s.data_path);
  GRPO_CHECK_CONFIG(static_cast<std::int64_t>(conversations.size()) > s.held_out,
                    "--held-out {} leaves no training conversation ({} in {})", s.held_out, conversations.size(),
                    s.data_path.string());
  const grpo::train::SftChatOptions chat{
      .max_length = s.max_length,
      .targets = s.last_turn_only ? grpo::train::SftTargets::last_assistant : grpo::train::SftTargets::all_assistant};
  std::vector<SftExample> train, held_out;
  std::size_t no_targets = 0;
  std::int64_t train_targets = 0;
  const auto split = grpo::seeded_permutation(conversations.size(), s.seed);
  for (std::size_t k = 0; k < split.size(); ++k) {
    const auto& conversation = conversations[split[k]];
    SftExample example;
    try {
      example = grpo::train::sft_example_from_chat(tokenizer, conversation.messages, chat);
    } catch (const grpo::Error& e) {
      throw grpo::Error(fmt::format("{}: {}", conversation.source, e.what()));
    }
    if (example.num_targets() == 0) {  // the assistant turns were all cut by --max-length
      ++no_targets;
      continue;
    }
    if (static_cast<std::int64_t>(k) < s.held_out) {
      held_out.push_back(std::move(example));
    } else {
      train_targets += example.num_targets();
      train.push_back(std::move(example));
    }
  }
  GRPO_CHECK_CONFIG(!train.empty(), "no training conversation keeps a target token within --max-length {}",
                    s.max_length);

  const auto& special = tokenizer.special_token_ids();
  const std::int64_t pad = special.pad ? *special.pad : special.eos ? *special.eos : 0;
  std::int64_t longest = 0;
  for (const auto& e : train) longest = std::max(longest, static_cast<std::int64_t>(e.size()));
  const grpo::train::SftBatchOptions batching{
      .layout = s.packing ? grpo::train::SftLayout::packed : grpo::train::SftLayout::padded,
      .batch_size = s.batch_size,
      .bucket_window = s.bucket_window,
      .max_tokens = s.max_tokens > 0   ? s.max_tokens
                    : s.max_length > 0 ? s.max_length
                                       : longest,
      .pad_token_id = pad};
  // Every epoch has the same number of batches (the rows of best-fit packing depend only on the lengths).
  const auto rows_per_epoch = static_cast<std::int64_t>(grpo::train::plan_sft_rows(train, batching).size());
  const std::int64_t batches_per_epoch = (rows_per_epoch + s.batch_size - 1) / s.batch_size;
  const std::int64_t steps_per_epoch = (batches_per_epoch + s.micro_batches - 1) / s.micro_batches;
  std::int64_t total_steps = steps_per_epoch * s.epochs;
  if (s.max_steps > 0) total_steps = std::min(total_steps, s.max_steps);
  fmt::print(
      "sft: {} conversations from {} ({} held out, {} without targets after --max-length), {} training target "
      "tokens; {} batches of {} {} per epoch, {} per step: {} steps\n",
      conversations.size(), s.data_path.string(), held_out.size(), no_targets, train_targets, batches_per_epoch,
      s.batch_size, s.packing ? "packed rows" : "conversations", s.micro_batches, total_steps);

  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
  grpo::train::SftTrainer trainer(
      model, optimizer,
      {.max_grad_norm = s.max_grad_norm,
       .schedule = grpo::train::LrScheduleOptions{.base_lr = s.lr,
                                                  .warmup_steps = s.warmup_steps,
                                                  .total_steps = total_steps,
                                                  .decay = grpo::train::parse_lr_decay(s.lr_decay)}});
  const grpo::train::SftBatchOptions eval_batching{.batch_size = s.batch_size, .pad_token_id = pad};

  // Checkpoints: the step is all a resumed run needs, since each epoch's order is a function of the seed and the
  // epoch; the optimizer state and the RNG come back with the model.
  grpo::train::CheckpointManager checkpoints(
      {.directory = s.output_dir / "checkpoints", .keep_last = static_cast<std::size_t>(s.keep_last)});
  std::int64_t step = 0;
  if (s.resume) {
    if (const auto latest = checkpoints.latest()) {
      const auto state = grpo::train::CheckpointManager::load(latest->path, model, optimizer);
      GRPO_CHECK_CONFIG(state.seed == s.seed, "{}: written with --seed {}, resumed with --seed {}",
                        latest->path.string(), state.seed, s.seed);
      GRPO_CHECK_CONFIG(state.step <= total_steps, "{}: step {} is past this run's {} steps", latest->path.string(),
                        state.step, total_steps);
      step = state.step;
      trainer.set_steps_done(step);
      fmt::print("resumed from {} (step {})\n", latest->path.string(), step);
    }
  }
  if (!held_out.empty() && step == 0) {
    print_evaluation("before training", grpo::train::evaluate_nll(model, held_out, eval_batching));
  }

  const auto start = std::chrono::steady_clock::now();
  const std::int64_t first_step = step;
  for (std::int64_t epoch = step / steps_per_epoch; epoch < s.epochs && step < total_steps; ++epoch) {
    // A fresh order each epoch; the batches are shuffled too, so length buckets do not run longest to shortest.
    // Batches are collated one optimizer step at a time (a whole data set as tensors would take ~44 bytes a token).
    const auto epoch_seed = s.seed + 1 + static_cast<std::uint64_t>(epoch);
    const auto examples = in_order(train, grpo::seeded_permutation(train.size(), epoch_seed));
    const auto rows = grpo::train::plan_sft_rows(examples, batching);
    const auto batch_order =
        grpo::seeded_permutation(static_cast<std::size_t>(batches_per_epoch), epoch_seed ^ 0x5f7ULL);
    // A resumed run starts inside its epoch, at the first batch of the next step.
    const auto skipped = static_cast<std::size_t>((step - epoch * steps_per_epoch) * s.micro_batches);
    for (std::size_t first = skipped; first < batch_order.size() && step < total_steps; first += s.micro_batches) {
      std::vector<SftBatch> micro_batches;
      for (std::size_t k = first; k < std::min<std::size_t>(first + s.micro_batches, batch_order.size()); ++k) {
        const std::size_t begin = batch_order[k] * static_cast<std::size_t>(s.batch_size);
        const std::size_t count = std::min<std::size_t>(s.batch_size, rows.size() - begin);
        micro_batches.push_back(
            grpo::train::collate_sft_rows(examples, std::span(rows).subspan(begin, count), batching));
      }
      const auto out = trainer.step(micro_batches);
      step = out.step;
      if (step % s.log_every == 0 || step == total_steps) {
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        auto scalars = out.metrics();
        scalars.emplace_back("epoch", static_cast<double>(epoch + 1));
        fmt::print("{}\n", grpo::train::format_progress_line(step - first_step, total_steps - first_step, elapsed,
                                                             scalars));
        std::fflush(stdout);
      }
      if (s.eval_every > 0 && step % s.eval_every == 0 && step < total_steps && !held_out.empty()) {
        print_evaluation(fmt::format("at step {}", step).c_str(),
                         grpo::train::evaluate_nll(model, held_out, eval_batching));
      }
      if (s.save_every > 0 && step % s.save_every == 0) checkpoints.save(model, optimizer, {.step = step, .seed = s.seed});
    }
  }
  if (!held_out.empty()) print_evaluation("after training", grpo::train::evaluate_nll(model, held_out, eval_batching));

  // The Hugging Face directory GRPO starts from: weights and config, plus the tokenizer files of --model.
  model->eval();
  grpo::models::save_pretrained(model, s.output_dir);
  for (const char* name : kTokenizerFiles) {
    if (fs::exists(s.model_dir / name)) {
      fs::copy_file(s.model_dir / name, s.output_dir / name, fs::copy_options::overwrite_existing);
    }
  }
  fmt::print("saved the fine-tuned model to {} (start GRPO with: r1_zero --model {} --data ...)\n",
             s.output_dir.string(), s.output_dir.string());
  return 0;
} catch (const grpo::Error& e) {
  fmt::print(stderr, "sft: {}\n", e.what());
  return 1;
} catch (const std::exception& e) {
  fmt::print(stderr, "sft: {}\n", e.what());
  return 1;
}
