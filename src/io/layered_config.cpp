// SPDX-License-Identifier: Apache-2.0
// Layered run configs (include/grpo/io/layered_config.hpp). One file over 700 lines: the yaml-cpp event handler that
// builds the located tree, the typed getters, merging and overrides share the private node representation.
#include <grpo/core/error.hpp>
#include <grpo/io/layered_config.hpp>

#include <grpo/core/json_quote.hpp>
#include <grpo/io/read_file.hpp>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>

namespace grpo::io {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------------------
// Scalar spellings (YAML 1.2 core schema, which JSON's literals are a subset of).

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::optional<bool> parse_boolean(std::string_view s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

// [-+]? ( \.[0-9]+ | [0-9]+ ( \.[0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
bool is_decimal_number(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  std::size_t digits = 0;
  while (i < s.size() && is_digit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    std::size_t exponent_digits = 0;
    while (i < s.size() && is_digit(s[i])) ++i, ++exponent_digits;
    if (exponent_digits == 0) return false;
  }
  return i == s.size();
}

// JSON's number grammar: -? (0 | [1-9][0-9]*) (\.[0-9]+)? ([eE][-+]?[0-9]+)?
bool is_json_number(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size() || !is_digit(s[i])) return false;
  if (s[i] == '0') {
    ++i;
  } else {
    while (i < s.size() && is_digit(s[i])) ++i;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i >= s.size() || !is_digit(s[i])) return false;
    while (i < s.size() && is_digit(s[i])) ++i;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (i >= s.size() || !is_digit(s[i])) return false;
    while (i < s.size() && is_digit(s[i])) ++i;
  }
  return i == s.size();
}

enum class NumberStatus { ok, not_a_number, out_of_range };

NumberStatus parse_number(std::string_view s, double& out) {
  std::string_view body = s;
  bool negative = false;
  if (!body.empty() && (body.front() == '-' || body.front() == '+')) {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    out = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return NumberStatus::ok;
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    out = std::numeric_limits<double>::quiet_NaN();
    return NumberStatus::ok;
  }
  if (!is_decimal_number(s)) return NumberStatus::not_a_number;
  // from_chars takes no leading '+'; the sign is put back afterwards.
  const auto result = std::from_chars(body.data(), body.data() + body.size(), out, std::chars_format::general);
  if (result.ec == std::errc::result_out_of_range) return NumberStatus::out_of_range;
  if (result.ec != std::errc() || result.ptr != body.data() + body.size()) return NumberStatus::not_a_number;
  if (negative) out = -out;
  return NumberStatus::ok;
}

// ---------------------------------------------------------------------------------------------------------------
// Messages.

std::string describe(const ConfigNode& node) {
  switch (node.kind()) {
    case ConfigNode::Kind::null:
      return "null";
    case ConfigNode::Kind::list:
      return "a list";
    case ConfigNode::Kind::map:
      return "a map";
    case ConfigNode::Kind::scalar:
      break;
  }
  constexpr std::size_t kMaxShown = 80;
  const std::string& text = node.text();
  if (text.size() > kMaxShown) return fmt::format("'{}...'", text.substr(0, kMaxShown));
  return fmt::format("'{}'", text);
}

// "<source>: " (nothing for a node built without one).
std::string where(const std::string& source) { return source.empty() ? std::string() : source + ": "; }

[[noreturn]] void type_error(const ConfigNode& node, std::string_view expected) {
  ::grpo::detail::throw_formatted<ConfigError>("{}'{}' should be {}, got {}", where(node.source()), node.path(),
                                               expected, describe(node));
}

std::string child_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

void set_sources(ConfigNode& node, const std::string& source) {
  node.set_source(source);
  if (node.is_map()) {
    for (const auto& [key, value] : node.entries()) set_sources(*node.find_mutable(key), source);
  } else if (node.is_list()) {
    ConfigNode list = ConfigNode::empty_list(source);
    for (ConfigNode item : node.items()) {
      set_sources(item, source);
      list.push_back(std::move(item));
    }
    list.set_path(node.path());
    node = std::move(list);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// YAML events → ConfigNode. yaml-cpp's own node tree would lose quoting (needed to tell "3" from 3), keeps no marks
// per key, and silently keeps repeated keys; its event interface gives all three.

constexpr std::string_view kCoreTag = "tag:yaml.org,2002:";

// Whether the quoted scalar opening at text[open] has its closing quote. yaml-cpp 0.7 ends an unterminated quoted
// scalar at the end of the text without complaint, which would swallow the rest of a config into one string.
bool quoted_scalar_closed(std::string_view text, std::size_t open) {
  const char quote = text[open];
  for (std::size_t i = open + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;  // an escape: the next character cannot close the scalar
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside a single-quoted scalar
      } else {
        return true;
      }
    }
  }
  return false;
}

class TreeBuilder : public YAML::EventHandler {
 public:
  // `single_line`: the text is a command-line value, so positions are columns only.
  TreeBuilder(std::string_view text, std::string source, bool single_line)
      : text_(text), source_(std::move(source)), single_line_(single_line),
        // UTF-16/32 text (NUL bytes) is re-encoded by yaml-cpp, so its marks are not byte offsets into `text`.
        positions_are_bytes_(text.find('\0') == std::string_view::npos) {}

  std::optional<ConfigNode>& root() { return root_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    add(ConfigNode::null_value(line_source(mark)), mark, anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto found = anchors_.find(anchor);
    if (found == anchors_.end()) fail(mark, "an alias refers to a node that contains it (a recursive structure)");
    ConfigNode copy = found->second;  // keeps the sources of where the anchored node was written
    add(std::move(copy), mark, 0);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    bool quoted = false;
    if (tag == "?") {
      quoted = false;  // plain: typed by its spelling
    } else if (tag == "!" || tag == fmt::format("{}str", kCoreTag)) {
      quoted = true;  // quoted, block scalar or !!str: text
      const auto at = static_cast<std::size_t>(mark.pos);
      if (positions_are_bytes_ && !mark.is_null() && at < text_.size() && (text_[at] == '"' || text_[at] == '\'') &&
          !quoted_scalar_closed(text_, at)) {
        fail(mark, fmt::format("a quoted string has no closing {}", text_[at]));
      }
    } else if (tag == fmt::format("{}null", kCoreTag)) {
      add(ConfigNode::null_value(line_source(mark)), mark, anchor);
      return;
    } else if (tag != fmt::format("{}int", kCoreTag) && tag != fmt::format("{}float", kCoreTag) &&
               tag != fmt::format("{}bool", kCoreTag)) {
      fail(mark, fmt::format("unsupported tag '{}' (only the core schema's !!str, !!int, !!float, !!bool, !!null)", tag));
    }
    add(ConfigNode::scalar_value(value, quoted, line_source(mark)), mark, anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    check_collection_tag(mark, tag, "seq");
    open(ConfigNode::empty_list(line_source(mark)), mark, anchor);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    check_collection_tag(mark, tag, "map");
    open(ConfigNode::empty_map(line_source(mark)), mark, anchor);
  }
  void OnMapEnd() override { close(); }

  [[noreturn]] void fail(const YAML::Mark& mark, std::string_view message) const {
    ::grpo::detail::throw_formatted<ParseError>("{}: {}", position(mark), message);
  }

  std::string position(const YAML::Mark& mark) const {
    if (mark.is_null()) return source_;
    if (single_line_) return fmt::format("{} (column {})", source_, mark.column + 1);
    return fmt::format("{}:{}:{}", source_, mark.line + 1, mark.column + 1);
  }

 private:
  struct Frame {
    ConfigNode node;
    YAML::anchor_t anchor = 0;
    YAML::Mark mark;
    bool has_key = false;  // maps: a key was read, its value is next
    std::string key;
    YAML::Mark key_mark;
  };

  std::string line_source(const YAML::Mark& mark) const {
    if (single_line_ || mark.is_null()) return source_;
    return fmt::format("{}:{}", source_, mark.line + 1);
  }

  void check_collection_tag(const YAML::Mark& mark, const std::string& tag, std::string_view kind) const {
    if (tag != "?" && tag != "!" && tag != fmt::format("{}{}", kCoreTag, kind))
      fail(mark, fmt::format("unsupported tag '{}' on a {}", tag, kind == "map" ? "map" : "list"));
  }

  // The key path of the frame on top of the stack, for messages during parsing (the tree's paths are set when
  // each node is inserted).
  std::string open_path() const {
    std::string path;
    for (std::size_t i = 0; i + 1 < stack_.size(); ++i) {
      const Frame& frame = stack_[i];
      if (frame.node.is_map()) {
        path = child_path(path, frame.key);
      } else {
        path += fmt::format("[{}]", frame.node.items().size());
      }
    }
    return path;
  }

  void open(ConfigNode node, const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (!stack_.empty() && stack_.back().node.is_map() && !stack_.back().has_key)
      fail(mark, "a map key should be a scalar, got a list or map");
    stack_.push_back(Frame{std::move(node), anchor, mark, false, {}, {}});
  }

  void close() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    add(std::move(frame.node), frame.mark, frame.anchor);
  }

  void add(ConfigNode node, const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != 0) anchors_[anchor] = node;
    if (stack_.empty()) {
      root_ = std::move(node);
      return;
    }
    Frame& parent = stack_.back();
    if (parent.node.is_list()) {
      parent.node.push_back(std::move(node));
      return;
    }
    if (!parent.has_key) {
      if (!node.is_scalar()) fail(mark, fmt::format("a map key should be text, got {}", describe(node)));
      if (!node.quoted() && node.text() == "<<")
        fail(mark, "YAML merge keys ('<<') are not supported: name a base config with 'extends' instead");
      if (parent.node.contains(node.text())) {
        const std::string path = child_path(open_path(), node.text());
        const ConfigNode* first = nullptr;
        for (const auto& entry : parent.node.entries())
          if (entry.first == node.text()) first = &entry.second;
        fail(mark, fmt::format("key '{}' is repeated (first written at {})", path, first->source()));
      }
      parent.has_key = true;
      parent.key = node.text();
      parent.key_mark = mark;
      return;
    }
    node.set_source(line_source(parent.key_mark));  // an entry is where its key is
    parent.node.set(parent.key, std::move(node));
    parent.has_key = false;
  }

  std::string_view text_;
  std::string source_;
  bool single_line_;
  bool positions_are_bytes_;
  std::vector<Frame> stack_;
  std::unordered_map<YAML::anchor_t, ConfigNode> anchors_;
  std::optional<ConfigNode> root_;
};

// A handler for what follows the first document: any second document is an error.
class SecondDocumentRejecter : public YAML::EventHandler {
 public:
  explicit SecondDocumentRejecter(const TreeBuilder& builder) : builder_(builder) {}
  void OnDocumentStart(const YAML::Mark& mark) override {
    builder_.fail(mark, "a second YAML document ('---') is not supported: a config is one map");
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  const TreeBuilder& builder_;
};

// Parses one YAML document into a node of any kind; nullopt for no document (empty text or only comments).
std::optional<ConfigNode> parse_yaml(std::string_view text, const std::string& source, bool single_line) {
  // A UTF-8 byte-order mark: dropped here so that yaml-cpp's positions are offsets into `text`.
  constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
  if (text.substr(0, kUtf8Bom.size()) == kUtf8Bom) text.remove_prefix(kUtf8Bom.size());
  std::istringstream stream{std::string(text)};
  TreeBuilder builder(text, source, single_line);
  try {
    YAML::Parser parser(stream);
    if (!parser.HandleNextDocument(builder)) return std::nullopt;
    SecondDocumentRejecter rejecter(builder);
    parser.HandleNextDocument(rejecter);
  } catch (const YAML::Exception& error) {
    builder.fail(error.mark, error.msg);
  }
  return std::move(builder.root());
}

// ---------------------------------------------------------------------------------------------------------------
// JSON output.

void append_json(std::string& out, const ConfigNode& node) {
  switch (node.kind()) {
    case ConfigNode::Kind::null:
      out += "null";
      return;
    case ConfigNode::Kind::scalar: {
      const std::string& text = node.text();
      if (!node.quoted()) {
        if (const auto value = parse_boolean(text)) {
          out += *value ? "true" : "false";
          return;
        }
        if (is_json_number(text)) {
          out += text;
          return;
        }
        double number = 0;
        if (parse_number(text, number) == NumberStatus::ok && std::isfinite(number)) {
          out += fmt::format("{}", number);
          return;
        }
      }
      append_json_quoted(out, text);
      return;
    }
    case ConfigNode::Kind::list: {
      out += '[';
      bool first = true;
      for (const ConfigNode& item : node.items()) {
        if (!first) out += ',';
        first = false;
        append_json(out, item);
      }
      out += ']';
      return;
    }
    case ConfigNode::Kind::map: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : node.entries()) {
        if (!first) out += ',';
        first = false;
        append_json_quoted(out, key);
        out += ':';
        append_json(out, value);
      }
      out += '}';
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Inheritance.

class LayeredLoader {
 public:
  LayeredLoader(const fs::path& top, const LayeredConfigOptions& options)
      : options_(options), top_dir_(absolute_normal(top).parent_path()) {}

  // `named_at`: the "file:line" of the base key that named `file` ("" for the top file).
  ConfigNode load(const fs::path& file, const std::string& named_at) {
    const fs::path identity = identity_of(file);
    const fs::path shown = absolute_normal(file).lexically_proximate(top_dir_);
    if (std::find(chain_.begin(), chain_.end(), identity) != chain_.end()) {
      std::string cycle;
      for (const fs::path& step : shown_chain_) cycle += step.string() + " -> ";
      cycle += shown.string();
      ::grpo::detail::throw_formatted<ConfigError>("{}: config cycle: {}", named_at, cycle);
    }

    std::string text;
    try {
      text = read_file(file);
    } catch (const Error&) {
      std::error_code ignored;
      const char* why = fs::exists(file, ignored) ? "unreadable" : "no such file";
      if (named_at.empty()) ::grpo::detail::throw_formatted<ConfigError>("cannot read config {} ({})", file.string(), why);
      ::grpo::detail::throw_formatted<ConfigError>("{}: cannot read base config {} ({})", named_at, file.string(), why);
    }
    ConfigNode own = parse_config(text, file.string());

    // The bases, in the order the file writes them.
    struct Base {
      fs::path path;
      std::string named_at;
    };
    std::vector<Base> bases;
    std::vector<std::string> base_keys_present;
    for (const auto& [key, value] : own.entries()) {
      if (std::find(options_.base_keys.begin(), options_.base_keys.end(), key) == options_.base_keys.end()) continue;
      base_keys_present.push_back(key);
      if (value.is_list()) {
        for (const ConfigNode& item : value.items()) {
          if (!item.is_scalar() || item.text().empty()) type_error(item, "a path (of a base config)");
          bases.push_back(Base{file.parent_path() / item.text(), item.source()});
        }
      } else {
        if (!value.is_scalar() || value.text().empty()) type_error(value, "a path or a list of paths (of base configs)");
        bases.push_back(Base{file.parent_path() / value.text(), value.source()});
      }
    }
    for (const std::string& key : base_keys_present) own.erase(key);

    ConfigNode merged = ConfigNode::empty_map(own.source());
    chain_.push_back(identity);
    shown_chain_.push_back(shown);
    for (const Base& base : bases) merge_config(merged, load(base.path.lexically_normal(), base.named_at));
    chain_.pop_back();
    shown_chain_.pop_back();
    merge_config(merged, own);
    return merged;
  }

 private:
  static fs::path absolute_normal(const fs::path& path) {
    std::error_code error;
    fs::path absolute = fs::absolute(path, error);
    return (error ? path : absolute).lexically_normal();
  }

  // Two names of one file (symlinks, "a/../b") are the same file for cycle detection.
  static fs::path identity_of(const fs::path& path) {
    std::error_code error;
    fs::path canonical = fs::weakly_canonical(path, error);
    return error ? absolute_normal(path) : canonical;
  }

  const LayeredConfigOptions& options_;
  fs::path top_dir_;
  std::vector<fs::path> chain_;
  std::vector<fs::path> shown_chain_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// ConfigNode.

ConfigNode ConfigNode::null_value(std::string source) {
  ConfigNode node;
  node.source_ = std::move(source);
  return node;
}

ConfigNode ConfigNode::scalar_value(std::string text, bool quoted, std::string source) {
  ConfigNode node;
  node.kind_ = Kind::scalar;
  node.text_ = std::move(text);
  node.quoted_ = quoted;
  node.source_ = std::move(source);
  return node;
}

ConfigNode ConfigNode::empty_list(std::string source) {
  ConfigNode node;
  node.kind_ = Kind::list;
  node.source_ = std::move(source);
  return node;
}

ConfigNode ConfigNode::empty_map(std::string source) {
  ConfigNode node;
  node.kind_ = Kind::map;
  node.source_ = std::move(source);
  return node;
}

const std::string& ConfigNode::text() const {
  if (kind_ != Kind::scalar) type_error(*this, "text");
  return text_;
}

double ConfigNode::number() const {
  if (kind_ != Kind::scalar) type_error(*this, "a number");
  double value = 0;
  switch (parse_number(text_, value)) {
    case NumberStatus::ok:
      return value;
    case NumberStatus::out_of_range:
      type_error(*this, "a number within double range");
    case NumberStatus::not_a_number:
      break;
  }
  type_error(*this, "a number");
}

std::int64_t ConfigNode::integer() const {
  if (kind_ != Kind::scalar) type_error(*this, "an integer");
  // [-+]?[0-9]+ exactly, through from_chars (which takes '-' but not '+').
  std::string_view digits = text_;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  const std::string_view magnitude = !digits.empty() && digits.front() == '-' ? digits.substr(1) : digits;
  if (!magnitude.empty() && std::all_of(magnitude.begin(), magnitude.end(), is_digit)) {
    std::int64_t value = 0;
    const auto result = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (result.ec == std::errc::result_out_of_range) type_error(*this, "an integer within 64 bits");
    if (result.ec == std::errc() && result.ptr == digits.data() + digits.size()) return value;
  }
  // 1e4, 2.0: numbers that are exact integers, within the range where doubles hold every integer.
  constexpr double kExactLimit = 9007199254740992.0;  // 2^53
  double value = 0;
  if (parse_number(text_, value) == NumberStatus::ok && std::isfinite(value) && std::trunc(value) == value &&
      std::abs(value) <= kExactLimit) {
    return static_cast<std::int64_t>(value);
  }
  type_error(*this, "an integer");
}

bool ConfigNode::boolean() const {
  if (kind_ != Kind::scalar) type_error(*this, "true or false");
  if (const auto value = parse_boolean(text_)) return *value;
  type_error(*this, "true or false");
}

std::vector<std::string> ConfigNode::texts() const {
  if (kind_ == Kind::scalar) return {text_};
  if (kind_ != Kind::list) type_error(*this, "a list of text values (or one)");
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const ConfigNode& item : items_) {
    if (!item.is_scalar()) type_error(item, "text");
    out.push_back(item.text_);
  }
  return out;
}

const std::vector<ConfigNode>& ConfigNode::items() const {
  if (kind_ != Kind::list) type_error(*this, "a list");
  return items_;
}

const std::vector<ConfigNode::Entry>& ConfigNode::entries() const {
  if (kind_ != Kind::map) type_error(*this, "a map");
  return entries_;
}

const ConfigNode* ConfigNode::find(std::string_view key) const {
  if (kind_ != Kind::map) type_error(*this, "a map");
  for (const Entry& entry : entries_) {
    if (entry.first == key) {
      entry.second.read_ = true;
      return &entry.second;
    }
  }
  return nullptr;
}

const ConfigNode& ConfigNode::at(std::string_view key) const {
  if (const ConfigNode* found = find(key)) return *found;
  ::grpo::detail::throw_formatted<ConfigError>("{}missing key '{}'", where(source_), child_path(path_, key));
}

bool ConfigNode::contains(std::string_view key) const {
  return kind_ == Kind::map &&
         std::any_of(entries_.begin(), entries_.end(), [&](const Entry& entry) { return entry.first == key; });
}

void ConfigNode::mark_read() const {
  read_ = true;
  for (const ConfigNode& item : items_) item.mark_read();
  for (const Entry& entry : entries_) entry.second.mark_read();
}

ConfigNode& ConfigNode::set(std::string_view key, ConfigNode value) {
  if (kind_ != Kind::map) type_error(*this, "a map");
  value.set_path(child_path(path_, key));
  for (Entry& entry : entries_) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return entry.second;
    }
  }
  entries_.emplace_back(std::string(key), std::move(value));
  return entries_.back().second;
}

bool ConfigNode::erase(std::string_view key) {
  if (kind_ != Kind::map) type_error(*this, "a map");
  const auto found =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& entry) { return entry.first == key; });
  if (found == entries_.end()) return false;
  entries_.erase(found);
  return true;
}

ConfigNode& ConfigNode::push_back(ConfigNode item) {
  if (kind_ != Kind::list) type_error(*this, "a list");
  item.set_path(fmt::format("{}[{}]", path_, items_.size()));
  items_.push_back(std::move(item));
  return items_.back();
}

ConfigNode* ConfigNode::find_mutable(std::string_view key) {
  if (kind_ != Kind::map) type_error(*this, "a map");
  for (Entry& entry : entries_)
    if (entry.first == key) return &entry.second;
  return nullptr;
}

void ConfigNode::set_path(std::string path) {
  path_ = std::move(path);
  for (std::size_t i = 0; i < items_.size(); ++i) items_[i].set_path(fmt::format("{}[{}]", path_, i));
  for (Entry& entry : entries_) entry.second.set_path(child_path(path_, entry.first));
}

// ---------------------------------------------------------------------------------------------------------------
// Free functions.

namespace {
void collect_unread(const ConfigNode& node, std::vector<std::string>& out) {
  if (node.is_map()) {
    for (const auto& [key, value] : node.entries()) {
      if (!value.was_read()) {
        out.push_back(fmt::format("{}unknown key '{}'", where(value.source()), value.path()));
      } else {
        collect_unread(value, out);
      }
    }
  } else if (node.is_list()) {
    for (const ConfigNode& item : node.items()) collect_unread(item, out);
  }
}
}  // namespace

std::vector<std::string> unread_keys(const ConfigNode& root) {
  std::vector<std::string> out;
  collect_unread(root, out);
  return out;
}

void reject_unread_keys(const ConfigNode& root) {
  const std::vector<std::string> unread = unread_keys(root);
  if (unread.empty()) return;
  std::string message = unread.front();
  for (std::size_t i = 1; i < unread.size(); ++i) message += "\n" + unread[i];
  throw ConfigError(message);
}

ConfigNode parse_config(std::string_view text, std::string_view source) {
  const std::string name(source);
  std::optional<ConfigNode> root = parse_yaml(text, name, /*single_line=*/false);
  if (!root || root->is_null()) {
    // Nothing but comments (or an explicit null): an empty config.
    return ConfigNode::empty_map(root ? root->source() : fmt::format("{}:1", name));
  }
  if (!root->is_map()) {
    ::grpo::detail::throw_formatted<ConfigError>(
        "{}: the top level of a config should be a map (key: value lines, or a JSON object), got {}", root->source(),
        describe(*root));
  }
  return std::move(*root);
}

ConfigNode load_layered_config(const std::filesystem::path& file, const LayeredConfigOptions& options) {
  LayeredLoader loader(file, options);
  return loader.load(file, "");
}

void merge_config(ConfigNode& base, const ConfigNode& over) {
  if (base.is_map() && over.is_map()) {
    for (const auto& [key, value] : over.entries()) {
      if (ConfigNode* existing = base.find_mutable(key)) {
        merge_config(*existing, value);
      } else {
        base.set(key, value);
      }
    }
    base.set_source(over.source());
    return;
  }
  std::string path = base.path();
  base = over;
  base.set_path(std::move(path));
}

void apply_config_override(ConfigNode& root, std::string_view assignment) {
  const std::string source = fmt::format("--set {}", assignment);
  const std::size_t equals = assignment.find('=');
  if (equals == std::string_view::npos)
    ::grpo::detail::throw_formatted<ConfigError>("{}: expected key.path=value (no '=')", source);

  std::string_view key_path = assignment.substr(0, equals);
  while (!key_path.empty() && (key_path.front() == ' ' || key_path.front() == '\t')) key_path.remove_prefix(1);
  while (!key_path.empty() && (key_path.back() == ' ' || key_path.back() == '\t')) key_path.remove_suffix(1);
  if (key_path.empty()) ::grpo::detail::throw_formatted<ConfigError>("{}: the key path before '=' is empty", source);
  std::vector<std::string_view> keys;
  for (std::size_t start = 0;;) {
    const std::size_t dot = key_path.find('.', start);
    keys.push_back(key_path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (keys.back().empty())
      ::grpo::detail::throw_formatted<ConfigError>("{}: key path '{}' has an empty component", source, key_path);
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }

  const std::string_view value_text = assignment.substr(equals + 1);
  ConfigNode value = ConfigNode::scalar_value("", /*quoted=*/true, source);  // "a=": the empty string
  if (!value_text.empty()) {
    std::optional<ConfigNode> parsed = parse_yaml(value_text, source, /*single_line=*/true);
    value = parsed ? std::move(*parsed) : ConfigNode::null_value(source);
    set_sources(value, source);
  }

  if (!root.is_map()) type_error(root, "a map");
  ConfigNode* node = &root;
  for (std::size_t i = 0; i + 1 < keys.size(); ++i) {
    ConfigNode* child = node->find_mutable(keys[i]);
    if (child == nullptr || child->is_null()) {
      child = &node->set(keys[i], ConfigNode::empty_map(source));
    } else if (!child->is_map()) {
      ::grpo::detail::throw_formatted<ConfigError>("{}: cannot set '{}': '{}' is {} (written at {}), not a map",
                                                   source, key_path, child->path(), describe(*child),
                                                   child->source());
    }
    node = child;
  }
  ConfigNode* target = node->find_mutable(keys.back());
  if (target != nullptr && target->is_map() && value.is_map()) {
    merge_config(*target, value);
  } else {
    node->set(keys.back(), std::move(value));
  }
}

std::string to_json(const ConfigNode& node) {
  std::string out;
  append_json(out, node);
  return out;
}

}  // namespace grpo::io
