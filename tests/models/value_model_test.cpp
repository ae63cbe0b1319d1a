// SPDX-License-Identifier: Apache-2.0
// ValueModel against transformers: the fixtures of tests/data/value_heads (tools/value-head-reference/make_fixtures.py:
// a Qwen2 sequence classifier, a Llama token classifier, a Qwen3 causal LM with TRL's value head, rope_theta in
// transformers 5's rope_parameters) give transformers' values and scores within 1e-4; what save_pretrained writes
// has the same tensor names and reads back the same, in the library and in transformers
// (tools/value-head-reference/check_saved.py); a critic from a policy, left padding, gradients; and the errors a
// bad checkpoint gives.
#include <grpo/core/error.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/value_model.hpp>
#include <support/model_testing.hpp>
#include <support/process_testing.hpp>
#include <support/skip.hpp>
#include <support/test_paths.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using grpo::models::ScalarHeadLayout;
using grpo::models::ValueModel;

namespace {

const fs::path kDir = fs::path(grpo::testing::test_data_dir()) / "value_heads";

struct Fixture {
  std::string name;
  ScalarHeadLayout layout;
};
const std::vector<Fixture> kFixtures{{"qwen2_sequence_classification", ScalarHeadLayout::sequence_classification},
                                     {"llama_token_classification", ScalarHeadLayout::token_classification},
                                     {"qwen3_trl_value_head", ScalarHeadLayout::trl_value_head}};

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("grpo_value_model_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

std::set<std::string> names_of(const std::map<std::string, torch::Tensor>& tensors) {
  std::set<std::string> out;
  for (const auto& [name, t] : tensors) out.insert(name);
  return out;
}

}  // namespace

TEST_CASE("ValueModel loads transformers' sequence and token classifiers and TRL's value head, and gives their "
          "values and scores within 1e-4",
          "[models][value]") {
  const auto expected = grpo::io::SafetensorsFile(kDir / "expected.safetensors").tensors();
  const torch::Tensor ids = expected.at("input_ids"), mask = expected.at("attention_mask");
  const torch::Tensor real = mask != 0;
  for (const auto& fixture : kFixtures) {
    INFO(fixture.name);
    ValueModel model = grpo::models::value_model_from_pretrained(kDir / fixture.name);
    CHECK(model->layout() == fixture.layout);
    CHECK(model->backbone()->config().rope_theta == 500000.0);  // from rope_parameters
    torch::NoGradGuard no_grad;
    const torch::Tensor values = model->forward(ids, mask);
    const torch::Tensor want = expected.at(fixture.name + ".values");
    REQUIRE(values.sizes() == want.sizes());
    CHECK((values - want).masked_select(real).abs().max().item<double>() < 1e-4);
    CHECK((model->sequence_scores(ids, mask) - expected.at(fixture.name + ".scores")).abs().max().item<double>() < 1e-4);
    // A classifier's checkpoint has no lm_head, nor does its backbone.
    const auto state = model->hf_state();
    CHECK(state.count("lm_head.weight") == (fixture.layout == ScalarHeadLayout::trl_value_head ? 1u : 0u));
  }
  CHECK(grpo::models::value_model_from_pretrained(kDir / "qwen2_sequence_classification")->pad_token_id() == 0);
}

TEST_CASE("ValueModel save_pretrained writes each layout's tensor names and reads back the same, in the library and "
          "in transformers",
          "[models][value]") {
  const auto expected = grpo::io::SafetensorsFile(kDir / "expected.safetensors").tensors();
  const torch::Tensor ids = expected.at("input_ids"), mask = expected.at("attention_mask");
  const fs::path python = fs::path(grpo::testing::source_dir()) / ".venv" / "bin" / "python";
  for (const auto& fixture : kFixtures) {
    INFO(fixture.name);
    ValueModel model = grpo::models::value_model_from_pretrained(kDir / fixture.name);
    const fs::path out = scratch(fixture.name);
    grpo::models::save_pretrained(model, out);
    CHECK(names_of(grpo::io::load_checkpoint_tensors(out)) == names_of(grpo::io::load_checkpoint_tensors(kDir / fixture.name)));
    ValueModel again = grpo::models::value_model_from_pretrained(out);
    CHECK(again->layout() == fixture.layout);
    torch::NoGradGuard no_grad;
    CHECK(torch::equal(again->forward(ids, mask), model->forward(ids, mask)));
    if (fs::exists(python)) {
      const auto check = grpo::testing::run_command(
          python.string() + " " + grpo::testing::source_dir() + "/tools/value-head-reference/check_saved.py " +
          out.string() + " " + (kDir / "expected.safetensors").string() + " " + fixture.name + " 2>&1");
      INFO(check.out);
      CHECK(check.status == 0);
    }
    fs::remove_all(out);
  }
  if (!fs::exists(python)) GRPO_SKIP("no " + python.string() + " (scripts/install-deps.sh makes it): transformers not run");
}

TEST_CASE("value_model_from_policy: the policy's hidden states under a new head, with gradients into both, and scores "
          "at the last real token with left or right padding",
          "[models][value]") {
  torch::manual_seed(3);
  grpo::models::CausalLM policy(grpo::testing::tiny_model_config({.vocab = 20}));
  ValueModel critic = grpo::models::value_model_from_policy(policy);
  CHECK(critic->layout() == ScalarHeadLayout::token_classification);
  CHECK(critic->head_bias().defined());
  CHECK(critic->hf_state().count("lm_head.weight") == 0);
  const auto ids = torch::tensor({{0, 0, 3, 4, 5}, {6, 7, 8, 9, 10}}, torch::kInt64);
  const auto mask = torch::tensor({{0, 0, 1, 1, 1}, {1, 1, 1, 1, 1}}, torch::kInt64);
  {
    torch::NoGradGuard no_grad;
    critic->head_bias().fill_(0.25);
    const auto hidden = policy->hidden_states(ids, mask);
    const auto expected = torch::matmul(hidden, critic->head_weight().t()).squeeze(-1) + 0.25;
    CHECK(torch::allclose(critic->forward(ids, mask), expected, 1e-6, 1e-6));
    // Left padding: the last position; right padding: the last real one.
    const auto right = torch::tensor({{3, 4, 5, 0, 0}}, torch::kInt64), right_mask = torch::tensor({{1, 1, 1, 0, 0}});
    CHECK(critic->sequence_scores(right, right_mask).item<float>() ==
          Approx(critic->forward(right, right_mask)[0][2].item<float>()));
    CHECK(critic->sequence_scores(ids, mask)[0].item<float>() == Approx(critic->forward(ids, mask)[0][4].item<float>()));
    CHECK(critic->sequence_scores(ids, mask)[1].item<float>() == Approx(critic->forward(ids, mask)[1][4].item<float>()));
  }
  critic->forward(ids, mask).sum().backward();
  CHECK(critic->head_weight().grad().abs().sum().item<double>() > 0);
  CHECK(critic->backbone()->named_parameters()["model.layers.0.mlp.up_proj.weight"].grad().abs().sum().item<double>() > 0);
  CHECK_THROWS_WITH(critic->sequence_scores(ids, torch::zeros({2, 5}, torch::kInt64)), Catch::Contains("no real token"));
}

TEST_CASE("value_model_from_pretrained names the tensor at fault: no head, a head with two outputs, a head of the "
          "wrong width",
          "[models][value][errors]") {
  torch::manual_seed(4);
  grpo::models::CausalLM lm(grpo::testing::tiny_model_config({.vocab = 20}));
  const fs::path plain = scratch("plain");
  grpo::models::save_pretrained(lm, plain);
  CHECK_THROWS_WITH(grpo::models::value_model_from_pretrained(plain),
                    Catch::Contains(plain.string()) && Catch::Contains("no scalar head") &&
                        Catch::Contains("value_model_from_policy"));
  const auto hidden = lm->config().hidden_size;
  const auto write_with = [&](const std::string& name, const torch::Tensor& head) {
    auto tensors = lm->hf_state();
    tensors.emplace(name, head);
    grpo::io::save_checkpoint_tensors(plain, tensors);
  };
  write_with("score.weight", torch::zeros({2, hidden}));
  CHECK_THROWS_WITH(grpo::models::value_model_from_pretrained(plain),
                    Catch::Contains("\"score.weight\" has shape [2, " + std::to_string(hidden) + "]") &&
                        Catch::Contains("num_labels 1"));
  write_with("score.weight", torch::zeros({1, hidden + 4}));
  CHECK_THROWS_WITH(grpo::models::value_model_from_pretrained(plain),
                    Catch::Contains("hidden_size is " + std::to_string(hidden)));
  write_with("v_head.summary.weight", torch::zeros({1, hidden}));
  CHECK_THROWS_WITH(grpo::models::value_model_from_pretrained(plain), Catch::Contains("v_head.summary.bias"));
  fs::remove_all(plain);
}
