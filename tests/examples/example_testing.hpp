// SPDX-License-Identifier: Apache-2.0
// What the example programs' tests share: a tiny checkpoint with the real Qwen tokenizer, and a loopback judge whose
// verdicts depend only on the request.
#pragma once

#include <grpo/models/causal_lm.hpp>
#include <support/fake_judge_server.hpp>
#include <support/model_testing.hpp>
#include <support/skip.hpp>
#include <text/reference_fixture.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <unistd.h>

namespace grpo::testing {

/// This process's scratch directory, <tmp>/<prefix>_<pid>: removed with everything in it when the process exits,
/// unless GRPO_KEEP_SCRATCH=1 (to look at a failing run's files).
inline std::filesystem::path scratch_root(const std::string& prefix) {
  struct Remover {
    std::vector<std::filesystem::path> dirs;
    ~Remover() {
      const char* keep = std::getenv("GRPO_KEEP_SCRATCH");
      if (keep != nullptr && std::string_view(keep) == "1") return;
      std::error_code ignored;
      for (const auto& dir : dirs) std::filesystem::remove_all(dir, ignored);
    }
  };
  static Remover remover;  // one for the process: every test file's prefix is added to it
  const auto dir = std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()));
  if (std::find(remover.dirs.begin(), remover.dirs.end(), dir) == remover.dirs.end()) remover.dirs.push_back(dir);
  return dir;
}

/// A tiny random Qwen2 (of `sizes`) with the real vocabulary, saved as a Hugging Face checkpoint in `dir` beside the
/// real Qwen tokenizer; nullopt when the tokenizer is not installed, after reporting the test as skipped (the caller
/// returns at once).
inline std::optional<std::filesystem::path> tiny_qwen_checkpoint(
    const std::filesystem::path& dir, TinyModelSizes sizes = {.vocab = 151936, .hidden = 16, .intermediate = 32}) {
  const auto tokenizer_dir = grpo::text::testing::find_tokenizer_dir("qwen3");
  if (!tokenizer_dir) {
    report_skip(grpo::text::testing::missing_tokenizer("qwen3"));
    return std::nullopt;
  }
  auto config = tiny_model_config(sizes);
  config.eos_token_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>
  torch::manual_seed(3);
  grpo::models::save_pretrained(grpo::models::CausalLM(config), dir);
  std::filesystem::copy_file(*tokenizer_dir / "tokenizer.json", dir / "tokenizer.json");
  std::filesystem::copy_file(*tokenizer_dir / "tokenizer_config.json", dir / "tokenizer_config.json");
  return dir;
}

/// The learning rate flag of a learning test's run: `flag` (e.g. " --lr 1e-2", or "" for the program's default), or
/// " --lr 0" when GRPO_TEST_ZERO_LR=1 is in the environment. That is the control tests/suite/check_learning_controls.sh
/// runs: with the policy never updated, every learning test must fail.
inline std::string learning_rate_flag(const std::string& flag) {
  const char* zero = std::getenv("GRPO_TEST_ZERO_LR");
  return zero != nullptr && std::string_view(zero) == "1" ? " --lr 0 " : flag + " ";
}

/// A judge reply "[[YES]]" or "[[NO]]" by a hash of the request body: rewards vary within groups (so a policy learns)
/// while every run gets the same verdicts.
inline FakeServer::Responder verdict_by_request_hash() {
  return [](const std::string& request) {
    const auto body = request.substr(request.find("\r\n\r\n"));
    return Reply{200, chat_body(std::hash<std::string>{}(body) % 2 ? "[[YES]]" : "[[NO]]")};
  };
}

}  // namespace grpo::testing
