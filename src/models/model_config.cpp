// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/models/model_config.hpp>

#include <simdjson.h>

#include <fmt/ranges.h>


namespace grpo::models {
namespace {

struct DtypeName {
  std::string_view name;
  torch::ScalarType dtype;
};
constexpr DtypeName kDtypes[] = {
    {"float32", torch::kFloat32}, {"bfloat16", torch::kBFloat16}, {"float16", torch::kFloat16},
    {"float64", torch::kFloat64}, {"float", torch::kFloat32},     {"half", torch::kFloat16},
};

/// Reads typed fields of one JSON object, naming "<source>: field" in every error.
class FieldReader {
 public:
  FieldReader(simdjson::dom::object object, std::string_view source, std::string prefix = "")
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  bool has(std::string_view key) const {
    simdjson::dom::element e;
    return !object_[key].get(e) && !e.is_null();
  }
  simdjson::dom::element get(std::string_view key) const {
    simdjson::dom::element e;
    if (object_[key].get(e)) throw ParseError(fmt::format("{}: missing field \"{}{}\"", source_, prefix_, key));
    return e;
  }
  int64_t integer(std::string_view key) const {
    int64_t v = 0;
    if (get(key).get_int64().get(v)) fail(key, "an integer");
    return v;
  }
  double number(std::string_view key) const {
    double v = 0;
    if (get(key).get_double().get(v)) fail(key, "a number");
    return v;
  }
  bool boolean(std::string_view key) const {
    bool v = false;
    if (get(key).get_bool().get(v)) fail(key, "true or false");
    return v;
  }
  std::string_view string(std::string_view key) const {
    std::string_view v;
    if (get(key).get_string().get(v)) fail(key, "a string");
    return v;
  }
  void optional(std::string_view key, int64_t& out) const { if (has(key)) out = integer(key); }
  void optional(std::string_view key, double& out) const { if (has(key)) out = number(key); }
  void optional(std::string_view key, bool& out) const { if (has(key)) out = boolean(key); }
  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw ParseError(fmt::format("{}: field \"{}{}\" must be {}", source_, prefix_, key, what));
  }

 private:
  simdjson::dom::object object_;
  std::string_view source_;
  std::string prefix_;
};

}  // namespace

std::string_view to_string(Architecture architecture) {
  switch (architecture) {
    case Architecture::qwen2: return "qwen2";
    case Architecture::qwen3: return "qwen3";
    case Architecture::llama: return "llama";
  }
  return "unknown";
}

void ModelConfig::validate() const {
  for (auto [name, value] : {std::pair{"vocab_size", vocab_size}, {"hidden_size", hidden_size},
                             {"intermediate_size", intermediate_size}, {"num_hidden_layers", num_hidden_layers},
                             {"num_attention_heads", num_attention_heads}, {"num_key_value_heads", num_key_value_heads},
                             {"max_position_embeddings", max_position_embeddings}}) {
    GRPO_CHECK_CONFIG(value > 0, "ModelConfig: {} must be > 0, got {}", name, value);
  }
  GRPO_CHECK_CONFIG(head_dim > 0 || hidden_size % num_attention_heads == 0,
                    "ModelConfig: hidden_size {} is not divisible by num_attention_heads {} (and head_dim is not set)",
                    hidden_size, num_attention_heads);
  GRPO_CHECK_CONFIG(head_dimension() % 2 == 0, "ModelConfig: head_dim must be even for rotary embeddings, got {}",
                    head_dimension());
  GRPO_CHECK_CONFIG(num_attention_heads % num_key_value_heads == 0,
                    "ModelConfig: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                    num_attention_heads, num_key_value_heads);
  GRPO_CHECK_CONFIG(rms_norm_eps > 0, "ModelConfig: rms_norm_eps must be > 0, got {}", rms_norm_eps);
  GRPO_CHECK_CONFIG(rope_theta > 0, "ModelConfig: rope_theta must be > 0, got {}", rope_theta);
  if (rope_scaling) {
    GRPO_CHECK_CONFIG(rope_scaling->factor > 0 && rope_scaling->low_freq_factor > 0 &&
                          rope_scaling->high_freq_factor > rope_scaling->low_freq_factor &&
                          rope_scaling->original_max_position_embeddings > 0,
                      "ModelConfig: rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                      "original_max_position_embeddings > 0");
  }
}

ModelConfig ModelConfig::from_json(std::string_view json, std::string_view source) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::object root;
  if (auto error = parser.parse(padded).get_object().get(root)) {
    throw ParseError(fmt::format("{}: not a JSON object: {}", source, simdjson::error_message(error)));
  }
  FieldReader f(root, source);
  ModelConfig c;
  const std::string_view type = f.string("model_type");
  // Defaults for absent fields are those of transformers' Qwen2Config / Qwen3Config / LlamaConfig.
  c.tie_word_embeddings = false;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  if (type == "qwen2") {
    c.architecture = Architecture::qwen2;
  } else if (type == "qwen3") {
    c.architecture = Architecture::qwen3;
    c.head_dim = 128;
  } else if (type == "llama") {
    c.architecture = Architecture::llama;
    c.max_position_embeddings = 2048;
  } else {
    throw ConfigError(fmt::format("{}: model_type \"{}\" is not supported (qwen2, qwen3, llama)", source, type));
  }
  c.attention_bias = false;
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.num_attention_heads = f.integer("num_attention_heads");
  c.num_key_value_heads = c.num_attention_heads;
  f.optional("num_key_value_heads", c.num_key_value_heads);
  f.optional("head_dim", c.head_dim);
  f.optional("max_position_embeddings", c.max_position_embeddings);
  f.optional("rms_norm_eps", c.rms_norm_eps);
  f.optional("rope_theta", c.rope_theta);
  f.optional("tie_word_embeddings", c.tie_word_embeddings);
  f.optional("attention_bias", c.attention_bias);
  f.optional("mlp_bias", c.mlp_bias);
  if (c.architecture == Architecture::qwen2) c.attention_bias = true;  // Qwen2's q/k/v projections always have bias
  if (f.has("use_sliding_window") && f.boolean("use_sliding_window")) {
    throw ConfigError(fmt::format("{}: use_sliding_window = true is not supported", source));
  }
  const auto llama3_scaling = [](const FieldReader& s) {
    Llama3RopeScaling r;
    r.factor = s.number("factor");
    s.optional("low_freq_factor", r.low_freq_factor);
    s.optional("high_freq_factor", r.high_freq_factor);
    s.optional("original_max_position_embeddings", r.original_max_position_embeddings);
    return r;
  };
  if (f.has("rope_scaling")) {
    simdjson::dom::object scaling;
    if (f.get("rope_scaling").get_object().get(scaling)) f.fail("rope_scaling", "an object or null");
    FieldReader s(scaling, source, "rope_scaling.");
    const std::string_view rope_type = s.has("rope_type") ? s.string("rope_type") : s.string("type");
    if (rope_type != "llama3") {
      throw ConfigError(fmt::format("{}: rope_scaling type \"{}\" is not supported (llama3)", source, rope_type));
    }
    c.rope_scaling = llama3_scaling(s);
  }
  // transformers 5 writes the rotary settings as one object instead: rope_parameters {rope_theta, rope_type and the
  // scaling's own fields}.
  if (f.has("rope_parameters")) {
    simdjson::dom::object parameters;
    if (f.get("rope_parameters").get_object().get(parameters)) f.fail("rope_parameters", "an object or null");
    FieldReader p(parameters, source, "rope_parameters.");
    p.optional("rope_theta", c.rope_theta);
    const std::string_view rope_type = p.has("rope_type") ? p.string("rope_type") : "default";
    if (rope_type == "llama3") {
      c.rope_scaling = llama3_scaling(p);
    } else if (rope_type != "default") {
      throw ConfigError(fmt::format("{}: rope_parameters.rope_type \"{}\" is not supported (default, llama3)", source,
                                    rope_type));
    }
  }
  if (f.has("eos_token_id")) {
    auto eos = f.get("eos_token_id");
    int64_t one = 0;
    simdjson::dom::array many;
    if (!eos.get_int64().get(one)) {
      c.eos_token_ids = {one};
    } else if (!eos.get_array().get(many)) {
      for (auto id : many) {
        if (id.get_int64().get(one)) f.fail("eos_token_id", "an integer or a list of integers");
        c.eos_token_ids.push_back(one);
      }
    } else {
      f.fail("eos_token_id", "an integer or a list of integers");
    }
  }
  if (f.has("bos_token_id")) c.bos_token_id = f.integer("bos_token_id");
  const std::string_view dtype_key = f.has("torch_dtype") ? "torch_dtype" : (f.has("dtype") ? "dtype" : "");
  if (!dtype_key.empty()) {
    const std::string_view name = f.string(dtype_key);
    bool known = false;
    for (const auto& d : kDtypes) {
      if (d.name == name) {
        c.dtype = d.dtype;
        known = true;
      }
    }
    if (!known) throw ConfigError(fmt::format("{}: {} \"{}\" is not supported", source, dtype_key, name));
  }
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", source, e.what()));
  }
  return c;
}

ModelConfig ModelConfig::from_file(const std::filesystem::path& path) {
  return from_json(io::read_file(path), path.string());
}

std::string ModelConfig::to_json() const {
  std::string_view class_name = architecture == Architecture::qwen2   ? "Qwen2ForCausalLM"
                                : architecture == Architecture::qwen3 ? "Qwen3ForCausalLM"
                                                                      : "LlamaForCausalLM";
  std::string_view dtype_name = "float32";
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) {
      dtype_name = d.name;
      break;
    }
  }
  std::string out = "{\n";
  out += fmt::format("  \"architectures\": [\"{}\"],\n  \"model_type\": \"{}\",\n", class_name, to_string(architecture));
  out += fmt::format("  \"vocab_size\": {},\n  \"hidden_size\": {},\n  \"intermediate_size\": {},\n", vocab_size,
                     hidden_size, intermediate_size);
  out += fmt::format("  \"num_hidden_layers\": {},\n  \"num_attention_heads\": {},\n  \"num_key_value_heads\": {},\n",
                     num_hidden_layers, num_attention_heads, num_key_value_heads);
  out += fmt::format("  \"head_dim\": {},\n  \"max_position_embeddings\": {},\n", head_dimension(),
                     max_position_embeddings);
  out += fmt::format("  \"rms_norm_eps\": {},\n  \"rope_theta\": {},\n", rms_norm_eps, rope_theta);
  if (rope_scaling) {
    out += fmt::format(
        "  \"rope_scaling\": {{\"rope_type\": \"llama3\", \"factor\": {}, \"low_freq_factor\": {}, "
        "\"high_freq_factor\": {}, \"original_max_position_embeddings\": {}}},\n",
        rope_scaling->factor, rope_scaling->low_freq_factor, rope_scaling->high_freq_factor,
        rope_scaling->original_max_position_embeddings);
  }
  out += fmt::format("  \"tie_word_embeddings\": {},\n  \"attention_bias\": {},\n  \"mlp_bias\": {},\n",
                     tie_word_embeddings, attention_bias, mlp_bias);
  out += "  \"hidden_act\": \"silu\",\n  \"use_sliding_window\": false,\n";
  if (bos_token_id) out += fmt::format("  \"bos_token_id\": {},\n", *bos_token_id);
  if (eos_token_ids.size() == 1) out += fmt::format("  \"eos_token_id\": {},\n", eos_token_ids[0]);
  if (eos_token_ids.size() > 1) out += fmt::format("  \"eos_token_id\": [{}],\n", fmt::join(eos_token_ids, ", "));
  out += fmt::format("  \"torch_dtype\": \"{}\"\n}}\n", dtype_name);
  return out;
}

}  // namespace grpo::models
