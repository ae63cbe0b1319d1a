// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/checkpoint.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <random>

#include <filesystem>
#include <fstream>
#include <limits>

namespace fs = std::filesystem;
using grpo::train::CheckpointManager;
using grpo::train::CheckpointOptions;
using grpo::train::TrainerState;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

grpo::models::CausalLM tiny_model() { return grpo::models::CausalLM(grpo::testing::tiny_model_config()); }

// One deterministic AdamW step: the gradient depends only on the parameters.
void train_step(grpo::models::CausalLM& model, torch::optim::AdamW& optimizer) {
  const torch::Tensor ids = torch::tensor({{1, 5, 3, 7}}, torch::kInt64);
  optimizer.zero_grad();
  model->forward(ids).pow(2).mean().backward();
  optimizer.step();
}

std::map<std::string, torch::Tensor> snapshot(const grpo::models::CausalLM& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, tensor] : model->hf_state()) out.emplace(name, tensor.clone());
  return out;
}

bool same_parameters(const grpo::models::CausalLM& model, const std::map<std::string, torch::Tensor>& expected) {
  const auto actual = model->hf_state();
  if (actual.size() != expected.size()) return false;
  for (const auto& [name, tensor] : expected) {
    if (!torch::equal(actual.at(name), tensor)) return false;
  }
  return true;
}

void save_dummy(CheckpointManager& manager, std::int64_t step) {
  torch::manual_seed(0);
  auto model = tiny_model();
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
  manager.save(model, optimizer, TrainerState{step, 0, {}});
}

std::vector<std::int64_t> steps(const CheckpointManager& manager) {
  std::vector<std::int64_t> out;
  for (const auto& info : manager.list()) out.push_back(info.step);
  return out;
}

}  // namespace

TEST_CASE("checkpoint round trip: model, optimizer moments, RNG stream and trainer state", "[train][checkpoint]") {
  const fs::path dir = fresh_dir("grpo_checkpoint_test");
  torch::manual_seed(11);
  auto model = tiny_model();
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
  train_step(model, optimizer);
  train_step(model, optimizer);

  CheckpointManager manager({.directory = dir, .keep_last = 2});
  const TrainerState state{2, 18446744073709551615ull, {{"epoch", 0.5}, {"samples", 1024}, {"best", -1e300}}};
  const fs::path saved = manager.save(model, optimizer, state);
  CHECK(saved == dir / "checkpoint-2");
  CHECK(fs::is_regular_file(saved / "config.json"));
  CHECK(fs::is_regular_file(saved / "model.safetensors"));
  CHECK(fs::is_regular_file(saved / "optimizer.pt"));
  CHECK(fs::is_regular_file(saved / "rng_state.pt"));
  CHECK(fs::is_regular_file(saved / "trainer_state.json"));
  CHECK_FALSE(fs::exists(dir / "checkpoint-2.tmp"));
  const auto at_save = snapshot(model);
  const torch::Tensor draws_after_save = torch::rand({5});

  // The reference continuation: one more step from the saved state.
  train_step(model, optimizer);
  const auto continued = snapshot(model);
  REQUIRE_FALSE(same_parameters(model, at_save));
  torch::rand({3});  // move the RNG on

  const TrainerState loaded = CheckpointManager::load(saved, model, optimizer);
  CHECK(loaded == state);
  CHECK(same_parameters(model, at_save));
  CHECK(torch::equal(torch::rand({5}), draws_after_save));
  // AdamW's next step depends on exp_avg, exp_avg_sq and the step count: it reproduces only if they were restored.
  train_step(model, optimizer);
  CHECK(same_parameters(model, continued));

  // A fresh model and optimizer (a resumed process) reach the same point.
  torch::manual_seed(99);
  auto fresh = tiny_model();
  torch::optim::AdamW fresh_optimizer(fresh->parameters(), torch::optim::AdamWOptions(1e-2));
  CheckpointManager::load(manager.latest()->path, fresh, fresh_optimizer);
  CHECK(same_parameters(fresh, at_save));
  train_step(fresh, fresh_optimizer);
  CHECK(same_parameters(fresh, continued));
  fs::remove_all(dir);
}

TEST_CASE("checkpoints: keep the last K, ignore and clean crashed .tmp directories, resume from the newest",
          "[train][checkpoint]") {
  const fs::path dir = fresh_dir("grpo_checkpoint_keep_test");
  CheckpointManager manager({.directory = dir, .keep_last = 2});
  CHECK(manager.list().empty());
  CHECK_FALSE(manager.latest().has_value());  // also when the directory does not exist yet

  save_dummy(manager, 1);
  save_dummy(manager, 10);  // numeric order, not name order: 10 is newer than 9
  save_dummy(manager, 9);
  CHECK(steps(manager) == std::vector<std::int64_t>{9, 10});
  CHECK_FALSE(fs::exists(dir / "checkpoint-1"));

  // A crash while writing step 11 leaves checkpoint-11.tmp; a directory without trainer_state.json and unrelated
  // names are not checkpoints either.
  fs::create_directories(dir / "checkpoint-11.tmp");
  std::ofstream(dir / "checkpoint-11.tmp" / "trainer_state.json") << R"({"step": 11, "seed": 0, "values": {}})";
  fs::create_directories(dir / "checkpoint-12");
  fs::create_directories(dir / "checkpoint-x13" / "sub");
  std::ofstream(dir / "checkpoint-x13" / "trainer_state.json") << "{}";
  REQUIRE(manager.latest().has_value());
  CHECK(manager.latest()->step == 10);
  CHECK(manager.latest()->path == dir / "checkpoint-10");

  save_dummy(manager, 11);
  CHECK_FALSE(fs::exists(dir / "checkpoint-11.tmp"));
  CHECK(steps(manager) == std::vector<std::int64_t>{10, 11});
  CHECK(fs::exists(dir / "checkpoint-12"));  // not ours to delete

  save_dummy(manager, 11);  // saving a step again replaces it
  CHECK(steps(manager) == std::vector<std::int64_t>{10, 11});

  CheckpointManager keep_all({.directory = dir, .keep_last = 0});
  save_dummy(keep_all, 20);
  save_dummy(keep_all, 21);
  CHECK(steps(keep_all) == std::vector<std::int64_t>{10, 11, 20, 21});

  CHECK_THROWS_AS(CheckpointManager({.directory = ""}), grpo::ConfigError);
  CHECK_THROWS_AS(save_dummy(manager, -1), grpo::Error);
  fs::remove_all(dir);
}

TEST_CASE("trainer_state.json round trip and errors", "[train][checkpoint]") {
  const TrainerState state{7, 42, {{"a\"b", 0.1}, {"big", 1e300}, {"neg", -2.0}}};
  const std::string json = grpo::train::trainer_state_to_json(state);
  CHECK(json == "{\n  \"step\": 7,\n  \"seed\": 42,\n  \"values\": {\n    \"a\\\"b\": 0.1,\n    \"big\": 1e+300,\n"
                "    \"neg\": -2\n  }\n}\n");
  CHECK(grpo::train::trainer_state_from_json(json) == state);
  CHECK(grpo::train::trainer_state_to_json(TrainerState{}) == "{\n  \"step\": 0,\n  \"seed\": 0,\n  \"values\": {}\n}\n");
  CHECK(grpo::train::trainer_state_from_json(grpo::train::trainer_state_to_json(TrainerState{})) == TrainerState{});

  CHECK_THROWS_AS(grpo::train::trainer_state_to_json(TrainerState{1, 0, {{"x", std::nan("")}}}), grpo::Error);
  CHECK_THROWS_WITH(grpo::train::trainer_state_from_json(R"({"seed": 1, "values": {}})", "s.json"),
                    Catch::Contains("s.json") && Catch::Contains("'step'"));
  CHECK_THROWS_WITH(grpo::train::trainer_state_from_json(R"({"step": 1, "seed": 1, "values": {"v": "x"}})"),
                    Catch::Contains("'values.v'"));
  CHECK_THROWS_AS(grpo::train::trainer_state_from_json("{"), grpo::ParseError);
}

TEST_CASE("a process killed while writing checkpoints leaves the previous one loadable", "[train][checkpoint]") {
  // A child writes checkpoints of a model whose every parameter equals the step, back to back, so a SIGKILL at a
  // random moment almost always lands inside a write. After each kill the newest complete checkpoint must load and
  // hold exactly its step's parameters.
  const fs::path dir = fresh_dir("grpo_checkpoint_kill");
  auto config = grpo::testing::tiny_model_config({.vocab = 4096});  // ~1 MB of weights per write
  std::mt19937 rng(7);
  std::int64_t next_step = 1;
  for (int round = 0; round < 5; ++round) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // never returns into the test runner
      try {
        at::set_num_threads(1);
        CheckpointManager manager({.directory = dir, .keep_last = 2});
        auto model = grpo::models::CausalLM(config);
        torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
        for (std::int64_t step = next_step;; ++step) {
          {
            torch::NoGradGuard no_grad;
            for (auto& p : model->parameters()) p.fill_(static_cast<double>(step));
          }
          manager.save(model, optimizer, TrainerState{step, 0, {}});
        }
      } catch (...) {
      }
      ::_exit(1);
    }
    // Let it write a few checkpoints, then kill it at a random moment.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    CheckpointManager reader({.directory = dir, .keep_last = 2});
    while (reader.list().size() < 2 && std::chrono::steady_clock::now() < deadline) ::usleep(2000);
    ::usleep(std::uniform_int_distribution<useconds_t>(1000, 40000)(rng));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFSIGNALED(status));

    const auto latest = reader.latest();
    REQUIRE(latest.has_value());
    auto model = grpo::models::CausalLM(config);
    torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
    const TrainerState state = CheckpointManager::load(latest->path, model, optimizer);
    CHECK(state.step == latest->step);
    for (const auto& p : model->parameters()) REQUIRE(torch::all(p == static_cast<double>(state.step)).item<bool>());
    next_step = state.step + 1;  // the next child continues the run, as --resume does
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: text state and a reference model round trip, a missing reference is an error",
          "[train][checkpoint]") {
  const fs::path dir = fresh_dir("grpo_checkpoint_reference_test");
  torch::manual_seed(5);
  auto model = tiny_model();
  auto reference = tiny_model();  // different random weights from the policy
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
  CheckpointManager manager({.directory = dir, .keep_last = 0});
  TrainerState state{3, 7, {{"kl/beta", 0.0125}}, {{"filter", "{\"prompts\": [[\"a\\tb\", 0, 1, -1]]}\n"}, {"empty", ""}}};
  const fs::path saved = manager.save(model, optimizer, state, reference);
  CHECK(fs::is_regular_file(saved / "reference" / "model.safetensors"));
  CHECK(fs::is_regular_file(saved / "reference" / "config.json"));
  const auto policy_weights = snapshot(model);
  const auto reference_weights = snapshot(reference);

  torch::manual_seed(6);
  auto fresh = tiny_model();
  auto fresh_reference = tiny_model();
  torch::optim::AdamW fresh_optimizer(fresh->parameters(), torch::optim::AdamWOptions(1e-2));
  const TrainerState loaded = CheckpointManager::load(saved, fresh, fresh_optimizer, fresh_reference);
  CHECK(loaded == state);
  CHECK(same_parameters(fresh, policy_weights));
  CHECK(same_parameters(fresh_reference, reference_weights));

  // Saved without a reference: loading one is an error naming the checkpoint; loading without one is fine.
  state.step = 4;
  state.texts.clear();
  const fs::path plain = manager.save(model, optimizer, state);
  CHECK_FALSE(fs::exists(plain / "reference"));
  CHECK_THROWS_WITH(CheckpointManager::load(plain, fresh, fresh_optimizer, fresh_reference),
                    Catch::Contains("checkpoint-4 has no reference/"));
  CHECK(CheckpointManager::load(plain, fresh, fresh_optimizer) == state);
  fs::remove_all(dir);
}

TEST_CASE("module_checkpoint: any module's parameters and buffers round trip by name, and another module's checkpoint "
          "is an error naming the file and the tensor",
          "[train][checkpoint]") {
  const fs::path dir = fresh_dir("grpo_checkpoint_module_test");
  torch::manual_seed(7);
  torch::nn::Sequential saved_module(torch::nn::Linear(2, 3), torch::nn::BatchNorm1d(3));
  saved_module->named_buffers()["1.running_mean"].fill_(0.25);
  grpo::train::module_checkpoint(saved_module.ptr()).save(dir);

  torch::nn::Sequential loaded(torch::nn::Linear(2, 3), torch::nn::BatchNorm1d(3));
  grpo::train::module_checkpoint(loaded.ptr()).load(dir);
  const auto want = saved_module->named_parameters(), got = loaded->named_parameters();
  for (const auto& p : want) CHECK(torch::equal(got[p.key()], p.value()));
  CHECK(torch::equal(loaded->named_buffers()["1.running_mean"], torch::full({3}, 0.25)));

  torch::nn::Sequential wider(torch::nn::Linear(3, 3), torch::nn::BatchNorm1d(3));
  CHECK_THROWS_WITH(grpo::train::module_checkpoint(wider.ptr()).load(dir),
                    Catch::Contains("model.safetensors") && Catch::Contains("tensor '0.weight'") &&
                        Catch::Contains("3x2") && Catch::Contains("3x3"));
  torch::nn::Sequential longer(torch::nn::Linear(2, 3), torch::nn::BatchNorm1d(3), torch::nn::Linear(3, 1));
  // The first missing tensor by name.
  CHECK_THROWS_WITH(grpo::train::module_checkpoint(longer.ptr()).load(dir), Catch::Contains("no tensor '2.bias'"));
  torch::nn::Sequential shorter(torch::nn::Linear(2, 3));
  CHECK_THROWS_WITH(grpo::train::module_checkpoint(shorter.ptr()).load(dir), Catch::Contains("another model"));
  fs::remove_all(dir);
}

TEST_CASE("trainer_state.json: texts are optional and must be strings", "[train][checkpoint]") {
  const auto state = grpo::train::trainer_state_from_json(R"({"step": 1, "seed": 2, "values": {}})");
  CHECK(state.texts.empty());
  CHECK_THROWS_WITH(grpo::train::trainer_state_from_json(R"({"step": 1, "seed": 2, "values": {}, "texts": {"a": 1}})",
                                                         "t.json"),
                    Catch::Contains("t.json: field 'texts.a' should be a string"));
}

TEST_CASE("checkpoint parts: a second model with its own optimizer round trips in its subdirectory, and a missing or "
          "misnamed part is an error naming it",
          "[train][checkpoint]") {
  const fs::path dir = fresh_dir("grpo_checkpoint_parts");
  torch::manual_seed(5);
  auto model = tiny_model();
  auto second = tiny_model();
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
  torch::optim::AdamW second_optimizer(second->parameters(), torch::optim::AdamWOptions(3e-2));
  train_step(model, optimizer);
  train_step(second, second_optimizer);
  CheckpointManager manager({.directory = dir, .keep_last = 0});
  const std::vector<grpo::train::CheckpointPart> parts{{.name = "critic", .model = second, .optimizer = &second_optimizer}};
  const fs::path saved = manager.save(model, optimizer, TrainerState{1, 0, {}}, std::nullopt, nullptr, parts);
  CHECK(fs::is_regular_file(saved / "critic" / "model.safetensors"));
  CHECK(fs::is_regular_file(saved / "critic" / "optimizer.pt"));
  const auto second_at_save = snapshot(second);
  train_step(second, second_optimizer);
  const auto second_continued = snapshot(second);

  // A fresh pair loads both, and the second's AdamW moments come back with it: its next step is the same.
  torch::manual_seed(99);
  auto fresh = tiny_model();
  auto fresh_second = tiny_model();
  torch::optim::AdamW fresh_optimizer(fresh->parameters(), torch::optim::AdamWOptions(1e-2));
  torch::optim::AdamW fresh_second_optimizer(fresh_second->parameters(), torch::optim::AdamWOptions(3e-2));
  const std::vector<grpo::train::CheckpointPart> fresh_parts{
      {.name = "critic", .model = fresh_second, .optimizer = &fresh_second_optimizer}};
  CheckpointManager::load(saved, fresh, fresh_optimizer, std::nullopt, nullptr, fresh_parts);
  CHECK(same_parameters(fresh_second, second_at_save));
  train_step(fresh_second, fresh_second_optimizer);
  CHECK(same_parameters(fresh_second, second_continued));

  // Asking for a part the checkpoint does not hold, or one that would clash with the checkpoint's own names.
  const std::vector<grpo::train::CheckpointPart> other{{.name = "value_head", .model = fresh_second,
                                                         .optimizer = &fresh_second_optimizer}};
  CHECK_THROWS_WITH(CheckpointManager::load(saved, fresh, fresh_optimizer, std::nullopt, nullptr, other),
                    Catch::Contains("has no value_head/"));
  for (const std::string bad : {"reference", "optimizer.pt", "a/b", ""}) {
    INFO(bad);
    const std::vector<grpo::train::CheckpointPart> clash{{.name = bad, .model = fresh_second,
                                                          .optimizer = &fresh_second_optimizer}};
    CHECK_THROWS_WITH(manager.save(model, optimizer, TrainerState{2, 0, {}}, std::nullopt, nullptr, clash),
                      Catch::Contains("is not a name a checkpoint can hold"));
  }
  fs::remove_all(dir);
}
