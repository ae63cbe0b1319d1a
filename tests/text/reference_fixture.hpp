// SPDX-License-Identifier: Apache-2.0
// Test support for the text area: reads the parity fixtures in tests/text/data (written by
// tools/tokenizer-reference from Hugging Face's Rust tokenizer) and finds the real tokenizer files.
//
// The case fixtures (<name>_reference.jsonl) are JSON lines whose strings are hex of UTF-8 bytes, so reading them
// needs no JSON parser: a value is found after its "key": and is a hex string, a list of hex strings, a list of
// integers or a boolean. The parity corpus (corpus.jsonl, JSON lines read with simdjson) has its reference ids in
// corpus_ids_<name>.txt, one line of space-separated ids per text.
#pragma once

#include <grpo/text/chat_template.hpp>
#include <grpo/text/tokenizer.hpp>
#include <support/test_paths.hpp>

#include <simdjson.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::text::testing {

struct ReferenceCase {
  std::size_t line = 0;
  std::string category;
  bool add_special_tokens = true;
  std::string bytes;  // the text to encode (empty for chat cases)
  std::vector<int32_t> ids;
  std::string decoded;               // Hugging Face's decode(ids, skip_special_tokens=false)
  std::string decoded_skip_special;  // ... and with skip_special_tokens=true
  // Chat cases: the conversation; its rendered prompt is `decoded`.
  bool is_chat = false;
  std::vector<ChatMessage> messages;
  ChatRenderOptions render;
};

namespace detail {

/// The raw JSON text of the value of "key" in a flat JSON object line, or nullopt when absent.
inline std::optional<std::string_view> raw_value(std::string_view line, std::string_view key) {
  std::string quoted = "\"";
  quoted.append(key).append("\":");
  const auto at = line.find(quoted);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + quoted.size());
  const char open = rest.front();
  std::size_t end = 0;
  if (open == '[') {
    end = rest.find(']') + 1;
  } else if (open == '"') {
    end = rest.find('"', 1) + 1;
  } else {
    end = rest.find_first_of(",}");
  }
  return rest.substr(0, end);
}

inline std::string from_hex(std::string_view quoted) {
  const std::string_view hex = quoted.substr(1, quoted.size() - 2);
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

/// Splits the inside of a JSON list into its comma-separated items.
inline std::vector<std::string_view> list_items(std::string_view list) {
  std::vector<std::string_view> items;
  std::string_view inside = list.substr(1, list.size() - 2);
  while (!inside.empty()) {
    const auto comma = inside.find(',');
    items.push_back(inside.substr(0, comma));
    if (comma == std::string_view::npos) break;
    inside.remove_prefix(comma + 1);
  }
  return items;
}

}  // namespace detail

inline std::vector<ReferenceCase> read_reference_cases(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path.string());
  std::vector<ReferenceCase> cases;
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    ReferenceCase c;
    c.line = number;
    const auto category = detail::raw_value(line, "category").value();
    c.category = std::string(category.substr(1, category.size() - 2));
    c.add_special_tokens = detail::raw_value(line, "add_special_tokens") == "true";
    for (const auto item : detail::list_items(detail::raw_value(line, "ids").value())) {
      c.ids.push_back(static_cast<int32_t>(std::stol(std::string(item))));
    }
    if (const auto roles = detail::raw_value(line, "roles")) {
      c.is_chat = true;
      const auto role_items = detail::list_items(*roles);
      const auto content_items = detail::list_items(detail::raw_value(line, "contents").value());
      for (std::size_t i = 0; i < role_items.size(); ++i) {
        c.messages.push_back({detail::from_hex(role_items[i]), detail::from_hex(content_items[i]), std::nullopt});
      }
      c.render.add_generation_prompt = detail::raw_value(line, "add_generation_prompt") == "true";
      if (const auto thinking = detail::raw_value(line, "enable_thinking"))
        c.render.enable_thinking = *thinking == "true";
    } else {
      c.bytes = detail::from_hex(detail::raw_value(line, "bytes").value());
    }
    const auto decoded = detail::raw_value(line, "decoded");
    c.decoded = decoded ? detail::from_hex(*decoded) : c.bytes;
    const auto skip = detail::raw_value(line, "decoded_skip_special");
    c.decoded_skip_special = skip ? detail::from_hex(*skip) : c.decoded;
    cases.push_back(std::move(c));
  }
  return cases;
}

/// One text of the parity corpus (tools/tokenizer-reference/corpus.mjs) with Hugging Face's ids for it.
struct CorpusCase {
  std::size_t line = 0;   // 1-based line in corpus.jsonl (and in corpus_ids_<name>.txt)
  std::string category;   // e.g. "text_ja", "code_c", "emoji"
  std::string source;     // file (and line) it was drawn from, or "generated"
  std::string text;
  std::vector<int32_t> ids;  // encode(text) with add_special_tokens = true
  /// decode(encode(text, add_special_tokens = false)): the text itself unless the normalizer changed it.
  std::string decoded;
};

/// Reads corpus.jsonl and the reference ids of one tokenizer (corpus_ids_<name>.txt); throws when the two files
/// do not have the same number of lines.
inline std::vector<CorpusCase> read_corpus(const std::filesystem::path& corpus, const std::filesystem::path& ids) {
  simdjson::padded_string json;
  if (simdjson::padded_string::load(corpus.string()).get(json)) {
    throw std::runtime_error("cannot open fixture " + corpus.string());
  }
  std::vector<CorpusCase> cases;
  simdjson::dom::parser parser;
  simdjson::dom::document_stream stream;
  if (parser.parse_many(json).get(stream)) throw std::runtime_error("cannot parse " + corpus.string());
  for (auto doc : stream) {
    const simdjson::dom::element object = doc.value();
    CorpusCase c;
    c.line = cases.size() + 1;
    c.category = std::string(std::string_view(object["category"]));
    c.source = std::string(std::string_view(object["source"]));
    c.text = std::string(std::string_view(object["text"]));
    cases.push_back(std::move(c));
  }
  std::ifstream in(ids);
  if (!in) throw std::runtime_error("cannot open fixture " + ids.string());
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    if (number >= cases.size()) throw std::runtime_error(ids.string() + " has more lines than " + corpus.string());
    CorpusCase& c = cases[number++];
    const auto tab = line.find('\t');
    const std::string_view list = std::string_view(line).substr(0, tab);
    for (const char* p = list.data(); p < list.data() + list.size();) {
      int32_t id = 0;
      const auto [end, error] = std::from_chars(p, list.data() + list.size(), id);
      if (error != std::errc{}) throw std::runtime_error(ids.string() + ": bad id on line " + std::to_string(number));
      c.ids.push_back(id);
      p = end + (end < list.data() + list.size() ? 1 : 0);
    }
    c.decoded = tab == std::string::npos ? c.text : detail::from_hex("\"" + line.substr(tab + 1) + "\"");
  }
  if (number != cases.size()) throw std::runtime_error(ids.string() + " has fewer lines than " + corpus.string());
  return cases;
}

/// tests/text/data/`file` (support/test_paths.hpp).
inline std::filesystem::path fixture_path(std::string_view file) {
  return std::filesystem::path(grpo::testing::text_fixture_dir()) / file;
}

/// Directory holding `name`/tokenizer.json and tokenizer_config.json: under $GRPO_TOKENIZER_DIR when it is set, else
/// under reference_tokenizer_dir(), where the build unpacks tests/data/tokenizers (cmake/ReferenceTokenizers.cmake).
/// nullopt when absent: the test then skips (GRPO_SKIP(missing_tokenizer(name))).
inline std::optional<std::filesystem::path> find_tokenizer_dir(std::string_view name) {
  std::filesystem::path root = grpo::testing::reference_tokenizer_dir();
  if (const char* dir = std::getenv("GRPO_TOKENIZER_DIR"); dir && *dir) root = dir;
  const auto dir = root / name;
  if (!std::filesystem::exists(dir / "tokenizer.json")) return std::nullopt;
  return dir;
}

/// Why a test needing the reference tokenizer `name` is skipped (for GRPO_SKIP).
inline std::string missing_tokenizer(std::string_view name) {
  const std::string n(name);
  const char* dir = std::getenv("GRPO_TOKENIZER_DIR");
  const std::string root = dir && *dir ? std::string(dir) + " ($GRPO_TOKENIZER_DIR)" : grpo::testing::reference_tokenizer_dir();
  return "the reference tokenizer " + n + " is not installed: no " + n + "/tokenizer.json under " + root +
         " (the build unpacks tests/data/tokenizers there)";
}

/// The real tokenizer `name` (see find_tokenizer_dir) with its tokenizer_config.json, loaded once per test run: reading
/// Qwen3's 150k merges takes about half a second. nullptr when the file is absent.
inline const Tokenizer* shared_tokenizer(std::string_view name) {
  static std::map<std::string, std::optional<Tokenizer>, std::less<>> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    std::optional<Tokenizer> tokenizer;
    if (const auto dir = find_tokenizer_dir(name)) tokenizer = Tokenizer::from_pretrained(*dir);
    it = loaded.emplace(std::string(name), std::move(tokenizer)).first;
  }
  return it->second ? &*it->second : nullptr;
}

}  // namespace grpo::text::testing
