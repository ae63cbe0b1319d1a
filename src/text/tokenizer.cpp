// SPDX-License-Identifier: Apache-2.0
// Byte-level BPE as Hugging Face tokenizers runs it; see include/grpo/text/tokenizer.hpp for the pipeline. One file
// over 700 lines: tokenizer.json loading, pre-tokenisation, BPE merges and decoding share the private model state.
#include <grpo/text/tokenizer.hpp>

#include <grpo/core/error.hpp>
#include <grpo/io/gguf.hpp>
#include <grpo/text/gguf_tokenizer.hpp>

#include "json_fields.hpp"
#include "unicode.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bitset>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>

namespace grpo::text {
namespace {

using detail::JsonField;

/// GPT-2's split regex, used by the ByteLevel pre-tokenizer when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// Unicode White_Space as a PCRE2 class body. Hugging Face compiles its patterns with Oniguruma, whose \s is
/// White_Space; PCRE2's \s under UCP also matches U+180E, so \s and \S are spelled out before compiling.
constexpr std::string_view kWhiteSpaceClass = R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028})"
                                              R"(\x{2029}\x{202F}\x{205F}\x{3000})";

/// Letters (\p{L}) and numbers (\p{N}) assigned in Unicode 15.0 to 16.0, as PCRE2 class bodies. Hugging Face's
/// Oniguruma has Unicode 16 tables, PCRE2 10.42 (Debian 12) Unicode 14: to it these are unassigned, so text
/// around them split differently (tests/text/data/corpus.jsonl, category unicode_new). Found by running
/// Qwen3's pre-tokenizer under Hugging Face on every code point ("a" + c one piece: letter; c + c two pieces:
/// number) against PCRE2's \p{L} and \p{N}: these are all the differences, and every one is a class PCRE2 lacks.
/// Adding them to the patterns' classes is harmless with a newer PCRE2 that already has them.
constexpr std::string_view kUnicode16Letters =
    R"(\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65})"
    R"(\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B}\x{1138E})"
    R"(\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02}\x{11F04}-\x{11F10})"
    R"(\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446}\x{13460}-\x{143FA}\x{16100}-\x{1611D})"
    R"(\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D})"
    R"(\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739}\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr std::string_view kUnicode16Numbers =
    R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59}\x{16130}-\x{16139})"
    R"(\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";

/// Writes the raw bytes a byte-level token spelling stands for into `bytes`; false when the spelling has a
/// character that stands for no byte.
bool byte_level_decode(std::string_view spelling, std::string& bytes) {
  bytes.clear();
  std::size_t pos = 0;
  while (pos < spelling.size()) {
    const int byte = detail::char_to_byte(detail::next_code_point(spelling, pos));
    if (byte < 0) return false;
    bytes.push_back(static_cast<char>(byte));
  }
  return true;
}

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

/// Rewrites \s and \S outside character classes and \s inside them to Unicode White_Space (see kWhiteSpaceClass),
/// and \p{L} / \p{N} (\P{L} / \P{N} outside classes) to include the Unicode 15-16 letters and numbers (see
/// kUnicode16Letters), so that the classes are Oniguruma's.
std::string oniguruma_to_pcre2(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char escaped = pattern[i + 1];
      const std::string_view property = pattern.substr(i + 2, 3);
      if ((escaped == 'p' || (escaped == 'P' && !in_class)) && (property == "{L}" || property == "{N}")) {
        const std::string_view extra = property == "{L}" ? kUnicode16Letters : kUnicode16Numbers;
        const std::string_view base = pattern.substr(i, 5);  // as written, e.g. \p{L}
        i += 4;
        if (in_class) {
          out.append(base).append(extra);
        } else {
          out.append(escaped == 'P' ? "[^\\p" : "[\\p").append(property).append(extra).append("]");
        }
        continue;
      }
      ++i;
      if (escaped == 's') {
        if (in_class) {
          out += kWhiteSpaceClass;
        } else {
          out += '[';
          out += kWhiteSpaceClass;
          out += ']';
        }
      } else if (escaped == 'S' && !in_class) {
        out += "[^";
        out += kWhiteSpaceClass;
        out += ']';
      } else {
        out += '\\';
        out += escaped;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a leading ']' is literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct Pcre2MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
using MatchData = std::unique_ptr<pcre2_match_data, Pcre2MatchDataDeleter>;

/// One Split step of the pre-tokenizer: a compiled pattern and what to keep of the matches and the gaps.
struct SplitStep {
  std::shared_ptr<pcre2_code> code;
  bool keep_matches = true;  // false for behavior Removed (or Removed + invert: keep only the matches)
  bool keep_gaps = true;
};

std::shared_ptr<pcre2_code> compile_pattern(std::string_view pattern, bool literal, std::string_view source) {
  const std::string translated = literal ? std::string(pattern) : oniguruma_to_pcre2(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  const uint32_t options = literal ? (PCRE2_LITERAL | PCRE2_UTF) : (PCRE2_UTF | PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                                   &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error_code, message.data(), message.size());
    ::grpo::detail::throw_formatted<ConfigError>("{}: pre-tokenizer pattern '{}' does not compile at offset {}: {}",
                                                 source, pattern, error_offset,
                                                 reinterpret_cast<const char*>(message.data()));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT support pcre2_match interprets: slower, same result
  return std::shared_ptr<pcre2_code>(code, Pcre2CodeDeleter{});
}

/// Added tokens in a byte trie, matched leftmost-longest like Hugging Face's Aho-Corasick automaton.
class AddedTokenMatcher {
 public:
  void add(std::string_view content, int32_t token_index) {
    if (content.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    first_bytes_.set(static_cast<unsigned char>(content[0]));
    std::size_t node = 0;
    for (const char c : content) {
      const auto byte = static_cast<unsigned char>(c);
      auto& children = nodes_[node].children;
      const auto it = std::find_if(children.begin(), children.end(), [&](const auto& e) { return e.first == byte; });
      if (it != children.end()) {
        node = it->second;
      } else {
        const auto child = static_cast<uint32_t>(nodes_.size());
        nodes_[node].children.emplace_back(byte, child);
        nodes_.emplace_back();
        node = child;
      }
    }
    nodes_[node].token_index = token_index;
  }
  bool empty() const { return nodes_.empty(); }

  struct Match {
    std::size_t end = 0;
    int32_t token_index = -1;
  };
  /// Longest token starting at text[pos], if any.
  Match longest_at(std::string_view text, std::size_t pos) const {
    Match best;
    if (!first_bytes_.test(static_cast<unsigned char>(text[pos]))) return best;
    std::size_t node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
      const auto byte = static_cast<unsigned char>(text[i]);
      const auto& children = nodes_[node].children;
      const auto it = std::find_if(children.begin(), children.end(), [&](const auto& e) { return e.first == byte; });
      if (it == children.end()) break;
      node = it->second;
      if (nodes_[node].token_index >= 0) best = Match{i + 1, nodes_[node].token_index};
    }
    return best;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> children;
    int32_t token_index = -1;
  };
  std::vector<Node> nodes_;
  std::bitset<256> first_bytes_;
};

struct Merge {
  uint32_t rank = 0;
  int32_t result = 0;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

/// Merge rules keyed by (left id, right id): open addressing with linear probing in a power-of-two table at most
/// half full. The lookup is the inner loop of BPE; std::unordered_map's node chasing made it 3x slower.
class MergeTable {
 public:
  void reserve(std::size_t count) {
    std::size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }
  /// Inserts or replaces (later duplicates win, as in Hugging Face's HashMap collect).
  void insert_or_assign(uint64_t key, Merge merge) {
    for (std::size_t i = index(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty || slots_[i].key == key) {
        slots_[i] = Slot{key, merge};
        return;
      }
    }
  }
  const Merge* find(uint64_t key) const {
    for (std::size_t i = index(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are below 2^31, so no real key has all bits set
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge;
  };
  std::size_t index(uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
};

/// BPE results of pieces seen before on one thread (see thread_workspace): open addressing on a
/// 64-bit hash of the piece, with the piece's bytes and ids kept in two arenas (no allocation per entry).
class PieceCache {
 public:
  static constexpr std::size_t kMaxPieceBytes = 256;
  static constexpr std::size_t kMaxEntries = std::size_t{1} << 16;

  /// The cached ids of `piece`, or an empty span when it is not cached.
  std::span<const int32_t> find(std::string_view piece) const {
    if (slots_.empty()) return {};
    const uint64_t hash = hash_of(piece);
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.id_count == 0) return {};
      if (slot.hash == hash && std::string_view(bytes_).substr(slot.bytes_offset, slot.bytes_size) == piece) {
        return std::span<const int32_t>(ids_).subspan(slot.ids_offset, slot.id_count);
      }
    }
  }
  void insert(std::string_view piece, std::span<const int32_t> ids) {
    if (piece.size() > kMaxPieceBytes || entries_ >= kMaxEntries || ids.empty()) return;
    if (2 * (entries_ + 1) > slots_.size()) grow();
    const uint64_t hash = hash_of(piece);
    std::size_t i = hash & mask_;
    while (slots_[i].id_count != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{hash, static_cast<uint32_t>(bytes_.size()), static_cast<uint32_t>(piece.size()),
                     static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(ids.size())};
    bytes_.append(piece);
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    ++entries_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t bytes_offset = 0;
    uint32_t bytes_size = 0;
    uint32_t ids_offset = 0;
    uint32_t id_count = 0;  // 0: empty slot (a cached piece has at least one id)
  };
  static uint64_t hash_of(std::string_view piece) { return std::hash<std::string_view>{}(piece); }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 1024 : 2 * old.size(), Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.id_count == 0) continue;
      std::size_t i = slot.hash & mask_;
      while (slots_[i].id_count != 0) i = (i + 1) & mask_;
      slots_[i] = slot;
    }
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t entries_ = 0;
  std::string bytes_;
  std::vector<int32_t> ids_;
};

/// Per-thread scratch space: reused buffers and the piece cache.
struct Workspace {
  uint64_t owner = 0;  // Tokenizer::Impl::instance of the tokenizer the cache belongs to (0: none)
  MatchData match_data;
  std::vector<std::string_view> pieces, next_pieces;
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t left;
    int32_t right;
    int32_t result;
    bool operator>(const Candidate& other) const { return rank != other.rank ? rank > other.rank : pos > other.pos; }
  };
  std::vector<Candidate> heap;
  PieceCache cache;
};

}  // namespace

struct Tokenizer::Impl {
  /// Unique per loaded tokenizer, never reused (unlike addresses): names the owner of a thread's piece cache.
  uint64_t instance = next_instance();
  std::string source;
  // Vocabulary: spelling and bytes per id (added tokens included); holes (unused ids) have present = false.
  std::vector<std::string> spelling;
  std::vector<std::string> bytes;
  std::vector<uint8_t> present;
  std::vector<uint8_t> special;
  StringMap added_to_id;             // added tokens by content
  StringMap unusual_spelling_to_id;  // model tokens whose spelling has characters that stand for no byte
  // BPE model.
  StringMap bytes_to_id;  // model tokens by the bytes they stand for
  std::array<int32_t, 256> byte_id{};
  MergeTable merges;
  bool ignore_merges = false;
  // Normalizer, added tokens, pre-tokenizer, post-processor.
  std::vector<detail::NormalizationForm> normalizers;
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_added, normalized_added;
  bool add_prefix_space = false;
  std::vector<SplitStep> splits;
  std::vector<int32_t> prefix_ids, suffix_ids;
  // From tokenizer_config.json (from_pretrained).
  SpecialTokenIds special_ids;
  std::optional<ChatTemplate> chat;
  std::string chat_missing_reason = "no chat template: the tokenizer was not loaded with from_pretrained";

  void encode_text(std::string_view text, const EncodeOptions& options, Workspace& ws, std::vector<int32_t>& out) const;
  void split_added(std::string_view text, const AddedTokenMatcher& matcher, bool split_special,
                   const std::function<void(std::string_view)>& on_text, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, Workspace& ws, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, Workspace& ws, std::vector<int32_t>& out) const;
  void merge_piece(std::string_view piece, Workspace& ws, std::vector<int32_t>& out) const;
  MatchData make_match_data() const { return MatchData(pcre2_match_data_create(16, nullptr)); }
  /// Id of a token given in its spelling: added tokens first, as Hugging Face's token_to_id.
  std::optional<int32_t> token_to_id(std::string_view spelling) const {
    if (const auto it = added_to_id.find(spelling); it != added_to_id.end()) return it->second;
    std::string scratch;
    return find_model_token(spelling, scratch);
  }
  /// Id of a model vocabulary token given in its spelling; `scratch` is a buffer for its bytes.
  std::optional<int32_t> find_model_token(std::string_view spelling, std::string& scratch) const {
    const bool byte_level = byte_level_decode(spelling, scratch);
    const StringMap& map = byte_level ? bytes_to_id : unusual_spelling_to_id;
    const auto it = map.find(byte_level ? std::string_view(scratch) : spelling);
    if (it == map.end()) return std::nullopt;
    return it->second;
  }
  static uint64_t next_instance() {
    static std::atomic<uint64_t> counter{0};
    return ++counter;
  }
  bool has_id(int32_t id) const { return id >= 0 && static_cast<std::size_t>(id) < present.size() && present[id]; }
  void check_id(int32_t id) const {
    GRPO_CHECK(has_id(id),
               "token id {} is not in the vocabulary of {} (vocab_size {})", id, source, present.size());
  }
};

namespace {

void set_token(Tokenizer::Impl& impl, int32_t id, std::string spelling, std::string bytes) {
  const auto index = static_cast<std::size_t>(id);
  if (index >= impl.spelling.size()) {
    impl.spelling.resize(index + 1);
    impl.bytes.resize(index + 1);
    impl.present.resize(index + 1, 0);
    impl.special.resize(index + 1, 0);
  }
  impl.spelling[index] = std::move(spelling);
  impl.bytes[index] = std::move(bytes);
  impl.present[index] = 1;
}

void read_model(Tokenizer::Impl& impl, const JsonField& model) {
  if (const auto type = model.find("type"); type && type->string() != "BPE") {
    ::grpo::detail::throw_formatted<ConfigError>("{}: model type '{}' is not supported (only byte-level BPE)",
                                                 impl.source, type->string());
  }
  if (const auto dropout = model.find("dropout")) {
    ::grpo::detail::throw_formatted<ConfigError>("{}: BPE dropout is not supported", impl.source);
  }
  GRPO_CHECK_CONFIG(!model.boolean_or("byte_fallback", false), "{}: BPE byte_fallback is not supported", impl.source);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto affix = model.find(key);
    GRPO_CHECK_CONFIG(!affix || affix->string().empty(), "{}: BPE {} '{}' is not supported", impl.source, key,
                      affix ? affix->string() : "");
  }
  impl.ignore_merges = model.boolean_or("ignore_merges", false);

  // The field path of an entry is only built for an error message: 150k strings would double the load time.
  const auto vocab = model.at("vocab").object();
  impl.bytes_to_id.reserve(vocab.size());
  std::string raw;
  for (const auto [key, value] : vocab) {
    int64_t id = 0;
    if (value.get_int64().get(id) || id < 0 || id >= (int64_t{1} << 31)) {
      JsonField{value, impl.source, "model.vocab." + std::string(key)}.fail("an id in [0, 2^31)");
    }
    if (byte_level_decode(key, raw)) {
      impl.bytes_to_id.emplace(raw, static_cast<int32_t>(id));
      set_token(impl, static_cast<int32_t>(id), std::string(key), raw);
    } else {
      // A spelling outside the byte alphabet cannot come out of BPE; its decoder bytes are its own UTF-8.
      impl.unusual_spelling_to_id.emplace(std::string(key), static_cast<int32_t>(id));
      set_token(impl, static_cast<int32_t>(id), std::string(key), std::string(key));
    }
  }
  // A byte without a token (SmolLM2 has none for 21 bytes, such as 0x04 and 0xF5) is dropped from the text, as
  // Hugging Face's BPE does without an unk_token and llama.cpp does too.
  for (int b = 0; b < 256; ++b) {
    const auto it = impl.bytes_to_id.find(std::string(1, static_cast<char>(b)));
    impl.byte_id[b] = it != impl.bytes_to_id.end() ? it->second : -1;
  }

  const JsonField merges = model.at("merges");
  const auto merge_list = merges.array();
  impl.merges.reserve(merge_list.size());
  std::size_t rank = 0;
  std::string joined;
  for (const auto item : merge_list) {
    std::string_view left, right;
    std::string_view both;
    simdjson::dom::array parts;
    if (!item.get_string().get(both)) {  // "left right" (older files)
      const auto space = both.find(' ');
      if (space == std::string_view::npos || both.find(' ', space + 1) != std::string_view::npos) {
        merges.element(item, rank).fail("two tokens separated by one space");
      }
      left = both.substr(0, space);
      right = both.substr(space + 1);
    } else if (item.get_array().get(parts) || parts.size() != 2 || parts.at(0).get_string().get(left) ||
               parts.at(1).get_string().get(right)) {  // ["left", "right"]
      merges.element(item, rank).fail("a pair of token strings");
    }
    const auto left_id = impl.find_model_token(left, raw);
    const auto right_id = impl.find_model_token(right, raw);
    joined.assign(left).append(right);
    const auto result_id = impl.find_model_token(joined, raw);
    if (!left_id || !right_id || !result_id) {
      ::grpo::detail::throw_formatted<ParseError>("{}: merge {} ('{}' '{}') uses a token missing from the vocabulary",
                                                  impl.source, rank, left, right);
    }
    impl.merges.insert_or_assign(pair_key(*left_id, *right_id), Merge{static_cast<uint32_t>(rank), *result_id});
    ++rank;
  }
}

void read_added_tokens(Tokenizer::Impl& impl, const JsonField& root) {
  const auto list = root.find("added_tokens");
  if (!list) return;
  std::size_t index = 0;
  for (const auto item : list->array()) {
    const JsonField entry = list->element(item, index++);
    AddedToken token;
    token.id = static_cast<int32_t>(entry.at("id").integer());
    token.content = std::string(entry.at("content").string());
    token.special = entry.boolean_or("special", false);
    token.single_word = entry.boolean_or("single_word", false);
    token.lstrip = entry.boolean_or("lstrip", false);
    token.rstrip = entry.boolean_or("rstrip", false);
    token.normalized = entry.boolean_or("normalized", !token.special);
    GRPO_CHECK(token.id >= 0, "{}: {}.id is negative", impl.source, entry.path);
    // The ByteLevel decoder maps a token's characters back to bytes when all of them are byte stand-ins.
    std::string raw;
    set_token(impl, token.id, token.content, byte_level_decode(token.content, raw) ? raw : token.content);
    impl.special[static_cast<std::size_t>(token.id)] = token.special ? 1 : 0;
    impl.added_to_id.insert_or_assign(token.content, token.id);
    impl.added.push_back(std::move(token));
  }
}

void read_normalizer(Tokenizer::Impl& impl, const JsonField& normalizer) {
  const std::string_view type = normalizer.at("type").string();
  if (type == "Sequence") {
    const JsonField list = normalizer.at("normalizers");
    std::size_t index = 0;
    for (const auto item : list.array()) read_normalizer(impl, list.element(item, index++));
    return;
  }
  if (type == "NFC") {
    impl.normalizers.push_back(detail::NormalizationForm::nfc);
  } else if (type == "NFD") {
    impl.normalizers.push_back(detail::NormalizationForm::nfd);
  } else if (type == "NFKC") {
    impl.normalizers.push_back(detail::NormalizationForm::nfkc);
  } else if (type == "NFKD") {
    impl.normalizers.push_back(detail::NormalizationForm::nfkd);
  } else {
    ::grpo::detail::throw_formatted<ConfigError>(
        "{}: normalizer type '{}' is not supported (NFC, NFD, NFKC, NFKD, Sequence)", impl.source, type);
  }
}

/// Reads one pre-tokenizer; returns whether it was (or contained) a ByteLevel step.
bool read_pre_tokenizer(Tokenizer::Impl& impl, const JsonField& pre) {
  const std::string_view type = pre.at("type").string();
  if (type == "Sequence") {
    const JsonField list = pre.at("pretokenizers");
    bool byte_level = false;
    std::size_t index = 0;
    for (const auto item : list.array())
      byte_level = read_pre_tokenizer(impl, list.element(item, index++)) || byte_level;
    return byte_level;
  }
  if (type == "ByteLevel") {
    if (pre.boolean_or("add_prefix_space", false)) {
      // The prefix space goes in front of every piece reaching this step; supported when no split precedes it.
      GRPO_CHECK_CONFIG(impl.splits.empty(),
                        "{}: ByteLevel add_prefix_space after a Split pre-tokenizer is not supported", impl.source);
      impl.add_prefix_space = true;
    }
    if (pre.boolean_or("use_regex", true)) {
      impl.splits.push_back(SplitStep{compile_pattern(kGpt2Pattern, false, impl.source), true, true});
    }
    return true;
  }
  if (type == "Digits") {
    // Hugging Face's Digits splits on Rust's char::is_numeric (Unicode N*): each digit alone, or runs of them.
    const bool individual = pre.boolean_or("individual_digits", false);
    impl.splits.push_back(SplitStep{compile_pattern(individual ? R"(\p{N})" : R"(\p{N}+)", false, impl.source), true, true});
    return false;
  }
  if (type == "Split") {
    const JsonField pattern = pre.at("pattern");
    const auto regex = pattern.find("Regex");
    const auto literal = pattern.find("String");
    if (!regex && !literal) pattern.fail("{\"Regex\": ...} or {\"String\": ...}");
    SplitStep step;
    step.code = compile_pattern(regex ? regex->string() : literal->string(), !regex, impl.source);
    const std::string_view behavior = pre.at("behavior").string();
    const bool invert = pre.boolean_or("invert", false);
    if (behavior == "Removed") {
      step.keep_matches = invert;
      step.keep_gaps = !invert;
    } else if (behavior != "Isolated") {
      ::grpo::detail::throw_formatted<ConfigError>("{}: Split behavior '{}' is not supported (Isolated, Removed)",
                                                   impl.source, behavior);
    }
    impl.splits.push_back(std::move(step));
    return false;
  }
  ::grpo::detail::throw_formatted<ConfigError>(
      "{}: pre-tokenizer type '{}' is not supported (Split, Digits, ByteLevel, Sequence)", impl.source, type);
}

void read_post_processor(Tokenizer::Impl& impl, const JsonField& post) {
  const std::string_view type = post.at("type").string();
  if (type == "Sequence") {
    const JsonField list = post.at("processors");
    std::size_t index = 0;
    for (const auto item : list.array()) read_post_processor(impl, list.element(item, index++));
    return;
  }
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type != "TemplateProcessing") {
    ::grpo::detail::throw_formatted<ConfigError>(
        "{}: post-processor type '{}' is not supported (ByteLevel, TemplateProcessing, Sequence)", impl.source, type);
  }
  GRPO_CHECK_CONFIG(impl.prefix_ids.empty() && impl.suffix_ids.empty(),
                    "{}: more than one TemplateProcessing post-processor", impl.source);
  const JsonField single = post.at("single");
  const JsonField specials = post.at("special_tokens");
  bool seen_sequence = false;
  std::size_t index = 0;
  for (const auto item : single.array()) {
    const JsonField piece = single.element(item, index++);
    if (piece.find("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string_view name = piece.at("SpecialToken").at("id").string();
    const auto special = specials.find(name);
    if (!special) specials.fail(fmt::format("an object with an entry for '{}'", name));
    const JsonField ids = special->at("ids");
    std::size_t id_index = 0;
    for (const auto id : ids.array()) {
      const auto value = static_cast<int32_t>(ids.element(id, id_index++).integer());
      (seen_sequence ? impl.suffix_ids : impl.prefix_ids).push_back(value);
    }
  }
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

namespace {

std::shared_ptr<Tokenizer::Impl> read_tokenizer(simdjson::padded_string& json, std::string_view source) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->source = std::string(source);
  simdjson::dom::parser parser;
  const JsonField root = detail::parse_json(parser, json, impl->source);
  read_model(*impl, root.at("model"));
  read_added_tokens(*impl, root);
  for (const auto& token : impl->added) {
    auto& matcher = token.normalized ? impl->normalized_added : impl->raw_added;
    matcher.add(token.content, static_cast<int32_t>(&token - impl->added.data()));
  }
  if (const auto normalizer = root.find("normalizer")) read_normalizer(*impl, *normalizer);
  if (!impl->normalizers.empty()) {
    // Tokens matched after normalization are matched in their normalized spelling.
    AddedTokenMatcher normalized;
    for (const auto& token : impl->added) {
      if (!token.normalized) continue;
      std::string content = token.content;
      for (const auto form : impl->normalizers) content = detail::normalize(content, form);
      normalized.add(content, static_cast<int32_t>(&token - impl->added.data()));
    }
    impl->normalized_added = std::move(normalized);
  }
  const auto pre = root.find("pre_tokenizer");
  GRPO_CHECK_CONFIG(pre && read_pre_tokenizer(*impl, *pre),
                    "{}: the pre-tokenizer has no ByteLevel step; only byte-level BPE is supported", impl->source);
  if (const auto post = root.find("post_processor")) read_post_processor(*impl, *post);
  const auto decoder = root.find("decoder");
  GRPO_CHECK_CONFIG(decoder && decoder->at("type").string() == "ByteLevel",
                    "{}: decoder must be ByteLevel (found '{}')", impl->source,
                    decoder ? decoder->at("type").string() : "null");
  for (const int32_t id : impl->prefix_ids) impl->check_id(id);
  for (const int32_t id : impl->suffix_ids) impl->check_id(id);
  return impl;
}

/// Special token ids and chat template from tokenizer_config.json's text; `source` names it in errors.
void read_tokenizer_config(Tokenizer::Impl& impl, std::string_view json_text, const std::string& source) {
  simdjson::padded_string json(json_text);
  simdjson::dom::parser parser;
  const JsonField root = detail::parse_json(parser, json, source);
  const auto special_id = [&](std::string_view key) -> std::optional<int32_t> {
    const auto field = root.find(key);
    if (!field || field->is_null()) return std::nullopt;
    const std::string_view content = field->value.is_string() ? field->string() : field->at("content").string();
    const auto id = impl.token_to_id(content);
    if (!id) {
      ::grpo::detail::throw_formatted<ParseError>("{}: {} '{}' is not a token of {}", source, key, content,
                                                  impl.source);
    }
    return id;
  };
  impl.special_ids = SpecialTokenIds{special_id("bos_token"), special_id("eos_token"), special_id("pad_token")};
  if (!root.find("chat_template")) {
    impl.chat_missing_reason = fmt::format("no chat template: {} has no chat_template", source);
    return;
  }
  try {
    impl.chat = ChatTemplate::from_tokenizer_config_json(json_text, source);
  } catch (const ConfigError& unsupported) {
    impl.chat_missing_reason = unsupported.what();
  }
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  simdjson::padded_string json = detail::load_json_file(tokenizer_json);
  return Tokenizer(read_tokenizer(json, tokenizer_json.string()));
}

Tokenizer Tokenizer::from_json(std::string_view json, std::string_view source) {
  simdjson::padded_string padded(json);
  return Tokenizer(read_tokenizer(padded, source));
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                               std::string_view source) {
  simdjson::padded_string padded(tokenizer_json);
  auto impl = read_tokenizer(padded, source);
  read_tokenizer_config(*impl, tokenizer_config_json, fmt::format("{} (tokenizer_config)", source));
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_pretrained(const std::filesystem::path& dir) {
  if (dir.extension() == ".gguf" && std::filesystem::is_regular_file(dir)) return gguf_tokenizer(io::GgufFile(dir));
  simdjson::padded_string json = detail::load_json_file(dir / "tokenizer.json");
  auto impl = read_tokenizer(json, (dir / "tokenizer.json").string());
  const std::filesystem::path config = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    const simdjson::padded_string text = detail::load_json_file(config);
    read_tokenizer_config(*impl, std::string_view(text.data(), text.size()), config.string());
  } else {
    impl->chat_missing_reason = fmt::format("no chat template: {} does not exist", config.string());
  }
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::split_added(std::string_view text, const AddedTokenMatcher& matcher, bool split_special,
                                  const std::function<void(std::string_view)>& on_text,
                                  std::vector<int32_t>& out) const {
  if (matcher.empty()) {
    on_text(text);
    return;
  }
  std::size_t emitted = 0;  // end of what has been handed on
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto match = matcher.longest_at(text, pos);
    if (match.token_index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = added[static_cast<std::size_t>(match.token_index)];
    std::size_t start = pos;
    std::size_t stop = match.end;
    pos = match.end;  // matches never overlap, skipped ones included (Aho-Corasick's non-overlapping iterator)
    if (split_special && token.special) continue;
    if (token.single_word) {
      std::size_t before = start;
      std::size_t after = stop;
      const bool word_before = start > 0 && detail::is_word_character(detail::previous_code_point(text, before));
      const bool word_after = stop < text.size() && detail::is_word_character(detail::next_code_point(text, after));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      std::size_t cursor = start;
      while (cursor > emitted) {
        std::size_t previous = cursor;
        if (!detail::is_white_space(detail::previous_code_point(text, previous))) break;
        cursor = previous;
      }
      start = cursor;
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        std::size_t next = stop;
        if (!detail::is_white_space(detail::next_code_point(text, next))) break;
        stop = next;
      }
      pos = stop;
    }
    if (emitted < start) on_text(text.substr(emitted, start - emitted));
    out.push_back(token.id);
    emitted = stop;
  }
  if (emitted < text.size()) on_text(text.substr(emitted));
}

void Tokenizer::Impl::encode_text(std::string_view text, const EncodeOptions& options, Workspace& ws,
                                  std::vector<int32_t>& out) const {
  std::string repaired;
  if (const std::size_t bad = detail::find_invalid_utf8(text); bad != std::string_view::npos) {
    GRPO_CHECK(options.invalid_utf8 == InvalidUtf8::replace,
               "text to encode is not valid UTF-8: ill-formed sequence at byte {} (byte 0x{:02X})", bad,
               static_cast<unsigned char>(text[bad]));
    repaired = detail::replace_invalid_utf8(text);
    text = repaired;
  }
  if (!ws.match_data) ws.match_data = make_match_data();
  if (options.add_special_tokens) out.insert(out.end(), prefix_ids.begin(), prefix_ids.end());
  split_added(
      text, raw_added, options.split_special_tokens,
      [&](std::string_view segment) {
        std::string normalized;
        if (!normalizers.empty()) {
          normalized = segment;
          for (const auto form : normalizers) normalized = detail::normalize(normalized, form);
          segment = normalized;
        }
        // Tokens marked normalized (GPT-2's <|endoftext|>) are matched here, with or without a normalizer.
        split_added(
            segment, normalized_added, options.split_special_tokens,
            [&](std::string_view piece) { encode_normalized(piece, ws, out); }, out);
      },
      out);
  if (options.add_special_tokens) out.insert(out.end(), suffix_ids.begin(), suffix_ids.end());
}

void Tokenizer::Impl::encode_normalized(std::string_view text, Workspace& ws, std::vector<int32_t>& out) const {
  std::string prefixed;
  if (add_prefix_space && !text.starts_with(' ')) {
    prefixed = " ";
    prefixed += text;
    text = prefixed;
  }
  ws.pieces.assign(1, text);
  for (const SplitStep& step : splits) {
    ws.next_pieces.clear();
    for (const std::string_view piece : ws.pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      std::size_t gap_start = 0;
      std::size_t offset = 0;
      while (offset <= piece.size()) {
        const int rc = pcre2_match(step.code.get(), subject, piece.size(), offset, PCRE2_NO_UTF_CHECK,
                                   ws.match_data.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        GRPO_CHECK(rc >= 0, "pre-tokenizer pattern failed with PCRE2 error {}", rc);
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(ws.match_data.get());
        const std::size_t start = ovector[0];
        const std::size_t end = ovector[1];
        if (step.keep_gaps && start > gap_start) ws.next_pieces.push_back(piece.substr(gap_start, start - gap_start));
        if (step.keep_matches && end > start) ws.next_pieces.push_back(piece.substr(start, end - start));
        gap_start = end;
        if (end > start) {
          offset = end;
        } else {  // an empty match only splits; step over one character
          if (end >= piece.size()) break;
          std::size_t next = end;
          detail::next_code_point(piece, next);
          offset = next;
        }
      }
      if (step.keep_gaps && gap_start < piece.size()) ws.next_pieces.push_back(piece.substr(gap_start));
    }
    std::swap(ws.pieces, ws.next_pieces);
  }
  for (const std::string_view piece : ws.pieces) encode_piece(piece, ws, out);
}

void Tokenizer::Impl::encode_piece(std::string_view piece, Workspace& ws, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    if (const int32_t id = byte_id[static_cast<unsigned char>(piece[0])]; id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges) {
    if (const auto it = bytes_to_id.find(piece); it != bytes_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (const auto cached = ws.cache.find(piece); !cached.empty()) {
    out.insert(out.end(), cached.begin(), cached.end());
    return;
  }
  const std::size_t first = out.size();
  merge_piece(piece, ws, out);
  ws.cache.insert(piece, std::span<const int32_t>(out).subspan(first));
}

void Tokenizer::Impl::merge_piece(std::string_view piece, Workspace& ws, std::vector<int32_t>& out) const {
  // Symbols form a linked list over the piece's bytes; a min-heap holds candidate merges ordered by
  // (rank, position). A popped candidate is stale when either symbol has changed since it was pushed.
  auto& symbols = ws.symbols;
  auto& heap = ws.heap;
  // Bytes without a token are left out, so the bytes around them are neighbours (Hugging Face's merge_word).
  symbols.clear();
  for (const char c : piece) {
    const int32_t id = byte_id[static_cast<unsigned char>(c)];
    if (id >= 0) symbols.push_back({id, static_cast<int32_t>(symbols.size()) - 1, -1});
  }
  const auto n = static_cast<int32_t>(symbols.size());
  if (n == 0) return;
  for (int32_t i = 0; i + 1 < n; ++i) symbols[i].next = i + 1;
  heap.clear();
  const auto push = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const Merge* merge = merges.find(pair_key(symbols[pos].id, symbols[next].id));
    if (merge == nullptr) return;
    heap.push_back({merge->rank, pos, symbols[pos].id, symbols[next].id, merge->result});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const auto candidate = heap.back();
    heap.pop_back();
    auto& left = symbols[candidate.pos];
    if (left.id != candidate.left || left.next < 0 || symbols[left.next].id != candidate.right) continue;
    const int32_t removed = left.next;
    left.id = candidate.result;
    left.next = symbols[removed].next;
    if (left.next >= 0) symbols[left.next].prev = candidate.pos;
    symbols[removed].id = -1;
    if (left.prev >= 0) push(left.prev);
    push(candidate.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

namespace {

/// The calling thread's workspace for `impl`, kept across calls: its piece cache plays the part of Hugging Face's
/// BPE word cache (which lives as long as the model), so short texts sharing words skip the merges. A thread
/// moving to another tokenizer starts afresh. Memory stays bounded by PieceCache's limits.
Workspace& thread_workspace(const Tokenizer::Impl& impl) {
  thread_local Workspace ws;
  if (ws.owner != impl.instance) {
    ws = Workspace{};
    ws.owner = impl.instance;
  }
  return ws;
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  Workspace& ws = thread_workspace(*impl_);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  impl_->encode_text(text, options, ws, out);
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string> texts,
                                                          const EncodeOptions& options, int num_threads) const {
  GRPO_CHECK_CONFIG(num_threads >= 0, "encode_batch: num_threads must be >= 0 (0: hardware concurrency), got {}",
                    num_threads);
  std::vector<std::vector<int32_t>> out(texts.size());
  std::size_t threads = num_threads > 0 ? static_cast<std::size_t>(num_threads)
                                        : std::max<std::size_t>(1, std::thread::hardware_concurrency());
  threads = std::min(threads, texts.size());
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto work = [&](Workspace& ws) {
    for (std::size_t i = next++; i < texts.size(); i = next++) {
      try {
        impl_->encode_text(texts[i], options, ws, out[i]);
      } catch (...) {
        const std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = texts.size();
      }
    }
  };
  // The calling thread works too, with its warm piece cache; the helpers (new threads) start from a copy of it.
  Workspace& own = thread_workspace(*impl_);
  if (threads > 1) {
    const PieceCache warm = own.cache;
    std::vector<std::jthread> helpers;
    for (std::size_t t = 1; t < threads; ++t) {
      helpers.emplace_back([&] {
        Workspace& ws = thread_workspace(*impl_);
        ws.cache = warm;
        work(ws);
      });
    }
    work(own);
  } else {
    work(own);
  }
  if (failure) std::rethrow_exception(failure);
  return out;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string out;
  for (const int32_t id : ids) {
    if (options.skip_unknown_ids && !impl_->has_id(id)) continue;
    impl_->check_id(id);
    if (options.skip_special_tokens && impl_->special[static_cast<std::size_t>(id)]) continue;
    out += impl_->bytes[static_cast<std::size_t>(id)];
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string raw = decode_bytes(ids, options);
  if (detail::find_invalid_utf8(raw) == std::string_view::npos) return raw;
  return detail::replace_invalid_utf8(raw);
}

std::vector<std::string> Tokenizer::decode_batch(std::span<const std::vector<int32_t>> ids,
                                                 const DecodeOptions& options) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const auto& row : ids) out.push_back(decode(row, options));
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }

const std::string& Tokenizer::id_to_token(int32_t id) const {
  impl_->check_id(id);
  return impl_->spelling[static_cast<std::size_t>(id)];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->present.size()); }

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

const SpecialTokenIds& Tokenizer::special_token_ids() const { return impl_->special_ids; }

const ChatTemplate& Tokenizer::chat_template() const {
  GRPO_CHECK_CONFIG(impl_->chat.has_value(), "{}", impl_->chat_missing_reason);
  return *impl_->chat;
}

std::vector<int32_t> Tokenizer::encode_chat(std::span<const ChatMessage> messages,
                                            const ChatRenderOptions& options) const {
  EncodeOptions encode_options;
  encode_options.add_special_tokens = false;
  return encode(chat_template().render(messages, options), encode_options);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->special.size() && impl_->special[id] != 0;
}

}  // namespace grpo::text
