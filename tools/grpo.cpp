// SPDX-License-Identifier: Apache-2.0
// grpo: the command-line tool.
//   grpo verify --gold G --pred P             prints true or false, and on stderr what it graded: the completion's
//                                             final answer (grpo::math::grade; a gold answer without $, \(, \[ or
//                                             \boxed is read as one LaTeX answer)
//   grpo verify --jsonl                       {"gold", "pred"[, "config"]} lines on stdin → {"equivalent", "verdict",
//                                             "source", "graded"[, "reason"]} lines; "config" (and the flags --harness,
//                                             --extraction,
//                                             --boxed-match-priority, --float-rounding, --numeric-precision,
//                                             --strict, --allow-set-relation-comp) take Math-Verify's harness settings
//   grpo score --rewards a,b [--config F]     {"completion", ground-truth fields...} lines → the same objects plus
//                                             "rewards": {name: value|null} and "reward": weighted total|null
//                                             (ROLL code rows work with code_tests: test_cases, case_type, ...;
//                                             --threads N scores on N executor threads)
//   grpo tokenize --tokenizer PATH [--chat]   {"text"} (or {"messages"} with --chat, and Hugging Face's optional
//                                             "add_generation_prompt" and "enable_thinking") lines → {"ids"} lines;
//                                             PATH a model directory, a .gguf file, or a tokenizer.json (its
//                                             directory's tokenizer_config.json is read too when there is one)
//   grpo generate --model DIR --prompt TEXT   prints a completion (tokenizer files in DIR; DIR may be a .gguf file)
//   grpo logprobs --model DIR                 {"ids"} lines → {"logprobs"} (per token, tokens 1..n-1)
//   grpo convert --gguf F --out DIR           writes a GGUF file's model and tokenizer as a Hugging Face directory
//                                             (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)
//                                             [--dtype float32|bfloat16|float16]
//   grpo train [options]                      a GRPO run: the built-in tiny task, or --model DIR --data FILE (or a
//                                             --config with domains); every option of train/run_settings.hpp
//                                             (grpo train --help lists them), as examples/r1_zero takes them
//   grpo train-rm --model DIR --pairs F --out D   a reward model trained on preference pairs (or --task tiny: pairs
//                                             made by the tiny task's verifier), written for the "reward_model"
//                                             reward (tools/train_rm.hpp)
// Malformed input lines are reported on stderr with their line number; every line still gets an output line (an
// {"error": ...} object for bad ones), so outputs stay aligned with inputs. Exit status 1 if any line was bad.
#include "train_rm.hpp"

#include <grpo/grpo.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

/// Reads stdin line by line, calling handle(line, number) for each non-blank line; returns the number of bad lines
/// (handle returns false for a bad one).
template <typename HandlerType>
int for_each_line(HandlerType&& handle) {
  std::string line;
  int bad = 0, number = 0;
  while (std::getline(std::cin, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!handle(line, number)) ++bad;
  }
  return bad;
}

void report_bad_line(int number, std::string_view message) {
  std::cerr << fmt::format("stdin:{}: {}\n", number, message);
  std::string out = "{\"line\":" + std::to_string(number) + ",\"error\":";
  grpo::append_json_quoted(out, message);
  std::cout << out << "}\n";
}

std::string json_number(std::optional<double> value) {
  return value && std::isfinite(*value) ? fmt::format("{}", *value) : "null";
}

/// A --jsonl line's "config" (Math-Verify's harness settings, grpo::math::read_harness_settings) over the flags'.
grpo::math::HarnessSettings line_settings(const std::string& line, const grpo::math::HarnessSettings& flags) {
  simdjson::dom::parser parser;
  simdjson::dom::element element;
  if (parser.parse(line).get(element) || element["config"].get(element)) return flags;
  return grpo::math::read_harness_settings(simdjson::minify(element), flags);
}

int run_verify(const std::string& gold, const std::string& pred, bool jsonl,
               const grpo::math::HarnessSettings& flags) {
  const auto options = grpo::math::harness_options(flags);  // a bad flag is an error before any line
  if (!jsonl) {
    const grpo::math::Grade grade = grpo::math::grade(gold, pred, options);
    std::cout << (grade.verdict == grpo::math::Verdict::equal ? "true" : "false") << "\n";
    if (options.grading == grpo::math::Grading::final_answer) {  // what was graded, for the person reading
      std::cerr << fmt::format("graded {}: {}{}\n", grpo::math::to_string(grade.source), grpo::json_quoted(grade.graded),
                               grade.reason.empty() ? "" : " (" + grade.reason + ")");
    }
    return 0;
  }
  const int bad = for_each_line([&](const std::string& line, int number) {
    try {
      auto row = grpo::rewards::Row::from_json(line);
      auto g = row.text("gold"), p = row.text("pred");
      if (!g || !p) throw grpo::ParseError("needs string fields \"gold\" and \"pred\"");
      const grpo::math::Grade grade = grpo::math::grade(*g, *p, grpo::math::harness_options(line_settings(line, flags)));
      std::cout << fmt::format("{{\"equivalent\":{},\"verdict\":\"{}\",\"source\":\"{}\",\"graded\":{}{}}}\n",
                               grade.verdict == grpo::math::Verdict::equal, grpo::math::to_string(grade.verdict),
                               grpo::math::to_string(grade.source), grpo::json_quoted(grade.graded),
                               grade.reason.empty() ? "" : ",\"reason\":" + grpo::json_quoted(grade.reason));
      return true;
    } catch (const grpo::Error& e) {
      report_bad_line(number, e.what());
      return false;
    }
  });
  return bad ? 1 : 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  GRPO_CHECK(in.good(), "cannot open {}", path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int run_score(const std::string& names, const std::string& config_path, std::size_t threads) {
  std::string config;
  if (!config_path.empty()) {
    config = read_file(config_path);
  } else {
    std::vector<std::string> entries;
    std::stringstream list(names);
    for (std::string name; std::getline(list, name, ',');) {
      if (!name.empty()) entries.push_back("{\"name\":" + grpo::json_quoted(name) + "}");
    }
    GRPO_CHECK_CONFIG(!entries.empty(), "grpo score: give --rewards name,... or --config FILE");
    config = "[" + fmt::format("{}", fmt::join(entries, ",")) + "]";
    if (threads > 0) config = fmt::format(R"({{"rewards": {}, "executor": {{"threads": {}}}}})", config, threads);
  }
  auto rewards = grpo::rewards::RewardSet::from_config(config);

  struct Input {
    int number;
    std::string line, error;
  };
  std::vector<Input> inputs;
  std::vector<grpo::rewards::Completion> batch;
  for_each_line([&](const std::string& line, int number) {
    Input input{number, line, {}};
    try {
      auto row = std::make_shared<grpo::rewards::Row>(grpo::rewards::Row::from_json(line));
      auto completion = row->text("completion");
      if (!completion) throw grpo::ParseError("needs a string field \"completion\"");
      grpo::rewards::Completion c;
      c.text = *completion;
      c.prompt = row->text("prompt").value_or("");
      c.group = batch.size();
      c.row = row;
      batch.push_back(std::move(c));
    } catch (const grpo::Error& e) {
      input.error = e.what();
    }
    inputs.push_back(std::move(input));
    return true;
  });
  const auto scores = rewards.score(batch);
  int bad = 0;
  size_t scored = 0;
  for (const auto& input : inputs) {
    if (!input.error.empty()) {
      report_bad_line(input.number, input.error);
      ++bad;
      continue;
    }
    std::string added = "\"rewards\":{";
    for (size_t k = 0; k < scores.names.size(); ++k) {
      if (k) added += ",";
      grpo::append_json_quoted(added, scores.names[k]);
      const auto& v = scores.values[k][scored];
      added += ":" + json_number(v ? std::optional<double>(*v) : std::nullopt);
    }
    const auto& total = scores.total[scored];
    added += "},\"reward\":" + json_number(total ? std::optional<double>(*total) : std::nullopt);
    ++scored;
    // The input is a valid JSON object: insert the new fields before its closing brace.
    std::string line = input.line;
    const auto close = line.find_last_of('}');
    const auto open = line.find('{');
    const bool empty = line.find_first_not_of(" \t\r\n", open + 1) == close;
    std::cout << line.substr(0, close) << (empty ? "" : ",") << added << "}\n";
  }
  return bad ? 1 : 0;
}

/// The chat messages of a {"messages": [{"role", "content"}, ...]} line (text::parse_chat_messages).
std::vector<grpo::text::ChatMessage> parse_messages(const std::string& line) {
  simdjson::dom::parser parser;
  simdjson::dom::array list;
  if (parser.parse(line)["messages"].get_array().get(list)) {
    throw grpo::ParseError("needs an array field \"messages\"");
  }
  auto messages = grpo::text::parse_chat_messages(simdjson::minify(list), "messages");
  for (auto& m : messages) m.reasoning_content.reset();  // rendered as a prompt, as the data sets do
  return messages;
}

/// A model directory, or a tokenizer.json: with the chat template and special tokens of the tokenizer_config.json
/// beside it when there is one (as Hugging Face's AutoTokenizer reads the directory).
grpo::text::Tokenizer load_tokenizer(const std::string& path) {
  const std::filesystem::path file(path);
  if (std::filesystem::is_directory(file) || file.extension() == ".gguf") {
    return grpo::text::Tokenizer::from_pretrained(file);
  }
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  if (file.filename() == "tokenizer.json" && std::filesystem::exists(dir / "tokenizer_config.json")) {
    return grpo::text::Tokenizer::from_pretrained(dir);
  }
  return grpo::text::Tokenizer::from_file(file);
}

/// Hugging Face's apply_chat_template switches a line may carry: add_generation_prompt and enable_thinking (booleans).
grpo::text::ChatRenderOptions render_options(const std::string& line) {
  simdjson::dom::parser parser;
  simdjson::dom::object object;
  grpo::text::ChatRenderOptions options;
  if (parser.parse(line).get_object().get(object)) return options;
  for (const char* key : {"add_generation_prompt", "enable_thinking"}) {
    simdjson::dom::element value;
    if (object.at_key(key).get(value) || value.is_null()) continue;
    bool flag = false;
    if (value.get_bool().get(flag)) throw grpo::ParseError(fmt::format("field \"{}\" should be true or false", key));
    if (std::string_view(key) == "add_generation_prompt") options.add_generation_prompt = flag;
    else options.enable_thinking = flag;
  }
  return options;
}

int run_tokenize(const std::string& path, bool chat) {
  const auto tokenizer = load_tokenizer(path);
  const int bad = for_each_line([&](const std::string& line, int number) {
    try {
      std::vector<int32_t> ids;
      if (chat) {
        ids = tokenizer.encode_chat(parse_messages(line), render_options(line));
      } else {
        auto text = grpo::rewards::Row::from_json(line).text("text");
        if (!text) throw grpo::ParseError("needs a string field \"text\"");
        ids = tokenizer.encode(*text);
      }
      std::cout << fmt::format("{{\"ids\":[{}]}}\n", fmt::join(ids, ","));
      return true;
    } catch (const grpo::Error& e) {
      report_bad_line(number, e.what());
      return false;
    }
  });
  return bad ? 1 : 0;
}

struct GenerateArgs {
  std::string model, prompt;
  bool chat = false;
  grpo::SamplerOptions sampler;
};

int run_generate(GenerateArgs args) {
  auto model = grpo::models::from_pretrained(args.model, torch::kFloat32);
  const auto tokenizer = grpo::text::Tokenizer::from_pretrained(args.model);
  std::vector<int32_t> ids = args.chat ? tokenizer.encode_chat(std::vector<grpo::text::ChatMessage>{
                                             {"user", args.prompt, std::nullopt}},
                                                               {.add_generation_prompt = true})
                                       : tokenizer.encode(args.prompt);
  if (args.sampler.eos_token_ids.empty()) args.sampler.eos_token_ids = model->config().eos_token_ids;
  grpo::Sampler sampler(args.sampler);
  auto rollout = sampler.generate(model, {std::vector<int64_t>(ids.begin(), ids.end())}, 1);
  std::vector<int32_t> completion;
  for (int64_t t = 0; t < rollout.completion_length(); ++t) {
    if (rollout.completion_mask[0][t].item<int64_t>() == 0) break;
    completion.push_back(static_cast<int32_t>(rollout.completion_ids[0][t].item<int64_t>()));
  }
  std::cout << tokenizer.decode(completion, {.skip_special_tokens = true, .skip_unknown_ids = true}) << "\n";
  return 0;
}

int run_logprobs(const std::string& model_dir) {
  auto model = grpo::models::from_pretrained(model_dir, torch::kFloat32);
  torch::NoGradGuard no_grad;
  const int bad = for_each_line([&](const std::string& line, int number) {
    try {
      simdjson::dom::parser parser;
      simdjson::dom::array list;
      if (parser.parse(line)["ids"].get_array().get(list)) throw grpo::ParseError("needs an array field \"ids\"");
      std::vector<int64_t> ids;
      for (auto v : list) {
        int64_t id = 0;
        if (v.get_int64().get(id)) throw grpo::ParseError("\"ids\" must hold integers");
        ids.push_back(id);
      }
      if (ids.size() < 2) throw grpo::ParseError("\"ids\" needs at least two tokens");
      auto input = torch::tensor(ids, torch::kInt64).unsqueeze(0);
      auto logits = model->forward(input).narrow(1, 0, input.size(1) - 1);
      auto lp = grpo::token_log_probs(logits, input.narrow(1, 1, input.size(1) - 1)).log_probs[0];
      std::vector<double> values(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
      std::cout << fmt::format("{{\"logprobs\":[{}]}}\n", fmt::join(values, ","));
      return true;
    } catch (const grpo::Error& e) {
      report_bad_line(number, e.what());
      return false;
    }
  });
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // `grpo train` reads the library's run option table (train/run_settings.hpp), not CLI11's.
  if (argc >= 2 && std::string_view(argv[1]) == "train") {
    grpo::use_passive_omp_wait_policy(argv);
    return grpo::train::run_training_command(std::vector<std::string>(argv + 2, argv + argc), "grpo train");
  }
  CLI::App app{"grpo: verify math answers, score completions, tokenize, generate, compute log-probs, convert GGUF files "
               "and train reward models"};
  app.require_subcommand(1);

  std::string gold, pred;
  bool jsonl = false;
  auto* verify = app.add_subcommand("verify", "Is the predicted answer equivalent to the gold one?");
  verify->add_option("--gold", gold, "gold answer (LaTeX or plain)");
  verify->add_option("--pred", pred, "predicted answer or completion");
  verify->add_flag("--jsonl", jsonl, "read {\"gold\", \"pred\"[, \"config\"]} lines on stdin");
  grpo::math::HarnessSettings harness;
  verify->add_option("--harness", harness.harness,
                     "final_answer (default: the completion's final answer, as the accuracy reward grades), "
                     "parse_verify_defaults (Math-Verify's verify(parse(gold), parse(pred)) on the whole texts) or "
                     "compare_strings (Math-Verify's test harness: boxed first)");
  verify->add_option("--extraction", harness.extraction, "targets on both sides: latex,expr")->delimiter(',');
  verify->add_option("--boxed-match-priority", harness.boxed_match_priority, "priority of \\boxed (0 = first, -1 = off)");
  verify->add_option("--float-rounding", harness.float_rounding, "decimal places floats are rounded to (6)");
  verify->add_option("--numeric-precision", harness.numeric_precision, "significant digits compared (15)");
  verify->add_option("--strict", harness.strict, "true: symbols must match (Math-Verify strict)");
  verify->add_option("--allow-set-relation-comp", harness.allow_set_relation_comp,
                     "true: a set may equal a relation (x < 3 vs (-oo, 3))");

  std::string reward_names, config;
  auto* score = app.add_subcommand("score", "Score completions read as JSON lines on stdin");
  score->add_option("--rewards", reward_names, "comma-separated reward names (e.g. accuracy,format)");
  score->add_option("--config", config, "a JSON file: [{\"name\": ..., \"weight\": ..., options...}]");
  std::size_t score_threads = 0;
  score->add_option("--threads", score_threads, "with --rewards: executor threads (0 = score in the calling thread)");

  std::string tokenizer_path;
  bool chat = false;
  auto* tokenize = app.add_subcommand("tokenize", "Token ids of JSON lines on stdin");
  tokenize->add_option("--tokenizer", tokenizer_path, "tokenizer.json or a directory holding it")->required();
  tokenize->add_flag("--chat", chat, "lines hold {\"messages\": [...]}, rendered with the chat template");

  GenerateArgs gen;
  auto* generate = app.add_subcommand("generate", "Sample a completion from a Hugging Face checkpoint directory");
  generate->add_option("--model", gen.model, "checkpoint directory (config.json, safetensors, tokenizer)")->required();
  generate->add_option("--prompt", gen.prompt, "prompt text")->required();
  generate->add_flag("--chat", gen.chat, "wrap the prompt as a user message with the chat template");
  generate->add_option("--max-new-tokens", gen.sampler.max_new_tokens, "default 256");
  generate->add_option("--temperature", gen.sampler.temperature, "0 = greedy; default 1");
  generate->add_option("--top-k", gen.sampler.top_k, "0 = off");
  generate->add_option("--top-p", gen.sampler.top_p, "1 = off");
  generate->add_option("--min-p", gen.sampler.min_p, "0 = off");
  generate->add_option("--seed", gen.sampler.seed, "sampling seed");

  std::string model_dir;
  // Listed for --help; main() hands `grpo train ...` to the library before CLI11 parses.
  app.add_subcommand("train", "A GRPO training run (grpo train --help lists its options)");
  auto* logprobs = app.add_subcommand("logprobs", "Per-token log-probs of {\"ids\"} lines on stdin");
  logprobs->add_option("--model", model_dir, "checkpoint directory")->required();

  std::string gguf_path, out_dir, convert_dtype = "float32";
  auto* convert = app.add_subcommand("convert", "Write a GGUF file's model and tokenizer as a Hugging Face directory");
  convert->add_option("--gguf", gguf_path, "the .gguf file (llama, qwen2 or qwen3; byte-level BPE tokenizer)")
      ->required();
  convert->add_option("--out", out_dir, "the directory to write (created when missing)")->required();
  convert->add_option("--dtype", convert_dtype, "weights' dtype in model.safetensors: float32 (default), bfloat16, "
                                                "float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));

  TrainRmArgs train_rm;
  auto* train_rm_command = add_train_rm_command(app, train_rm);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*verify) {
      if (!jsonl && (verify->count("--gold") == 0 || verify->count("--pred") == 0)) {
        throw grpo::ConfigError("grpo verify: give --gold and --pred, or --jsonl");
      }
      return run_verify(gold, pred, jsonl, harness);
    }
    if (*score) return run_score(reward_names, config, score_threads);
    if (*tokenize) return run_tokenize(tokenizer_path, chat);
    if (*generate) return run_generate(gen);
    if (*logprobs) return run_logprobs(model_dir);
    if (*train_rm_command) return run_train_rm(train_rm, *train_rm_command);
    if (*convert) {
      const torch::ScalarType dtype = convert_dtype == "bfloat16"  ? torch::kBFloat16
                                      : convert_dtype == "float16" ? torch::kFloat16
                                                                   : torch::kFloat32;
      grpo::models::convert_gguf(gguf_path, out_dir, dtype);
      std::cerr << fmt::format("grpo convert: wrote {} ({})\n", out_dir, convert_dtype);
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "grpo: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
