// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/io/atomic_file.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/io/safetensors.hpp>
#include <grpo/models/lora.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <set>

namespace grpo::models {
namespace {

constexpr std::string_view kPrefix = "base_model.model.";  // peft's key prefix for a PeftModelForCausalLM
constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

/// Linear layers of the model by module name, in module order.
std::vector<std::pair<std::string, std::shared_ptr<LinearImpl>>> linear_modules(const CausalLM& model) {
  std::vector<std::pair<std::string, std::shared_ptr<LinearImpl>>> out;
  for (const auto& item : model->named_modules("", /*include_self=*/false)) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    // An adapter's own A and B are Linear modules too; they are never targets.
    if (linear && item.key().find(".lora_") == std::string::npos) out.emplace_back(item.key(), linear);
  }
  return out;
}

/// The decoder layer index of "model.layers.<i>.…", or -1.
int64_t layer_index(std::string_view name) {
  constexpr std::string_view kLayers = "model.layers.";
  if (!name.starts_with(kLayers)) return -1;
  name.remove_prefix(kLayers.size());
  int64_t index = 0;
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') index = index * 10 + (name[digits++] - '0');
  return digits > 0 ? index : -1;
}

bool is_plain_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
  });
}

bool is_all_linear(std::string_view target) {
  constexpr std::string_view kAllLinear = "all-linear";
  return target.size() == kAllLinear.size() &&
         std::equal(target.begin(), target.end(), kAllLinear.begin(),
                    [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
}

/// Whether target_modules is peft's string form (a regular expression), not its list form.
bool is_regex_target(const LoraOptions& options) {
  return options.target_modules.size() == 1 && !is_all_linear(options.target_modules[0]) &&
         !is_plain_name(options.target_modules[0]);
}

/// In layers_to_transform, or no layer filter.
bool in_chosen_layers(std::string_view name, const LoraOptions& options) {
  return options.layers_to_transform.empty() ||
         std::find(options.layers_to_transform.begin(), options.layers_to_transform.end(), layer_index(name)) !=
             options.layers_to_transform.end();
}

/// peft's check_target_module_exists (tuners/tuners_utils.py): the string form is a regular expression the whole
/// name must match ("all-linear": every Linear but lm_head); in the list form an entry matches the module of that
/// exact name, or, within layers_to_transform, a module whose name ends with "." + entry.
bool targeted(std::string_view name, const LoraOptions& options) {
  if (options.target_modules.size() == 1 && is_all_linear(options.target_modules[0])) {
    return name != "lm_head" && in_chosen_layers(name, options);
  }
  if (is_regex_target(options)) return std::regex_match(std::string(name), std::regex(options.target_modules[0]));
  for (const std::string& target : options.target_modules) {
    if (name == target) return true;
    if (name.size() > target.size() && name.ends_with(target) && name[name.size() - target.size() - 1] == '.' &&
        in_chosen_layers(name, options)) {
      return true;
    }
  }
  return false;
}

std::string config_json(const LoraOptions& o, std::string_view base_model) {
  std::string targets;
  for (const std::string& t : o.target_modules) targets += (targets.empty() ? "" : ", ") + json_quoted(t);
  targets = is_regex_target(o) ? targets : "[" + targets + "]";  // peft: a string is a regex, a list names
  std::string layers = o.layers_to_transform.empty() ? "null" : fmt::format("[{}]", fmt::join(o.layers_to_transform, ", "));
  return fmt::format(
      "{{\n  \"alpha_pattern\": {{}},\n  \"base_model_name_or_path\": {},\n  \"bias\": \"none\",\n"
      "  \"fan_in_fan_out\": false,\n  \"inference_mode\": true,\n  \"init_lora_weights\": true,\n"
      "  \"layers_pattern\": null,\n  \"layers_to_transform\": {},\n  \"lora_alpha\": {},\n  \"lora_dropout\": {},\n"
      "  \"modules_to_save\": null,\n  \"peft_type\": \"LORA\",\n  \"r\": {},\n  \"rank_pattern\": {{}},\n"
      "  \"revision\": null,\n  \"target_modules\": {},\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n"
      "  \"use_rslora\": {}\n}}\n",
      base_model.empty() ? "null" : json_quoted(base_model), layers, o.alpha, o.dropout, o.rank, targets,
      o.use_rslora ? "true" : "false");
}

}  // namespace

double LoraOptions::scaling() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

void LoraOptions::validate() const {
  GRPO_CHECK_CONFIG(rank >= 1, "LoRA: r must be >= 1, got {}", rank);
  GRPO_CHECK_CONFIG(std::isfinite(alpha) && alpha > 0.0, "LoRA: lora_alpha must be > 0, got {}", alpha);
  GRPO_CHECK_CONFIG(dropout >= 0.0 && dropout < 1.0, "LoRA: lora_dropout must be in [0, 1), got {}", dropout);
  GRPO_CHECK_CONFIG(!target_modules.empty(), "LoRA: target_modules must name at least one module");
  for (const std::string& target : target_modules) {
    GRPO_CHECK_CONFIG(!target.empty(), "LoRA: target_modules has an empty entry");
    GRPO_CHECK_CONFIG(target_modules.size() == 1 || is_plain_name(target),
                      "LoRA: target_modules entry \"{}\" is not a module name; in a list of several entries each names "
                      "a module or a suffix (peft's list form); a regular expression or all-linear must be the only "
                      "entry",
                      target);
  }
  if (is_regex_target(*this)) {
    try {
      std::regex check(target_modules[0]);
    } catch (const std::regex_error& e) {
      throw ConfigError(fmt::format("LoRA: target_modules entry \"{}\" is not a regular expression: {}",
                                    target_modules[0], e.what()));
    }
    GRPO_CHECK_CONFIG(layers_to_transform.empty(),
                      "LoRA: layers_to_transform cannot be used with a regular expression in target_modules (peft "
                      "rejects it too); put the layer into the expression");
  }
  for (int64_t layer : layers_to_transform) {
    GRPO_CHECK_CONFIG(layer >= 0, "LoRA: layers_to_transform must hold layer indexes >= 0, got {}", layer);
  }
}

std::vector<std::string> lora_modules(const CausalLM& model) {
  std::vector<std::string> out;
  for (const auto& [name, linear] : linear_modules(model)) {
    if (linear->lora) out.push_back(name);
  }
  return out;
}

std::vector<std::string> lora_targets(const CausalLM& model, const LoraOptions& options) {
  options.validate();
  GRPO_CHECK_CONFIG(!model->lora_options(), "LoRA: the model already has adapters ({})",
                    fmt::join(lora_modules(model), ", "));
  const auto linears = linear_modules(model);
  std::vector<std::string> chosen;
  for (const auto& [name, linear] : linears) {
    if (!targeted(name, options)) continue;
    GRPO_CHECK_CONFIG(name != "lm_head",
                      "LoRA: target_modules selects lm_head, which this library does not adapt (the fused log-prob "
                      "kernels read its weight directly); target the decoder's projections");
    chosen.push_back(name);
  }
  if (chosen.empty()) {
    std::set<std::string> names;
    for (const auto& item : linears) names.insert(item.first.substr(item.first.rfind('.') + 1));
    throw ConfigError(fmt::format(
        "LoRA: target_modules [{}]{} match no module of this {} model (its Linear modules: {})",
        fmt::join(options.target_modules, ", "),
        options.layers_to_transform.empty() ? "" : fmt::format(" in layers_to_transform [{}]",
                                                               fmt::join(options.layers_to_transform, ", ")),
        to_string(model->config().architecture), fmt::join(names, ", ")));
  }
  return chosen;
}

std::vector<std::string> add_lora(CausalLM& model, const LoraOptions& options) {
  const std::vector<std::string> targets = lora_targets(model, options);
  std::map<std::string, std::shared_ptr<LinearImpl>> by_name;
  for (auto& [name, linear] : linear_modules(model)) by_name.emplace(name, linear);
  std::vector<std::pair<std::string, std::shared_ptr<LinearImpl>>> chosen;
  std::set<std::string> suffixes;  // the matched modules' last names, for the saved config
  for (const std::string& name : targets) {
    chosen.emplace_back(name, by_name.at(name));
    suffixes.insert(name.substr(name.rfind('.') + 1));
  }
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  for (auto& [name, linear] : chosen) {
    const auto& w = linear->weight;
    auto options_of = w.options();
    if (w.scalar_type() == torch::kBFloat16 || w.scalar_type() == torch::kHalf) options_of = options_of.dtype(torch::kFloat32);
    LoraAdapter adapter;
    adapter.a = std::make_shared<LinearImpl>(w.size(1), options.rank, false, WeightInit::normal, options_of);
    adapter.b = std::make_shared<LinearImpl>(options.rank, w.size(0), false, WeightInit::none, options_of);
    adapter.b->weight.zero_();
    adapter.scaling = options.scaling();
    adapter.dropout = options.dropout;
    linear->register_module("lora_A", adapter.a);
    linear->register_module("lora_B", adapter.b);
    linear->lora = std::move(adapter);
  }
  LoraOptions stored = options;
  if (options.target_modules.size() == 1 && is_all_linear(options.target_modules[0])) {
    stored.target_modules.assign(suffixes.begin(), suffixes.end());  // peft saves the expanded names too
  }
  model->set_lora_options(stored);
  return lora_modules(model);
}

void save_lora_adapter(const CausalLM& model, const std::filesystem::path& directory, std::string_view base_model) {
  GRPO_CHECK(model->lora_options().has_value(), "save_lora_adapter: the model has no LoRA adapters");
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, linear] : linear_modules(model)) {
    if (!linear->lora) continue;
    tensors.emplace(fmt::format("{}{}.lora_A.weight", kPrefix, name), linear->lora->a->weight.detach());
    tensors.emplace(fmt::format("{}{}.lora_B.weight", kPrefix, name), linear->lora->b->weight.detach());
  }
  std::filesystem::create_directories(directory);
  io::save_safetensors(directory / kWeightsFile, tensors, {{"format", "pt"}});
  const std::string json = config_json(*model->lora_options(), base_model);
  io::write_file_atomically(directory / kConfigFile, [&](std::ostream& out) { out << json; });
}

LoraOptions read_lora_config(const std::filesystem::path& path) {
  const std::string source = path.string();
  simdjson::dom::parser parser;
  simdjson::padded_string text(io::read_file(path));
  simdjson::dom::object root;
  if (parser.parse(text).get(root)) throw ParseError(fmt::format("{}: not a JSON object", source));
  auto field = [&](std::string_view key) -> std::optional<simdjson::dom::element> {
    simdjson::dom::element e;
    if (root[key].get(e) || e.is_null()) return std::nullopt;
    return e;
  };
  auto fail = [&](std::string_view key, std::string_view what) -> ParseError {
    return ParseError(fmt::format("{}: field \"{}\" must be {}", source, key, what));
  };
  auto unsupported = [&](std::string_view key, std::string_view why) -> ConfigError {
    return ConfigError(fmt::format("{}: \"{}\" {}, which this library's LoRA does not implement", source, key, why));
  };
  LoraOptions o;
  if (auto e = field("peft_type")) {
    std::string_view type;
    if (e->get_string().get(type)) throw fail("peft_type", "a string");
    if (type != "LORA") throw unsupported("peft_type", fmt::format("is \"{}\" (only LORA is read)", type));
  }
  if (auto e = field("r"); !e || e->get_int64().get(o.rank)) throw fail("r", "an integer");
  if (auto e = field("lora_alpha")) {
    if (e->get_double().get(o.alpha)) throw fail("lora_alpha", "a number");
  }
  if (auto e = field("lora_dropout")) {
    if (e->get_double().get(o.dropout)) throw fail("lora_dropout", "a number");
  }
  if (auto e = field("use_rslora")) {
    if (e->get_bool().get(o.use_rslora)) throw fail("use_rslora", "true or false");
  }
  auto e = field("target_modules");
  if (!e) throw fail("target_modules", "a list of module names or a regular expression");
  std::string_view one;
  simdjson::dom::array list;
  if (!e->get_string().get(one)) {
    // peft: a string is a regular expression the whole module name must match.
    std::string target(one);
    if (one != "all-linear" && is_plain_name(one)) target = fmt::format("^{}$", one);
    o.target_modules = {std::move(target)};
  } else if (!e->get_array().get(list)) {
    o.target_modules.clear();
    for (auto item : list) {
      if (item.get_string().get(one)) throw fail("target_modules", "a list of strings");
      o.target_modules.emplace_back(one);
    }
  } else {
    throw fail("target_modules", "a list of module names or a regular expression");
  }
  if (auto layers = field("layers_to_transform")) {
    int64_t single = 0;
    if (!layers->get_int64().get(single)) {
      o.layers_to_transform = {single};
    } else if (!layers->get_array().get(list)) {
      for (auto item : list) {
        if (item.get_int64().get(single)) throw fail("layers_to_transform", "an integer or a list of integers");
        o.layers_to_transform.push_back(single);
      }
    } else {
      throw fail("layers_to_transform", "an integer or a list of integers");
    }
  }
  bool flag = false;
  if (auto f = field("use_dora"); f && !f->get_bool().get(flag) && flag) throw unsupported("use_dora", "is true");
  if (auto f = field("fan_in_fan_out"); f && !f->get_bool().get(flag) && flag) {
    throw unsupported("fan_in_fan_out", "is true");
  }
  if (auto f = field("bias")) {
    std::string_view bias;
    if (f->get_string().get(bias)) throw fail("bias", "a string");
    if (bias != "none") throw unsupported("bias", fmt::format("is \"{}\" (trained biases)", bias));
  }
  if (auto f = field("modules_to_save"); f && !(f->get_array().get(list) == simdjson::SUCCESS && list.size() == 0)) {
    throw unsupported("modules_to_save", "lists fully trained modules");
  }
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    simdjson::dom::object pattern;
    if (auto f = field(key); f && !(f->get_object().get(pattern) == simdjson::SUCCESS && pattern.size() == 0)) {
      throw unsupported(key, "sets per-module values");
    }
  }
  try {
    o.validate();
  } catch (const ConfigError& error) {
    throw ConfigError(fmt::format("{}: {}", source, error.what()));
  }
  return o;
}

LoraOptions load_lora_adapter(CausalLM& model, const std::filesystem::path& directory) {
  const LoraOptions options = read_lora_config(directory / kConfigFile);
  const auto weights_path = directory / kWeightsFile;
  GRPO_CHECK(std::filesystem::is_regular_file(weights_path), "{}: no {} beside its {}", directory.string(), kWeightsFile,
             kConfigFile);
  if (const auto& present = model->lora_options()) {  // adapters already in place (a checkpoint of a LoRA run)
    GRPO_CHECK_CONFIG(present->rank == options.rank && present->scaling() == options.scaling(),
                      "{}: r = {} and scaling {} differ from the model's adapters (r = {}, scaling {})",
                      (directory / kConfigFile).string(), options.rank, options.scaling(), present->rank,
                      present->scaling());
  } else {
    try {
      add_lora(model, options);
    } catch (const ConfigError& error) {
      throw ConfigError(fmt::format("{}: {}", (directory / kConfigFile).string(), error.what()));
    }
  }
  auto tensors = io::SafetensorsFile(weights_path).tensors();
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (const auto& [name, linear] : linear_modules(model)) {
    if (!linear->lora) continue;
    for (const auto& [part, weight] : {std::pair{"lora_A", linear->lora->a->weight}, std::pair{"lora_B", linear->lora->b->weight}}) {
      const std::string key = fmt::format("{}{}.{}.weight", kPrefix, name, part);
      auto it = tensors.find(key);
      GRPO_CHECK(it != tensors.end(), "{}: no tensor \"{}\" (adapter_config.json targets {})", weights_path.string(),
                 key, name);
      GRPO_CHECK(it->second.sizes() == weight.sizes(), "{}: tensor \"{}\" has shape {} but r = {} needs {}",
                 weights_path.string(), key, shape_str(it->second), options.rank, shape_str(weight));
      weight.copy_(it->second);
      used.insert(key);
    }
  }
  for (const auto& [name, tensor] : tensors) {
    GRPO_CHECK(used.count(name), "{}: tensor \"{}\" belongs to no adapter of this model (its adapters: {})",
               weights_path.string(), name, fmt::join(lora_modules(model), ", "));
  }
  return *model->lora_options();
}

void merge_lora(CausalLM& model) {
  GRPO_CHECK(model->lora_options().has_value(), "merge_lora: the model has no LoRA adapters");
  torch::NoGradGuard no_grad;
  for (const auto& [name, linear] : linear_modules(model)) {
    if (!linear->lora) continue;
    const auto& adapter = *linear->lora;
    const auto dtype = at::promote_types(at::promote_types(linear->weight.scalar_type(), adapter.a->weight.scalar_type()),
                                         torch::kFloat32);
    const auto delta = torch::mm(adapter.b->weight.to(dtype), adapter.a->weight.to(dtype));
    linear->weight.copy_(linear->weight.to(dtype) + delta * adapter.scaling);
    linear->unregister_module("lora_A");
    linear->unregister_module("lora_B");
    linear->lora.reset();
  }
  for (auto& p : model->parameters()) p.set_requires_grad(true);
  model->set_lora_options(std::nullopt);
}

LoraDisabled::LoraDisabled(CausalLM& model) {
  for (const auto& [name, linear] : linear_modules(model)) {
    if (linear->lora && linear->lora->enabled) {
      linear->lora->enabled = false;
      disabled_.push_back(linear.get());
    }
  }
}

LoraDisabled::~LoraDisabled() {
  for (LinearImpl* linear : disabled_) linear->lora->enabled = true;
}

}  // namespace grpo::models
