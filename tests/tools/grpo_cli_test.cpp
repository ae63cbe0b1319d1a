// SPDX-License-Identifier: Apache-2.0
// Runs the `grpo` command-line tool as a user would: stdin in, stdout/stderr and exit status out.
#include <grpo/models/causal_lm.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/rewards/registry.hpp>
#include <grpo/train/tiny_task.hpp>
#include <support/test_paths.hpp>
#include <support/model_testing.hpp>
#include <support/process_testing.hpp>

#include <catch2/catch.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/io/safetensors.hpp>
#include <simdjson.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <support/skip.hpp>
#include <text/reference_fixture.hpp>

namespace fs = std::filesystem;

namespace {

fs::path scratch() {
  auto dir = fs::temp_directory_path() / ("grpo_cli_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

/// Runs `grpo <args>` with `input` on stdin; stdout is captured, stderr goes to <scratch>/stderr.txt.
grpo::testing::CommandResult run(const std::string& args, const std::string& input = "") {
  const auto dir = scratch();
  std::ofstream(dir / "stdin.txt") << input;
  return grpo::testing::run_command(std::string(grpo::testing::cli_path()) + " " + args + " < " + (dir / "stdin.txt").string() +
                                    " 2> " + (dir / "stderr.txt").string());
}

std::string stderr_text() {
  std::ifstream in(scratch() / "stderr.txt");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("grpo verify answers true or false, one JSON line per input line", "[tools]") {
  REQUIRE(run(R"(verify --gold '\frac{1}{2}' --pred 'so the answer is $\boxed{0.5}$')").out == "true\n");
  REQUIRE(run(R"(verify --gold '2\sqrt{2}' --pred 'hence \boxed{\sqrt{8}}')").out == "true\n");
  REQUIRE(run(R"(verify --gold 3 --pred '\boxed{4}')").out == "false\n");
  auto r = run("verify --jsonl", R"({"gold": "\\frac{3}{4}", "pred": "$0.75$"})"
                                 "\nnot json\n"
                                 R"({"gold": "7", "pred": "\\boxed{8}"})"
                                 "\n");
  REQUIRE(r.status == 1);  // one bad line
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);
  REQUIRE(line == R"({"equivalent":true,"verdict":"equal","source":"last_line","graded":"$0.75$"})");
  std::getline(lines, line);
  REQUIRE(line.rfind(R"({"line":2,"error":)", 0) == 0);
  std::getline(lines, line);
  REQUIRE(line == R"({"equivalent":false,"verdict":"not_equal","source":"boxed","graded":"8"})");
  REQUIRE(stderr_text().find("stdin:2:") != std::string::npos);
  REQUIRE(run("verify").status == 2);
}

TEST_CASE("grpo verify grades the completion's final answer, as the accuracy reward does, and says what it graded",
          "[tools]") {
  // The cases of the issue that found two grading paths: hedges and answers in the reasoning are wrong, the answer
  // after wrong reasoning is right, and a bare answer inside <answer> is read whole.
  const auto verdict = [](const std::string& gold, const std::string& pred) {
    return run("verify --gold '" + gold + "' --pred '" + pred + "'").out;
  };
  CHECK(verdict("4", R"(<answer>x = 4 	ext{ or } x = 5</answer>)") == "false\n");
  CHECK(verdict("4", "<think>maybe 4</think><answer>5</answer>") == "false\n");
  CHECK(verdict("4", "<think>maybe 5</think><answer>4</answer>") == "true\n");
  CHECK(stderr_text() == "graded answer_tag: \"4\"\n");
  CHECK(verdict(R"(\frac{1}{2})", "<answer>0.5</answer>") == "true\n");
  CHECK(verdict("A", "<answer>A</answer>") == "true\n");
  CHECK(verdict("4", R"(\boxed{4} or maybe \boxed{5})") == "false\n");
  CHECK_THAT(stderr_text(), Catch::Contains("graded boxed: \"5\" (hedged: another final answer"));
  // The raw Math-Verify comparison is an explicit choice.
  CHECK(run(R"(verify --gold 4 --pred '<think>maybe 4</think><answer>5</answer>' --harness parse_verify_defaults)").out ==
        "true\n");
  const auto r = run("verify --jsonl", R"({"gold": "4", "pred": "I think 4 or 5"})" "\n");
  CHECK(r.out == R"({"equivalent":false,"verdict":"not_equal","source":"last_line","graded":"I think 4 or 5",)"
                 R"("reason":"hedged: the final answer states 2 different values"})" "\n");
}

TEST_CASE("grpo verify and grpo score: no reward-hacking case is equal, every control is",
          "[tools][reward_hacking]") {
  // tests/data/reward_hacking.jsonl through both commands (tests/rewards/reward_hacking_test.cpp takes the library's
  // paths); one process each for the whole set.
  simdjson::ondemand::parser parser;
  const simdjson::padded_string json =
      simdjson::padded_string::load((fs::path(grpo::testing::test_data_dir()) / "reward_hacking.jsonl").string());
  std::string verify_input, score_input;
  std::vector<bool> expected;
  simdjson::ondemand::document_stream docs = parser.iterate_many(json);
  for (auto doc : docs) {
    simdjson::ondemand::object row = doc.get_object();
    const auto gold = std::string(std::string_view(row["gold"]));
    const auto completion = std::string(std::string_view(row["completion"]));
    expected.push_back(bool(row["expected"]));
    verify_input += "{\"gold\":" + grpo::json_quoted(gold) + ",\"pred\":" + grpo::json_quoted(completion) + "}\n";
    score_input +=
        "{\"ground_truth\":" + grpo::json_quoted(gold) + ",\"completion\":" + grpo::json_quoted(completion) + "}\n";
  }
  REQUIRE(expected.size() >= 150);
  const auto verified = run("verify --jsonl", verify_input);
  const auto scored = run("score --rewards accuracy", score_input);
  REQUIRE(verified.status == 0);
  REQUIRE(scored.status == 0);
  std::istringstream verify_lines(verified.out), score_lines(scored.out);
  int wrong = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    std::string verify_line, score_line;
    REQUIRE(std::getline(verify_lines, verify_line));
    REQUIRE(std::getline(score_lines, score_line));
    const bool equal = verify_line.starts_with(R"({"equivalent":true)");
    const bool rewarded = score_line.find(R"("rewards":{"accuracy":1})") != std::string::npos;
    INFO("case " << i + 1 << ": " << verify_line << " | " << score_line);
    CHECK(equal == expected[i]);
    CHECK(rewarded == expected[i]);
    wrong += equal != expected[i] || rewarded != expected[i];
  }
  CHECK(wrong == 0);
}

TEST_CASE("grpo score adds per-reward values and the weighted total to each line", "[tools]") {
  const std::string good =
      R"({"completion": "<think>\nok\n</think>\n<answer>\n\\boxed{42}\n</answer>", "solution": "42"})";
  const std::string wrong = R"({"completion": "<think>x</think><answer>41</answer>", "solution": "\\boxed{42}"})";
  auto r = run("score --rewards accuracy,format", good + "\n{oops\n" + wrong + "\n");
  REQUIRE(r.status == 1);
  std::istringstream lines(r.out);
  std::string line;
  // good: the answer is right (1) and the R1-Zero format matches (1): total 1 + 1 = 2
  std::getline(lines, line);
  REQUIRE(line == good.substr(0, good.size() - 1) + R"(,"rewards":{"accuracy":1,"format":1},"reward":2})");
  std::getline(lines, line);
  REQUIRE(line.rfind(R"({"line":2,"error":)", 0) == 0);
  // wrong: 41 ≠ 42 (0), but "<think>x</think><answer>41</answer>" has the R1-Zero format (1)
  std::getline(lines, line);
  REQUIRE(line == wrong.substr(0, wrong.size() - 1) + R"(,"rewards":{"accuracy":0,"format":1},"reward":1})");

  const auto config = scratch() / "rewards.json";
  std::ofstream(config) << R"([{"name": "format", "weight": 0.5}])";
  REQUIRE(run("score --config " + config.string(), good + "\n").out ==
          good.substr(0, good.size() - 1) + R"(,"rewards":{"format":1},"reward":0.5})" + "\n");
  REQUIRE(run("score --rewards nonsense", good + "\n").status == 2);
  REQUIRE(stderr_text().find("nonsense") != std::string::npos);
}

TEST_CASE("grpo verify takes Math-Verify's harness settings per line and as flags", "[tools]") {
  // float_rounding 2: 3.14159 and 3.14 agree to two places (not to the default six); extraction expr only: the
  // LaTeX gold has no plain-number answer, so nothing is equal.
  auto r = run("verify --jsonl",
               R"({"gold": "3.14159", "pred": "$3.14$"})" "\n"
               R"({"gold": "3.14159", "pred": "$3.14$", "config": {"float_rounding": 2}})" "\n"
               R"({"gold": "\\frac{1}{2}", "pred": "$0.5$"})" "\n"
               R"({"gold": "\\frac{1}{2}", "pred": "$0.5$", "config": {"extraction": ["expr"], "strict": true}})" "\n"
               R"({"gold": "1", "pred": "1", "config": {"rounding": 2}})" "\n"
               R"({"gold": "1", "pred": "1", "config": {"extraction": ["text"]}})" "\n");
  CHECK(r.status == 1);
  std::istringstream lines(r.out);
  std::vector<std::string> out;
  for (std::string line; std::getline(lines, line);) out.push_back(line);
  REQUIRE(out.size() == 6);
  CHECK_THAT(out[0], Catch::StartsWith(R"({"equivalent":false,"verdict":"not_equal")"));
  CHECK_THAT(out[1], Catch::StartsWith(R"({"equivalent":true,"verdict":"equal")"));
  CHECK_THAT(out[2], Catch::StartsWith(R"({"equivalent":true,"verdict":"equal")"));
  CHECK_THAT(out[3], Catch::StartsWith(R"({"equivalent":false)"));
  CHECK_THAT(out[4], Catch::Contains("config: unknown key 'rounding'"));
  CHECK_THAT(out[5], Catch::Contains("extraction: 'text' is not a target (latex, expr)"));
  CHECK(run("verify --gold 3.14159 --pred '$3.14$' --float-rounding 2").out == "true\n");
  CHECK(run("verify --gold 3.14159 --pred '$3.14$'").out == "false\n");
  const auto bad = run("verify --gold 1 --pred 1 --harness sympy_expr_eq");
  CHECK(bad.status == 2);
}

TEST_CASE("grpo tokenize gives Hugging Face's ids for the real Qwen tokenizer", "[tools][needs-tokenizer]") {
  const auto found = grpo::text::testing::find_tokenizer_dir("qwen3");
  if (!found) GRPO_SKIP(grpo::text::testing::missing_tokenizer("qwen3"));
  const fs::path dir = *found;
  // ids from Hugging Face's tokenizer (tests/text/data/qwen3_reference.jsonl)
  auto r = run("tokenize --tokenizer " + dir.string(),
               R"({"text": "Hello, world! How are you doing today? I'm fine; thanks."})" "\n");
  REQUIRE(r.out == "{\"ids\":[9707,11,1879,0,2585,525,498,3730,3351,30,358,2776,6915,26,9339,13]}\n");
  auto chat = run("tokenize --chat --tokenizer " + dir.string(), R"({"messages": [{"role": "user", "content": "hi"}]})" "\n");
  // <|im_start|> user \n hi <|im_end|> \n
  REQUIRE(chat.out == "{\"ids\":[151644,872,198,6023,151645,198]}\n");
  // Hugging Face's add_generation_prompt, given the tokenizer.json path (its tokenizer_config.json is beside it);
  // the ids from tests/text/data/qwen3_reference.jsonl.
  auto prompt = run("tokenize --chat --tokenizer " + (dir / "tokenizer.json").string(),
                    R"({"messages": [{"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": true})"
                    "\n"
                    R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": "yes"})" "\n");
  CHECK(prompt.status == 1);  // the second line is bad
  CHECK_THAT(prompt.out, Catch::StartsWith("{\"ids\":[151644,872,198,3838,374,220,17,10,17,30,151645,198,151644,77091,"
                                           "198]}\n"));
  CHECK_THAT(prompt.out, Catch::Contains("add_generation_prompt\\\" should be true or false"));
}

TEST_CASE("grpo logprobs matches log-softmax of the model's logits", "[tools]") {
  torch::manual_seed(3);
  grpo::models::CausalLM model(grpo::testing::tiny_model_config({.vocab = 11}));
  const auto dir = scratch() / "model";
  grpo::models::save_pretrained(model, dir);
  auto r = run("logprobs --model " + dir.string(), "{\"ids\": [1, 5, 3, 9]}\n{\"ids\": [1]}\n");
  REQUIRE(r.status == 1);  // the one-token line is an error
  auto ids = torch::tensor({1, 5, 3, 9}, torch::kInt64).unsqueeze(0);
  auto log_p = torch::log_softmax(model->forward(ids)[0], -1);
  std::string expected = "{\"logprobs\":[";
  std::vector<float> values;
  for (int t = 0; t < 3; ++t) values.push_back(log_p[t][ids[0][t + 1].item<int64_t>()].item<float>());
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);
  REQUIRE(line.rfind(expected, 0) == 0);
  std::istringstream numbers(line.substr(expected.size()));
  for (float v : values) {
    double parsed = 0;
    char sep = 0;
    numbers >> parsed >> sep;
    REQUIRE(parsed == Approx(v).margin(1e-5));
  }
  std::getline(lines, line);
  REQUIRE(line.find("at least two tokens") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("grpo score runs code_tests on ROLL code rows in the sandbox", "[tools][sandbox]") {
  const std::string right =
      R"({"id": "c1", "tag": "code", "case_type": "input", "test_case_function": "", "test_cases": "[{\"input\": \"3\\n\", \"expected_output\": \"6\\n\"}, {\"input\": \"5\\n\", \"expected_output\": \"10\\n\"}]", "completion": "```python\nprint(int(input()) * 2)\n```"})";
  const std::string half =
      R"({"id": "c2", "tag": "code", "case_type": "input", "test_case_function": "", "test_cases": "[{\"input\": \"3\\n\", \"expected_output\": \"6\\n\"}, {\"input\": \"5\\n\", \"expected_output\": \"10\\n\"}]", "completion": "```python\nprint(6)\n```"})";
  const std::string math = R"({"id": "m1", "tag": "math", "case_type": "", "test_cases": "", "completion": "42"})";
  auto r = run("score --rewards code_tests --threads 2", right + "\n" + half + "\n" + math + "\n");
  REQUIRE(r.status == 0);
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);
  CHECK(line == right.substr(0, right.size() - 1) + R"(,"rewards":{"code_tests":1},"reward":1})");
  std::getline(lines, line);  // 1 of 2 tests: pass rate 0.5
  CHECK(line == half.substr(0, half.size() - 1) + R"(,"rewards":{"code_tests":0.5},"reward":0.5})");
  std::getline(lines, line);  // a math row has no tests: no value
  CHECK(line == math.substr(0, math.size() - 1) + R"(,"rewards":{"code_tests":null},"reward":null})");
}

namespace {

/// A tiny causal LM over the tiny task's words with its tokenizer (DIR/lm), pairs preferring an answer of 9 to an
/// answer of 0 after any prompt (DIR/pairs.jsonl), and a line without its rejected side (DIR/bad.jsonl).
fs::path train_rm_inputs(const std::string& name) {
  const auto dir = scratch() / name;
  fs::remove_all(dir);
  torch::manual_seed(5);
  grpo::models::save_pretrained(grpo::train::tiny_task_model(5), dir / "lm");
  std::ofstream(dir / "lm" / "tokenizer.json") << grpo::train::TinyTask::tokenizer_json();
  std::ofstream pairs(dir / "pairs.jsonl");
  for (int i = 0; i < 12; ++i) {
    pairs << R"({"prompt": "max )" << i % 10 << R"( 1 2 3 4 =", "chosen": "<answer> 9 </answer>", )"
          << R"("rejected": "<answer> 0 </answer>"})" << "\n";
  }
  std::ofstream(dir / "bad.jsonl") << R"({"prompt": "max 1 =", "chosen": "<answer> 9 </answer>"})" << "\n";
  return dir;
}

/// train_rm_results.json's held-out loss before and after training.
std::pair<double, double> held_out_losses(const fs::path& rm) {
  simdjson::dom::parser parser;
  const simdjson::dom::element results = parser.load((rm / "train_rm_results.json").string());
  return {double(results["before"]["loss"]), double(results["after"]["loss"])};
}

}  // namespace

TEST_CASE("grpo train-rm trains a reward model on preference pairs and writes a directory the reward_model reward "
          "reads, and bad flags or pairs are errors that name them",
          "[tools][reward_model]") {
  const auto dir = train_rm_inputs("train_rm");
  const std::string common = " --pairs " + (dir / "pairs.jsonl").string() + " --eval-pairs " +
                             (dir / "pairs.jsonl").string() + " --epochs 4 --batch-size 4 --lr 1e-2 --seed 2";
  const auto r = run("train-rm --model " + (dir / "lm").string() + common + " --out " + (dir / "rm").string());
  INFO(r.out << stderr_text());
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("12 training pairs, 12 held out"));
  simdjson::dom::parser parser;
  const simdjson::dom::element results = parser.load((dir / "rm" / "train_rm_results.json").string());
  CHECK(simdjson::dom::array(results["epochs"]).size() == 4);
  CHECK(double(results["after"]["accuracy"]) == 1.0);
  CHECK(double(results["after"]["loss"]) < double(results["before"]["loss"]));
  // The directory is a sequence classifier with the tokenizer copied, and the registry's reward reads it: the chosen
  // side scores above the rejected one.
  auto rm = grpo::models::value_model_from_pretrained(dir / "rm");
  CHECK(rm->layout() == grpo::models::ScalarHeadLayout::sequence_classification);
  CHECK(fs::exists(dir / "rm" / "tokenizer.json"));
  const auto reward = grpo::rewards::RewardRegistry::with_builtins().create(
      R"({"name": "reward_model", "model_dir": )" + grpo::json_quoted((dir / "rm").string()) + "}");
  std::vector<grpo::rewards::Completion> sides(2);
  sides[0].prompt = sides[1].prompt = "max 5 1 2 3 4 =";
  sides[0].text = "<answer> 9 </answer>";
  sides[1].text = "<answer> 0 </answer>";
  const auto scores = reward->score(sides, {});
  CHECK(*scores[0] > *scores[1]);
  // Training it further from the written directory.
  const auto again = run("train-rm --reward-model " + (dir / "rm").string() + common + " --out " + (dir / "rm2").string());
  INFO(stderr_text());
  CHECK(again.status == 0);

  const auto error = [&](const std::string& args) {
    const auto result = run("train-rm " + args);
    CHECK(result.status == 2);
    return stderr_text();
  };
  const std::string out = " --out " + (dir / "x").string();
  CHECK_THAT(error(out), Catch::Contains("give one of --task tiny, --model DIR or --reward-model DIR"));
  CHECK_THAT(error("--model " + (dir / "lm").string() + out), Catch::Contains("--pairs FILE is required"));
  CHECK_THAT(error("--task tiny --pairs " + (dir / "pairs.jsonl").string() + out),
             Catch::Contains("--task tiny makes its own pairs"));
  CHECK_THAT(error("--model " + (dir / "lm").string() + " --pairs " + (dir / "bad.jsonl").string() + out),
             Catch::Contains("bad.jsonl:1") && Catch::Contains("rejected"));
  CHECK_THAT(error("--reward-model " + (dir / "lm").string() + " --pairs " + (dir / "pairs.jsonl").string() + out),
             Catch::Contains("--reward-model " + (dir / "lm").string()) && Catch::Contains("no scalar head"));
  CHECK_THAT(error("--model " + (dir / "lm").string() + common + " --max-length 0" + out),
             Catch::Contains("max_length") && Catch::Contains("--max-length"));
  CHECK_THAT(error("--model " + (dir / "none").string() + common + out), Catch::Contains("not a directory"));
  fs::remove_all(dir);
}

TEST_CASE("grpo train-rm --lora-r trains adapters and the score head only, merged into the checkpoint it writes, "
          "and --dtype bf16 trains bf16 weights through fp32 masters",
          "[tools][reward_model]") {
  const auto dir = train_rm_inputs("train_rm_lora");
  const std::string common = " --model " + (dir / "lm").string() + " --pairs " + (dir / "pairs.jsonl").string() +
                             " --eval-pairs " + (dir / "pairs.jsonl").string() + " --epochs 4 --batch-size 4 --seed 2";
  const auto train = [&](const std::string& flags, const std::string& out) {
    const auto r = run("train-rm" + common + flags + " --out " + (dir / out).string());
    INFO(r.out << stderr_text());
    REQUIRE(r.status == 0);
    return r.out;
  };
  train(" --lr 0", "start");  // the starting weights and head (the same seed draws the same head)
  const std::string lora_out = train(" --lr 1e-2 --lora-r 4 --lora-target-modules q_proj,v_proj", "lora");
  CHECK_THAT(lora_out, Catch::Contains("LoRA r=4 on 4 modules"));  // the tiny model's two layers
  const auto [lora_before, lora_after] = held_out_losses(dir / "lora");
  CHECK(lora_after < lora_before);
  // Frozen weights are written as they were, the adapted ones merged (W + B·A·scaling), the head trained; what is
  // written is a plain sequence classifier (no adapter tensors: it loads as one).
  const auto start = grpo::io::load_checkpoint_tensors(dir / "start");
  const auto lora = grpo::io::load_checkpoint_tensors(dir / "lora");
  REQUIRE(lora.size() == start.size());
  std::int64_t adapted = 0;
  for (const auto& [name, w] : start) {
    INFO(name);
    const bool target = name.find("q_proj.weight") != std::string::npos || name.find("v_proj.weight") != std::string::npos;
    const bool trained = target || name == "score.weight";
    CHECK(torch::equal(lora.at(name), w) != trained);
    adapted += target;
  }
  CHECK(adapted == 4);
  CHECK(grpo::models::value_model_from_pretrained(dir / "lora")->layout() ==
        grpo::models::ScalarHeadLayout::sequence_classification);

  const std::string bf16_out = train(" --lr 1e-2 --dtype bf16", "bf16");
  CHECK_THAT(bf16_out, Catch::Contains("(bf16)"));
  const auto [bf16_before, bf16_after] = held_out_losses(dir / "bf16");
  CHECK(bf16_after < bf16_before);
  for (const auto& [name, w] : grpo::io::load_checkpoint_tensors(dir / "bf16")) {
    INFO(name);
    CHECK(w.scalar_type() == torch::kBFloat16);
  }
  // LoRA beside a bf16 base: the adapters train in fp32, the base stays as it was (rounded to bf16 once).
  train(" --lr 1e-2 --dtype bf16 --lora-r 4 --gradient-checkpointing on", "bf16_lora");
  const auto bf16_lora = grpo::io::load_checkpoint_tensors(dir / "bf16_lora");
  CHECK(torch::equal(bf16_lora.at("model.embed_tokens.weight"),
                     start.at("model.embed_tokens.weight").to(torch::kBFloat16)));
  CHECK_FALSE(torch::equal(bf16_lora.at("model.layers.0.self_attn.q_proj.weight"),
                           start.at("model.layers.0.self_attn.q_proj.weight").to(torch::kBFloat16)));

  const auto error = [&](const std::string& flags) {
    const auto result = run("train-rm" + common + flags + " --out " + (dir / "x").string());
    CHECK(result.status == 2);
    return stderr_text();
  };
  CHECK_THAT(error(" --lora-alpha 8"), Catch::Contains("--lora-alpha") && Catch::Contains("need --lora-r"));
  CHECK_THAT(error(" --optimizer-precision compensated"),
             Catch::Contains("--optimizer-precision compensated") && Catch::Contains("--dtype bf16"));
  CHECK_THAT(error(" --lora-r 4 --lora-target-modules gate"),
             Catch::Contains("--lora-r/--lora-target-modules") && Catch::Contains("target_modules"));
  const auto fp16 = run("train-rm" + common + " --dtype fp16 --out " + (dir / "x").string());  // CLI11's own check
  CHECK(fp16.status != 0);
  CHECK_THAT(stderr_text(), Catch::Contains("--dtype"));
  fs::remove_all(dir);
}
