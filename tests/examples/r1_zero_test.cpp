// SPDX-License-Identifier: Apache-2.0
// examples/r1_zero run as a user runs it: the tiny task learns (and the same seed gives the same curve), mode 2 runs
// on a tiny random Qwen2 checkpoint with the real Qwen tokenizer on every data-set format, and a resumed run equals
// an uninterrupted one.
#include <grpo/io/read_file.hpp>
#include <grpo/models/causal_lm.hpp>
#include <support/model_testing.hpp>
#include <support/process_testing.hpp>
#include <text/reference_fixture.hpp>

#include <catch2/catch.hpp>
#include <simdjson.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace fs = std::filesystem;

namespace {

fs::path scratch_root() { return fs::temp_directory_path() / ("grpo_r1_zero_test_" + std::to_string(::getpid())); }

/// An empty directory under scratch_root().
fs::path scratch(const std::string& name) {
  const auto dir = scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

grpo::testing::CommandResult r1_zero(const std::string& args, const fs::path& output_dir) {
  return grpo::testing::run_command(std::string(GRPO_R1_ZERO_PATH) + " --output-dir " +
                                    output_dir.string() + " " + args + " 2>&1");
}

using StepMetrics = std::map<std::string, double>;

/// metrics.jsonl as step → {name: value}; several lines of one step (training, evaluation) are merged.
std::map<std::int64_t, StepMetrics> read_metrics(const fs::path& output_dir) {
  std::map<std::int64_t, StepMetrics> out;
  simdjson::dom::parser parser;
  std::ifstream in(output_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    simdjson::dom::object object = parser.parse(line);
    const auto step = int64_t(object["step"]);
    for (auto [key, value] : object) {
      if (value.is_number()) out[step][std::string(key)] = double(value);
    }
  }
  return out;
}

/// The training metrics that depend only on the run's numbers, not on the wall clock (evaluations are left out: runs
/// of different lengths evaluate at different steps).
StepMetrics deterministic(StepMetrics metrics) {
  std::erase_if(metrics, [](const auto& entry) {
    const std::string& name = entry.first;
    return name == "wall_time" || name == "step_time" || name == "tokens_per_second" ||
           name.find("seconds") != std::string::npos || name.rfind("eval/", 0) == 0;
  });
  return metrics;
}

}  // namespace

TEST_CASE("r1_zero tiny task: GRPO lifts held-out accuracy, and the same seed gives the same curve", "[examples]") {
  const auto dir = scratch("tiny");
  const auto run = r1_zero("--steps 80 --eval-every 80 --eval-problems 128 --eval-samples 2 --save-every 0", dir);
  INFO(run.out);
  REQUIRE(run.status == 0);
  const auto metrics = read_metrics(dir);
  const double before = metrics.at(0).at("eval/mean_accuracy");
  const double after = metrics.at(80).at("eval/mean_accuracy");
  CHECK(before <= 0.3);  // the starting policy speaks the format but answers wrong
  CHECK(after >= before + 0.3);
  CHECK(metrics.at(80).at("rewards/format/mean") > 0.9);

  // The first steps again, in a second process: the same numbers.
  const auto again_dir = scratch("tiny_again");
  const auto again = r1_zero("--steps 5 --eval-every 0 --eval-problems 8 --save-every 0", again_dir);
  REQUIRE(again.status == 0);
  const auto again_metrics = read_metrics(again_dir);
  for (std::int64_t step = 1; step <= 5; ++step) {
    INFO("step " << step);
    CHECK(deterministic(again_metrics.at(step)) == deterministic(metrics.at(step)));
  }
}

TEST_CASE("r1_zero rejects bad flags and config files with the field at fault", "[examples]") {
  const auto dir = scratch("bad");
  std::ofstream(dir / "bad_field.json") << "{\n  \"steps\": 3,\n  \"learning_rate\": 0.1\n}\n";
  auto r = r1_zero("--config " + (dir / "bad_field.json").string(), dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("bad_field.json:3: unknown field 'learning_rate'"));
  std::ofstream(dir / "bad_value.json") << "{\"group_size\": 1}";
  r = r1_zero("--config " + (dir / "bad_value.json").string(), dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("bad_value.json:1: field 'group_size'"));
  r = r1_zero("--loss ppo --steps 1", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("unknown loss recipe 'ppo'"));
  r = r1_zero("--task data", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("--model DIR and --data FILE"));
}

TEST_CASE("r1_zero mode 2: a Qwen2 checkpoint on every data-set format, and resume equals an uninterrupted run",
          "[examples]") {
  const auto tokenizer_dir = grpo::text::testing::find_tokenizer_dir("qwen3");
  if (!tokenizer_dir) {
    WARN("skipped: the Qwen tokenizer is not installed (scripts/install-deps.sh fetches it)");
    return;
  }
  const fs::path shared = GRPO_SHARED_DIR;
  if (!fs::exists(shared / "datasets")) {
    WARN("skipped: ../shared/datasets is absent");
    return;
  }

  // A tiny random Qwen2 with the real vocabulary, saved as a Hugging Face checkpoint beside the tokenizer.
  const auto model_dir = scratch("model");
  {
    auto config = grpo::testing::tiny_model_config({.vocab = 151936, .hidden = 16, .intermediate = 32});
    config.eos_token_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>
    torch::manual_seed(3);
    grpo::models::save_pretrained(grpo::models::CausalLM(config), model_dir);
    fs::copy_file(*tokenizer_dir / "tokenizer.json", model_dir / "tokenizer.json");
    fs::copy_file(*tokenizer_dir / "tokenizer_config.json", model_dir / "tokenizer_config.json");
  }

  // A few rows of each format: ROLL (chat list in a JSON string), GSM8K ("#### N"), TRL/NuminaMath, mapped fields.
  const auto data_dir = scratch("data");
  auto head = [&](const fs::path& from, const fs::path& to, int lines) {
    std::ifstream in(from);
    std::ofstream out(to);
    std::string line;
    for (int i = 0; i < lines && std::getline(in, line); ++i) out << line << "\n";
  };
  head(shared / "datasets" / "roll_deepmath_train.jsonl", data_dir / "roll.jsonl", 5);
  head(shared / "datasets" / "gsm8k_train.jsonl", data_dir / "gsm8k.jsonl", 5);
  std::ofstream(data_dir / "trl.jsonl") << R"({"problem": "What is $2+3$?", "solution": "$2+3=\\boxed{5}$"})" "\n"
                                        << R"({"problem": "What is $4 \\cdot 3$?", "solution": "\\boxed{12}"})" "\n"
                                        << R"({"problem": "Simplify $\\frac{6}{8}$.", "solution": "\\boxed{\\frac34}"})" "\n";
  std::ofstream(data_dir / "fields.jsonl") << R"({"q": "1+1?", "a": 2})" "\n" << R"({"q": "2+2?", "a": 4})" "\n"
                                           << R"({"q": "3+3?", "a": 6})" "\n";
  const std::string common = "--model " + model_dir.string() +
                             " --prompts 2 --group-size 2 --max-new-tokens 6 --held-out 1 --eval-every 0"
                             " --eval-samples 2 --seed 5 ";
  for (const std::string format : {"roll", "gsm8k", "trl", "fields"}) {
    INFO(format);
    const auto out = scratch("run_" + format);
    std::string args = common + "--steps 2 --data " + (data_dir / (format + ".jsonl")).string();
    if (format == "fields") args += " --data-format fields --prompt-field q --answer-field a";
    const auto run = r1_zero(args, out);
    INFO(run.out);
    REQUIRE(run.status == 0);
    const auto metrics = read_metrics(out);
    REQUIRE(metrics.count(2) == 1);
    CHECK(metrics.at(2).count("reward") == 1);
    CHECK(metrics.at(2).at("num_tokens") > 0);
    CHECK(fs::exists(out / "checkpoints" / "checkpoint-2" / "model.safetensors"));
  }

  // Resume: one step, stop, resume to two steps; the result equals the uninterrupted run above, bit for bit.
  const auto resumed = scratch("resumed");
  const std::string roll_args = common + "--data " + (data_dir / "roll.jsonl").string();
  REQUIRE(r1_zero(roll_args + " --steps 1", resumed).status == 0);
  const auto second = r1_zero(roll_args + " --steps 2 --resume", resumed);
  INFO(second.out);
  REQUIRE(second.status == 0);
  CHECK_THAT(second.out, Catch::Contains("resumed from"));
  const auto straight = scratch_root() / "run_roll";
  CHECK(grpo::io::read_file(resumed / "checkpoints" / "checkpoint-2" / "model.safetensors") ==
        grpo::io::read_file(straight / "checkpoints" / "checkpoint-2" / "model.safetensors"));
  CHECK(deterministic(read_metrics(resumed).at(2)) == deterministic(read_metrics(straight).at(2)));
}
