// SPDX-License-Identifier: Apache-2.0
// What the example programs' tests share: a tiny checkpoint with the real Qwen tokenizer, and a loopback judge whose
// verdicts depend only on the request.
#pragma once

#include <grpo/models/causal_lm.hpp>
#include <support/fake_judge_server.hpp>
#include <support/model_testing.hpp>
#include <text/reference_fixture.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace grpo::testing {

/// A tiny random Qwen2 (of `sizes`) with the real vocabulary, saved as a Hugging Face checkpoint in `dir` beside the
/// real Qwen tokenizer; nullopt (with a warning) when the tokenizer is not installed.
inline std::optional<std::filesystem::path> tiny_qwen_checkpoint(
    const std::filesystem::path& dir, TinyModelSizes sizes = {.vocab = 151936, .hidden = 16, .intermediate = 32}) {
  const auto tokenizer_dir = grpo::text::testing::find_tokenizer_dir("qwen3");
  if (!tokenizer_dir) {
    WARN("skipped: the Qwen tokenizer is not installed (scripts/install-deps.sh fetches it)");
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

/// A judge reply "[[YES]]" or "[[NO]]" by a hash of the request body: rewards vary within groups (so a policy learns)
/// while every run gets the same verdicts.
inline FakeServer::Responder verdict_by_request_hash() {
  return [](const std::string& request) {
    const auto body = request.substr(request.find("\r\n\r\n"));
    return Reply{200, chat_body(std::hash<std::string>{}(body) % 2 ? "[[YES]]" : "[[NO]]")};
  };
}

}  // namespace grpo::testing
