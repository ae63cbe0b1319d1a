// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/dataset.hpp>
#include <support/test_paths.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

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

  // `messages` as a JSON list (ROLL's multi-domain files) reads the same as the string holding it.
  const Dataset listed = Dataset::parse(
      R"({"id": "7", "messages": [{"role": "system", "content": "Reason."}, {"role": "user", "content": "1+1?\n"}], "ground_truth": "2", "tag": "math"})",
      "roll_list.jsonl", options);
  REQUIRE(listed.size() == 1);
  REQUIRE(listed[0].prompt.size() == 2);
  CHECK(listed[0].prompt[0].role == first.prompt[0].role);
  CHECK(listed[0].prompt[0].content == first.prompt[0].content);
  CHECK(listed[0].prompt[1].role == first.prompt[1].role);
  CHECK(listed[0].prompt[1].content == first.prompt[1].content);
  CHECK(listed[0].ground_truth == "2");
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
      {R"({"messages": "not json", "ground_truth": "1"})", &roll, "field 'messages' is not a JSON list of messages"},
      {R"({"messages": "{\"role\": \"user\"}", "ground_truth": "1"})", &roll, "field 'messages' should be a JSON list"},
      {R"({"messages": "[{\"role\": \"user\"}]", "ground_truth": "1"})", &roll, "missing field 'messages[0].content'"},
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

TEST_CASE("public data sets (tests/data/datasets): ROLL, GSM8K row counts and known rows", "[io][dataset]") {
  const fs::path dir = fs::path(grpo::testing::test_data_dir()) / "datasets";
  const Dataset deepmath = Dataset::load(dir / "roll_deepmath_train_head100.jsonl");
  CHECK(deepmath.size() == 100);
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

  const Dataset gsm8k_train = Dataset::load(dir / "gsm8k_train_head50.jsonl");
  CHECK(gsm8k_train.size() == 50);
  const Dataset gsm8k_test = Dataset::load(dir / "gsm8k_test_head200.jsonl");
  CHECK(gsm8k_test.size() == 200);
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

namespace {

// A ROLL row as JSON text: `fields` is the JSON text of the other fields ("" for none).
std::string roll_row(const std::string& fields) {
  return R"({"messages": "[{\"role\": \"user\", \"content\": \"q\"}]")" + (fields.empty() ? "" : ", " + fields) + "}";
}

DatasetOptions three_domains() {
  DatasetOptions options;
  options.format = DatasetFormat::roll;
  options.domains = {{"math", grpo::io::DomainKind::math},
                     {"code", grpo::io::DomainKind::code},
                     {"general", grpo::io::DomainKind::general}};
  return options;
}

std::vector<std::string> list_field(const grpo::io::Example& example, std::string_view field) {
  const auto* value = example.row->find(field);
  if (value == nullptr) return {"<absent>"};
  const auto* list = std::get_if<std::vector<std::string>>(value);
  return list == nullptr ? std::vector<std::string>{"<not a list>"} : *list;
}

}  // namespace

TEST_CASE("ROLL multi-domain rows: tag, difficulty, id and the fields of each domain kind", "[io][dataset][domains]") {
  const std::string text =
      roll_row(R"("id": "m1", "tag": "math", "difficulty": "4.5", "ground_truth": "\\frac{1}{2}")") + "\n" +
      roll_row(R"("id": 17, "tag": "math", "difficulty": 3, "ground_truth": 18.0)") + "\n" +
      roll_row(R"("tag": "math", "ground_truth": {"steps": ["x = 1/2", "y = 2x = 1"], "final_answer": "2"}, )"
               R"("difficulty": " 7 ")") + "\n" +
      roll_row(R"("tag": "math", "ground_truth": {"steps": [], "final_answer": 42})") + "\n" +
      roll_row(R"("tag": "math", "ground_truth": "{1, 2}")") + "\n" +  // a set written as text, not an object
      roll_row(R"("id": "c1", "tag": "code", "case_type": "stdin", )"
               R"("test_cases": [{"input": "1 2\n", "expected_output": "3\n"}])") + "\n" +
      roll_row(R"("id": "c2", "tag": "code", "case_type": "stdin_stdout", )"
               R"("test_cases": "[{\"input\": \"5\\n\", \"expected_output\": \"25\\n\"}]", "ground_truth": "")") + "\n" +
      roll_row(R"("id": "c3", "tag": "code", "case_type": "unittest", "test_cases": ["assert f(1) == 2"])") + "\n" +
      roll_row(R"("id": "g1", "tag": "general", "evaluation_criteria": ["accurate", "concise"])") + "\n" +
      roll_row(R"("id": "g2", "tag": "general", "evaluation_criteria": "[\"cites the source\"]", )"
               R"("ground_truth": "Paris")") + "\n";
  const Dataset dataset = Dataset::parse(text, "mixed.jsonl", three_domains());
  REQUIRE(dataset.size() == 10);
  CHECK(dataset.skipped_rows() == 0);

  const auto& string_truth = dataset[0];
  CHECK(string_truth.id == "m1");
  CHECK(string_truth.tag == "math");
  CHECK(string_truth.difficulty == 4.5);
  CHECK(string_truth.ground_truth == "\\frac{1}{2}");
  CHECK(string_truth.prompt.size() == 1);
  CHECK(!string_truth.row->contains("ground_truth_steps"));

  const auto& number_truth = dataset[1];
  CHECK(number_truth.id == "17");
  CHECK(number_truth.difficulty == 3.0);
  CHECK(number_truth.ground_truth == "18");

  const auto& object_truth = dataset[2];
  CHECK(object_truth.id == "mixed.jsonl:3");  // no id: the source
  CHECK(object_truth.difficulty == 7.0);
  CHECK(object_truth.ground_truth == "2");
  CHECK(field_text(object_truth, "ground_truth") == "2");  // the accuracy reward reads the final answer
  CHECK(list_field(object_truth, "ground_truth_steps") == std::vector<std::string>{"x = 1/2", "y = 2x = 1"});

  CHECK(dataset[3].ground_truth == "42");  // a numeric final answer, in shortest form
  CHECK(list_field(dataset[3], "ground_truth_steps").empty());
  CHECK(!dataset[3].difficulty.has_value());

  CHECK(dataset[4].ground_truth == "{1, 2}");  // a string starting with '{' stays text
  CHECK(!dataset[4].row->contains("ground_truth_steps"));

  CHECK(dataset[5].id == "c1");
  CHECK(dataset[5].tag == "code");
  CHECK(dataset[5].ground_truth.empty());  // code rows need no gold answer
  CHECK(dataset[6].ground_truth.empty());
  CHECK(field_text(dataset[6], "test_cases").starts_with("[{"));  // kept as given, for the code reward
  CHECK(dataset[7].id == "c3");

  CHECK(dataset[8].tag == "general");
  CHECK(dataset[8].ground_truth.empty());
  CHECK(list_field(dataset[8], "evaluation_criteria") == std::vector<std::string>{"accurate", "concise"});
  CHECK(dataset[9].ground_truth == "Paris");
  // A JSON string holding the list becomes the list, which the judge joins.
  CHECK(list_field(dataset[9], "evaluation_criteria") == std::vector<std::string>{"cites the source"});

  // Without domains the roll format reads the same rows' math fields (and needs ground_truth everywhere).
  DatasetOptions plain;
  plain.format = DatasetFormat::roll;
  const Dataset math_only =
      Dataset::parse(text.substr(0, text.rfind('\n', text.find("\"c1\"")) + 1), "plain.jsonl", plain);
  CHECK(math_only.size() == 5);
  CHECK(math_only[2].ground_truth == "2");
  CHECK(list_field(math_only[2], "ground_truth_steps") == std::vector<std::string>{"x = 1/2", "y = 2x = 1"});
  CHECK(math_only[0].tag == "math");
  CHECK(math_only[0].difficulty == 4.5);
}

TEST_CASE("ROLL rows as ROLL ships them: judge rows, prompt rows, the domain field and unknown tags",
          "[io][dataset][domains]") {
  // ROLL's multi-subject judge file: tag RLVR, a system message and the question, ground_truth only.
  const std::string judge_row =
      R"({"id": "j1", "tag": "RLVR", "messages": "[{\"role\": \"system\", \"content\": \"Answer briefly.\"}, )"
      R"({\"role\": \"user\", \"content\": \"Which gas do plants absorb?\"}]", "ground_truth": "CO2"})";
  // data_args.prompt instead of messages; a `domain` field wins over the tag (ROLL's update_dataset_domain).
  const std::string prompt_row = R"({"id": "p1", "tag": "deepmath", "prompt": "1 + 1 = ?", "ground_truth": "2"})";
  const std::string domain_row = R"({"id": "d1", "tag": "whatever", "domain": "judge", "prompt": "Capital of )"
                                 R"(France?", "ground_truth": "Paris"})";
  const std::string unknown_row = R"({"id": "u1", "tag": "olympiad", "prompt": "2 + 2 = ?", "ground_truth": "4"})";
  DatasetOptions options;
  options.domains = {{"math_rule", grpo::io::DomainKind::math, {"deepmath", "aime"}},
                     {"judge", grpo::io::DomainKind::general, {"RLVR"}}};
  const std::string text = judge_row + "\n" + prompt_row + "\n" + domain_row + "\n";
  const Dataset data = Dataset::parse(text, "roll.jsonl", options);
  REQUIRE(data.size() == 3);
  CHECK(data[0].domain == "judge");
  CHECK(data[0].ground_truth == "CO2");
  CHECK(data[0].prompt.size() == 2);
  CHECK(!data[0].raw_prompt);
  CHECK(data[1].domain == "math_rule");
  CHECK(data[1].raw_prompt == "1 + 1 = ?");  // used as it is, no chat template
  REQUIRE(data[1].prompt.size() == 1);
  CHECK(data[1].prompt[0].role == "user");
  CHECK(data[2].domain == "judge");
  CHECK(data[2].tag == "whatever");
  // A `domain` field naming no configured domain leaves the choice to the tag (ROLL's benchmark rows say
  // domain math_rule, tag aime2024, and a run may configure domains by tag).
  CHECK(Dataset::parse(R"({"domain": "math", "tag": "aime", "prompt": "1 + 2", "ground_truth": "3"})", "r.jsonl",
                       options)[0].domain == "math_rule");

  // A tag no domain claims: an error by default, skipped (and counted, with the reason), or sent to a domain.
  const std::string with_unknown = text + unknown_row + "\n";
  CHECK_THAT(parse_error_of([&] { Dataset::parse(with_unknown, "roll.jsonl", options); }),
             Catch::Contains("roll.jsonl:4: tag 'olympiad' is not a configured domain") &&
                 Catch::Contains("math_rule (tags deepmath, aime), judge (tags RLVR)") && Catch::Contains("unknown_tag"));
  DatasetOptions skip = options;
  grpo::io::set_unknown_tag(skip, "skip");
  const Dataset skipped = Dataset::parse(with_unknown, "roll.jsonl", skip);  // on_bad_row stop: skipped anyway
  CHECK(skipped.size() == 3);
  REQUIRE(skipped.skip_reasons().size() == 1);
  CHECK_THAT(skipped.skip_reasons()[0], Catch::StartsWith("roll.jsonl:4: tag 'olympiad'"));
  DatasetOptions to_math = options;
  grpo::io::set_unknown_tag(to_math, "math");  // no domain is called math: the first math domain, as ROLL does
  CHECK(to_math.unknown_tag_domain == "math_rule");
  const Dataset routed = Dataset::parse(with_unknown, "roll.jsonl", to_math);
  REQUIRE(routed.size() == 4);
  CHECK(routed[3].domain == "math_rule");
  CHECK(routed[3].ground_truth == "4");
  grpo::io::set_unknown_tag(to_math, "judge");
  CHECK(Dataset::parse(with_unknown, "roll.jsonl", to_math)[3].domain == "judge");
  CHECK_THROWS_WITH(grpo::io::set_unknown_tag(to_math, "poetry"),
                    Catch::Contains("unknown_tag: 'poetry' is neither error, skip nor a configured domain"));
  DatasetOptions twice = options;
  twice.domains.push_back({"again", grpo::io::DomainKind::math, {"aime"}});
  CHECK_THROWS_WITH(Dataset::parse(text, "roll.jsonl", twice),
                    Catch::Contains("domains.again: tag 'aime' is claimed by domain 'math_rule' too"));
}

TEST_CASE("ROLL multi-domain rows: bad rows name file:line, the field and the tag", "[io][dataset][domains]") {
  struct Case {
    std::string row;
    std::vector<std::string> expected;  // all in the message, after "dom.jsonl:2: "
  };
  const std::vector<Case> cases = {
      {roll_row(R"("tag": "poetry", "ground_truth": "1")"),
       {"tag 'poetry' is not a configured domain (configured: math, code, general"}},
      {roll_row(R"("ground_truth": "1")"), {"missing field 'tag'", "math, code, general"}},
      {roll_row(R"("domain": "poetry", "tag": "verse", "ground_truth": "1")"),
       {"tag 'verse' is not a configured domain (nor is its field 'domain', 'poetry')"}},
      {roll_row(R"("domain": "poetry", "ground_truth": "1")"),
       {"field 'domain': 'poetry' is not a configured domain, and the row has no 'tag'"}},
      {roll_row(R"("tag": ["math"], "ground_truth": "1")"), {"field 'tag' should be text"}},
      {roll_row(R"("tag": "math")"), {"tag 'math': field 'ground_truth' is missing"}},
      {roll_row(R"("tag": "math", "ground_truth": " ")"), {"tag 'math': field 'ground_truth' is empty"}},
      {roll_row(R"("tag": "math", "ground_truth": ["1", "2"])"), {"tag 'math': field 'ground_truth'", "got a list"}},
      {roll_row(R"("tag": "math", "ground_truth": {"steps": ["a = 1"]})"),
       {"tag 'math': field 'ground_truth' is an object without 'final_answer'"}},
      {roll_row(R"("tag": "math", "ground_truth": {"steps": "a = 1", "final_answer": "1"})"),
       {"tag 'math': field 'ground_truth': 'steps' should be a list of strings"}},
      {roll_row(R"("tag": "math", "ground_truth": {"steps": ["a = 1", 2], "final_answer": "1"})"),
       {"tag 'math': field 'ground_truth': step 1 should be a string"}},
      {roll_row(R"("tag": "math", "ground_truth": {"final_answer": ["1"]})"),
       {"tag 'math': field 'ground_truth': 'final_answer' should be text or a number"}},
      {roll_row(R"("tag": "math", "ground_truth": "1", "difficulty": "hard")"),
       {"tag 'math': field 'difficulty' should be a number, got \"hard\""}},
      {roll_row(R"("tag": "code")"), {"tag 'code': field 'test_cases' is missing"}},
      {roll_row(R"("tag": "code", "test_cases": "")"), {"tag 'code': field 'test_cases' cannot be read"}},
      {roll_row(R"("tag": "code", "test_cases": "not json")"), {"tag 'code': field 'test_cases' cannot be read"}},
      {roll_row(R"("tag": "code", "test_cases": [], "case_type": "stdin")"),
       {"tag 'code': field 'test_cases' cannot be read"}},
      {roll_row(R"("tag": "code", "case_type": "interactive", "test_cases": [{"input": "1", "expected_output": "1"}])"),
       {"tag 'code': field 'test_cases' cannot be read", "case_type 'interactive'"}},
      {roll_row(R"("tag": "general")"), {"tag 'general': general rows need 'ground_truth'", "or 'evaluation_criteria'"}},
      {roll_row(R"("tag": "general", "ground_truth": " ")"), {"tag 'general': field 'ground_truth' is empty"}},
      {R"({"tag": "math", "ground_truth": "1"})", {"tag 'math': missing field 'messages'"}},
      {R"({"prompt": " ", "tag": "math", "ground_truth": "1"})", {"tag 'math': field 'prompt' is empty"}},
      {roll_row(R"("tag": "general", "evaluation_criteria": [])"),
       {"tag 'general': field 'evaluation_criteria' is an empty list"}},
      {roll_row(R"("tag": "general", "evaluation_criteria": "be nice")"),
       {"tag 'general': field 'evaluation_criteria' should be a list of strings"}},
      {roll_row(R"("tag": "general", "evaluation_criteria": [{"name": "x"}])"),
       {"tag 'general': field 'evaluation_criteria' should be a list of strings"}},
      {roll_row(R"("tag": "general", "evaluation_criteria": ["ok", " "])"),
       {"tag 'general': field 'evaluation_criteria': item 1 is empty"}},
      {R"({"messages": "not json", "tag": "math", "ground_truth": "1"})",
       {"tag 'math': field 'messages' is not a JSON list of messages"}},
  };
  const std::string good = roll_row(R"("tag": "math", "ground_truth": "1")");
  for (const Case& c : cases) {
    INFO(c.row);
    const std::string text = good + "\n" + c.row + "\n" + good + "\n";
    const std::string message = parse_error_of([&] { Dataset::parse(text, "dom.jsonl", three_domains()); });
    CHECK_THAT(message, Catch::StartsWith("dom.jsonl:2: "));
    for (const std::string& part : c.expected) CHECK_THAT(message, Catch::Contains(part));

    DatasetOptions skip = three_domains();
    skip.on_bad_row = BadRowPolicy::skip;
    const Dataset kept = Dataset::parse(text, "dom.jsonl", skip);
    CHECK(kept.size() == 2);
    CHECK(kept.skipped_rows() == 1);
    REQUIRE(kept.skip_reasons().size() == 1);
    CHECK(kept.skip_reasons()[0] == message);
  }

  // All the bad rows in one file under the skip policy: every one counted, the good rows kept.
  std::string all = good + "\n";
  for (const Case& c : cases) all += c.row + "\n";
  DatasetOptions skip = three_domains();
  skip.on_bad_row = BadRowPolicy::skip;
  const Dataset kept = Dataset::parse(all, "dom.jsonl", skip);
  CHECK(kept.size() == 1);
  CHECK(kept.skipped_rows() == cases.size());
  CHECK_THAT(kept.skip_reasons().back(), Catch::StartsWith(fmt::format("dom.jsonl:{}: ", cases.size() + 1)));

  // Without domains: an object ground truth is still checked, a non-numeric difficulty is still a roll error.
  DatasetOptions plain;
  plain.format = DatasetFormat::roll;
  CHECK_THAT(parse_error_of([&] { Dataset::parse(roll_row(R"("ground_truth": {"steps": []})"), "p.jsonl", plain); }),
             Catch::StartsWith("p.jsonl:1: field 'ground_truth' is an object without 'final_answer'"));
  CHECK_THAT(parse_error_of([&] {
               Dataset::parse(roll_row(R"("ground_truth": "1", "difficulty": "x")"), "p.jsonl", plain);
             }),
             Catch::Contains("field 'difficulty' should be a number"));
  // Other formats keep a non-numeric difficulty in the row only.
  const Dataset trl = Dataset::parse(R"({"problem": "p", "solution": "s", "difficulty": "hard", "id": 4})", "t");
  CHECK(!trl[0].difficulty.has_value());
  CHECK(trl[0].id == "4");
  CHECK(trl[0].tag.empty());
}

TEST_CASE("ROLL multi-domain rows: detection, configuration errors, concat", "[io][dataset][domains]") {
  DatasetOptions detect = three_domains();
  detect.format = DatasetFormat::detect;
  // messages + tag is enough to read a file as roll when domains are configured (a code row has no ground truth).
  const Dataset code = Dataset::parse(
      roll_row(R"("tag": "code", "test_cases": [{"input": "1", "expected_output": "1"}])"), "code.jsonl", detect);
  REQUIRE(code.size() == 1);
  CHECK(code[0].tag == "code");
  CHECK_THAT(parse_error_of([&] { Dataset::parse(R"({"problem": "p", "solution": "s"})", "d.jsonl", detect); }),
             Catch::StartsWith("d.jsonl:1: DatasetOptions::domains (math, code, general) need ROLL rows"));
  // Without domains, messages + tag alone is not a format.
  CHECK_THROWS_AS(Dataset::parse(roll_row(R"("tag": "code")"), "d.jsonl"), grpo::ParseError);

  DatasetOptions gsm8k = three_domains();
  gsm8k.format = DatasetFormat::gsm8k;
  CHECK_THROWS_WITH(Dataset::parse("", "g", gsm8k), Catch::Contains("domains") && Catch::Contains("gsm8k"));

  CHECK(grpo::io::parse_domain_kind("general") == grpo::io::DomainKind::general);
  CHECK(grpo::io::to_string(grpo::io::DomainKind::code) == "code");
  CHECK_THROWS_WITH(grpo::io::parse_domain_kind("maths"), Catch::Contains("math, code, general"));

  // One Dataset per file, then concat: examples in order, skipped rows summed.
  DatasetOptions skip = three_domains();
  skip.on_bad_row = BadRowPolicy::skip;
  const Dataset math = Dataset::parse(roll_row(R"("tag": "math", "ground_truth": "1")") + "\n" +
                                          roll_row(R"("tag": "math")"),
                                      "math.jsonl", skip);
  const Dataset joined = Dataset::concat({math, code, Dataset()});
  REQUIRE(joined.size() == 2);
  CHECK(joined[0].source == "math.jsonl:1");
  CHECK(joined[1].source == "code.jsonl:1");
  CHECK(joined.skipped_rows() == 1);
  REQUIRE(joined.skip_reasons().size() == 1);
  CHECK_THAT(joined.skip_reasons()[0], Catch::StartsWith("math.jsonl:2: tag 'math'"));
  CHECK(Dataset::concat({}).empty());
}

TEST_CASE("ROLL math benchmarks (tests/data/datasets) with configured domains", "[io][dataset][domains]") {
  const fs::path file = fs::path(grpo::testing::test_data_dir()) / "datasets" / "roll_math_benchmarks.jsonl";
  // The first rows (AIME 2024) only: the test is about the row format, not the whole file.
  std::string head;
  {
    std::ifstream in(file);
    std::string line;
    for (int i = 0; i < 5 && std::getline(in, line); ++i) head += line + "\n";
  }
  DatasetOptions options;
  options.domains = {{"aime2024", grpo::io::DomainKind::math}, {"aime2025", grpo::io::DomainKind::math},
                     {"MATH-500", grpo::io::DomainKind::math}};
  const Dataset first = Dataset::parse(head, "roll_math_benchmarks.jsonl", options);
  REQUIRE(first.size() == 5);
  CHECK(first[0].id == "1");
  CHECK(first[0].tag == "aime2024");
  CHECK(first[0].difficulty == 0.0);
  CHECK(first[0].ground_truth == "204");
  CHECK(first[0].prompt.size() == 2);
  CHECK(first[4].id == "5");

  // The whole file: every row has a configured tag; without MATH-500 those rows are skipped and counted.
  const Dataset all = Dataset::load(file, options);
  CHECK(all.size() == 560);
  std::erase_if(options.domains, [](const grpo::io::DatasetDomain& d) { return d.name == "MATH-500"; });
  options.on_bad_row = BadRowPolicy::skip;
  const Dataset aime = Dataset::load(file, options);
  CHECK(aime.size() == 60);
  CHECK(aime.skipped_rows() == 500);
  CHECK_THAT(aime.skip_reasons()[0], Catch::Contains("tag 'MATH-500' is not a configured domain"));
}

TEST_CASE("parse_dataset_format knows every format by name", "[io][dataset]") {
  CHECK(grpo::io::parse_dataset_format("roll") == grpo::io::DatasetFormat::roll);
  CHECK(grpo::io::parse_dataset_format("gsm8k") == grpo::io::DatasetFormat::gsm8k);
  CHECK(grpo::io::parse_dataset_format("fields") == grpo::io::DatasetFormat::fields);
  CHECK_THROWS_WITH(grpo::io::parse_dataset_format("csv"), Catch::Contains("detect, roll, trl, gsm8k, fields"));
}
