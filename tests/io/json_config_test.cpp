// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/json_config.hpp>
#include <grpo/io/read_file.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using grpo::io::parse_json_config;

TEST_CASE("parse_json_config: scalars and lists become flag text, with file:line", "[io][json_config]") {
  const auto fields = parse_json_config(R"({
  "steps": 200,
  "lr": 1e-3,
  "loss": "dapo",
  "resume": true,
  "rewards": ["accuracy", "format"],
  "weights": [1, 0.5],
  "none": []
})",
                                        "run.json");
  REQUIRE(fields.size() == 7);
  CHECK(fields[0].name == "steps");
  CHECK(fields[0].values == std::vector<std::string>{"200"});
  CHECK(fields[0].source == "run.json:2");
  CHECK(fields[1].values == std::vector<std::string>{"0.001"});
  CHECK(fields[2].values == std::vector<std::string>{"dapo"});
  CHECK(fields[3].values == std::vector<std::string>{"true"});
  CHECK(fields[4].values == std::vector<std::string>{"accuracy", "format"});
  CHECK(fields[4].source == "run.json:6");
  CHECK(fields[5].values == std::vector<std::string>{"1", "0.5"});
  CHECK(fields[6].values.empty());
}

TEST_CASE("parse_json_config: errors name the file, line and field", "[io][json_config]") {
  CHECK_THROWS_WITH(parse_json_config("[1, 2]", "a.json"), Catch::Contains("a.json") && Catch::Contains("object"));
  CHECK_THROWS_WITH(parse_json_config("{\"steps\": ", "a.json"), Catch::Contains("a.json: invalid JSON"));
  CHECK_THROWS_WITH(parse_json_config("{\n\"x\": 1,\n\"x\": 2}", "a.json"), Catch::Contains("a.json:2: field 'x' is repeated"));
  CHECK_THROWS_WITH(parse_json_config("{\n\n \"model\": {\"dir\": 1}}", "a.json"),
                    Catch::Contains("a.json:3: field 'model'") && Catch::Contains("object"));
  CHECK_THROWS_WITH(parse_json_config("{\"seed\": null}", "a.json"), Catch::Contains("got null"));
  CHECK_THROWS_WITH(parse_json_config("{\"l\": [[1]]}", "a.json"), Catch::Contains("field 'l': a list may hold only"));
  CHECK_THROWS_AS(parse_json_config("{}x", "a.json"), grpo::ParseError);
}

TEST_CASE("read_json_config and read_file name a missing file", "[io][json_config]") {
  const auto dir = std::filesystem::temp_directory_path() / "grpo_json_config_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "run.json") << "{\"steps\": 3}\r\n";
  }
  const auto fields = grpo::io::read_json_config(dir / "run.json");
  REQUIRE(fields.size() == 1);
  CHECK(fields[0].source == (dir / "run.json").string() + ":1");
  CHECK(grpo::io::read_file(dir / "run.json") == "{\"steps\": 3}\r\n");
  CHECK_THROWS_WITH(grpo::io::read_json_config(dir / "missing.json"), Catch::Contains("missing.json"));
  CHECK_THROWS_WITH(grpo::io::read_file(dir), Catch::Contains("cannot read"));
  std::filesystem::remove_all(dir);
}
