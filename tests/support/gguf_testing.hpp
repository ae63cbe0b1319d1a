// SPDX-License-Identifier: Apache-2.0
// GGUF fixtures with one field changed, for the tests of what a bad file gives.
#pragma once

#include <grpo/core/error.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace grpo::testing {

/// A copy of `source` with the bytes `from` (which occur once in it) replaced by `to` (of the same length), in a
/// temporary file removed with this object.
class PatchedGguf {
 public:
  PatchedGguf(const std::filesystem::path& source, const std::string& from, const std::string& to) {
    static std::atomic<int> counter{0};
    REQUIRE(from.size() == to.size());
    std::ifstream in(source, std::ios::binary);
    std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::size_t at = bytes.find(from);
    REQUIRE(at != std::string::npos);
    REQUIRE(bytes.find(from, at + 1) == std::string::npos);
    std::memcpy(bytes.data() + at, to.data(), to.size());
    path_ = std::filesystem::temp_directory_path() /
            ("grpo_patched_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".gguf");
    std::ofstream out(path_, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  PatchedGguf(const PatchedGguf&) = delete;
  PatchedGguf& operator=(const PatchedGguf&) = delete;
  ~PatchedGguf() { std::filesystem::remove(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// The message of the grpo::Error that load(patched file) throws, checked to name the file; empty when none is thrown.
template <typename Load>
std::string patched_error(const std::filesystem::path& source, const std::string& from, const std::string& to,
                          Load&& load) {
  const PatchedGguf patched(source, from, to);
  std::string message;
  try {
    load(patched.path());
  } catch (const grpo::Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find(patched.path().string()) != std::string::npos);
  return message;
}

}  // namespace grpo::testing
