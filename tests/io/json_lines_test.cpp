// SPDX-License-Identifier: Apache-2.0
#include <grpo/io/json_lines.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

TEST_CASE("for_each_json_line: trimmed non-blank lines with 1-based file:line, CRLF and a missing last newline",
          "[io]") {
  std::vector<std::pair<std::string, std::string>> seen;
  grpo::io::for_each_json_line("{\"a\": 1}\r\n\n   \t\r\n  {\"b\": 2}  \n{\"c\": 3}", "rows.jsonl",
                               [&](std::string_view line, const std::string& where) { seen.emplace_back(line, where); });
  REQUIRE(seen == std::vector<std::pair<std::string, std::string>>{
                      {"{\"a\": 1}", "rows.jsonl:1"}, {"{\"b\": 2}", "rows.jsonl:4"}, {"{\"c\": 3}", "rows.jsonl:5"}});
  seen.clear();
  grpo::io::for_each_json_line("\n\n", "empty.jsonl",
                               [&](std::string_view line, const std::string& where) { seen.emplace_back(line, where); });
  CHECK(seen.empty());
}

TEST_CASE("is_json_array and trim_ascii_space", "[io]") {
  CHECK(grpo::io::is_json_array(" \r\n [{\"a\": 1}]"));
  CHECK_FALSE(grpo::io::is_json_array("{\"a\": [1]}\n"));
  CHECK_FALSE(grpo::io::is_json_array(""));
  CHECK(grpo::trim_ascii_space("\t x y \r\n\v\f") == "x y");
  CHECK(grpo::trim_ascii_space(" \n") == "");
}
