// SPDX-License-Identifier: Apache-2.0
// Run configurations in YAML (or JSON, which is YAML flow syntax): a tree of maps, lists and scalars that remembers
// where every value was written, layered by inheritance and command-line overrides,
//
//   # runs/dapo_math.yaml                         # runs/base.yaml
//   extends: base.yaml                             model: {dir: models/qwen3-0.6b}
//   loss: {type: dapo, epsilon_high: 0.28}         loss: {type: grpo, beta: 0.04}
//   rewards: [{name: accuracy}, {name: format, weight: 0.5}]
//
//   auto config = grpo::io::load_layered_config("runs/dapo_math.yaml");   // base.yaml, then dapo_math.yaml over it
//   grpo::io::apply_config_override(config, "loss.beta=0");                  // --set loss.beta=0
//   double beta = config.at("loss").at("beta").number();                     // 0: errors name "file:line" and 'loss.beta'
//   auto rewards = grpo::rewards::RewardSet::from_config(grpo::io::to_json(config.at("rewards")));
//   config.at("rewards").mark_read();
//   grpo::io::reject_unread_keys(config);   // "runs/base.yaml:1: unknown key 'model.dri'" for a misspelt key
//
// The YAML library stays private to src/io: nothing here depends on it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::io {

/// One node of a configuration tree: null, a scalar (its text as written, quotes removed), a list, or a map (keys in
/// file order). Every node knows where it was written ("file:line", or "--set a.b=c" for an override) and its key
/// path from the root ("domains.math.rewards[1].weight"; "" for the root). A map entry's value carries the line of
/// its key.
///
/// Scalars keep YAML's untyped text and whether they were quoted (or written as a block scalar or tagged !!str): the
/// typed getters read either, to_json writes a quoted "3" as a string and an unquoted 3 as a number.
///
/// Reading marks entries (find, at, mark_read; the mark is `mutable`, so a const tree can be read), and
/// unread_keys lists the entries nothing asked for: misspelt or unsupported keys become errors instead of silently
/// doing nothing.
class ConfigNode {
 public:
  enum class Kind { null, scalar, list, map };
  using Entry = std::pair<std::string, ConfigNode>;

  /// A null node with no source (what a default-constructed node is).
  ConfigNode() = default;

  // Builders, for code that assembles or edits a tree. Children get their key paths when they are inserted.
  static ConfigNode null_value(std::string source);
  static ConfigNode scalar_value(std::string text, bool quoted, std::string source);
  static ConfigNode empty_list(std::string source);
  static ConfigNode empty_map(std::string source);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_scalar() const { return kind_ == Kind::scalar; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_map() const { return kind_ == Kind::map; }
  /// "file:line" (1-based) where the node was written; "--set a.b=c" for a command-line override.
  const std::string& source() const { return source_; }
  /// The key path from the root: "loss.beta", "rewards[1].weight"; "" for the root.
  const std::string& path() const { return path_; }
  /// Whether a scalar was written quoted ('x', "x"), as a block scalar (|, >) or tagged !!str: a string for to_json.
  bool quoted() const { return quoted_; }

  // Typed access. Each throws grpo::ConfigError "<source>: '<path>' should be <what>, got <kind or 'text'>".
  /// The scalar's text (quotes removed).
  const std::string& text() const;
  /// A YAML 1.2 / JSON number: [-+]digits[.digits][e[-+]digits], ".5", "1."; .inf, -.inf, .nan.
  double number() const;
  /// A decimal integer ("-12", "+3"), or a number written in another form that is an exact integer below 2^53
  /// ("1e4", "2.0"); out of range is an error.
  std::int64_t integer() const;
  /// true/false (also True/TRUE/False/FALSE, as YAML 1.2); yes/no/on/off are not booleans here.
  bool boolean() const;
  /// A list of scalars, or a single scalar as a list of one.
  std::vector<std::string> texts() const;
  /// A list's items.
  const std::vector<ConfigNode>& items() const;
  /// A map's entries, in file order (bases first, then keys a file or override added).
  const std::vector<Entry>& entries() const;

  /// The map entry `key` (marked as read), or nullptr when there is none. ConfigError for a node that is not a map.
  const ConfigNode* find(std::string_view key) const;
  /// find(key) that must exist: ConfigError "<source of this map>: missing key '<path>.<key>'".
  const ConfigNode& at(std::string_view key) const;
  /// Whether the map has `key` (does not mark it read). False for a node that is not a map.
  bool contains(std::string_view key) const;
  /// Marks this node and everything under it as read.
  void mark_read() const;
  /// Whether find/at/mark_read touched this node.
  bool was_read() const { return read_; }

  // Editing.
  /// Sets map entry `key` to `value` (replacing an entry in place, else appending); the value and everything under
  /// it take their key paths from here. Returns the stored node. ConfigError for a node that is not a map.
  ConfigNode& set(std::string_view key, ConfigNode value);
  /// Removes map entry `key`; returns whether there was one. ConfigError for a node that is not a map.
  bool erase(std::string_view key);
  /// Appends a list item (its path becomes "<path>[i]"). ConfigError for a node that is not a list.
  ConfigNode& push_back(ConfigNode item);
  /// The mutable entry `key`, or nullptr (does not mark it read). ConfigError for a node that is not a map.
  ConfigNode* find_mutable(std::string_view key);
  /// Sets this node's key path and, recursively, its children's.
  void set_path(std::string path);
  /// Sets where this node was written (not its children).
  void set_source(std::string source) { source_ = std::move(source); }

 private:
  Kind kind_ = Kind::null;
  bool quoted_ = false;
  mutable bool read_ = false;
  std::string text_;
  std::string source_;
  std::string path_;
  std::vector<ConfigNode> items_;
  std::vector<Entry> entries_;
};

/// "file:line: unknown key 'a.b.c'" for every map entry (at any depth, inside lists too) that no find/at/mark_read
/// touched, in tree order; empty when everything was read. An unread entry is reported once, not its children.
std::vector<std::string> unread_keys(const ConfigNode& root);
/// Throws ConfigError listing unread_keys, one per line, when there are any.
void reject_unread_keys(const ConfigNode& root);

/// Parses YAML (JSON is valid YAML flow syntax, so .json files parse too) into a tree; `source` names it in
/// messages ("runs/a.yaml:12"). Throws ParseError "source:line:column: <yaml-cpp's message>" for malformed text, and
/// for a key repeated in one map, a key that is not a scalar, a YAML merge key '<<' (use `extends`), an alias to an
/// enclosing node, a tag other than the core schema's (!!str, !!int, !!float, !!bool, !!null, !!map, !!seq) or a
/// second document. Anchors and aliases are resolved: an alias is a copy of the anchored node, keeping the source of
/// where the anchor was written. ConfigError when the top level is not a map; an empty document (or one holding
/// only comments, or null) is an empty map.
ConfigNode parse_config(std::string_view text, std::string_view source);

struct LayeredConfigOptions {
  /// Top-level keys naming base configs: a path or a list of paths, relative to the directory of the file that
  /// names them.
  std::vector<std::string> base_keys = {"extends", "defaults"};
};

/// Loads `file` and, recursively, its bases. Several bases merge left to right (in the order the file writes them,
/// base keys included), then the file itself over them: maps merge deeply key by key, lists and scalars replace (a
/// null value replaces too). The base keys are removed from the result. A file may be reached twice by different
/// routes (a diamond); only a file that is its own ancestor is a cycle.
/// Errors: ConfigError for an unreadable or missing file (naming it, and the "file:line" that named it as a base),
/// a cycle ("<file:line>: config cycle: a.yaml -> b.yaml -> a.yaml", paths relative to `file`'s directory), or a
/// base key that is not a path or a list of paths; ParseError (from parse_config) for malformed files.
ConfigNode load_layered_config(const std::filesystem::path& file, const LayeredConfigOptions& options = {});

/// Deep merge of `over` onto `base`: when both are maps, each key of `over` merges into `base`'s entry of that key
/// (appended when new); otherwise `over` replaces `base` (keeping base's key path). A merged map takes `over`'s source.
void merge_config(ConfigNode& base, const ConfigNode& over);

/// Applies one command-line override "a.b.c=value". The value is parsed as a YAML flow value (3, true, [1, 2],
/// {x: 1}, null, text; '3' or "3" for the text 3; an empty value is an empty string); missing maps on the path (and
/// nulls) become maps; the target is replaced, except that a map value merges deeply into a map as a file would.
/// Every new node's source is "--set a.b.c=value". ConfigError for no '=', an empty key path or an empty component,
/// or a path through a scalar or a list (naming where that was written); ParseError for a malformed value.
void apply_config_override(ConfigNode& root, std::string_view assignment);

/// The tree as compact JSON: unquoted scalars that read as numbers (finite) or booleans unquoted (a number keeps its
/// text when that is valid JSON, else its shortest round-trip form: "+1" → 1, ".5" → 0.5), everything else as JSON
/// strings (.inf and .nan too: JSON has no literal for them); null as null. For handing a part of a config to a
/// JSON-configured component (RewardSet::from_config). Does not mark anything read.
std::string to_json(const ConfigNode& node);

}  // namespace grpo::io
