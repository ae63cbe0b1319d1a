// SPDX-License-Identifier: Apache-2.0
// Dataset loading. Rows are parsed by io::Row::from_json (one row parser in the library); simdjson is used here
// only to split a JSON array file into its objects, to read ROLL's chat and criteria lists, and to tell a ground-truth
// object from a string that starts with '{' (Row keeps both as text); it never leaves this file.
#include <grpo/core/error.hpp>
#include <grpo/core/permutation.hpp>
#include <grpo/io/dataset.hpp>
#include <grpo/io/json_lines.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/io/code_tests.hpp>
#include <grpo/text/chat_messages.hpp>

#include <fmt/ranges.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <utility>

namespace grpo::io {
namespace {

// A failure to turn one row into an example; the caller prefixes the row's location. `skip`: the row is left out
// whatever on_bad_row says (UnknownTag::skip).
struct RowError {
  std::string message;
  bool skip = false;
};

[[noreturn]] void row_error(std::string message) { throw RowError{std::move(message)}; }

std::string required_text(const Row& row, std::string_view field) {
  const FieldValue* value = row.find(field);
  if (value == nullptr) row_error(fmt::format("missing field '{}'", field));
  std::optional<std::string> text = row.text(field);
  if (!text) row_error(fmt::format("field '{}' should be text or a number, got a list", field));
  return std::move(*text);
}

// A chat list [{"role": ..., "content": ...}, ...] given as JSON text (text::parse_chat_messages).
std::vector<text::ChatMessage> parse_chat(std::string_view json, std::string_view field) {
  std::vector<text::ChatMessage> messages;
  try {
    messages = text::parse_chat_messages(json, field);
  } catch (const ParseError& e) {
    row_error(e.what());
  }
  if (messages.empty()) row_error(fmt::format("field '{}' holds no messages", field));
  for (auto& m : messages) m.reasoning_content.reset();  // a prompt is rendered without earlier turns' reasoning
  return messages;
}

std::vector<text::ChatMessage> text_prompt(std::string user_text, const DatasetOptions& options) {
  std::vector<text::ChatMessage> messages;
  if (!options.system_prompt.empty()) messages.push_back({"system", options.system_prompt, std::nullopt});
  messages.push_back({"user", std::move(user_text), std::nullopt});
  return messages;
}

DatasetFormat detect_format(const Row& row, bool domains) {
  const bool prompt = row.contains("messages") || row.contains("prompt");
  if (prompt && (row.contains("ground_truth") || (domains && (row.contains("tag") || row.contains("domain"))))) {
    return DatasetFormat::roll;
  }
  if (row.contains("problem") && row.contains("solution")) return DatasetFormat::trl;
  if (row.contains("question") && row.contains("answer")) return DatasetFormat::gsm8k;
  std::string fields;
  for (const auto& [key, value] : row.fields()) fields += (fields.empty() ? "" : ", ") + key;
  row_error(fmt::format(
      "cannot tell the dataset format from the fields ({}); name the format (r1_zero: --data-format fields with "
      "--prompt-field and --answer-field; DatasetOptions::format)",
      fields));
}

// The tags a domain claims: its own, or its name.
const std::vector<std::string>& claimed_tags(const DatasetDomain& domain, std::vector<std::string>& scratch) {
  if (!domain.tags.empty()) return domain.tags;
  scratch = {domain.name};
  return scratch;
}

// "math (tags deepmath, aime), code" for error messages.
std::string configured_domains(const DatasetOptions& options) {
  std::string names;
  for (const DatasetDomain& d : options.domains) {
    names += (names.empty() ? "" : ", ") + d.name;
    if (!d.tags.empty() && d.tags != std::vector<std::string>{d.name}) {
      names += fmt::format(" (tags {})", fmt::join(d.tags, ", "));
    }
  }
  return names;
}

const DatasetDomain* domain_named(const DatasetOptions& options, std::string_view name) {
  for (const DatasetDomain& d : options.domains) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

// The number in a difficulty field: a JSON number, or a string holding one (DeepMath writes "4.5"); nullopt for a
// blank string. Anything else is a RowError when `strict`, else nullopt.
std::optional<double> difficulty_of(const Row& row, bool strict) {
  const FieldValue* value = row.find("difficulty");
  if (value == nullptr) return std::nullopt;
  if (const auto* number = std::get_if<double>(value)) return *number;
  if (const auto* text = std::get_if<std::string>(value)) {
    const std::string_view digits = trim_ascii_space(*text);
    if (digits.empty()) return std::nullopt;
    double parsed = 0.0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
    if (error == std::errc() && end == digits.data() + digits.size() && std::isfinite(parsed)) return parsed;
    if (strict) row_error(fmt::format("field 'difficulty' should be a number, got \"{}\"", digits.substr(0, 40)));
    return std::nullopt;
  }
  if (strict) row_error("field 'difficulty' should be a number, got a list");
  return std::nullopt;
}

// A ground_truth given as a JSON object {"steps": [...], "final_answer": ...} becomes its final answer's text, and the
// steps go to `ground_truth_steps`. Row::from_json keeps an object as its JSON text, as it keeps a string such as the
// set "{1, 2}", so the JSON type is read from the source row, and only when the text could be an object.
void normalise_ground_truth(Row& row, std::string_view json_object) {
  const auto* text = std::get_if<std::string>(row.find("ground_truth"));
  if (text == nullptr || !trim_ascii_space(*text).starts_with('{')) return;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::element truth;
  if (parser.parse(simdjson::padded_string(json_object)).get(root) || root["ground_truth"].get(truth)) return;
  if (truth.type() != simdjson::dom::element_type::OBJECT) return;  // a string that starts with '{'

  simdjson::dom::element final_answer;
  if (truth["final_answer"].get(final_answer)) {
    row_error("field 'ground_truth' is an object without 'final_answer' (expected {\"steps\": [...], "
              "\"final_answer\": ...})");
  }
  std::string answer;
  if (std::string_view string; !final_answer.get_string().get(string)) {
    answer = std::string(trim_ascii_space(string));
  } else if (double number = 0.0; final_answer.is_number() && !final_answer.get_double().get(number)) {
    answer = fmt::format("{}", number);  // the shortest text, as Row::text writes numbers
  } else {
    row_error("field 'ground_truth': 'final_answer' should be text or a number");
  }
  if (answer.empty()) row_error("field 'ground_truth': 'final_answer' is empty");

  std::vector<std::string> steps;
  simdjson::dom::element steps_element;
  const bool has_steps = !truth["steps"].get(steps_element);
  if (has_steps) {
    simdjson::dom::array list;
    if (steps_element.get_array().get(list)) row_error("field 'ground_truth': 'steps' should be a list of strings");
    for (simdjson::dom::element item : list) {
      std::string_view step;
      if (item.get_string().get(step)) {
        row_error(fmt::format("field 'ground_truth': step {} should be a string", steps.size()));
      }
      steps.emplace_back(step);
    }
  }
  row.set("ground_truth", std::move(answer));
  if (has_steps) row.set("ground_truth_steps", std::move(steps));
}

// A list of strings, given as a list or as JSON text holding one (ROLL string-encodes its lists).
std::optional<std::vector<std::string>> string_list(const FieldValue& value) {
  if (const auto* list = std::get_if<std::vector<std::string>>(&value)) return *list;
  const auto* text = std::get_if<std::string>(&value);
  if (text == nullptr || !trim_ascii_space(*text).starts_with('[')) return std::nullopt;
  simdjson::dom::parser parser;
  simdjson::dom::array array;
  if (parser.parse(simdjson::padded_string(*text)).get_array().get(array)) return std::nullopt;
  std::vector<std::string> out;
  for (simdjson::dom::element item : array) {
    std::string_view string;
    if (item.get_string().get(string)) return std::nullopt;
    out.emplace_back(string);
  }
  return out;
}

// The row's domain: its `domain` field when that names a configured domain (ROLL prefers it over the tag), else the
// domain claiming its tag; a row with neither goes by options.unknown_tag. Sets `tag` (for later errors) once the
// domain is known.
const DatasetDomain& row_domain(const Row& row, const DatasetOptions& options, std::string& tag) {
  const std::optional<std::string> named = row.text("domain");
  if (named && !named->empty()) {
    if (const DatasetDomain* d = domain_named(options, *named)) {
      tag = row.text("tag").value_or(*named);
      return *d;
    }
  }
  const std::string also = named && !named->empty() ? fmt::format(" (nor is its field 'domain', '{}')", *named) : "";
  std::string problem;
  if (!row.contains("tag")) {
    problem = named && !named->empty() ? fmt::format("field 'domain': '{}' is not a configured domain, and the row "
                                                     "has no 'tag'",
                                                     *named)
                                       : "missing field 'tag'";
  } else {
    const std::optional<std::string> text = row.text("tag");
    if (!text) {
      row_error(fmt::format("field 'tag' should be text, got a list (configured: {})", configured_domains(options)));
    }
    std::vector<std::string> scratch;
    for (const DatasetDomain& d : options.domains) {
      const auto& tags = claimed_tags(d, scratch);
      if (std::find(tags.begin(), tags.end(), *text) != tags.end()) {
        tag = *text;  // from here on, errors name the tag
        return d;
      }
    }
    problem = fmt::format("tag '{}' is not a configured domain{}", *text, also);
  }
  switch (options.unknown_tag) {
    case UnknownTag::error:
      break;
    case UnknownTag::skip:
      throw RowError{fmt::format("{} (skipped: unknown_tag skip)", problem), /*skip=*/true};
    case UnknownTag::to_domain:
      tag = row.text("tag").value_or("");
      return *domain_named(options, options.unknown_tag_domain);  // checked by the Loader
  }
  row_error(fmt::format("{} (configured: {}; unknown_tag can skip such rows or send them to a domain)", problem,
                        configured_domains(options)));
}

// Checks that a row carries the fields its domain kind needs (DomainKind) and returns its ground truth ("" when the
// kind does not need one and the row has none). The caller prefixes the tag to errors.
std::string domain_ground_truth(Row& row, DomainKind kind) {
  const auto optional_truth = [&row]() -> std::string {
    if (!row.contains("ground_truth")) return "";
    std::optional<std::string> text = row.text("ground_truth");
    if (!text) {
      row_error("field 'ground_truth' should be text, a number or {\"steps\", \"final_answer\"}, got a list");
    }
    return std::move(*text);
  };
  switch (kind) {
    case DomainKind::math: {
      if (!row.contains("ground_truth")) row_error("field 'ground_truth' is missing (math rows need a gold answer)");
      std::string truth = optional_truth();
      if (trim_ascii_space(truth).empty()) row_error("field 'ground_truth' is empty");
      return truth;
    }
    case DomainKind::code:
      if (!row.contains("test_cases")) row_error("field 'test_cases' is missing (code rows need test cases)");
      if (!parse_code_tests(row)) {
        row_error(fmt::format(
            "field 'test_cases' cannot be read as test cases (case_type '{}'): expected a list, or a JSON string "
            "holding one, of {{\"input\", \"expected_output\"}} objects or assert code, with a case_type that "
            "the code_tests reward runs",
            row.text("case_type").value_or("")));
      }
      return optional_truth();
    case DomainKind::general: {
      const FieldValue* criteria = row.find("evaluation_criteria");
      if (criteria == nullptr) {  // ROLL's judge rows: the reference answer alone
        if (!row.contains("ground_truth")) {
          row_error("general rows need 'ground_truth' (the reference answer the judge compares with) or "
                    "'evaluation_criteria'; this row has neither");
        }
        std::string truth = optional_truth();
        if (trim_ascii_space(truth).empty()) row_error("field 'ground_truth' is empty (and there is no 'evaluation_criteria')");
        return truth;
      }
      std::optional<std::vector<std::string>> list = string_list(*criteria);
      if (!list) row_error("field 'evaluation_criteria' should be a list of strings (or a JSON string holding one)");
      if (list->empty()) row_error("field 'evaluation_criteria' is an empty list");
      for (std::size_t i = 0; i < list->size(); ++i) {
        if (trim_ascii_space((*list)[i]).empty()) row_error(fmt::format("field 'evaluation_criteria': item {} is empty", i));
      }
      row.set("evaluation_criteria", std::move(*list));  // the judge joins a list; it would quote raw JSON text
      return optional_truth();
    }
  }
  return "";
}

// A ROLL row: with domains, the tag is checked first (an unknown tag is the most useful error), and every error of a
// tagged row names the tag.
void read_roll(Example& example, Row& row, std::string_view json_object, const DatasetOptions& options) {
  std::string tag;
  try {
    std::optional<DomainKind> kind;
    if (!options.domains.empty()) {
      const DatasetDomain& domain = row_domain(row, options, tag);
      kind = domain.kind;
      example.domain = domain.name;
    }
    if (row.contains("messages") || !row.contains("prompt")) {
      example.prompt = parse_chat(required_text(row, "messages"), "messages");
    } else {  // ROLL's data_args.prompt: the text is the prompt as it is
      std::string prompt = required_text(row, "prompt");
      if (trim_ascii_space(prompt).empty()) row_error("field 'prompt' is empty");
      example.prompt = {{"user", prompt, std::nullopt}};
      example.raw_prompt = std::move(prompt);
    }
    normalise_ground_truth(row, json_object);
    example.ground_truth = kind ? domain_ground_truth(row, *kind) : required_text(row, "ground_truth");
    example.difficulty = difficulty_of(row, /*strict=*/true);
  } catch (RowError& error) {
    if (!tag.empty()) error.message = fmt::format("tag '{}': {}", tag, error.message);
    throw;
  }
}

}  // namespace

void set_unknown_tag(DatasetOptions& options, std::string_view value) {
  if (value == "error" || value == "skip") {
    options.unknown_tag = value == "error" ? UnknownTag::error : UnknownTag::skip;
    return;
  }
  const DatasetDomain* domain = domain_named(options, value);
  if (domain == nullptr && value == "math") {
    const auto math = std::find_if(options.domains.begin(), options.domains.end(),
                                   [](const DatasetDomain& d) { return d.kind == DomainKind::math; });
    if (math != options.domains.end()) domain = &*math;
  }
  GRPO_CHECK_CONFIG(domain != nullptr,
                    "unknown_tag: '{}' is neither error, skip nor a configured domain (configured: {}{})", value,
                    configured_domains(options), options.domains.empty() ? "none: it applies to multi-domain runs" : "");
  options.unknown_tag = UnknownTag::to_domain;
  options.unknown_tag_domain = domain->name;
}

namespace {

Example make_example(Row row, std::string_view json_object, DatasetFormat format,
                     const DatasetOptions& options) {
  Example example;
  switch (format) {
    case DatasetFormat::roll:
      read_roll(example, row, json_object, options);
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
  if (format != DatasetFormat::roll) example.difficulty = difficulty_of(row, /*strict=*/false);
  example.id = row.text("id").value_or("");
  example.tag = row.text("tag").value_or("");
  example.row = std::make_shared<const Row>(std::move(row));
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
    GRPO_CHECK_CONFIG(options.domains.empty() || format_ == DatasetFormat::roll || format_ == DatasetFormat::detect,
                      "DatasetOptions: domains ({}) apply to ROLL rows; the format is '{}' (use roll or detect)",
                      configured_domains(options), to_string(format_));
    std::map<std::string, std::string, std::less<>> owner;  // tag → domain
    std::vector<std::string> scratch;
    for (const DatasetDomain& d : options.domains) {
      for (const std::string& tag : claimed_tags(d, scratch)) {
        const auto [it, fresh] = owner.emplace(tag, d.name);
        GRPO_CHECK_CONFIG(fresh, "{}domains.{}: tag '{}' is claimed by domain '{}' too",
                          d.source.empty() ? "" : d.source + ": ", d.name, tag, it->second);
      }
    }
    GRPO_CHECK_CONFIG(options.unknown_tag != UnknownTag::to_domain ||
                          domain_named(options, options.unknown_tag_domain) != nullptr,
                      "unknown_tag: '{}' is not a configured domain (configured: {})", options.unknown_tag_domain,
                      configured_domains(options));
  }

  void add(std::string_view json_object, const std::string& location) {
    try {
      Row row;
      try {
        row = Row::from_json(json_object);
      } catch (const ParseError& error) {
        row_error(error.what());
      }
      if (format_ == DatasetFormat::detect) {
        const DatasetFormat detected = detect_format(row, !options_.domains.empty());
        if (detected != DatasetFormat::roll && !options_.domains.empty()) {
          row_error(fmt::format("DatasetOptions::domains ({}) need ROLL rows with 'messages' and 'tag'; this row "
                                "reads as format '{}'",
                                configured_domains(options_),
                                to_string(detected)));
        }
        format_ = detected;
      }
      Example example = make_example(std::move(row), json_object, format_, options_);
      example.source = location;
      if (example.id.empty()) example.id = location;
      examples_.push_back(std::move(example));
    } catch (const RowError& error) {
      std::string message = fmt::format("{}: {}", location, error.message);
      if (options_.on_bad_row == BadRowPolicy::stop && !error.skip) throw ParseError(message);
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

std::vector<std::shared_ptr<const Row>> ExampleBatch::rows() const {
  std::vector<std::shared_ptr<const Row>> out;
  out.reserve(examples.size());
  for (const Example& example : examples) out.push_back(example.row);
  return out;
}

Dataset::Dataset(std::vector<Example> examples, std::size_t skipped_rows, std::vector<std::string> skip_reasons)
    : examples_(std::move(examples)), skipped_rows_(skipped_rows), skip_reasons_(std::move(skip_reasons)) {}

Dataset Dataset::load(const std::filesystem::path& path, const DatasetOptions& options) {
  return parse(read_file(path), path.string(), options);
}

Dataset Dataset::concat(std::vector<Dataset> parts) {
  std::vector<Example> examples;
  std::size_t skipped = 0;
  std::vector<std::string> reasons;
  for (Dataset& part : parts) {
    examples.insert(examples.end(), std::make_move_iterator(part.examples_.begin()),
                    std::make_move_iterator(part.examples_.end()));
    skipped += part.skipped_rows_;
    reasons.insert(reasons.end(), std::make_move_iterator(part.skip_reasons_.begin()),
                   std::make_move_iterator(part.skip_reasons_.end()));
  }
  return Dataset(std::move(examples), skipped, std::move(reasons));
}

Dataset Dataset::parse(std::string_view text, std::string_view source, const DatasetOptions& options) {
  Loader loader(options);
  if (is_json_array(text)) {
    parse_json_array(text, source, loader);
  } else {
    for_each_json_line(text, source, [&](std::string_view line, const std::string& where) { loader.add(line, where); });
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
  for (char c : trim_ascii_space(answer.substr(marker + 4))) {
    if (c != ',') out.push_back(c);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace grpo::io
