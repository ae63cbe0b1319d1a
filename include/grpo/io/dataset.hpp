// SPDX-License-Identifier: Apache-2.0
// Prompt datasets: JSON-lines or JSON-array files read into examples {chat prompt, ground truth, the whole row},
// with deterministic shuffling, a train / held-out split and batches of P prompts.
//
// Formats (the field names of the published data sets):
//   roll    ROLL RLVR rows: `messages` (a JSON *string* holding the chat list [{"role", "content"}, ...]; an actual
//           JSON list is accepted too) or, instead, `prompt` (text used as the prompt as it is, without the chat
//           template, as ROLL's data_args.prompt), `ground_truth` (string, number, or an object {"steps": [...],
//           "final_answer"}), `id`, `tag`, `domain`, `difficulty` (a number or a string holding one); every field
//           stays in the row. With DatasetOptions::domains, each row's domain (its `domain` field when that names a
//           configured domain, as ROLL prefers it, else the domain claiming its `tag`) decides its kind and the fields that kind needs (math:
//           ground_truth; code: test_cases; general: ground_truth or evaluation_criteria); see DomainKind.
//   trl     TRL / open-r1 NuminaMath-TIR rows: `problem` (one user message), `solution` (the worked solution, the
//           ground truth as TRL's accuracy reward parses it).
//   gsm8k   `question` (one user message), `answer` ending in "#### N": ground truth = N with thousands separators
//           removed ("#### 1,600" → "1600"), as verl's gsm8k preprocessing does.
//   fields  any other data: DatasetOptions::prompt_field / answer_field name the fields.
//   detect  decided per file from the fields of its first row (messages or prompt, with ground_truth → roll, or with
//           tag or domain when
//           domains are configured; problem+solution → trl, question+answer → gsm8k), otherwise an error asking for a
//           format.
//
// Several files (one per domain, train and test, ...): load one Dataset per file, each with its own options, and
// join them with Dataset::concat.
#pragma once

#include <grpo/io/row.hpp>
#include <grpo/text/chat_template.hpp>

#include <grpo/core/enum_names.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::io {

enum class DatasetFormat { detect, roll, trl, gsm8k, fields };

namespace detail {
inline constexpr ::grpo::detail::EnumNames<DatasetFormat, 5> kDatasetFormatNames{{
    {DatasetFormat::detect, "detect"},
    {DatasetFormat::roll, "roll"},
    {DatasetFormat::trl, "trl"},
    {DatasetFormat::gsm8k, "gsm8k"},
    {DatasetFormat::fields, "fields"},
}};
}  // namespace detail

/// "detect", "roll", "trl", "gsm8k" or "fields".
GRPO_ENUM_NAMES(DatasetFormat, detail::kDatasetFormatNames, "dataset format", parse_dataset_format);

/// The kind of a ROLL domain (the row's `tag`), which decides the fields a row of that domain must carry.
enum class DomainKind {
  math,     ///< `ground_truth`: text, a number, or {"steps": [text, ...], "final_answer": text or number}
  code,     ///< `test_cases` readable by io::parse_code_tests (code_tests.hpp) (a list, or a JSON string holding one, of
            ///< {"input", "expected_output"} or assert code; with `case_type`, `test_case_function`); no ground truth
  general,  ///< for the LLM judge: `ground_truth` (the reference answer, ROLL's judge rows) and/or
            ///< `evaluation_criteria` (a non-empty list of strings, or a JSON string holding one); at least one
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<DomainKind, 3> kDomainKindNames{{
    {DomainKind::math, "math"},
    {DomainKind::code, "code"},
    {DomainKind::general, "general"},
}};
}  // namespace detail

/// "math", "code" or "general".
GRPO_ENUM_NAMES(DomainKind, detail::kDomainKindNames, "domain kind", parse_domain_kind);

/// One domain of multi-domain ROLL data: the rows it claims and the fields they need.
struct DatasetDomain {
  std::string name;
  DomainKind kind = DomainKind::math;
  std::vector<std::string> tags;  ///< row tags it claims; empty = {name}
  std::string source;             ///< where it was configured ("run.yaml:12"), for errors; may be empty
};

/// What happens to a row whose domain is not configured (no domain claims its tag, or its `domain` field names none).
enum class UnknownTag {
  error,      ///< a bad row (on_bad_row decides: stop with file:line, or skip and count it)
  skip,       ///< left out and counted with the skipped rows (its reason logged)
  to_domain,  ///< goes to DatasetOptions::unknown_tag_domain (ROLL sends such rows to its math_rule domain)
};

/// What to do with a row that does not parse or lacks a field the format needs.
enum class BadRowPolicy {
  stop,  ///< throw grpo::ParseError naming file:line and the field
  skip,  ///< leave the row out and count it (Dataset::skipped_rows, Dataset::skip_reasons)
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<BadRowPolicy, 2> kBadRowPolicyNames{{
    {BadRowPolicy::stop, "stop"},
    {BadRowPolicy::skip, "skip"},
}};
}  // namespace detail

/// "stop" or "skip".
GRPO_ENUM_NAMES(BadRowPolicy, detail::kBadRowPolicyNames, "bad-row policy");

struct DatasetOptions {
  DatasetFormat format = DatasetFormat::detect;
  BadRowPolicy on_bad_row = BadRowPolicy::stop;
  /// format == fields: the field holding the prompt (plain text → one user message; with prompt_is_chat, a chat
  /// list as in ROLL's `messages`) and the field holding the ground truth (text or number).
  std::string prompt_field;
  std::string answer_field;
  bool prompt_is_chat = false;
  /// When not empty, prepended as a "system" message to prompts that are plain text (trl, gsm8k, fields without
  /// prompt_is_chat). Chat-list prompts (roll) carry their own system message and are left as they are.
  std::string system_prompt;
  /// ROLL multi-domain data (format roll or detect). When not empty, every row belongs to one domain (Example::domain)
  /// and must carry the fields its kind needs (see DomainKind); a row that does not is a bad row ("data.jsonl:7: tag
  /// 'code': field 'test_cases' ..."), handled by on_bad_row. A tag claimed by two domains is a ConfigError. Empty: no
  /// domain check, and every roll row needs a ground_truth. Code rows are checked with io::parse_code_tests's
  /// default field names (test_cases, case_type, test_case_function). A general row's criteria given as a JSON string
  /// are stored in the row as the list.
  std::vector<DatasetDomain> domains;
  UnknownTag unknown_tag = UnknownTag::error;
  std::string unknown_tag_domain;  ///< with UnknownTag::to_domain: a configured domain's name
};

/// Parses r1_zero's --unknown-tag value into `options`: "error", "skip", or a configured domain's name (the rows go
/// there); "math" also names the first domain of kind math when no domain is called "math". ConfigError listing the
/// choices otherwise.
void set_unknown_tag(DatasetOptions& options, std::string_view value);

/// One prompt of a data set.
///
/// A ROLL ground truth given as an object {"steps": [...], "final_answer": ...} is normalised: ground_truth and the
/// row's `ground_truth` field become the final answer's text (so the accuracy reward reads it unchanged) and the
/// row's `ground_truth_steps` field holds the steps (a std::vector<std::string>, for rewards::MathStepsReward; absent
/// when the object has no "steps"). The JSON type decides: a string such as "{1, 2}" stays a string.
struct Example {
  std::vector<text::ChatMessage> prompt;  ///< the chat the model is asked to continue
  /// ROLL rows with `prompt` instead of `messages`: that text, which is the prompt as it is (no chat template);
  /// `prompt` holds it as one user message.
  std::optional<std::string> raw_prompt;
  std::string ground_truth;               ///< the gold answer the accuracy reward compares with ("" for a code or
                                          ///< general row without one)
  std::shared_ptr<const Row> row;  ///< every field of the source row (for rewards::Completion::row)
  std::string source;                     ///< "file:line" (JSON lines) or "file[index]" (JSON array)
  std::string id;                         ///< the row's `id` as text (7 → "7"); `source` when absent or empty
  std::string tag;                        ///< the row's `tag`; "" when absent
  std::string domain;                     ///< with DatasetOptions::domains, the name of the row's domain; else ""
  /// The row's `difficulty`: a number, or a string holding one ("4.5"); nullopt when absent or blank. In the roll
  /// format any other value is a bad row; other formats leave a non-numeric difficulty in the row only.
  std::optional<double> difficulty;
};

/// A batch of P prompts, in dataset order.
struct ExampleBatch {
  std::vector<Example> examples;

  std::size_t size() const { return examples.size(); }
  /// The prompts, one chat per example, for a ChatTemplate / Sampler.
  std::vector<std::vector<text::ChatMessage>> prompts() const;
  /// The rows, one per example, for rewards::Completion::row.
  std::vector<std::shared_ptr<const Row>> rows() const;
};

struct DatasetSplit;

/// An in-memory list of examples. Cheap to copy (rows are shared).
class Dataset {
 public:
  Dataset() = default;
  explicit Dataset(std::vector<Example> examples, std::size_t skipped_rows = 0,
                   std::vector<std::string> skip_reasons = {});

  /// Reads a JSON-lines file (one object per line; blank lines ignored) or, when its first non-blank character is
  /// '[', a JSON array of objects. Throws grpo::Error naming a file that cannot be read; ParseError for a bad row under
  /// BadRowPolicy::stop ("file:line: field 'answer' ..."), or format == detect on unknown fields; ConfigError for
  /// format == fields without prompt_field / answer_field, or domains with a format other than roll or detect.
  static Dataset load(const std::filesystem::path& path, const DatasetOptions& options = {});
  /// As load, from text in memory; `source` names it in error messages.
  static Dataset parse(std::string_view text, std::string_view source, const DatasetOptions& options = {});
  /// The examples of `parts` one after another (in order), their skipped rows summed and skip reasons joined: one
  /// Dataset per file (each loaded with its own options), then concat. Shuffle after joining for a mixed order.
  static Dataset concat(std::vector<Dataset> parts);

  std::size_t size() const { return examples_.size(); }
  bool empty() const { return examples_.empty(); }
  const Example& operator[](std::size_t index) const { return examples_[index]; }
  const std::vector<Example>& examples() const { return examples_; }
  /// Rows left out under BadRowPolicy::skip, and why ("file:line: message"), in file order.
  std::size_t skipped_rows() const { return skipped_rows_; }
  const std::vector<std::string>& skip_reasons() const { return skip_reasons_; }

  /// A permutation that depends only on the seed and the size (Fisher-Yates driven by std::mt19937_64, whose
  /// output the standard fixes; std::shuffle and the distributions are not portable, so they are not used).
  /// Use shuffled(seed + epoch) for a fresh order every epoch.
  Dataset shuffled(std::uint64_t seed) const;
  /// Shuffles with the seed, then the first `held_out` examples form the held-out set and the rest the training
  /// set. Throws ConfigError when held_out > size().
  DatasetSplit split(std::size_t held_out, std::uint64_t seed) const;
  /// Consecutive batches of `prompts_per_batch` (P) examples in the current order; the last, shorter batch is
  /// dropped when drop_last (every step then sees P prompts, as TRL's sampler does). Throws ConfigError for P == 0.
  std::vector<ExampleBatch> batches(std::size_t prompts_per_batch, bool drop_last = true) const;

 private:
  std::vector<Example> examples_;
  std::size_t skipped_rows_ = 0;
  std::vector<std::string> skip_reasons_;
};

struct DatasetSplit {
  Dataset train;
  Dataset held_out;
};

/// The ground truth of a GSM8K answer: the text after the last "####", trimmed, with ',' removed; nullopt when
/// there is no "####" or nothing after it.
std::optional<std::string> gsm8k_final_answer(std::string_view answer);

}  // namespace grpo::io
