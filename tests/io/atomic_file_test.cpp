// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/atomic_file.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace {
std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("write_file_atomically replaces the file only when the write completes", "[io]") {
  auto dir = fs::temp_directory_path() / ("grpo_atomic_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto path = dir / "state.txt";
  grpo::io::write_file_atomically(path, [](std::ostream& out) { out << "old"; });
  REQUIRE(read_all(path) == "old");
  REQUIRE_THROWS_WITH(grpo::io::write_file_atomically(path,
                                                      [](std::ostream& out) {
                                                        out << "partial";
                                                        throw std::runtime_error("disk full");
                                                      }),
                      "disk full");
  REQUIRE(read_all(path) == "old");
  REQUIRE_FALSE(fs::exists(dir / "state.txt.tmp"));
  grpo::io::write_file_atomically(path, [](std::ostream& out) { out << "new"; });
  REQUIRE(read_all(path) == "new");
  REQUIRE_THROWS_WITH(grpo::io::write_file_atomically(dir / "missing" / "x", [](std::ostream&) {}),
                      Catch::Contains("cannot write") && Catch::Contains("missing"));
  fs::remove_all(dir);
}
