// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/dataset.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace fs = std::filesystem;
using grpo::io::BadRowPolicy;
using grpo::io::Dataset;
using grpo::io::DatasetFormat;
using grpo::io::DatasetOptions;

namespace {

// The message of the grpo::ParseError that `load` throws ("" and a failed check when it throws nothing).
template <typename LoadType>
std::string parse_error_of(LoadType&& load) {
  try {
    load();
  } catch (const grpo::ParseError& error) {
    return error.what();
  }
  FAIL("expected grpo::ParseError");
  return "";
}

std::string field_text(const grpo::io::Example& example, std::string_view field) {
  return example.row->text(field).value_or("<absent>");
}

// A small data set in the "fields" format: prompts "q0".."q<n-1>", answers "0".."n-1".
Dataset numbered(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += fmt::format("{{\"q\": \"q{}\", \"a\": {}}}\n", i, i);
  DatasetOptions options;
  options.format = DatasetFormat::fields;
  options.prompt_field = "q";
  options.answer_field = "a";
  return Dataset::parse(text, "numbered", options);
}

std::vector<std::string> answers(const Dataset& dataset) {
  std::vector<std::string> out;
  for (const auto& example : dataset.examples()) out.push_back(example.ground_truth);
  return out;
}

}  // namespace

TEST_CASE("ROLL rows: the messages string is parsed into the chat, other fields stay in the row", "[io][dataset]") {
  const std::string text =
      R"({"id": "7", "messages": "[{\"role\": \"system\", \"content\": \"Reason.\"}, {\"role\": \"user\", \"content\": \"1+1?\\n\"}]", "ground_truth": "2", "tag": "math", "difficulty": "4.5"})"
      "\n"
      R"({"id": "8", "messages": "[{\"role\": \"user\", \"content\": \"x\"}]", "ground_truth": 18.0, "tag": "aime", "difficulty": 0.0})";
  DatasetOptions options;
  options.format = DatasetFormat::roll;
  options.system_prompt = "ignored for chat prompts";
  const Dataset dataset = Dataset::parse(text, "roll.jsonl", options);
  REQUIRE(dataset.size() == 2);
  const auto& first = dataset[0];
  REQUIRE(first.prompt.size() == 2);
  CHECK(first.prompt[0].role == "system");
  CHECK(first.prompt[0].content == "Reason.");
  CHECK(first.prompt[1].role == "user");
  CHECK(first.prompt[1].content == "1+1?\n");  // "\\n" inside the JSON string inside the JSON line
  CHECK(first.ground_truth == "2");
  CHECK(field_text(first, "id") == "7");
  CHECK(field_text(first, "tag") == "math");
  CHECK(field_text(first, "difficulty") == "4.5");  // a string in one ROLL file ...
  CHECK(first.source == "roll.jsonl:1");
  const auto& second = dataset[1];
  REQUIRE(second.prompt.size() == 1);
  CHECK(second.ground_truth == "18");              // a number: shortest text
  CHECK(field_text(second, "difficulty") == "0");  // ... and a number in the other
  CHECK(second.source == "roll.jsonl:2");
}

TEST_CASE("TRL rows: problem becomes the user message, solution the ground truth", "[io][dataset]") {
  DatasetOptions options;
  options.format = DatasetFormat::trl;
  options.system_prompt = "Think first.";
  const Dataset dataset =
      Dataset::parse(R"({"problem": "What is \"2\"+2?", "solution": "It is $\\boxed{4}$."})", "trl.jsonl", options);
  REQUIRE(dataset.size() == 1);
  REQUIRE(dataset[0].prompt.size() == 2);
  CHECK(dataset[0].prompt[0].role == "system");
  CHECK(dataset[0].prompt[0].content == "Think first.");
  CHECK(dataset[0].prompt[1].role == "user");
  CHECK(dataset[0].prompt[1].content == "What is \"2\"+2?");
  CHECK(dataset[0].ground_truth == "It is $\\boxed{4}$.");
}

TEST_CASE("GSM8K rows: the ground truth is the number after ####, without thousands separators", "[io][dataset]") {
  DatasetOptions options;
  options.format = DatasetFormat::gsm8k;
  const Dataset dataset = Dataset::parse(
      "{\"question\": \"How many?\", \"answer\": \"3 * 6 = <<3*6=18>>18\\n#### 18\"}\r\n"
      "{\"question\": \"Cost?\", \"answer\": \"a\\n#### 1,450,000 \"}\n",
      "gsm8k.jsonl", options);
  REQUIRE(dataset.size() == 2);
  REQUIRE(dataset[0].prompt.size() == 1);
  CHECK(dataset[0].prompt[0].role == "user");
  CHECK(dataset[0].prompt[0].content == "How many?");
  CHECK(dataset[0].ground_truth == "18");
  CHECK(dataset[1].ground_truth == "1450000");
  CHECK(field_text(dataset[1], "answer") == "a\n#### 1,450,000 ");  // the row keeps the full solution

  CHECK(grpo::io::gsm8k_final_answer("x #### 1 #### -7 ") == "-7");  // the last marker counts
  CHECK(grpo::io::gsm8k_final_answer("no marker") == std::nullopt);
  CHECK(grpo::io::gsm8k_final_answer("#### ") == std::nullopt);
}

TEST_CASE("field mapping: any prompt and answer field, plain text or a chat list", "[io][dataset]") {
  DatasetOptions options;
  options.format = DatasetFormat::fields;
  options.prompt_field = "input";
  options.answer_field = "target";
  const Dataset plain = Dataset::parse(R"({"input": "Say hi", "target": 5, "extra": ["a", "b"]})", "f", options);
  REQUIRE(plain.size() == 1);
  REQUIRE(plain[0].prompt.size() == 1);
  CHECK(plain[0].prompt[0].content == "Say hi");
  CHECK(plain[0].ground_truth == "5");
  CHECK(std::get<std::vector<std::string>>(*plain[0].row->find("extra")) == std::vector<std::string>{"a", "b"});

  options.prompt_is_chat = true;  // here an actual JSON list, not a string holding one
  const Dataset chat =
      Dataset::parse(R"({"input": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "target": "t"})",
                     "f", options);
  REQUIRE(chat[0].prompt.size() == 2);
  CHECK(chat[0].prompt[1].role == "assistant");
  CHECK(chat[0].prompt[1].content == "yo");

  DatasetOptions missing;
  missing.format = DatasetFormat::fields;
  missing.prompt_field = "input";
  CHECK_THROWS_AS(Dataset::parse("{}", "f", missing), grpo::ConfigError);
}

TEST_CASE("format detection from the first row's fields", "[io][dataset]") {
  CHECK(Dataset::parse(R"({"messages": "[{\"role\":\"user\",\"content\":\"q\"}]", "ground_truth": "g"})", "d")[0]
            .ground_truth == "g");
  CHECK(Dataset::parse(R"({"problem": "p", "solution": "s"})", "d")[0].ground_truth == "s");
  CHECK(Dataset::parse(R"({"question": "q", "answer": "#### 4"})", "d")[0].ground_truth == "4");
  const std::string message = parse_error_of([] { Dataset::parse("\n{\"text\": \"t\", \"label\": 1}", "d.jsonl"); });
  CHECK_THAT(message, Catch::Contains("d.jsonl:2") && Catch::Contains("label, text") &&
                          Catch::Contains("DatasetOptions::format"));
}

TEST_CASE("JSON array files and JSON-lines files load from disk", "[io][dataset]") {
  const fs::path dir = fs::temp_directory_path() / ("grpo_dataset_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream(dir / "rows.json") << "  [\n {\"problem\": \"a\", \"solution\": \"1\"},\n"
                                        " {\"problem\": \"b\", \"solution\": \"2\"}\n]\n";
    std::ofstream(dir / "rows.jsonl") << "{\"problem\": \"a\", \"solution\": \"1\"}\n\n"
                                         "{\"problem\": \"b\", \"solution\": \"2\"}\n";
  }
  const Dataset array = Dataset::load(dir / "rows.json");
  REQUIRE(array.size() == 2);
  CHECK(array[1].prompt[0].content == "b");
  CHECK(array[1].source == (dir / "rows.json").string() + "[1]");
  const Dataset lines = Dataset::load(dir / "rows.jsonl");
  REQUIRE(lines.size() == 2);
  CHECK(lines[1].source == (dir / "rows.jsonl").string() + ":3");  // the blank line 2 is not a row
  CHECK_THROWS_WITH(Dataset::load(dir / "absent.jsonl"), Catch::Contains("cannot read") && Catch::Contains("absent.jsonl"));
  fs::remove_all(dir);
}

TEST_CASE("malformed rows: stop names file:line and the field, skip counts them", "[io][dataset]") {
  DatasetOptions gsm8k;
  gsm8k.format = DatasetFormat::gsm8k;
  DatasetOptions roll;
  roll.format = DatasetFormat::roll;
  struct Case {
    const char* text;
    const DatasetOptions* options;
    const char* expected;  // in the message, after "bad.jsonl:2: "
  };
  const Case cases[] = {
      {"{\"question\": \"q\", \"answer\": ", &gsm8k, "invalid JSON"},
      {"[1, 2]", &gsm8k, "expected a JSON object"},
      {R"({"question": "q"})", &gsm8k, "missing field 'answer'"},
      {R"({"question": "q", "answer": "no marker"})", &gsm8k, "field 'answer' has no final answer"},
      {R"({"question": ["a", "b"], "answer": "#### 1"})", &gsm8k, "field 'question' should be text"},
      {R"({"messages": "not json", "ground_truth": "1"})", &roll, "field 'messages' is not a JSON chat list"},
      {R"({"messages": "{\"role\": \"user\"}", "ground_truth": "1"})", &roll, "field 'messages' should be a JSON list"},
      {R"({"messages": "[{\"role\": \"user\"}]", "ground_truth": "1"})", &roll, "message 0 should be an object"},
      {R"({"messages": "[]", "ground_truth": "1"})", &roll, "field 'messages' holds no messages"},
      {R"({"messages": "[{\"role\": \"user\", \"content\": \"q\"}]"})", &roll, "missing field 'ground_truth'"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const std::string good = c.options == &roll
                                 ? R"({"messages": "[{\"role\": \"user\", \"content\": \"q\"}]", "ground_truth": "1"})"
                                 : R"({"question": "q", "answer": "#### 1"})";
    const std::string text = good + "\n" + c.text + "\n" + good + "\n";
    const std::string message = parse_error_of([&] { Dataset::parse(text, "bad.jsonl", *c.options); });
    CHECK_THAT(message, Catch::StartsWith("bad.jsonl:2: ") && Catch::Contains(c.expected));

    DatasetOptions skip = *c.options;
    skip.on_bad_row = BadRowPolicy::skip;
    const Dataset kept = Dataset::parse(text, "bad.jsonl", skip);
    CHECK(kept.size() == 2);
    CHECK(kept.skipped_rows() == 1);
    REQUIRE(kept.skip_reasons().size() == 1);
    CHECK(kept.skip_reasons()[0] == message);
    CHECK(kept[1].source == "bad.jsonl:3");
  }
  CHECK_THAT(parse_error_of([] { Dataset::parse("[{\"problem\": \"p\"}]", "a.json"); }),
             Catch::Contains("a.json[0]"));
  CHECK_THAT(parse_error_of([] { Dataset::parse("[{\"problem\": ", "a.json"); }), Catch::Contains("a.json"));
}

TEST_CASE("shuffle is a seeded permutation, split and batches partition it", "[io][dataset]") {
  const Dataset dataset = numbered(20);
  const Dataset a = dataset.shuffled(1);
  const Dataset b = dataset.shuffled(1);
  const Dataset c = dataset.shuffled(2);
  CHECK(answers(a) == answers(b));
  CHECK(answers(a) != answers(c));
  CHECK(answers(a) != answers(dataset));  // identity has probability 1/20!
  std::vector<std::string> sorted = answers(a);
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> expected = answers(dataset);
  std::sort(expected.begin(), expected.end());
  CHECK(sorted == expected);
  CHECK(dataset.shuffled(5).size() == 20);
  CHECK(Dataset().shuffled(3).empty());

  const auto split = dataset.split(6, 1);
  CHECK(split.held_out.size() == 6);
  CHECK(split.train.size() == 14);
  std::vector<std::string> joined = answers(split.held_out);  // held-out = the first 6 of shuffled(1)
  for (const auto& answer : answers(split.train)) joined.push_back(answer);
  CHECK(joined == answers(a));
  CHECK_THROWS_AS(dataset.split(21, 1), grpo::ConfigError);

  const Dataset seven = numbered(7);
  const auto full = seven.batches(3);
  REQUIRE(full.size() == 2);  // 7 = 3 + 3 + 1, the short batch dropped
  CHECK(answers(Dataset(full[1].examples)) == std::vector<std::string>{"3", "4", "5"});
  const auto all = seven.batches(3, /*drop_last=*/false);
  REQUIRE(all.size() == 3);
  CHECK(all[2].size() == 1);
  const auto prompts = all[2].prompts();
  REQUIRE(prompts.size() == 1);
  CHECK(prompts[0][0].content == "q6");
  CHECK(all[2].rows()[0]->text("a") == "6");
  CHECK_THROWS_AS(seven.batches(0), grpo::ConfigError);
}

TEST_CASE("shared datasets: ROLL, GSM8K row counts and known rows", "[io][dataset][shared]") {
  const fs::path dir = fs::path(GRPO_SHARED_DIR) / "datasets";
  if (!fs::exists(dir / "gsm8k_test.jsonl")) {
    WARN("skipped: " << dir << " not found");
    return;
  }
  const Dataset deepmath = Dataset::load(dir / "roll_deepmath_train.jsonl");
  CHECK(deepmath.size() == 4994);
  CHECK(deepmath.skipped_rows() == 0);
  REQUIRE(deepmath[0].prompt.size() == 2);
  CHECK(deepmath[0].prompt[0].role == "system");
  CHECK(deepmath[0].prompt[0].content == "Please reason step by step, and put your final answer within \\boxed{}.");
  CHECK(deepmath[0].prompt[1].content == "Find the least nonnegative residue of \\( \\frac{31!}{22!} \\) modulo 11.");
  CHECK(deepmath[0].ground_truth == "1");
  CHECK(field_text(deepmath[0], "tag") == "deepmath_103k");
  CHECK(deepmath[1].ground_truth == "x");

  const Dataset benchmarks = Dataset::load(dir / "roll_math_benchmarks.jsonl");
  CHECK(benchmarks.size() == 560);  // the last line has no newline
  CHECK(benchmarks[0].ground_truth == "204");
  CHECK(field_text(benchmarks[0], "tag") == "aime2024");
  CHECK(field_text(benchmarks[0], "difficulty") == "0");
  std::map<std::string, int> tags;
  for (const auto& example : benchmarks.examples()) ++tags[field_text(example, "tag")];
  CHECK(tags["aime2024"] == 30);
  CHECK(tags["aime2025"] == 30);

  const Dataset gsm8k_train = Dataset::load(dir / "gsm8k_train.jsonl");
  CHECK(gsm8k_train.size() == 7473);
  const Dataset gsm8k_test = Dataset::load(dir / "gsm8k_test.jsonl");
  CHECK(gsm8k_test.size() == 1319);
  CHECK(gsm8k_test[0].ground_truth == "18");
  CHECK(gsm8k_test[0].prompt[0].content.starts_with("Janet\u2019s ducks lay 16 eggs per day."));
  CHECK(gsm8k_test[1].ground_truth == "3");
  int with_separator = 0;  // answers written "#### 1,450,000" in the file
  for (const auto& example : gsm8k_test.examples()) {
    const std::string raw = field_text(example, "answer");
    if (raw.substr(raw.rfind("####")).find(',') != std::string::npos) {
      ++with_separator;
      CHECK(example.ground_truth.find(',') == std::string::npos);
    }
  }
  CHECK(with_separator > 0);
}

TEST_CASE("parse_dataset_format knows every format by name", "[io][dataset]") {
  CHECK(grpo::io::parse_dataset_format("roll") == grpo::io::DatasetFormat::roll);
  CHECK(grpo::io::parse_dataset_format("gsm8k") == grpo::io::DatasetFormat::gsm8k);
  CHECK(grpo::io::parse_dataset_format("fields") == grpo::io::DatasetFormat::fields);
  CHECK_THROWS_WITH(grpo::io::parse_dataset_format("csv"), Catch::Contains("detect, roll, trl, gsm8k, fields"));
}
