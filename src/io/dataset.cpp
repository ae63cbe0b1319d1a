// SPDX-License-Identifier: Apache-2.0
// Dataset loading. Rows are parsed by rewards::Row::from_json (one row parser in the library); simdjson is used here
// only to split a JSON array file into its objects and to read ROLL's chat lists, and never leaves this file.
#include <grpo/core/error.hpp>
#include <grpo/core/permutation.hpp>
#include <grpo/io/dataset.hpp>
#include <grpo/io/read_file.hpp>

#include <simdjson.h>

#include <algorithm>
#include <utility>

namespace grpo::io {
namespace {

std::string_view trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// A failure to turn one row into an example; the caller prefixes the row's location.
struct RowError {
  std::string message;
};

[[noreturn]] void row_error(std::string message) { throw RowError{std::move(message)}; }

std::string required_text(const rewards::Row& row, std::string_view field) {
  const rewards::FieldValue* value = row.find(field);
  if (value == nullptr) row_error(fmt::format("missing field '{}'", field));
  std::optional<std::string> text = row.text(field);
  if (!text) row_error(fmt::format("field '{}' should be text or a number, got a list", field));
  return std::move(*text);
}

// A chat list [{"role": ..., "content": ...}, ...] given as JSON text.
std::vector<text::ChatMessage> parse_chat(std::string_view json, std::string_view field) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (const auto error = parser.parse(simdjson::padded_string(json)).get(root)) {
    row_error(fmt::format("field '{}' is not a JSON chat list ({})", field, simdjson::error_message(error)));
  }
  simdjson::dom::array list;
  if (root.get_array().get(list)) row_error(fmt::format("field '{}' should be a JSON list of messages", field));
  std::vector<text::ChatMessage> messages;
  for (simdjson::dom::element item : list) {
    std::string_view role;
    std::string_view content;
    if (item["role"].get_string().get(role) || item["content"].get_string().get(content)) {
      row_error(fmt::format("field '{}': message {} should be an object with string 'role' and 'content'", field,
                            messages.size()));
    }
    messages.push_back(text::ChatMessage{std::string(role), std::string(content), std::nullopt});
  }
  if (messages.empty()) row_error(fmt::format("field '{}' holds no messages", field));
  return messages;
}

std::vector<text::ChatMessage> text_prompt(std::string user_text, const DatasetOptions& options) {
  std::vector<text::ChatMessage> messages;
  if (!options.system_prompt.empty()) messages.push_back({"system", options.system_prompt, std::nullopt});
  messages.push_back({"user", std::move(user_text), std::nullopt});
  return messages;
}

DatasetFormat detect_format(const rewards::Row& row) {
  if (row.contains("messages") && row.contains("ground_truth")) return DatasetFormat::roll;
  if (row.contains("problem") && row.contains("solution")) return DatasetFormat::trl;
  if (row.contains("question") && row.contains("answer")) return DatasetFormat::gsm8k;
  std::string fields;
  for (const auto& [key, value] : row.fields()) fields += (fields.empty() ? "" : ", ") + key;
  row_error(fmt::format(
      "cannot tell the dataset format from the fields ({}); set DatasetOptions::format (fields, with prompt_field "
      "and answer_field)",
      fields));
}

Example make_example(rewards::Row row, DatasetFormat format, const DatasetOptions& options) {
  Example example;
  switch (format) {
    case DatasetFormat::roll:
      example.prompt = parse_chat(required_text(row, "messages"), "messages");
      example.ground_truth = required_text(row, "ground_truth");
      break;
    case DatasetFormat::trl:
      example.prompt = text_prompt(required_text(row, "problem"), options);
      example.ground_truth = required_text(row, "solution");
      break;
    case DatasetFormat::gsm8k: {
      example.prompt = text_prompt(required_text(row, "question"), options);
      std::optional<std::string> answer = gsm8k_final_answer(required_text(row, "answer"));
      if (!answer) row_error("field 'answer' has no final answer after '####'");
      example.ground_truth = std::move(*answer);
      break;
    }
    case DatasetFormat::fields: {
      std::string prompt = required_text(row, options.prompt_field);
      example.prompt = options.prompt_is_chat ? parse_chat(prompt, options.prompt_field)
                                              : text_prompt(std::move(prompt), options);
      example.ground_truth = required_text(row, options.answer_field);
      break;
    }
    case DatasetFormat::detect:
      break;  // resolved by the caller before the first row
  }
  example.row = std::make_shared<const rewards::Row>(std::move(row));
  return example;
}

// Turns rows (JSON object text + location) into examples under the options' bad-row policy.
class Loader {
 public:
  explicit Loader(const DatasetOptions& options) : options_(options), format_(options.format) {
    if (format_ == DatasetFormat::fields) {
      GRPO_CHECK_CONFIG(!options.prompt_field.empty() && !options.answer_field.empty(),
                        "DatasetOptions: format 'fields' needs prompt_field and answer_field (got '{}' and '{}')",
                        options.prompt_field, options.answer_field);
    }
  }

  void add(std::string_view json_object, const std::string& location) {
    try {
      rewards::Row row;
      try {
        row = rewards::Row::from_json(json_object);
      } catch (const ParseError& error) {
        row_error(error.what());
      }
      if (format_ == DatasetFormat::detect) format_ = detect_format(row);
      Example example = make_example(std::move(row), format_, options_);
      example.source = location;
      examples_.push_back(std::move(example));
    } catch (const RowError& error) {
      std::string message = fmt::format("{}: {}", location, error.message);
      if (options_.on_bad_row == BadRowPolicy::stop) throw ParseError(message);
      skip_reasons_.push_back(std::move(message));
    }
  }

  Dataset finish() && {
    const std::size_t skipped = skip_reasons_.size();
    return Dataset(std::move(examples_), skipped, std::move(skip_reasons_));
  }

 private:
  const DatasetOptions& options_;
  DatasetFormat format_;
  std::vector<Example> examples_;
  std::vector<std::string> skip_reasons_;
};

void parse_json_array(std::string_view text, std::string_view source, Loader& loader) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (const auto error = parser.parse(simdjson::padded_string(text)).get(root)) {
    ::grpo::detail::throw_formatted<ParseError>("{}: invalid JSON array ({})", source,
                                                simdjson::error_message(error));
  }
  simdjson::dom::array array;
  if (root.get_array().get(array)) {
    ::grpo::detail::throw_formatted<ParseError>("{}: expected a JSON array of rows", source);
  }
  std::size_t index = 0;
  for (simdjson::dom::element item : array) {
    loader.add(simdjson::minify(item), fmt::format("{}[{}]", source, index));
    ++index;
  }
}

}  // namespace

std::vector<std::vector<text::ChatMessage>> ExampleBatch::prompts() const {
  std::vector<std::vector<text::ChatMessage>> out;
  out.reserve(examples.size());
  for (const Example& example : examples) out.push_back(example.prompt);
  return out;
}

std::vector<std::shared_ptr<const rewards::Row>> ExampleBatch::rows() const {
  std::vector<std::shared_ptr<const rewards::Row>> out;
  out.reserve(examples.size());
  for (const Example& example : examples) out.push_back(example.row);
  return out;
}

Dataset::Dataset(std::vector<Example> examples, std::size_t skipped_rows, std::vector<std::string> skip_reasons)
    : examples_(std::move(examples)), skipped_rows_(skipped_rows), skip_reasons_(std::move(skip_reasons)) {}

Dataset Dataset::load(const std::filesystem::path& path, const DatasetOptions& options) {
  return parse(read_file(path), path.string(), options);
}

Dataset Dataset::parse(std::string_view text, std::string_view source, const DatasetOptions& options) {
  Loader loader(options);
  if (trim(text).starts_with('[')) {
    parse_json_array(text, source, loader);
  } else {
    std::size_t line_number = 0;
    while (!text.empty()) {
      ++line_number;
      const std::size_t end = text.find('\n');
      const std::string_view line = trim(text.substr(0, end));
      text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
      if (!line.empty()) loader.add(line, fmt::format("{}:{}", source, line_number));
    }
  }
  return std::move(loader).finish();
}

Dataset Dataset::shuffled(std::uint64_t seed) const {
  std::vector<Example> order;
  order.reserve(examples_.size());
  for (const std::size_t index : seeded_permutation(examples_.size(), seed)) order.push_back(examples_[index]);
  return Dataset(std::move(order), skipped_rows_, skip_reasons_);
}

DatasetSplit Dataset::split(std::size_t held_out, std::uint64_t seed) const {
  GRPO_CHECK_CONFIG(held_out <= size(), "split: held_out = {} is larger than the data set ({} examples)", held_out,
                    size());
  const Dataset all = shuffled(seed);
  const auto middle = all.examples_.begin() + static_cast<std::ptrdiff_t>(held_out);
  return DatasetSplit{Dataset(std::vector<Example>(middle, all.examples_.end())),
                      Dataset(std::vector<Example>(all.examples_.begin(), middle))};
}

std::vector<ExampleBatch> Dataset::batches(std::size_t prompts_per_batch, bool drop_last) const {
  GRPO_CHECK_CONFIG(prompts_per_batch > 0, "batches: prompts_per_batch must be positive, got 0");
  std::vector<ExampleBatch> out;
  for (std::size_t begin = 0; begin < size(); begin += prompts_per_batch) {
    const std::size_t end = std::min(size(), begin + prompts_per_batch);
    if (drop_last && end - begin < prompts_per_batch) break;
    out.push_back(ExampleBatch{std::vector<Example>(examples_.begin() + static_cast<std::ptrdiff_t>(begin),
                                                    examples_.begin() + static_cast<std::ptrdiff_t>(end))});
  }
  return out;
}

std::optional<std::string> gsm8k_final_answer(std::string_view answer) {
  const std::size_t marker = answer.rfind("####");
  if (marker == std::string_view::npos) return std::nullopt;
  std::string out;
  for (char c : trim(answer.substr(marker + 4))) {
    if (c != ',') out.push_back(c);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace grpo::io
