// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/lora.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace fs = std::filesystem;
using grpo::models::CausalLM;
using grpo::models::LoraOptions;

namespace {

grpo::models::ModelConfig config() {
  return grpo::testing::tiny_model_config({.vocab = 17, .hidden = 8, .intermediate = 12, .layers = 2, .heads = 2});
}

/// Gives every adapter random A and B (B starts at 0, which would hide mistakes in A's use).
void randomise_adapters(CausalLM& model, int seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    if (grpo::models::is_lora_parameter(p.key())) p.value().normal_(0.0, 0.5);
  }
}

const torch::Tensor kIds = torch::tensor({{1, 4, 2, 9, 16}, {3, 3, 5, 0, 7}}, torch::kInt64);

}  // namespace

TEST_CASE("add_lora: adapters on the matched projections only, the base frozen, the start equal to the base",
          "[models][lora]") {
  auto model = grpo::testing::random_fp64_model(config(), 1);
  const auto base = model->forward(kIds).detach();
  const auto modules = grpo::models::add_lora(model, {.rank = 4, .alpha = 8});  // peft's default q_proj, v_proj
  CHECK(modules == std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                                            "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"});
  GRPO_REQUIRE_CLOSE(model->forward(kIds), base, 0, 0);  // B = 0
  std::size_t trainable = 0;
  for (const auto& p : model->named_parameters()) {
    INFO(p.key());
    CHECK(p.value().requires_grad() == grpo::models::is_lora_parameter(p.key()));
    trainable += p.value().requires_grad();
  }
  CHECK(trainable == 8);
  CHECK(model->hf_state().size() == grpo::testing::random_fp64_model(config(), 1)->hf_state().size());
  // Regular expressions match whole names; layers_to_transform picks layers; all-linear takes every projection.
  auto regex = grpo::testing::random_fp64_model(config(), 1);
  CHECK(grpo::models::add_lora(regex, {.target_modules = {R"(.*\.mlp\.(up|down)_proj)"}}).size() == 4);
  auto one_layer = grpo::testing::random_fp64_model(config(), 1);
  CHECK(grpo::models::add_lora(one_layer, {.target_modules = {"all-linear"}, .layers_to_transform = {1}}).size() == 7);
  CHECK(one_layer->lora_options()->target_modules.size() == 7);  // saved expanded, as peft does
}

TEST_CASE("LoRA targets follow peft: a string is a regex written back as a string, list entries are names or "
          "suffixes, layers_to_transform filters suffix matches only",
          "[models][lora]") {
  auto targets = [](grpo::models::LoraOptions options) {
    return grpo::models::lora_targets(grpo::testing::random_fp64_model(config(), 1), options);
  };
  // peft's list form: an exact full name is taken whatever layers_to_transform says; a suffix only in those layers.
  CHECK(targets({.target_modules = {"model.layers.0.mlp.up_proj", "down_proj"}, .layers_to_transform = {1}}) ==
        std::vector<std::string>{"model.layers.0.mlp.up_proj", "model.layers.1.mlp.down_proj"});
  CHECK(targets({.target_modules = {"ALL-LINEAR"}}).size() == 14);  // any case, as peft compares it
  CHECK_THROWS_WITH(targets({.target_modules = {"q_proj", ".*v_proj"}}),
                    Catch::Contains("a regular expression or all-linear must be the only entry"));
  CHECK_THROWS_WITH(targets({.target_modules = {R"(.*\.layers\.0\..*_proj)"}, .layers_to_transform = {1}}),
                    Catch::Contains("layers_to_transform cannot be used with a regular expression"));

  // Round trips through adapter_config.json: a regex stays a JSON string, names stay a list.
  for (const std::vector<std::string>& modules :
       {std::vector<std::string>{R"(.*\.mlp\.(up|down)_proj)"}, std::vector<std::string>{"k_proj", "o_proj"},
        std::vector<std::string>{"q_proj"}}) {
    INFO(modules.front());
    auto model = grpo::testing::random_fp64_model(config(), 1);
    const auto adapted = grpo::models::add_lora(model, {.target_modules = modules});
    const auto dir = grpo::testing::fresh_temp_dir("lora_targets");
    grpo::models::save_lora_adapter(model, dir);
    std::ifstream in(dir / "adapter_config.json");
    const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const bool regex = modules.size() == 1 && modules[0].find('*') != std::string::npos;
    CHECK_THAT(json, Catch::Contains(regex ? "\"target_modules\": \"" : "\"target_modules\": ["));
    auto reloaded = grpo::testing::random_fp64_model(config(), 1);
    grpo::models::load_lora_adapter(reloaded, dir);
    CHECK(grpo::models::lora_modules(reloaded) == adapted);
    fs::remove_all(dir);
  }
}

TEST_CASE("LoRA forward is x·Wᵀ + b + x·Aᵀ·Bᵀ·α/r, merge folds it into W, and LoraDisabled gives the base",
          "[models][lora]") {
  for (bool rslora : {false, true}) {
    INFO("use_rslora " << rslora);
    auto model = grpo::testing::random_fp64_model(config(), 2);
    const auto base_state = model->hf_state();
    std::map<std::string, torch::Tensor> base;
    for (const auto& [name, t] : base_state) base.emplace(name, t.clone());
    const auto base_logits = model->forward(kIds).detach();
    grpo::models::add_lora(model, {.rank = 3, .alpha = 5, .target_modules = {"k_proj", "down_proj"}, .use_rslora = rslora});
    randomise_adapters(model, 3);
    const double scaling = rslora ? 5.0 / std::sqrt(3.0) : 5.0 / 3.0;
    // One projection by hand: the layer's k_proj on a random input.
    auto params = model->named_parameters();
    const std::string k = "model.layers.1.self_attn.k_proj";
    const auto x = torch::randn({4, 8}, torch::kFloat64);
    const auto a = params[k + ".lora_A.weight"], b = params[k + ".lora_B.weight"];
    const auto expected = torch::matmul(x, base.at(k + ".weight").t()) + base.at(k + ".bias") +
                          torch::matmul(torch::matmul(x, a.t()), b.t()) * scaling;
    auto* layer = model->decoder().layers[1]->as<grpo::models::DecoderLayerImpl>();
    GRPO_REQUIRE_CLOSE(layer->self_attn->k_proj(x), expected, 1e-12, 1e-12);

    const auto adapted = model->forward(kIds).detach();
    CHECK((adapted - base_logits).abs().max().item<double>() > 1e-3);
    {
      grpo::models::LoraDisabled off(model);
      GRPO_REQUIRE_CLOSE(model->forward(kIds), base_logits, 0, 0);
    }
    GRPO_REQUIRE_CLOSE(model->forward(kIds), adapted, 0, 0);

    std::map<std::string, torch::Tensor> deltas;
    for (const auto& name : grpo::models::lora_modules(model)) {
      deltas.emplace(name + ".weight",
                     torch::matmul(params[name + ".lora_B.weight"], params[name + ".lora_A.weight"]) * scaling);
    }
    grpo::models::merge_lora(model);
    CHECK_FALSE(model->lora_options().has_value());
    CHECK(model->named_parameters().size() == base.size());
    for (const auto& [name, weight] : model->hf_state()) {
      INFO(name);
      const auto delta = deltas.count(name) ? deltas.at(name) : torch::zeros_like(weight);
      GRPO_REQUIRE_CLOSE(weight, base.at(name) + delta, 1e-12, 1e-14);
    }
    for (const auto& p : model->parameters()) CHECK(p.requires_grad());  // a plain trainable model again
    GRPO_REQUIRE_CLOSE(model->forward(kIds), adapted, 1e-10, 1e-10);
  }
}

TEST_CASE("LoRA adapters round-trip bit for bit through peft's files", "[models][lora][io]") {
  const auto dir = grpo::testing::fresh_temp_dir("lora_roundtrip");
  for (auto dtype : {torch::kFloat64, torch::kBFloat16}) {
    INFO(c10::toString(dtype));
    auto model = grpo::testing::random_fp64_model(config(), 4);
    model->to(dtype);
    grpo::models::add_lora(model, {.rank = 2, .alpha = 16, .dropout = 0.05, .target_modules = {"all-linear"}});
    randomise_adapters(model, 5);
    // Beside a bf16 base the adapters are fp32 (peft's autocast_adapter_dtype).
    const auto adapter_dtype = dtype == torch::kBFloat16 ? torch::kFloat32 : dtype;
    grpo::models::save_lora_adapter(model, dir / "adapter", "Qwen/Qwen2.5-0.5B-Instruct");

    grpo::io::SafetensorsFile file(dir / "adapter" / "adapter_model.safetensors");
    CHECK(file.entries().size() == 2 * 7 * 2);
    CHECK(file.contains("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"));
    CHECK(file.entry("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").shape ==
          std::vector<int64_t>{2, 8});
    CHECK(file.metadata().at("format") == "pt");
    const auto read = grpo::models::read_lora_config(dir / "adapter" / "adapter_config.json");
    CHECK(read.rank == 2);
    CHECK(read.alpha == 16);
    CHECK(read.dropout == 0.05);
    CHECK(read.target_modules.size() == 7);

    auto back = grpo::testing::random_fp64_model(config(), 4);
    back->to(dtype);
    grpo::models::load_lora_adapter(back, dir / "adapter");
    const auto saved = model->named_parameters();
    for (const auto& p : back->named_parameters()) {
      INFO(p.key());
      REQUIRE(saved.contains(p.key()));
      if (grpo::models::is_lora_parameter(p.key())) CHECK(p.value().scalar_type() == adapter_dtype);
      CHECK(torch::equal(p.value(), saved[p.key()]));
    }
    model->eval();  // lora_dropout draws in training mode only
    back->eval();
    CHECK(torch::equal(back->forward(kIds), model->forward(kIds)));
  }
  fs::remove_all(dir);
}

TEST_CASE("A LoRA adapter written by hand in peft's layout loads, with peft's extra fields", "[models][lora][io]") {
  const auto dir = grpo::testing::fresh_temp_dir("lora_hand");
  // adapter_config.json as peft 0.13 writes it (fields this library does not use are ignored).
  std::ofstream(dir / "adapter_config.json") << R"({
  "alpha_pattern": {}, "auto_mapping": null, "base_model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
  "bias": "none", "fan_in_fan_out": false, "inference_mode": true, "init_lora_weights": true,
  "layer_replication": null, "layers_pattern": null, "layers_to_transform": null, "loftq_config": {},
  "lora_alpha": 32, "lora_dropout": 0.1, "megatron_config": null, "megatron_core": "megatron.core",
  "modules_to_save": null, "peft_type": "LORA", "r": 4, "rank_pattern": {}, "revision": null,
  "target_modules": ["v_proj", "up_proj"], "task_type": "CAUSAL_LM", "use_dora": false, "use_rslora": false
})";
  torch::manual_seed(11);
  std::map<std::string, torch::Tensor> tensors;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string prefix = "base_model.model.model.layers." + std::to_string(layer);
    tensors[prefix + ".self_attn.v_proj.lora_A.weight"] = torch::randn({4, 8});
    tensors[prefix + ".self_attn.v_proj.lora_B.weight"] = torch::randn({4, 4});  // kv heads 1 × head dim 4
    tensors[prefix + ".mlp.up_proj.lora_A.weight"] = torch::randn({4, 8});
    tensors[prefix + ".mlp.up_proj.lora_B.weight"] = torch::randn({12, 4});
  }
  grpo::io::save_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  auto model = grpo::testing::random_fp64_model(config(), 6);
  const auto base = model->hf_state();
  std::map<std::string, torch::Tensor> base_copy;
  for (const auto& [name, t] : base) base_copy.emplace(name, t.clone());
  const auto options = grpo::models::load_lora_adapter(model, dir);
  CHECK(options.scaling() == 8.0);
  CHECK(grpo::models::lora_modules(model).size() == 4);
  const auto x = torch::randn({3, 8}, torch::kFloat64);
  auto* layer = model->decoder().layers[1]->as<grpo::models::DecoderLayerImpl>();
  const std::string up = "base_model.model.model.layers.1.mlp.up_proj";
  const auto expected = torch::matmul(x, base_copy.at("model.layers.1.mlp.up_proj.weight").t()) +
                        torch::matmul(torch::matmul(x, tensors.at(up + ".lora_A.weight").to(torch::kFloat64).t()),
                                      tensors.at(up + ".lora_B.weight").to(torch::kFloat64).t()) * 8.0;
  model->eval();  // dropout only in training
  GRPO_REQUIRE_CLOSE(layer->mlp->up_proj(x), expected, 1e-12, 1e-12);
  fs::remove_all(dir);
}

TEST_CASE("LoRA rejects what it cannot do, naming the option, file and tensor", "[models][lora][errors]") {
  auto model = grpo::testing::random_fp64_model(config(), 7);
  CHECK_THROWS_WITH(grpo::models::add_lora(model, {.target_modules = {"query_key_value"}}),
                    Catch::Contains("target_modules [query_key_value] match no module of this qwen2 model") &&
                        Catch::Contains("q_proj"));
  CHECK_THROWS_WITH(grpo::models::add_lora(model, {.rank = 0}), Catch::Contains("r must be >= 1"));
  CHECK_THROWS_WITH(grpo::models::add_lora(model, {.dropout = 1.0}), Catch::Contains("lora_dropout"));
  CHECK_THROWS_WITH(grpo::models::add_lora(model, {.target_modules = {"(q_proj"}}),
                    Catch::Contains("not a regular expression"));
  auto untied_config = config();
  untied_config.tie_word_embeddings = false;
  auto untied = grpo::testing::random_fp64_model(untied_config, 7);
  CHECK_THROWS_WITH(grpo::models::add_lora(untied, {.target_modules = {"lm_head"}}), Catch::Contains("lm_head"));
  CHECK_THROWS_WITH(grpo::models::save_lora_adapter(model, "/tmp/unused"), Catch::Contains("no LoRA adapters"));
  CHECK_THROWS_WITH(grpo::models::merge_lora(model), Catch::Contains("no LoRA adapters"));
  grpo::models::add_lora(model, {});
  CHECK_THROWS_WITH(grpo::models::add_lora(model, {}), Catch::Contains("already has adapters"));

  const auto dir = grpo::testing::fresh_temp_dir("lora_errors");
  grpo::models::save_lora_adapter(model, dir);
  const auto config_path = dir / "adapter_config.json";
  const auto write_config = [&](const std::string& text) { std::ofstream(config_path) << text; };
  auto fresh = [&] { return grpo::testing::random_fp64_model(config(), 7); };
  write_config(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 8, "target_modules": ["q_proj"], "use_dora": true})");
  CHECK_THROWS_WITH(grpo::models::read_lora_config(config_path), Catch::Contains("\"use_dora\" is true"));
  write_config(R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], "bias": "all"})");
  CHECK_THROWS_WITH(grpo::models::read_lora_config(config_path), Catch::Contains("\"bias\""));
  write_config(R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 4}})");
  CHECK_THROWS_WITH(grpo::models::read_lora_config(config_path), Catch::Contains("rank_pattern"));
  write_config(R"({"peft_type": "IA3", "r": 8, "target_modules": ["q_proj"]})");
  CHECK_THROWS_WITH(grpo::models::read_lora_config(config_path), Catch::Contains("peft_type"));
  write_config(R"({"peft_type": "LORA", "r": "8", "target_modules": ["q_proj"]})");
  CHECK_THROWS_WITH(grpo::models::read_lora_config(config_path), Catch::Contains("field \"r\" must be an integer"));
  // r = 4 in the config but the file's tensors have r = 8: the tensor and both shapes are named.
  write_config(R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})");
  auto wrong_rank = fresh();
  CHECK_THROWS_WITH(grpo::models::load_lora_adapter(wrong_rank, dir),
                    Catch::Contains("model.layers.0.self_attn.q_proj.lora_A.weight\" has shape [8, 8]") &&
                        Catch::Contains("r = 4 needs [4, 8]"));
  // A target without tensors, and tensors without a target.
  write_config(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "o_proj"]})");
  auto missing = fresh();
  CHECK_THROWS_WITH(grpo::models::load_lora_adapter(missing, dir),
                    Catch::Contains("no tensor \"base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight\""));
  write_config(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 8, "target_modules": ["q_proj"]})");
  auto extra = fresh();
  CHECK_THROWS_WITH(grpo::models::load_lora_adapter(extra, dir),
                    Catch::Contains("v_proj.lora_A.weight\" belongs to no adapter"));
  fs::remove_all(dir);
}
