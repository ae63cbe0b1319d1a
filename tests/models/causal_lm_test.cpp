// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/causal_lm.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

namespace fs = std::filesystem;
using grpo::models::Architecture;
using grpo::models::CausalLM;
using grpo::models::ModelConfig;

namespace {

ModelConfig tiny_config(Architecture architecture) {
  auto c = grpo::testing::tiny_model_config(
      {.vocab = 23, .hidden = 12, .intermediate = 20, .layers = 2, .heads = 3, .rope_theta = 100.0});
  c.architecture = architecture;
  c.head_dim = architecture == Architecture::qwen3 ? 6 : 0;  // Qwen3's head_dim need not be hidden/heads
  c.rms_norm_eps = 1e-6;
  c.attention_bias = architecture == Architecture::qwen2;
  c.tie_word_embeddings = architecture != Architecture::llama;
  return c;
}

CausalLM make_model(Architecture architecture, int seed = 7) {
  return grpo::testing::random_fp64_model(tiny_config(architecture), seed);
}

/// An independent fp64 re-derivation of the decoder from the formulas, element loops for RoPE and attention.
torch::Tensor reference_logits(const CausalLM& model, const torch::Tensor& ids, const torch::Tensor& mask) {
  const auto& c = model->config();
  auto w = model->hf_state();
  const int64_t batch = ids.size(0), time = ids.size(1), d = c.head_dimension(), hq = c.num_attention_heads,
                hkv = c.num_key_value_heads;
  auto rms = [&](const torch::Tensor& x, const torch::Tensor& weight) {
    return x / torch::sqrt(x.pow(2).mean(-1, true) + c.rms_norm_eps) * weight;
  };
  auto lin = [&](const torch::Tensor& x, const std::string& name) {
    auto y = torch::matmul(x, w.at(name + ".weight").t());
    if (w.count(name + ".bias")) y = y + w.at(name + ".bias");
    return y;
  };
  // RoPE by hand: pairs (i, i + d/2) rotated by angle pos / theta^(2i/d).
  auto rope = [&](torch::Tensor x /*[T, d]*/, const std::vector<int64_t>& pos) {
    auto out = x.clone();
    for (int64_t t = 0; t < x.size(0); ++t) {
      for (int64_t i = 0; i < d / 2; ++i) {
        const double angle = pos[t] / std::pow(c.rope_theta, 2.0 * i / d);
        const double a = x[t][i].item<double>(), b = x[t][i + d / 2].item<double>();
        out[t][i] = a * std::cos(angle) - b * std::sin(angle);
        out[t][i + d / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
    return out;
  };
  auto logits = torch::zeros({batch, time, c.vocab_size}, torch::kFloat64);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> pos(time);
    std::vector<bool> real(time);
    int64_t seen = 0;
    for (int64_t t = 0; t < time; ++t) {
      real[t] = mask[b][t].item<int64_t>() != 0;
      pos[t] = real[t] ? seen++ : std::max<int64_t>(seen - 1, 0);
    }
    auto h = w.at("model.embed_tokens.weight").index_select(0, ids[b]);  // [T, H]
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      auto x = rms(h, w.at(p + "input_layernorm.weight"));
      auto q = lin(x, p + "self_attn.q_proj"), k = lin(x, p + "self_attn.k_proj"), v = lin(x, p + "self_attn.v_proj");
      auto attn = torch::zeros({time, hq * d}, torch::kFloat64);
      for (int64_t head = 0; head < hq; ++head) {
        const int64_t kv = head / (hq / hkv);
        auto qh = q.narrow(1, head * d, d), kh = k.narrow(1, kv * d, d), vh = v.narrow(1, kv * d, d);
        if (c.architecture == Architecture::qwen3) {
          qh = rms(qh, w.at(p + "self_attn.q_norm.weight"));
          kh = rms(kh, w.at(p + "self_attn.k_norm.weight"));
        }
        qh = rope(qh, pos);
        kh = rope(kh, pos);
        for (int64_t t = 0; t < time; ++t) {
          if (!real[t]) continue;  // padded queries are never compared
          std::vector<double> score(t + 1, -INFINITY);
          double m = -INFINITY;
          for (int64_t s = 0; s <= t; ++s) {
            if (!real[s]) continue;
            score[s] = (qh[t] * kh[s]).sum().item<double>() / std::sqrt(double(d));
            m = std::max(m, score[s]);
          }
          double z = 0;
          for (int64_t s = 0; s <= t; ++s) z += real[s] ? std::exp(score[s] - m) : 0.0;
          for (int64_t s = 0; s <= t; ++s) {
            if (real[s]) attn[t].narrow(0, head * d, d) += std::exp(score[s] - m) / z * vh[s];
          }
        }
      }
      h = h + lin(attn, p + "self_attn.o_proj");
      auto y = rms(h, w.at(p + "post_attention_layernorm.weight"));
      auto gate = lin(y, p + "mlp.gate_proj");
      h = h + lin(gate / (1 + torch::exp(-gate)) * lin(y, p + "mlp.up_proj"), p + "mlp.down_proj");
    }
    h = rms(h, w.at("model.norm.weight"));
    auto head = c.tie_word_embeddings ? w.at("model.embed_tokens.weight") : w.at("lm_head.weight");
    logits[b] = torch::matmul(h, head.t());
  }
  return logits;
}

fs::path temp_dir(const std::string& name) { return grpo::testing::fresh_temp_dir("models_" + name); }

}  // namespace

TEST_CASE("CausalLM matches an independent fp64 re-derivation for Qwen2, Qwen3 and Llama", "[models]") {
  for (auto arch : {Architecture::qwen2, Architecture::qwen3, Architecture::llama}) {
    INFO(grpo::models::to_string(arch));
    auto model = make_model(arch);
    torch::manual_seed(11);
    auto ids = torch::randint(0, 23, {2, 6}, torch::kInt64);
    auto mask = torch::ones({2, 6}, torch::kInt64);
    mask[1][0] = 0;  // left padding in row 1
    mask[1][1] = 0;
    auto logits = model->forward(ids, mask);
    auto expected = reference_logits(model, ids, mask);
    // compare only real positions (padded positions are undefined by design)
    auto valid = mask.to(torch::kBool).unsqueeze(-1).expand_as(logits);
    GRPO_REQUIRE_CLOSE(logits.masked_select(valid), expected.masked_select(valid), 1e-9, 1e-9);
    REQUIRE(torch::isfinite(logits).all().item<bool>());
  }
}

TEST_CASE("KV-cache decoding reproduces the full forward, with left padding", "[models]") {
  for (auto arch : {Architecture::qwen2, Architecture::qwen3}) {
    auto model = make_model(arch, 3);
    torch::manual_seed(12);
    auto ids = torch::randint(0, 23, {3, 7}, torch::kInt64);
    auto mask = torch::ones({3, 7}, torch::kInt64);
    mask[0][0] = 0;
    mask[2].narrow(0, 0, 3).zero_();
    auto full = model->forward(ids, mask);
    grpo::models::KvCache cache;
    auto prefill = model->forward_step(ids.narrow(1, 0, 4), mask.narrow(1, 0, 4), cache);
    REQUIRE(cache.length() == 4);
    std::vector<torch::Tensor> steps{prefill};
    for (int64_t t = 4; t < 7; ++t) {
      steps.push_back(model->forward_step(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), cache));
    }
    auto incremental = torch::cat(steps, 1);
    auto valid = mask.to(torch::kBool).unsqueeze(-1).expand_as(full);
    GRPO_REQUIRE_CLOSE(incremental.masked_select(valid), full.masked_select(valid), 1e-10, 1e-10);
    REQUIRE(cache.length() == 7);
    // forward_step_last: the same prefill and step, logits of the last new position only.
    grpo::models::KvCache last_cache;
    GRPO_REQUIRE_CLOSE(model->forward_step_last(ids.narrow(1, 0, 4), mask.narrow(1, 0, 4), last_cache),
                       full.select(1, 3), 1e-10, 1e-10);
    GRPO_REQUIRE_CLOSE(model->forward_step_last(ids.narrow(1, 4, 1), mask.narrow(1, 0, 5), last_cache),
                       full.select(1, 4), 1e-10, 1e-10);
    cache.select_rows(torch::tensor({0, 2}, torch::kInt64));
    REQUIRE(cache.keys[0].size(0) == 2);
  }
}

TEST_CASE("KV cache without gradients: buffers grow in place, copies stay independent, one row decodes", "[models]") {
  torch::NoGradGuard no_grad;  // as the sampler decodes: the in-place path
  for (auto arch : {Architecture::qwen2, Architecture::llama}) {
    auto model = make_model(arch, 4);
    torch::manual_seed(21);
    auto ids = torch::randint(0, 23, {2, 12}, torch::kInt64);
    auto mask = torch::ones({2, 12}, torch::kInt64);
    mask[1].narrow(0, 0, 2).zero_();
    auto full = model->forward(ids, mask);
    auto valid = mask.to(torch::kBool).unsqueeze(-1);
    // The same ids with a different token at position 8: what a copy of the cache decodes.
    auto other_ids = ids.clone();
    other_ids[0][8] = (other_ids[0][8].item<int64_t>() + 1) % 23;
    other_ids[1][8] = (other_ids[1][8].item<int64_t>() + 5) % 23;
    auto other_full = model->forward(other_ids, mask);

    grpo::models::KvCache cache, fork;
    std::vector<torch::Tensor> steps{model->forward_step(ids.narrow(1, 0, 3), mask.narrow(1, 0, 3), cache)};
    std::vector<torch::Tensor> fork_steps;
    std::map<int64_t, const void*> buffer;  // where the keys of layer 1 live after the step at position t
    const void* forked_from = nullptr;
    for (int64_t t = 3; t < 12; ++t) {
      if (t == 8) {
        fork = cache;  // shares the buffers until one of them appends
        forked_from = cache.keys[1].data_ptr();
      }
      steps.push_back(model->forward_step(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), cache));
      if (t >= 8) fork_steps.push_back(model->forward_step(other_ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), fork));
      buffer[t] = cache.keys[1].data_ptr();
    }
    // After a 3-token prefill the buffer doubles to 6 positions (t = 3, 4, 5 in place), then to 12 (t = 6, 7).
    CHECK(buffer[4] == buffer[3]);
    CHECK(buffer[5] == buffer[3]);
    CHECK(buffer[6] != buffer[5]);
    CHECK(buffer[7] == buffer[6]);
    // At t = 8 the fork shares it: the cache appending first moves to a buffer of its own (t = 8..11 in place) and
    // the fork then holds the old one alone, so it appends there in place.
    CHECK(buffer[8] != buffer[7]);
    CHECK(buffer[11] == buffer[8]);
    CHECK(fork.keys[1].data_ptr() == forked_from);
    CHECK(cache.length() == 12);
    auto incremental = torch::cat(steps, 1);
    GRPO_REQUIRE_CLOSE(incremental.masked_select(valid), full.masked_select(valid), 1e-10, 1e-10);
    // The copy decoded other tokens from position 8 on; neither cache saw the other's keys.
    auto fork_logits = torch::cat(fork_steps, 1);
    GRPO_REQUIRE_CLOSE(fork_logits, other_full.narrow(1, 8, 4), 1e-10, 1e-10);

    // One row (the matrix-vector path of every projection and lm_head) against the full forward of that row.
    const auto row = ids.narrow(0, 0, 1);
    grpo::models::KvCache single;
    std::vector<torch::Tensor> row_steps;
    for (int64_t t = 0; t < 5; ++t) {
      row_steps.push_back(model->forward_step(row.narrow(1, t, 1), torch::ones({1, t + 1}, torch::kInt64), single));
    }
    const auto row_full = model->forward(row.narrow(1, 0, 5));
    GRPO_REQUIRE_CLOSE(torch::cat(row_steps, 1), row_full, 1e-10, 1e-10);
    GRPO_REQUIRE_CLOSE(row_full, reference_logits(model, row.narrow(1, 0, 5), torch::ones({1, 5}, torch::kInt64)),
                       1e-9, 1e-9);
  }
}

TEST_CASE("A left-padded row gives the logits of the same row unpadded, the future never leaks", "[models]") {
  auto model = make_model(Architecture::qwen2, 5);
  auto ids = torch::tensor({{0, 0, 4, 9, 2, 17}}, torch::kInt64);
  auto mask = torch::tensor({{0, 0, 1, 1, 1, 1}}, torch::kInt64);
  auto padded = model->forward(ids, mask);
  auto alone = model->forward(ids.narrow(1, 2, 4));
  GRPO_REQUIRE_CLOSE(padded.narrow(1, 2, 4), alone, 1e-10, 1e-10);
  auto changed = ids.clone();
  changed[0][5] = 3;
  GRPO_REQUIRE_CLOSE(model->forward(changed, mask).narrow(1, 2, 3), padded.narrow(1, 2, 3), 0, 0);
}

TEST_CASE("hidden_states and lm_head_weight compose to the logits, gradients flow", "[models]") {
  auto model = make_model(Architecture::llama);
  auto ids = torch::tensor({{1, 2, 3}}, torch::kInt64);
  auto logits = model->forward(ids);
  GRPO_REQUIRE_CLOSE(torch::matmul(model->hidden_states(ids), model->lm_head_weight().t()), logits, 1e-12, 1e-12);
  logits.sum().backward();
  for (const auto& p : model->named_parameters()) {
    INFO(p.key());
    REQUIRE(p.value().grad().defined());
  }
}

TEST_CASE("save_pretrained and from_pretrained round-trip, one file or sharded, in any dtype", "[models][io]") {
  auto dir = temp_dir("roundtrip");
  for (auto arch : {Architecture::qwen2, Architecture::qwen3, Architecture::llama}) {
    auto model = make_model(arch);
    grpo::models::save_pretrained(model, dir / "one");
    grpo::models::save_pretrained(model, dir / "sharded", /*max_shard_bytes=*/2000);
    REQUIRE(fs::exists(dir / "sharded" / "model.safetensors.index.json"));
    const bool tied = model->config().tie_word_embeddings;
    REQUIRE(grpo::io::SafetensorsFile(dir / "one" / "model.safetensors").contains("lm_head.weight") == !tied);
    auto ids = torch::tensor({{3, 1, 4, 1, 5}}, torch::kInt64);
    auto expected = model->forward(ids);
    for (const char* sub : {"one", "sharded"}) {
      auto back = grpo::models::from_pretrained(dir / sub);
      REQUIRE(back->config().architecture == arch);
      REQUIRE(back->lm_head_weight().scalar_type() == torch::kFloat64);
      GRPO_REQUIRE_CLOSE(back->forward(ids), expected, 0, 0);
    }
    auto bf16 = grpo::models::from_pretrained(dir / "one", torch::kBFloat16);
    REQUIRE(bf16->lm_head_weight().scalar_type() == torch::kBFloat16);
    GRPO_REQUIRE_CLOSE(bf16->forward(ids).to(torch::kFloat64), expected, 0.1, 0.1);
  }
  fs::remove_all(dir);
}

TEST_CASE("from_pretrained reads a checkpoint laid out by hand with Hugging Face names", "[models][io]") {
  auto dir = temp_dir("hand");
  // A Qwen2 config.json as transformers writes it (extra fields ignored), and tensors named by hand.
  std::ofstream(dir / "config.json") << R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 5, "hidden_size": 4,
    "intermediate_size": 6, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_sliding_window": false, "sliding_window": 4096, "eos_token_id": [3, 4], "bos_token_id": 2,
    "hidden_act": "silu", "max_window_layers": 21, "attention_dropout": 0.0})";
  std::map<std::string, torch::Tensor> t;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    t[name] = torch::full(shape, 0.01 * static_cast<double>(t.size() + 1)).to(torch::kBFloat16);
  };
  add("model.embed_tokens.weight", {5, 4});
  add("model.norm.weight", {4});
  const std::string l = "model.layers.0.";
  add(l + "input_layernorm.weight", {4});
  add(l + "post_attention_layernorm.weight", {4});
  add(l + "self_attn.q_proj.weight", {4, 4});
  add(l + "self_attn.q_proj.bias", {4});
  add(l + "self_attn.k_proj.weight", {2, 4});
  add(l + "self_attn.k_proj.bias", {2});
  add(l + "self_attn.v_proj.weight", {2, 4});
  add(l + "self_attn.v_proj.bias", {2});
  add(l + "self_attn.o_proj.weight", {4, 4});
  add(l + "mlp.gate_proj.weight", {6, 4});
  add(l + "mlp.up_proj.weight", {6, 4});
  add(l + "mlp.down_proj.weight", {4, 6});
  grpo::io::save_safetensors(dir / "model.safetensors", t);
  auto model = grpo::models::from_pretrained(dir);
  REQUIRE(model->config().eos_token_ids == std::vector<int64_t>{3, 4});
  REQUIRE(model->config().bos_token_id == 2);
  REQUIRE(model->lm_head_weight().scalar_type() == torch::kBFloat16);
  REQUIRE(torch::equal(model->hf_state().at(l + "mlp.up_proj.weight"), t.at(l + "mlp.up_proj.weight")));
  REQUIRE_FALSE(model->is_training());

  auto bad = t;
  bad[l + "mlp.up_proj.weight"] = torch::zeros({6, 5}, torch::kBFloat16);
  grpo::io::save_safetensors(dir / "model.safetensors", bad);
  REQUIRE_THROWS_WITH(grpo::models::from_pretrained(dir),
                      Catch::Contains("\"model.layers.0.mlp.up_proj.weight\" has shape [6, 5] but the model expects [6, 4]"));
  bad = t;
  bad.erase(l + "self_attn.k_proj.bias");
  grpo::io::save_safetensors(dir / "model.safetensors", bad);
  REQUIRE_THROWS_WITH(grpo::models::from_pretrained(dir), Catch::Contains("no tensor \"model.layers.0.self_attn.k_proj.bias\""));
  bad = t;
  bad["model.layers.1.mlp.up_proj.weight"] = torch::zeros({1});
  grpo::io::save_safetensors(dir / "model.safetensors", bad);
  REQUIRE_THROWS_WITH(grpo::models::from_pretrained(dir), Catch::Contains("\"model.layers.1.mlp.up_proj.weight\" has no place"));
  fs::remove_all(dir);
}

TEST_CASE("ModelConfig parses config.json and names the field at fault", "[models][errors]") {
  auto c = ModelConfig::from_json(R"({"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":4,
      "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4})");
  REQUIRE(c.architecture == Architecture::qwen3);
  REQUIRE(c.head_dimension() == 4);
  REQUIRE_FALSE(c.tie_word_embeddings);
  auto again = ModelConfig::from_json(c.to_json());
  REQUIRE(again.head_dim == 4);
  REQUIRE(again.num_key_value_heads == 1);

  const std::string base = R"("vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2)";
  REQUIRE_THROWS_WITH(ModelConfig::from_json("{\"model_type\":\"gpt2\"," + base + "}", "x/config.json"),
                      Catch::Contains("x/config.json: model_type \"gpt2\" is not supported"));
  REQUIRE_THROWS_WITH(ModelConfig::from_json(R"({"model_type":"qwen2","vocab_size":10})", "c.json"),
                      Catch::Contains("c.json: missing field \"hidden_size\""));
  REQUIRE_THROWS_WITH(ModelConfig::from_json(R"({"model_type":"llama","vocab_size":10,"hidden_size":"8"})"),
                      Catch::Contains("field \"hidden_size\" must be an integer"));
  REQUIRE_THROWS_WITH(ModelConfig::from_json("{\"model_type\":\"llama\"," + base + ",\"num_key_value_heads\":3}"),
                      Catch::Contains("not a multiple of num_key_value_heads 3"));
  REQUIRE_THROWS_WITH(ModelConfig::from_json("{\"model_type\":\"llama\"," + base + R"(,"rope_scaling":{"rope_type":"yarn","factor":2}})"),
                      Catch::Contains("rope_scaling type \"yarn\" is not supported"));
  REQUIRE_THROWS_WITH(ModelConfig::from_json("{\"model_type\":\"qwen2\"," + base + ",\"use_sliding_window\":true}"),
                      Catch::Contains("use_sliding_window"));
  REQUIRE_THROWS_WITH(ModelConfig::from_json("[]"), Catch::Contains("not a JSON object"));
  auto scaled = ModelConfig::from_json("{\"model_type\":\"llama\"," + base +
                                       R"(,"rope_scaling":{"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,)"
                                       R"("high_freq_factor":4.0,"original_max_position_embeddings":8192}})");
  REQUIRE(scaled.rope_scaling->factor == 32.0);
  // transformers 5 writes the rotary settings in rope_parameters.
  const auto v5 = ModelConfig::from_json("{\"model_type\":\"qwen2\"," + base +
                                         R"(,"rope_parameters":{"rope_theta":1000000.0,"rope_type":"default"}})");
  REQUIRE(v5.rope_theta == 1000000.0);
  REQUIRE_FALSE(v5.rope_scaling);
  const auto v5_scaled = ModelConfig::from_json("{\"model_type\":\"llama\"," + base +
                                                R"(,"rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3",)"
                                                R"("factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,)"
                                                R"("original_max_position_embeddings":8192}})");
  REQUIRE(v5_scaled.rope_theta == 500000.0);
  REQUIRE(v5_scaled.rope_scaling->factor == 8.0);
  REQUIRE(v5_scaled.rope_scaling->original_max_position_embeddings == 8192);
  REQUIRE_THROWS_WITH(ModelConfig::from_json("{\"model_type\":\"llama\"," + base +
                                             R"(,"rope_parameters":{"rope_theta":1e4,"rope_type":"yarn","factor":2}})"),
                      Catch::Contains("rope_parameters.rope_type \"yarn\" is not supported"));
  CausalLM model(scaled);  // builds with scaled frequencies
  REQUIRE(model->forward(torch::tensor({{1, 2}}, torch::kInt64)).sizes() == torch::IntArrayRef({1, 2, 10}));
}

TEST_CASE("CausalLM rejects bad inputs with shapes in the message", "[models][errors]") {
  auto model = make_model(Architecture::qwen2);
  REQUIRE_THROWS_WITH(model->forward(torch::zeros({2, 3}, torch::kInt32)), Catch::Contains("[B, T] int64"));
  REQUIRE_THROWS_WITH(model->forward(torch::tensor({{1, 99}}, torch::kInt64)), Catch::Contains("[0, 23)"));
  REQUIRE_THROWS_WITH(model->forward(torch::tensor({{1, 2}}, torch::kInt64), torch::ones({1, 3}, torch::kInt64)),
                      Catch::Contains("attention_mask must be [B, cached + T] = [1, 2], got [1, 3]"));
}
