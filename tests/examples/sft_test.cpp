// SPDX-License-Identifier: Apache-2.0
// examples/sft run as a user runs it: cold-start SFT on a small chat file (messages with reasoning_content, and
// ShareGPT-style conversations) of a tiny random Qwen2 with the real Qwen tokenizer, lowering the held-out NLL, padded
// and packed; then r1_zero starts GRPO from its output directory. Bad rows name file:line and the field.
#include <fmt/format.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <grpo/io/read_file.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/train/sft.hpp>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <examples/example_testing.hpp>
#include <support/test_paths.hpp>
#include <support/model_testing.hpp>
#include <support/process_testing.hpp>
#include <text/reference_fixture.hpp>

namespace fs = std::filesystem;

namespace {

fs::path scratch_root() { return grpo::testing::scratch_root("grpo_sft_test"); }

fs::path scratch(const std::string& name) {
  const auto dir = scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

grpo::testing::CommandResult sft(const std::string& args) {
  return grpo::testing::run_command(std::string(grpo::testing::sft_path()) + " " + args + " 2>&1");
}

std::optional<fs::path> tiny_qwen_checkpoint() { return grpo::testing::tiny_qwen_checkpoint(scratch("model")); }

/// 24 small arithmetic conversations: `messages` rows with reasoning_content, and ShareGPT rows with a system field.
/// Both render to the same assistant turn, "<think>\nI add the two numbers.\n</think>\n\nThe answer is S." with S
/// the only part that varies.
fs::path write_chat_data(const fs::path& dir) {
  const auto path = dir / "chat.jsonl";
  std::ofstream out(path);
  for (int i = 0; i < 24; ++i) {
    const int a = i % 7 + 1, b = i % 5 + 2;
    if (i % 3 == 0) {
      out << fmt::format(
          R"({{"system": "You are a careful calculator.", "conversations": [{{"from": "human", "value": "What is {} + {}?"}}, {{"from": "gpt", "value": "<think>\nI add the two numbers.\n</think>\n\nThe answer is {}."}}]}})",
          a, b, a + b);
    } else {
      out << fmt::format(
          R"({{"messages": [{{"role": "user", "content": "What is {} + {}?"}}, {{"role": "assistant", "content": "The answer is {}.", "reasoning_content": "I add the two numbers."}}], "id": {}}})",
          a, b, a + b, i);
    }
    out << "\n";
  }
  return path;
}

/// The number after `label` in the program's output ("held-out NLL before training: 11.93 per token ...").
double number_after(const std::string& text, const std::string& label) {
  const auto at = text.find(label);
  REQUIRE(at != std::string::npos);
  return std::stod(text.substr(at + label.size()));
}

/// The best held-out NLL per token a model that ignores the context can reach on `data`: the entropy (nats) of the
/// unigram distribution of all its target tokens (through the same chat template and tokenizer as the program). A
/// unigram model fitted to the held-out targets themselves is the best context-free predictor of them, and the
/// held-out rows are a sample of the same rows, so an NLL well below this means the model used the context.
double unigram_entropy_of_targets(const fs::path& model_dir, const fs::path& data) {
  const auto tokenizer = grpo::text::Tokenizer::from_pretrained(model_dir);
  std::map<std::int64_t, double> counts;
  double total = 0;
  for (const auto& conversation : grpo::train::read_sft_conversations(data)) {
    const auto example = grpo::train::sft_example_from_chat(tokenizer, conversation.messages);
    for (std::size_t t = 0; t < example.size(); ++t) {
      if (example.loss_mask[t] == 0) continue;
      counts[example.ids[t]] += 1;
      total += 1;
    }
  }
  double entropy = 0;
  for (const auto& [id, count] : counts) entropy -= count / total * std::log(count / total);
  return entropy;
}

}  // namespace

TEST_CASE("sft example: cold-start SFT lowers the held-out NLL, and r1_zero starts GRPO from its output",
          "[examples][sft]") {
  const auto model_dir = tiny_qwen_checkpoint();
  if (!model_dir) return;
  const auto data = write_chat_data(scratch("data"));
  const auto out = scratch_root() / "sft_out";
  fs::remove_all(out);

  const auto run =
      sft(fmt::format("--model {} --data {} --output {} --epochs 8 --batch-size 4 --held-out 4 "
                      "--max-length 256 --seed 2",
                      model_dir->string(), data.string(), out.string()) +
          grpo::testing::learning_rate_flag(" --lr 1e-1"));
  INFO(run.out);
  REQUIRE(run.status == 0);
  CHECK_THAT(run.out,
             Catch::Contains("24 conversations") && Catch::Contains("4 held out") && Catch::Contains("40 steps"));
  const double before = number_after(run.out, "held-out NLL before training: ");
  const double after = number_after(run.out, "held-out NLL after training: ");
  CHECK(before > 11.0);  // about log 151936 = 11.93 for a fresh model
  // Learning token frequencies alone gives the targets' unigram entropy; the model must do far better by reading
  // the template so far (0.90 measured).
  const double unigram = unigram_entropy_of_targets(*model_dir, data);
  INFO("unigram entropy of the targets " << unigram << ", held-out NLL after training " << after);
  CHECK(unigram > 2.0);
  CHECK(after < 0.6 * unigram);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    INFO(file);
    CHECK(fs::exists(out / file));
  }

  // Packed rows and gradient accumulation learn as padded rows do (0.70 measured).
  const auto packed_out = scratch_root() / "sft_packed";
  const auto packed =
      sft(fmt::format("--model {} --data {} --output {} --packing --max-tokens 128 --batch-size 1 "
                      "--micro-batches 2 --epochs 10 --held-out 4",
                      model_dir->string(), data.string(), packed_out.string()) +
          grpo::testing::learning_rate_flag(" --lr 1e-1"));
  INFO(packed.out);
  REQUIRE(packed.status == 0);
  CHECK_THAT(packed.out, Catch::Contains("packed rows") && Catch::Contains("step 40/40"));
  CHECK(number_after(packed.out, "held-out NLL after training: ") < 0.6 * unigram);

  // The second stage: GRPO from the SFT checkpoint, one step.
  const auto math = scratch("math") / "trl.jsonl";
  std::ofstream(math) << R"({"problem": "What is $2+3$?", "solution": "$\\boxed{5}$"})"
                         "\n"
                      << R"({"problem": "What is $4+3$?", "solution": "$\\boxed{7}$"})"
                         "\n"
                      << R"({"problem": "What is $1+1$?", "solution": "$\\boxed{2}$"})"
                         "\n";
  const auto grpo_dir = scratch("grpo");
  const auto grpo = grpo::testing::run_command(
      std::string(grpo::testing::r1_zero_path()) +
      fmt::format(" --model {} --data {} --output-dir {} --steps 1 --prompts 2 --group-size 2 --max-new-tokens 6 "
                  "--held-out 1 --eval-every 0 --eval-samples 2 --save-every 0 --no-tensorboard 2>&1",
                  out.string(), math.string(), grpo_dir.string()));
  INFO(grpo.out);
  REQUIRE(grpo.status == 0);
  CHECK(fs::exists(grpo_dir / "metrics.jsonl"));
}

TEST_CASE("sft example: checkpoints every step, and --resume mid-epoch ends with the same model bit for bit",
          "[examples][sft]") {
  const auto model_dir = tiny_qwen_checkpoint();
  if (!model_dir) return;
  const auto data = write_chat_data(scratch("resume_data"));
  const std::string common = fmt::format(
      "--model {} --data {} --epochs 2 --packing --max-tokens 128 --batch-size 1 --micro-batches 2 --lr 1e-2 "
      "--held-out 4 --save-every 1 --keep-last 0",
      model_dir->string(), data.string());
  const auto straight = scratch_root() / "sft_straight";
  fs::remove_all(straight);
  const auto run = sft(common + " --seed 3 --output " + straight.string());
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto total = static_cast<std::int64_t>(number_after(run.out, "per step: "));
  const std::int64_t per_epoch = total / 2;
  REQUIRE(per_epoch >= 2);
  const std::int64_t stop = per_epoch + 1;  // inside the second epoch
  CHECK(fs::exists(straight / "checkpoints" / fmt::format("checkpoint-{}", total) / "model.safetensors"));

  // A run that stopped after step `stop`: its checkpoints up to there, then --resume.
  const auto resumed = scratch_root() / "sft_resumed";
  fs::remove_all(resumed);
  for (std::int64_t step = 1; step <= stop; ++step) {
    const auto name = fmt::format("checkpoint-{}", step);
    fs::create_directories(resumed / "checkpoints" / name);
    fs::copy(straight / "checkpoints" / name, resumed / "checkpoints" / name, fs::copy_options::recursive);
  }
  const auto second = sft(common + " --seed 3 --output " + resumed.string() + " --resume");
  INFO(second.out);
  REQUIRE(second.status == 0);
  CHECK_THAT(second.out, Catch::Contains(fmt::format("(step {})", stop)) &&
                             Catch::Contains(fmt::format("step {}/{}", total - stop, total - stop)));
  CHECK(grpo::io::read_file(resumed / "model.safetensors") == grpo::io::read_file(straight / "model.safetensors"));
  CHECK(grpo::io::read_file(resumed / "model.safetensors") !=
        grpo::io::read_file(straight / "checkpoints" / fmt::format("checkpoint-{}", stop) / "model.safetensors"));
  // Another seed is another data order: refused.
  const auto other = sft(common + " --output " + resumed.string() + " --resume --seed 4");
  CHECK(other.status != 0);
  CHECK_THAT(other.out, Catch::Contains("written with --seed 3, resumed with --seed 4"));
}

TEST_CASE("sft example: bad rows and flags name the file, line and field", "[examples][sft]") {
  const auto model_dir = tiny_qwen_checkpoint();
  if (!model_dir) return;
  const auto dir = scratch("bad");
  std::ofstream(dir / "bad.jsonl")
      << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
         "\n"
      << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}]})"
         "\n";
  auto r = sft(fmt::format("--model {} --data {} --output {}", model_dir->string(), (dir / "bad.jsonl").string(),
                           (dir / "out").string()));
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("bad.jsonl:2: field 'messages[1].content' should be a string"));

  std::ofstream(dir / "no_assistant.jsonl") << R"({"messages": [{"role": "user", "content": "hi"}]})"
                                               "\n";
  r = sft(fmt::format("--model {} --data {} --output {}", model_dir->string(), (dir / "no_assistant.jsonl").string(),
                      (dir / "out").string()));
  CHECK(r.status != 0);
  CHECK_THAT(r.out,
             Catch::Contains("no_assistant.jsonl:1: sft_example_from_chat") && Catch::Contains("no assistant message"));

  r = sft(fmt::format("--model {} --data {} --output {} --held-out 2", model_dir->string(),
                      (dir / "bad.jsonl").string(), (dir / "out").string()));
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("bad.jsonl:2"));  // rows are read before the split is checked
  r = sft(fmt::format("--model {} --data {}", model_dir->string(), (dir / "bad.jsonl").string()));
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("--output is required"));
}
